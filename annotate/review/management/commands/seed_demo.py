import json

import yaml
from django.core.management.base import BaseCommand, CommandError

from annotate.review import services
from annotate.review.criteria import criteria_parse
from annotate.review.demo_data import DEMO_CRITERIA, demo_items
from annotate.review.importing import items_parse

DEMO_USERS = [("reviewer", "reviewer"), ("reviewer2", "reviewer"), ("reviewer3", "reviewer"),
              ("adjudicator", "adjudicator"), ("engineer", "engineer"), ("admin", "admin")]
# The second demo project shows the reviewer quality loop: a qualification round on the demo's gold items
# (with feedback), gold checks mixed into live work, and adaptive overlap. The first keeps none of it, so a
# reviewer goes straight to judging there.
ONBOARDING_SETTINGS = {"qualification_items": 2, "qualification_pass_mark": 0.5, "qualification_attempts": 2,
                       "gold_rate": 0.1, "min_overlap": 2, "max_overlap": 3}


class Command(BaseCommand):
    help = ("Load the demo projects (criteria, 30 prompts with answer pairs; one with a qualification round) and "
            "demo accounts; prints their passwords.")

    def add_arguments(self, parser):
        parser.add_argument("--prompts", type=int, default=30)

    def handle(self, *args, prompts, **options):
        instructions, items = criteria_parse(yaml.safe_dump(DEMO_CRITERIA), source="demo criteria")
        for slug, name, settings in [("demo", "Average speed (demo)", {}),
                                     ("demo-onboarding", "Average speed (onboarding demo)", ONBOARDING_SETTINGS)]:
            try:
                project, _, _ = services.project_create_or_update(
                    slug=slug, name=name, instructions=instructions, criteria_items=items, **settings
                )
            except services.ReviewError as exc:  # e.g. too few prompts (--prompts) to carry the round's gold
                raise CommandError(f"project {slug}: {exc}") from None
            # Through the same parser and import as a user's file.
            parsed = items_parse(json.dumps(row) for row in demo_items(count=prompts))
            summary = services.items_import(project=project, items=parsed)
            self.stdout.write(f"project {slug}: {summary.prompts_created} new prompt(s), "
                              f"{summary.pairs_created} new pair(s)")
        self.stdout.write("demo accounts (passwords are new each time this runs):")
        for username, role in DEMO_USERS:
            user, password, _ = services.user_add(username=username, role=role)
            if role == "admin":
                user.is_superuser = True
                user.save(update_fields=["is_superuser"])
            self.stdout.write(f"  {role:<11} {username:<11} {password}")

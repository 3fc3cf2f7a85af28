import json

import yaml
from django.core.management.base import BaseCommand

from annotate.review import services
from annotate.review.criteria import criteria_parse
from annotate.review.demo_data import DEMO_CRITERIA, demo_items
from annotate.review.importing import items_parse

DEMO_USERS = [("reviewer", "reviewer"), ("reviewer2", "reviewer"), ("reviewer3", "reviewer"),
              ("engineer", "engineer"), ("admin", "admin")]


class Command(BaseCommand):
    help = "Load the demo project (criteria, 30 prompts with answer pairs) and demo accounts; prints their passwords."

    def add_arguments(self, parser):
        parser.add_argument("--prompts", type=int, default=30)

    def handle(self, *args, prompts, **options):
        instructions, items = criteria_parse(yaml.safe_dump(DEMO_CRITERIA), source="demo criteria")
        project, _, _ = services.project_create_or_update(
            slug="demo", name="Average speed (demo)", instructions=instructions, criteria_items=items
        )
        # Through the same parser and import as a user's file.
        parsed = items_parse(json.dumps(row) for row in demo_items(count=prompts))
        summary = services.items_import(project=project, items=parsed)
        self.stdout.write(f"project demo: {summary.prompts_created} new prompt(s), {summary.pairs_created} new pair(s)")
        self.stdout.write("demo accounts (passwords are new each time this runs):")
        for username, role in DEMO_USERS:
            user, password, _ = services.user_add(username=username, role=role)
            if role == "admin":
                user.is_superuser = True
                user.save(update_fields=["is_superuser"])
            self.stdout.write(f"  {role:<9} {username:<10} {password}")

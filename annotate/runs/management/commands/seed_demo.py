import json
import random
import re
import uuid
from datetime import timedelta

import yaml
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from annotate.errors import UserMistake
from annotate.exports.filters import filters_parse
from annotate.exports.models import Export
from annotate.exports.services import export_create, export_run
from annotate.review.assignments import assignment_next
from annotate.review.criteria import criteria_parse
from annotate.review.demo_data import DEMO_CRITERIA, GOLD_EVERY, demo_items
from annotate.review.errors import ReviewError
from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.judgments import judgment_submit
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add

DEMO_USERS = [("reviewer", "reviewer"), ("reviewer2", "reviewer"), ("reviewer3", "reviewer"),
              ("adjudicator", "adjudicator"), ("engineer", "engineer"), ("admin", "admin")]
# The second demo project shows the reviewer quality loop: a qualification round on the demo's gold items
# (with feedback), gold checks mixed into live work, and adaptive overlap. The first keeps none of it, so a
# reviewer goes straight to judging there.
# Its round is 5 gold items, all to be right, in at most 2 attempts: a reviewer who picks sides at random passes
# 6.2% of the time (guess_pass_chance; 1 right of 2 would pass 94% of them).
ONBOARDING_SETTINGS = {"qualification_items": 5, "qualification_pass_mark": 1.0, "qualification_attempts": 2,
                       "gold_rate": 0.1, "min_overlap": 2, "max_overlap": 3}
ONBOARDING_GOLD_EVERY = 2  # 15 gold pairs in 30 prompts: 10 for the round's two attempts, the rest live checks


# A third project comes judged, by the three demo reviewers, and exported: an engineer can train on a snapshot
# the moment the demo starts. Each reviewer prefers the worked, right answer most of the time (seeded).
JUDGED_SLUG = "demo-judged"
# Enough prompts that its export's test split (a quarter, by prompt) holds over 30 pairs: held-out figures of a run
# trained on it are judged on enough pairs to mean something (with 30 prompts they were "too few to judge").
JUDGED_PROMPTS, JUDGED_TEST_RATIO = 200, 0.25
JUDGED_RIGHT_SHARE = {"reviewer": 0.9, "reviewer2": 0.85, "reviewer3": 0.8}
# One train and one held-out task set per task family (new numbers and wording), for GRPO and evaluations.
DEMO_TASKS = {"train": (50, 1), "heldout": (50, 2)}  # variant -> (tasks, seed)


def is_worked_answer(text: str) -> bool:
    """The demo's right answers: the worked speed answer, the sorted() code answer (demo_data.py)."""
    return text.startswith("Average speed is") or text.startswith("```python\ndef sort_numbers(xs):\n    return")


# Each demo reviewer writes in their own words, so the rationale checks see three people, not one text copied.
DEMO_RATIONALES = {
    "reviewer": ("The {side} one adds the two distances and divides by the whole time; {extra}.",
                 "On the {side}: total distance over total time, which is what average speed means; {extra}."),
    "reviewer2": ("I picked {side} because it never averages the two speeds, and {extra}.",
                  "{Side} works it out from the sums (km and hours) rather than guessing; {extra}."),
    "reviewer3": ("For a ten-year-old the {side} answer is the clearer one: {extra}.",
                  "Chose {side}. It names the rule before using it, so {extra}."),
}
DEMO_EXTRAS_RIGHT = ("each step is shown", "the unit is kept", "the arithmetic checks out",
                     "nothing is skipped", "it would survive a teacher's check")
DEMO_EXTRAS_WRONG = ("it reads more smoothly", "it is shorter", "the other one rambles", "it looks more certain")


def demo_rationale(username: str, *, prompt: str, choice: str, right: bool, rng: random.Random) -> str:
    """A rationale in the reviewer's own words about this prompt (its numbers), so no two pairs get the same text."""
    template = rng.choice(DEMO_RATIONALES.get(username, DEMO_RATIONALES["reviewer"]))
    extra = rng.choice(DEMO_EXTRAS_RIGHT if right else DEMO_EXTRAS_WRONG)
    numbers = re.findall(r"\d+", prompt)
    about = (f" ({numbers[0]} km and {numbers[1]} km in {numbers[2]} h)" if len(numbers) >= 3
             else " (sorted() leaves the input list alone)")
    return template.format(side=choice, Side=choice.capitalize(), extra=extra).rstrip(".") + about + "."


def judge_demo_project(project, reviewers: list, *, seed: int = 0) -> int:
    """Each reviewer judges every pair left for them, through the same service as the reviewer page."""
    judged, clock = 0, timezone.now() - timedelta(hours=2)
    for reviewer in reviewers:
        rng = random.Random(f"{seed}:{reviewer.username}")
        right_share = JUDGED_RIGHT_SHARE.get(reviewer.username, 0.8)
        while (assignment := assignment_next(project=project, reviewer=reviewer, now=clock)) is not None:
            pair = assignment.pair
            a_right = is_worked_answer(pair.response_a.text)
            picks_a = a_right if rng.random() < right_share else not a_right
            choice = "left" if picks_a == assignment.a_on_left else "right"
            # A pair served earlier (on the reviewer's page) is judged after it was served, not on the demo's clock.
            clock = max(clock, assignment.served_at or clock) + timedelta(seconds=rng.randint(25, 90))
            judgment_submit(
                assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=rng.choice([1, 2, 3]),
                criteria={"correct": choice, "complete": choice if rng.random() < 0.7 else "tie"},
                rationale=demo_rationale(reviewer.username, prompt=pair.prompt.messages[-1]["content"], choice=choice,
                                         right=picks_a == a_right, rng=rng),
                client_key=uuid.uuid4(), now=clock)
            judged += 1
    return judged


class Command(BaseCommand):
    help = ("Load the demo projects (criteria, 30 prompts with answer pairs; one with a qualification round; one "
            f"of {JUDGED_PROMPTS} prompts judged and exported), one train and one held-out task set per task family, the demo accounts (prints "
            "their passwords), and the demo checkpoint tiny-sft (shipped with Pairwise, checked against its manifest).")

    def add_arguments(self, parser):
        parser.add_argument("--prompts", type=int, default=30)
        parser.add_argument("--no-task-sets", action="store_true", help="skip the demo task sets")

    def handle(self, *args, prompts, no_task_sets, **options):
        accounts = []
        for username, role in DEMO_USERS:
            user, password, _ = user_add(username=username, role=role)
            if role == "admin":
                user.is_superuser = True
                user.save(update_fields=["is_superuser"])
            accounts.append((role, username, password, user))
        instructions, items = criteria_parse(yaml.safe_dump(DEMO_CRITERIA), source="demo criteria")
        for slug, name, settings in [("demo", "Average speed (demo)", {}),
                                     ("demo-onboarding", "Average speed (onboarding demo)", ONBOARDING_SETTINGS),
                                     (JUDGED_SLUG, "Average speed (judged and exported demo)", {})]:
            try:
                project, _, _ = project_create_or_update(
                    slug=slug, name=name, instructions=instructions, criteria_items=items, **settings
                )
            except ReviewError as exc:  # e.g. too few prompts (--prompts) to carry the round's gold
                raise CommandError(f"project {slug}: {exc}") from None
            # Through the same parser and import as a user's file.
            count = JUDGED_PROMPTS if slug == JUDGED_SLUG else prompts
            gold_every = ONBOARDING_GOLD_EVERY if settings else GOLD_EVERY
            parsed = items_parse(json.dumps(row) for row in demo_items(count=count, gold_every=gold_every))
            summary = items_import(project=project, items=parsed)
            self.stdout.write(f"project {slug}: {summary.prompts_created} new prompt(s), "
                              f"{summary.pairs_created} new pair(s)")
            if slug == JUDGED_SLUG:
                self._judge_and_export(project, [user for role, _, _, user in accounts if role == "reviewer"],
                                       admin=next(user for role, _, _, user in accounts if role == "admin"))
        if not no_task_sets:
            self._task_sets()
        self._demo_checkpoint(admin=next(user for role, _, _, user in accounts if role == "admin"))
        self.stdout.write("demo accounts (passwords are new each time this runs):")
        for role, username, password, _ in accounts:
            self.stdout.write(f"  {role:<11} {username:<11} {password}")

    def _judge_and_export(self, project, reviewers: list, *, admin) -> None:
        judged = judge_demo_project(project, reviewers)
        if project.exports.filter(status=Export.Status.DONE).exists():
            return
        export = export_create(project=project, filters=filters_parse({"test_ratio": JUDGED_TEST_RATIO}), created_by=admin, enqueue=False)
        export = export_run(export_id=export.pk, attempt=export.attempt, worker="seed_demo")
        if export.status != Export.Status.DONE:
            raise CommandError(f"project {project.slug}: the demo export failed: {export.error}")
        self.stdout.write(f"project {project.slug}: {judged} judgment(s) by the demo reviewers; export {export.pk} has "
                          f"{export.counts['train']} train and {export.counts['test']} test row(s)")

    def _demo_checkpoint(self, *, admin) -> None:
        from annotate.runs.demo_checkpoint import DEMO_CHECKPOINT, demo_checkpoint_install

        try:
            checkpoint = demo_checkpoint_install(registered_by=admin)
        except UserMistake as mistake:
            raise CommandError(f"demo checkpoint: {mistake}") from None
        if checkpoint is None:
            self.stdout.write(f"checkpoint {DEMO_CHECKPOINT}: registered already")
        else:
            self.stdout.write(f"checkpoint {checkpoint.name}: registered from the shipped files ({checkpoint.content_hash})")

    def _task_sets(self) -> None:
        from annotate.runs.models import TaskSet
        from annotate.runs.task_sets import task_sets_make
        from training.task_families import FAMILIES

        recipes = [{"families": [family], "variant": variant, "n": n, "seed": seed,
                    "name": f"{family} · {variant}"}
                   for family in sorted(FAMILIES) for variant, (n, seed) in DEMO_TASKS.items()]
        known = set(TaskSet.objects.values_list("name", flat=True))
        wanted = [recipe for recipe in recipes if recipe["name"] not in known]
        try:
            made = task_sets_make(wanted) if wanted else []
        except UserMistake as mistake:
            raise CommandError(f"demo task sets: {mistake}") from None
        self.stdout.write(f"task sets: {len(made)} new, {len(recipes) - len(wanted)} kept "
                          f"(a train and a held-out set per task family)")

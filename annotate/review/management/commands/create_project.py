from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate.review import services
from annotate.review.criteria import CriteriaRejected, criteria_parse


class Command(BaseCommand):
    help = "Create a project with its criteria, or load a new criteria version into an existing one."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", help="Display name (default: the slug).")
        parser.add_argument("--criteria", required=True, type=Path, help="YAML: instructions + criteria [{key, text}].")
        parser.add_argument("--overlap", type=int, help="Distinct reviewers per pair (default 3).")
        parser.add_argument("--retest", type=float, help="Share of judged pairs shown again, swapped (default 0.1).")
        parser.add_argument("--max-pairs-per-prompt", type=int, help="Cap on pairs per prompt (default: all).")
        parser.add_argument("--min-rationale", type=int, help="Minimum rationale length in characters (default 15).")

    def handle(self, *args, slug, name, criteria, overlap, retest, max_pairs_per_prompt, min_rationale, **options):
        if not criteria.is_file():
            raise CommandError(f"{criteria}: no such criteria file")
        try:
            instructions, items = criteria_parse(criteria.read_text(encoding="utf-8"), source=str(criteria))
            project, version, created = services.project_create_or_update(
                slug=slug, name=name, instructions=instructions, criteria_items=items, overlap=overlap,
                retest_rate=retest, max_pairs_per_prompt=max_pairs_per_prompt, min_rationale_chars=min_rationale,
            )
        except (CriteriaRejected, services.ReviewError) as exc:
            raise CommandError(str(exc)) from None
        verb = "created" if created else "updated"
        self.stdout.write(f"project {project.slug} {verb}; criteria version {version.version} ({len(items)} criteria)")

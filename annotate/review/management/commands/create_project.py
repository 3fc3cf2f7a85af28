from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate.review.criteria import CriteriaRejected, criteria_parse
from annotate.review.errors import ReviewError
from annotate.review.overlap import STOP_RULES
from annotate.review.projects import project_create_or_update


class Command(BaseCommand):
    help = "Create a project with its criteria, or load a new criteria version into an existing one."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name", help="Display name (default: the slug).")
        parser.add_argument("--criteria", required=True, type=Path, help="YAML: instructions + criteria [{key, text}].")
        parser.add_argument("--overlap", type=int, help="Distinct reviewers per pair, fixed (default 3).")
        parser.add_argument("--min-overlap", type=int,
                            help="Adaptive overlap: a pair whose votes are decided stops at this many reviewers.")
        parser.add_argument("--max-overlap", type=int,
                            help="Adaptive overlap: a pair still split gets at most this many reviewers.")
        parser.add_argument("--stop-rule", choices=STOP_RULES,
                            help="Adaptive overlap: when a pair is decided (default lead2; docs/design.md).")
        parser.add_argument("--leaderboard-priority", choices=["on", "off"],
                            help="Hand out first the pairs whose models' rating difference is least certain.")
        parser.add_argument("--retest", type=float, help="Share of judged pairs shown again, swapped (default 0.1).")
        parser.add_argument("--max-pairs-per-prompt", type=int, help="Cap on pairs per prompt (default: all).")
        parser.add_argument("--min-rationale", type=int, help="Minimum rationale length in characters (default 15).")
        parser.add_argument("--rationale-flag-chars", type=int,
                            help="A rationale shorter than this is kept but flagged too_short (default 40; 0: off).")
        parser.add_argument("--qualification-items", type=int,
                            help="Gold items a reviewer answers, with feedback, before live items (default 0: none).")
        parser.add_argument("--pass-mark", type=float, help="Share of the round's items to get right, 0-1 (default 0.8).")
        parser.add_argument("--qualification-attempts", type=int,
                            help="Attempts before a reviewer who fails waits for an admin (default 2).")
        parser.add_argument("--gold-rate", type=float, help="Share of live items that are gold checks, 0-1 (default 0).")
        parser.add_argument("--standing-after", type=int,
                            help="Judgments before a reviewer sees their own standing (default 20).")

    def handle(self, *args, slug, name, criteria, overlap, retest, max_pairs_per_prompt, min_rationale, **options):
        leaderboard = {"on": True, "off": False, None: None}[options["leaderboard_priority"]]
        if not criteria.is_file():
            raise CommandError(f"{criteria}: no such criteria file")
        try:
            instructions, items = criteria_parse(criteria.read_text(encoding="utf-8"), source=str(criteria))
            project, version, created = project_create_or_update(
                slug=slug, name=name, instructions=instructions, criteria_items=items, overlap=overlap,
                retest_rate=retest, max_pairs_per_prompt=max_pairs_per_prompt, min_rationale_chars=min_rationale,
                min_overlap=options["min_overlap"], max_overlap=options["max_overlap"],
                rationale_flag_chars=options["rationale_flag_chars"], qualification_items=options["qualification_items"],
                qualification_pass_mark=options["pass_mark"], qualification_attempts=options["qualification_attempts"],
                gold_rate=options["gold_rate"], standing_min_judgments=options["standing_after"],
                overlap_stop_rule=options["stop_rule"], leaderboard_priority=leaderboard,
            )
        except (CriteriaRejected, ReviewError) as exc:
            raise CommandError(str(exc)) from None
        verb = "created" if created else "updated"
        self.stdout.write(f"project {project.slug} {verb}; criteria version {version.version} ({len(items)} criteria)")

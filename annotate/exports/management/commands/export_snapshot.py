import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from annotate.exports import services
from annotate.exports.filters import ADJUDICATION_CHOICES, FIELDS, GOLD_CHOICES, ExportError, filters_parse
from annotate.exports.models import Export
from annotate.exports.pipeline import empty_test_split_warning, export_preview
from annotate.review.projects import project_or_error
from training.snapshot import ROW_FORMATS


class Command(BaseCommand):
    help = ("Export the project's judgments as an immutable DPO snapshot folder (manifest.json, train and test "
            "files), with a progress bar. The folder appears only when complete.")
    # As import_items: the system checks import every URL and view, a second before the first row is read;
    # the server and `migrate` run them.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--out", type=Path, help="the snapshot folder to create (must not exist)")
        parser.add_argument("--min-judgments", type=int, help="votes a pair needs (default 1)")
        parser.add_argument("--min-agreement", type=float, help="share of votes for the majority, 0-1 (default 0)")
        parser.add_argument("--exclude-ties", action="store_true", help="drop pairs with any tie or both_bad vote")
        parser.add_argument("--criteria-version", type=int, action="append", dest="criteria_versions",
                            help="count only judgments under this criteria version (repeatable)")
        parser.add_argument("--tag", action="append", dest="tags", help="keep prompts with this tag (repeatable)")
        parser.add_argument("--judged-since", help="count only judgments made on or after this day (YYYY-MM-DD, UTC)")
        parser.add_argument("--judged-until", help="count only judgments made on or before this day (YYYY-MM-DD, UTC)")
        parser.add_argument("--exclude-flagged", action="store_true",
                            help="do not count judgments of reviewers the agreement report flags")
        parser.add_argument("--exclude-flagged-rationales", action="store_true",
                            help="do not count judgments whose rationale has a rationale-check flag")
        parser.add_argument("--adjudications", choices=ADJUDICATION_CHOICES,
                            help="adjudicators' rulings: ignore (default), decide split pairs, or decide all ruled pairs")
        parser.add_argument("--gold", choices=GOLD_CHOICES, help="gold (honeypot) prompts: include (default), "
                                                                  "exclude, or only them")
        parser.add_argument("--max-pairs-per-prompt", type=int, help="keep the N most agreed-on pairs of a prompt")
        parser.add_argument("--format", choices=ROW_FORMATS, dest="row_format", help="row format (default conversational)")
        parser.add_argument("--parquet", action="store_true", help="write train.parquet/test.parquet instead of JSONL")
        parser.add_argument("--test-ratio", type=float, help="share of prompts in the test split (default 0.1)")
        parser.add_argument("--seed", type=int, help="seed of the train/test split (default 0)")
        parser.add_argument("--model-scores", action="store_true", dest="model_scores",
                            help="each row's meta gets the attached model reviewers' scores of its two answers")
        parser.add_argument("--preview", action="store_true", help="print the counts as JSON and write nothing")
        # A filter's error names the option the user typed (--criteria-version, not --criteria-versions).
        self.option_of = {action.dest: action.option_strings[0] for action in parser._actions if action.option_strings}
        self.option_of["file_format"] = "--parquet"

    def handle(self, *args, slug, out, preview, parquet, **options):
        project = project_or_error(slug=slug)
        raw = {key: options[key] for key in FIELDS if key in options}
        if parquet:
            raw["file_format"] = "parquet"
        try:
            filters = filters_parse(raw)
        except ExportError as error:
            field, _, reason = str(error).partition(": ")
            raise CommandError(f"{self.option_of.get(field, field)}: {reason}") from None
        if preview:
            preview = export_preview(project=project, filters=filters)
            self.stdout.write(json.dumps(preview, indent=2))
            for warning in preview["warnings"]:
                self.stderr.write(f"warning: {warning}")
            return
        if out is None:
            raise CommandError("--out DIR is required: the snapshot folder to create")
        out = out.absolute()
        try:
            export = services.export_create(project=project, filters=filters, created_by=None, out_dir=out,
                                            enqueue=False)
        except ExportError as error:
            raise CommandError(str(error)) from None
        with tqdm(unit="pair", desc=f"export {export.pk}", file=self.stderr, dynamic_ncols=True) as bar:
            def progress(done: int, total: int | None) -> None:
                bar.total = total
                bar.update(done - bar.n)

            export = services.export_run(export_id=export.pk, attempt=export.attempt, worker="export_snapshot",
                                         on_progress=progress)
        if export.status != Export.Status.DONE:
            raise CommandError(f"export {export.pk} failed, nothing was written: {export.error}")
        counts = export.counts
        self.stdout.write(
            f"{out}: snapshot {export.snapshot_id}, {counts['train']} train and {counts['test']} test row(s) "
            f"from {counts['pairs_considered']} pair(s); excluded: "
            + (", ".join(f"{reason} {n}" for reason, n in counts["excluded"].items() if n) or "none")
        )
        if warning := empty_test_split_warning(counts=counts, test_ratio=export.filters.get("test_ratio", 0)):
            self.stderr.write(f"warning: {warning}")

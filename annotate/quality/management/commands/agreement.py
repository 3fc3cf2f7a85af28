import json

from django.core.management.base import BaseCommand, CommandError

from annotate.quality.selectors import agreement_report_for_project
from annotate.quality.services import STORED_BOOTSTRAP, stored_report_refresh
from annotate.review.projects import project_or_error


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


class Command(BaseCommand):
    help = (
        "Agreement, reviewer quality and model ratings of a project, computed now and stored for the "
        "dashboard and the API (--json for the full report)."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--json", action="store_true", help="Print the whole report as JSON.")
        parser.add_argument(
            "--bootstrap", type=int, default=STORED_BOOTSTRAP,
            help=f"Resamples for confidence intervals (default {STORED_BOOTSTRAP}; any other count is printed, not stored).",
        )

    def handle(self, *args, slug, json: bool, bootstrap: int, **options):
        project = project_or_error(slug=slug)
        if bootstrap < 0:
            raise CommandError("--bootstrap must be 0 or more")
        if bootstrap == STORED_BOOTSTRAP:
            report = stored_report_refresh(project=project).report
            stored = "stored for the dashboard and the API"
        else:
            report = agreement_report_for_project(project=project, bootstrap=bootstrap)
            stored = f"not stored: the stored report uses --bootstrap {STORED_BOOTSTRAP}"
        if json:
            self.stdout.write(_json_dumps(report))
            return
        alpha = report["krippendorff_alpha"]
        bias = report["position_bias"]
        self.stdout.write(f"{project.slug}: {report['judgments']} judgments on {report['pairs']} pairs "
                          f"({report['pairs_with_overlap']} with overlap)")
        self.stdout.write(f"percent agreement {_fmt(report['percent_agreement'])}; "
                          f"alpha nominal {_fmt(alpha['nominal']['value'])} ordinal {_fmt(alpha['ordinal']['value'])}")
        self.stdout.write(f"left rate {_fmt(bias['left_rate'])} (p={_fmt(bias['p_value'], 4)})")
        self.stdout.write(f"{'reviewer':<16} {'judged':>6} {'agree':>6} {'left':>6} {'retest':>6} {'gold':>6}  flags")
        for r in report["reviewers"]:
            self.stdout.write(
                f"{r['username']:<16} {r['judgments']:>6} {_fmt(r['agreement_with_others'], 2):>6} "
                f"{_fmt(r['left_rate'], 2):>6} {_fmt(r['retest_consistency'], 2):>6} {_fmt(r['gold_accuracy'], 2):>6}  "
                f"{', '.join(r['flags'])}"
            )
        self.stdout.write(f"{'model':<24} {'rating':>7} {'wins':>5} {'losses':>6} {'ties':>5}")
        for m in report["models"]:
            self.stdout.write(f"{m['model']:<24} {_fmt(m['rating'], 2):>7} {m['wins']:>5} {m['losses']:>6} {m['ties']:>5}")
        for note in report["notes"]:
            self.stdout.write(f"note: {note}")
        self.stdout.write(f"report {stored}")


def _json_dumps(report: dict) -> str:
    return json.dumps(report, indent=2, allow_nan=False)

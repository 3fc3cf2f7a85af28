from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate.review.import_sql import items_import_file
from annotate.review.importing import ImportRejected
from annotate.review.projects import project_or_error


class Command(BaseCommand):
    help = "Import prompts with their answers from a JSONL file; a file with any error is rejected whole."
    # The system checks import every URL and view (the quality report's scipy and pandas among them): more
    # than a second and 200 MB before the first line is read. The server and `migrate` run them.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("path", type=Path)

    def handle(self, *args, slug, path, **options):
        project = project_or_error(slug=slug)
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        try:
            with path.open("rb") as lines:  # read line by line while it is stored: memory stays flat
                summary = items_import_file(project=project, lines=lines)
        except ImportRejected as exc:
            for error in exc.errors:
                self.stderr.write(f"{path}: {error}")
            raise CommandError(f"{path}: rejected whole, nothing was stored ({len(exc.errors)} error(s))") from None
        self.stdout.write(
            f"{path}: {summary.prompts_created} new prompt(s), {summary.prompts_existing} already known, "
            f"{summary.responses_created} new response(s), {summary.pairs_created} new pair(s)"
        )

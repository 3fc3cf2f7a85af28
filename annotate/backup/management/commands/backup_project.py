from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate.backup.contents import BackupError
from annotate.backup.dump import backup_write


class Command(BaseCommand):
    help = "Write every row of one project (users by username, with roles) to a JSONL backup file (docs/backup.md)."
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--out", type=Path, required=True, help="the backup file; it must not exist yet")

    def handle(self, *args, slug, out, **options):
        try:
            counts = backup_write(slug=slug, out=out)
        except BackupError as error:
            raise CommandError(str(error)) from None
        rows = sum(count for label, count in counts.items() if label != "users")
        self.stdout.write(f"{out}: project {slug}, {rows} row(s), {counts['users']} user(s) "
                          f"({counts['review.judgment']} judgment revisions)")

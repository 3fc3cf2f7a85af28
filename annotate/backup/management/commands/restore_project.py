from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from annotate.backup.contents import BackupError
from annotate.backup.restore import restore_read


class Command(BaseCommand):
    help = ("Restore a project from a backup_project file into a database without that project; "
            "all or nothing (docs/backup.md).")
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)

    def handle(self, *args, path, **options):
        try:
            summary = restore_read(path)
        except BackupError as error:
            raise CommandError(str(error)) from None
        rows = sum(summary["rows"].values())
        self.stdout.write(
            f"{path}: restored project {summary['project']}: {rows} row(s); {summary['users_created']} user(s) "
            f"created without a password (set one with manage.py add_user), {summary['users_matched']} matched "
            "by username and left as they were"
        )

from django.core.management.base import BaseCommand, CommandError

from annotate.errors import UserMistake
from annotate.runs.services import run_register_folder, why_no_checkpoint_made


class Command(BaseCommand):
    help = ("Register a finished run folder made by python -m training dpo|grpo|reward: its config, metrics, ledger and "
            "status, its base checkpoint and the checkpoint it made (registered too, with the base as parent; "
            "never an existing checkpoint, such as the base itself when the run changed no weight).")

    def add_arguments(self, parser):
        parser.add_argument("folder", help="the run folder (the config's output_dir)")

    def handle(self, *args, folder, **options):
        try:
            run = run_register_folder(folder)
        except UserMistake as error:
            raise CommandError(str(error)) from None
        made = run.made_checkpoint
        unmade = why_no_checkpoint_made(run)
        self.stdout.write(f"run {run.pk}: {run.kind} {run.status}, {len(run.metrics)} metrics rows"
                          + (f"; checkpoint {made.name} from {made.parent.name if made.parent else '?'}" if made else "")
                          + (f"; no checkpoint made: {unmade.reason}" if unmade else ""))

from django.core.management.base import BaseCommand, CommandError

from annotate.errors import UserMistake
from annotate.runs.models import Run
from annotate.runs.slurm import slurm_resume


class Command(BaseCommand):
    help = ("Go on with a staged GRPO run on Slurm whose chain stopped (a stage job cancelled or failed): the same run "
            "and folder, a new chain of jobs from its last complete version, with no prepare job.")

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int, help="the run's id (its page: /runs/ID/)")

    def handle(self, *args, run_id, **options):
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"no run {run_id}")
        try:
            run = slurm_resume(run)
        except UserMistake as error:
            raise CommandError(str(error)) from None
        if run.status != Run.Status.RUNNING:
            raise CommandError(f"run {run.pk}: {run.error}")
        self.stdout.write(f"run {run.pk}: resumed, following Slurm job {run.slurm_job_id}")

import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from annotate.errors import UserMistake
from annotate.runs.demo_checkpoint import DEMO_CHECKPOINT, DEMO_STEPS, demo_checkpoint_queue
from annotate.runs.execute import run_execute, run_follow_again, runs_reconcile
from annotate.runs.models import Run

WORKER = "build_demo_checkpoint"


class Command(BaseCommand):
    help = ("Build the demo's SFT checkpoint (python -m training tiny-sft) as a run the runs page follows, and "
            f"register it as {DEMO_CHECKPOINT}. With no broker (the embedded default) it builds in this process; "
            "with one it is queued for a training worker. Nothing is done when the checkpoint exists already.")

    def add_arguments(self, parser):
        parser.add_argument("--steps", type=int, default=settings.PAIRWISE_DEMO_SFT_STEPS,
                            help=f"SFT steps (default {DEMO_STEPS}, or PAIRWISE_DEMO_SFT_STEPS)")
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, steps, seed, **options):
        embedded = settings.CELERY_TASK_ALWAYS_EAGER
        if embedded:
            # Stopped with the demo's server (SIGTERM): the follower then stops the trainer's process group and
            # marks the run failed, and the next start builds again.
            signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
            for run_id in runs_reconcile(worker=WORKER):  # a build left by a previous start: its trainer lives on
                run_follow_again(run_id=run_id)
        try:
            run = demo_checkpoint_queue(steps=steps, seed=seed, enqueue=not embedded)
        except UserMistake as error:
            raise CommandError(str(error)) from None
        if run is None:
            self.stdout.write(f"checkpoint {DEMO_CHECKPOINT} is registered already")
            return
        if not embedded or run.status != Run.Status.QUEUED:
            self.stdout.write(f"run {run.pk} builds {DEMO_CHECKPOINT} ({run.status})")
            return
        self.stdout.write(f"run {run.pk}: building {DEMO_CHECKPOINT} ({steps} steps)")
        ended = run_execute(run_id=run.pk, worker=WORKER)
        if ended is None:
            return  # another process took it first
        if ended.status != Run.Status.SUCCEEDED:
            raise CommandError(f"run {run.pk}: the demo checkpoint was not built: {ended.error}")
        self.stdout.write(f"run {run.pk}: checkpoint {DEMO_CHECKPOINT} registered")

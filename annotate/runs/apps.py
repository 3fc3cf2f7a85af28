from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "annotate.runs"
    label = "runs"

    def ready(self):
        # Registers the Celery tasks in this process too: annotate/runs/queue.py sends a run to its task by name.
        from annotate.runs import tasks  # noqa: F401

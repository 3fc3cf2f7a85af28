from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "annotate.exports"
    label = "exports"

    def ready(self):
        # Registers the Celery tasks in this process too: annotate/exports/services.py sends an export by task name.
        from annotate.exports import tasks  # noqa: F401

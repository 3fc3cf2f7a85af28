from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "annotate.runs"
    label = "runs"

    def ready(self):
        # Registers the Celery tasks in this process too: annotate/runs/queue.py sends a run to its task by name, and
        # annotate/runs/model_reviewer_scoring.py a model reviewer's scoring.
        from annotate.quality.model_reviewers import attachable_checkpoints_provide
        from annotate.runs import tasks  # noqa: F401
        from annotate.runs.model_reviewer_scoring import reward_model_checkpoints

        # The quality dashboard's attach form offers this app's reward models; quality may not import runs.
        attachable_checkpoints_provide(reward_model_checkpoints)

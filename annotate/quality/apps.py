from django.apps import AppConfig


class QualityConfig(AppConfig):
    name = "annotate.quality"
    label = "quality"

    def ready(self) -> None:
        # The review app says when a leaderboard switch is turned on; the priorities need this app's ratings.
        from annotate.quality.queue_priorities import queue_priorities_soon
        from annotate.review.signals import leaderboard_priority_turned_on

        leaderboard_priority_turned_on.connect(queue_priorities_soon, dispatch_uid="quality.queue_priorities_soon")

"""Signals the review app sends for the apps built on it, which it does not import."""

from django.dispatch import Signal

# Sent after the commit that turned a project's leaderboard switch on, with project_id: the quality app
# queues the first refresh of its queue priorities (annotate/quality/queue_priorities.py, connected in
# annotate/quality/apps.py), which needs the models' ratings.
leaderboard_priority_turned_on = Signal()

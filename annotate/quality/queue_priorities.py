"""Leaderboard projects' queue priorities, refreshed from the models' ratings (annotate/quality/ratings.py).

What a priority is, and its writes, are the review app's (annotate/review/queue_priority.py); the ratings
behind it are computed here, so the refresh is here too. It runs off the request path: every 5 minutes (the
Celery task refresh_queue_priorities, annotate/quality/tasks.py), at once by the command of that name, and
once when a project's leaderboard switch is turned on (queue_priorities_soon, connected in apps.py).
"""

import logging

import numpy as np

from annotate.review.models import Judgment, Project
from annotate.review.queue_priority import (
    difference_uncertainty,
    open_pairs,
    pair_priorities,
    priorities_write,
    queue_priorities_clear,
)

logger = logging.getLogger(__name__)

PRIORITY_BOOTSTRAP = 200  # resamples behind the intervals the priorities read: a ranking, not a report


def queue_priorities_refresh(*, project: Project, force: bool = False) -> int:
    """Leaderboard projects: write each open pair's queue priority from the models' ratings now; returns
    how many pairs changed. Off the request path (a periodic Celery task, annotate/quality/tasks.py).

    Skipped when no judgment was made since the last refresh (unless `force`). A project without the
    leaderboard switch has every priority 0. Writes go in short transactions (queue_priority.priorities_write),
    since the queue skips pair rows that are locked.
    """
    # Imported here: the report's statistics pull in SciPy, which the task and command need only now.
    from annotate.quality.ratings import bradley_terry_ratings
    from annotate.quality.selectors import judgment_table_for_project

    if not project.leaderboard_priority:
        return queue_priorities_clear(project=project)
    newest = Judgment.objects.filter(pair__project_id=project.pk).order_by("-pk").values_list("pk", flat=True).first() or 0
    if newest == project.priorities_watermark and not force:
        return 0
    table = judgment_table_for_project(project=project)
    ratings = bradley_terry_ratings(table=table, n_resamples=PRIORITY_BOOTSTRAP, rng=np.random.default_rng(0))
    rated = [table.model_names[i] for i in ratings.model]
    uncertainty = difference_uncertainty(ci_low=ratings.ci_low, ci_high=ratings.ci_high,
                                         comparisons=ratings.comparisons)
    rows = list(open_pairs(project=project).order_by("-id").values_list(  # the queue's order among equals: newest first
        "id", "queue_priority", "response_a__model", "response_a__model_version", "response_b__model",
        "response_b__model_version",
    ))
    wanted = pair_priorities(model_a=[f"{row[2]}@{row[3]}" for row in rows],
                             model_b=[f"{row[4]}@{row[5]}" for row in rows], rated=rated, uncertainty=uncertainty,
                             comparisons=ratings.comparisons)
    changed = priorities_write([row[0] for row, new in zip(rows, wanted, strict=True) if new != row[1]],
                               {row[0]: int(new) for row, new in zip(rows, wanted, strict=True)})
    Project.objects.filter(pk=project.pk).update(priorities_watermark=newest)
    return changed


def queue_priorities_soon(sender, *, project_id: int, **kwargs) -> None:
    """A project's leaderboard switch was turned on (annotate/review/signals.py): queue the priorities' first
    refresh (in-process without a broker); the periodic task retries it."""
    from kombu.exceptions import OperationalError as BrokerUnavailable

    from annotate.quality.tasks import refresh_queue_priorities

    try:
        refresh_queue_priorities.delay(project_id)
    except BrokerUnavailable as error:
        logger.warning("could not queue the queue priorities of project %s: %s", project_id, error)

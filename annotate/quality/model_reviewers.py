"""Model reviewers: a reward model attached to a project, scoring its judged pairs beside the people.

An admin attaches a registered reward-model checkpoint (a sequence classifier: annotate/runs/checkpoints.py
is_reward_model) to a project. Attaching it and running its scoring need the checkpoints and the training process,
so they live in the runs app (annotate/runs/model_reviewer_scoring.py); this module holds what the quality app
reads and changes of an attachment on its own: its state as read (a scoring silent too long is failed), its
settings, detaching it, the pairs offered one more reviewer, and its figures against the people. The scores are
stored per attachment (ModelPairScore); the attachment is known by the checkpoint's content hash, and a new
attachment never rewrites an old one's scores. A queued or running scoring reports a heartbeat (heartbeat_at);
one silent for longer than STALE_AFTER (its worker killed, its message lost) counts as failed wherever it is
read, so it can be scored again.

Model reviewers never count in the people's figures (the agreement report never reads them), never reach a
reviewer's page or the reviewer API, and reach an export only when it asks for them (`model_scores`). With
`offer_disagreements` on, pairs whose people's majority the model confidently contradicts get one more
reviewer through the adaptive overlap (annotate/review/overlap.py: reviewers_with_one_more).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import lru_cache

import numpy as np
from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Q
from django.utils import timezone

from annotate.errors import UserMistake
from annotate.jobs import JobKind, JobStatus
from annotate.limits import share_number, true_or_false
from annotate.quality.model_agreement import (
    LEFT,
    confident_disagreements,
    model_reviewer_figures,
    winner_of_screen_choice,
)
from annotate.quality.models import ModelPairScore, ModelReviewer
from annotate.quality.services import judgments_since
from annotate.review.choices import WINNERS
from annotate.review.models import Assignment, Pair, Project, live_assignment
from annotate.review.overlap import reviewers_with_one_more, votes_of_pairs
from training.reward_model_scorer import over_max_length_line

# A queued or running scoring silent for longer than this counts as failed (its worker was killed, its message
# lost, the web process running it in a thread restarted): long against the scoring's heartbeat, short against a day.
STALE_AFTER = timedelta(minutes=10)
# The scoring task is the runs app's (annotate/runs/tasks.py, where the training process is), sent by the name it had
# here so that messages queued before it moved still reach it; on the training queue (annotate/runs/queue.py QUEUE).
SCORE_MODEL_REVIEWER = "annotate.quality.tasks.score_model_reviewer"
# A scoring on the one job lifecycle (annotate/jobs.py): its stored `scoring` is the lifecycle's running, `done` its
# succeeded. A detached model reviewer is no longer the lifecycle's to claim or beat for.
MODEL_REVIEWER_JOB = JobKind(
    model=ModelReviewer, task=SCORE_MODEL_REVIEWER, noun="the scoring", queue="training",
    thread_prefix="model-reviewer", attempt_field="attempt", started_field="scoring_started_at", finished_field=None,
    retry_hint="score again", claimable=Q(detached_at__isnull=True),
    labels={ModelReviewer.Status.QUEUED: JobStatus.QUEUED, ModelReviewer.Status.SCORING: JobStatus.RUNNING,
            ModelReviewer.Status.DONE: JobStatus.SUCCEEDED, ModelReviewer.Status.FAILED: JobStatus.FAILED})
MAX_THRESHOLD = 1000.0
WRITE_BATCH = 2000


class ModelReviewerMistake(UserMistake):
    """A model reviewer request the user can fix; the message says what and how."""


def judged_pairs(project: Project):
    """The project's pairs with at least one current live judgment (retests included)."""
    judged = Assignment.objects.filter(live_assignment(), pair=OuterRef("pk"), current_judgment__isnull=False)
    return Pair.objects.filter(Exists(judged), project=project)


def disagreement_threshold_checked(value) -> float:
    return share_number("disagreement_threshold", value, low=0.0, high=MAX_THRESHOLD,
                        error=ModelReviewerMistake, hint="a difference of reward scores")


def flag_checked(name: str, value) -> bool:
    return true_or_false(name, value, error=ModelReviewerMistake)


# --- what the attach form offers ------------------------------------------------------------------------
# Which checkpoints are local reward models is the runs app's to say (its checkpoints, its runs' kinds), and
# quality sits below runs: the runs app hands its lookup over in its ready() (annotate/runs/apps.py).
_attachable_checkpoints: list[Callable[[], list]] = []


def attachable_checkpoints_provide(lookup: Callable[[], list]) -> None:
    _attachable_checkpoints[:] = [lookup]


def attachable_checkpoints(project: Project) -> list:
    """The checkpoints the dashboard's attach form offers the project (none before the runs app is ready): reward
    models whose weights are not attached to it already (attaching them again is refused)."""
    if not _attachable_checkpoints:
        return []
    attached = set(attached_model_reviewers(project).values_list("content_hash", flat=True))
    return [checkpoint for checkpoint in _attachable_checkpoints[0]() if checkpoint.content_hash not in attached]


# --- a scoring that stopped reporting --------------------------------------------------------------------


def stale_scoring_error(reviewer: ModelReviewer, now: datetime) -> str | None:
    """The one line of a queued or running scoring silent for longer than STALE_AFTER, else None: the lifecycle's
    lost-after rule, read rather than written (annotate/jobs.py silent_for)."""
    silent = MODEL_REVIEWER_JOB.silent_for(reviewer, STALE_AFTER, now, states=(JobStatus.QUEUED, JobStatus.RUNNING))
    if silent is None:
        return None
    minutes = int(silent.total_seconds() // 60)
    if reviewer.status == ModelReviewer.Status.QUEUED:
        return (f"scoring stopped reporting: queued {minutes} minutes ago and no worker of the training queue took "
                "it; check that worker, then score again")
    return (f"scoring stopped reporting: no sign of it for {minutes} minutes (its worker or the web process running "
            "it was stopped); score again")


def as_read(reviewer: ModelReviewer, now: datetime | None = None) -> ModelReviewer:
    """The reviewer as every reader sees it: a scoring that stopped reporting is failed, with its one line."""
    error = stale_scoring_error(reviewer, now or timezone.now())
    if error is not None:
        reviewer.status, reviewer.error = ModelReviewer.Status.FAILED, error
    return reviewer


UNCHANGED = object()  # a setting left out of a change


def model_reviewer_change(*, reviewer: ModelReviewer, offer_disagreements=UNCHANGED,
                          disagreement_threshold=UNCHANGED) -> ModelReviewer:
    """Change whether (and above which score difference) its confident disagreements get one more reviewer;
    turning it on offers the pairs already scored. A setting left out (UNCHANGED) is kept; null is refused."""
    offer = UNCHANGED if offer_disagreements is UNCHANGED else flag_checked("offer_disagreements", offer_disagreements)
    threshold = (UNCHANGED if disagreement_threshold is UNCHANGED
                 else disagreement_threshold_checked(disagreement_threshold))
    with transaction.atomic():
        # Locked and read again: a detach or another change meanwhile is seen, not overwritten.
        reviewer = ModelReviewer.objects.select_for_update().select_related("project", "checkpoint").get(pk=reviewer.pk)
        if reviewer.detached_at is not None:
            raise ModelReviewerMistake("this model reviewer is detached; attach its checkpoint again")
        if offer is not UNCHANGED:
            reviewer.offer_disagreements = offer
        if threshold is not UNCHANGED:
            reviewer.disagreement_threshold = threshold
        reviewer.save(update_fields=["offer_disagreements", "disagreement_threshold"])
    if reviewer.status == ModelReviewer.Status.DONE:
        offer_confident_disagreements(reviewer=reviewer)
    return reviewer


def model_reviewer_detach(*, reviewer: ModelReviewer) -> ModelReviewer:
    """Take it off the project: it leaves the page and exports; its scores are kept."""
    ModelReviewer.objects.filter(pk=reviewer.pk, detached_at__isnull=True).update(
        detached_at=timezone.now(), attempt=reviewer.attempt + 1)  # a queued scoring of it then does nothing
    reviewer.refresh_from_db()
    return reviewer


def attached_model_reviewers(project: Project):
    return ModelReviewer.objects.filter(project=project, detached_at__isnull=True).select_related("checkpoint")


# --- one more reviewer where the model confidently disagrees ---------------------------------------------


def offer_standing(assigned: int, needed: int, *, offered_need: int) -> bool:
    """Whether an offer that raised a pair's need to `offered_need` still stands: the pair still needs that many,
    or has handed that many assignments out. A decision from the votes that lowered the need before the extra
    reviewer took the pair (an undo, a retest, a change of the overlap settings: pairs_needed_recompute) withdrew
    it; the pair may then be offered again."""
    return needed >= offered_need or assigned >= offered_need


STANDING_OFFER = Q(pair__reviewers_needed__gte=F("offered_need")) | Q(pair__assigned_count__gte=F("offered_need"))


def offer_confident_disagreements(*, reviewer: ModelReviewer) -> int:
    """With the setting on and an adaptive overlap, give one more reviewer to each scored pair whose people's
    strict majority so far (at least 2 votes) the model contradicts by more than the threshold; each pair once
    per model reviewer while that offer stands (offer_standing). Returns how many pairs were offered."""
    project = reviewer.project
    if not reviewer.offer_disagreements or reviewer.detached_at is not None or not project.overlap_is_adaptive:
        return 0
    candidates = list(ModelPairScore.objects.filter(model_reviewer=reviewer).order_by("pair_id")
                      .values_list("pair_id", "score_a", "score_b", "offered_at", "offered_need"))
    offered = 0
    for start in range(0, len(candidates), WRITE_BATCH):
        batch = candidates[start:start + WRITE_BATCH]
        with transaction.atomic():
            # The pairs' row locks first, then their votes: a judgment landing meanwhile is counted or decides
            # its pair after this.
            locked = {pk: (assigned, needed) for pk, assigned, needed in
                      Pair.objects.select_for_update(no_key=True).filter(pk__in=[row[0] for row in batch])
                      .order_by("pk").values_list("pk", "assigned_count", "reviewers_needed")}
            standing = {row[0] for row in batch
                        if row[3] is not None and offer_standing(*locked[row[0]], offered_need=row[4])}
            open_rows = [row for row in batch if row[0] not in standing]
            withdrawn = [row[0] for row in open_rows if row[3] is not None]
            if withdrawn:
                ModelPairScore.objects.filter(model_reviewer=reviewer, pair_id__in=withdrawn).update(
                    offered_at=None, offered_need=0)
            if not open_rows:
                continue
            pair_ids = [row[0] for row in open_rows]
            votes = votes_of_pairs(pair_ids)
            doubted = confident_disagreements(
                votes=np.array([votes[pair_id] for pair_id in pair_ids]).reshape(-1, len(WINNERS)),
                score_a=np.array([row[1] for row in open_rows]), score_b=np.array([row[2] for row in open_rows]),
                threshold=reviewer.disagreement_threshold)
            chosen = [pair_id for pair_id, doubt in zip(pair_ids, doubted, strict=True) if doubt]
            if not chosen:
                continue
            needed = reviewers_with_one_more(assigned=[locked[p][0] for p in chosen],
                                             needed=[locked[p][1] for p in chosen], max_overlap=project.overlap)
            changed = [Pair(pk=pair_id, reviewers_needed=int(new)) for pair_id, new in zip(chosen, needed, strict=True)
                       if new != locked[pair_id][1]]
            Pair.objects.bulk_update(changed, ["reviewers_needed"])
            now = timezone.now()
            for need in {pair.reviewers_needed for pair in changed}:  # a few values: 3 up to the maximum overlap
                ModelPairScore.objects.filter(
                    model_reviewer=reviewer, pair_id__in=[p.pk for p in changed if p.reviewers_needed == need],
                ).update(offered_at=now, offered_need=need)
            offered += len(changed)
    return offered


# --- what it was trained on -----------------------------------------------------------------------------


@lru_cache(maxsize=16)
def _train_pair_ids(snapshot: str, snapshot_id: str | None, project_slug: str) -> frozenset[int]:
    """meta.pair_id of every row of a snapshot's train split when it is a snapshot of this project, else none (pair
    ids name this app's pairs only). A snapshot is written once: cached by path and id."""
    from training.snapshot import SnapshotError, iter_rows, verify

    manifest = verify(snapshot)
    if snapshot_id is not None and manifest.get("snapshot_id") != snapshot_id:
        raise SnapshotError(f"{snapshot} now holds snapshot {manifest.get('snapshot_id')}, not the {snapshot_id} its "
                            "lineage names")
    if manifest.get("project") != project_slug:
        return frozenset()
    return frozenset(row["meta"]["pair_id"] for row in iter_rows(snapshot, "train", manifest=manifest)
                     if isinstance(row["meta"], dict) and isinstance(row["meta"].get("pair_id"), int))


def training_lineage(reviewer: ModelReviewer) -> dict:
    """The snapshot its checkpoint was trained on (checkpoint -> run -> snapshot, else the run.json beside the
    checkpoint folder) and the ids of the pairs in that snapshot's train split: the pairs it has seen.
    `train_pair_ids` is None when the lineage names no snapshot or it cannot be read (`note` says why)."""
    from training.run_folder import checkpoint_run_record
    from training.snapshot import SnapshotError

    checkpoint = reviewer.checkpoint
    run = checkpoint.run if checkpoint.run_id else None
    snapshot, snapshot_id = (run.snapshot_path or None, (run.snapshot_manifest or {}).get("snapshot_id")) \
        if run is not None else (None, None)
    if snapshot is None:
        record = checkpoint_run_record(checkpoint.uri) or {}
        recorded = record.get("snapshot") if isinstance(record.get("snapshot"), dict) else {}
        snapshot, snapshot_id = recorded.get("path"), recorded.get("snapshot_id")
        if snapshot is None and record.get("kind") == "reward":
            snapshot = (record.get("config") or {}).get("snapshot")
    lineage = {"snapshot": snapshot, "snapshot_id": snapshot_id, "train_pair_ids": None, "note": None}
    if not snapshot:
        lineage["note"] = ("its checkpoint's lineage names no training snapshot, so pairs it saw in training cannot "
                           "be told from pairs it never saw")
        return lineage
    try:
        lineage["train_pair_ids"] = _train_pair_ids(str(snapshot), snapshot_id, reviewer.project.slug)
    except (SnapshotError, OSError) as error:
        lineage["note"] = (f"its training snapshot cannot be read ({str(error).splitlines()[0]}), so pairs it saw "
                           "in training cannot be told from pairs it never saw")
    return lineage


# --- reading -------------------------------------------------------------------------------------------


def _human_votes(project: Project) -> dict[int, list[int]]:
    """Each judged pair's votes as the export counts them: current judgments of first-time live assignments."""
    votes: dict[int, list[int]] = {pair_id: [0] * len(WINNERS) for pair_id in judged_pairs(project)
                                   .values_list("pk", flat=True)}
    rows = (Assignment.objects.filter(live_assignment(), project=project, is_retest=False,
                                      current_judgment__isnull=False)
            .values_list("pair_id", "current_judgment__winner").annotate(n=Count("id")).order_by())
    for pair_id, winner, n in rows:
        votes[pair_id][WINNERS.index(winner)] += n
    return votes


def model_reviewer_summary(*, reviewer: ModelReviewer, votes: dict[int, list[int]] | None = None) -> dict:
    """What the page and the API show of one model reviewer: who it is, its state and its figures against the
    people (annotate/quality/model_agreement.py). `votes` (from _human_votes) may be shared between reviewers."""
    votes = _human_votes(reviewer.project) if votes is None else votes
    reviewer = as_read(reviewer)
    pair_ids = sorted(votes)
    scores = {pair_id: (a_on_left, shown, swapped) for pair_id, a_on_left, shown, swapped in
              ModelPairScore.objects.filter(model_reviewer=reviewer).values_list(
                  "pair_id", "a_on_left", "choice_shown", "choice_swapped")}
    present = [scores.get(pair_id, (True, "tie", "tie")) for pair_id in pair_ids]
    a_on_left = np.array([row[0] for row in present], dtype=bool)
    shown = np.array([row[1] for row in present], dtype=object)
    swapped = np.array([row[2] for row in present], dtype=object)
    lineage = training_lineage(reviewer)
    seen_ids = lineage["train_pair_ids"]
    over_max_length = set(reviewer.pairs_over_max_length or ())
    figures = model_reviewer_figures(
        votes=np.array([votes[pair_id] for pair_id in pair_ids], dtype=np.int64).reshape(-1, len(WINNERS)),
        scored=np.array([pair_id in scores for pair_id in pair_ids], dtype=bool),
        over_max_length=np.array([pair_id in over_max_length for pair_id in pair_ids], dtype=bool),
        seen=None if seen_ids is None else np.array([pair_id in seen_ids for pair_id in pair_ids], dtype=bool),
        winner_shown=winner_of_screen_choice(shown, a_on_left=a_on_left),
        # In the swapped order response a is on the left where it was on the right.
        winner_swapped=winner_of_screen_choice(swapped, a_on_left=~a_on_left),
        chose_left=shown == LEFT,
    )
    offered = ModelPairScore.objects.filter(STANDING_OFFER, model_reviewer=reviewer, offered_at__isnull=False).count()
    scored = reviewer.scored_at is not None
    return {
        "id": reviewer.pk,
        "checkpoint": reviewer.checkpoint.name,
        "checkpoint_id": reviewer.checkpoint_id,
        "identity": reviewer.identity,
        "content_hash": reviewer.content_hash,
        "status": reviewer.status,
        "error": reviewer.error or None,
        "offer_disagreements": reviewer.offer_disagreements,
        "disagreement_threshold": reviewer.disagreement_threshold,
        "pairs_offered": offered,
        "created_by": reviewer.created_by.get_username() if reviewer.created_by_id else None,
        "created_at": reviewer.created_at.isoformat(),
        "scored_at": reviewer.scored_at.isoformat() if scored else None,
        "scoring_started_at": reviewer.scoring_started_at.isoformat() if reviewer.scoring_started_at else None,
        "heartbeat_at": reviewer.heartbeat_at.isoformat() if reviewer.heartbeat_at else None,
        # How stale the scores are: the last scoring read the pairs as of judgment row `judgment_watermark`.
        "pairs_scored": reviewer.pairs_scored if scored else None,
        "judgment_watermark": reviewer.judgment_watermark if scored else None,
        "judgments_since": (judgments_since(project=reviewer.project, watermark=reviewer.judgment_watermark)
                            if scored else None),
        "over_max_length": ({"pairs": len(over_max_length), "max_length": reviewer.max_length,
                             "note": over_max_length_line(len(over_max_length), len(over_max_length)
                                                          + reviewer.pairs_scored, reviewer.max_length, "pairs")
                             + "; they are left out of every figure"}
                            if scored and over_max_length else None),
        "training_snapshot": {"path": lineage["snapshot"], "snapshot_id": lineage["snapshot_id"],
                              "train_pairs_here": (None if seen_ids is None
                                                   else int(np.isin(pair_ids, list(seen_ids)).sum())),
                              "note": lineage["note"]},
        "figures": figures,
    }


def model_reviewer_summaries(*, project: Project) -> list[dict]:
    reviewers = list(attached_model_reviewers(project).select_related("project", "created_by"))
    if not reviewers:
        return []
    votes = _human_votes(project)
    return [model_reviewer_summary(reviewer=reviewer, votes=votes) for reviewer in reviewers]


def model_scores_by_pair(*, project: Project) -> dict[int, dict[str, tuple[float, float]]]:
    """For exports that ask for them: pair id -> {identity: (score of a, score of b)} of every attached model
    reviewer's scores."""
    found: dict[int, dict[str, tuple[float, float]]] = {}
    rows = (ModelPairScore.objects.filter(model_reviewer__project=project, model_reviewer__detached_at__isnull=True)
            .order_by("model_reviewer_id", "pair_id")
            .values_list("pair_id", "model_reviewer__identity", "score_a", "score_b"))
    for pair_id, identity, score_a, score_b in rows.iterator(chunk_size=10_000):
        found.setdefault(pair_id, {})[identity] = (score_a, score_b)
    return found

"""Model reviewers' scoring: attaching a registered reward model to a project and scoring its judged pairs.

An admin attaches a registered reward-model checkpoint (a sequence classifier: annotate/runs/checkpoints.py
is_reward_model) to a project. Scoring runs as a Celery task on the training queue (in a thread of the web process on
the embedded defaults), a job on the one lifecycle (annotate/jobs.py; MODEL_REVIEWER_JOB in the quality app, which
owns the row): every judged pair's answers, each distinct response once, go to `python -m training reward-score`
in a subprocess, as the app runs every training command, so the web process never loads a model. A failed scoring
keeps the command's one `error:` line; scoring again (after a failure, or after new judgments) is one call.

Here in the runs app because it needs the checkpoints and the training process; the attachment's rows, its
settings, its figures and what exports read of it are the quality app's (annotate/quality/model_reviewers.py).
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotate.jobs import JobStatus
from annotate.quality.model_agreement import screen_choice
from annotate.quality.model_reviewers import (
    MODEL_REVIEWER_JOB,
    WRITE_BATCH,
    ModelReviewerMistake,
    as_read,
    disagreement_threshold_checked,
    flag_checked,
    judged_pairs,
    offer_confident_disagreements,
)
from annotate.quality.models import ModelPairScore, ModelReviewer
from annotate.quality.services import project_judgment_watermark
from annotate.review.models import Assignment, Pair, Project, live_assignment
from annotate.runs.checkpoints import checkpoint_resolve, is_reward_model
from annotate.runs.models import Checkpoint
from annotate.runs.training_process import training_command, training_env
from training.reward_model_scorer import reward_model_identity

logger = logging.getLogger(__name__)

SCORE_TIMEOUT_S = 6 * 3600  # thousands of answers on a CPU worker take a while; a hung one must end
HEARTBEAT_EVERY_S = 30.0  # how often a running scoring says it is alive



# --- what may be attached -----------------------------------------------------------------------------


def is_local_reward_model(checkpoint: Checkpoint) -> bool:
    """A registered reward model (annotate.runs.checkpoints.is_reward_model) in a local folder with a content hash, so
    its scores can be tied to its weights (a causal LM would be scored by a new, untrained head)."""
    return bool(checkpoint.content_hash) and Path(checkpoint.uri).is_dir() and is_reward_model(checkpoint)


def reward_model_checkpoints() -> list[Checkpoint]:
    """Registered checkpoints that are reward models in a local folder: what the attach form offers."""
    return [c for c in Checkpoint.objects.select_related("run").order_by("name") if is_local_reward_model(c)]


# The threshold a model reviewer gets when none is given (the field's default).
DEFAULT_DISAGREEMENT_THRESHOLD = ModelReviewer._meta.get_field("disagreement_threshold").default


def model_reviewer_attach(*, project: Project, checkpoint, created_by: AbstractBaseUser | None,
                          offer_disagreements=False,
                          disagreement_threshold=DEFAULT_DISAGREEMENT_THRESHOLD) -> ModelReviewer:
    """Attach a registered reward-model checkpoint (id or name) to the project and queue its scoring; one line
    (400) for a checkpoint that is unknown or no reward model, a project with no judged pairs, or weights
    attached already."""
    found = checkpoint_resolve(checkpoint, key="checkpoint")
    if not is_local_reward_model(found):
        raise ModelReviewerMistake(
            f"checkpoint {found.name!r} is not a reward model (its config.json names no architecture ending in "
            "ForSequenceClassification, or it is not a local folder); attach a checkpoint made by "
            "python -m training reward")
    offer = flag_checked("offer_disagreements", offer_disagreements)
    threshold = disagreement_threshold_checked(disagreement_threshold)  # null is refused, as in a change
    if not judged_pairs(project).exists():
        raise ModelReviewerMistake(f"project {project.slug!r} has no judged pairs yet, so there is nothing to "
                                   "score; attach a model reviewer once reviewers have judged some pairs")
    same = (ModelReviewer.objects.filter(project=project, content_hash=found.content_hash, detached_at__isnull=True)
            .select_related("checkpoint").first())
    if same is not None:
        what = ("is attached to this project already" if same.checkpoint_id == found.pk
                else f"has the same weights as checkpoint {same.checkpoint.name!r}, attached already")
        raise ModelReviewerMistake(f"checkpoint {found.name!r} {what}; score it again instead, or detach it first")
    try:
        with transaction.atomic():
            reviewer = ModelReviewer.objects.create(
                project=project, checkpoint=found, content_hash=found.content_hash,
                identity=reward_model_identity(found.content_hash), offer_disagreements=offer,
                disagreement_threshold=threshold, created_by=created_by, heartbeat_at=timezone.now())
            transaction.on_commit(partial(MODEL_REVIEWER_JOB.send, reviewer.pk, reviewer.attempt))
    except IntegrityError:
        raise ModelReviewerMistake(f"checkpoint {found.name!r} was attached to this project just now by someone "
                                   "else; reload the page") from None
    return reviewer


def model_reviewer_score_again(*, reviewer: ModelReviewer) -> ModelReviewer:
    """Queue a new scoring of every judged pair (after a failure, or after new judgments)."""
    with transaction.atomic():
        reviewer = ModelReviewer.objects.select_for_update().get(pk=reviewer.pk)
        if reviewer.detached_at is not None:
            raise ModelReviewerMistake("this model reviewer is detached; attach its checkpoint again")
        if as_read(reviewer).status in (ModelReviewer.Status.QUEUED, ModelReviewer.Status.SCORING):
            raise ModelReviewerMistake(f"this model reviewer is {reviewer.status} now; wait until it is done",
                                       status=409)
        # A stale scoring's attempt is bumped too: should its worker wake up, it no longer writes anything.
        reviewer.attempt += 1
        reviewer.status = ModelReviewer.Status.QUEUED
        reviewer.error = ""
        reviewer.heartbeat_at = timezone.now()
        reviewer.save(update_fields=["attempt", "status", "error", "heartbeat_at"])
        transaction.on_commit(partial(MODEL_REVIEWER_JOB.send, reviewer.pk, reviewer.attempt))
    reviewer.refresh_from_db()
    return reviewer


# --- scoring -------------------------------------------------------------------------------------------


def _claim(reviewer_id: int, attempt: int) -> ModelReviewer | None:
    if MODEL_REVIEWER_JOB.claim(reviewer_id, attempt) is None:
        return None  # detached, scored again, or a repeated delivery
    return ModelReviewer.objects.select_related("project", "checkpoint").get(pk=reviewer_id)


def _pairs_to_score(project: Project) -> list[dict]:
    """Every judged pair: its responses, prompt, texts and the order reviewers were shown (the first first-time
    judged assignment's, else the first judged one's)."""
    shown: dict[int, tuple[bool, bool]] = {}
    rows = (Assignment.objects.filter(live_assignment(), project=project, current_judgment__isnull=False)
            .order_by("pk").values_list("pair_id", "a_on_left", "is_retest"))
    for pair_id, a_on_left, is_retest in rows.iterator(chunk_size=10_000):
        known = shown.get(pair_id)
        if known is None or (known[1] and not is_retest):
            shown[pair_id] = (a_on_left, is_retest)
    pairs = (Pair.objects.filter(pk__in=list(shown)).order_by("pk")
             .values("pk", "response_a_id", "response_b_id", "response_a__text", "response_b__text",
                     "prompt__messages"))
    return [{**pair, "a_on_left": shown[pair["pk"]][0]} for pair in pairs.iterator(chunk_size=2000)]


class ScoringFailed(Exception):
    """The scoring could not finish; the message is the one line the page shows."""


class ScoringSuperseded(Exception):
    """The model reviewer was detached or scored again while this scoring ran: it stops and writes nothing."""


def _heartbeat(reviewer: ModelReviewer) -> bool:
    """Say the scoring is alive; False when it is no longer this attempt's to finish."""
    return MODEL_REVIEWER_JOB.heartbeat(reviewer.pk, reviewer.attempt)


def _run_with_heartbeat(reviewer: ModelReviewer, command: list[str]) -> tuple[int, str]:
    """Run the command, beating every HEARTBEAT_EVERY_S; (exit code, stderr). Stopped past SCORE_TIMEOUT_S
    (ScoringFailed) or once superseded (ScoringSuperseded)."""
    deadline = time.monotonic() + SCORE_TIMEOUT_S
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=settings.BASE_DIR,
                          env=training_env()) as process:
        while True:
            try:
                _, stderr = process.communicate(timeout=HEARTBEAT_EVERY_S)
                return process.returncode, stderr
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    process.kill()
                    process.communicate()
                    raise ScoringFailed(f"scoring took over {SCORE_TIMEOUT_S // 3600} hours and was stopped; score "
                                        "again on a worker with a GPU") from None
                if not _heartbeat(reviewer):
                    process.kill()
                    process.communicate()
                    raise ScoringSuperseded() from None


def finite_scores(rows: list[dict]) -> dict[str, float | None]:
    """Scores by answer id from the reward-score output's rows, None where the answer was longer than the model's
    max_length (not scored: training.reward_model_scorer.fits_max_length); ScoringFailed when one is NaN or
    infinite (a broken model: no choice can be read from it)."""
    scores = {row["id"]: None if row["score"] is None else float(row["score"]) for row in rows}
    broken = [answer for answer, score in scores.items() if score is not None and not math.isfinite(score)]
    if broken:
        raise ScoringFailed(f"the reward model scored {len(broken)} of {len(scores)} answers as "
                            f"{scores[broken[0]]} (response {broken[0]} first), not a finite number; its weights "
                            "are broken: train it again or attach another checkpoint")
    return scores


def _run_reward_score(reviewer: ModelReviewer, pairs: list[dict]) -> tuple[dict[str, float | None], int | None]:
    """(scores by response id, the max_length it kept to) from `python -m training reward-score`, or ScoringFailed
    with its one line."""
    with tempfile.TemporaryDirectory(prefix="pairwise-model-reviewer-") as scratch:
        answers, out = Path(scratch) / "answers.jsonl", Path(scratch) / "scores.json"
        seen: set[int] = set()
        with open(answers, "w", encoding="utf-8") as handle:
            for pair in pairs:
                for side in ("a", "b"):
                    response_id = pair[f"response_{side}_id"]
                    if response_id not in seen:
                        seen.add(response_id)
                        handle.write(json.dumps({"id": str(response_id), "prompt": pair["prompt__messages"],
                                                 "answer": pair[f"response_{side}__text"]}) + "\n")
        command = training_command("reward-score", "--reward-model", reviewer.checkpoint.uri,
                                   "--answers", str(answers), "--out", str(out))
        returncode, stderr = _run_with_heartbeat(reviewer, command)
        lines = [line for line in stderr.splitlines() if line.strip()]
        if returncode == 2 and lines:
            # The command names its scratch file; the admin knows the project's pairs, not that file.
            raise ScoringFailed(lines[-1].removeprefix("error: ").replace(f"answers file {answers}",
                                                                          "the project's judged pairs"))
        if returncode != 0:
            logger.error("python -m training reward-score failed:\n%s", stderr[-4000:])
            raise ScoringFailed(f"the reward-score command failed (exit code {returncode}): "
                                f"{lines[-1] if lines else 'no output'}")
        result = json.loads(out.read_text(encoding="utf-8"))
    if result.get("format") != "pairwise.reward_scores/1":
        raise ScoringFailed(f"the reward-score command wrote format {result.get('format')!r}, not "
                            "pairwise.reward_scores/1; update the worker's code")
    scored_hash = result["reward_model"]["content_hash"]
    if scored_hash != reviewer.content_hash:
        raise ScoringFailed(f"checkpoint {reviewer.checkpoint.name!r} holds other weights than when it was attached "
                            f"({scored_hash[:19]}… now, {reviewer.content_hash[:19]}… then); register the new "
                            "weights as a checkpoint and attach that")
    return finite_scores(result["scores"]), result["reward_model"].get("max_length")


def _score_rows(reviewer: ModelReviewer, pairs: list[dict],
                scores: dict[str, float | None]) -> tuple[list[ModelPairScore], list[int]]:
    """The pairs' score rows, and the ids of the pairs left unscored because an answer was over max_length."""
    rows, over_max_length = [], []
    for pair in pairs:
        score_a, score_b = scores[str(pair["response_a_id"])], scores[str(pair["response_b_id"])]
        if score_a is None or score_b is None:
            over_max_length.append(pair["pk"])
            continue
        left, right = (score_a, score_b) if pair["a_on_left"] else (score_b, score_a)
        rows.append(ModelPairScore(
            model_reviewer=reviewer, pair_id=pair["pk"], score_a=score_a, score_b=score_b, a_on_left=pair["a_on_left"],
            choice_shown=screen_choice(left_score=left, right_score=right),
            # Swapped: what was on the right is on the left. The model scores each answer alone, so this is
            # the same answer by construction; it is kept as the record of both display orders.
            choice_swapped=screen_choice(left_score=right, right_score=left)))
    return rows, over_max_length


def _one_line(error: Exception) -> str:
    if isinstance(error, ScoringFailed):
        return str(error)
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    text = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return (text if len(text) <= 300 else text[:299] + "…") + "; score again, or see the worker's log"


def model_reviewer_run(*, reviewer_id: int, attempt: int) -> ModelReviewer | None:
    """Run one scoring; returns the reviewer as it ended, or None for a stale or repeated delivery."""
    reviewer = _claim(reviewer_id, attempt)
    if reviewer is None:
        return None
    try:
        watermark = project_judgment_watermark(project=reviewer.project)
        pairs = _pairs_to_score(reviewer.project)
        if not pairs:
            raise ScoringFailed(f"project {reviewer.project.slug!r} has no judged pairs to score")
        scores, max_length = _run_reward_score(reviewer, pairs)
        rows, over_max_length = _score_rows(reviewer, pairs, scores)
        with transaction.atomic():
            if not ModelReviewer.objects.select_for_update().filter(
                    pk=reviewer.pk, attempt=attempt, detached_at__isnull=True).exists():
                raise ScoringSuperseded()
            # Scores of pairs scored before are replaced by the same model's new ones; the time one was offered
            # another reviewer stays.
            ModelPairScore.objects.bulk_create(
                rows, batch_size=WRITE_BATCH, update_conflicts=True, unique_fields=["model_reviewer", "pair"],
                update_fields=["score_a", "score_b", "a_on_left", "choice_shown", "choice_swapped"])
            MODEL_REVIEWER_JOB.finish(
                reviewer.pk, attempt, JobStatus.SUCCEEDED, error="", pairs_scored=len(rows),
                judgment_watermark=watermark, max_length=max_length, pairs_over_max_length=over_max_length,
                scored_at=timezone.now(), heartbeat_at=timezone.now())
    except ScoringSuperseded:
        reviewer.refresh_from_db()
        return reviewer
    except Exception as error:  # whatever stops it, the row must not stay "scoring": its one line is kept
        if not isinstance(error, ScoringFailed):
            logger.exception("scoring model reviewer %s failed", reviewer.pk)
        MODEL_REVIEWER_JOB.finish(reviewer.pk, attempt, JobStatus.FAILED, error=_one_line(error))
        reviewer.refresh_from_db()
        return reviewer
    reviewer.refresh_from_db()
    offer_confident_disagreements(reviewer=reviewer)
    return reviewer



"""The stored agreement report of each project, so that reading it costs a row, not a recomputation.

A report over a million judgments takes seconds and hundreds of megabytes; the page and the API
serve the stored one and a Celery task recomputes it off the request path (annotate/quality/services.py).
Whether it is out of date is read from the judgments themselves when someone looks, never written on
the judgment hot path: ``judgment_watermark`` is the newest Judgment row of the project the report
covers, and every submit, undo and revision adds a newer one.

Beside it, the model reviewers: reward models attached to a project and the scores they gave its judged pairs
(annotate/quality/model_reviewers.py). They are kept apart from the people's judgments and never read by the
agreement report.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q


class StoredAgreementReport(models.Model):
    project = models.OneToOneField(
        "review.Project", on_delete=models.CASCADE, related_name="stored_agreement_report"
    )
    report = models.JSONField(null=True, blank=True, help_text="The agreement report; empty until first computed.")
    bootstrap = models.PositiveIntegerField(default=0, help_text="Bootstrap resamples behind its intervals.")
    computed_at = models.DateTimeField(null=True, blank=True)
    compute_seconds = models.FloatField(null=True, blank=True, help_text="How long reading and computing took.")
    judgment_watermark = models.BigIntegerField(
        default=0, help_text="Id of the project's newest Judgment row (any revision) the report covers."
    )
    judgments_covered = models.PositiveIntegerField(default=0, help_text="Current judgments in the report.")
    recompute_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="A recompute was queued then and has not finished; one at a time."
    )

    def __str__(self) -> str:
        return f"stored agreement report of project {self.project_id}"


class ModelReviewer(models.Model):
    """A reward-model checkpoint attached to a project: it scores every judged pair's two answers, and the quality
    dashboard measures it against the people. Detaching keeps the row and its scores (detached_at)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        SCORING = "scoring"
        DONE = "done"
        FAILED = "failed"

    project = models.ForeignKey("review.Project", on_delete=models.PROTECT, related_name="model_reviewers")
    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.PROTECT, related_name="+")
    content_hash = models.CharField(max_length=80, help_text="The checkpoint's content hash when it was attached.")
    identity = models.CharField(max_length=120, help_text="reward_model@sha256:..., as scores and exports name it.")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True, help_text="The one line of a failed scoring.")
    attempt = models.PositiveIntegerField(default=1, help_text="Bumped by each scoring; a task runs only its own.")
    offer_disagreements = models.BooleanField(
        default=False, help_text="Pairs it confidently disagrees with get one more reviewer (adaptive overlap).")
    disagreement_threshold = models.FloatField(
        default=1.0, help_text="Score difference above which a disagreement with the people's majority is confident.")
    pairs_scored = models.PositiveIntegerField(default=0)
    max_length = models.PositiveIntegerField(
        null=True, blank=True, help_text="The max_length its last scoring kept to (its reward run's); null: none.")
    pairs_over_max_length = models.JSONField(
        default=list, blank=True, help_text="Ids of the pairs its last scoring could not score: an answer's sequence "
                                            "was longer than max_length (training.reward_model_scorer).")
    judgment_watermark = models.BigIntegerField(
        default=0, help_text="Id of the project's newest Judgment row when the last scoring read the pairs.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    scored_at = models.DateTimeField(null=True, blank=True)
    scoring_started_at = models.DateTimeField(null=True, blank=True, help_text="When the last scoring started.")
    heartbeat_at = models.DateTimeField(
        null=True, blank=True,
        help_text="Last sign of life of a queued or running scoring: when it was queued, started, then every "
                  "HEARTBEAT_EVERY_S while it runs; older than STALE_AFTER it counts as failed.")
    detached_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            # One attachment of the same weights per project at a time (a detached one may be attached again).
            models.UniqueConstraint(fields=["project", "content_hash"], condition=Q(detached_at__isnull=True),
                                    name="model_reviewer_once_per_project"),
        ]

    def __str__(self) -> str:
        return f"model reviewer {self.identity[:32]} of project {self.project_id}"


class ModelPairScore(models.Model):
    """A model reviewer's scores for the two answers of one judged pair and its choice in each display order."""

    class Choice(models.TextChoices):
        LEFT = "left"
        RIGHT = "right"
        TIE = "tie"

    model_reviewer = models.ForeignKey(ModelReviewer, on_delete=models.PROTECT, related_name="pair_scores")
    pair = models.ForeignKey("review.Pair", on_delete=models.PROTECT, related_name="+")
    score_a = models.FloatField()
    score_b = models.FloatField()
    a_on_left = models.BooleanField(help_text="The order reviewers were shown: the pair's first judged assignment's.")
    choice_shown = models.CharField(max_length=5, choices=Choice.choices,
                                    help_text="The model's choice in the order reviewers were shown.")
    choice_swapped = models.CharField(max_length=5, choices=Choice.choices,
                                      help_text="The model's choice with left and right exchanged.")
    offered_at = models.DateTimeField(
        null=True, blank=True, help_text="When the pair was offered one more reviewer because the model disagreed.")
    offered_need = models.PositiveSmallIntegerField(
        default=0, help_text="The reviewers_needed the offer raised the pair to; a recompute that lowers the pair's "
                             "need below it withdrew the offer, and the next pass may offer the pair again.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model_reviewer", "pair"], name="model_pair_score_once")]

    def __str__(self) -> str:
        return f"scores of pair {self.pair_id} by model reviewer {self.model_reviewer_id}"

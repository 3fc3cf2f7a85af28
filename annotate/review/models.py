"""What Pairwise keeps about review work.

Project → CriteriaVersion → Prompt → Response → Pair → Assignment → Judgment. Judgments are stored
un-swapped ("response a preferred over b"), append-only: an edit or an undo is a new revision row,
and Assignment.current_judgment points at the revision that counts.
"""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Greatest
from django.db.models.lookups import GreaterThan, LessThan

from annotate.review.choices import WINNERS
from training.snapshot import prompt_key


class Project(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    overlap = models.PositiveSmallIntegerField(
        default=3, help_text="Distinct reviewers per pair; with a minimum overlap, the most a split pair gets."
    )
    # Adaptive overlap (annotate/review/overlap.py): a decided pair stops at the minimum, a split one goes on.
    min_overlap = models.PositiveSmallIntegerField(
        null=True, blank=True,
        help_text="Adaptive overlap: a pair whose votes are decided stops here; empty means a fixed overlap.",
    )
    overlap_stop_rule = models.CharField(
        max_length=8, default="lead2",
        choices=[("lead2", "lead2: the majority choice is two votes ahead of the runner-up"),
                 ("settled", "settled: no vote up to the maximum could change the winner"),
                 ("majority", "majority: any strict majority")],
        help_text="With a minimum overlap: when a pair that has the minimum is decided (docs/design.md).",
    )
    leaderboard_priority = models.BooleanField(
        default=False,
        help_text="Untouched pairs whose models' rating difference is least certain are handed out first.",
    )
    priorities_watermark = models.BigIntegerField(
        default=0, editable=False, help_text="Newest Judgment row counted in the pairs' queue priorities."
    )
    retest_rate = models.FloatField(
        default=0.1, help_text="Share of each reviewer's judged pairs shown again, left and right exchanged."
    )
    retest_gap = models.PositiveSmallIntegerField(
        default=5, help_text="Judgments a reviewer makes before a retest of an earlier pair comes back."
    )
    max_pairs_per_prompt = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Cap on pairs made from one prompt's responses; empty means all pairs."
    )
    assignment_minutes = models.PositiveSmallIntegerField(
        default=30, help_text="Minutes an assignment is held before it returns to the pool."
    )
    min_rationale_chars = models.PositiveSmallIntegerField(default=15)
    # Onboarding on gold, rationale checks and reviewers' own standing: docs/agreement.md, "Judgments worth
    # keeping".
    rationale_flag_chars = models.PositiveSmallIntegerField(
        default=40, help_text="A rationale shorter than this is kept but flagged too_short; 0 turns the flag off."
    )
    qualification_items = models.PositiveSmallIntegerField(
        default=0, help_text="Gold items a reviewer answers, with feedback, before any live item; 0: no round."
    )
    qualification_pass_mark = models.FloatField(
        default=0.8, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of the round's gold items a reviewer must get right to pass (0-1).",
    )
    qualification_attempts = models.PositiveSmallIntegerField(
        default=2, validators=[MinValueValidator(1)],
        help_text="Attempts at the round before a reviewer who fails is held until an admin lets them go on.",
    )
    gold_rate = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of live assignments that are gold items, mixed in unannounced (0-1).",
    )
    standing_min_judgments = models.PositiveSmallIntegerField(
        default=20, validators=[MinValueValidator(1)],
        help_text="Judgments a reviewer makes before their page shows their own standing.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        """Overlap settings that cannot work together are refused in one line (the admin's form shows it)."""
        from django.core.exceptions import ValidationError

        from annotate.review.overlap import OverlapSettingsRejected, overlap_settings_check

        super().clean()
        try:
            overlap_settings_check(overlap=self.overlap, min_overlap=self.min_overlap, stop_rule=self.overlap_stop_rule)
        except OverlapSettingsRejected as exc:
            raise ValidationError(str(exc)) from None
        stored = Project.objects.filter(pk=self.pk).values_list("qualification_items", "qualification_attempts").first()
        changed = stored is not None and stored != (self.qualification_items, self.qualification_attempts)
        if changed and (short := qualification_gold_short(self)) is not None:
            raise ValidationError(short)

    @property
    def overlap_is_adaptive(self) -> bool:
        """A minimum overlap below the maximum is set: decided pairs stop early, split ones go on."""
        return self.min_overlap is not None and self.min_overlap < self.overlap


class CriteriaVersion(models.Model):
    """Written criteria; loading a new file makes a new version and old judgments keep theirs."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="criteria_versions")
    version = models.PositiveIntegerField()
    instructions = models.TextField(blank=True)
    items = models.JSONField(help_text='[{"key": "correct", "text": "Every fact and every step is right."}]')
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "version"], name="criteria_version_unique")]
        ordering = ["project", "-version"]

    def __str__(self) -> str:
        return f"{self.project.slug} criteria v{self.version}"

    @property
    def keys(self) -> list[str]:
        return [item["key"] for item in self.items]


class Prompt(models.Model):
    # Indexed by prompt_external_id_unique and prompt_content_key, which start with it: an index of its
    # own would only be one more to write for every imported prompt.
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="prompts", db_index=False)
    external_id = models.CharField(max_length=200, help_text="prompt_id from the import file.")
    messages = models.JSONField(help_text='Chat messages: [{"role": "user", "content": "..."}]')
    # Which prompts are "the same prompt" (training.snapshot.prompt_key of the messages): the export
    # splits by it, so two ids with one text never land on both sides, without reading the texts.
    content_key = models.CharField(max_length=64, editable=False, help_text="sha256 of the prompt's messages.")
    tags = models.JSONField(default=list, blank=True)
    gold_response = models.ForeignKey(  # indexed by prompt_gold_response, where set
        "Response", null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False,
        help_text="Honeypot: the response known to be better.",
    )
    # A database default too: the import writes prompts with its own INSERT, which does not name this column.
    gold_reason = models.TextField(
        blank=True, default="", db_default="",
        help_text="Why the gold response is better: shown after a qualification answer.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "external_id"], name="prompt_external_id_unique")]
        indexes = [
            models.Index(fields=["project", "content_key"], name="prompt_content_key"),
            # Most prompts have no gold answer; only the ones that do are worth an index entry.
            models.Index(fields=["gold_response"], condition=Q(gold_response__isnull=False), name="prompt_gold_response"),
        ]

    def __str__(self) -> str:
        return self.external_id

    def save(self, *args, **kwargs) -> None:
        # The import writes the key itself, in bulk; this keeps it true for prompts made or edited one by one.
        self.content_key = prompt_key(self.messages)
        if kwargs.get("update_fields") is not None and "messages" in kwargs["update_fields"]:
            kwargs["update_fields"] = {*kwargs["update_fields"], "content_key"}
        super().save(*args, **kwargs)


class Response(models.Model):
    """An answer to a prompt. Its model and version are never shown to reviewers."""

    # indexed by response_unique_per_prompt
    prompt = models.ForeignKey(Prompt, on_delete=models.PROTECT, related_name="responses", db_index=False)
    text = models.TextField()
    text_sha256 = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    model_version = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["prompt", "model", "model_version", "text_sha256"], name="response_unique_per_prompt"
            )
        ]

    def __str__(self) -> str:
        return f"{self.prompt.external_id}: {self.model}@{self.model_version}"


PAIR_CLOSED = 32767  # Pair.open_fill of a pair that has the reviewers it needs: past every open pair

_VOTE_COLUMNS = [f"votes_{winner}" for winner in WINNERS]
_TOP_VOTES = Greatest(*_VOTE_COLUMNS)
_ALL_VOTES = sum((models.F(name) for name in _VOTE_COLUMNS[1:]), models.F(_VOTE_COLUMNS[0]))
_CHOICES_AT_TOP = sum((models.Case(models.When(**{name: _TOP_VOTES}, then=1), default=0) for name in _VOTE_COLUMNS[1:]),
                      models.Case(models.When(**{_VOTE_COLUMNS[0]: _TOP_VOTES}, then=1), default=0))


class Pair(models.Model):
    # No index of its own where a composite index starts with the same column (pair_open_slots here):
    # each one would be written again on every assignment, for no lookup the composite cannot serve.
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="pairs", db_index=False)
    prompt = models.ForeignKey(Prompt, on_delete=models.PROTECT, related_name="pairs")
    response_a = models.ForeignKey(Response, on_delete=models.PROTECT, related_name="+", db_index=False)  # pair_unique
    response_b = models.ForeignKey(Response, on_delete=models.PROTECT, related_name="+")
    # Live (not expired) first-time assignments; changed only under this row's lock.
    assigned_count = models.PositiveSmallIntegerField(default=0)
    # Adaptive overlap: the reviewers this pair needs, decided from its votes when a judgment lands or is
    # undone (annotate/review/overlap.py); 0 until then, and always 0 with a fixed overlap: the project's.
    reviewers_needed = models.PositiveSmallIntegerField(default=0, db_default=0)
    # The queue's order: assigned_count while the pair is open, PAIR_CLOSED once it has the reviewers it
    # needs, so the queue's index skips decided pairs instead of walking past them on every request.
    open_fill = models.GeneratedField(
        expression=models.Case(
            models.When(Q(reviewers_needed__gt=0, assigned_count__gte=models.F("reviewers_needed")),
                        then=models.Value(PAIR_CLOSED)),
            default=models.F("assigned_count"),
            output_field=models.PositiveSmallIntegerField(),
        ),
        output_field=models.PositiveSmallIntegerField(),
        db_persist=True,
    )
    # Leaderboard projects: higher first among untouched pairs (how uncertain its models' order is, 0-1000).
    queue_priority = models.PositiveSmallIntegerField(default=0, db_default=0)
    # The pair's counted votes (the current judgments of its live first-time assignments, as the export counts
    # them), one counter per choice in WINNERS order. Changed only with a vote, in its transaction, under this
    # row's lock (queue_sql.judgment_insert, judgments.judgment_undo_last); pair_votes_recount writes them from
    # the judgments after rows were written in bulk. Adjudication's queue reads them instead of every judgment.
    votes_a = models.PositiveSmallIntegerField(default=0, db_default=0)
    votes_b = models.PositiveSmallIntegerField(default=0, db_default=0)
    votes_tie = models.PositiveSmallIntegerField(default=0, db_default=0)
    votes_both_bad = models.PositiveSmallIntegerField(default=0, db_default=0)
    # No strict majority (annotate/review/consensus.py: strict_majority): two or more choices share the top count.
    votes_split = models.GeneratedField(
        expression=models.ExpressionWrapper(Q(GreaterThan(_TOP_VOTES, 0), GreaterThan(_CHOICES_AT_TOP, 1)),
                                            output_field=models.BooleanField()),
        output_field=models.BooleanField(),
        db_persist=True,
    )
    # The votes are not all for one choice: the pairs a widened adjudication queue (max_share < 1) looks among.
    votes_contested = models.GeneratedField(
        expression=models.ExpressionWrapper(Q(LessThan(_TOP_VOTES, _ALL_VOTES)), output_field=models.BooleanField()),
        output_field=models.BooleanField(),
        db_persist=True,
    )
    # An adjudicator has ruled on the pair (set with its first ruling); it leaves the adjudication queue.
    ruled = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["response_a", "response_b"], name="pair_unique"),
            models.CheckConstraint(condition=Q(response_a__lt=models.F("response_b")), name="pair_ordered"),
        ]
        indexes = [
            models.Index(fields=["project", "open_fill", "queue_priority", "id"], name="pair_open_slots"),
            # Adjudication's queue, oldest first: only the pairs waiting for a ruling, so however many pairs were
            # ruled or agreed on before them, `next` reads a handful of index entries.
            models.Index(fields=["project", "id"], condition=Q(votes_split=True, ruled=False), name="pair_split_unruled"),
            models.Index(fields=["project", "id"], condition=Q(votes_contested=True, ruled=False),
                         name="pair_contested_unruled"),
        ]

    def __str__(self) -> str:
        return f"pair {self.pk} of {self.prompt.external_id}"


class Assignment(models.Model):
    class Status(models.TextChoices):
        SCHEDULED = "scheduled"  # a retest waiting for its turn
        ACTIVE = "active"
        COMPLETED = "completed"
        EXPIRED = "expired"
        CANCELLED = "cancelled"

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="assignments")
    pair = models.ForeignKey(Pair, on_delete=models.PROTECT, related_name="assignments")
    reviewer = models.ForeignKey(  # indexed by assignment_reviewer_status
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="assignments", db_index=False
    )
    a_on_left = models.BooleanField(help_text="Response a was shown on the left.")
    is_retest = models.BooleanField(default=False)
    retest_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="retests")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    due_after_judgments = models.PositiveIntegerField(
        null=True, blank=True, help_text="A scheduled retest is served once the reviewer has judged this many."
    )
    criteria_version = models.ForeignKey(
        CriteriaVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="The criteria shown with this assignment; set when it is first served.",
    )
    served_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    current_judgment = models.OneToOneField(
        "Judgment", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # The database itself refuses a second first-time assignment of a pair to one reviewer.
            models.UniqueConstraint(
                fields=["pair", "reviewer"], condition=Q(is_retest=False), name="assignment_once_per_reviewer"
            ),
        ]
        indexes = [
            models.Index(fields=["reviewer", "project", "status"], name="assignment_reviewer_status"),
            models.Index(fields=["status", "expires_at"], name="assignment_expiry"),
            # What a reviewer holds or has waiting: read on every queue request, a handful of rows
            # however long the reviewer's history grows.
            models.Index(
                fields=["reviewer", "project"], condition=Q(status__in=["active", "scheduled"]), name="assignment_open"
            ),
        ]

    def __str__(self) -> str:
        return f"assignment {self.pk} ({self.status})"


class ReviewerTally(models.Model):
    """A reviewer's counts in a project, kept up to date by judging and undoing.

    The queue reads them on every request (is a retest due? how far along is the reviewer?); counting
    the reviewer's whole history each time would cost more the more they had judged. Changed only in
    the transaction that completes or reopens an assignment, under that assignment's row lock.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    judged = models.PositiveIntegerField(default=0, help_text="Completed assignments, retests included.")
    judged_once = models.PositiveIntegerField(default=0, help_text="Completed first-time assignments.")
    retests = models.PositiveIntegerField(default=0, help_text="Retests scheduled and not cancelled.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "reviewer"], name="tally_per_reviewer")]

    def __str__(self) -> str:
        return f"tally of reviewer {self.reviewer_id} in project {self.project_id}"


class Judgment(models.Model):
    """One revision of a reviewer's judgment of an assignment; never edited, never deleted."""

    # Stored un-swapped: a, b, tie, both_bad (annotate/review/choices.py).
    Winner = models.TextChoices("Winner", {name.upper(): name for name in WINNERS})

    # indexed by judgment_revision_unique
    assignment = models.ForeignKey(Assignment, on_delete=models.PROTECT, related_name="judgments", db_index=False)
    pair = models.ForeignKey(Pair, on_delete=models.PROTECT, related_name="judgments")
    reviewer = models.ForeignKey(  # indexed by judgment_reviewer_time
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="judgments", db_index=False
    )
    revision = models.PositiveIntegerField()
    retracted = models.BooleanField(default=False, help_text="This revision undoes the one before it.")
    winner = models.CharField(max_length=8, choices=Winner.choices, blank=True)
    strength = models.PositiveSmallIntegerField(null=True, blank=True)
    criteria = models.JSONField(default=dict, blank=True, help_text='Un-swapped: {"correct": "a"}')
    criteria_version = models.ForeignKey(CriteriaVersion, on_delete=models.PROTECT, related_name="judgments")
    rationale = models.TextField(blank=True)
    seconds_spent = models.FloatField(null=True, blank=True)
    client_key = models.UUIDField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["assignment", "revision"], name="judgment_revision_unique"),
        ]
        indexes = [models.Index(fields=["reviewer", "created_at"], name="judgment_reviewer_time")]

    def __str__(self) -> str:
        return f"judgment {self.pk} r{self.revision}"


class QualificationAttempt(models.Model):
    """One attempt of a reviewer at a project's qualification round: gold items with feedback.

    The reviewer's latest attempt says where they stand: running (live items wait), passed (live items
    open), failed (a new attempt starts on their next request while attempts are left; after the last
    one they are held until an admin lets them try again or passes them). An admin who lets a reviewer
    go on in the middle of an attempt ends it as stopped (never scored) and starts the next one.
    """

    class Status(models.TextChoices):
        RUNNING = "running"
        PASSED = "passed"
        FAILED = "failed"
        STOPPED = "stopped"

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    number = models.PositiveSmallIntegerField(help_text="1 for the first attempt.")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.RUNNING)
    items = models.PositiveSmallIntegerField(help_text="Gold items the attempt asks for (the project's, at its start).")
    pass_mark = models.FloatField(help_text="The project's pass mark at the attempt's start.")
    answered = models.PositiveSmallIntegerField(default=0)
    correct = models.PositiveSmallIntegerField(default=0)
    decided_by = models.CharField(
        max_length=160, blank=True, help_text="Empty when the answers decided it; else the admin who did."
    )
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Also the index that finds a reviewer's latest attempt (read on each of their queue requests).
            models.UniqueConstraint(fields=["project", "reviewer", "number"], name="qualification_attempt_unique"),
        ]

    def __str__(self) -> str:
        return f"qualification attempt {self.number} of reviewer {self.reviewer_id} ({self.status})"


class GoldCheck(models.Model):
    """A gold pair given to a reviewer as a check: in a qualification attempt, or mixed into live work.

    `expected` is the gold answer as stored (a or b); the reviewer's own judgment is compared with it
    when they submit (`correct`). A check mixed into live work is never announced to the reviewer.
    """

    assignment = models.OneToOneField(Assignment, on_delete=models.PROTECT, primary_key=True, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+",
                                 db_index=False)
    attempt = models.ForeignKey(QualificationAttempt, null=True, blank=True, on_delete=models.PROTECT,
                                related_name="checks", help_text="Empty for a check mixed into live work.")
    expected = models.CharField(max_length=1, help_text="The gold answer, un-swapped: a or b.")
    judgment = models.ForeignKey(Judgment, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                 db_index=False, help_text="The judgment that answered it last.")
    correct = models.BooleanField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["project", "reviewer"], name="gold_check_reviewer")]

    def __str__(self) -> str:
        return f"gold check of assignment {self.assignment_id}"


def gold_pairs(project: Project) -> models.QuerySet:
    """The project's gold pairs: pairs that hold their prompt's gold response, so their better answer is known."""
    return Pair.objects.filter(project=project, prompt__gold_response__isnull=False).filter(
        Q(prompt__gold_response=models.F("response_a")) | Q(prompt__gold_response=models.F("response_b")))


def qualification_gold_short(project: Project) -> str | None:
    """One line saying that the project's gold pairs cannot fill every attempt of its qualification round
    (items × attempts, each attempt with gold pairs the reviewer has not seen); None when they can, when
    there is no round, or before anything is imported (nothing to count yet)."""
    if not project.qualification_items or project.pk is None:
        return None
    needed = project.qualification_items * project.qualification_attempts
    have = gold_pairs(project).count()
    if have >= needed or not Pair.objects.filter(project=project).exists():
        return None
    return (f"qualification items {project.qualification_items} x attempts {project.qualification_attempts} need "
            f"{needed} gold pairs but project {project.slug!r} has {have}; import more gold items or lower the "
            "qualification items or attempts")


# A live judgment is any judgment outside the qualification round. The round's answers (gold checks of an
# attempt) count only in the round's own figures: never as votes, nor in agreement, gold accuracy, model
# ratings, adaptive overlap, adjudication or exports (docs/agreement.md). This is the one definition, on
# an assignment: `live_assignment()` for the ORM, `live_assignment_sql(alias)` for raw SQL.
def live_assignment() -> models.Exists:
    """Filter on Assignment: the assignment is not an item of a qualification attempt."""
    return ~models.Exists(GoldCheck.objects.filter(assignment_id=models.OuterRef("pk"), attempt__isnull=False))


def live_assignment_sql(alias: str) -> str:
    """live_assignment() as a SQL condition on the review_assignment row named `alias`."""
    return (f"NOT EXISTS (SELECT 1 FROM {GoldCheck._meta.db_table} qualification_check "
            f"WHERE qualification_check.assignment_id = {alias}.id AND qualification_check.attempt_id IS NOT NULL)")


class RationaleCheck(models.Model):
    """What the rationale checks found about one judgment's rationale (annotate/review/rationale.py).

    One row per judgment revision that has a rationale, written with it. The typing signals are counts
    and seconds reported by the reviewer page; no keystroke and no pasted text is stored.
    """

    judgment = models.OneToOneField(Judgment, on_delete=models.PROTECT, primary_key=True,
                                    related_name="rationale_check")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+",
                                 db_index=False)
    pair = models.ForeignKey(Pair, on_delete=models.PROTECT, related_name="+", db_index=False)
    text_key = models.CharField(max_length=64, help_text="sha256 of the normalised rationale: finds reuse.")
    chars = models.PositiveIntegerField()
    typing_seconds = models.FloatField(null=True, blank=True)
    typed_chars = models.PositiveIntegerField(null=True, blank=True)
    pasted_chars = models.PositiveIntegerField(null=True, blank=True)
    paste_events = models.PositiveIntegerField(null=True, blank=True)
    too_short = models.BooleanField(default=False)
    reused = models.BooleanField(default=False)
    near_duplicate = models.BooleanField(default=False)
    pasted = models.BooleanField(default=False)
    flagged = models.BooleanField(default=False, help_text="Any of the four flags.")

    class Meta:
        indexes = [
            # The reuse check: has this reviewer written this text before (unflagged ones first)?
            models.Index(fields=["project", "reviewer", "text_key", "reused"], name="rationale_reuse"),
            # The dashboard's flag counts read only flagged rows.
            models.Index(fields=["project", "reviewer"], condition=Q(flagged=True), name="rationale_flagged"),
        ]

    def __str__(self) -> str:
        return f"rationale check of judgment {self.judgment_id}"


class ReviewerStanding(models.Model):
    """The figures a reviewer's page last showed them of their own standing (annotate/quality/standing.py).

    Kept so that the figures move only after the reviewer has made several more judgments of their own
    (STANDING_STEP): a figure that changed after each judgment would tell them, by the difference, what the
    other reviewers chose on the pair they just judged.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    judged = models.PositiveIntegerField(help_text="The reviewer's judgments (retests included) the figures cover.")
    figures = models.JSONField(help_text="gold_accuracy, retest_consistency, agreement_with_others as shown.")
    report_judgments = models.PositiveIntegerField(help_text="The reviewer's judgments the agreement report counted.")
    as_of = models.DateTimeField(help_text="When the agreement report these figures come from was computed.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "reviewer"], name="standing_per_reviewer")]

    def __str__(self) -> str:
        return f"standing of reviewer {self.reviewer_id} in project {self.project_id} after {self.judged}"


class AdjudicationAssignment(models.Model):
    """One adjudicator's turn at one pair, shown in their own random left/right order."""

    class Status(models.TextChoices):
        ACTIVE = "active"
        COMPLETED = "completed"
        EXPIRED = "expired"

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    pair = models.ForeignKey(Pair, on_delete=models.PROTECT, related_name="+")
    adjudicator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    a_on_left = models.BooleanField(help_text="Response a was shown on the left.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    served_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            # Two adjudicators never hold one pair at once.
            models.UniqueConstraint(fields=["pair"], condition=Q(status="active"), name="adjudication_one_open"),
        ]
        indexes = [models.Index(fields=["project", "status"], name="adjudication_assignment_open")]

    def __str__(self) -> str:
        return f"adjudication assignment {self.pk} ({self.status})"


class Adjudication(models.Model):
    """An adjudicator's ruling on a pair; append-only: ruling again is a new revision, the latest counts.

    Stored un-swapped like a judgment (winner a, b, tie or both_bad), with the adjudicator's rationale.
    """

    Winner = Judgment.Winner

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    pair = models.ForeignKey(Pair, on_delete=models.PROTECT, related_name="+", db_index=False)  # adjudication_revision
    assignment = models.ForeignKey(AdjudicationAssignment, on_delete=models.PROTECT, related_name="+")
    adjudicator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    revision = models.PositiveIntegerField()
    winner = models.CharField(max_length=8, choices=Winner.choices)
    strength = models.PositiveSmallIntegerField(null=True, blank=True)
    criteria = models.JSONField(default=dict, blank=True, help_text='Un-swapped: {"correct": "a"}')
    rationale = models.TextField()
    client_key = models.UUIDField(unique=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pair", "revision"], name="adjudication_revision_unique"),
        ]
        indexes = [models.Index(fields=["project", "id"], name="adjudication_project")]

    def __str__(self) -> str:
        return f"adjudication {self.pk} of pair {self.pair_id} r{self.revision}"

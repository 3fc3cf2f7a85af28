"""What Pairwise keeps about review work.

Project → CriteriaVersion → Prompt → Response → Pair → Assignment → Judgment. Judgments are stored
un-swapped ("response a preferred over b"), append-only: an edit or an undo is a new revision row,
and Assignment.current_judgment points at the revision that counts.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from annotate.review.choices import WINNERS
from training.snapshot import prompt_key


class Project(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    overlap = models.PositiveSmallIntegerField(default=3, help_text="Distinct reviewers per pair.")
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
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


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


class Pair(models.Model):
    # No index of its own where a composite index starts with the same column (pair_open_slots here):
    # each one would be written again on every assignment, for no lookup the composite cannot serve.
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="pairs", db_index=False)
    prompt = models.ForeignKey(Prompt, on_delete=models.PROTECT, related_name="pairs")
    response_a = models.ForeignKey(Response, on_delete=models.PROTECT, related_name="+", db_index=False)  # pair_unique
    response_b = models.ForeignKey(Response, on_delete=models.PROTECT, related_name="+")
    # Live (not expired) first-time assignments; changed only under this row's lock.
    assigned_count = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["response_a", "response_b"], name="pair_unique"),
            models.CheckConstraint(condition=Q(response_a__lt=models.F("response_b")), name="pair_ordered"),
        ]
        indexes = [models.Index(fields=["project", "assigned_count", "id"], name="pair_open_slots")]

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

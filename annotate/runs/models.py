"""Training runs and the checkpoints they start from and make (docs/runs.md).

A Run is one `python -m training ...` command: what it was given (kind, config, snapshot or task file,
base checkpoint), where it ran (local subprocess or a Slurm job) and what it left (metrics, ledger, log
tail, exit code, the checkpoint it made). The run folder on disk stays the record of truth; these rows
mirror it for pages and the API. A Checkpoint is identified by its content hash (training/run_folder.py);
its parent and the run that made it give the lineage, its origin, which is written once, when it is created.
"""

from django.conf import settings
from django.db import models

from training.text_input import name_key


class OriginWrittenOnce(models.Model):
    """A model whose ORIGIN_FIELDS (where it came from) are written once: a save that would change a stored one is a
    bug, refused here rather than left to rewrite the lineage. (QuerySet.update bypasses it; nothing updates these.)"""

    ORIGIN_FIELDS: tuple[str, ...] = ()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        stored = getattr(self, "_origin_as_stored", None)
        if stored is not None:
            changed = [name for name, value in stored.items() if self.__dict__.get(name) != value]
            if changed:
                raise ValueError(f"{self.origin_label}: its origin ({', '.join(changed)}) is written once")
        super().save(*args, **kwargs)
        self._origin_as_stored = {name: self.__dict__[name] for name in self.ORIGIN_FIELDS if name in self.__dict__}

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        instance._origin_as_stored = {name: instance.__dict__[name] for name in cls.ORIGIN_FIELDS
                                      if name in instance.__dict__}  # a deferred one is not known yet
        return instance

    @property
    def origin_label(self) -> str:
        return f"{self._meta.model_name} {str(self)!r}"


class Checkpoint(OriginWrittenOnce):
    name = models.CharField(max_length=200, unique=True, help_text="Short name shown on pages and used in the API.")
    # Two names that look alike ("TINY5" beside "tiny5", full-width letters) are one name: the database holds one
    # checkpoint a key (training.text_input.name_key), set from the name on every save.
    name_key = models.CharField(max_length=400, unique=True, editable=False)
    uri = models.CharField(max_length=1000, help_text="A local folder or a URI (s3://..., hf://...).")
    content_hash = models.CharField(max_length=80, blank=True, db_index=True,
                                    help_text="sha256 over the weight files; empty for a URI not read here.")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    run = models.OneToOneField("Run", null=True, blank=True, on_delete=models.PROTECT,
                               related_name="output_checkpoint", help_text="The run that made it.")
    registered_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                      related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    ORIGIN_FIELDS = ("parent_id", "run_id")  # its parent and the run that made it

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        self.name_key = name_key(self.name)
        if kwargs.get("update_fields") is not None and "name" in kwargs["update_fields"]:
            kwargs["update_fields"] = {*kwargs["update_fields"], "name_key"}
        super().save(*args, **kwargs)


class ReadyTaskSets(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(status=TaskSet.Status.READY)


class TaskSet(models.Model):
    """A task file the app keeps (docs/runs.md, "Task sets"): made from the task families or uploaded, checked by
    the training command's own loader, stored once under the run input folder and known by its content hash.

    An upload is checked off the request (a Celery task): until then it is `checking`, then `ready` or `refused`
    with its one line. `objects` holds only ready sets, the ones a run may read; `records` holds every set."""

    class Source(models.TextChoices):
        MADE = "made"
        UPLOADED = "uploaded"
        PROMPTS = "prompts"  # open tasks from a project's prompts

    class Status(models.TextChoices):
        CHECKING = "checking"
        READY = "ready"
        REFUSED = "refused"

    name = models.CharField(max_length=200, unique=True)
    path = models.CharField(max_length=1000, help_text="The JSONL file, under the run input folders.")
    sha256 = models.CharField(max_length=64, unique=True, help_text="sha256 of the file's bytes, as run.json records.")
    count = models.PositiveIntegerField()
    variant = models.CharField(max_length=20, blank=True, help_text="train or heldout, when every task says so.")
    families = models.JSONField(default=dict, help_text="Tasks per family (or per kind where a row names none).")
    scorers = models.JSONField(default=dict, help_text="The scorer version of each kind of task in it.")
    source = models.CharField(max_length=10, choices=Source.choices)
    recipe = models.JSONField(null=True, blank=True, help_text="How a made set was drawn: families, variant, n, seed "
                                                               "(or project, variant, test_ratio, seed).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.READY)
    error = models.TextField(blank=True, default="", help_text="Why the check refused it, in one line.")

    records = models.Manager()  # the default manager (the admin, lookups): every set, checking and refused too
    objects = ReadyTaskSets()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Run(OriginWrittenOnce):
    class Kind(models.TextChoices):
        DPO = "dpo"
        GRPO = "grpo"
        EVAL = "eval"
        SAMPLE = "sample"
        SFT = "sft"
        REWARD = "reward"

    class Status(models.TextChoices):
        CHECKING = "checking", "checking config"  # recorded; the training command's --check runs off the request
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Backend(models.TextChoices):
        LOCAL = "local"
        SLURM = "slurm"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    kind = models.CharField(max_length=8, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    backend = models.CharField(max_length=8, choices=Backend.choices, default=Backend.LOCAL)
    config = models.JSONField(default=dict, help_text="The config file's keys as the command gets them.")
    resolved_config = models.JSONField(null=True, blank=True,
                                       help_text="Every key with defaults filled, as the training CLI resolved it.")
    snapshot_path = models.CharField(max_length=1000, blank=True)
    snapshot_manifest = models.JSONField(null=True, blank=True,
                                         help_text="The snapshot's manifest: id, counts, criteria version, filters.")
    tasks_path = models.CharField(max_length=1000, blank=True)
    export = models.ForeignKey("exports.Export", null=True, blank=True, on_delete=models.PROTECT, related_name="runs",
                               help_text="The app's export whose snapshot a DPO or reward run trains on, when picked.")
    task_set = models.ForeignKey("TaskSet", null=True, blank=True, on_delete=models.PROTECT, related_name="runs",
                                 help_text="The app's task set a GRPO run or an evaluation reads, when it was picked.")
    base_checkpoint = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="runs_from")
    reward_model = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="runs_scored",
                                     help_text="The reward-model checkpoint a GRPO run was scored by, when picked.")
    folder = models.CharField(max_length=1000, help_text="The run folder (the config's output_dir).")
    record = models.JSONField(null=True, blank=True, help_text="run.json as last read.")
    metrics = models.JSONField(default=list, blank=True, help_text="metrics.jsonl rows read so far.")
    ledger = models.JSONField(null=True, blank=True, help_text="ledger.json, once written.")
    log_tail = models.TextField(blank=True, help_text="The end of the command's output.")
    exit_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, help_text="Why the run failed or was cancelled, in one line.")
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True, help_text="The Celery worker that runs it (local).")
    host = models.CharField(max_length=200, blank=True)
    pid = models.IntegerField(null=True, blank=True, help_text="The training process, leader of its own group.")
    heartbeat_at = models.DateTimeField(null=True, blank=True,
                                        help_text="Last time the worker following a running run said it still does.")
    slurm_job_id = models.CharField(max_length=40, blank=True)
    launched_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "backend"], name="run_status_backend")]

    # What it read and started from: the base checkpoint, the export or task set, the reward model that scored it.
    ORIGIN_FIELDS = ("base_checkpoint_id", "export_id", "task_set_id", "reward_model_id")

    def __str__(self) -> str:
        return f"run {self.pk} ({self.kind}, {self.status})"

    @property
    def origin_label(self) -> str:
        return f"run {self.pk}"

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def made_checkpoint(self) -> Checkpoint | None:
        """The checkpoint this run made, or None (the reverse one-to-one raises when there is none)."""
        try:
            return self.output_checkpoint
        except Checkpoint.DoesNotExist:
            return None


class AuditBatch(models.Model):
    """Answers a GRPO run rewarded in full, sampled for reviewers to judge whether their reasoning holds."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="audit_batches")
    checkpoint = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="audit_batches", help_text="The checkpoint the run made.")
    overlap = models.PositiveSmallIntegerField(default=3, help_text="Reviewers per answer.")
    seed = models.IntegerField(default=0)
    spread_over_steps = models.BooleanField(
        default=False, help_text="Drawn evenly from each step window's most rewarded answers, not the run's.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"audit batch {self.pk} of run {self.run_id}"


class AuditItem(models.Model):
    """One rewarded answer. Its rollout id, run and checkpoint stay on the server; reviewers see the prompt
    and the answer only."""

    batch = models.ForeignKey(AuditBatch, on_delete=models.PROTECT, related_name="items")
    rollout_id = models.CharField(max_length=200)
    task_id = models.CharField(max_length=200)
    prompt = models.TextField()
    answer = models.TextField()
    reward = models.FloatField()
    scorer = models.CharField(max_length=200, blank=True)
    policy_step = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["batch", "rollout_id"], name="audit_item_once_per_batch")]

    def __str__(self) -> str:
        return f"audit item {self.pk}"


class AuditJudgment(models.Model):
    class Verdict(models.TextChoices):
        HOLDS = "yes", "yes, the reasoning holds"
        BROKEN = "no", "no, the reasoning is broken"
        UNSURE = "unsure", "unsure"

    item = models.ForeignKey(AuditItem, on_delete=models.PROTECT, related_name="judgments")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    verdict = models.CharField(max_length=6, choices=Verdict.choices)
    rationale = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["item", "reviewer"], name="audit_judgment_once_per_reviewer")]

    def __str__(self) -> str:
        return f"{self.verdict} on audit item {self.item_id}"

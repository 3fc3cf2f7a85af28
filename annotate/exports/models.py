"""The record of each snapshot export: what was asked for, by whom, how far it got, and where it lies.

The snapshot itself is a folder written through `training.snapshot.SnapshotWriter`; this row only
points at it. An export goes queued → running → done, or → failed with the reason, or → cancelled by a
user (a queued one at once, a running one at its next heartbeat); a failed export can be retried, which runs it
again under a new attempt number.
"""

from django.conf import settings
from django.db import models


class Export(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    project = models.ForeignKey("review.Project", on_delete=models.PROTECT, related_name="exports")
    status = models.CharField(max_length=9, choices=Status.choices, default=Status.QUEUED)
    filters = models.JSONField(help_text="The export's filters, split and format, as normalised by the exporter.")
    stage = models.CharField(max_length=40, blank=True, help_text="What the running export is doing now.")
    pairs_done = models.PositiveIntegerField(default=0)
    pairs_total = models.PositiveIntegerField(null=True, blank=True)
    out_dir = models.CharField(max_length=1000, help_text="The snapshot folder; it exists only once the export is done.")
    snapshot_id = models.CharField(max_length=100, blank=True)
    counts = models.JSONField(null=True, blank=True, help_text="The manifest's counts, once done.")
    error = models.TextField(blank=True, help_text="Why the export failed or was cancelled, in one line.")
    cancel_requested = models.BooleanField(
        default=False, help_text="A user asked the running export to stop; its worker stops it at its next heartbeat.")
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Who cancelled the export (or asked the running export to stop).")
    attempt = models.PositiveIntegerField(default=1, help_text="Bumped by each retry; a task runs only its own attempt.")
    worker = models.CharField(max_length=200, blank=True, help_text="Who runs the current attempt.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Last sign of life of a running export.")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="export_status_heartbeat")]

    def __str__(self) -> str:
        return f"export {self.pk} of {self.project_id} ({self.status})"

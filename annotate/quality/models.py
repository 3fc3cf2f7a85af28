"""The stored agreement report of each project, so that reading it costs a row, not a recomputation.

A report over a million judgments takes seconds and hundreds of megabytes; the page and the API
serve the stored one and a Celery task recomputes it off the request path (annotate/quality/services.py).
Whether it is out of date is read from the judgments themselves when someone looks, never written on
the judgment hot path: ``judgment_watermark`` is the newest Judgment row of the project the report
covers, and every submit, undo and revision adds a newer one.
"""

from django.db import models


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

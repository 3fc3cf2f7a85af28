"""Stored reports computed while qualification answers still counted as live judgments are out of date: their
watermark goes back to 0, so the next look recomputes them without those answers."""

from django.db import migrations


def mark_stale(apps, schema_editor):
    apps.get_model("quality", "StoredAgreementReport").objects.update(judgment_watermark=0)


class Migration(migrations.Migration):

    dependencies = [
        ("quality", "0001_stored_agreement_report"),
        ("review", "0008_qualification_attempt_stopped"),
    ]

    operations = [migrations.RunPython(mark_stale, migrations.RunPython.noop)]

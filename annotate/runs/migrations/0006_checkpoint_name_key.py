"""Checkpoint names that look alike are one name: a key per name (NFKC, case folded), unique in the database.

Rows stored before the rule keep their names unless two share a key; then the later one's name gets its id, so that
both stay reachable and the unique index (the next migration, in a transaction of its own after these updates) can
be built."""

from django.db import migrations, models

from training.text_input import name_key


def fill_name_keys(apps, schema_editor):
    Checkpoint = apps.get_model("runs", "Checkpoint")
    taken = set()
    for checkpoint in Checkpoint.objects.order_by("id"):
        key = name_key(checkpoint.name)
        if key in taken:
            checkpoint.name = f"{checkpoint.name[:180]} ({checkpoint.pk})"
            key = name_key(checkpoint.name)
        taken.add(key)
        checkpoint.name_key = key
        checkpoint.save(update_fields=["name", "name_key"])


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0005_task_set_checked_off_the_request"),
    ]

    operations = [
        migrations.AddField(model_name="checkpoint", name="name_key",
                            field=models.CharField(default="", editable=False, max_length=400), preserve_default=False),
        migrations.RunPython(fill_name_keys, migrations.RunPython.noop),
    ]

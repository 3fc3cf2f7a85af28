"""Prompt.content_key: which prompts are "the same prompt" (training.snapshot.prompt_key), filled for the
prompts already stored, so an export puts two ids with one text on one side.

And fewer indexes to write per imported prompt and response: the foreign-key indexes that a composite
index already starts with go, and the gold answer's index keeps only the prompts that have one.
"""

import django.db.models.deletion
from django.db import migrations, models

from training.snapshot import prompt_key

BATCH = 2000


def fill_content_keys(apps, schema_editor):
    Prompt = apps.get_model("review", "Prompt")
    last_id = 0
    # By id ranges, not one open cursor: SQLite must not update a table while a read of it is still open.
    while batch := list(Prompt.objects.filter(id__gt=last_id).order_by("id").only("id", "messages")[:BATCH]):
        for prompt in batch:
            prompt.content_key = prompt_key(prompt.messages)
        Prompt.objects.bulk_update(batch, ["content_key"])
        last_id = batch[-1].id


class Migration(migrations.Migration):

    dependencies = [
        ('review', '0003_drop_indexes_covered_by_composites'),
    ]

    operations = [
        migrations.AddField(
            model_name='prompt',
            name='content_key',
            field=models.CharField(default='', editable=False, help_text="sha256 of the prompt's messages.", max_length=64),
            preserve_default=False,
        ),
        migrations.RunPython(fill_content_keys, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name='prompt',
            index=models.Index(fields=['project', 'content_key'], name='prompt_content_key'),
        ),
        migrations.AlterField(
            model_name='prompt',
            name='gold_response',
            field=models.ForeignKey(blank=True, db_index=False, help_text='Honeypot: the response known to be better.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.response'),
        ),
        migrations.AlterField(
            model_name='prompt',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='prompts', to='review.project'),
        ),
        migrations.AlterField(
            model_name='response',
            name='prompt',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='responses', to='review.prompt'),
        ),
        migrations.AddIndex(
            model_name='prompt',
            index=models.Index(condition=models.Q(('gold_response__isnull', False)), fields=['gold_response'], name='prompt_gold_response'),
        ),
    ]

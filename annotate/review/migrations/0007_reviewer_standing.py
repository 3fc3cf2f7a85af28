"""A reviewer's standing as their page last showed it: the figures move only every few judgments of their own."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('review', '0006_adaptive_overlap'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ReviewerStanding',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('judged', models.PositiveIntegerField(help_text="The reviewer's judgments (retests included) the figures cover.")),
                ('figures', models.JSONField(help_text='gold_accuracy, retest_consistency, agreement_with_others as shown.')),
                ('report_judgments', models.PositiveIntegerField(help_text="The reviewer's judgments the agreement report counted.")),
                ('as_of', models.DateTimeField(help_text='When the agreement report these figures come from was computed.')),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='review.project')),
                ('reviewer', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('project', 'reviewer'), name='standing_per_reviewer')],
            },
        ),
    ]

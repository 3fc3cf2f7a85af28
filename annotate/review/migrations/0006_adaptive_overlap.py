"""Adaptive overlap and leaderboard priorities in the reviewer queue.

Projects get a minimum overlap (empty: the fixed overlap it always had), a stop rule and a leaderboard
switch. Pairs get the reviewers they need (0: the project's overlap, as every existing pair), a queue
priority, and `open_fill`, a stored generated column the queue's index is now ordered by: the pair's
assigned count while it is open, PAIR_CLOSED once it has what it needs. For every existing pair
open_fill equals assigned_count, so queues of existing projects go on exactly as before.
"""

from django.db import migrations, models

PAIR_CLOSED = 32767


class Migration(migrations.Migration):

    dependencies = [
        ('review', '0005_adjudication_onboarding'),
    ]

    operations = [
        migrations.AlterField(
            model_name='project',
            name='overlap',
            field=models.PositiveSmallIntegerField(default=3, help_text='Distinct reviewers per pair; with a minimum overlap, the most a split pair gets.'),
        ),
        migrations.AddField(
            model_name='project',
            name='min_overlap',
            field=models.PositiveSmallIntegerField(blank=True, help_text='Adaptive overlap: a pair whose votes are decided stops here; empty means a fixed overlap.', null=True),
        ),
        migrations.AddField(
            model_name='project',
            name='overlap_stop_rule',
            field=models.CharField(choices=[('lead2', 'lead2: the majority choice is two votes ahead of the runner-up'), ('settled', 'settled: no vote up to the maximum could change the winner'), ('majority', 'majority: any strict majority')], default='lead2', help_text='With a minimum overlap: when a pair that has the minimum is decided (docs/design.md).', max_length=8),
        ),
        migrations.AddField(
            model_name='project',
            name='leaderboard_priority',
            field=models.BooleanField(default=False, help_text="Untouched pairs whose models' rating difference is least certain are handed out first."),
        ),
        migrations.AddField(
            model_name='project',
            name='priorities_watermark',
            field=models.BigIntegerField(default=0, editable=False, help_text="Newest Judgment row counted in the pairs' queue priorities."),
        ),
        migrations.RemoveIndex(
            model_name='pair',
            name='pair_open_slots',
        ),
        migrations.AddField(
            model_name='pair',
            name='reviewers_needed',
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name='pair',
            name='queue_priority',
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name='pair',
            name='open_fill',
            field=models.GeneratedField(db_persist=True, expression=models.Case(models.When(models.Q(('assigned_count__gte', models.F('reviewers_needed')), ('reviewers_needed__gt', 0)), then=models.Value(PAIR_CLOSED)), default=models.F('assigned_count'), output_field=models.PositiveSmallIntegerField()), output_field=models.PositiveSmallIntegerField()),
        ),
        migrations.AddIndex(
            model_name='pair',
            index=models.Index(fields=['project', 'open_fill', 'queue_priority', 'id'], name='pair_open_slots'),
        ),
    ]

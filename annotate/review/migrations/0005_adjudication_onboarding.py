"""Onboarding on gold, rationale checks and adjudication: the project's settings for them, the gold
answer's reason, qualification attempts, gold checks, rationale checks, adjudication assignments and
rulings (docs/agreement.md, "Judgments worth keeping").

Prompt.gold_reason gets a database default too: the import writes prompts with its own INSERT.
"""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('review', '0004_prompt_content_key'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='project',
            name='gold_rate',
            field=models.FloatField(default=0.0, help_text='Share of live assignments that are gold items, mixed in unannounced (0-1).', validators=[django.core.validators.MinValueValidator(0.0), django.core.validators.MaxValueValidator(1.0)]),
        ),
        migrations.AddField(
            model_name='project',
            name='qualification_attempts',
            field=models.PositiveSmallIntegerField(default=2, help_text='Attempts at the round before a reviewer who fails is held until an admin lets them go on.', validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='project',
            name='qualification_items',
            field=models.PositiveSmallIntegerField(default=0, help_text='Gold items a reviewer answers, with feedback, before any live item; 0: no round.'),
        ),
        migrations.AddField(
            model_name='project',
            name='qualification_pass_mark',
            field=models.FloatField(default=0.8, help_text="Share of the round's gold items a reviewer must get right to pass (0-1).", validators=[django.core.validators.MinValueValidator(0.0), django.core.validators.MaxValueValidator(1.0)]),
        ),
        migrations.AddField(
            model_name='project',
            name='rationale_flag_chars',
            field=models.PositiveSmallIntegerField(default=40, help_text='A rationale shorter than this is kept but flagged too_short; 0 turns the flag off.'),
        ),
        migrations.AddField(
            model_name='project',
            name='standing_min_judgments',
            field=models.PositiveSmallIntegerField(default=20, help_text='Judgments a reviewer makes before their page shows their own standing.', validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='prompt',
            name='gold_reason',
            field=models.TextField(blank=True, db_default='', default='', help_text='Why the gold response is better: shown after a qualification answer.'),
        ),
        migrations.CreateModel(
            name='AdjudicationAssignment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('a_on_left', models.BooleanField(help_text='Response a was shown on the left.')),
                ('status', models.CharField(choices=[('active', 'Active'), ('completed', 'Completed'), ('expired', 'Expired')], default='active', max_length=10)),
                ('served_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField()),
                ('adjudicator', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('pair', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.pair')),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.project')),
            ],
        ),
        migrations.CreateModel(
            name='Adjudication',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('revision', models.PositiveIntegerField()),
                ('winner', models.CharField(choices=[('a', 'A'), ('b', 'B'), ('tie', 'Tie'), ('both_bad', 'Both Bad')], max_length=8)),
                ('strength', models.PositiveSmallIntegerField(blank=True, null=True)),
                ('criteria', models.JSONField(blank=True, default=dict, help_text='Un-swapped: {"correct": "a"}')),
                ('rationale', models.TextField()),
                ('client_key', models.UUIDField(unique=True)),
                ('created_at', models.DateTimeField()),
                ('adjudicator', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('pair', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.pair')),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.project')),
                ('assignment', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.adjudicationassignment')),
            ],
        ),
        migrations.CreateModel(
            name='QualificationAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveSmallIntegerField(help_text='1 for the first attempt.')),
                ('status', models.CharField(choices=[('running', 'Running'), ('passed', 'Passed'), ('failed', 'Failed')], default='running', max_length=8)),
                ('items', models.PositiveSmallIntegerField(help_text="Gold items the attempt asks for (the project's, at its start).")),
                ('pass_mark', models.FloatField(help_text="The project's pass mark at the attempt's start.")),
                ('answered', models.PositiveSmallIntegerField(default=0)),
                ('correct', models.PositiveSmallIntegerField(default=0)),
                ('decided_by', models.CharField(blank=True, help_text='Empty when the answers decided it; else the admin who did.', max_length=160)),
                ('started_at', models.DateTimeField()),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.project')),
                ('reviewer', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.CreateModel(
            name='GoldCheck',
            fields=[
                ('assignment', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, primary_key=True, related_name='+', serialize=False, to='review.assignment')),
                ('expected', models.CharField(help_text='The gold answer, un-swapped: a or b.', max_length=1)),
                ('correct', models.BooleanField(blank=True, null=True)),
                ('created_at', models.DateTimeField()),
                ('judgment', models.ForeignKey(blank=True, db_index=False, help_text='The judgment that answered it last.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.judgment')),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.project')),
                ('reviewer', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('attempt', models.ForeignKey(blank=True, help_text='Empty for a check mixed into live work.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='checks', to='review.qualificationattempt')),
            ],
        ),
        migrations.CreateModel(
            name='RationaleCheck',
            fields=[
                ('judgment', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, primary_key=True, related_name='rationale_check', serialize=False, to='review.judgment')),
                ('text_key', models.CharField(help_text='sha256 of the normalised rationale: finds reuse.', max_length=64)),
                ('chars', models.PositiveIntegerField()),
                ('typing_seconds', models.FloatField(blank=True, null=True)),
                ('typed_chars', models.PositiveIntegerField(blank=True, null=True)),
                ('pasted_chars', models.PositiveIntegerField(blank=True, null=True)),
                ('paste_events', models.PositiveIntegerField(blank=True, null=True)),
                ('too_short', models.BooleanField(default=False)),
                ('reused', models.BooleanField(default=False)),
                ('near_duplicate', models.BooleanField(default=False)),
                ('pasted', models.BooleanField(default=False)),
                ('flagged', models.BooleanField(default=False, help_text='Any of the four flags.')),
                ('pair', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.pair')),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='review.project')),
                ('reviewer', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.AddIndex(
            model_name='adjudicationassignment',
            index=models.Index(fields=['project', 'status'], name='adjudication_assignment_open'),
        ),
        migrations.AddConstraint(
            model_name='adjudicationassignment',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'active')), fields=('pair',), name='adjudication_one_open'),
        ),
        migrations.AddIndex(
            model_name='adjudication',
            index=models.Index(fields=['project', 'id'], name='adjudication_project'),
        ),
        migrations.AddConstraint(
            model_name='adjudication',
            constraint=models.UniqueConstraint(fields=('pair', 'revision'), name='adjudication_revision_unique'),
        ),
        migrations.AddConstraint(
            model_name='qualificationattempt',
            constraint=models.UniqueConstraint(fields=('project', 'reviewer', 'number'), name='qualification_attempt_unique'),
        ),
        migrations.AddIndex(
            model_name='goldcheck',
            index=models.Index(fields=['project', 'reviewer'], name='gold_check_reviewer'),
        ),
        migrations.AddIndex(
            model_name='rationalecheck',
            index=models.Index(fields=['project', 'reviewer', 'text_key', 'reused'], name='rationale_reuse'),
        ),
        migrations.AddIndex(
            model_name='rationalecheck',
            index=models.Index(condition=models.Q(('flagged', True)), fields=['project', 'reviewer'], name='rationale_flagged'),
        ),
    ]

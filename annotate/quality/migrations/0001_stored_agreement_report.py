import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('review', '0003_drop_indexes_covered_by_composites'),
    ]

    operations = [
        migrations.CreateModel(
            name='StoredAgreementReport',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('report', models.JSONField(blank=True, help_text='The agreement report; empty until first computed.', null=True)),
                ('bootstrap', models.PositiveIntegerField(default=0, help_text='Bootstrap resamples behind its intervals.')),
                ('computed_at', models.DateTimeField(blank=True, null=True)),
                ('compute_seconds', models.FloatField(blank=True, help_text='How long reading and computing took.', null=True)),
                ('judgment_watermark', models.BigIntegerField(default=0, help_text="Id of the project's newest Judgment row (any revision) the report covers.")),
                ('judgments_covered', models.PositiveIntegerField(default=0, help_text='Current judgments in the report.')),
                ('recompute_requested_at', models.DateTimeField(blank=True, help_text='A recompute was queued then and has not finished; one at a time.', null=True)),
                ('project', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='stored_agreement_report', to='review.project')),
            ],
        ),
    ]

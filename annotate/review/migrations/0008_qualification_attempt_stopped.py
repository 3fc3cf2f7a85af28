"""A qualification attempt an admin ended before it was scored is stopped."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('review', '0007_reviewer_standing'),
    ]

    operations = [
        migrations.AlterField(
            model_name='qualificationattempt',
            name='status',
            field=models.CharField(choices=[('running', 'Running'), ('passed', 'Passed'), ('failed', 'Failed'), ('stopped', 'Stopped')], default='running', max_length=8),
        ),
    ]

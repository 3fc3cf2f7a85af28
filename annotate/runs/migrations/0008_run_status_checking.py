"""A run is `checking` while the training command's --check reads its config, off the launch request."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0007_checkpoint_name_key_unique"),
    ]

    operations = [
        migrations.AlterField(
            model_name="run", name="status",
            field=models.CharField(choices=[("checking", "checking config"), ("queued", "Queued"),
                                            ("running", "Running"), ("succeeded", "Succeeded"), ("failed", "Failed"),
                                            ("cancelled", "Cancelled")],
                                   default="queued", max_length=10)),
    ]

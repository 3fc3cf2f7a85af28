"""The checkpoint name key, filled by 0006, unique: two names that look alike cannot both be stored."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0006_checkpoint_name_key"),
    ]

    operations = [
        migrations.AlterField(model_name="checkpoint", name="name_key",
                              field=models.CharField(editable=False, max_length=400, unique=True)),
    ]

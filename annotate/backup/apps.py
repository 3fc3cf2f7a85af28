from django.apps import AppConfig


class BackupConfig(AppConfig):
    name = "annotate.backup"
    label = "backup"
    verbose_name = "Project backup and restore"

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "annotate.runs"
    label = "runs"

from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "annotate.exports"
    label = "exports"

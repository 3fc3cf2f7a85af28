from django.apps import AppConfig


class QualityConfig(AppConfig):
    name = "annotate.quality"
    label = "quality"

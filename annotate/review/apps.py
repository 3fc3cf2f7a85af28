from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "annotate.review"
    label = "review"

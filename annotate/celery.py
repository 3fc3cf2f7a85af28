"""The Celery app: a worker runs `celery -A annotate worker`; settings come from annotate.settings."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")

app = Celery("annotate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

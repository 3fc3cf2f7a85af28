"""Pairwise's web side: review, quality, exports and runs."""

from annotate.celery import app as celery_app

__all__ = ["celery_app"]

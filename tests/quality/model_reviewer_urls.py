"""The app's URLs with the model reviewers' routes mounted where they belong: under /api/v1/ and beside the
quality dashboard (the app's own URLs first register the `id` path converter they use)."""

from django.urls import include, path

from annotate.urls import urlpatterns as app_urlpatterns

urlpatterns = [
    path("api/v1/", include("annotate.quality.api_urls")),
    path("", include("annotate.quality.page_urls")),
    *app_urlpatterns,
]

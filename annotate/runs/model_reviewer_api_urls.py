"""The model reviewers' API routes, mounted under /api/v1/ (include("annotate.runs.model_reviewer_api_urls"), after
the `id` path converter is registered)."""

from django.urls import path

from annotate.runs import model_reviewer_api

urlpatterns = [
    path("projects/<slug:slug>/model-reviewers", model_reviewer_api.ModelReviewersView.as_view(),
         name="model-reviewers"),
    path("model-reviewers/<id:reviewer_id>", model_reviewer_api.ModelReviewerDetailView.as_view(),
         name="model-reviewer-detail"),
    path("model-reviewers/<id:reviewer_id>/score", model_reviewer_api.ModelReviewerScoreView.as_view(),
         name="model-reviewer-score"),
]

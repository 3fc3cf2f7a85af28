"""The model reviewers' page routes beside the quality dashboard (include("annotate.runs.model_reviewer_page_urls"),
after the `id` path converter is registered)."""

from django.urls import path

from annotate.runs import model_reviewer_pages

urlpatterns = [
    path("projects/<slug:slug>/quality/model-reviewers", model_reviewer_pages.model_reviewer_attach_page,
         name="model-reviewer-attach-page"),
    path("projects/<slug:slug>/quality/model-reviewers/<id:reviewer_id>/<str:action>",
         model_reviewer_pages.model_reviewer_action_page, name="model-reviewer-action-page"),
]

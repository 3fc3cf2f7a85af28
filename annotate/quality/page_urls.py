"""The model reviewers' page routes beside the quality dashboard (include("annotate.quality.page_urls"), after the
`id` path converter is registered)."""

from django.urls import path

from annotate.quality import views

urlpatterns = [
    path("projects/<slug:slug>/quality/model-reviewers", views.model_reviewer_attach_page,
         name="model-reviewer-attach-page"),
    path("projects/<slug:slug>/quality/model-reviewers/<id:reviewer_id>/<str:action>", views.model_reviewer_action_page,
         name="model-reviewer-action-page"),
]

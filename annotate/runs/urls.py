"""Routes of training runs: the API under /api/v1/ and the pages, included whole by annotate/urls.py.

`id` is the row-id converter annotate/urls.py registers (a huge or negative id is 404, not 500)."""

from django.urls import path

from annotate.runs import api, task_set_api, views

urlpatterns = [
    path("api/v1/runs", api.RunsView.as_view(), name="runs"),
    path("api/v1/runs/compare", api.CompareView.as_view(), name="runs-compare"),
    path("api/v1/runs/evaluate", api.EvaluateView.as_view(), name="runs-evaluate"),
    path("api/v1/runs/<id:run_id>", api.RunDetailView.as_view(), name="run-detail"),
    path("api/v1/runs/<id:run_id>/cancel", api.RunCancelView.as_view(), name="run-cancel"),
    path("api/v1/runs/<id:run_id>/audits", api.RunAuditsView.as_view(), name="run-audits"),
    path("api/v1/audits/next", api.AuditNextView.as_view(), name="audit-next"),
    path("api/v1/audits/<id:item_id>/judgment", api.AuditJudgmentView.as_view(), name="audit-judgment"),
    path("api/v1/checkpoints", api.CheckpointsView.as_view(), name="checkpoints"),
    path("api/v1/task-sets", task_set_api.TaskSetsView.as_view(), name="task-sets"),
    path("api/v1/task-sets/<id:pk>", task_set_api.TaskSetView.as_view(), name="task-set"),
    path("api/v1/checkpoints/<id:checkpoint_id>", api.CheckpointDetailView.as_view(), name="checkpoint-detail"),
    path("runs/", views.runs_page, name="runs-page"),
    path("runs/compare", views.compare_page, name="runs-compare-page"),
    path("runs/task-sets", views.task_set_make_page, name="task-sets-page"),
    path("runs/task-sets/<id:pk>/forget", views.task_set_forget_page, name="task-set-forget-page"),
    path("runs/demo-checkpoint", views.demo_checkpoint_build_page, name="demo-checkpoint-page"),
    path("runs/evaluate", views.evaluate_page, name="runs-evaluate-page"),
    path("runs/curves", views.runs_curves_page, name="runs-curves-page"),
    path("runs/<id:run_id>/", views.run_page, name="run-page"),
    path("runs/<id:run_id>/cancel", views.run_cancel_page, name="run-cancel-page"),
    path("runs/<id:run_id>/resume", views.run_resume_page, name="run-resume-page"),
    path("runs/<id:run_id>/audits", views.run_audit_create_page, name="run-audit-create-page"),
    path("audit/", views.audit_page, name="audit-page"),
    path("checkpoints/<id:checkpoint_id>/", views.checkpoint_page, name="checkpoint-page"),
    path("checkpoints/<id:checkpoint_id>/rename", views.checkpoint_rename_page, name="checkpoint-rename-page"),
]

"""The quality dashboard's model reviewer forms (admins only): attach a reward-model checkpoint, score one again,
change its settings, detach it. Each answers with a message and goes back to the dashboard's model reviewers.

In the runs app because attaching and scoring launch the training process (annotate/runs/model_reviewer_scoring.py);
the routes stay beside the dashboard's (annotate/runs/model_reviewer_page_urls.py)."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from annotate.errors import UserMistake
from annotate.quality.model_reviewers import (
    UNCHANGED,
    attached_model_reviewers,
    model_reviewer_change,
    model_reviewer_detach,
)
from annotate.review.selectors import project_for_staff_page
from annotate.roles import ADMIN_ROLES, require_role
from annotate.runs.model_reviewer_scoring import (
    DEFAULT_DISAGREEMENT_THRESHOLD,
    model_reviewer_attach,
    model_reviewer_score_again,
)


def _admin_page_project(request, slug: str):
    project = project_for_staff_page(request, slug, to="see the quality dashboard")
    require_role(request, ADMIN_ROLES, "only admins can attach, score or detach a model reviewer")
    return project


def _back_to_model_reviewers(project):
    return redirect(reverse("quality-dashboard", args=[project.slug]) + "#model-reviewers")


@require_POST
def model_reviewer_attach_page(request, slug: str):
    """The dashboard's form: attach a reward-model checkpoint as a model reviewer (admins only)."""
    project = _admin_page_project(request, slug)
    try:
        reviewer = model_reviewer_attach(
            project=project, checkpoint=request.POST.get("checkpoint", ""), created_by=request.user,
            offer_disagreements=request.POST.get("offer_disagreements", "off"),
            # An empty field takes the default threshold.
            disagreement_threshold=request.POST.get("disagreement_threshold") or DEFAULT_DISAGREEMENT_THRESHOLD)
    except UserMistake as exc:
        messages.error(request, str(exc))
        return _back_to_model_reviewers(project)
    reviewer.refresh_from_db()
    _scoring_message(request, reviewer, f"{reviewer.checkpoint.name} attached")
    return _back_to_model_reviewers(project)


def _scoring_message(request, reviewer, what: str) -> None:
    """A queued scoring is news; one that failed already (it could not be queued) is an error, with its line."""
    if reviewer.status == reviewer.Status.FAILED:
        messages.error(request, f"{what}: scoring failed: {reviewer.error}")
    else:
        messages.success(request, f"{what}: scoring {reviewer.status}.")


MODEL_REVIEWER_ACTIONS = ("score", "settings", "detach")


@require_POST
def model_reviewer_action_page(request, slug: str, reviewer_id: int, action: str):
    """The dashboard's buttons on one model reviewer: score again, change its settings, detach (admins only)."""
    project = _admin_page_project(request, slug)
    if action not in MODEL_REVIEWER_ACTIONS:
        raise Http404(f"no model reviewer action {action!r}; the actions are {', '.join(MODEL_REVIEWER_ACTIONS)}")
    reviewer = attached_model_reviewers(project).filter(pk=reviewer_id).first()
    if reviewer is None:  # detached in another tab, say: the page says so rather than a bare 404
        messages.error(request, f"no attached model reviewer {reviewer_id} in this project; it may have been detached")
        return _back_to_model_reviewers(project)
    name = reviewer.checkpoint.name
    try:
        if action == "score":
            reviewer = model_reviewer_score_again(reviewer=reviewer)
            _scoring_message(request, reviewer, name)
        elif action == "settings":
            # An unticked box is not sent: off. An empty threshold field keeps the threshold.
            model_reviewer_change(reviewer=reviewer,
                                  offer_disagreements=request.POST.get("offer_disagreements", "off"),
                                  disagreement_threshold=request.POST.get("disagreement_threshold") or UNCHANGED)
            messages.success(request, f"{name}: settings saved.")
        else:
            model_reviewer_detach(reviewer=reviewer)
            messages.success(request, f"{name} detached; its scores are kept.")
    except UserMistake as exc:
        messages.error(request, str(exc))
    return _back_to_model_reviewers(project)

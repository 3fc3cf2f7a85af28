"""Server-rendered pages: the project list, the reviewer page and the adjudication page."""

from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from annotate.review.selectors import project_or_404, project_rows_for_home
from annotate.roles import ADJUDICATOR_ROLES, REVIEWER_ROLES, STAFF_ROLES, user_roles
from annotate.runs.selectors import latest_checkpoints, latest_runs


def home(request):
    """Each project with what the user's roles can act on; for admins and engineers, the latest runs too."""
    roles = user_roles(request.user)
    can = {"review": bool(roles & REVIEWER_ROLES), "adjudicate": bool(roles & ADJUDICATOR_ROLES),
           "staff": bool(roles & STAFF_ROLES), "admin": "admin" in roles,
           "see_left": "reviewer" in roles}
    return render(request, "review/home.html", {
        "rows": project_rows_for_home(user=request.user, roles=roles), "roles": sorted(roles), "can": can,
        "runs": latest_runs(limit=5) if can["staff"] else [],
        "checkpoints": latest_checkpoints(limit=5) if can["staff"] else [],
    })


def review_page(request, slug: str):
    if not user_roles(request.user) & REVIEWER_ROLES:
        raise PermissionDenied("only reviewers can review")
    project = project_or_404(slug, only=("slug", "name", "min_rationale_chars"))
    return render(request, "review/review.html", {"project": project})


def adjudicate_page(request, slug: str):
    if not user_roles(request.user) & ADJUDICATOR_ROLES:
        raise PermissionDenied("only adjudicators and admins can adjudicate")
    project = project_or_404(slug, only=("slug", "name", "min_rationale_chars", "overlap"))
    return render(request, "review/adjudicate.html", {"project": project})

"""Server-rendered pages: the reviewer page and the adjudication page (the project list is annotate/home.py)."""

from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from annotate.review.selectors import project_or_404
from annotate.roles import ADJUDICATOR_ROLES, REVIEWER_ROLES, user_roles


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

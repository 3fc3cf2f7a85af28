"""Server-rendered pages: the reviewer page and the adjudication page (the project list is annotate/home.py)."""

from django.shortcuts import render

from annotate.review.selectors import project_or_404
from annotate.roles import ADJUDICATOR_ROLES, REVIEWER_ROLES, require_role


def review_page(request, slug: str):
    require_role(request, REVIEWER_ROLES, "only reviewers can review")
    project = project_or_404(slug, only=("slug", "name", "min_rationale_chars"))
    return render(request, "review/review.html", {"project": project})


def adjudicate_page(request, slug: str):
    require_role(request, ADJUDICATOR_ROLES, "only adjudicators and admins can adjudicate")
    project = project_or_404(slug, only=("slug", "name", "min_rationale_chars", "overlap"))
    return render(request, "review/adjudicate.html", {"project": project})

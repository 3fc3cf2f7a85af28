"""Server-rendered pages: the project list, the reviewer page and the adjudication page."""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import render

from annotate.review.models import Project
from annotate.review.selectors import user_roles


def home(request):
    roles = user_roles(request.user)
    projects = Project.objects.order_by("name") if roles else Project.objects.none()
    return render(request, "review/home.html", {"projects": projects, "roles": sorted(roles)})


def review_page(request, slug: str):
    if not user_roles(request.user) & {"reviewer", "admin"}:
        raise PermissionDenied("only reviewers can review")
    project = Project.objects.filter(slug=slug).only("slug", "name", "min_rationale_chars").first()
    if project is None:
        raise Http404(f"no project {slug!r}")
    return render(request, "review/review.html", {"project": project})


def adjudicate_page(request, slug: str):
    if not user_roles(request.user) & {"adjudicator", "admin"}:
        raise PermissionDenied("only adjudicators and admins can adjudicate")
    project = Project.objects.filter(slug=slug).only("slug", "name", "min_rationale_chars", "overlap").first()
    if project is None:
        raise Http404(f"no project {slug!r}")
    return render(request, "review/adjudicate.html", {"project": project})

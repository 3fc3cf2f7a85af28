"""Role checks: Django groups named reviewer, engineer, admin and adjudicator; a superuser counts as admin."""

from django.core.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission

from annotate.review.models import Project
from annotate.review.selectors import project_or_404, user_roles


class _HasAnyRole(BasePermission):
    roles: frozenset[str] = frozenset()
    message = "your account does not have the role this needs"

    def has_permission(self, request, view) -> bool:
        return bool(user_roles(request.user) & self.roles)


class CanReview(_HasAnyRole):
    roles = frozenset({"reviewer", "admin"})
    message = "only reviewers can ask for and judge assignments"


class IsAdmin(_HasAnyRole):
    roles = frozenset({"admin"})
    message = "only admins can do this"


class CanAdjudicate(_HasAnyRole):
    roles = frozenset({"adjudicator", "admin"})
    message = "only adjudicators and admins can adjudicate"


class IsAdminOrEngineer(_HasAnyRole):
    roles = frozenset({"admin", "engineer"})
    message = "only admins and engineers can do this"


def project_for_staff_page(request, slug: str, *, to: str) -> Project:
    """The project an admin or engineer page is about: 403 for anyone else, 404 for an unknown slug.

    `to` finishes the refusal: "only admins and engineers can <to>".
    """
    if not user_roles(request.user) & IsAdminOrEngineer.roles:
        raise PermissionDenied(f"only admins and engineers can {to}")
    return project_or_404(slug)

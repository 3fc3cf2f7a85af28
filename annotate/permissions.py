"""Role checks: Django groups named reviewer, engineer and admin; a superuser counts as admin."""

from rest_framework.permissions import BasePermission

from annotate.review.selectors import user_roles


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


class IsAdminOrEngineer(_HasAnyRole):
    roles = frozenset({"admin", "engineer"})
    message = "only admins and engineers can do this"

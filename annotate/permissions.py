"""The API's role checks: DRF permission classes over the Pairwise roles (annotate/roles.py)."""

from rest_framework.permissions import BasePermission

from annotate.roles import ADJUDICATOR_ROLES, ADMIN_ROLES, REVIEWER_ROLES, STAFF_ROLES, has_role


class _HasAnyRole(BasePermission):
    roles: frozenset[str] = frozenset()
    message = "your account does not have the role this needs"

    def has_permission(self, request, view) -> bool:
        return has_role(request.user, self.roles)


class CanReview(_HasAnyRole):
    roles = REVIEWER_ROLES
    message = "only reviewers can ask for and judge assignments"


class IsAdmin(_HasAnyRole):
    roles = ADMIN_ROLES
    message = "only admins can do this"


class CanAdjudicate(_HasAnyRole):
    roles = ADJUDICATOR_ROLES
    message = "only adjudicators and admins can adjudicate"


class IsAdminOrEngineer(_HasAnyRole):
    roles = STAFF_ROLES
    message = "only admins and engineers can do this"

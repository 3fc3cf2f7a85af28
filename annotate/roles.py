"""Pairwise roles: Django groups named reviewer, engineer, admin and adjudicator; a superuser counts as admin.

One small module that every app, the permission classes (annotate/permissions.py) and the pages read
roles from (a page refuses through require_role); it imports none of the apps.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.core.exceptions import PermissionDenied

ROLES = ("reviewer", "engineer", "admin", "adjudicator")

# Who may do what: the API's permission classes and the pages check the same sets.
REVIEWER_ROLES = frozenset({"reviewer", "admin"})
ADJUDICATOR_ROLES = frozenset({"adjudicator", "admin"})
STAFF_ROLES = frozenset({"admin", "engineer"})
ADMIN_ROLES = frozenset({"admin"})

ROLES_CACHE_SECONDS = 30  # a role change reaches every worker within this; it saves a query per request


def roles_cache_key(user_id: int) -> str:
    return f"pairwise:roles:{user_id}"


def user_roles(user: AbstractBaseUser) -> set[str]:
    """The user's Pairwise roles; a superuser counts as admin."""
    if not user.is_authenticated:
        return set()
    roles = cache.get(roles_cache_key(user.pk))
    if roles is None:
        roles = set(user.groups.values_list("name", flat=True))
        if user.is_superuser:
            roles.add("admin")
        cache.set(roles_cache_key(user.pk), roles, ROLES_CACHE_SECONDS)
    return roles


def has_role(user: AbstractBaseUser, roles: frozenset[str]) -> bool:
    """Whether the user holds one of `roles` (one of the sets above)."""
    return bool(user_roles(user) & roles)


def require_role(request, roles: frozenset[str], refusal: str) -> None:
    """The check a page makes before it reads anything: 403 (PermissionDenied, with `refusal` as the line the
    user reads) unless the request's user holds one of `roles`."""
    if not has_role(request.user, roles):
        raise PermissionDenied(refusal)

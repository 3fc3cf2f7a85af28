"""Pairwise roles: Django groups named reviewer, engineer, admin and adjudicator; a superuser counts as admin.

One small module that every app, the permission classes (annotate/permissions.py) and the pages read
roles from; it imports none of the apps.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache

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

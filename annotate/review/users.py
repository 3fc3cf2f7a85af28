"""Users: create a user with one of the Pairwise roles (annotate/roles.py), or change their role."""

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction

from annotate.review.errors import ReviewError
from annotate.roles import ROLES, roles_cache_key


def user_add(*, username: str, role: str, password: str | None = None,
             replace_password: bool = True) -> tuple[AbstractBaseUser, str | None, bool]:
    """Create or update a user with one role; returns (user, the password set or None, created).

    A new user gets `password`, or a random one. An existing user's password is replaced only with
    `replace_password` (then by `password` or a random one); otherwise only their role changes.
    """
    if role not in ROLES:
        raise ReviewError(f"role {role!r} is not one of {', '.join(ROLES)}")
    user_model = get_user_model()
    username_field = user_model._meta.get_field(user_model.USERNAME_FIELD)
    try:
        username_field.clean(username, None)  # Django's username validator and length
    except ValidationError as exc:
        raise ReviewError(f"username {username[:160]!r}: {' '.join(exc.messages)}") from None
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(username=username)
        if created or replace_password:
            password = password or secrets.token_urlsafe(12)
            user.set_password(password)
        else:
            password = None
        user.is_staff = role == "admin"
        user.save()
        groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
        user.groups.remove(*[groups[name] for name in ROLES if name != role])
        user.groups.add(groups[role])
    cache.delete(roles_cache_key(user.pk))
    return user, password, created

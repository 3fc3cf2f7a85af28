"""API token authentication: DRF's tokens, looked up with one plain SQL join per request, run as the reviewer
queue's statements are (annotate/review/queue_sql.py: prepared once per connection on PostgreSQL)."""

from django.contrib.auth import get_user_model
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from annotate.review.queue_sql import fetch, model_columns, model_instances


def user_by_token(*, key: str):
    """The user holding this API token, or None (DRF's TokenAuthentication in one join)."""
    user_model = get_user_model()
    rows = fetch(
        f"SELECT {model_columns(user_model, 'u')} FROM {user_model._meta.db_table} u "
        "JOIN authtoken_token t ON t.user_id = u.id WHERE t.key = %s",
        [key],
    )
    return model_instances(user_model, rows)[0] if rows else None


class PairwiseTokenAuthentication(TokenAuthentication):
    """Same tokens and header as DRF's TokenAuthentication (`Authorization: Token <key>`)."""

    def authenticate_credentials(self, key):
        user = user_by_token(key=key)
        if user is None:
            raise exceptions.AuthenticationFailed("invalid token: create one with manage.py drf_create_token USERNAME")
        if not user.is_active:
            raise exceptions.AuthenticationFailed("this user is inactive or deleted")
        return user, key

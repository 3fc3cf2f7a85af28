"""API token authentication: DRF's tokens, looked up with one plain SQL join per request."""

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from annotate.review.queue_sql import user_by_token


class PairwiseTokenAuthentication(TokenAuthentication):
    """Same tokens and header as DRF's TokenAuthentication (`Authorization: Token <key>`)."""

    def authenticate_credentials(self, key):
        user = user_by_token(key=key)
        if user is None:
            raise exceptions.AuthenticationFailed("invalid token: create one with manage.py drf_create_token USERNAME")
        if not user.is_active:
            raise exceptions.AuthenticationFailed("this user is inactive or deleted")
        return user, key

"""Login throttling on django-axes: what a locked-out login sees, and which address a login comes from.

The limits are in annotate/settings.py (PAIRWISE_LOGIN_FAILURES, PAIRWISE_LOGIN_LOCKOUT_MINUTES).
"""

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.conf import settings
from django.http import HttpRequest
from django.shortcuts import render


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check for logins over HTTP.

    `authenticate()` without a request (a management command, the shell, the test client's login) has
    no address to count and no one to answer; it is left to the next backend instead of failing.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def client_address(request: HttpRequest) -> str | None:
    """The address a login comes from: the socket's peer, or behind a trusted proxy the hop it appended."""
    if settings.PAIRWISE_BEHIND_PROXY:
        forwarded = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR")


def lockout_message(minutes: int) -> str:
    return (f"too many failed logins for this username or from this address: every login for it is refused "
            f"for {minutes} minutes after the last try; wait, or ask an admin to lift the lock")


def locked_out_response(request: HttpRequest, original_response=None, credentials=None):
    """429 with Retry-After and the reason, for the login page and the admin's.

    The API takes no passwords (tokens come from `manage.py drf_create_token`), so only pages get here.
    """
    seconds = int(get_cool_off(request).total_seconds())
    message = lockout_message(max(1, round(seconds / 60)))
    response = render(request, "registration/locked_out.html", {"message": message}, status=429)
    response["Retry-After"] = str(seconds)
    return response

"""Login throttling on django-axes: which address a login comes from, when a login is refused and what it
sees then, and the admins' page that lists the locks and lifts them.

Two limits (annotate/settings.py, docs/security.md): PAIRWISE_LOGIN_FAILURES wrong passwords for one username
from one address lock that username from that address; PAIRWISE_LOGIN_FAILURES_PER_ADDRESS failures from one
address, whatever the usernames, lock the address for every username. Both count axes' stored attempts of
the last PAIRWISE_LOGIN_LOCKOUT_MINUTES.
"""

import ipaddress
import logging
from dataclasses import dataclass
from datetime import datetime

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from axes.utils import reset
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.db.models import Max, QuerySet, Sum
from django.http import HttpRequest, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from annotate.roles import ADMIN_ROLES, require_role

log = logging.getLogger(__name__)


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check for logins over HTTP.

    `authenticate()` without a request (a management command, the shell, the test client's login) has
    no address to count and no one to answer; it is left to the next backend instead of failing.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def recent_attempts() -> QuerySet:
    """Axes' stored attempts that still count: the last try of each is within the lockout time."""
    return AccessAttempt.objects.filter(attempt_time__gte=timezone.now() - get_cool_off())


def _locks(group_by: tuple[str, ...], limit: int, **filters) -> QuerySet:
    return (recent_attempts().filter(**filters).values(*group_by)
            .annotate(failures=Sum("failures_since_start"), last_try=Max("attempt_time"))
            .filter(failures__gte=limit).order_by("-last_try"))


def username_locks(**filters) -> QuerySet:
    """Usernames locked from an address: what axes' own check (AXES_LOCKOUT_PARAMETERS) refuses, as rows."""
    return _locks(("username", "ip_address"), settings.AXES_FAILURE_LIMIT, **filters)


def address_locks(**filters) -> QuerySet:
    """Addresses over the per-address bound, for any usernames."""
    return _locks(("ip_address",), settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS, **filters)


class LoginThrottleHandler(AxesDatabaseHandler):
    """Axes' database handler with the per-address bound added to its lockout check.

    Axes sums the failures for each of AXES_LOCKOUT_PARAMETERS and compares the largest sum with the one
    AXES_FAILURE_LIMIT, so a username-and-address limit and a much higher address limit cannot both be lockout
    parameters. This adds the second limit to the same check, counting axes' own stored attempts; recording,
    the cool-off, the 429 and the resets stay axes'.
    """

    def is_locked(self, request, credentials=None) -> bool:
        return (super().is_locked(request, credentials)
                or address_locks(ip_address=request.axes_ip_address).exists())

    def user_login_failed(self, sender, credentials, request=None, **kwargs):
        super().user_login_failed(sender, credentials, request, **kwargs)
        # Axes refuses the failure that reaches its limit at once (the 429 page); the same for the bound.
        if request is not None and not request.axes_locked_out and not self.is_allowed(request, credentials):
            request.axes_locked_out = True
            request.axes_credentials = credentials


def client_address(request: HttpRequest) -> str | None:
    """The address a login comes from: the socket's peer, or behind a trusted proxy the hop it appended."""
    if settings.PAIRWISE_BEHIND_PROXY:
        forwarded = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR")


def lockout_message(minutes: int, *, whole_address: bool) -> str:
    if whole_address:
        return (f"too many failed logins from this address, for any usernames: every login from it is refused "
                f"for up to {minutes} minutes after the last try; wait, or ask an admin to lift the lock")
    return (f"too many failed logins for this username from this address: its logins from here are refused "
            f"for {minutes} minutes after the last try; wait, or ask an admin to lift the lock")


def locked_out_response(request: HttpRequest, original_response=None, credentials=None):
    """429 with Retry-After and the reason, for the login page and the admin's.

    The API takes no passwords (tokens come from `manage.py drf_create_token`), so only pages get here.
    """
    seconds = int(get_cool_off(request).total_seconds())
    message = lockout_message(max(1, round(seconds / 60)),
                              whole_address=address_locks(ip_address=request.axes_ip_address).exists())
    response = render(request, "registration/locked_out.html", {"message": message}, status=429)
    response["Retry-After"] = str(seconds)
    return response


@dataclass(frozen=True)
class Lockout:
    username: str  # "" where the address is over its bound, for every username
    address: str
    failures: int
    last_try: datetime
    refused_until: datetime


def current_lockouts() -> list[Lockout]:
    """Every lock in force: addresses over their bound first, then usernames locked from an address."""
    cool_off = get_cool_off()
    rows = [*address_locks(), *username_locks()]
    return [Lockout(username=row.get("username") or "", address=row["ip_address"], failures=row["failures"],
                    last_try=row["last_try"], refused_until=row["last_try"] + cool_off) for row in rows]


def unlock(*, address: str, username: str = "") -> tuple[int, bool]:
    """Remove axes' stored failures for `username` from `address`, or for every username from it, with axes'
    own reset; returns (failed logins removed, whether a lock was in force)."""
    filters = {"ip_address": address, **({"username": username} if username else {})}
    with transaction.atomic():
        attempts = AccessAttempt.objects.select_for_update().filter(**filters)
        removed = sum(attempts.values_list("failures_since_start", flat=True))
        # Unlocking a whole address lifts its own lock and every username's lock from it: either was in force.
        was_locked = username_locks(**filters).exists() or (not username and address_locks(**filters).exists())
        reset(ip=address, username=username or None)
    return removed, was_locked


@require_http_methods(["GET", "POST"])
def lockouts_page(request):
    """The locks in force, each with an Unlock button (admins only)."""
    require_role(request, ADMIN_ROLES, "only admins can see and lift login lockouts")
    if request.method == "POST":
        return _unlock_from_page(request)
    return render(request, "registration/lockouts.html", {
        "lockouts": current_lockouts(), "failure_limit": settings.AXES_FAILURE_LIMIT,
        "address_limit": settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS,
        "minutes": round(get_cool_off().total_seconds() / 60),
    })


def _unlock_from_page(request):
    address = request.POST.get("address", "").strip()
    username = request.POST.get("username", "").strip()
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return HttpResponseBadRequest(f"address {address!r} is not an IP address: pick a lock from the lockouts "
                                      f"page's list", content_type="text/plain")
    what = f"{username} from {address}" if username else f"{address} for every username"
    removed, was_locked = unlock(address=address, username=username)
    log.warning("%s unlocked %s: removed %d failed logins (%s)", request.user.get_username(),
                f"{username} from {address}" if username else f"every username from {address}", removed,
                "a lock was in force" if was_locked else "no lock was in force")
    if not removed:
        messages.error(request, f"Nothing to unlock: no failed logins for {what} are on record (the lock has "
                                f"passed, or was lifted already).")
    elif was_locked:
        messages.success(request, f"Unlocked {what}: removed {removed} failed logins.")
    else:
        messages.success(request, f"{what} was not locked; removed its {removed} failed logins.")
    if username and address_locks(ip_address=address).exists():
        messages.error(request, f"{address} is still locked for every username (over its bound of "
                                f"{settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS} failed logins): unlock the address too.")
    return redirect("login-lockouts")

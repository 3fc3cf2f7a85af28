"""Login throttling through the real login form: after too many wrong passwords for a username, or from
one address, even the right password is refused (429, with the reason and Retry-After) until the
lockout has passed."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-test-password"  # the conftest's make_user password


def log_in(username: str, password: str, address: str = "203.0.113.5"):
    """One login through the page as a browser does it: fetch the form (CSRF cookie and token), post it."""
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR=address)
    token = client.get("/accounts/login/").context["csrf_token"]
    return client.post("/accounts/login/", {"username": username, "password": password,
                                            "csrfmiddlewaretoken": str(token)})


def logged_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


def test_thirty_wrong_passwords_then_the_right_one_is_refused_until_the_lockout_passes(make_user, settings):
    make_user("rita")
    answers = [log_in("rita", f"guess-{n}").status_code for n in range(30)]
    limit = settings.AXES_FAILURE_LIMIT
    assert answers[:limit - 1] == [200] * (limit - 1)  # the form again, "didn't match"
    assert set(answers[limit - 1:]) == {429}

    refused = log_in("rita", PASSWORD)
    assert refused.status_code == 429 and not logged_in(refused)
    assert int(refused["Retry-After"]) == 15 * 60
    page = refused.content.decode()
    assert "Too many failed logins for this username or from this address" in page
    assert "refused for 15 minutes after the last try" in page

    # The lockout has passed: 15 minutes after the last try the right password works again.
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=16))
    assert logged_in(log_in("rita", PASSWORD))


def test_the_lock_is_per_username_from_any_address(make_user, settings):
    make_user("rita")
    make_user("sam")
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in("rita", f"guess-{n}", address=f"198.51.100.{n + 1}")  # a new address every time
    assert log_in("rita", PASSWORD, address="192.0.2.77").status_code == 429
    assert logged_in(log_in("sam", PASSWORD, address="192.0.2.77"))  # others are not locked out


def test_the_lock_is_per_address_for_any_username(make_user, settings):
    make_user("rita")
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(f"user{n}", "guess", address="203.0.113.9")  # a new username every time
    assert log_in("rita", PASSWORD, address="203.0.113.9").status_code == 429
    assert logged_in(log_in("rita", PASSWORD, address="203.0.113.10"))


def test_a_few_typos_do_not_lock_anyone_out(make_user, settings):
    make_user("rita")
    for n in range(settings.AXES_FAILURE_LIMIT - 1):
        assert log_in("rita", f"typo-{n}").status_code == 200
    assert logged_in(log_in("rita", PASSWORD))


def test_the_admin_login_is_throttled_too(make_user, settings):
    make_user("ada", role="admin")
    client = Client(REMOTE_ADDR="203.0.113.20")
    for n in range(settings.AXES_FAILURE_LIMIT):
        client.post("/admin/login/", {"username": "ada", "password": f"guess-{n}"})
    assert client.post("/admin/login/", {"username": "ada", "password": PASSWORD}).status_code == 429


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(make_user, settings):
    """A client cannot dodge the per-address lock by sending its own X-Forwarded-For."""
    settings.PAIRWISE_BEHIND_PROXY = True
    for n in range(settings.AXES_FAILURE_LIMIT):
        client = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=f"1.2.3.{n}, 203.0.113.30")
        client.post("/accounts/login/", {"username": f"user{n}", "password": "guess"})
    assert AccessAttempt.objects.filter(ip_address="203.0.113.30").count() == settings.AXES_FAILURE_LIMIT
    make_user("rita")
    client = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="9.9.9.9, 203.0.113.30")
    assert client.post("/accounts/login/", {"username": "rita", "password": PASSWORD}).status_code == 429

"""Login throttling through the real login form: a streak of wrong passwords for one username from one
address refuses that username from that address (429, with the reason and Retry-After), the right password
too, until the lockout has passed; one address failing for many usernames is stopped at a much higher bound;
an admin lifts a lock from the lockouts page."""

import logging
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.test import Client

from tests.security.test_settings_modes import manage

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-test-password"  # the conftest's make_user password
LOCKOUTS = "/accounts/lockouts/"


def log_in(username: str, password: str, address: str = "203.0.113.5", client: Client | None = None):
    """One login through the page as a browser does it: fetch the form (CSRF cookie and token), post it."""
    client = client or Client(enforce_csrf_checks=True, REMOTE_ADDR=address)
    token = client.get("/accounts/login/").context["csrf_token"]
    return client.post("/accounts/login/", {"username": username, "password": password,
                                            "csrfmiddlewaretoken": str(token)})


def logged_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


def lock_out(username: str, address: str, settings) -> None:
    answers = [log_in(username, f"guess-{n}", address=address).status_code for n in range(settings.AXES_FAILURE_LIMIT)]
    assert answers[-1] == 429


def spray(address: str, count: int, **headers) -> list[int]:
    """`count` wrong passwords from one address, each for a new username, as a password sprayer does."""
    client = Client(REMOTE_ADDR=address, **headers)
    return [client.post("/accounts/login/", {"username": f"user{n}", "password": "guess"}).status_code
            for n in range(count)]


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
    assert "Too many failed logins for this username from this address" in page
    assert "refused for 15 minutes after the last try" in page

    # The lockout has passed: 15 minutes after the last try the right password works again.
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=16))
    assert logged_in(log_in("rita", PASSWORD))


def test_wrong_passwords_for_one_username_lock_only_that_username_from_that_address(make_user, settings):
    """Someone who knows a username cannot lock its owner out from elsewhere, nor anyone else out at all."""
    make_user("rita")
    make_user("ada", role="admin")
    lock_out("rita", "203.0.113.5", settings)
    assert log_in("rita", PASSWORD, address="203.0.113.5").status_code == 429
    assert logged_in(log_in("ada", PASSWORD, address="203.0.113.5"))  # an admin on the same address
    assert logged_in(log_in("rita", PASSWORD, address="198.51.100.7"))  # rita herself, from elsewhere


def test_one_address_trying_many_usernames_is_stopped_at_the_per_address_bound(make_user, settings):
    make_user("ada", role="admin")
    bound = settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS
    assert bound >= 5 * settings.AXES_FAILURE_LIMIT  # an office behind one address has room for typos
    answers = spray("203.0.113.9", bound + 3)
    assert answers[:bound - 1] == [200] * (bound - 1)
    assert set(answers[bound - 1:]) == {429}

    refused = log_in("ada", PASSWORD, address="203.0.113.9")
    assert refused.status_code == 429 and not logged_in(refused)
    assert "Too many failed logins from this address" in refused.content.decode()
    assert logged_in(log_in("ada", PASSWORD, address="203.0.113.10"))


def test_the_per_address_bound_is_set_in_the_environment(tmp_path):
    code = "from django.conf import settings as s; print(s.AXES_FAILURE_LIMIT, s.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS)"
    result = manage("shell", "-c", code, tmp_path=tmp_path,
                    env={"PAIRWISE_LOGIN_FAILURES": "6", "PAIRWISE_LOGIN_FAILURES_PER_ADDRESS": "250"})
    assert result.stdout.splitlines()[-1].split() == ["6", "250"]


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


def test_behind_a_proxy_a_forged_forwarded_for_gets_around_neither_lock(make_user, settings):
    """The address is the hop the proxy appended; whatever a client puts before it changes nothing."""
    settings.PAIRWISE_BEHIND_PROXY = True
    make_user("rita")
    for n in range(settings.AXES_FAILURE_LIMIT):
        Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=f"1.2.3.{n}, 203.0.113.30").post(
            "/accounts/login/", {"username": "rita", "password": f"guess-{n}"})
    forged = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="9.9.9.9, 203.0.113.30")
    assert forged.post("/accounts/login/", {"username": "rita", "password": PASSWORD}).status_code == 429
    assert AccessAttempt.objects.get(username="rita").ip_address == "203.0.113.30"

    settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS = bound = 3 * settings.AXES_FAILURE_LIMIT  # fewer tries
    client = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.31")
    for n in range(bound):
        client.defaults["HTTP_X_FORWARDED_FOR"] = f"1.2.{n // 250}.{n % 250}, 203.0.113.31"
        client.post("/accounts/login/", {"username": f"user{n}", "password": "guess"})
    make_user("sam")
    forged = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="9.9.9.9, 203.0.113.31")
    assert forged.post("/accounts/login/", {"username": "sam", "password": PASSWORD}).status_code == 429


def admin_client(settings, make_user) -> Client:
    """An admin logged in through the login form, from an address of their own."""
    make_user("ada", role="admin")
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR="192.0.2.1")
    assert logged_in(log_in("ada", PASSWORD, client=client))
    return client


def post_unlock(client: Client, **fields):
    token = client.get(LOCKOUTS).context["csrf_token"]
    return client.post(LOCKOUTS, {**fields, "csrfmiddlewaretoken": str(token)}, follow=True)


def test_an_admin_unlocks_a_username_from_the_page_and_it_can_log_in_again(make_user, settings, caplog):
    make_user("rita")
    lock_out("rita", "203.0.113.5", settings)
    client = admin_client(settings, make_user)

    home = client.get("/").content.decode()
    assert f'href="{LOCKOUTS}"' in home  # where an admin finds their tools

    page = client.get(LOCKOUTS)
    assert page.status_code == 200
    row = page.context["lockouts"][0]
    assert (row.username, row.address, row.failures) == ("rita", "203.0.113.5", settings.AXES_FAILURE_LIMIT)
    text = page.content.decode()
    assert "rita" in text and "203.0.113.5" in text and "Unlock" in text

    with caplog.at_level(logging.WARNING, logger="annotate.login_throttle"):
        done = post_unlock(client, username="rita", address="203.0.113.5")
    assert done.status_code == 200
    message = f"Unlocked rita from 203.0.113.5: removed {settings.AXES_FAILURE_LIMIT} failed logins."
    assert message in done.content.decode()
    assert "ada unlocked rita from 203.0.113.5" in caplog.text
    assert done.context["lockouts"] == []
    assert logged_in(log_in("rita", PASSWORD, address="203.0.113.5"))


def test_unlocking_what_is_not_locked_says_nothing_was_removed(make_user, settings):
    client = admin_client(settings, make_user)
    done = post_unlock(client, username="rita", address="203.0.113.5")
    text = done.content.decode()
    assert "Nothing to unlock: no failed logins for rita from 203.0.113.5 are on record" in text
    assert "Unlocked" not in text


def test_an_admin_unlocks_an_address_stopped_at_the_per_address_bound(make_user, settings):
    settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS = 3 * settings.AXES_FAILURE_LIMIT  # fewer tries
    spray("203.0.113.9", settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS)
    client = admin_client(settings, make_user)
    row = client.get(LOCKOUTS).context["lockouts"][0]
    assert (row.username, row.address, row.failures) == ("", "203.0.113.9", settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS)
    done = post_unlock(client, address="203.0.113.9")
    assert (f"Unlocked 203.0.113.9 for every username: removed {settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS} "
            f"failed logins.") in done.content.decode()
    assert not AccessAttempt.objects.filter(ip_address="203.0.113.9").exists()


def test_unlocking_needs_the_forms_csrf_token(make_user, settings):
    make_user("rita")
    lock_out("rita", "203.0.113.5", settings)
    client = admin_client(settings, make_user)
    assert client.post(LOCKOUTS, {"username": "rita", "address": "203.0.113.5"}).status_code == 403
    assert AccessAttempt.objects.filter(username="rita").exists()


def test_an_address_that_is_not_one_is_a_bad_request(make_user, settings):
    client = admin_client(settings, make_user)
    token = client.get(LOCKOUTS).context["csrf_token"]
    answer = client.post(LOCKOUTS, {"username": "rita", "address": "not-an-address",
                                    "csrfmiddlewaretoken": str(token)})
    assert answer.status_code == 400
    assert "'not-an-address' is not an IP address" in answer.content.decode()


@pytest.mark.parametrize("role", ["reviewer", "engineer", "adjudicator"])
def test_only_admins_see_the_lockouts_page_or_unlock(make_user, settings, role):
    make_user("rita")
    lock_out("rita", "203.0.113.5", settings)
    make_user("someone", role=role)
    client = Client(REMOTE_ADDR="192.0.2.2")
    assert logged_in(log_in("someone", PASSWORD, client=client))
    assert client.get(LOCKOUTS).status_code == 403
    assert client.post(LOCKOUTS, {"username": "rita", "address": "203.0.113.5"}).status_code == 403
    assert AccessAttempt.objects.filter(username="rita").exists()
    assert f'href="{LOCKOUTS}"' not in client.get("/").content.decode()


def test_unlocking_a_username_on_an_address_over_its_bound_says_the_address_is_still_locked(make_user, settings):
    settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS = 3 * settings.AXES_FAILURE_LIMIT  # fewer tries
    make_user("rita")
    lock_out("rita", "203.0.113.9", settings)
    spray("203.0.113.9", settings.PAIRWISE_LOGIN_FAILURES_PER_ADDRESS)  # over the bound without rita too
    client = admin_client(settings, make_user)
    text = post_unlock(client, username="rita", address="203.0.113.9").content.decode()
    assert f"Unlocked rita from 203.0.113.9: removed {settings.AXES_FAILURE_LIMIT} failed logins." in text
    assert "203.0.113.9 is still locked for every username" in text
    assert log_in("rita", PASSWORD, address="203.0.113.9").status_code == 429


def test_unlocking_a_whole_address_from_which_a_username_was_locked_says_unlocked(make_user, settings):
    # Only rita is locked from the address (the address is under its own bound): lifting the address lifts her lock,
    # and the page says so rather than "was not locked".
    make_user("rita")
    lock_out("rita", "203.0.113.7", settings)
    client = admin_client(settings, make_user)
    text = post_unlock(client, address="203.0.113.7").content.decode()
    assert (f"Unlocked 203.0.113.7 for every username: removed {settings.AXES_FAILURE_LIMIT} failed logins."
            in text)
    assert "was not locked" not in text
    assert logged_in(log_in("rita", PASSWORD, address="203.0.113.7"))

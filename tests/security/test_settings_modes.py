"""Settings modes: the embedded default serves no debug pages; production refuses weak or missing settings
and turns on HTTPS-only cookies, HSTS, the redirect to HTTPS and a login for the API schema."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = "k3y-" + "".join(chr(97 + (i * 7) % 26) for i in range(60))
# Everything production mode needs, on a SQLite file so no server is involved.
PRODUCTION = {"PAIRWISE_MODE": "production", "SECRET_KEY": STRONG_KEY,
              "CELERY_BROKER_URL": "redis://127.0.0.1:1/0", "ALLOWED_HOSTS": "pairwise.example.org", "DATABASE_URL": "sqlite"}
SETTINGS_VARIABLES = {"DATABASE_URL", "SECRET_KEY", "CELERY_BROKER_URL", "DEBUG", "PAIRWISE_MODE", "ALLOWED_HOSTS",
                      "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "PAIRWISE_BEHIND_PROXY"}


def manage(*args, env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
    env = {"PAIRWISE_DATA_DIR": str(tmp_path), **env}
    if env.get("DATABASE_URL") == "sqlite":  # a file of this test's own
        env["DATABASE_URL"] = f"sqlite:///{tmp_path}/db.sqlite3"
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def test_embedded_defaults_use_sqlite_and_a_generated_key_kept_in_the_data_folder_without_debug(tmp_path):
    code = ("from django.conf import settings as s; "
            "print(s.DATABASES['default']['ENGINE'], s.CELERY_TASK_ALWAYS_EAGER, s.DEBUG, 'testserver' in s.ALLOWED_HOSTS)")
    result = manage("shell", "-c", code, env={}, tmp_path=tmp_path)
    assert result.stdout.splitlines()[-1].split() == ["django.db.backends.sqlite3", "True", "False", "False"]
    key = (tmp_path / "secret_key").read_text()
    assert len(key) > 40 and oct((tmp_path / "secret_key").stat().st_mode)[-3:] == "600"
    manage("shell", "-c", code, env={}, tmp_path=tmp_path)
    assert (tmp_path / "secret_key").read_text() == key  # the same key after a restart


@pytest.mark.parametrize(("env", "line"), [
    ({"PAIRWISE_MODE": "production"},
     "pairwise: production mode (PAIRWISE_MODE=production) needs SECRET_KEY, DATABASE_URL, CELERY_BROKER_URL, "
     "ALLOWED_HOSTS in the environment; set them, or leave PAIRWISE_MODE unset to run on the embedded defaults"),
    ({**PRODUCTION, "SECRET_KEY": "x" * 60},
     "pairwise: SECRET_KEY is too weak for production mode: it has 1 distinct characters; use at least 50 random "
     "characters, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"),
    ({**PRODUCTION, "SECRET_KEY": "change-me"},
     "pairwise: SECRET_KEY is too weak for production mode: it has 9 characters; use at least 50 random "
     "characters, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"),
    ({**PRODUCTION, "DEBUG": "true"},
     "pairwise: production mode refuses DEBUG=true: debug pages show the settings to anyone who causes an error; "
     "remove DEBUG from the environment"),
    ({"PAIRWISE_MODE": "prod"}, "pairwise: PAIRWISE_MODE='prod' is not a mode: use embedded or production"),
])
def test_production_mode_refuses_to_start_in_one_line(tmp_path, env, line):
    result = manage("check", env=env, tmp_path=tmp_path)
    assert (result.returncode, result.stderr.strip()) == (2, line)
    assert not (tmp_path / "secret_key").exists()


def test_production_mode_passes_djangos_deploy_check(tmp_path):
    result = manage("check", "--deploy", "--fail-level", "ERROR", env=PRODUCTION, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    # HSTS for subdomains and preload are left to the operator: they bind every subdomain for a year.
    warnings = set(re.findall(r"security\.W\d+", result.stderr))
    assert warnings <= {"security.W005", "security.W021"}, result.stderr


PROBE = """
import json
from django.test import Client
client = Client(HTTP_HOST="pairwise.example.org")
out = {}
plain = client.get("/accounts/login/")
out["redirect"] = [plain.status_code, plain.get("Location")]
page = client.get("/accounts/login/", secure=True)
out["hsts"] = page.get("Strict-Transport-Security")
out["csp"] = page.get("Content-Security-Policy")
out["cookies"] = {name: bool(morsel["secure"]) for name, morsel in page.cookies.items()}
schema = client.get("/api/schema/", secure=True)
out["schema"] = [schema.status_code, schema["Content-Type"]]
health = Client().get("/healthz", HTTP_HOST="10.0.0.7:8000")  # a probe: no TLS, an internal address
out["health"] = [health.status_code, health.json()]
print(json.dumps(out))
"""


def test_production_mode_answers_with_https_only_headers_and_hides_the_schema(tmp_path):
    result = manage("shell", "-c", PROBE, env=PRODUCTION, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["redirect"] == [301, "https://pairwise.example.org/accounts/login/"]
    assert out["hsts"] == "max-age=31536000"
    assert "script-src 'self'" in out["csp"] and "unsafe-inline" not in out["csp"]
    assert out["cookies"] == {"csrftoken": True}
    assert out["schema"] == [401, "application/json"]
    # The probe is neither redirected nor refused for its host; the broker here is a closed port.
    assert out["health"] == [503, {"status": "unavailable", "database": "ok", "broker": "unavailable"}]


def test_the_schema_is_for_engineers_and_admins_in_production(tmp_path):
    code = """
import json
from django.test import Client
from annotate.review.users import user_add
from rest_framework.authtoken.models import Token
from django.core.management import call_command
call_command("migrate", verbosity=0)
out = {}
for name, role in (("rita", "reviewer"), ("erin", "engineer")):
    user, _, _ = user_add(username=name, role=role, password="a-long-test-password")
    token = Token.objects.create(user=user)
    response = Client(HTTP_HOST="pairwise.example.org").get("/api/schema/", secure=True,
                                                             HTTP_AUTHORIZATION=f"Token {token.key}")
    out[role] = response.status_code
print(json.dumps(out))
"""
    result = manage("shell", "-c", code, env=PRODUCTION, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {"reviewer": 403, "engineer": 200}


def test_embedded_mode_shows_no_debug_page_for_a_server_error(tmp_path):
    """What a forgotten setting looks like now: Django's plain 500 page, no settings, no traceback."""
    code = """
from django.contrib.auth.decorators import login_not_required
from django.test import Client
from django.urls import path
from annotate import urls

@login_not_required
def broken(request):
    raise RuntimeError("MARKER-FROM-THE-SERVER")

urls.urlpatterns.append(path("broken/", broken))
response = Client(raise_request_exception=False).get("/broken/", HTTP_HOST="localhost")
print(response.status_code, response["Content-Type"],
      any(word in response.content for word in (b"MARKER", b"SECRET_KEY", b"Traceback")), flush=True)
"""
    result = manage("shell", "-c", code, env={}, tmp_path=tmp_path)
    assert result.stdout.split()[-4:] == ["500", "text/html;", "charset=utf-8", "False"], result.stdout + result.stderr

"""/healthz: the database and the broker as JSON, 200 when both answer, 503 otherwise; no login needed,
no secret in the answer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_embedded_mode_is_healthy_with_no_broker_configured():
    response = Client().get("/healthz")  # anonymous
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "not configured"}
    assert response["Cache-Control"] == "no-store"


@pytest.mark.django_db
def test_a_broker_that_answers_is_ok(settings):
    url = os.environ.get("PAIRWISE_TEST_REDIS_URL")
    if not url:
        pytest.skip("set PAIRWISE_TEST_REDIS_URL=redis://127.0.0.1:6379/N to check a live broker")
    settings.CELERY_BROKER_URL = url
    from annotate.celery import app

    before, app.conf.broker_url = app.conf.broker_url, url
    try:
        response = Client().get("/healthz")
    finally:
        app.conf.broker_url = before
    assert (response.status_code, response.json()["broker"]) == (200, "ok")


def test_a_database_and_a_broker_that_do_not_answer_are_503_and_say_nothing_secret(tmp_path):
    """Both point at a closed port, with a password in each URL that must not come back."""
    env = {**os.environ, "PAIRWISE_DATA_DIR": str(tmp_path),
           "DATABASE_URL": "postgres://pairwise:db-hunter2@127.0.0.1:1/pairwise",
           "CELERY_BROKER_URL": "redis://:broker-hunter2@127.0.0.1:1/0"}
    code = ("from django.test import Client; r = Client().get('/healthz'); "
            "print(r.status_code, r.content.decode(), flush=True)")
    result = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    status, body = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert status == "503"
    assert json.loads(body) == {"status": "unavailable", "database": "unavailable", "broker": "unavailable"}
    assert "hunter2" not in body and "127.0.0.1" not in body
    assert "the database does not answer" in result.stderr  # the reason is in the server's log

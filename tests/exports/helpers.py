"""A real Celery worker on Redis against the test database, for tests that run tasks the way production does."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from annotate.celery import app as celery_app

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("PAIRWISE_TEST_REDIS_URL", "")


def _redis_answers() -> bool:
    if not REDIS_URL:
        return False
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


needs_redis = pytest.mark.skipif(
    not _redis_answers(),
    reason="needs Redis: set PAIRWISE_TEST_REDIS_URL=redis://127.0.0.1:6379/15 (scripts/test.sh does when Redis answers)",
)


def wait_for(condition, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.2)
    pytest.fail(f"gave up waiting for {what}")


def database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Worker:
    """`celery -A annotate worker` in its own process, on the test database and its own queue."""

    def __init__(self, *, queue: str, name: str, snapshot_root: Path, log: Path):
        env = {**os.environ, "DATABASE_URL": database_url(), "CELERY_BROKER_URL": REDIS_URL, "DB_CONN_MAX_AGE": "0",
               "PAIRWISE_SNAPSHOT_ROOT": str(snapshot_root), "DJANGO_SETTINGS_MODULE": "annotate.settings"}
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "annotate", "worker", "-P", "solo", "--without-mingle",
             "--without-gossip", "--without-heartbeat", "-Q", queue, "-n", name, "-l", "info"],
            cwd=REPO, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        )
        wait_for(lambda: " ready." in log.read_text() or self.process.poll() is not None, "the worker to start")
        assert self.process.poll() is None, log.read_text()[-3000:]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def configure_celery(**conf) -> None:
    """Point the app at another broker and routes. Celery builds its connection pools and router once,
    at the first send (eager sends too), so those are dropped to be built again from the new settings."""
    celery_app.conf.update(conf)
    celery_app._pool = None
    celery_app.amqp._producer_pool = None
    celery_app.amqp.__dict__.pop("router", None)
    celery_app.amqp.flush_routes()

"""Browser fixtures: real Chromium (Debian's package) driven by Playwright against pytest-django's live server.

Tests create their data before they ask for the browser.
"""

from pathlib import Path

import pytest
from django.db import connections

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture(autouse=True)
def _orm_beside_playwright(monkeypatch):
    """Playwright's sync API runs an event loop in the test's thread, and Django then refuses ORM calls
    there (SynchronousOnlyOperation). Django documents this variable for such cases; it is set for the
    browser tests only, so the rest of the suite keeps the check."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def browser():
    """One headless Chromium per test; the machine runs one browser at a time."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing; install it with: apt-get install -y chromium chromium-driver")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
    )
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()
        # A test's own ORM calls made while Playwright's loop ran got a connection of that context's
        # own; close it here, in that context, or it outlives the run and blocks dropping the database.
        connections.close_all()


@pytest.fixture
def artifacts() -> Path:
    """Where screenshots go for a person to look at; tests/e2e/artifacts/ is kept out of git."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session", autouse=True)
def _database_before_live_server(django_db_setup):
    """Create the test database before the live server starts, so the server (and its connections)
    stops first and the database can be dropped cleanly at the end of the run."""


def speed_gold_rows(count: int, *, reason: str) -> list[dict]:
    """Import rows of `count` gold pairs: an average-speed question, a right answer and the classic wrong one."""
    return [{"prompt_id": f"gold-{i}", "prompt": f"A car covers {60 + i} km then 90 km in 3 hours. Average speed?",
             "responses": [{"text": f"Good: ({60 + i} + 90) / 3 km/h.", "model": "m-good"},
                           {"text": f"Poor: the mean of {60 + i} and 90.", "model": "m-poor"}],
             "gold": {"preferred": 0, "reason": reason}} for i in range(count)]

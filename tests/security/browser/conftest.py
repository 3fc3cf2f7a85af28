"""The browser fixtures of tests/e2e, for the content security policy's page check."""

from tests.e2e.conftest import _database_before_live_server, _orm_beside_playwright, browser  # noqa: F401

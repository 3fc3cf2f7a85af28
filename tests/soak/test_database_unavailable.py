"""A database that does not answer is 503 with Retry-After under /api/, one JSON line, never a 500 or HTML."""

import json

import pytest
from django.db import InterfaceError, OperationalError
from django.urls import clear_url_caches, path
from rest_framework.test import APIClient
from rest_framework.views import APIView

from annotate import urls


class DatabaseGone(APIView):
    permission_classes = []
    error = OperationalError

    def get(self, request):
        raise self.error('connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused')


@pytest.fixture(params=[OperationalError, InterfaceError], ids=["down", "connection-closed"])
def gone_endpoint(request, monkeypatch):
    view = type("Gone", (DatabaseGone,), {"error": request.param})
    monkeypatch.setattr(urls, "urlpatterns", [path("api/v1/gone", view.as_view()), *urls.urlpatterns])
    clear_url_caches()
    yield "/api/v1/gone"
    clear_url_caches()


def test_a_database_that_does_not_answer_is_503_with_retry_after(gone_endpoint):
    response = APIClient(raise_request_exception=False).get(gone_endpoint)
    assert response.status_code == 503
    assert response["Content-Type"].startswith("application/json") and response.content.count(b"\n") <= 1
    assert int(response["Retry-After"]) > 0
    body = json.loads(response.content)
    assert body["detail"].startswith("the database is not answering right now")
    assert "same body" in body["detail"] and "5432" not in body["detail"]  # the reason stays in the log
    assert body["request_id"] == response["X-Request-ID"]

"""Under /api/ every error is one JSON line, never an HTML page: unknown paths, ids out of range, bodies
too large, a bad host, and a server error (with a request id that is also in the log)."""

import json

import pytest
from django.urls import URLPattern, URLResolver, clear_url_caches, get_resolver, path
from django.urls.converters import IntConverter
from rest_framework.test import APIClient
from rest_framework.views import APIView

from annotate import urls
from annotate.review.models import Judgment
from tests.conftest import make_items
from tests.security.helpers import assert_one_json_line

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", [
    "/api/v1/nothing-here",
    "/api/v1/assignments/-1/judgment",
    "/api/v1/assignments/0/judgment",
    f"/api/v1/assignments/{2**63}/judgment",
    f"/api/v1/assignments/{10**30}/judgment",
    "/api/v1/assignments/1.5/judgment",
])
def test_a_path_that_names_no_endpoint_or_no_possible_id_is_404_json(make_user, client_for, valid_judgment, url):
    client = client_for(make_user("rita"))
    body = assert_one_json_line(client.post(url, valid_judgment(), format="json"), 404)
    assert body["detail"] == (f"not found: no API endpoint at {url} (ids are whole numbers from 1 to {2**63 - 1}); "
                              "the endpoints are listed in /api/schema/")


def test_the_largest_id_is_an_ordinary_not_found(project, make_user, client_for, valid_judgment):
    client = client_for(make_user("rita"))
    assert_one_json_line(client.post(f"/api/v1/assignments/{2**63 - 1}/judgment", valid_judgment(), format="json"), 404)
    admin = client_for(make_user("ada", role="admin"))
    assert_one_json_line(admin.get(f"/api/v1/exports/{2**63 - 1}"), 404)
    assert_one_json_line(admin.get(f"/api/v1/exports/{2**63}"), 404)


def test_every_id_in_a_path_is_bounded():
    """A new route with Django's plain `int` would take 2^63 and fail in the database with a 500."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            if isinstance(pattern, URLPattern | URLResolver):
                for name, converter in getattr(pattern.pattern, "converters", {}).items():
                    yield route, name, converter

    unbounded = [f"{route} <{name}>" for route, name, converter in walk(get_resolver().url_patterns)
                 if type(converter) is IntConverter]
    assert unbounded == []


def test_a_ten_megabyte_body_is_refused_before_it_is_read(project, make_user, client_for, valid_judgment):
    reviewer = make_user("rita")
    client = client_for(reviewer)
    assignment = client.get(f"/api/v1/projects/{project.slug}/assignments/next").json()
    body = valid_judgment(rationale="x" * (10 * 1024 * 1024))
    refused = assert_one_json_line(client.post(f"/api/v1/assignments/{assignment['id']}/judgment", body,
                                               format="json"), 413)
    assert refused["detail"].startswith("request body too large: 10485")
    assert "the limit for a request body (JSON or form) is 2097152 bytes" in refused["detail"]
    assert not Judgment.objects.exists()


def test_an_import_upload_may_be_larger_than_a_json_body_up_to_its_own_limit(project, make_user, client_for,
                                                                             settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    admin = client_for(make_user("ada", role="admin"))
    upload = "\n".join(json.dumps(row) for row in make_items(40, model_prefix="upload")).encode()
    assert len(upload) > 4000

    def send():
        from django.core.files.uploadedfile import SimpleUploadedFile
        return admin.post(f"/api/v1/projects/{project.slug}/items",
                          {"file": SimpleUploadedFile("items.jsonl", upload)}, format="multipart")

    assert send().status_code == 201
    settings.PAIRWISE_MAX_UPLOAD_BYTES = 2000
    refused = assert_one_json_line(send(), 413)
    assert "the limit for a multipart upload is 2000 bytes" in refused["detail"]


class Broken(APIView):
    permission_classes = []

    def get(self, request):
        raise RuntimeError("a bug with a secret in its message: hunter2")


@pytest.fixture
def broken_endpoint(monkeypatch):
    monkeypatch.setattr(urls, "urlpatterns", [path("api/v1/broken", Broken.as_view()), *urls.urlpatterns])
    clear_url_caches()
    yield "/api/v1/broken"
    clear_url_caches()


@pytest.mark.parametrize("debug", [False, True])
def test_a_server_error_is_json_with_a_request_id_that_the_log_has_too(broken_endpoint, caplog, settings, debug):
    settings.DEBUG = debug  # even a debug server answers the API in JSON
    response = APIClient(raise_request_exception=False).get(broken_endpoint)
    body = assert_one_json_line(response, 500)
    request_id = response["X-Request-ID"]
    assert body == {"request_id": request_id,
                    "detail": f"server error: it is logged as request {request_id}; try again, and if it keeps "
                              "failing give an admin that id"}
    logged = [record for record in caplog.records if request_id in record.getMessage()]
    assert logged and "hunter2" in str(logged[0].exc_info[1])


def test_a_debug_server_answers_an_unknown_api_path_in_json(settings, make_user, client_for):
    settings.DEBUG = True
    assert_one_json_line(client_for(make_user("rita")).get("/api/v2/"), 404)


def test_a_request_for_a_host_not_allowed_is_400_json():
    response = APIClient().get("/api/v1/projects/x/assignments/next", HTTP_HOST="evil.example")
    assert assert_one_json_line(response, 400) == {"detail": "bad request"}


def test_pages_keep_their_html_errors(client, make_user):
    client.force_login(make_user("rita"))
    response = client.get("/no-such-page/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_no_answer_for_a_logged_in_user_or_from_the_api_is_kept_by_a_cache(project, make_user, client_for, client):
    """A shared proxy or the browser's cache must not keep a reviewer's pair or an engineer's export."""
    reviewer = make_user("rita")
    api = client_for(reviewer)
    answers = [api.get(f"/api/v1/projects/{project.slug}/assignments/next"),  # 200
               api.get("/api/v1/nothing-here"),  # 404, made into JSON
               APIClient().get(f"/api/v1/projects/{project.slug}/assignments/next")]  # 401
    client.force_login(reviewer)
    answers += [client.get("/"), client.get(f"/review/{project.slug}/")]
    assert [answer.status_code for answer in answers] == [200, 404, 401, 200, 200]
    for answer in answers:
        assert "no-store" in answer.get("Cache-Control", ""), answer.wsgi_request.path

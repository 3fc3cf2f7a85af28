"""Every endpoint and page, enumerated from Django's URL resolver, x every role -> the status it must get.

EXPECTED holds one row per route name; a route without a row fails `test_every_route_has_a_row`, so a new
endpoint cannot ship without someone deciding who may call it. "Other" is a second reviewer asking for
objects the first reviewer owns (their assignment); the owner ("reviewer") goes last, so what the others
did cannot have used the object up. A 400 or 409 for a role that may call the endpoint means the
permission let it through to the body's or the state's check (an empty body, nothing to undo). Ids of objects of the training-runs app that do not exist give 404
to whoever may look (and 403 to whoever may not): the permission is decided before the lookup.
"""

import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from annotate.exports.models import Export
from annotate.review.assignments import assignment_next
from annotate.review.models import Assignment
from tests.conftest import import_rows, make_items

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "other", "adjudicator", "engineer", "admin", "reviewer")
LOGIN = 302  # a page sends an anonymous visitor to the login form


def _row(anonymous, other, adjudicator, engineer, admin, reviewer) -> dict[str, int]:
    return dict(zip(ROLES, (anonymous, other, adjudicator, engineer, admin, reviewer), strict=True))


# route name -> (method, path with {slug}/{assignment}/{export}/{adjudication}/{missing}, body, statuses)
EXPECTED: dict[str, tuple[str, str, dict | None, dict[str, int]]] = {
    # reviewer API
    "assignment-next": ("GET", "/api/v1/projects/{slug}/assignments/next", None, _row(401, 200, 403, 403, 200, 200)),
    "judgment-submit": ("POST", "/api/v1/assignments/{assignment}/judgment", "judgment",
                        _row(401, 404, 403, 403, 404, 201)),
    "judgment-undo": ("POST", "/api/v1/projects/{slug}/judgments/undo", None, _row(401, 409, 403, 403, 409, 409)),
    "reviewer-standing": ("GET", "/api/v1/projects/{slug}/standing", None, _row(401, 200, 403, 403, 200, 200)),
    # admins and engineers
    "items-import": ("POST", "/api/v1/projects/{slug}/items", None, _row(401, 403, 403, 403, 400, 403)),
    "project-settings": ("GET", "/api/v1/projects/{slug}/settings", None, _row(401, 403, 403, 403, 200, 403)),
    "qualification": ("GET", "/api/v1/projects/{slug}/qualification", None, _row(401, 403, 403, 200, 200, 403)),
    "agreement-report": ("GET", "/api/v1/projects/{slug}/agreement", None, _row(401, 403, 403, 200, 200, 403)),
    "project-exports": ("GET", "/api/v1/projects/{slug}/exports", None, _row(401, 403, 403, 200, 200, 403)),
    "export-preview": ("POST", "/api/v1/projects/{slug}/exports/preview", {}, _row(401, 403, 403, 200, 200, 403)),
    "export-detail": ("GET", "/api/v1/exports/{export}", None, _row(401, 403, 403, 200, 200, 403)),
    "export-cancel": ("POST", "/api/v1/exports/{export}/cancel", None, _row(401, 403, 403, 409, 409, 403)),
    "export-retry": ("POST", "/api/v1/exports/{export}/retry", None, _row(401, 403, 403, 409, 409, 403)),
    "export-file": ("GET", "/api/v1/exports/{export}/files/manifest.json", None, _row(401, 403, 403, 404, 404, 403)),
    "model-reviewers": ("GET", "/api/v1/projects/{slug}/model-reviewers", None, _row(401, 403, 403, 200, 200, 403)),
    "model-reviewer-detail": ("GET", "/api/v1/model-reviewers/{missing}", None, _row(401, 403, 403, 404, 404, 403)),
    "model-reviewer-score": ("POST", "/api/v1/model-reviewers/{missing}/score", {},
                             _row(401, 403, 403, 403, 404, 403)),
    # adjudicators
    "adjudication-next": ("GET", "/api/v1/projects/{slug}/adjudications/next", None, _row(401, 403, 204, 403, 204, 403)),
    "adjudications": ("GET", "/api/v1/projects/{slug}/adjudications", None, _row(401, 403, 200, 403, 200, 403)),
    "ruling-submit": ("POST", "/api/v1/adjudications/{missing}/ruling", "ruling", _row(401, 403, 404, 403, 404, 403)),
    # training runs (annotate/runs): engineers and admins; reviewers audit answers
    "runs": ("GET", "/api/v1/runs", None, _row(401, 403, 403, 200, 200, 403)),
    "runs-compare": ("POST", "/api/v1/runs/compare", {}, _row(401, 403, 403, 403, 400, 403)),
    "runs-evaluate": ("POST", "/api/v1/runs/evaluate", {}, _row(401, 403, 403, 400, 400, 403)),
    "run-detail": ("GET", "/api/v1/runs/{missing}", None, _row(401, 403, 403, 404, 404, 403)),
    "run-cancel": ("POST", "/api/v1/runs/{missing}/cancel", None, _row(401, 403, 403, 404, 404, 403)),
    "run-audits": ("POST", "/api/v1/runs/{missing}/audits", {}, _row(401, 403, 403, 400, 400, 403)),
    "audit-next": ("GET", "/api/v1/audits/next", None, _row(401, 204, 403, 403, 204, 204)),
    "audit-judgment": ("POST", "/api/v1/audits/{missing}/judgment", {}, _row(401, 400, 403, 403, 400, 400)),
    "checkpoints": ("GET", "/api/v1/checkpoints", None, _row(401, 403, 403, 200, 200, 403)),
    "task-sets": ("GET", "/api/v1/task-sets", None, _row(401, 403, 403, 200, 200, 403)),
    "task-set": ("GET", "/api/v1/task-sets/{missing}", None, _row(401, 403, 403, 404, 404, 403)),
    "checkpoint-detail": ("PATCH", "/api/v1/checkpoints/{missing}", {"name": "x"}, _row(401, 403, 403, 404, 404, 403)),
    "schema": ("GET", "/api/schema/", None, _row(200, 200, 200, 200, 200, 200)),
    # pages
    "home": ("GET", "/", None, _row(LOGIN, 200, 200, 200, 200, 200)),
    "review": ("GET", "/review/{slug}/", None, _row(LOGIN, 200, 403, 403, 200, 200)),
    "adjudicate": ("GET", "/adjudicate/{slug}/", None, _row(LOGIN, 403, 200, 403, 200, 403)),
    "quality-dashboard": ("GET", "/projects/{slug}/quality/", None, _row(LOGIN, 403, 403, 200, 200, 403)),
    "qualification-release": ("POST", "/projects/{slug}/quality/qualification", {},
                              _row(LOGIN, 403, 403, 403, 302, 403)),
    "exports-page": ("GET", "/projects/{slug}/exports/", None, _row(LOGIN, 403, 403, 200, 200, 403)),
    "model-reviewer-attach-page": ("POST", "/projects/{slug}/quality/model-reviewers", {},
                                   _row(LOGIN, 403, 403, 403, 302, 403)),
    "model-reviewer-action-page": ("POST", "/projects/{slug}/quality/model-reviewers/{missing}/score", {},
                                   _row(LOGIN, 403, 403, 403, 302, 403)),
    "exports-retry": ("POST", "/projects/{slug}/exports/{export}/retry", {}, _row(LOGIN, 403, 403, 302, 302, 403)),
    "exports-cancel": ("POST", "/projects/{slug}/exports/{export}/cancel", {}, _row(LOGIN, 403, 403, 302, 302, 403)),
    "login": ("GET", "/accounts/login/", None, _row(200, 200, 200, 200, 200, 200)),
    "logout": ("POST", "/accounts/logout/", {}, _row(302, 302, 302, 302, 302, 302)),
    "login-lockouts": ("GET", "/accounts/lockouts/", None, _row(LOGIN, 403, 403, 403, 200, 403)),
    "runs-page": ("GET", "/runs/", None, _row(LOGIN, 403, 403, 200, 200, 403)),
    "runs-compare-page": ("POST", "/runs/compare", {}, _row(LOGIN, 403, 403, 403, 302, 403)),
    "runs-evaluate-page": ("POST", "/runs/evaluate", {}, _row(LOGIN, 403, 403, 302, 302, 403)),
    "runs-curves-page": ("GET", "/runs/curves", None, _row(LOGIN, 403, 403, 400, 400, 403)),
    "task-sets-page": ("POST", "/runs/task-sets", {}, _row(LOGIN, 403, 403, 302, 302, 403)),
    "task-set-forget-page": ("POST", "/runs/task-sets/{missing}/forget", {}, _row(LOGIN, 403, 403, 404, 404, 403)),
    "demo-checkpoint-page": ("POST", "/runs/demo-checkpoint", {}, _row(LOGIN, 403, 403, 302, 302, 403)),
    "run-page": ("GET", "/runs/{missing}/", None, _row(LOGIN, 403, 403, 404, 404, 403)),
    "run-cancel-page": ("POST", "/runs/{missing}/cancel", {}, _row(LOGIN, 403, 403, 404, 404, 403)),
    "run-resume-page": ("POST", "/runs/{missing}/resume", {}, _row(LOGIN, 403, 403, 404, 404, 403)),
    "run-audit-create-page": ("POST", "/runs/{missing}/audits", {}, _row(LOGIN, 403, 403, 404, 404, 403)),
    "audit-page": ("GET", "/audit/", None, _row(LOGIN, 200, 403, 403, 200, 200)),
    "checkpoint-page": ("GET", "/checkpoints/{missing}/", None, _row(LOGIN, 403, 403, 404, 404, 403)),
    "checkpoint-rename-page": ("POST", "/checkpoints/{missing}/rename", {}, _row(LOGIN, 403, 403, 404, 404, 403)),
}
# The Django admin (its own staff login; only admins are staff): its index stands for all its pages.
ADMIN_INDEX = ("GET", "/admin/", None, _row(LOGIN, LOGIN, LOGIN, LOGIN, 200, LOGIN))


def route_names() -> list[str]:
    """Every named route outside the Django admin, from the resolver (so new apps' routes are included)."""

    def walk(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.app_name != "admin":
                    yield from walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                yield pattern.name

    return sorted({name for name in walk(get_resolver().url_patterns) if name})


def test_every_route_has_a_row():
    missing = [name for name in route_names() if name not in EXPECTED]
    assert missing == [], f"add the expected statuses for {missing} to EXPECTED"
    stale = sorted(set(EXPECTED) - set(route_names()))
    assert stale == [], f"{stale} are no longer routes; remove them from EXPECTED"


@pytest.fixture
def world(make_project, make_user):
    """A project with items, one open assignment of the reviewer, an export; a user of every role."""
    project = make_project("matrix")
    import_rows(project, make_items(4))
    users = {role: make_user(role, role=role) for role in ("adjudicator", "engineer", "admin", "reviewer")}
    users["other"] = make_user("other", role="reviewer")
    assignment = assignment_next(project=project, reviewer=users["reviewer"])
    export = Export.objects.create(project=project, status="done", filters={}, created_by=users["admin"])
    return {"users": users, "slug": project.slug, "assignment": assignment.pk, "export": export.pk,
            "adjudication": 1, "missing": 987654321}


def _body(kind, assignment_criteria=("correct", "complete")):
    if kind in ("judgment", "ruling"):
        return {"choice": "tie", "criteria": dict.fromkeys(assignment_criteria, "tie"),
                "rationale": "Both are as good as each other here.", "client_key": str(uuid.uuid4())}
    return kind


def _status(world, role, method, path, body) -> int:
    client = APIClient()
    if role != "anonymous":
        client.force_login(world["users"][role])
    url = path.format(**world)
    send = getattr(client, method.lower())
    response = send(url, _body(body), format="json") if method != "GET" else send(url)
    return response.status_code


@pytest.mark.parametrize("name", sorted(EXPECTED) + ["admin-index"])
def test_each_role_gets_the_expected_status(world, name):
    method, path, body, expected = ADMIN_INDEX if name == "admin-index" else EXPECTED[name]
    got = {role: _status(world, role, method, path, body) for role in ROLES}
    assert got == expected, f"{method} {path}: got {got}"
    if name == "judgment-submit":
        assert Assignment.objects.get(pk=world["assignment"]).current_judgment.assignment.reviewer == \
            world["users"]["reviewer"]

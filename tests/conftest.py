"""Shared fixtures: a project with criteria, imported items, reviewers with API tokens."""

import json
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotate.review.assignments import assignment_next
from annotate.review.demo_data import DEMO_CRITERIA
from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.judgments import judgment_submit
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add


def pytest_collection_modifyitems(config, items):
    """Say plainly that row-locking tests are skipped when the suite runs on SQLite."""
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL row locks; set DATABASE_URL=postgres://... to run it")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


def make_items(count: int, *, responses: int = 2, model_prefix: str = "model") -> list[dict]:
    return [
        {
            "prompt_id": f"p-{i:04d}",
            "prompt": f"Question {i}: what is {i} + {i}?",
            "responses": [
                {"text": f"Answer {k} to question {i}: {2 * i + k}", "model": f"{model_prefix}-{k}", "model_version": f"v{k}"}
                for k in range(responses)
            ],
        }
        for i in range(count)
    ]


def import_rows(project, rows: list[dict]):
    return items_import(project=project, items=items_parse(json.dumps(row) for row in rows))


def judge_until_done(project, reviewer, pick, *, seconds: float = 20) -> int:
    """The reviewer judges until nothing is left for them; returns how many they judged.

    pick(assignment) gives left, right, tie or both_bad. Each pair takes `seconds` on a simulated clock,
    so nobody looks too fast and the judgments spread over time.
    """
    clock, judged = timezone.now(), 0
    while (assignment := assignment_next(project=project, reviewer=reviewer, now=clock)) is not None:
        clock += timedelta(seconds=seconds)
        choice = pick(assignment)
        judgment_submit(
            assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
            criteria={"correct": choice if choice in ("left", "right") else "tie", "complete": "tie"},
            rationale="Chosen for being right and clear.", client_key=uuid.uuid4(), now=clock,
        )
        judged += 1
    return judged


def answer_gold(project, reviewer, *, right: bool) -> None:
    """The reviewer's next item, a gold one, answered right or wrong."""
    assignment = assignment_next(project=project, reviewer=reviewer)
    pair = assignment.pair
    a_wins = (pair.prompt.gold_response_id == pair.response_a_id) == right
    choice = "left" if a_wins == assignment.a_on_left else "right"
    criteria = project.criteria_versions.order_by("-version").first().items
    judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
                    criteria={item["key"]: choice for item in criteria},
                    rationale="Checked the sum against the question twice.", client_key=uuid.uuid4())


@pytest.fixture
def make_project(db):
    def make(slug: str = "speed", **settings):
        project, _, _ = project_create_or_update(
            slug=slug, name=slug.title(), instructions=DEMO_CRITERIA["instructions"],
            criteria_items=DEMO_CRITERIA["criteria"], **settings,
        )
        return project

    return make


@pytest.fixture
def project(make_project):
    project = make_project()
    import_rows(project, make_items(5))
    return project


@pytest.fixture
def make_user(db):
    def make(username: str, role: str = "reviewer"):
        user, _, _ = user_add(username=username, role=role, password="a-long-test-password")
        return user

    return make


@pytest.fixture
def client_for(db):
    def make(user) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
        return client

    return make


@pytest.fixture
def valid_judgment():
    def make(choice: str = "left", **overrides) -> dict:
        body = {
            "choice": choice, "strength": 2, "criteria": {"correct": choice if choice in ("left", "right") else "tie",
                                                          "complete": "tie"},
            "rationale": "The left one shows every step and gets the unit right.",
            "client_key": str(uuid.uuid4()),
        }
        body.update(overrides)
        return body

    return make


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Tests make many users; the production hasher is slow on purpose."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

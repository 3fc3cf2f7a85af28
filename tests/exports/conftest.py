"""A project whose pairs carry known votes: unanimous, majorities, ties, both-bad, splits."""

import json

import pytest

from tests.conftest import import_rows, judge_until_done

REVIEWERS = ("ann", "bob", "cat")
# Votes of ann, bob and cat on the one pair of prompt p-000i ("a" is model-0's answer, response a).
VOTES = {
    0: ("a", "a", "a"),
    1: ("a", "a", "a"),
    2: ("b", "b", "b"),
    3: ("b", "b", "a"),
    4: ("a", "a", "tie"),
    5: ("tie", "tie", "a"),
    6: ("both_bad", "both_bad", "a"),
    7: ("a", "b", "tie"),
    8: ("a", "a", "b"),
    9: ("b", "b", "b"),
    10: ("a", "a", "a"),
    11: ("a", "a", "a"),
}


@pytest.fixture(autouse=True)
def exports_run_in_this_thread(jobs_in_this_thread):
    """An export queued with no broker runs in the test's thread (tests/exports/test_worker.py runs it in a worker)."""


def voted_items(count: int = len(VOTES)) -> list[dict]:
    """Prompts p-0000..: even ones tagged math, odd ones code; p-0000 is a gold item."""
    items = []
    for i in range(count):
        item = {
            "prompt_id": f"p-{i:04d}",
            "prompt": f"Question {i}: what is {i} + {i}?",
            "responses": [{"text": f"Answer {k} to question {i}: {2 * i + k}", "model": f"model-{k}",
                           "model_version": f"v{k}"} for k in range(2)],
            "tags": ["math" if i % 2 == 0 else "code"],
        }
        if i == 0:
            item["gold"] = {"preferred": 0}
        items.append(item)
    return items


def side(assignment, choice: str) -> str:
    """The button that records `choice` (un-swapped a/b, or tie/both_bad) for this assignment."""
    if choice in ("tie", "both_bad"):
        return choice
    a_left = assignment.a_on_left
    return "left" if (choice == "a") == a_left else "right"


def judge(project, reviewer, pick) -> int:
    """The reviewer judges until nothing is left; pick(assignment) gives a/b/tie/both_bad. Returns judgments."""
    return judge_until_done(project, reviewer, lambda assignment: side(assignment, pick(assignment)))


def prompt_index(assignment) -> int:
    return int(assignment.pair.prompt.external_id.split("-")[1])


@pytest.fixture
def voted_project(make_project, make_user):
    project = make_project(slug="voted", overlap=3, retest_rate=0)
    import_rows(project, voted_items())
    for position, name in enumerate(REVIEWERS):
        judge(project, make_user(name), lambda assignment, p=position: VOTES[prompt_index(assignment)][p])
    return project


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]

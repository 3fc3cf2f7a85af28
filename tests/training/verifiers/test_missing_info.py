"""Missing-information tasks: the right answer says what is missing and invents no number."""

import pytest

from training.task_families import make_tasks
from training.verifiers.missing_info import MISSING_INFO_SCORER, score_missing_info

TASK = {"task_id": "missing-001", "kind": "missing_info", "prompt": "A car travels 120 km. What is its average speed?",
        "missing": "time", "missing_terms": ["how long", "hours", "duration"]}

RIGHT = [
    "The time is not given, so the average speed cannot be determined.\nAnswer: cannot be determined",
    "We cannot determine the average speed without knowing how long the 120 km took.",
    "Answer: not enough information (the duration of the trip is missing).",
    "Speed = distance / time. The distance is 120 km but the time is unknown.\nAnswer: it cannot be calculated",
]
WRONG = [
    ("120 / 3 = 40\nAnswer: 40 km/h", "invents 3, 40"),
    ("Assuming it took 2 hours, the speed is 60 km/h. The time is not given though.", "invents 2, 60"),
    ("Answer: 120 km/h", "gives the final answer '120 km/h' although the time is missing"),
    ("The car is fast.\nAnswer: fast", "does not say that the time is missing"),
    ("", "does not say that the time is missing"),
]


@pytest.mark.parametrize("completion", RIGHT)
def test_saying_what_is_missing_without_a_number_is_correct(completion):
    result = score_missing_info(TASK, completion)
    assert result.status == "correct", result.reason
    assert result.components["no_invented_number"] == 1.0 and result.scorer == MISSING_INFO_SCORER


@pytest.mark.parametrize("completion, reason", WRONG)
def test_an_invented_number_or_a_numeric_answer_is_wrong_with_the_reason(completion, reason):
    result = score_missing_info(TASK, completion)
    assert result.status == "wrong" and reason in result.reason, result.reason
    assert result.reward <= 0.1  # at most the format share


def test_naming_the_missing_quantity_earns_more_than_only_declining():
    named = score_missing_info(TASK, "The time is missing.\nAnswer: cannot be determined")
    unnamed = score_missing_info(TASK, "Not enough information.\nAnswer: cannot be determined")
    assert named.status == unnamed.status == "correct"
    assert named.reward == 1.0 and unnamed.reward == pytest.approx(0.9)
    assert "without naming the time" in unnamed.reason


def test_numbers_from_the_prompt_may_be_repeated_and_a_task_without_missing_is_an_error():
    echo = score_missing_info(TASK, "We know 120 km, but not how long it took, so it cannot be determined.")
    assert echo.status == "correct", echo.reason
    broken = score_missing_info({**TASK, "missing": ""}, "Answer: cannot be determined")
    assert broken.status == "error" and broken.reward is None


def test_every_family_solution_is_correct_and_the_arithmetic_answer_to_it_is_wrong():
    for task in make_tasks("missing", n=30, seed=2) + make_tasks("missing", n=30, seed=2, variant="heldout"):
        assert score_missing_info(task, task["solution"]).status == "correct"
        assert score_missing_info(task, "Answer: 42").status == "wrong"

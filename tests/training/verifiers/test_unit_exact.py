"""Conversion tasks (math rows with unit_exact): the answer must be written in the asked unit."""

import pytest

from training.verifiers.task_verifier import TaskVerifier

KM_TO_M = {"task_id": "convert-001", "kind": "math", "prompt": "Convert 3 km to m.", "answer": "3000", "unit": "m",
           "unit_exact": True}
C_TO_F = {"task_id": "convert-002", "kind": "math", "prompt": "Convert 100 °C to °F.", "answer": "212", "unit": "°F",
          "unit_exact": True}


@pytest.fixture(scope="module")
def verifier():
    with TaskVerifier(workers=1) as task_verifier:
        yield task_verifier


@pytest.mark.parametrize("task, completion, status", [
    (KM_TO_M, "3 * 1000 = 3000\nAnswer: 3000 m", "correct"),
    (KM_TO_M, "Answer: 3000 meters", "correct"),
    (KM_TO_M, "Answer: 3 km", "wrong"),          # restating the given quantity is not a conversion
    (KM_TO_M, "Answer: 300000 cm", "wrong"),     # the same length, in another unit than asked
    (KM_TO_M, "Answer: 3000", "wrong"),          # no unit
    (C_TO_F, "Answer: 212 °F", "correct"),
    (C_TO_F, "Answer: 100 °C", "wrong"),
])
def test_only_an_answer_in_the_asked_unit_is_correct(verifier, task, completion, status):
    result = verifier.verify(task, completion)
    assert result.status == status, result.reason
    assert result.scorer.endswith("+unit-exact@1")
    if completion in ("Answer: 3 km", "Answer: 100 °C"):
        assert result.components["answer"] == 0.0 and result.components["unit"] == 0.0
        assert "the task asks for" in result.reason


def test_without_unit_exact_a_convertible_unit_still_counts(verifier):
    speed = {"task_id": "speed-001", "kind": "math", "prompt": "How fast?", "answer": "50", "unit": "km/h"}
    result = verifier.verify(speed, "The answer is 13.89 m/s.")
    assert result.status == "correct" and not result.scorer.endswith("+unit-exact@1")

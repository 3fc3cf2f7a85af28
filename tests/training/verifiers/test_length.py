"""Simple questions (short_answer tasks): a right answer within the length budget is correct; a long one loses reward."""

import pytest

from training.verifiers.length import SHORT_ANSWER_SCORER, length_component, score_short_answer

DAYS = {"task_id": "simple-001", "kind": "short_answer", "prompt": "How many days are in 2 weeks?",
        "answer": "14", "accept": ["fourteen"], "max_chars": 40}
OPPOSITE = {"task_id": "simple-002", "kind": "short_answer", "prompt": "What is the opposite of big?",
            "answer": "small", "accept": ["little"], "max_chars": 40}


def test_length_component_is_full_within_budget_and_zero_at_twice_it():
    assert [length_component(n, 40) for n in (0, 40, 50, 60, 80, 200)] == [1.0, 1.0, 0.75, 0.5, 0.0, 0.0]


@pytest.mark.parametrize("task, completion", [
    (DAYS, "Answer: 14"), (DAYS, "14"), (DAYS, "2 * 7 = 14\nAnswer: 14 days"), (DAYS, "\\boxed{14}"),
    (DAYS, "Answer: Fourteen."),
    (OPPOSITE, "Answer: small"), (OPPOSITE, "little"), (OPPOSITE, "Answer: The opposite of big is small."),
])
def test_short_right_answers_are_correct(task, completion):
    result = score_short_answer(task, completion)
    assert result.status == "correct", result.reason
    assert result.reward == 1.0 and result.scorer == SHORT_ANSWER_SCORER


@pytest.mark.parametrize("task, completion", [
    (DAYS, "Answer: 15"), (DAYS, "Answer: 14 or 15"), (DAYS, "Answer: not fourteen"), (DAYS, "Answer: 15, not 14"),
    (OPPOSITE, "Answer: not small"), (OPPOSITE, "Answer: big"),
    (OPPOSITE, ""),
])
def test_wrong_answers_are_wrong(task, completion):
    result = score_short_answer(task, completion)
    assert result.status == "wrong" and result.components["answer"] == 0.0, result.reason


def test_a_long_right_answer_loses_reward_and_counts_as_wrong():
    short = score_short_answer(DAYS, "Answer: 14")
    longer = score_short_answer(DAYS, "A week has 7 days, so 2 weeks is 2 * 7.\nAnswer: 14")  # 50 characters
    rambling = score_short_answer(DAYS, "Let me think about weeks and days. " * 4 + "Answer: 14")
    assert short.reward > longer.reward > rambling.reward == 0.0
    assert longer.components["answer"] == 1.0 and longer.components["length"] == 0.75
    assert longer.status == "wrong" and "over the 40-character budget" in longer.reason


def test_an_unmarked_answer_costs_the_format_share():
    result = score_short_answer(DAYS, "Weeks have days.\n14")
    assert result.status == "correct" and result.components["format"] == 1.0  # a bare last line is marked
    prose = score_short_answer(OPPOSITE, "Hmm.\nthe opposite is small")
    assert prose.status == "correct" and prose.components["format"] == 0.0 and prose.reward == pytest.approx(0.9)

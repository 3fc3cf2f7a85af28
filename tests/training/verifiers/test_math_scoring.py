import pytest

from training.verifiers.math_verifier import (
    MathScorerConfig,
    MathVerifier,
    math_scorer_name,
    score_math_answer,
)

# Boxed steps, then the final answer stated as such (the style of many models' solutions).
BOXED_STEPS = (
    "The interest is $\\boxed{120}$ in May and $\\boxed{126}$ in June, so she has $3,\\!246$.\n"
    "Final Answer: The final answer is $3,246$. I hope it is correct."
)
RETRACTED_BOX = "So $\\boxed{15}$. Hmm, I made an error. Final answer: 25."
MUST_BE_WRONG = [
    ("The answer is not 50, it is 75.", "50", None),
    ("So the answer is $\\boxed{50}$. Actually, it is $\\boxed{75}$.", "50", None),
    ("The answer is 50 or 75.", "50", None),
    ("The answer is $\\frac{1}{2^{98}}$.", "\\frac{1}{2^{99}}", None),
    ("The answer is 1/2^98", "1/2^{99}", None),
    ("The answer is not 50.", "50", None),
    ("I cannot tell.", "50", None),
    (RETRACTED_BOX, "15", None),
    (BOXED_STEPS, "126", None),
]
MUST_BE_RIGHT = [
    ("The answer is 5e1.", "50", None),
    ("\\text{50 km/h}", "50", "km/h"),
    ("The answer is $\\boxed{\\frac{1}{2}}$", "0.5", None),
    ("The answer is 0.5", "\\frac{1}{2}", None),
    ("The answer is $\\frac{\\sqrt{3}}{2}$", "$\\frac{\\sqrt3}{2}$", None),
    ("The answer is 75, not 50.", "75", None),
    ("Final answer: 50 kilometers per hour", "50", "km/h"),
    ("The answer is 13.89 m/s.", "50", "km/h"),
    ("60 + 90 = 150 km in 3 hours.\nSo 150/3 = 50 km/h", "50", "km/h"),
    ("The answer is $\\boxed{(x+1)^2}$", "x^2 + 2x + 1", None),
    ("The answer is 1,000 apples.", "1000", None),
    ("Answer: \\boxed{(1, 2)}", "(1, 2)", None),
    ("$\\boxed{2 \\times 10^{3}}$", "2000", None),
    (RETRACTED_BOX, "25", None),
    (BOXED_STEPS, "3246", None),
]


@pytest.mark.parametrize("completion, answer, unit", MUST_BE_WRONG)
def test_known_traps_score_wrong(completion, answer, unit):
    result = score_math_answer(completion, answer, unit)
    assert result["status"] == "wrong", result
    assert result["components"]["answer"] == 0.0
    assert result["reason"]


@pytest.mark.parametrize("completion, answer, unit", MUST_BE_RIGHT)
def test_equivalent_answers_score_right(completion, answer, unit):
    result = score_math_answer(completion, answer, unit)
    assert result["status"] == "correct", result
    assert result["components"]["answer"] == 1.0


def test_several_final_answers_lose_format_too():
    result = score_math_answer("$\\boxed{50}$ or $\\boxed{75}$", "50")
    assert result["components"] == {"answer": 0.0, "unit": None, "format": 0.0}
    assert "several" in result["reason"]
    assert result["reward"] == 0.0


def test_repeating_the_same_answer_is_one_answer():
    result = score_math_answer("The answer is $\\boxed{50}$, that is $\\boxed{50.0}$", "50")
    assert result["status"] == "correct"
    assert result["components"]["format"] == 1.0


def test_missing_required_unit_scores_zero_on_unit_only():
    result = score_math_answer("The answer is 50.", "50", "km/h")
    assert result["components"] == {"answer": 1.0, "unit": 0.0, "format": 1.0}
    assert result["status"] == "wrong"
    assert 0 < result["reward"] < 1
    assert "unit" in result["reason"]


def test_wrong_dimension_scores_zero_on_unit():
    result = score_math_answer("The answer is 50 km.", "50", "km/h")
    assert result["components"]["unit"] == 0.0


def test_unmarked_answer_costs_the_format_component():
    result = score_math_answer("We get 150 / 3 which gives 50 here, done", "50")
    assert result["components"]["answer"] == 1.0
    assert result["components"]["format"] == 0.0
    assert result["reward"] < 1.0


def test_reward_is_the_weighted_sum_from_the_config():
    config = MathScorerConfig(answer_weight=0.5, unit_weight=0.25, format_weight=0.25)
    result = score_math_answer("The answer is 50.", "50", "km/h", config)
    assert result["reward"] == pytest.approx(0.75)
    no_unit_task = score_math_answer("We get 50 here", "50", None, config)
    # Without a unit to score, answer and format share the weight: 0.5 / 0.75.
    assert no_unit_task["reward"] == pytest.approx(0.5 / 0.75)


def test_scorer_version_changes_with_the_config():
    assert math_scorer_name().startswith("math@")
    assert math_scorer_name(MathScorerConfig(answer_weight=0.9)) != math_scorer_name()


def test_unparseable_gold_is_an_error_not_a_zero():
    result = score_math_answer("The answer is 5", "\\frac{", None)
    assert result["status"] == "error"
    assert result["reward"] is None


def test_pool_scores_with_the_scorer_name(math_verifier):
    tasks = [{"task_id": f"t{i}", "kind": "math", "prompt": "?", "answer": str(i)} for i in range(6)]
    results = math_verifier.verify_many([(t, f"The answer is {i}.") for i, t in enumerate(tasks)])
    assert [r.status for r in results] == ["correct"] * 6
    assert [r.task_id for r in results] == [t["task_id"] for t in tasks]
    assert all(r.scorer == math_scorer_name() for r in results)


# A power tower that math-verify's LaTeX parser and SymPy take minutes over.
PATHOLOGICAL = "The answer is $" + "x^{" * 40 + "2" + "}" * 40 + "$"


def test_a_hung_worker_is_killed_and_reported_then_the_pool_recovers():
    task = {"task_id": "slow", "kind": "math", "prompt": "?", "answer": "50"}
    with MathVerifier(MathScorerConfig(timeout_s=2), workers=1) as verifier:
        result = verifier.verify(task, PATHOLOGICAL)
        assert result.status == "timeout"
        assert result.reward is None
        assert "killed" in result.reason
        worker = verifier._all[0]
        assert not worker.alive
        verifier.config = MathScorerConfig(timeout_s=30)
        assert verifier.verify(task, "The answer is 50").status == "correct"


@pytest.mark.parametrize(("completion", "answer", "unit", "reason"), [
    ("Answer: 40 m/s", "40", "mph", "answer 40 m/s is not 40 mph"),
    ("Answer: 7 km/h", "90", "m/s", "answer 7 km/h is not 90 m/s"),
    ("Answer: 7", "90", None, "answer 7 is not 90"),
])
def test_a_wrong_answer_s_reason_names_the_expected_quantity_with_its_unit(completion, answer, unit, reason):
    result = score_math_answer(completion, answer, unit)
    assert result["status"] == "wrong"
    assert result["reason"] == reason

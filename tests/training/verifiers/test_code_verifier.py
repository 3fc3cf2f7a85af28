import pytest

from training.verifiers.code_extraction import extract_code
from training.verifiers.code_verifier import CODE_SCORER, strict_equal


def test_correct_solution_passes_every_suite(code_verifier, add_task, add_solution):
    result = code_verifier.verify(add_task, add_solution)
    assert result.status == "correct"
    assert result.reward == 1.0
    assert result.components == {
        "public": {"passed": 1, "total": 1},
        "hidden": {"passed": 2, "total": 2},
        "random": {"passed": 5, "total": 5},
    }
    assert result.scorer == CODE_SCORER
    assert all(test["passed"] for test in result.details["suites"]["random"])


def test_solution_wrong_only_on_hidden_inputs_is_caught(code_verifier, add_task):
    cheat = "def add(a, b):\n    return 3 if (a, b) == (1, 2) else 0\n"
    result = code_verifier.verify(add_task, cheat)
    assert result.status == "wrong"
    assert result.components["public"] == {"passed": 1, "total": 1}
    assert result.components["hidden"]["passed"] < 2
    assert result.reward == 0.0


def test_types_are_compared_strictly(code_verifier, add_task):
    for returns in ("float(a + b)", "str(a + b)", "[a + b]"):
        result = code_verifier.verify(add_task, f"def add(a, b):\n    return {returns}\n")
        assert result.status == "wrong", returns
    assert not strict_equal(1, True)
    assert not strict_equal(1, 1.0)
    assert not strict_equal(True, 1.0)
    assert strict_equal(1, 1.0000000001, float_tolerance=1e-6)
    assert not strict_equal(True, 1, float_tolerance=1e-6)
    assert strict_equal([1, {"a": None}], [1, {"a": None}])


def test_float_tolerance_applies_only_when_the_task_allows_it(code_verifier):
    task = {
        "task_id": "third", "kind": "code", "prompt": "third(x)", "entry_point": "third",
        "reference_solution": "def third(x):\n    return x / 3\n",
        "public_tests": [{"args": [1], "expected": 0.3333333333}],
    }
    candidate = "def third(x):\n    return x / 3\n"
    assert code_verifier.verify(task, candidate).status == "wrong"
    assert code_verifier.verify({**task, "float_tolerance": 1e-6}, candidate).status == "correct"


def test_code_is_taken_from_the_fenced_block_that_defines_the_function():
    completion = (
        "First a helper:\n```python\ndef helper():\n    pass\n```\n"
        "Then:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
    )
    assert extract_code(completion, "add").strip() == "def add(a, b):\n    return a + b"
    assert extract_code("def add(a, b):\n    return a + b\n", "add").startswith("def add")
    assert "return a" in extract_code("```py\ndef add(a, b):\n    return a + b", "add")


def test_fenced_completion_scores_like_plain_code(code_verifier, add_task, add_solution):
    result = code_verifier.verify(add_task, f"Here you go:\n```python\n{add_solution}```\n")
    assert result.status == "correct"


def test_syntax_error_is_wrong_with_the_error_named(code_verifier, add_task):
    result = code_verifier.verify(add_task, "def add(a, b) return a + b")
    assert result.status == "wrong"
    assert "SyntaxError" in result.reason


def test_missing_function_is_wrong_with_reason(code_verifier, add_task):
    result = code_verifier.verify(add_task, "def plus(a, b):\n    return a + b\n")
    assert result.status == "wrong"
    assert "add" in result.reason


def test_broken_reference_is_an_error_not_a_zero(code_verifier, add_task, add_solution):
    add_task["task_id"] = "broken"
    add_task["reference_solution"] = "def add(a, b):\n    raise RuntimeError('oops')\n"
    result = code_verifier.verify(add_task, add_solution)
    assert result.status == "error"
    assert result.reward is None
    assert "reference" in result.reason


def test_random_tests_are_reproducible(code_verifier, add_task):
    first = code_verifier.prepare(add_task).suites["random"]
    code_verifier._prepared.clear()
    second = code_verifier.prepare(add_task).suites["random"]
    assert first == second
    assert len({tuple(args) for args, _ in first}) > 1


@pytest.mark.parametrize("output", ["x" * 5000])
def test_outputs_are_capped_in_the_result(code_verifier, add_task, output):
    result = code_verifier.verify(add_task, f"def add(a, b):\n    return {output!r}\n")
    assert all(len(t["output"]) <= 200 for t in result.details["suites"]["hidden"])

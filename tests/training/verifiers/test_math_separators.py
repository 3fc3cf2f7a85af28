"""Commas that separate values (tuples, intervals, lists), LaTeX thousands separators, sets written as
inequalities, and a unit followed by more of the sentence: what the cases in test_math_styles.py
(SEPARATOR_ACCEPTED, SEPARATOR_REJECTED) do not show by their status alone."""

from training.verifiers.math_verifier import score_math_answer


def test_a_tuple_is_read_as_a_tuple_not_a_decimal():
    result = score_math_answer("The answer is $(3,2)$.", "3.2")
    assert result["components"]["answer"] == 0.0
    assert "3.2" not in result["details"]["math_verify"]


def test_a_unit_followed_by_prose_is_the_unit():
    result = score_math_answer("Pure water boils at 212 °F at sea level.", "100", "°C")
    assert result["components"] == {"answer": 1.0, "unit": 1.0, "format": 0.0}
    assert "°F" in result["reason"] and "sea" not in result["reason"]

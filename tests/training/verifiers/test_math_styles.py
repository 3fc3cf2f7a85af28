"""Answer styles the math scorer reads since math-verify's own extraction reads the answer: each
accepted style has a wrong twin that must stay wrong."""

import pytest

from training.verifiers.math_verifier import math_scorer_name, score_math_answer

GSM8K_GOLD = (
    "Natalia sold 48/2 = 24 clips in May.\n"
    "Natalia sold 48+24 = 72 clips altogether in April and May.\n#### 72"
)
MATH_GOLD = "The distance is $\\sqrt{(4-1)^2 + (6-2)^2} = \\sqrt{9+16} = \\boxed{5}$."
MATRIX = "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"

# (style, completion, gold answer, unit)
ACCEPTED = [
    ("text answer", "The fastest runner is $\\boxed{\\text{Evelyn}}$.", "\\text{Evelyn}", None),
    ("text answer, bare gold", "$\\boxed{\\text{Evelyn}}$", "Evelyn", None),
    ("text answer in prose", "The answer is Evelyn.", "\\text{Evelyn}", None),
    ("text answer after numbers", "Evelyn ran 5 km and Bob 3 km. The answer is Evelyn.", "\\text{Evelyn}", None),
    ("matrix", "$\\boxed{\\begin{bmatrix} 1 & 2 \\\\ 3 & 4 \\end{bmatrix}}$", MATRIX, None),
    ("interval", "The solution set is $\\boxed{[2, 5)}$.", "[2, 5)", None),
    ("inequality", "So $\\boxed{x > 3}$.", "x > 3", None),
    ("inequality as interval", "The solution is $\\boxed{(3, \\infty)}$.", "x > 3", None),
    ("equation", "The line is $\\boxed{y = 1 + 2x}$.", "y = 2x + 1", None),
    ("equation for a value", "So $\\boxed{x = 3}$.", "3", None),
    ("mbox unit", "The area is $\\boxed{12 \\mbox{cm}^2}$.", "12", "cm^2"),
    ("decimal comma", "The answer is 3,5.", "3.5", None),
    ("latex decimal comma", "$\\boxed{2{,}25}$", "2.25", None),
    ("spaced thousands", "The answer is 1 000 000.", "1000000", None),
    ("latex spaced thousands", "The answer is $\\boxed{1\\,000\\,000}$.", "1000000", None),
    ("dotted thousands", "Die Antwort ist 1.000.000.", "1000000", None),
    ("worked solution as gold (####)", "The answer is 72.", GSM8K_GOLD, None),
    ("worked solution as gold (boxed)", "So the distance is 5.", MATH_GOLD, None),
    ("unit after the box", "The answer is $\\boxed{50}$ km/h.", "50", "km/h"),
    ("superscript unit after the box", "The area is $\\boxed{12}$ cm$^2$.", "12", "cm^2"),
    ("degree symbol", "The boiling point is 100 °C.", "100", "°C"),
    ("latex degree", "The answer is $37^{\\circ}\\mathrm{C}$.", "37", "degC"),
    ("degrees in words", "The answer is 37 degrees Celsius.", "37", "°C"),
    ("superscript unit", "The area is 12 cm².", "12", "cm^2"),
    ("superscript unit, cube", "The volume is 8 m³.", "8", "m^3"),
    ("superscript unit, per second squared", "The answer is 9.8 m/s².", "9.8", "m/s^2"),
    ("other temperature scale", "The boiling point is 212 °F.", "100", "°C"),
    ("other temperature scale, latex", "The boiling point is $212^\\circ F$.", "100", "°C"),
    ("kelvin", "The boiling point is $\\boxed{373.15 \\text{ K}}$.", "100", "°C"),
    ("other scale at zero", "Water freezes at 32 °F.", "0", "°C"),
    ("choice letter in parentheses", "The answer is (B).", "B", None),
    ("boxed choice letter", "$\\boxed{\\text{(B)}}$", "B", None),
    ("percent for a fraction", "The answer is 25%.", "0.25", None),
    ("percent for a percentage", "The answer is 25 percent.", "25", None),
    ("escaped dollars", "The answer is $\\boxed{\\$18.90}$.", "18.90", None),
    ("bold latex", "The answer is \\textbf{10}.", "10", None),
    ("list answer in prose", "The answer is 2, 3.", "2, 3", None),
    ("list answer in two boxes", "The roots are $\\boxed{2}$ and $\\boxed{3}$.", "2, 3", None),
    ("whole number in thousands as gold", "The answer is 12345.", "12,345", None),
]

REJECTED = [
    ("text answer", "$\\boxed{\\text{Bob}}$", "\\text{Evelyn}", None),
    ("text answer in prose", "The answer is Bob.", "\\text{Evelyn}", None),
    ("text answer, hedged", "The answer is Evelyn or Bob.", "\\text{Evelyn}", None),
    ("text answer, ruled out", "The answer is not Evelyn, it is Bob.", "\\text{Evelyn}", None),
    ("text answer with another name", "$\\boxed{\\text{Evelyn Bob}}$", "\\text{Evelyn}", None),
    ("list answer, one value", "The answer is 2.", "2, 3", None),
    ("number in the reasoning, word as the answer", "We have 6 apples. The answer is seven.", "6", None),
    ("number in the reasoning, empty box", "We computed 6.\n\nThe answer is $\\boxed{}$.", "6", None),
    ("matrix transposed", "$\\boxed{\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}}$", MATRIX, None),
    ("interval closed", "The solution set is $\\boxed{[2, 5]}$.", "[2, 5)", None),
    ("inequality not strict", "So $\\boxed{x \\geq 3}$.", "x > 3", None),
    ("equation", "The line is $\\boxed{y = 2x - 1}$.", "y = 2x + 1", None),
    ("mbox unit of length", "The area is $\\boxed{12 \\mbox{cm}}$.", "12", "cm^2"),
    ("decimal comma", "The answer is 3,6.", "3.5", None),
    ("spaced thousands", "The answer is 1 000.", "1000000", None),
    ("worked solution as gold (####)", "The answer is 24.", GSM8K_GOLD, None),
    ("worked solution as gold (boxed)", "The distance is $\\sqrt{7}$.", MATH_GOLD, None),
    ("unit after the box, wrong unit", "The answer is $\\boxed{50}$ m/s.", "50", "km/h"),
    ("degree symbol, other scale same number", "The boiling point is 100 °F.", "100", "°C"),
    ("kelvin, same number", "The boiling point is 100 K.", "100", "°C"),
    ("other temperature scale, wrong value", "The answer is 20 °F.", "20", "°C"),
    ("superscript unit, wrong power", "The volume is 8 m².", "8", "m^3"),
    ("choice letter", "The answer is (C).", "B", None),
    ("two choice letters", "The answer is A or B.", "B", None),
    ("percent", "The answer is 4%.", "40\\%", None),
]


# Commas that separate values (tuples, intervals, lists), LaTeX thousands separators, sets written as
# inequalities, a unit followed by more of the sentence: each accepted form has a wrong twin.
SEPARATOR_ACCEPTED = [
    ("labelled tuple as gold", "$\\boxed{(5,1)}$", "(a,b)=(5,1)", None),
    ("labelled triple as gold", "The solution is $(2,0,9)$.", "(x,y,z)=(2,0,9)", None),
    ("signed list", "$\\boxed{-12,-3,6}$", "m=6,\\,-3,\\,-12", None),
    ("signed list, list gold", "The values are $\\boxed{6,-3,-12}$.", "-12, -3, 6", None),
    ("interval for an inequality", "$\\boxed{[-4,1)}$", "-4 \\le x < 1", None),
    ("open interval for an inequality", "$\\boxed{(0,1)}$", "0 < y < 1", None),
    ("fraction in an interval", "So $t \\in \\boxed{[1/4,3]}$.", "\\frac{1}{4} \\le t \\le 3", None),
    ("decimal in an interval", "So $t \\in \\boxed{[0.25,3]}$.", "\\frac{1}{4} \\le t \\le 3", None),
    ("inequality for an interval", "The solution is $\\boxed{-4 \\le x < 1}$.", "[-4, 1)", None),
    ("inequality for a ray", "$\\boxed{x \\geq 6}$", "[6, \\infty)", None),
    ("decimal inequality for a ray", "$\\boxed{x \\le 1.5}$", "(-\\infty, \\frac{3}{2}]", None),
    ("decimals for fractions in a matrix",
     "$\\boxed{\\begin{pmatrix} 0.5 \\\\ -0.75 \\end{pmatrix}}$",
     "\\begin{pmatrix} \\frac{1}{2} \\\\ -\\frac{3}{4} \\end{pmatrix}", None),
    ("thousands with \\!", "The answer is $\\boxed{22,\\! 222}$.", "22222", None),
    ("millions with \\!", "So the total is $\\boxed{4,\\!050,\\!000}$.", "4050000", None),
    ("money with \\!", "The balance is $\\boxed{\\$1,\\!530.75}$.", "1530.75", None),
    ("decimal comma, negative", "Die Antwort ist $\\boxed{-3,6}$.", "-3.6", None),
    ("decimal comma after a comma in prose", "Die Antwort ist also, 3,5.", "3.5", None),
    ("unit mid-sentence, other scale", "Pure water boils at 212 °F at sea level.", "100", "°C"),
    ("unit mid-sentence", "She walks 3 km in an hour.", "3", "km"),
    ("unit mid-sentence, at", "The bag weighs 15 kg at most.", "15", "kg"),
    ("unit after the box, then prose", "The answer is $\\boxed{50}$ km/h on average.", "50", "km/h"),
]

SEPARATOR_REJECTED = [
    ("labelled tuple as gold, swapped", "$\\boxed{(1,5)}$", "(a,b)=(5,1)", None),
    ("signed list, one missing", "$\\boxed{-12,-3}$", "m=6,\\,-3,\\,-12", None),
    ("signed list, a sign lost", "The values are $\\boxed{6,-3,12}$.", "-12, -3, 6", None),
    ("pair for a decimal", "Die Antwort ist $\\boxed{(2,5)}$.", "2.5", None),
    ("pair for a decimal, in prose", "The answer is $(3,2)$.", "3.2", None),
    ("list for a decimal", "$\\boxed{-10,-8,4}$", "8.4", None),
    ("interval closed for an inequality", "$\\boxed{[-4,1]}$", "-4 \\le x < 1", None),
    ("interval other ends", "The solution is $\\boxed{-4 < x \\le 1}$.", "[-4, 1)", None),
    ("ray open", "$\\boxed{x > 6}$", "[6, \\infty)", None),
    ("inequality, not solved", "The answer is $\\boxed{x^2 > 4}$.", "(2, \\infty)", None),
    ("equation, not solved", "The answer is $\\boxed{x^2 = 4}$.", "\\{-2, 2\\}", None),
    ("rounded in an interval", "$\\boxed{[0.33,2]}$", "[\\frac{1}{3}, 2]", None),
    ("thousands with \\!, one digit off", "The answer is $\\boxed{22,\\! 221}$.", "22222", None),
    ("thousands with \\! for its first group", "The answer is $11,\\! 111$.", "11", None),
    ("unit mid-sentence, same number other scale", "Pure water boils at 100 °F at sea level.", "100", "°C"),
    ("unit mid-sentence, other length", "She walks 3 m in an hour.", "3", "km"),
    ("unit after the box, then prose, other unit", "The answer is $\\boxed{50}$ m/s on average.", "50", "km/h"),
    ("two tuples", "$\\boxed{(5,1)}$ or $\\boxed{(1,5)}$", "(5, 1)", None),
    ("interval ruled out", "The answer is not $[-4,1)$, it is $(-4,1)$.", "[-4, 1)", None),
]
ACCEPTED += SEPARATOR_ACCEPTED
REJECTED += SEPARATOR_REJECTED


@pytest.mark.parametrize("style, completion, answer, unit", ACCEPTED, ids=[case[0] for case in ACCEPTED])
def test_accepted_style_scores_correct(style, completion, answer, unit):
    result = score_math_answer(completion, answer, unit)
    assert result["status"] == "correct", result
    assert result["components"]["answer"] == 1.0
    if unit:
        assert result["components"]["unit"] == 1.0


@pytest.mark.parametrize("style, completion, answer, unit", REJECTED, ids=[case[0] for case in REJECTED])
def test_wrong_twin_scores_wrong(style, completion, answer, unit):
    result = score_math_answer(completion, answer, unit)
    assert result["status"] == "wrong", result
    assert result["reason"]


def test_a_unit_on_a_word_answer_is_the_task_s_error():
    result = score_math_answer("The answer is Evelyn.", "\\text{Evelyn}", "km/h")
    assert result["status"] == "error"
    assert result["reward"] is None
    assert "km/h" in result["reason"]


def test_details_say_what_math_verify_read():
    result = score_math_answer("The fastest runner is $\\boxed{\\text{Evelyn}}$.", "\\text{Evelyn}")
    assert result["details"]["method"] == "boxed"
    assert result["details"]["math_verify"] == "\\text{Evelyn}"


def test_the_scorer_name_carries_the_new_version():
    # Scores of earlier scorers (math@1, math@2) are kept apart from these.
    assert math_scorer_name().startswith("math@3+math-verify-")


def test_pool_workers_score_the_new_styles(math_verifier):
    accepted = {case[0]: case for case in ACCEPTED}
    rejected = {case[0]: case for case in REJECTED}
    cases = [accepted["text answer"], accepted["matrix"], accepted["other temperature scale"],
             rejected["text answer"], rejected["degree symbol, other scale same number"]]
    pairs = [
        ({"task_id": f"s{i}", "kind": "math", "prompt": "?", "answer": answer, "unit": unit}, completion)
        for i, (_, completion, answer, unit) in enumerate(cases)
    ]
    results = math_verifier.verify_many(pairs)
    assert [r.status for r in results] == ["correct"] * 3 + ["wrong"] * 2
    assert all(r.scorer == math_scorer_name() for r in results)


def test_verdicts_do_not_depend_on_the_order_of_answers(math_verifier):
    cases = ACCEPTED[:12] + REJECTED[:12]
    pairs = [
        ({"task_id": f"o{i}", "kind": "math", "prompt": "?", "answer": answer, "unit": unit}, completion)
        for i, (_, completion, answer, unit) in enumerate(cases)
    ]
    forward = [(r.task_id, r.status, r.reward) for r in math_verifier.verify_many(pairs)]
    backward = [(r.task_id, r.status, r.reward) for r in math_verifier.verify_many(pairs[::-1])]
    assert forward == backward[::-1]
    assert [status for _, status, _ in forward] == ["correct"] * 12 + ["wrong"] * 12

"""Length as a reward component, and the scorer of `short_answer` tasks (simple questions).

A simple question ("How many days are in 2 weeks?") has a short right answer; a long answer is a fault
even when it is right, so length is scored against the task's budget (`max_chars`, in characters, so
the figure does not depend on any tokenizer). The answer is found as math answers are (a boxed answer,
"Answer: ...", a final line), compared by value when the gold answer is a number and as words otherwise.

Scoring is regular expressions and pint look-ups on one completion, bounded by its length, so it runs
in the calling process (no worker pool as math-verify needs).
"""

from __future__ import annotations

import re

from training.verifiers.math_extraction import (
    ANCHORED,
    BOXED,
    FINAL_LINE,
    clean_latex,
    extract_quantities,
    find_final_answers,
)
from training.verifiers.results import CORRECT, ERROR, WRONG, VerificationResult

SHORT_ANSWER_SCORER_NAME = "short-answer"
# Bump when extraction, comparison, weights or the length curve change.
SHORT_ANSWER_SCORER_VERSION = "1"
SHORT_ANSWER_SCORER = f"{SHORT_ANSWER_SCORER_NAME}@{SHORT_ANSWER_SCORER_VERSION}"
ANSWER_WEIGHT = 0.9
FORMAT_WEIGHT = 0.1

_NEGATION = re.compile(r"\b(?:not|isn't|no|never|rather than|instead of)\b|n't\b", re.IGNORECASE)
_FILLER = re.compile(r"^(?:(?:the\s+answer\s+is|answer|it\s+is|it's|that\s+is|this\s+is|the|a|an|is)\b[\s:]*)+",
                     re.IGNORECASE)


def length_component(length: int, budget: int) -> float:
    """1 within the budget, then falling linearly to 0 at twice the budget."""
    if length <= budget:
        return 1.0
    return round(max(0.0, 1.0 - (length - budget) / budget), 6)


def _words(text: str) -> str:
    text = clean_latex(text).lower()
    text = re.sub(r"[^\w\s'-]", " ", text)
    return _FILLER.sub("", re.sub(r"\s+", " ", text).strip()).strip()


def _number(text: str) -> float | None:
    try:
        return float(str(text).replace(",", "").strip())
    except ValueError:
        return None


def _final_span(completion: str, budget: int) -> tuple[str | None, bool]:
    """(the final answer's text, whether it is clearly marked). A one-line completion within the budget
    ("Saturday") is its own, marked, answer; otherwise an unmarked last line is read, costing the format."""
    finals = find_final_answers(completion)
    if finals.method in (BOXED, ANCHORED, FINAL_LINE):
        return finals.spans[-1], True
    lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
    if len(lines) == 1:
        return lines[0], len(lines[0]) <= budget
    return (lines[-1], False) if lines else (None, False)


def _matches(span: str, answer: str, accept: list[str]) -> bool:
    """A number is compared by value (every number stated must equal it); words, and the `accept`
    spellings of a number ("fourteen"), as the span's words or its last words when nothing is negated."""
    gold_number = _number(answer)
    if gold_number is not None:
        stated, _ = extract_quantities(span)
        values = [_number(q.expression) for q in stated]
        if values and all(v is not None and v == gold_number for v in values):
            return True
    said = _words(span)
    negated = bool(_NEGATION.search(span))
    for option in accept if gold_number is not None else [answer, *accept]:
        wanted = _words(option)
        if said == wanted or (not negated and said.endswith(" " + wanted)):
            return True
    return False


def score_short_answer(task: dict, completion: str) -> VerificationResult:
    """Answer (right or not), format (marked or not) and length (against `max_chars`); the reward is
    (0.9 * answer + 0.1 * format) * length, so a long right answer earns less than a short one, down to
    0 at twice the budget. Correct means right and within the budget."""
    task_id = task.get("task_id", "")
    answer, budget = str(task.get("answer", "")).strip(), task.get("max_chars")
    if not answer or not isinstance(budget, int) or budget < 1:
        return VerificationResult(task_id, ERROR, None, {}, "the task needs an answer and max_chars >= 1",
                                  SHORT_ANSWER_SCORER)
    chars = len(completion.strip())
    span, marked = _final_span(completion, budget)
    right = span is not None and _matches(span, answer, list(task.get("accept") or []))
    components = {"answer": 1.0 if right else 0.0, "format": 1.0 if marked else 0.0,
                  "length": length_component(chars, budget)}
    reward = (ANSWER_WEIGHT * components["answer"] + FORMAT_WEIGHT * components["format"]) * components["length"]
    details = {"chars": chars, "max_chars": budget, "extracted": span}
    if not right:
        said = "no answer found" if span is None else f"answer {span!r} is not {answer!r}"
        return VerificationResult(task_id, WRONG, round(reward, 6), components, said, SHORT_ANSWER_SCORER, details)
    if chars > budget:
        reason = f"right answer, but {chars} characters: over the {budget}-character budget"
        return VerificationResult(task_id, WRONG, round(reward, 6), components, reason, SHORT_ANSWER_SCORER, details)
    reason = f"answer {span!r} matches {answer!r} in {chars} characters (budget {budget})"
    return VerificationResult(task_id, CORRECT, round(reward, 6), components, reason, SHORT_ANSWER_SCORER, details)

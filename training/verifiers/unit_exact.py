"""Conversion tasks: the answer must be written in the unit asked for (math rows with `unit_exact`).

The math scorer accepts any unit pint can convert ("13.89 m/s" answers "50 km/h"), which is right for
a speed but turns "Convert 3 km to m" into a trick: restating "3 km" would score correct. For rows
with `unit_exact: true` the final answer's unit must be the task's unit itself (pint decides: "m",
"meter" and "metres" are one unit); otherwise the answer and unit components are 0 and the result is
wrong. Runs in the calling process on top of the math scorer's result: extraction is regular
expressions and pint look-ups, no math-verify.
"""

from __future__ import annotations

from training.verifiers.math_extraction import NO_ANSWER, extract_quantities, find_final_answers
from training.verifiers.results import CORRECT, ERROR, TIMEOUT, WRONG, VerificationResult
from training.verifiers.units import parse_unit

UNIT_EXACT_SCORER_SUFFIX = "+unit-exact@1"  # bump when the rule changes


def _final_unit_text(completion: str) -> str | None:
    finals = find_final_answers(completion)
    if finals.method == NO_ANSWER:
        return None
    stated = [quantity for span in finals.spans for quantity in extract_quantities(span)[0]]
    return stated[-1].unit_text if stated else None


def require_exact_unit(task: dict, completion: str, result: VerificationResult, config) -> VerificationResult:
    """`result` of the math scorer, made strict about the unit when the task has unit_exact.

    `config` is the MathScorerConfig that produced `result` (its weights recompute the reward)."""
    if not task.get("unit_exact"):
        return result
    scorer = result.scorer + UNIT_EXACT_SCORER_SUFFIX
    if result.status in (ERROR, TIMEOUT) or not result.components.get("unit"):
        return VerificationResult(result.task_id, result.status, result.reward, result.components, result.reason,
                                  scorer, result.details)
    written = _final_unit_text(completion)
    if written is not None and parse_unit(written) == parse_unit(task["unit"]):
        return VerificationResult(result.task_id, result.status, result.reward, result.components, result.reason,
                                  scorer, result.details)
    components = {**result.components, "answer": 0.0, "unit": 0.0}
    weights = {"answer": config.answer_weight, "unit": config.unit_weight, "format": config.format_weight}
    reward = sum(components[key] * weight for key, weight in weights.items()) / sum(weights.values())
    reason = f"the answer is written in {written or 'no unit'}, not in {task['unit']}: the task asks for {task['unit']}"
    status = WRONG if result.status == CORRECT else result.status
    return VerificationResult(result.task_id, status, round(reward, 6), components, reason, scorer, result.details)

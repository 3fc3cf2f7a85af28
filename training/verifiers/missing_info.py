"""The scorer of `missing_info` tasks: a needed quantity is absent, and the right answer says so.

"A car travels 120 km. What is its average speed?" has no answer: the time is missing. A completion
is correct when it says the answer cannot be determined (or that the quantity is missing) and invents
no number: every number it writes must be one the prompt gave, and its marked final answer must not
be a number. Inventing "3 hours" or answering "40 km/h" is wrong, with the invented figure as the reason.

Phrasings are matched with regular expressions (English only, numbers in digits): an answer that
spells a number out ("two hours") is not caught. Scoring runs in the calling process: it is bounded
regular-expression work on one completion.
"""

from __future__ import annotations

import re

from training.verifiers.math_extraction import (
    ANCHORED,
    BOXED,
    FINAL_LINE,
    extract_quantities,
    find_final_answers,
)
from training.verifiers.results import CORRECT, ERROR, WRONG, VerificationResult

MISSING_INFO_SCORER_NAME = "missing-info"
# Bump when the phrases, the number rule or the weights change.
MISSING_INFO_SCORER_VERSION = "1"
MISSING_INFO_SCORER = f"{MISSING_INFO_SCORER_NAME}@{MISSING_INFO_SCORER_VERSION}"
ANSWER_WEIGHT = 0.8
NAMES_WEIGHT = 0.1  # earned only by a correct answer that also names what is missing
FORMAT_WEIGHT = 0.1

_VERB = (r"(?:determine[ds]?|calculated?|computed?|find|found|known?|tell|say|answer(?:ed)?|solved?|"
         r"work(?:ed)? out|figured? out|given)")
_CANNOT = re.compile(
    r"\b(?:can ?not|can't|could ?not|couldn't|unable to|impossible to|no way to|not possible to)\s+(?:be\s+)?"
    + _VERB
    + r"|\bnot enough (?:information|info|data)|\binsufficient (?:information|data)|\bundetermin|\bindeterminate"
    r"|\b(?:is|are|was|were)\s+(?:not\s+(?:given|stated|provided|known|mentioned|specified)|missing|unknown)"
    r"|\b(?:not|never) (?:given|stated|provided|mentioned|specified)|\bdepends on|\bwe (?:would )?need to know"
    r"|\bmissing\b|\bunknown\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?")


def _numbers(text: str) -> list[tuple[str, float]]:
    found = []
    for match in _NUMBER.finditer(text):
        try:
            found.append((match.group(0), float(match.group(0).replace(",", ""))))
        except ValueError:  # pragma: no cover - the pattern only matches numbers
            continue
    return found


def _prompt_text(prompt) -> str:
    if isinstance(prompt, list):
        return "\n".join(str(message.get("content", "")) for message in prompt if isinstance(message, dict))
    return str(prompt)


def _names(completion: str, terms: list[str]) -> bool:
    return any(re.search(rf"(?<!\w){re.escape(term.strip())}(?!\w)", completion, re.IGNORECASE) for term in terms)


def score_missing_info(task: dict, completion: str) -> VerificationResult:
    """Components: answer (says the answer cannot be determined, invents no number, states no numeric
    final answer), names_missing (names the absent quantity), no_invented_number, format (a marked
    final answer). Reward: 0.8 * answer + 0.1 * (answer and names_missing) + 0.1 * format."""
    task_id = task.get("task_id", "")
    missing = str(task.get("missing") or "").strip()
    if not missing:
        return VerificationResult(task_id, ERROR, None, {}, "the task does not say what is missing",
                                  MISSING_INFO_SCORER)
    terms = [missing, *(task.get("missing_terms") or [])]
    given = {value for _, value in _numbers(_prompt_text(task.get("prompt", "")))}
    invented = sorted({text for text, value in _numbers(completion) if value not in given}, key=completion.find)

    finals = find_final_answers(completion)
    marked = finals.method in (BOXED, ANCHORED, FINAL_LINE)
    numeric_finals = []
    if marked:
        for span in finals.spans:
            stated, _ = extract_quantities(span)
            if stated and not _CANNOT.search(span):
                numeric_finals.append(span.strip())
    flags = bool(_CANNOT.search(completion))
    names = _names(completion, terms)
    right = flags and not invented and not numeric_finals
    components = {"answer": float(right), "names_missing": float(names), "no_invented_number": float(not invented),
                  "format": float(finals.method in (BOXED, ANCHORED))}
    reward = ANSWER_WEIGHT * components["answer"] + NAMES_WEIGHT * components["answer"] * components["names_missing"]
    reward += FORMAT_WEIGHT * components["format"]
    details = {"invented_numbers": invented[:10], "numeric_final_answers": numeric_finals[:5], "missing": missing}
    if invented:
        shown = ", ".join(invented[:5]) + (" ..." if len(invented) > 5 else "")
        reason = f"invents {shown}: the task gives no {missing}"
    elif numeric_finals:
        reason = f"gives the final answer {numeric_finals[-1]!r} although the {missing} is missing"
    elif not flags:
        reason = f"does not say that the {missing} is missing or that the answer cannot be determined"
    elif names:
        reason = f"says the answer cannot be determined and names the {missing}"
    else:
        reason = f"says the answer cannot be determined, without naming the {missing}"
    return VerificationResult(task_id, CORRECT if right else WRONG, round(reward, 6), components, reason,
                              MISSING_INFO_SCORER, details)

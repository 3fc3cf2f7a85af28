"""Scoring math completions: answer, unit and format, each on its own, then a weighted reward.

The answer is read by math-verify's own extraction and compared by its `verify` (math_parsing.py).
The final-answer analysis that stays ours (math_extraction.py) gives the format component, rejects a
final answer that states several different values or only rules values out, and reads units with
pint. `score_math_answer` is the pure scoring function. math-verify's signal-based timeouts only work
in a main thread, so they are off and `MathVerifier` runs the scorer in worker processes
(math_worker.py), killing a worker that overruns: a pathological expression costs one worker restart
and a "timeout" result, never a hung trainer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import queue
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path

from training.verifiers.math_extraction import (
    LAST_NUMBER,
    MARKED_METHODS,
    NO_ANSWER,
    Quantity,
    choice_letters,
    clean_latex,
    extract_quantities,
    find_final_answers,
    normalise_numbers,
    ruled_out_parts,
)
from training.verifiers.math_parsing import (
    CHOICE,
    TEXT,
    GoldAnswer,
    as_number,
    choice_of,
    is_percent,
    is_words,
    numbers_close,
    parse_gold,
    read,
    read_fragment,
    readings_match,
    value_of,
)
from training.verifiers.results import CORRECT, ERROR, TIMEOUT, WRONG, VerificationResult
from training.verifiers.units import convert, parse_unit
from training.verifiers.worker_process import WorkerDied, WorkerProcess, WorkerTimeout

MATH_SCORER_NAME = "math"
# Bump when extraction, comparison or defaults change; library versions are appended below.
# 2: math-verify's own extraction reads the answer (and the gold); ours keeps format, traps and units.
# 3: commas in brackets and runs of numbers separate values; 11,\!111; a set answered by a solved
#    inequality; a unit followed by prose ("212 °F at sea level"); "Final answer:" after the boxes.
# Not for a reason's wording alone: statuses, rewards and components stay those of the same version.
MATH_SCORER_VERSION = "3"


@dataclass(frozen=True)
class MathScorerConfig:
    """How math answers are scored. Any non-default value shows up in the scorer's version."""

    answer_weight: float = field(default=0.8, metadata={"help": "weight of the answer component"})
    unit_weight: float = field(default=0.1, metadata={"help": "weight of the unit component (unit tasks)"})
    format_weight: float = field(default=0.1, metadata={"help": "weight of one clearly marked answer"})
    relative_tolerance: float = field(
        default=1e-6, metadata={"help": "numbers closer than this (relative) are equal"}
    )
    unit_relative_tolerance: float = field(
        default=1e-3, metadata={"help": "tolerance after converting between units (13.89 m/s = 50 km/h)"}
    )
    timeout_s: float = field(default=5.0, metadata={"help": "a worker taking longer is killed"})


DEFAULT_MATH_CONFIG = MathScorerConfig()


def math_scorer_name(config: MathScorerConfig = DEFAULT_MATH_CONFIG) -> str:
    """"math@3+math-verify-0.9.0+pint-0.25.3", plus a config digest when the config is not default."""
    name = f"{MATH_SCORER_NAME}@{MATH_SCORER_VERSION}+math-verify-{version('math-verify')}+pint-{version('pint')}"
    if config != DEFAULT_MATH_CONFIG:
        digest = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:8]
        name += f"+config-{digest}"
    return name


# ---------------------------------------------------------------- stated answers


@dataclass
class _Stated:
    """One answer our final-answer analysis found, with math-verify's reading of its math (parsed
    only when needed: most answers are settled by math-verify's reading of the whole completion)."""

    quantity: Quantity

    @functools.cached_property
    def reading(self) -> tuple:
        return read_fragment(self.quantity.expression) if self.quantity.expression.strip() else ()

    @property
    def number(self) -> float | None:
        return as_number(value_of(list(self.reading)))

    def said(self) -> str:
        return f"{self.quantity.expression} {self.quantity.unit_text or ''}".strip()


def _same_stated(a: _Stated, b: _Stated, config: MathScorerConfig) -> bool:
    """Whether two stated answers are one answer (50 km/h and 13.89 m/s are)."""
    a_unit, b_unit = a.quantity.unit, b.quantity.unit
    if a_unit is not None and b_unit is not None and a.number is not None and b.number is not None:
        b_value = convert(b.number, b_unit, a_unit)
        tolerance = config.unit_relative_tolerance
        return b_value is not None and numbers_close(a.number, b_value, tolerance, tolerance)
    if a.reading and b.reading:
        return readings_match(a.reading, b.reading, config.relative_tolerance)
    return clean_latex(a.quantity.expression) == clean_latex(b.quantity.expression)


def _copies_of(reading: tuple, stated: _Stated, config: MathScorerConfig) -> bool:
    """math-verify joins several boxes into one set; {50, 50.0} is one answer stated twice."""
    from sympy import FiniteSet

    value = value_of(list(reading))
    return isinstance(value, FiniteSet) and all(
        readings_match(stated.reading, (element,), config.relative_tolerance) for element in value.args
    )


def _is_collection(reading: tuple) -> bool:
    from sympy import MatrixBase, Set, Tuple

    return isinstance(value_of(list(reading)), (Set, Tuple, MatrixBase))


def _reading_text(reading: tuple) -> str | None:
    """What math-verify read, as it wrote it (its text drops a percent sign, so that is put back)."""
    texts = [value for value in reading if isinstance(value, str)]
    text = texts[0] if texts else (str(reading[0]) if reading else None)
    if text is not None and is_percent(value_of(list(reading))) and "%" not in text:
        text += "%"
    return text


# ---------------------------------------------------------------- the scorer


def score_math_answer(
    completion: str, answer: str, unit: str | None = None, config: MathScorerConfig = DEFAULT_MATH_CONFIG
) -> dict:
    """Scores one completion against a gold answer (and unit). Pure; may be slow on odd input.

    Returns {"status", "reward", "components": {"answer", "unit", "format"}, "reason", "details"}.
    `unit` is None in components when the task asks for no unit.
    """
    answer = str(answer)
    gold = parse_gold(answer)
    if gold is None:
        return _error(f"the task's answer {answer!r} cannot be parsed as math")
    gold_unit = None
    if unit:
        gold_unit = parse_unit(unit)
        if gold_unit is None:
            return _error(f"the task's unit {unit!r} is not a unit pint knows")
        if as_number(gold.value) is None:
            return _error(f"the task's answer {answer!r} is not a number, so it cannot carry the unit {unit!r}")

    text = normalise_numbers(completion, list_commas=gold.is_list, choices=gold.kind == CHOICE)
    finals = find_final_answers(text)
    details = {"method": finals.method, "extracted": finals.spans[:5]}
    components = {"answer": 0.0, "unit": 0.0 if unit else None, "format": 0.0}
    if gold.kind == CHOICE:
        return _score_choice(text, finals, gold, components, details, config)

    # Ours: what the final answer states, and what it rules out. A list gold ("2, 3") expects
    # several values, so only what the final answer rules out splits it.
    stated: list[_Stated] = []
    ruled_out: list[_Stated] = []
    for span in finals.spans:
        more_stated, more_ruled_out = extract_quantities(
            span, text_parts=gold.kind == TEXT, list_answer=gold.is_list
        )
        stated += [_Stated(q) for q in more_stated]
        ruled_out += [_Stated(q) for q in more_ruled_out]
    final = stated[-1] if stated else None
    if not gold.is_list and final is not None:
        distinct = [final] + [s for s in stated[:-1] if not _same_stated(final, s, config)]
        if len(distinct) > 1:
            shown = ", ".join(sorted({s.said() for s in distinct}))
            return _finish(components, f"several different final answers: {shown}", details, config)
    if final is None and ruled_out:
        return _finish(components, "the final answer only rules values out", details, config)

    # math-verify: what the answer is, read where the final answer is.
    reading = tuple(read(text[finals.start : finals.end]))
    if value_of(list(reading)) is None:
        reading = ()
    details["math_verify"] = _reading_text(reading)
    ruled_out_texts = [part for span in finals.spans for part in ruled_out_parts(span, list_answer=gold.is_list)]
    if reading and any(
        readings_match(read_fragment(part), reading, config.relative_tolerance) for part in ruled_out_texts
    ):
        reading = ()  # it read a value the completion rules out ("not 50, it is 75")
    if final is not None and (
        not reading
        or _copies_of(reading, final, config)
        or (gold.kind == TEXT and is_words(final.quantity.expression))
        or (gold.is_list and not _is_collection(reading) and _is_collection(final.reading))
    ) and final.reading:
        # Ours where math-verify read nothing, read one answer stated twice as a set, read a number
        # from the reasoning while the final answer is a word ("Evelyn ran 5 km. The answer is
        # Evelyn."), or read one value of a list ("The answer is 2, 3." in prose gives it 2).
        reading = final.reading
    if not reading:
        why = "no final answer found" if finals.method == NO_ANSWER else "no answer found in the final answer"
        return _finish(components, why, details, config)
    components["format"] = 1.0 if finals.method in MARKED_METHODS else 0.0

    if gold_unit is not None:
        answer_right, said = _score_unit(gold, gold_unit, final, reading, components, config)
    else:
        answer_right = readings_match(gold.values, reading, config.relative_tolerance)
        said = _reading_text(reading) or ""
    components["answer"] = 1.0 if answer_right else 0.0

    # A worked solution as gold is named by the answer math-verify read in it.
    shown = answer if len(answer) <= 60 and "\n" not in answer else (_reading_text(gold.values) or answer[:60])
    if not answer_right:
        # With the gold's unit: "40 m/s is not 40" would read as if the number alone were wrong.
        reason = f"answer {said} is not {shown} {unit or ''}".strip()
    elif gold_unit is not None and not components["unit"]:
        reason = f"answer {said} lacks the unit {unit}" if final is None or final.quantity.unit is None else (
            f"unit {final.quantity.unit_text} is not {unit}"
        )
    else:
        reason = f"answer {said} matches {shown} {unit or ''}".strip()
    if finals.method == LAST_NUMBER:
        reason += " (no marked final answer: took the last number)"
    elif finals.method not in MARKED_METHODS:
        reason += " (no marked final answer)"
    return _finish(components, reason, details, config)


def _score_unit(
    gold: GoldAnswer, gold_unit, final: _Stated | None, reading: tuple, components: dict, config: MathScorerConfig
) -> tuple[bool, str]:
    """(answer right, what was said); sets the unit component. The number comes with its unit from
    our final answer where it has one, converted by pint; else math-verify's number, unitless."""
    gold_number = as_number(gold.value)
    if final is not None and final.number is not None:
        number, unit, said = final.number, final.quantity.unit, final.said()
    else:
        number, unit, said = as_number(value_of(list(reading))), None, _reading_text(reading) or ""
    converted = convert(number, unit, gold_unit) if number is not None and unit is not None else None
    components["unit"] = 1.0 if converted is not None else 0.0
    if number is None:
        return readings_match(gold.values, reading, config.relative_tolerance), said
    if converted is None:
        return numbers_close(gold_number, number, config.relative_tolerance), said
    if unit == gold_unit:
        return numbers_close(gold_number, converted, config.relative_tolerance), said
    # A converted value carries rounding (13.89 m/s); near zero (32 °F is 0 °C) only an absolute
    # tolerance, in the gold's unit, can accept it.
    tolerance = config.unit_relative_tolerance
    return numbers_close(gold_number, converted, tolerance, tolerance), said


def _score_choice(
    text: str, finals, gold: GoldAnswer, components: dict, details: dict, config: MathScorerConfig
) -> dict:
    """A multiple-choice answer: the letter our marked final answer states, else math-verify's."""
    stated: list[str] = []
    ruled_out: list[str] = []
    for span in finals.spans:
        more_stated, more_ruled_out = choice_letters(span)
        stated += more_stated
        ruled_out += more_ruled_out
    if len(set(stated)) > 1:
        return _finish(components, f"several different final answers: {', '.join(sorted(set(stated)))}", details, config)
    if not stated and ruled_out:
        return _finish(components, "the final answer only rules values out", details, config)
    letter = stated[-1] if stated else choice_of(read(text[finals.start : finals.end], CHOICE))
    details["choice"] = letter
    if letter is None or letter in ruled_out:
        return _finish(components, "no choice letter found", details, config)
    components["format"] = 1.0 if stated and finals.method in MARKED_METHODS else 0.0
    components["answer"] = 1.0 if letter == gold.choice else 0.0
    verdict = "matches" if letter == gold.choice else "is not"
    return _finish(components, f"choice {letter} {verdict} {gold.choice}", details, config)


def _finish(components: dict, reason: str, details: dict, config: MathScorerConfig) -> dict:
    weights = {"answer": config.answer_weight, "unit": config.unit_weight, "format": config.format_weight}
    used = {key: weight for key, weight in weights.items() if components[key] is not None}
    total = sum(used.values())
    reward = sum(components[key] * weight for key, weight in used.items()) / total if total else 0.0
    right = components["answer"] == 1.0 and components["unit"] in (None, 1.0)
    return {
        "status": CORRECT if right else WRONG,
        "reward": round(reward, 6),
        "components": components,
        "reason": reason,
        "details": details,
    }


def _error(reason: str) -> dict:
    return {"status": ERROR, "reward": None, "components": {}, "reason": reason, "details": {}}


# ---------------------------------------------------------------- the process pool


def _worker_command() -> tuple[list[str], dict[str, str]]:
    repository_root = str(Path(__file__).resolve().parents[2])
    env = {"PYTHONPATH": repository_root, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    # One thread per worker: sympy gains nothing from more and the machine is shared.
    env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return [sys.executable, "-m", "training.verifiers.math_worker"], env


class MathVerifier:
    """Scores math completions in a pool of worker processes with hard kills. Thread-safe."""

    def __init__(self, config: MathScorerConfig = DEFAULT_MATH_CONFIG, workers: int | None = None):
        self.config = config
        self.scorer = math_scorer_name(config)
        self.size = workers or max(1, min(4, os.cpu_count() or 1))
        self._idle: queue.Queue[WorkerProcess] = queue.Queue()
        self._all: list[WorkerProcess] = []
        command, env = _worker_command()
        for _ in range(self.size):
            worker = WorkerProcess(command, env=env, start_timeout_s=120)
            self._all.append(worker)
            self._idle.put(worker)
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="pairwise-math")

    def verify(self, task: dict, completion: str) -> VerificationResult:
        task_id = task.get("task_id", "")
        request = {
            "completion": completion,
            "answer": str(task["answer"]),
            "unit": task.get("unit"),
            "config": asdict(self.config),
        }
        worker = self._idle.get()
        try:
            if not worker.alive:
                worker.start()
            reply = worker.request(request, timeout_s=self.config.timeout_s)
        except WorkerTimeout:
            return VerificationResult(
                task_id, TIMEOUT, None, {}, f"math-verify took over {self.config.timeout_s:g} s; its worker was killed",
                self.scorer,
            )
        except (WorkerDied, OSError) as exc:
            return VerificationResult(task_id, ERROR, None, {}, f"math worker failed: {exc}", self.scorer)
        finally:
            self._idle.put(worker)
        if "worker_error" in reply:
            return VerificationResult(task_id, ERROR, None, {}, reply["worker_error"], self.scorer)
        return VerificationResult(
            task_id, reply["status"], reply["reward"], reply["components"], reply["reason"], self.scorer,
            reply["details"],
        )

    def verify_many(self, pairs: list[tuple[dict, str]]) -> list[VerificationResult]:
        futures = [self._executor.submit(self.verify, task, completion) for task, completion in pairs]
        return [future.result() for future in futures]

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        for worker in self._all:
            worker.close()

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

"""Scoring math completions: answer, unit and format, each on its own, then a weighted reward.

`score_math_answer` is the pure scoring function. It calls math-verify with its own signal-based
timeouts switched off, because those only work in a main thread; `MathVerifier` therefore runs it in
worker processes (math_worker.py) and kills a worker that overruns, so a pathological expression
costs one worker restart and a "timeout" result, never a hung trainer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import queue
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path

from training.verifiers.math_extraction import (
    LAST_NUMBER,
    NO_ANSWER,
    Quantity,
    clean_latex,
    extract_quantities,
    find_final_answers,
    normalise_expression,
)
from training.verifiers.results import CORRECT, ERROR, TIMEOUT, WRONG, VerificationResult
from training.verifiers.units import convert, parse_unit
from training.verifiers.worker_process import WorkerDied, WorkerProcess, WorkerTimeout

MATH_SCORER_NAME = "math"
# Bump when extraction, comparison or defaults change; library versions are appended below.
MATH_SCORER_VERSION = "1"


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
    """"math@1+math-verify-0.9.0+pint-0.25.3", plus a config digest when the config is not default."""
    name = f"{MATH_SCORER_NAME}@{MATH_SCORER_VERSION}+math-verify-{version('math-verify')}+pint-{version('pint')}"
    if config != DEFAULT_MATH_CONFIG:
        digest = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:8]
        name += f"+config-{digest}"
    return name


# ---------------------------------------------------------------- comparison


def _quiet_math_verify():
    # math-verify warns once that its timeouts are off; the worker's hard kill replaces them.
    logging.getLogger("math_verify").setLevel(logging.ERROR)


@functools.lru_cache(maxsize=65536)
def parse_expression(text: str):
    """A SymPy value for an answer expression (gold or candidate), or None if it does not parse."""
    from math_verify import parse

    _quiet_math_verify()
    text = normalise_expression(clean_latex(text))
    if not text:
        return None
    parsed = parse(f"${text}$", parsing_timeout=None)
    if not parsed:
        parsed = parse(text, parsing_timeout=None)
    return parsed[0] if parsed and not isinstance(parsed[0], str) else None


def _as_number(value) -> float | None:
    try:
        if value is None or not getattr(value, "is_number", False):
            return None
        number = complex(value.evalf(30))
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None
    return number.real if number.imag == 0 else None


def expressions_equal(gold, candidate, relative_tolerance: float) -> bool:
    """math-verify's equivalence, checked again for plain numbers, which it rounds to 6 places
    (it calls 1/2^99 equal to 1/2^98)."""
    from math_verify import verify

    if gold is None or candidate is None:
        return False
    gold_number, candidate_number = _as_number(gold), _as_number(candidate)
    if gold_number is not None and candidate_number is not None:
        return numbers_close(gold_number, candidate_number, relative_tolerance)
    return bool(verify(gold, candidate, timeout_seconds=None))


def numbers_close(a: float, b: float, relative_tolerance: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return False
    return math.isclose(a, b, rel_tol=relative_tolerance, abs_tol=0.0) or a == b


def _value_in_unit(quantity: Quantity, target_unit) -> tuple[float | None, bool]:
    """(value expressed in target_unit, unit was right). A missing or foreign unit is not right."""
    number = _as_number(parse_expression(quantity.expression))
    unit = quantity.unit
    if number is None or unit is None:
        return number, False
    converted = convert(number, unit, target_unit)
    if converted is None:
        return number, False
    return converted, True


def _same_answer(a: Quantity, b: Quantity, config: MathScorerConfig) -> bool:
    if a.unit is not None and b.unit is not None:
        a_number = _as_number(parse_expression(a.expression))
        b_value = _value_in_unit(b, a.unit)[0] if b.unit is not None else None
        if a_number is not None and b_value is not None:
            return numbers_close(a_number, b_value, config.unit_relative_tolerance)
    return expressions_equal(
        parse_expression(a.expression), parse_expression(b.expression), config.relative_tolerance
    )


def _has_top_level_comma(text: str) -> bool:
    depth = 0
    for char in clean_latex(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            return True
    return False


# ---------------------------------------------------------------- the scorer


def score_math_answer(
    completion: str, answer: str, unit: str | None = None, config: MathScorerConfig = DEFAULT_MATH_CONFIG
) -> dict:
    """Scores one completion against a gold answer (and unit). Pure; may be slow on odd input.

    Returns {"status", "reward", "components": {"answer", "unit", "format"}, "reason", "details"}.
    `unit` is None in components when the task asks for no unit.
    """
    gold = parse_expression(str(answer))
    if gold is None:
        return _error(f"the task's answer {answer!r} cannot be parsed as math")
    gold_unit = None
    if unit:
        gold_unit = parse_unit(unit)
        if gold_unit is None:
            return _error(f"the task's unit {unit!r} is not a unit pint knows")

    finals = find_final_answers(completion)
    details = {"method": finals.method, "extracted": finals.spans[:5]}
    components = {"answer": 0.0, "unit": 0.0 if unit else None, "format": 0.0}
    if finals.method == NO_ANSWER:
        return _finish(components, "no final answer found", details, config)

    split = not _has_top_level_comma(str(answer))
    stated: list[Quantity] = []
    ruled_out: list[Quantity] = []
    for span in finals.spans:
        more_stated, more_ruled_out = extract_quantities(span, split=split)
        stated += more_stated
        ruled_out += more_ruled_out
    if not stated:
        why = "the final answer only rules values out" if ruled_out else "no answer found in the final answer"
        return _finish(components, why, details, config)

    final = stated[-1]
    distinct = [final] + [q for q in stated[:-1] if not _same_answer(final, q, config)]
    if len(distinct) > 1:
        shown = ", ".join(sorted({f"{q.expression} {q.unit_text or ''}".strip() for q in distinct}))
        return _finish(components, f"several different final answers: {shown}", details, config)
    components["format"] = 0.0 if finals.method == LAST_NUMBER else 1.0

    if gold_unit is not None:
        value, unit_right = _value_in_unit(final, gold_unit)
        components["unit"] = 1.0 if unit_right else 0.0
        gold_number = _as_number(gold)
        converted = unit_right and final.unit != gold_unit
        tolerance = config.unit_relative_tolerance if converted else config.relative_tolerance
        if value is not None and gold_number is not None:
            answer_right = numbers_close(gold_number, value, tolerance)
        else:
            answer_right = expressions_equal(gold, parse_expression(final.expression), config.relative_tolerance)
    else:
        answer_right = expressions_equal(gold, parse_expression(final.expression), config.relative_tolerance)
    components["answer"] = 1.0 if answer_right else 0.0

    said = f"{final.expression} {final.unit_text or ''}".strip()
    if not answer_right:
        reason = f"answer {said} is not {answer}"
    elif gold_unit is not None and not components["unit"]:
        reason = f"answer {said} lacks the unit {unit}" if final.unit is None else f"unit {final.unit_text} is not {unit}"
    else:
        reason = f"answer {said} matches {answer} {unit or ''}".strip()
    if finals.method == LAST_NUMBER:
        reason += " (no marked final answer: took the last number)"
    return _finish(components, reason, details, config)


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

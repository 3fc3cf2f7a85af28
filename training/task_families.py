"""Synthetic task families: small, checkable math and code problems written as task rows (docs/training.md, "Task files").

They feed the tiny SFT checkpoint, the demo, and later GRPO. Every family draws problems from a fixed
space of parameters; a problem belongs to the held-out variant when the hash of its prompt falls in a
fixed fifth of the hash space, so `--variant heldout` never repeats a training problem whatever the
seeds.

Each row also carries `solution`: the worked answer the tiny model is trained to write. Task files
may carry extra keys; the verifiers read only the ones docs/training.md names.
"""

import hashlib
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

from training.errors import PairwiseInputError
from training.tasks import write_tasks

VARIANTS = ("train", "heldout")
HELDOUT_BUCKETS = 5  # one bucket in five is held out
MAX_DRAWS_PER_TASK = 1000  # rejection sampling into the wanted variant needs ~5 draws; this is a safety stop


def _is_heldout(prompt: str) -> bool:
    digest = hashlib.sha256(prompt.encode()).digest()
    return digest[0] % HELDOUT_BUCKETS == 0


def _math_solution(work: str, answer: int, unit: str | None) -> str:
    final = f"{answer} {unit}" if unit else f"{answer}"
    return f"{work}\nAnswer: {final}"


# --- average speed word problems, with units ------------------------------------------------------

_VEHICLES = ("car", "bus", "train", "truck", "cyclist", "runner", "boat")
_SPEED_UNITS = (
    # (distance unit, time unit plural, speed unit)
    ("km", "hours", "km/h"),
    ("miles", "hours", "mph"),
    ("m", "seconds", "m/s"),
)


def _speed_task(rng: random.Random) -> dict:
    vehicle = rng.choice(_VEHICLES)
    dist_unit, time_unit, speed_unit = rng.choice(_SPEED_UNITS)
    speed = rng.randint(1, 9) * 10
    hours = rng.randint(2, 4)
    total = speed * hours
    if rng.random() < 0.5:
        prompt = (
            f"A {vehicle} travels {total} {dist_unit} in {hours} {time_unit}. What is its average speed?"
        )
        work = f"{total} / {hours} = {speed}"
    else:
        # Two legs whose sum is the total distance: the classic average-speed problem.
        first = rng.randint(1, total // 10 - 1) * 10
        second = total - first
        prompt = (
            f"A {vehicle} travels {first} {dist_unit}, then {second} {dist_unit}. "
            f"The whole trip takes {hours} {time_unit}. What is its average speed?"
        )
        work = f"({first} + {second}) / {hours} = {total} / {hours} = {speed}"
    return {
        "kind": "math",
        "prompt": prompt,
        "answer": str(speed),
        "unit": speed_unit,
        "solution": _math_solution(work, speed, speed_unit),
    }


# --- arithmetic --------------------------------------------------------------------------------------


def _arithmetic_task(rng: random.Random) -> dict:
    op = rng.choice("+-*")
    # Small operands keep the facts few enough for the tiny model to learn within a minute.
    if op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
    else:
        a, b = rng.randint(1, 30), rng.randint(1, 30)
        if op == "-" and b > a:
            a, b = b, a
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    prompt = f"What is {a} {op} {b}?"
    return {
        "kind": "math",
        "prompt": prompt,
        "answer": str(value),
        "solution": _math_solution(f"{a} {op} {b} = {value}", value, None),
    }


# --- tiny coding tasks -------------------------------------------------------------------------------

_LIST_GENERATOR = "def generate(rng):\n    return [[rng.randint(-9, 9) for _ in range(rng.randint(0, 8))]]"
_INT_GENERATOR = "def generate(rng):\n    return [rng.randint(-50, 50)]"


def _run_reference(source: str, entry_point: str, args: list) -> object:
    # Our own reference solutions only, so exec here is safe; it gives public tests their expected values.
    namespace: dict = {}
    exec(source, namespace)
    return namespace[entry_point](*json.loads(json.dumps(args)))


def _code_task(rng: random.Random) -> dict:
    k = rng.randint(2, 9)
    template = rng.choice(("add", "scale", "count_above", "sort"))
    if template == "add":
        entry, words = "add_k", f"returns x plus {k}"
        solution = f"def add_k(x):\n    return x + {k}"
        signature, public_args, hidden_args, generator = "add_k(x)", [[3]], [[0], [-7]], _INT_GENERATOR
    elif template == "scale":
        entry, words = "scale", f"returns a list of every number in xs times {k}"
        solution = f"def scale(xs):\n    return [x * {k} for x in xs]"
        signature, public_args, hidden_args, generator = "scale(xs)", [[[1, 2]]], [[[]], [[-3, 0]]], _LIST_GENERATOR
    elif template == "count_above":
        k = rng.randint(-3, 5)
        entry, words = "count_above", f"returns how many numbers in xs are greater than {k}"
        solution = f"def count_above(xs):\n    return sum(1 for x in xs if x > {k})"
        signature, public_args = "count_above(xs)", [[[k - 1, k, k + 1]]]
        hidden_args, generator = [[[]], [[k + 5, k + 6]]], _LIST_GENERATOR
    else:
        descending = rng.random() < 0.5
        entry = "sort_numbers"
        words = "returns the numbers in xs sorted from " + ("largest to smallest" if descending else "smallest to largest")
        solution = "def sort_numbers(xs):\n    return sorted(xs" + (", reverse=True)" if descending else ")")
        signature, public_args, hidden_args, generator = "sort_numbers(xs)", [[[3, 1, 2]]], [[[]], [[2, 2, 1]]], _LIST_GENERATOR
    prompt = f"Write a Python function {signature} that {words}."
    return {
        "kind": "code",
        "prompt": prompt,
        "entry_point": entry,
        "reference_solution": solution,
        "public_tests": [{"args": a, "expected": _run_reference(solution, entry, a)} for a in public_args],
        "hidden_tests": [{"args": a} for a in hidden_args],
        "random_tests": {"generator": generator, "count": 20},
        "limits": {"time_s": 2, "memory_mb": 256},
        "solution": solution,
    }


FAMILIES: dict[str, Callable[[random.Random], dict]] = {
    "speed": _speed_task,
    "arithmetic": _arithmetic_task,
    "code": _code_task,
}


def iter_tasks(family: str, *, seed: int, variant: str = "train") -> Iterator[dict]:
    """Endless stream of task rows of one family and variant, deterministic under `seed`."""
    if family not in FAMILIES:
        raise PairwiseInputError(
            f"unknown task family {family!r}; choose one of: {', '.join(sorted(FAMILIES))}"
        )
    if variant not in VARIANTS:
        raise PairwiseInputError(f"unknown variant {variant!r}; choose one of: {', '.join(VARIANTS)}")
    rng = random.Random(f"{family}:{variant}:{seed}")
    want_heldout = variant == "heldout"
    index = 0
    while True:
        for _ in range(MAX_DRAWS_PER_TASK):
            task = FAMILIES[family](rng)
            if _is_heldout(task["prompt"]) == want_heldout:
                break
        else:  # pragma: no cover - the hash split makes this practically impossible
            raise RuntimeError(f"could not draw a {variant} task for family {family}")
        index += 1
        suffix = "-heldout" if want_heldout else ""
        yield {"task_id": f"{family}{suffix}-{index:04d}", **task}


def make_tasks(family: str, *, n: int, seed: int, variant: str = "train") -> list[dict]:
    """`n` task rows of one family (`family` may also be a comma-separated list, drawn in turn)."""
    if n < 1:
        raise PairwiseInputError(f"--n must be at least 1, got {n}")
    names = [name.strip() for name in family.split(",") if name.strip()]
    if not names:
        raise PairwiseInputError("--family is empty; choose from: " + ", ".join(sorted(FAMILIES)))
    streams = [iter_tasks(name, seed=seed, variant=variant) for name in names]
    return [next(streams[i % len(streams)]) for i in range(n)]


def tasks_make_main(args) -> int:
    """`python -m training tasks make --family F --n N --seed S --out FILE [--variant heldout]`."""
    out = Path(args.out)
    if not out.parent.exists():
        raise PairwiseInputError(f"--out {out}: folder {out.parent} does not exist; create it first")
    rows = make_tasks(args.family, n=args.n, seed=args.seed, variant=args.variant)
    write_tasks(out, rows)  # checks every row against the task schema, then writes aside and renames
    print(f"wrote {len(rows)} {args.variant} tasks of family {args.family} to {args.out}")
    return 0

"""Synthetic task families: small, checkable problems written as task rows (docs/training.md, "Task files").

They feed the tiny SFT checkpoint, the demo, GRPO and `python -m training eval`. Every family draws a
problem as a structure (one kind of question, e.g. a one-leg or a two-leg trip) and its given values,
then words it with one of the structure's wordings.

`--variant heldout` changes both: a problem is held out when the hash of its family, structure and
sorted given values falls in a fixed fifth of the hash space, and held-out problems are worded only
with held-out wordings, which the train variant never uses. So a held-out prompt never equals a
training prompt, its numbers never form a training problem of the same structure (whatever the
seeds), and its wording was never seen in training. A structure with no given values (sorting a
list) appears in both variants, told apart by wording alone.

Each row also carries `solution` (the worked answer the tiny model is trained to write) and `meta`
(family, variant, structure, wording, values): free-form keys that no prompt shows and no scorer reads.
"""

import hashlib
import json
import random
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from training.errors import PairwiseInputError
from training.tasks import write_tasks

VARIANTS = ("train", "heldout")
HELDOUT_BUCKETS = 5  # one bucket in five is held out
MAX_DRAWS_PER_TASK = 1000  # rejection sampling into the wanted variant needs ~5 draws; this is a safety stop
SHORT_ANSWER_MAX_CHARS = 60  # a sentence: "There are 14 days in two weeks. Answer: 14" fits, a lecture does not


@dataclass
class Problem:
    """One drawn problem before it is worded: `fields` fill the wording; `row` is the rest of the task row."""

    structure: str
    values: tuple  # the given values; the held-out split hashes them (sorted) with family and structure
    fields: dict
    row: dict = field(default_factory=dict)


def is_heldout(family: str, structure: str, values) -> bool:
    """Whether a problem with these given values belongs to the held-out variant (order of values ignored)."""
    key = json.dumps([family, structure, sorted(values, key=repr)])
    return hashlib.sha256(key.encode()).digest()[0] % HELDOUT_BUCKETS == 0


def _math_solution(work: str, answer: int, unit: str | None) -> str:
    final = f"{answer} {unit}" if unit else f"{answer}"
    return f"{work}\nAnswer: {final}" if work else f"Answer: {final}"


def _math_row(work: str, answer: int, unit: str | None = None, **extra) -> dict:
    row = {"kind": "math", "answer": str(answer)}
    if unit:
        row["unit"] = unit
    row.update(extra)
    row["solution"] = _math_solution(work, answer, unit)
    return row


# --- wordings ----------------------------------------------------------------------------------------
# family -> structure -> variant -> wordings. Held-out wordings are never used for training problems;
# tests check that no training prompt matches a held-out wording (and the other way round).

WORDINGS: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {
    "speed": {
        "one_leg": {
            "train": (
                "A {vehicle} travels {total} {dist} in {hours} {time}. What is its average speed?",
                "A {vehicle} covers {total} {dist} in {hours} {time}. What is its average speed?",
                "How fast does a {vehicle} go on average if it travels {total} {dist} in {hours} {time}?",
                "It takes a {vehicle} {hours} {time} to travel {total} {dist}. What is its average speed?",
                "A {vehicle} moves {total} {dist} during {hours} {time}. Calculate its average speed.",
            ),
            "heldout": (
                "A {vehicle} goes {total} {dist} in a time of {hours} {time}. Find its average speed.",
                "Over a distance of {total} {dist}, a {vehicle} spends {hours} {time}. What was its average speed?",
            ),
        },
        "two_legs": {
            "train": (
                "A {vehicle} travels {first} {dist}, then {second} {dist}. The whole trip takes {hours} {time}. "
                "What is its average speed?",
                "A {vehicle} goes {first} {dist} and then another {second} {dist}, taking {hours} {time} in total. "
                "What is its average speed?",
                "A {vehicle} drives {first} {dist} and later {second} {dist}; the trip lasts {hours} {time}. "
                "Calculate its average speed.",
                "In {hours} {time} a {vehicle} travels {first} {dist} and then {second} {dist}. "
                "What is its average speed?",
            ),
            "heldout": (
                "A {vehicle} first covers {first} {dist} and next {second} {dist}, {hours} {time} altogether. "
                "Find its average speed.",
                "On a trip of two parts, {first} {dist} and {second} {dist}, a {vehicle} spends {hours} {time}. "
                "What was its average speed?",
            ),
        },
    },
    "rate": {
        "flow": {
            "train": (
                "A pump moves {total} L of water in {minutes} minutes. What is its flow rate in L/min?",
                "A tap fills a {total} L tank in {minutes} minutes. What is its flow rate in L/min?",
            ),
            "heldout": ("In {minutes} minutes a hose delivers {total} L of water. Find its flow rate in L/min.",),
        },
        "packing": {
            "train": (
                "A machine packs {total} kg of flour in {hours} hours. How many kg does it pack per hour?",
                "A mill grinds {total} kg of grain in {hours} hours. What is its rate in kg/h?",
            ),
            "heldout": ("Working for {hours} hours, a loader moves {total} kg of sand. Find its rate in kg/h.",),
        },
        "price": {
            "train": (
                "{count} {things} cost {total} dollars. How many dollars does one {thing} cost?",
                "You pay {total} dollars for {count} {things}. What is the price of one {thing} in dollars?",
            ),
            "heldout": ("The bill for {count} {things} is {total} dollars. Find the price per {thing} in dollars.",),
        },
        "printing": {
            "train": (
                "A printer prints {total} pages in {minutes} minutes. How many pages does it print per minute?",
                "A copier makes {total} copies in {minutes} minutes. How many copies per minute is that?",
            ),
            "heldout": ("In {minutes} minutes a press turns out {total} sheets. Find its output per minute.",),
        },
    },
    "arithmetic": {
        op: {
            "train": ("What is {a} {op} {b}?", "Compute {a} {op} {b}.", "Calculate {a} {op} {b}.",
                      "What do you get from {a} {op} {b}?"),
            "heldout": ("Work out {a} {op} {b}.", "Find the value of {a} {op} {b}."),
        }
        for op in ("+", "-", "*")
    },
    "multistep": {
        "stock": {
            "train": (
                "A shop has {a} {items}. It sells {b} and then receives {c} boxes of {d} {items}. "
                "How many {items} does it have now?",
                "A shop starts with {a} {items}, sells {b}, then gets {c} boxes with {d} {items} each. "
                "How many {items} are there now?",
            ),
            "heldout": (
                "There are {a} {items} in a store. After {b} are sold, {c} crates of {d} {items} arrive. "
                "Find the number of {items} in the store.",
            ),
        },
        "savings": {
            "train": (
                "Sam saves {a} dollars a week for {w} weeks and then spends {b} dollars. "
                "How many dollars are left?",
                "Ana puts {a} dollars a week into a jar for {w} weeks, then takes out {b} dollars. "
                "How many dollars are in the jar?",
            ),
            "heldout": (
                "Over {w} weeks Lee sets aside {a} dollars each week; later {b} dollars are spent. "
                "Find how many dollars remain.",
            ),
        },
        "grouped": {
            "train": ("What is ({a} + {b}) * {c}?", "Compute ({a} + {b}) * {c}."),
            "heldout": ("Work out ({a} + {b}) * {c}.",),
        },
        "product_minus": {
            "train": ("What is {a} * {b} - {c}?", "Compute {a} * {b} - {c}."),
            "heldout": ("Work out {a} * {b} - {c}.",),
        },
    },
    "convert": {
        "factor": {
            "train": ("Convert {value} {source} to {target}.", "What is {value} {source} in {target}?"),
            "heldout": ("Express {value} {source} in {target}.", "Write {value} {source} as a number of {target}."),
        },
        "temperature": {
            "train": ("Convert {value} {source} to {target}.", "What is {value} {source} in {target}?"),
            "heldout": ("Express {value} {source} in {target}.",),
        },
    },
    "code": {
        structure: {
            "train": ("Write a Python function {signature} that {words}.", "Define {signature} in Python: it {words}."),
            "heldout": ("Implement the Python function {signature}; it {words}.",
                        "Give Python code for {signature}, a function that {words}."),
        }
        for structure in ("add", "scale", "count_above", "sort", "filter_above", "count_multiples", "cap")
    },
    "missing": {
        "speed_no_time": {
            "train": ("A {vehicle} travels {total} {dist}. What is its average speed?",
                      "A {vehicle} covers {total} {dist} on a trip. How fast does it go on average?"),
            "heldout": ("Over a distance of {total} {dist}, what average speed does a {vehicle} reach?",),
        },
        "speed_no_distance": {
            "train": ("A {vehicle} drives for {hours} {time}. What is its average speed?",
                      "A {vehicle} is on the road for {hours} {time}. How fast does it go on average?"),
            "heldout": ("During {hours} {time} of travel, what average speed does a {vehicle} keep?",),
        },
        "flow_no_time": {
            "train": ("A pump moves {total} L of water. What is its flow rate in L/min?",
                      "A tap fills a {total} L tank. What is its flow rate in L/min?"),
            "heldout": ("A hose delivers {total} L of water. Find its flow rate in L/min.",),
        },
        "price_no_count": {
            "train": ("Some {things} cost {total} dollars in total. How many dollars does one {thing} cost?",
                      "You pay {total} dollars for a bag of {things}. What is the price of one {thing}?"),
            "heldout": ("The bill for a box of {things} is {total} dollars. Find the price per {thing}.",),
        },
    },
    "simple": {
        "days_in_weeks": {
            "train": ("How many days are in {n} weeks?", "How many days do {n} weeks have?"),
            "heldout": ("Quick question: {n} weeks make how many days?",),
        },
        "sum": {
            "train": ("What is {a} plus {b}?", "What do you get when you add {a} and {b}?"),
            "heldout": ("Quick question: {a} and {b} together make what?",),
        },
        "larger": {
            "train": ("Which number is larger, {a} or {b}?", "Which is bigger: {a} or {b}?"),
            "heldout": ("Quick question: of {a} and {b}, which is greater?",),
        },
        "half": {
            "train": ("What is half of {n}?", "What do you get if you halve {n}?"),
            "heldout": ("Quick question: {n} split into two equal parts gives what?",),
        },
        "day_after": {
            "train": ("What day comes after {day}?", "Which day of the week follows {day}?"),
            "heldout": ("Quick question: the day after {day} is which day?",),
        },
        "opposite": {
            "train": ("What is the opposite of {word}?", "Give the opposite of the word {word}."),
            "heldout": ("Quick question: which word means the reverse of {word}?",),
        },
    },
}


# --- average speed word problems, with units ------------------------------------------------------

_VEHICLES = ("car", "bus", "train", "truck", "cyclist", "runner", "boat")
_SPEED_UNITS = (
    # (distance unit, time unit plural, speed unit)
    ("km", "hours", "km/h"),
    ("miles", "hours", "mph"),
    ("m", "seconds", "m/s"),
)


def _speed(rng: random.Random) -> Problem:
    vehicle = rng.choice(_VEHICLES)
    dist_unit, time_unit, speed_unit = rng.choice(_SPEED_UNITS)
    speed = rng.randint(1, 9) * 10
    hours = rng.randint(2, 4)
    total = speed * hours
    fields = {"vehicle": vehicle, "dist": dist_unit, "time": time_unit, "hours": hours, "total": total}
    if rng.random() < 0.5:
        work = f"{total} / {hours} = {speed}"
        return Problem("one_leg", (total, hours), fields, _math_row(work, speed, speed_unit))
    # Two legs whose sum is the total distance: the classic average-speed problem.
    first = rng.randint(1, total // 10 - 1) * 10
    second = total - first
    work = f"({first} + {second}) / {hours} = {total} / {hours} = {speed}"
    return Problem("two_legs", (first, second, hours), {**fields, "first": first, "second": second},
                   _math_row(work, speed, speed_unit))


# --- other rates with units ----------------------------------------------------------------------------

_THINGS = (("pen", "pens"), ("notebook", "notebooks"), ("apple", "apples"), ("ticket", "tickets"), ("cup", "cups"))


def _rate(rng: random.Random) -> Problem:
    structure = rng.choice(("flow", "packing", "price", "printing"))
    rate = rng.randint(2, 12) * (5 if structure in ("flow", "printing") else 1)
    count = rng.randint(2, 9)
    total = rate * count
    work = f"{total} / {count} = {rate}"
    if structure == "flow":
        return Problem(structure, (total, count), {"total": total, "minutes": count}, _math_row(work, rate, "L/min"))
    if structure == "packing":
        return Problem(structure, (total, count), {"total": total, "hours": count}, _math_row(work, rate, "kg/h"))
    if structure == "price":
        thing, things = rng.choice(_THINGS)
        fields = {"total": total, "count": count, "thing": thing, "things": things}
        return Problem(structure, (total, count), fields, _math_row(work, rate))
    return Problem(structure, (total, count), {"total": total, "minutes": count}, _math_row(work, rate))


# --- arithmetic --------------------------------------------------------------------------------------


def _arithmetic(rng: random.Random) -> Problem:
    op = rng.choice("+-*")
    # Small operands keep the facts few enough for the tiny model to learn within a minute.
    if op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
    else:
        a, b = rng.randint(1, 30), rng.randint(1, 30)
        if op == "-" and b > a:
            a, b = b, a
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return Problem(op, (a, b), {"a": a, "b": b, "op": op}, _math_row(f"{a} {op} {b} = {value}", value))


# --- multi-step arithmetic -----------------------------------------------------------------------------

_ITEMS = ("pens", "apples", "books", "cups", "toys")


def _multistep(rng: random.Random) -> Problem:
    structure = rng.choice(("stock", "savings", "grouped", "product_minus"))
    if structure == "stock":
        a, b, c, d = rng.randint(20, 60), rng.randint(2, 19), rng.randint(2, 5), rng.randint(2, 9)
        left, added, value = a - b, c * d, a - b + c * d
        work = f"{a} - {b} = {left}\n{c} * {d} = {added}\n{left} + {added} = {value}"
        return Problem(structure, (a, b, c, d), {"a": a, "b": b, "c": c, "d": d, "items": rng.choice(_ITEMS)},
                       _math_row(work, value))
    if structure == "savings":
        a, w = rng.randint(2, 9) * 5, rng.randint(2, 8)
        saved = a * w
        b = rng.randint(1, saved // 5 - 1) * 5
        value = saved - b
        work = f"{a} * {w} = {saved}\n{saved} - {b} = {value}"
        return Problem(structure, (a, w, b), {"a": a, "w": w, "b": b}, _math_row(work, value))
    if structure == "grouped":
        a, b, c = rng.randint(1, 12), rng.randint(1, 12), rng.randint(2, 6)
        total, value = a + b, (a + b) * c
        work = f"{a} + {b} = {total}\n{total} * {c} = {value}"
        return Problem(structure, (a, b, c), {"a": a, "b": b, "c": c}, _math_row(work, value))
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 20)
    product, value = a * b, a * b - c
    work = f"{a} * {b} = {product}\n{product} - {c} = {value}"
    return Problem(structure, (a, b, c), {"a": a, "b": b, "c": c}, _math_row(work, value))


# --- unit conversion (checked by pint in the tests) -------------------------------------------------------

# (source as written, target as written, target unit for the answer, factor, largest value)
_CONVERSIONS = (
    ("km", "m", "m", 1000, 20),
    ("m", "cm", "cm", 100, 20),
    ("kg", "g", "g", 1000, 20),
    ("L", "mL", "mL", 1000, 20),
    ("hours", "minutes", "min", 60, 12),
    ("minutes", "seconds", "s", 60, 20),
    ("feet", "inches", "inches", 12, 20),
)


def _convert(rng: random.Random) -> Problem:
    if rng.random() < 0.2:
        celsius = rng.randint(-8, 20) * 5  # multiples of 5 °C are whole °F
        fahrenheit = celsius * 9 // 5 + 32
        work = f"{celsius} * 9 / 5 + 32 = {fahrenheit}"
        fields = {"value": celsius, "source": "°C", "target": "°F"}
        # unit_exact: the answer must be written in °F; restating the given °C is not a conversion.
        return Problem("temperature", (celsius,), fields, _math_row(work, fahrenheit, "°F", unit_exact=True))
    source, target, unit, factor, largest = rng.choice(_CONVERSIONS)
    value = rng.randint(1, largest)
    converted = value * factor
    fields = {"value": value, "source": source, "target": target}
    return Problem("factor", (source, value), fields,
                   _math_row(f"{value} * {factor} = {converted}", converted, unit, unit_exact=True))


# --- tiny coding tasks -------------------------------------------------------------------------------

_LIST_GENERATOR = "def generate(rng):\n    return [[rng.randint(-9, 9) for _ in range(rng.randint(0, 8))]]"
_INT_GENERATOR = "def generate(rng):\n    return [rng.randint(-50, 50)]"


def _run_reference(source: str, entry_point: str, args: list) -> object:
    # Our own reference solutions only, so exec here is safe; it gives public tests their expected values.
    namespace: dict = {}
    exec(source, namespace)
    return namespace[entry_point](*json.loads(json.dumps(args)))


def _code(rng: random.Random) -> Problem:
    k = rng.randint(2, 9)
    structure = rng.choice(("add", "scale", "count_above", "sort", "filter_above", "count_multiples", "cap"))
    values: tuple = (k,)
    if structure == "add":
        entry, words = "add_k", f"returns x plus {k}"
        solution = f"def add_k(x):\n    return x + {k}"
        signature, public_args, hidden_args, generator = "add_k(x)", [[3]], [[0], [-7]], _INT_GENERATOR
    elif structure == "scale":
        entry, words = "scale", f"returns a list of every number in xs times {k}"
        solution = f"def scale(xs):\n    return [x * {k} for x in xs]"
        signature, public_args, hidden_args, generator = "scale(xs)", [[[1, 2]]], [[[]], [[-3, 0]]], _LIST_GENERATOR
    elif structure in ("count_above", "filter_above"):
        k = rng.randint(-3, 5)
        values = (k,)
        if structure == "count_above":
            entry, words = "count_above", f"returns how many numbers in xs are greater than {k}"
            solution = f"def count_above(xs):\n    return sum(1 for x in xs if x > {k})"
        else:
            entry, words = "filter_above", f"returns the numbers in xs that are greater than {k}, in order"
            solution = f"def filter_above(xs):\n    return [x for x in xs if x > {k}]"
        signature, public_args = f"{entry}(xs)", [[[k - 1, k, k + 1]]]
        hidden_args, generator = [[[]], [[k + 5, k + 6]]], _LIST_GENERATOR
    elif structure == "count_multiples":
        k = rng.randint(2, 5)
        values = (k,)
        entry, words = "count_multiples", f"returns how many numbers in xs are multiples of {k}"
        solution = f"def count_multiples(xs):\n    return sum(1 for x in xs if x % {k} == 0)"
        signature, public_args = "count_multiples(xs)", [[[k, k + 1, 2 * k]]]
        hidden_args, generator = [[[]], [[0, -k, 1]]], _LIST_GENERATOR
    elif structure == "cap":
        entry, words = "cap", f"returns x, but never more than {k}"
        solution = f"def cap(x):\n    return min(x, {k})"
        signature, public_args, hidden_args, generator = "cap(x)", [[k + 3]], [[k], [-4]], _INT_GENERATOR
    else:
        descending = rng.random() < 0.5
        values = ()  # nothing to change but the wording: sorting is in both variants, worded apart
        entry = "sort_numbers"
        words = "returns the numbers in xs sorted from " + ("largest to smallest" if descending else "smallest to largest")
        solution = "def sort_numbers(xs):\n    return sorted(xs" + (", reverse=True)" if descending else ")")
        signature, public_args, hidden_args, generator = "sort_numbers(xs)", [[[3, 1, 2]]], [[[]], [[2, 2, 1]]], _LIST_GENERATOR
    row = {
        "kind": "code",
        "entry_point": entry,
        "reference_solution": solution,
        "public_tests": [{"args": a, "expected": _run_reference(solution, entry, a)} for a in public_args],
        "hidden_tests": [{"args": a} for a in hidden_args],
        "random_tests": {"generator": generator, "count": 20},
        "limits": {"time_s": 2, "memory_mb": 256},
        "solution": solution,
    }
    return Problem(structure, values, {"signature": signature, "words": words}, row)


# --- missing information: a needed quantity is absent ------------------------------------------------------


def _missing_row(missing: str, terms: list[str]) -> dict:
    # Short, so that a small model's length limit (the tiny checkpoint samples 64 characters) holds it.
    solution = f"The {missing} is not given.\nAnswer: cannot be determined"
    return {"kind": "missing_info", "missing": missing, "missing_terms": terms, "solution": solution}


def _missing(rng: random.Random) -> Problem:
    structure = rng.choice(("speed_no_time", "speed_no_distance", "flow_no_time", "price_no_count"))
    vehicle = rng.choice(_VEHICLES)
    dist_unit, time_unit, _ = rng.choice(_SPEED_UNITS)
    if structure == "speed_no_time":
        total = rng.randint(2, 36) * 10
        row = _missing_row("time", ["time", "how long", "duration", time_unit])
        return Problem(structure, (total,), {"vehicle": vehicle, "total": total, "dist": dist_unit}, row)
    if structure == "speed_no_distance":
        hours = rng.randint(2, 9)
        row = _missing_row("distance", ["distance", "how far"])
        return Problem(structure, (hours,), {"vehicle": vehicle, "hours": hours, "time": time_unit}, row)
    if structure == "flow_no_time":
        total = rng.randint(2, 40) * 5
        row = _missing_row("time", ["time", "how long", "duration", "minutes"])
        return Problem(structure, (total,), {"total": total}, row)
    thing, things = rng.choice(_THINGS)
    total = rng.randint(4, 60)
    row = _missing_row(f"number of {things}", ["number of", "how many", "count", "quantity"])
    return Problem(structure, (total,), {"total": total, "thing": thing, "things": things}, row)


# --- simple questions: a short answer is right, a long one is a fault ---------------------------------------

_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_OPPOSITES = (
    ("hot", "cold", []), ("up", "down", []), ("big", "small", ["little"]), ("day", "night", []),
    ("left", "right", []), ("open", "closed", ["shut"]), ("fast", "slow", []), ("old", "new", ["young"]),
    ("full", "empty", []), ("early", "late", []), ("wet", "dry", []), ("light", "dark", ["heavy"]),
)


def _simple_row(answer, accept: list[str] | None = None) -> dict:
    row = {"kind": "short_answer", "answer": str(answer), "max_chars": SHORT_ANSWER_MAX_CHARS}
    if accept:
        row["accept"] = accept
    row["solution"] = f"Answer: {answer}"
    return row


def _simple(rng: random.Random) -> Problem:
    structure = rng.choice(("days_in_weeks", "sum", "larger", "half", "day_after", "opposite"))
    if structure == "days_in_weeks":
        n = rng.randint(2, 12)
        return Problem(structure, (n,), {"n": n}, _simple_row(7 * n))
    if structure in ("sum", "larger"):
        a, b = rng.randint(2, 60), rng.randint(2, 60)
        while b == a:
            b = rng.randint(2, 60)
        answer = a + b if structure == "sum" else max(a, b)
        return Problem(structure, (a, b), {"a": a, "b": b}, _simple_row(answer))
    if structure == "half":
        n = rng.randint(2, 50) * 2
        return Problem(structure, (n,), {"n": n}, _simple_row(n // 2))
    if structure == "day_after":
        index = rng.randrange(7)
        return Problem(structure, (_DAYS[index],), {"day": _DAYS[index]}, _simple_row(_DAYS[(index + 1) % 7]))
    word, opposite, also = rng.choice(_OPPOSITES)
    return Problem(structure, (word,), {"word": word}, _simple_row(opposite, also))


FAMILIES: dict[str, Callable[[random.Random], Problem]] = {
    "speed": _speed,
    "rate": _rate,
    "arithmetic": _arithmetic,
    "multistep": _multistep,
    "convert": _convert,
    "code": _code,
    "missing": _missing,
    "simple": _simple,
}
# The families that catch what accuracy hides: their answers are judged, not only computed.
EVALUATION_FAMILIES = ("missing", "simple")


def wording_fields(wording: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(wording) if name]


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
            problem = FAMILIES[family](rng)
            if not problem.values or is_heldout(family, problem.structure, problem.values) == want_heldout:
                break
        else:  # pragma: no cover - the hash split makes this practically impossible
            raise RuntimeError(f"could not draw a {variant} task for family {family}")
        wordings = WORDINGS[family][problem.structure][variant]
        wording_index = rng.randrange(len(wordings))
        prompt = wordings[wording_index].format(**problem.fields)
        index += 1
        suffix = "-heldout" if want_heldout else ""
        meta = {"family": family, "variant": variant, "structure": problem.structure,
                "wording": f"{variant}-{wording_index + 1}", "values": list(problem.values)}
        yield {"task_id": f"{family}{suffix}-{index:04d}", "prompt": prompt, **problem.row, "meta": meta}


def make_tasks(family: str, *, n: int, seed: int, variant: str = "train") -> list[dict]:
    """`n` task rows of one family (`family` may also be a comma-separated list, drawn in turn)."""
    if n < 1:
        raise PairwiseInputError(f"--n must be at least 1, got {n}")
    names = [name.strip() for name in family.split(",") if name.strip()]
    if not names:
        raise PairwiseInputError("--family is empty; choose from: " + ", ".join(sorted(FAMILIES)))
    streams = [iter_tasks(name, seed=seed, variant=variant) for name in names]
    return [next(streams[i % len(streams)]) for i in range(n)]


def open_tasks(tasks: list[dict]) -> list[dict]:
    """The same prompts as open tasks (kind open): the answer, tests and every other key a verifier reads are
    dropped, so only a reward model can score an answer. The worked `solution` stays as an SFT target; meta keeps
    the family and records the kind the task had (`verifiable_kind`), so a held-out check can still be made."""
    kept = ("task_id", "prompt", "tags", "solution")
    return [{**{key: task[key] for key in kept if key in task}, "kind": "open",
             "meta": {**(task.get("meta") or {}), "verifiable_kind": task["kind"]}} for task in tasks]


def tasks_make_main(args) -> int:
    """`python -m training tasks make --family F --n N --seed S --out FILE [--variant heldout]`."""
    out = Path(args.out)
    if not out.parent.exists():
        raise PairwiseInputError(f"--out {out}: folder {out.parent} does not exist; create it first")
    rows = make_tasks(args.family, n=args.n, seed=args.seed, variant=args.variant)
    if getattr(args, "open", False):
        rows = open_tasks(rows)
    write_tasks(out, rows)  # checks every row against the task schema, then writes aside and renames
    print(f"wrote {len(rows)} {args.variant} {'open ' if getattr(args, 'open', False) else ''}tasks of family "
          f"{args.family} to {args.out}")
    return 0

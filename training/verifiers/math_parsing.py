"""Reading answers with math-verify's own extraction and comparing them with its own `verify`.

A completion is read by math-verify's LaTeX and expression targets, boxed first: it finds the answer
(\\boxed{}, "final answer is", "answer:", then any LaTeX or number) and parses it, text answers
(\\text{Evelyn}), matrices, intervals, inequalities and equations included. A gold answer is read the
same way, so a whole worked solution works as gold; a bare gold ("x > 3", "\\frac{1}{2}") is read as
LaTeX. A multiple-choice gold (a letter A-E) is read with its string target.

math-verify's own timeouts are signal based and work only in a main thread, so they are off here
(parsing_timeout=None, timeout_seconds=None): MathVerifier runs this code in worker processes and kills
one that overruns.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from dataclasses import dataclass

from training.verifiers.math_extraction import normalise_numbers

MATH = "math"
TEXT = "text"
CHOICE = "choice"
CHOICES = ("A", "B", "C", "D", "E")

_DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox|####|\n")
_CHOICE_GOLD = re.compile(r"\(?([A-E])\)?\.?")
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_GROUPED_NUMBER = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
_WORDS = re.compile(r"[A-Za-z][A-Za-z'\- ]*")
_TEXT_WRAPPER = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\s*\{(.*)\}$")


def _quiet_math_verify() -> None:
    # math-verify warns once that its timeouts are off; the worker's hard kill replaces them.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)


@functools.lru_cache(maxsize=1)
def _targets() -> dict:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig

    latex = LatexExtractionConfig(boxed_match_priority=0)
    return {
        MATH: (latex, ExprExtractionConfig()),
        CHOICE: (StringExtractionConfig(strings=CHOICES, lowercase=False), latex),
    }


def read(text: str, kind: str = MATH) -> list:
    """math-verify's reading of text: [value, its text] (SymPy value, or a string for a choice), or []."""
    from math_verify import parse

    _quiet_math_verify()
    if not text.strip():
        return []
    return parse(text, extraction_config=_targets()[CHOICE if kind == CHOICE else MATH], parsing_timeout=None)


def value_of(reading: list):
    """The parsed value of a reading (None when math-verify matched text but could not parse it)."""
    from sympy import Basic, MatrixBase

    return next((value for value in reading if isinstance(value, (Basic, MatrixBase))), None)


def is_words(text: str) -> bool:
    """ "Evelyn", "no", "Monday" (a word answer), not "x", "ab" or "sin x" (math in letters)."""
    text = text.strip()
    return bool(_WORDS.fullmatch(text)) and (
        any(len(word) >= 3 for word in text.split()) or text.lower() in ("no", "yes")
    )


def as_latex(text: str) -> str:
    """Bare answer text as math-verify's LaTeX input; words become \\text{...}."""
    text = text.strip()
    return f"$\\text{{{text}}}$" if is_words(text) else f"${text}$"


# A stated answer longer than this is prose that our split could not cut, not one answer; parsing it
# can take LaTeX's parser minutes.
MAX_FRAGMENT_CHARS = 400


@functools.lru_cache(maxsize=65536)
def read_fragment(text: str) -> tuple:
    """math-verify's reading of one stated answer that our final-answer analysis cut out."""
    if len(text) > MAX_FRAGMENT_CHARS:
        return ()
    if _PLAIN_NUMBER.fullmatch(text.strip()):
        return tuple(read(text))  # its expression target: the same number, without the LaTeX parser
    reading = read(as_latex(text))
    if value_of(reading) is None:
        reading = read(text)
    return tuple(reading)


def choice_of(reading: list) -> str | None:
    """The choice letter in a reading: "B" from the string target, or from \\boxed{B}."""
    for value in reading:
        letter = str(getattr(value, "name", value)).strip().upper()
        if letter in CHOICES:
            return letter
    return None


@dataclass(frozen=True)
class GoldAnswer:
    """A task's answer as math-verify reads it."""

    text: str
    kind: str  # MATH, TEXT (words: \\text{Evelyn}) or CHOICE (a letter A-E)
    values: tuple = ()
    choice: str | None = None
    # several values (a set, tuple, interval, matrix, "2, 3", "(p,q)=(3,2)", "a=4,-8"): commas separate
    is_list: bool = False

    @property
    def value(self):
        return value_of(list(self.values))


@functools.lru_cache(maxsize=4096)
def parse_gold(answer: str) -> GoldAnswer | None:
    """The gold answer, or None when math-verify finds nothing it can parse in it."""
    from sympy import Eq, MatrixBase, Set, Symbol, Tuple

    # Commas in a gold answer are left alone ("2, 3" lists two values), unless the whole answer is one
    # number in thousands ("12,345").
    text = normalise_numbers(answer, list_commas=True).strip()
    if _GROUPED_NUMBER.fullmatch(text):
        text = text.replace(",", "")
    unwrapped = _TEXT_WRAPPER.sub(r"\1", text.strip("$ "))
    letter = _CHOICE_GOLD.fullmatch(unwrapped.strip())
    if letter:
        return GoldAnswer(text, CHOICE, choice=letter.group(1))
    if _DELIMITED.search(text) or _PLAIN_NUMBER.fullmatch(text):
        reading = read(text)
    else:
        reading = read(as_latex(text))
        if value_of(reading) is None:
            reading = read(text)
    value = value_of(reading)
    if value is None:
        return None
    word = isinstance(value, Symbol) and len(value.name) > 1 and (is_words(text) or "\\text" in text)
    # A labelled answer, "(p,q)=(3,2)" or "a=4,-8,-10", lists what its right-hand side lists.
    stated = value.rhs if isinstance(value, Eq) else value
    is_list = isinstance(stated, (Set, Tuple, MatrixBase))
    return GoldAnswer(text, TEXT if word else MATH, tuple(reading), is_list=is_list)


# ---------------------------------------------------------------- comparing


def _percent_base(value):
    """X for math-verify's X% (X * 1/100 kept unevaluated), else None."""
    from sympy import Mul, Rational, UnevaluatedExpr

    if isinstance(value, Mul) and len(value.args) == 2 and value.args[1] == UnevaluatedExpr(Rational(1, 100)):
        return value.args[0]
    return None


def as_number(value) -> float | None:
    """A real number's float value, or None (a symbol, a set, a complex number, ...)."""
    try:
        if value is None or not getattr(value, "is_number", False):
            return None
        number = complex(value.doit().evalf(30))
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None
    return number.real if number.imag == 0 else None


def is_percent(value) -> bool:
    return _percent_base(value) is not None


def _integer_percent(value) -> int | None:
    """N for math-verify's N% with N an integer: "9%" answers "9" as math-verify's verify allows."""
    from sympy import Integer

    base = _percent_base(value)
    return int(base) if isinstance(base, Integer) else None


def _integer(value) -> int | None:
    from sympy import Integer

    return int(value) if isinstance(value, Integer) else None


def numbers_close(a: float, b: float, relative_tolerance: float, absolute_tolerance: float = 0.0) -> bool:
    if math.isnan(a) or math.isnan(b):
        return False
    return math.isclose(a, b, rel_tol=relative_tolerance, abs_tol=absolute_tolerance) or a == b


def _is_solved_inequality(value) -> bool:
    """ "x > 3", "-4 \\le x < 1": inequalities that bound one variable by numbers, so the set they
    describe is the answer itself (not "x^2 > 4", which is still to be solved)."""
    from sympy import And, Ge, Gt, Le, Lt, Symbol

    relations = value.args if isinstance(value, And) else (value,)
    variables = set()
    for relation in relations:
        if not isinstance(relation, (Ge, Gt, Le, Lt)):
            return False
        sides = (relation.lhs, relation.rhs)
        symbols = [side for side in sides if isinstance(side, Symbol)]
        numbers = [side for side in sides if side.is_number]
        if len(symbols) != 1 or len(numbers) != 1:
            return False
        variables.add(symbols[0])
    return len(variables) == 1


def readings_match(gold: tuple | list, candidate: tuple | list, relative_tolerance: float) -> bool:
    """math-verify's `verify`, except for two plain numbers, which must agree within our relative
    tolerance: math-verify rounds to 6 places, so it calls 1/2^99 equal to 1/2^98. As in `verify`, an
    integer percentage also answers the bare integer (9% and 9). A set as gold ("[6, \\infty)") is
    also answered by the same set written as a solved inequality ("x \\geq 6"), which `verify` allows
    only when asked (allow_set_relation_comp)."""
    from math_verify import verify

    _quiet_math_verify()
    if not gold or not candidate:
        return False
    gold_value, candidate_value = value_of(list(gold)), value_of(list(candidate))
    gold_number, candidate_number = as_number(gold_value), as_number(candidate_value)
    if gold_number is not None and candidate_number is not None:
        if numbers_close(gold_number, candidate_number, relative_tolerance):
            return True
        percent = _integer_percent(gold_value), _integer_percent(candidate_value)
        whole = _integer(gold_value), _integer(candidate_value)
        return (percent[0] is not None and percent[0] == whole[1]) or (
            percent[1] is not None and percent[1] == whole[0]
        )
    from sympy import Set

    as_set = isinstance(gold_value, Set) and _is_solved_inequality(candidate_value)
    return bool(verify(list(gold), list(candidate), timeout_seconds=None, allow_set_relation_comp=as_set))

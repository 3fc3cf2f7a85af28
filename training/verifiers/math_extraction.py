"""Finding the final answer of a math completion and splitting it into value and unit.

Order of preference: every \\boxed{...}; else every "the answer is ..." / "Answer: ..."; else a last
line that is nothing but an answer; else the last number (which costs the format component). An
answer span is split at top-level separators (",", ";", "or", "and", "but", "not", "it is") so that
"not 50, it is 75" yields 75 (50 is ruled out) and "50 or 75" yields two different answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from training.verifiers.units import parse_unit

BOXED = "boxed"
ANCHORED = "anchored"
FINAL_LINE = "final_line"
LAST_NUMBER = "last_number"
NO_ANSWER = "none"

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANCHOR = re.compile(
    r"(?:final\s+answer|the\s+answer|answer)\s*(?:is|:|=|would\s+be|will\s+be)\s*:?\s*(?P<span>[^\n]*)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
_NUMBER = re.compile(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_TEXT_COMMANDS = re.compile(r"\\(?:text|mathrm|textbf|textit|mbox|operatorname|mathbf|rm)\s*\{([^{}]*)\}")
_SEPARATORS = re.compile(
    r"[,;]|\b(?:or|and|but|instead\s+of|rather\s+than|it\s+is|it's|not|isn't)\b", re.IGNORECASE
)
_NEGATING = re.compile(r"^(?:not|isn't|instead\s+of|rather\s+than)$", re.IGNORECASE)
_LEAD_WORDS = re.compile(
    r"^(?:(?:is|equals|equal\s+to|approximately|about|around|roughly|exactly|only|just|so|then|thus|"
    r"therefore|hence|we\s+get|≈|~|=|:)\s*)+",
    re.IGNORECASE,
)
_SCIENTIFIC = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)(?:[eE]([-+]?\d+)|\s*(?:\\times|×|\*|\\cdot|·)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?)(?![\w.])"
)
_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?![\d,])")
_LATEX_WORD = re.compile(r"\\[A-Za-z]+")


@dataclass
class Quantity:
    """One answer: a math expression (text for math-verify) and, maybe, a unit written after it."""

    expression: str
    unit_text: str | None = None

    @property
    def unit(self):
        return parse_unit(self.unit_text) if self.unit_text else None


@dataclass
class FinalAnswers:
    method: str
    spans: list[str]


def _boxed_contents(text: str) -> list[str]:
    contents = []
    for match in _BOX_START.finditer(text):
        depth, start = 1, match.end()
        for index in range(start, len(text)):
            if text[index] == "{":
                depth += 1
            elif text[index] == "}":
                depth -= 1
                if depth == 0:
                    contents.append(text[start:index])
                    break
    return contents


def clean_latex(text: str) -> str:
    """Strips the LaTeX and markdown wrapping around an answer, keeping its math."""
    text = text.replace("**", " ").replace("\\$", " dollars ")
    for wrapper in ("$", "\\(", "\\)", "\\[", "\\]", "\\displaystyle", "\\left", "\\right"):
        text = text.replace(wrapper, " ")
    previous = None
    while previous != text:
        previous, text = text, _TEXT_COMMANDS.sub(r" \1 ", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\%", "%")
    text = re.sub(r"\^\s*\{?\\circ\}?", "°", text)
    text = re.sub(r"\\[,;:! ]|~", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def find_final_answers(completion: str) -> FinalAnswers:
    boxed = _boxed_contents(completion)
    if boxed:
        return FinalAnswers(BOXED, boxed)
    plain = completion.replace("**", "")
    anchored = []
    for match in _ANCHOR.finditer(plain):
        span = _SENTENCE_END.split(match.group("span"), maxsplit=1)[0].strip()
        if span:
            anchored.append(span)
    if anchored:
        return FinalAnswers(ANCHORED, anchored)
    lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
    if lines and is_bare_answer(lines[-1]):
        return FinalAnswers(FINAL_LINE, [lines[-1]])
    numbers = list(_NUMBER.finditer(completion))
    if numbers:
        last = numbers[-1]
        rest = completion[last.end() :].split("\n", 1)[0]
        rest = _SENTENCE_END.split(rest, maxsplit=1)[0]
        return FinalAnswers(LAST_NUMBER, [last.group(0) + rest])
    return FinalAnswers(NO_ANSWER, [])


def is_bare_answer(line: str) -> bool:
    """A line that holds only an answer: "$\\frac{1}{2}$", "50 km/h", "= 12." (no prose)."""
    cleaned = clean_latex(line).rstrip(".").strip()
    cleaned = _LEAD_WORDS.sub("", cleaned).strip()
    if not cleaned or not re.search(r"\d|\\pi|\\sqrt|\\infty", cleaned) or len(cleaned) > 60:
        return False
    quantity = parse_quantity(cleaned)
    words = set(re.findall(r"[A-Za-z]{2,}", _LATEX_WORD.sub("", cleaned)))
    return words <= set(re.findall(r"[A-Za-z]{2,}", quantity.unit_text or ""))


def _top_level_mask(text: str) -> str:
    """text with everything inside (), [], {} blanked, so separators there are not split on."""
    depth, out = 0, []
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
            out.append(" ")
            continue
        out.append(char if depth == 0 else " ")
    return "".join(out)


def split_answer_parts(span: str) -> list[tuple[str, bool]]:
    """[(part, negated)] for each answer a span states; a negated part is one it rules out."""
    span = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), span)
    mask = _top_level_mask(span)
    parts, start, negated = [], 0, False
    for match in _SEPARATORS.finditer(mask):
        parts.append((span[start : match.start()], negated))
        negated = bool(_NEGATING.match(match.group(0).strip()))
        start = match.end()
    parts.append((span[start:], negated))
    return [(part.strip(), neg) for part, neg in parts if re.search(r"\d|\\pi|\\sqrt|\\infty", part)]


def normalise_expression(text: str) -> str:
    """Rewrites what math-verify misreads: 5e1 and 5 \\times 10^{1} become 50; 1,000 becomes 1000."""
    text = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)

    def plain_decimal(match: re.Match) -> str:
        exponent = match.group(2) or match.group(3)
        try:
            value = Decimal(f"{match.group(1)}e{exponent}")
        except InvalidOperation:
            return match.group(0)
        return format(value.normalize(), "f")

    return _SCIENTIFIC.sub(plain_decimal, text).strip()


def parse_quantity(part: str) -> Quantity:
    """Splits "13.89 m/s" into expression "13.89" and unit "m/s"; text after "=" wins ("v = 5 m")."""
    part = clean_latex(part).rstrip(".").strip()
    mask = _top_level_mask(part)
    if "=" in mask:
        part = part[mask.rindex("=") + 1 :].strip()
    part = _LEAD_WORDS.sub("", part).strip()
    glued = re.match(r"^([-+]?\d[\d.,]*)([A-Za-z°%µ][^\s]*)(.*)$", part)
    if glued and not re.fullmatch(r"[eE][-+]?\d+", glued.group(2)) and parse_unit(glued.group(2)):
        part = f"{glued.group(1)} {glued.group(2)}{glued.group(3)}"
    tokens = part.split()
    for split_at in range(1, len(tokens)):
        head = " ".join(tokens[:split_at])
        if not re.search(r"\d|\\pi|\\sqrt|\\infty", head):
            continue
        for end in range(len(tokens), split_at, -1):
            tail = " ".join(tokens[split_at:end])
            if parse_unit(tail) is not None:
                return Quantity(normalise_expression(head), tail)
    # No unit: drop trailing plain words ("5 apples"), keep LaTeX commands and symbols.
    while len(tokens) > 1 and re.fullmatch(r"[A-Za-z]{2,}[.,]?", tokens[-1]):
        tokens.pop()
    return Quantity(normalise_expression(" ".join(tokens)))


def extract_quantities(span: str, *, split: bool = True) -> tuple[list[Quantity], list[Quantity]]:
    """(stated, ruled_out) quantities of one final-answer span."""
    if not split:
        return [parse_quantity(span)], []
    stated, ruled_out = [], []
    for part, negated in split_answer_parts(clean_latex(span)):
        (ruled_out if negated else stated).append(parse_quantity(part))
    return stated, ruled_out

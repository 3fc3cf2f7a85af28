"""Where a math completion states its final answer, and the parts of reading it that stay ours.

math-verify reads *what* an answer is (math_parsing.py). This module decides what it cannot, and is
kept small for that reason:

- which text is the final answer, and whether it is clearly marked (the format component): every
  \\boxed{...}, unless "Final answer: ..." follows the last box; else every "the answer is ..." /
  "Answer: ..."; else a last line that is nothing but an answer; else the last number;
- whether that final answer states one value, several ("50 or 75") or rules values out ("not 50, it
  is 75"): a span is split at top-level separators (",", ";", "or", "and", "but", "not", "it is");
- the unit written with the number, also after the box ("$\\boxed{50}$ km/h"), read by pint (units.py);
- number spellings math-verify misreads (5e1, 2 \\times 10^3 in prose, 1.000.000, 1\\,000, 11,\\!111,
  3{,}5) and decimal commas (3,5), rewritten before anything is parsed; a comma inside brackets ("(3,2)",
  "[-2,7)") or in a run of numbers ("-10,-8,4") separates values and is left to math-verify.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from training.verifiers.units import parse_unit

BOXED = "boxed"
ANCHORED = "anchored"
FINAL_LINE = "final_line"
LAST_NUMBER = "last_number"
NO_ANSWER = "none"
MARKED_METHODS = (BOXED, ANCHORED, FINAL_LINE)

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANCHOR = re.compile(
    r"(?:final\s+answer|the\s+answer|answer|antwort|réponse|respuesta|risposta)\s*"
    r"(?:(?:is|ist|est|es|è|would\s+be|will\s+be)\b|:|=)\s*:?\s*(?P<span>[^\n]*)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
# A number, not an exponent ("m^3", "10^{2}").
_NUMBER = re.compile(r"(?<![\d.^])(?<!\^\{)[-+]?\d+(?:\.\d+)?")
_TEXT_COMMANDS = re.compile(
    r"\\(?:text|mathrm|textbf|textit|textrm|mbox|operatorname|mathbf|rm)\s*\{([^{}]*)\}"
)
_SEPARATORS = re.compile(
    r"[,;]|\b(?:or|and|but|instead\s+of|rather\s+than|it\s+is|it's|not|isn't)\b", re.IGNORECASE
)
# A list answer ("2, 3", "(1, 2)") is split only where it rules something out.
_LIST_SEPARATORS = re.compile(r"\b(?:but|instead\s+of|rather\s+than|it\s+is|it's|not|isn't)\b", re.IGNORECASE)
_NEGATING = re.compile(r"^(?:not|isn't|instead\s+of|rather\s+than)$", re.IGNORECASE)
_LEAD_WORDS = re.compile(
    r"^(?:(?:is|equals|equal\s+to|approximately|about|around|roughly|exactly|only|just|so|then|thus|"
    r"therefore|hence|we\s+get|≈|~|=|:)\s*)+",
    re.IGNORECASE,
)
_INLINE_MATH = re.compile(r"\$[^$\n]+\$|\\\([^\n]*?\\\)")
_UNIT_WORDS = 4
_MATHY = re.compile(r"\d|\\pi|\\sqrt|\\infty")
_LATEX_WORD = re.compile(r"\\[A-Za-z]+")
# A clause after a word answer ("Evelyn, who ran fastest") is prose, not a second answer.
_PROSE_START = re.compile(
    r"\s*(?:who|which|that|because|since|as|so|with|where|when|while|after|before|if|for|the|an|"
    r"this|she|he|they|it)\b",
    re.IGNORECASE,
)

# Number spellings, rewritten in the whole completion before extraction.
_SCIENTIFIC = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)(?:[eE]([-+]?\d+)|\s*(?:\\times|×|\*|\\cdot|·)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?)"
    r"(?![\w]|\.\d)"
)
# 11,\!111 and 11,\! 111: the thousands separator of MATH solutions.
_LATEX_THOUSANDS = re.compile(
    r"(?<![\d.])\d{1,3}(?:(?:,\\!\s?|\\[,;: ]|~|\{,\}|[\u2009\u202f\u00a0])\d{3})+(?!\d)"
)
_LATEX_DECIMAL_COMMA = re.compile(r"(\d)\{,\}(\d)")
_SPACED_THOUSANDS = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?: \d{3})+(?!\d)")
_DOT_THOUSANDS = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:\.\d{3}){2,}(?!\d|[.,]\d)")
_DOT_THOUSANDS_COMMA_DECIMAL = re.compile(r"(?<![\d.,])([1-9]\d{0,2}(?:\.\d{3})+),(\d+)(?![\d.,])")
_COMMA_THOUSANDS = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:,\d{3})+(?![\d,])")
# Not a number in a run of them ("-10,-8,4", "1, 5,2"): there the commas separate values.
_NOT_IN_A_RUN = r"(?<![\d.,])(?<!\d,[-+])(?<!\d, )(?<!\d, [-+])"
_DECIMAL_COMMA = re.compile(
    rf"{_NOT_IN_A_RUN}(\d+),(\d{{1,2}}|\d{{4,}})(?![\d,])|{_NOT_IN_A_RUN}(0),(\d+)(?![\d,])"
)
# Inside these a comma separates values: tuples, intervals ("[2,5)"), sets ("\{1,2\}").
_BRACKET = re.compile(r"\\[{}]|[()\[\]]")
_OPENING = ("(", "[", "\\{")
# Prose words that pint also reads as units ("at": technical atmosphere, "in": inch). A unit of
# several words never takes one in: "212 °F at sea level" is in °F, "3 km in an hour" in km.
_PROSE_WORDS = {"at", "in", "on", "of", "to", "for", "from", "by", "with", "and", "or", "is", "are", "a", "an",
                "the", "when", "if", "as"}
_CHOICE_IN_PARENS = re.compile(r"\(\s*([A-E])\s*\)")


@dataclass
class Quantity:
    """One stated answer: its math (for math-verify) and, maybe, a unit written after it."""

    expression: str
    unit_text: str | None = None

    @property
    def unit(self):
        return parse_unit(self.unit_text) if self.unit_text else None


@dataclass
class FinalAnswers:
    """How the final answer is marked, its spans, and where in the text they sit: math-verify reads
    only text[start:end], so an answer it cannot parse ("The answer is seven.") is not replaced by a
    number from the reasoning before it."""

    method: str
    spans: list[str]
    start: int = 0
    end: int | None = None


def _plain_decimal(match: re.Match) -> str:
    exponent = match.group(2) or match.group(3)
    try:
        value = Decimal(f"{match.group(1)}e{exponent}")
    except InvalidOperation:
        return match.group(0)
    return format(value.normalize(), "f")


def _outside_brackets(pattern: re.Pattern, replace, text: str) -> str:
    """pattern.sub(replace, text) for the matches that are not inside brackets ("(3,2)", "[1/4,3]")."""
    if not pattern.search(text):
        return text
    starts, depths, depth = [], [], 0
    for bracket in _BRACKET.finditer(text):
        depth = depth + 1 if bracket.group(0) in _OPENING else max(0, depth - 1)
        starts.append(bracket.start())
        depths.append(depth)

    def outside(match: re.Match) -> bool:
        before = bisect_left(starts, match.start())  # brackets before the match
        return before == 0 or depths[before - 1] == 0

    return pattern.sub(lambda m: replace(m) if outside(m) else m.group(0), text)


def normalise_numbers(text: str, *, list_commas: bool = False, choices: bool = False) -> str:
    """Rewrites number spellings that math-verify misreads into plain ones.

    5e1 and 5 \\times 10^{1} become 50; 1\\,000, 1{,}000, 11,\\!111, 1 000, 1.000.000 and 1,000 lose
    their separators; 1.234,5, 3{,}5 and 3,5 become 1234.5, 3.5 and 3.5. A comma between digits is
    left alone where it separates values: inside brackets ("(3,2)", "[-2,7)"), in a run of numbers
    ("-10,-8,4"), and anywhere when the gold answer is a list (list_commas). With choices, "(B)" becomes
    "B", which math-verify's choice extraction reads.
    """
    text = text.replace("\\$", " ")
    text = _SCIENTIFIC.sub(_plain_decimal, text)
    text = _LATEX_THOUSANDS.sub(lambda m: re.sub(r"\D", "", m.group(0)), text)
    text = _LATEX_DECIMAL_COMMA.sub(r"\1.\2", text)
    text = _SPACED_THOUSANDS.sub(lambda m: m.group(0).replace(" ", ""), text)
    text = _DOT_THOUSANDS.sub(lambda m: m.group(0).replace(".", ""), text)
    if not list_commas:
        text = _outside_brackets(
            _DOT_THOUSANDS_COMMA_DECIMAL, lambda m: f"{m.group(1).replace('.', '')}.{m.group(2)}", text
        )
        text = _outside_brackets(_COMMA_THOUSANDS, lambda m: m.group(0).replace(",", ""), text)
        text = _outside_brackets(_DECIMAL_COMMA, lambda m: ".".join(g for g in m.groups() if g is not None), text)
    if choices:
        text = _CHOICE_IN_PARENS.sub(r"\1", text)
    return text


def _boxed_spans(text: str) -> tuple[list[str], int, int]:
    """Every \\boxed{...} content, with a unit written right after the box appended; and where the
    boxes start and end."""
    spans, first, last = [], len(text), 0
    for match in _BOX_START.finditer(text):
        depth, start = 1, match.end()
        for index in range(start, len(text)):
            if text[index] == "{":
                depth += 1
            elif text[index] == "}":
                depth -= 1
                if depth == 0:
                    content = text[start:index]
                    unit = unit_after(text[index + 1 :])
                    if unit and parse_quantity(content).unit_text is None:
                        content = f"{content} {unit}"
                    spans.append(content)
                    first, last = min(first, match.start()), index + 1
                    break
    return spans, first, last


def unit_after(text: str) -> str | None:
    """The unit that text starts with and that ends its sentence ("$ km/h." -> "km/h"), if any."""
    line = text.split("\n", 1)[0][:60]
    line = re.sub(r"^\s*(?:\$\$|\$|\\\)|\\\])", "", line).replace("$", "")
    candidate = re.split(r"[,;:!?]|\.(?=\s|$)", line, maxsplit=1)[0].strip()
    if not candidate or len(candidate) > 30:
        return None
    if parse_unit(clean_latex(candidate)) is not None:
        return candidate
    # The unit and then more of the sentence ("$\\boxed{50}$ km/h on average").
    words = clean_latex(candidate).split()
    phrase = _unit_phrase(words)
    return phrase if phrase and words[0].lower() not in _PROSE_WORDS else None


def _unit_phrase(words: list[str]) -> str | None:
    """The longest run of leading words (a few at most: "kilometers per hour") that pint reads as a
    unit; a run of several words that takes in a prose word ("°F at") is not one."""
    for end in range(min(len(words), _UNIT_WORDS), 0, -1):
        phrase = words[:end]
        if end > 1 and any(word.lower() in _PROSE_WORDS for word in phrase):
            continue
        if parse_unit(" ".join(phrase)) is not None:
            return " ".join(phrase)
    return None


def clean_latex(text: str) -> str:
    """Strips the LaTeX and markdown wrapping around an answer, keeping its math (for units and for
    telling one stated answer from another; math-verify gets the raw text)."""
    text = text.replace("**", " ")
    for wrapper in ("$", "\\(", "\\)", "\\[", "\\]", "\\displaystyle", "\\left", "\\right"):
        text = text.replace(wrapper, " ")
    previous = None
    while previous != text:
        previous, text = text, _TEXT_COMMANDS.sub(r" \1 ", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\%", "%")
    text = re.sub(r"\^\s*\{?\\circ\}?", "°", text)
    text = re.sub(r"(?<!\\)\\[,;:! ]|~", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def _anchored_spans(text: str, *, after: int = 0, final_only: bool = False) -> tuple[list[str], int | None]:
    """Every "the answer is ..." span that starts at `after` or later ("final answer ..." only, with
    final_only), and where the first of them starts."""
    # "**" is blanked, not removed, so positions in plain are positions in text.
    plain = text.replace("**", "  ")
    anchored, first_anchor = [], None
    for match in _ANCHOR.finditer(plain, after):
        if final_only and not match.group(0).lower().startswith("final"):
            continue
        span = _SENTENCE_END.split(match.group("span"), maxsplit=1)[0].strip()
        if span:
            anchored.append(span)
            first_anchor = match.start() if first_anchor is None else first_anchor
    return anchored, first_anchor


def find_final_answers(completion: str) -> FinalAnswers:
    boxed, first_box, last_box_end = _boxed_spans(completion)
    if boxed:
        # "Final answer: ..." after the last box is the final answer; the boxes were steps, or a
        # result taken back ("$\\boxed{15}$. I made an error. Final answer: 25").
        final, first_final = _anchored_spans(completion, after=last_box_end, final_only=True)
        if final:
            return FinalAnswers(ANCHORED, final, first_final)
        return FinalAnswers(BOXED, boxed, first_box, last_box_end)
    anchored, first_anchor = _anchored_spans(completion)
    if anchored:
        return FinalAnswers(ANCHORED, anchored, first_anchor)
    lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
    if lines and is_bare_answer(lines[-1]):
        return FinalAnswers(FINAL_LINE, [lines[-1]], completion.rindex(lines[-1]))
    numbers = list(_NUMBER.finditer(completion))
    if numbers:
        last = numbers[-1]
        start = last.start()
        # A number inside inline math ("$\sqrt{7}$") stands for the whole of that math.
        for math in _INLINE_MATH.finditer(completion):
            if math.start() < start < math.end():
                start = math.start()
        rest = completion[last.end() :].split("\n", 1)[0]
        rest = _SENTENCE_END.split(rest, maxsplit=1)[0]
        return FinalAnswers(LAST_NUMBER, [completion[start : last.end()] + rest])
    return FinalAnswers(NO_ANSWER, [])


def is_bare_answer(line: str) -> bool:
    """A line that holds only an answer: "$\\frac{1}{2}$", "50 km/h", "= 12." (no prose)."""
    cleaned = clean_latex(line).rstrip(".").strip()
    cleaned = _LEAD_WORDS.sub("", cleaned).strip()
    if not cleaned or not _MATHY.search(cleaned) or len(cleaned) > 60:
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


def _all_parts(span: str, *, list_answer: bool = False) -> list[tuple[str, bool]]:
    """[(part, negated)] for every part of a span, prose included; a negated part is ruled out."""
    if not list_answer:
        span = _outside_brackets(_COMMA_THOUSANDS, lambda m: m.group(0).replace(",", ""), span)
    mask = _top_level_mask(span)
    parts, start, negated = [], 0, False
    for match in (_LIST_SEPARATORS if list_answer else _SEPARATORS).finditer(mask):
        parts.append((span[start : match.start()], negated))
        negated = bool(_NEGATING.match(match.group(0).strip()))
        start = match.end()
    parts.append((span[start:], negated))
    return [(part.strip(" .:,;"), neg) for part, neg in parts if part.strip(" .:,;")]


def split_answer_parts(
    span: str, *, text_parts: bool = False, list_answer: bool = False
) -> list[tuple[str, bool]]:
    """[(part, negated)] for each answer a span states; a negated part is one it rules out.

    Parts without math (no digit, pi, root or infinity) are prose and dropped, unless text_parts
    (the gold answer is itself words), when any part with a letter that does not start a clause
    counts, or list_answer (the gold is a list), when the span is split only where it rules out.
    """
    def keep(part: str) -> bool:
        if list_answer:
            return True
        if text_parts:
            return bool(re.search(r"[A-Za-z0-9]", part)) and not _PROSE_START.match(part)
        return bool(_MATHY.search(part))

    return [(part, neg) for part, neg in _all_parts(span, list_answer=list_answer) if keep(part)]


def ruled_out_parts(span: str, *, list_answer: bool = False) -> list[str]:
    """Everything a final-answer span rules out ("not 50", "not $a+b$"), math or not: math-verify's
    reading must not be one of them."""
    return [part for part, negated in _all_parts(clean_latex(span), list_answer=list_answer) if negated]


def parse_quantity(part: str) -> Quantity:
    """Splits "13.89 m/s" into expression "13.89" and unit "m/s"; text after "=" wins ("v = 5 m")."""
    part = clean_latex(part).rstrip(".").strip()
    mask = _top_level_mask(part)
    if "=" in mask:
        part = part[mask.rindex("=") + 1 :].strip()
    part = _LEAD_WORDS.sub("", part).strip()
    glued = re.match(r"^([-+]?\d[\d.,]*)([A-Za-z°%µ][^\s]*)(.*)$", part)
    if glued and parse_unit(glued.group(2)):
        part = f"{glued.group(1)} {glued.group(2)}{glued.group(3)}"
    tokens = part.split()
    for split_at in range(1, len(tokens)):
        head = " ".join(tokens[:split_at])
        if not _MATHY.search(head):
            continue
        # A unit is a few words at most ("kilometers per hour"); longer tails are prose.
        tail = _unit_phrase(tokens[split_at:])
        if tail is not None:
            return Quantity(head, tail)
    # No unit: drop trailing plain words after math ("5 apples"), keep LaTeX commands and symbols,
    # and keep a word answer whole ("Evelyn Bob").
    if _MATHY.search(part):
        while len(tokens) > 1 and re.fullmatch(r"[A-Za-z]{2,}[.,]?", tokens[-1]):
            tokens.pop()
    return Quantity(" ".join(tokens))


def extract_quantities(
    span: str, *, split: bool = True, text_parts: bool = False, list_answer: bool = False
) -> tuple[list[Quantity], list[Quantity]]:
    """(stated, ruled_out) quantities of one final-answer span (split=False: the span is one)."""
    if not split:
        return ([parse_quantity(span)] if clean_latex(span) else []), []
    stated, ruled_out = [], []
    for part, negated in split_answer_parts(clean_latex(span), text_parts=text_parts, list_answer=list_answer):
        (ruled_out if negated else stated).append(parse_quantity(part))
    return stated, ruled_out


def choice_letters(span: str) -> tuple[list[str], list[str]]:
    """(stated, ruled_out) choices of one final-answer span: "(B)", "B.", "option C", "A or B". A stated
    part that is math but no letter ("B or 7919") is kept as itself: a second, different answer."""
    stated, ruled_out = [], []
    for part, negated in split_answer_parts(clean_latex(span), text_parts=True):
        letter = re.match(r"^(?:(?:option|choice)\s+)?\(?([A-E])\)?(?![A-Za-z])", part.strip(), re.IGNORECASE)
        if letter and (letter.group(1).isupper() or part.lower().startswith(("option", "choice"))):
            (ruled_out if negated else stated).append(letter.group(1).upper())
        elif not negated and _MATHY.search(part):
            stated.append(part)
    return stated, ruled_out

"""Rationale checks: which written rationales to distrust, as pure functions (no Django), and
`rationale_checked`, which runs them on a judgment as it is stored and records what it found (RationaleCheck).

Four flags, each about one judgment's rationale (docs/agreement.md, "Rationale checks"):

- too_short: shorter than the project's `rationale_flag_chars` (a softer bar than
  `min_rationale_chars`, below which a judgment is refused);
- reused: the reviewer wrote the same text (after `normalised`) on another pair; every judgment of
  theirs with that text is flagged, the first one too;
- near_duplicate: nearly the same text as a rationale another reviewer wrote earlier on the same pair;
- pasted: the reviewer page saw less than half of the rationale typed (the rest arrived by paste,
  drop or another insertion). The page reports counts and seconds only, never what was typed or
  pasted; a client that reports nothing is never flagged pasted.

Near-duplicates are found with the standard library's difflib.SequenceMatcher ratio over the
normalised texts. A pair has a handful of rationales, so a pairwise ratio costs microseconds; MinHash
or shingle indexes pay off only when one text is compared with thousands, which never happens here.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.db import connection

from annotate.errors import UserMistake
from annotate.review import queue_sql
from annotate.review.models import Assignment, Judgment, RationaleCheck

FLAGS = ("too_short", "reused", "near_duplicate", "pasted")
NEAR_DUPLICATE_RATIO = 0.9  # SequenceMatcher.ratio at or above which two rationales count as the same text
NEAR_DUPLICATE_MIN_CHARS = 40  # shorter texts ("Left is correct.") coincide by chance, not by copying
COMPARED_CHARS = 2000  # SequenceMatcher is quadratic at worst: compare at most this much of each text
PASTED_BELOW_TYPED_SHARE = 0.5  # pasted when less than this share of the rationale was typed

_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalised(text: str) -> str:
    """The text as the checks compare it: NFKC, case-folded, punctuation and runs of space as one space."""
    return _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def text_key(text: str) -> str:
    """sha256 of the normalised text: equal keys are "the same rationale"."""
    return hashlib.sha256(normalised(text).encode()).hexdigest()


def is_near_duplicate(text: str, others: Iterable[str]) -> bool:
    """Is `text` nearly the same as one of `others` (each compared after `normalised`)?"""
    mine = normalised(text)[:COMPARED_CHARS]
    if len(mine) < NEAR_DUPLICATE_MIN_CHARS:
        return False
    matcher = None
    for other in others:
        theirs = normalised(other)[:COMPARED_CHARS]
        if len(theirs) < NEAR_DUPLICATE_MIN_CHARS:
            continue
        if theirs == mine:  # the same text (a copy): its ratio is 1.0, no need to compute it
            return True
        if matcher is None:
            matcher = difflib.SequenceMatcher(autojunk=False)
            matcher.set_seq2(mine)  # SequenceMatcher caches what it learns about seq2
        matcher.set_seq1(theirs)
        # The cheap upper bounds first: most pairs of rationales are nothing alike.
        if (matcher.real_quick_ratio() >= NEAR_DUPLICATE_RATIO and matcher.quick_ratio() >= NEAR_DUPLICATE_RATIO
                and matcher.ratio() >= NEAR_DUPLICATE_RATIO):
            return True
    return False


@dataclass(frozen=True)
class TypingSignals:
    """What the reviewer page saw of the rationale being written: counts and seconds, no content."""

    typing_seconds: float  # time spent typing in the rationale box (pauses over a few seconds not counted)
    typed_chars: int  # characters inserted by typing
    pasted_chars: int  # characters inserted by paste, drop or any other insertion
    paste_events: int  # paste and drop events in the rationale box

    def as_dict(self) -> dict:
        return {"typing_seconds": self.typing_seconds, "typed_chars": self.typed_chars,
                "pasted_chars": self.pasted_chars, "paste_events": self.paste_events}


_TYPING_KEYS = ("typing_seconds", "typed_chars", "pasted_chars", "paste_events")
_MAX_COUNT = 10_000_000  # well past any rationale; keeps nonsense out of the integer columns
_MAX_SECONDS = 86_400.0


def typing_parse(value) -> TypingSignals | None:
    """The judgment's optional `typing` object, checked; a UserMistake names the first field to fix."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise UserMistake("typing: must be an object with typing_seconds, typed_chars, pasted_chars and paste_events")
    unknown = sorted(set(value) - set(_TYPING_KEYS))
    if unknown:
        raise UserMistake(f"typing: unknown key(s) {unknown}; the keys are {', '.join(_TYPING_KEYS)}")
    missing = [key for key in _TYPING_KEYS if key not in value]
    if missing:
        raise UserMistake(f"typing: {missing[0]} is missing; send all of {', '.join(_TYPING_KEYS)}")
    seconds = value["typing_seconds"]
    if (isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds)
            or not 0 <= seconds <= _MAX_SECONDS):
        raise UserMistake(f"typing: typing_seconds {seconds!r} must be a number of seconds from 0 to {_MAX_SECONDS:g}")
    counts = {}
    for key in _TYPING_KEYS[1:]:
        number = value[key]
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= _MAX_COUNT:
            raise UserMistake(f"typing: {key} {number!r} must be a whole number from 0 to {_MAX_COUNT}")
        counts[key] = number
    return TypingSignals(typing_seconds=float(seconds), **counts)


def looks_pasted(*, chars: int, typing: TypingSignals | None) -> bool:
    """Less than half of a non-empty rationale was typed (None: the client did not say, so never)."""
    if typing is None or chars == 0:
        return False
    return typing.typed_chars < PASTED_BELOW_TYPED_SHARE * chars


def rationale_text_key(rationale: str) -> str:
    """The reuse key of a rationale; empty for one without a word in it, which is never a reuse."""
    words = normalised(rationale)
    return hashlib.sha256(words.encode()).hexdigest() if words else ""  # text_key, normalising once


# The checks on PostgreSQL, in one round trip: the project's too_short bar, whether the reviewer wrote this
# text on another pair (and whether that earlier row is flagged yet), the assignment's gold check, the
# check row itself, and the rationales other reviewers wrote on the pair (compared in Python afterwards).
_RATIONALE_CHECK_SQL = """
    WITH ctx AS (
        SELECT p.rationale_flag_chars AS flag_chars,
               (SELECT c.reused FROM review_rationalecheck c
                WHERE c.project_id = %(project)s AND c.reviewer_id = %(reviewer)s AND c.text_key = %(key)s
                  AND c.pair_id <> %(pair)s AND c.text_key <> '' ORDER BY c.reused LIMIT 1) AS earlier,
               g.expected, g.attempt_id
        FROM review_project p LEFT JOIN review_goldcheck g ON g.assignment_id = %(assignment)s
        WHERE p.id = %(project)s
    ), flags AS (
        SELECT ctx.*, (ctx.flag_chars > 0 AND %(chars)s < ctx.flag_chars) AS too_short,
               (ctx.earlier IS NOT NULL) AS reused
        FROM ctx
    ), checked AS (
        INSERT INTO review_rationalecheck (judgment_id, project_id, reviewer_id, pair_id, text_key, chars,
                                           typing_seconds, typed_chars, pasted_chars, paste_events,
                                           too_short, reused, near_duplicate, pasted, flagged)
        SELECT %(judgment)s, %(project)s, %(reviewer)s, %(pair)s, %(key)s, %(chars)s, %(seconds)s, %(typed)s,
               %(pasted_chars)s, %(pastes)s, f.too_short, f.reused, false, %(pasted)s,
               f.too_short OR f.reused OR %(pasted)s
        FROM flags f
    )
    SELECT f.earlier, f.expected, f.attempt_id,
           ARRAY(SELECT j.rationale FROM review_assignment a JOIN review_judgment j ON j.id = a.current_judgment_id
                 WHERE a.pair_id = %(pair)s AND a.reviewer_id <> %(reviewer)s)
    FROM flags f
"""


def rationale_checked(*, judgment: Judgment, assignment: Assignment, typing: TypingSignals | None) -> tuple:
    """Check the judgment's rationale and store what was found (RationaleCheck), in the judgment's transaction;
    returns the assignment's gold check as (expected answer, attempt id), (None, None) when it is not one.

    The reuse check is an index lookup (rationale_reuse); the near-duplicate check reads the pair's few
    other current judgments. The first reuse of a text flags the reviewer's earlier judgments with it too.
    """
    rationale = judgment.rationale
    key = rationale_text_key(rationale)
    pasted = looks_pasted(chars=len(rationale), typing=typing)
    values = {
        "judgment": judgment.pk, "project": assignment.project_id, "reviewer": judgment.reviewer_id,
        "pair": assignment.pair_id, "assignment": assignment.pk, "key": key, "chars": len(rationale),
        "seconds": typing.typing_seconds if typing else None, "typed": typing.typed_chars if typing else None,
        "pasted_chars": typing.pasted_chars if typing else None, "pastes": typing.paste_events if typing else None,
        "pasted": pasted,
    }
    if connection.vendor == "postgresql":
        ((earlier, expected, attempt_id, others),) = queue_sql.fetch(_RATIONALE_CHECK_SQL, values)
    else:
        ((flag_chars, earlier, expected, attempt_id),) = queue_sql.fetch(
            "SELECT p.rationale_flag_chars, "
            "(SELECT c.reused FROM review_rationalecheck c WHERE c.project_id = %(project)s "
            " AND c.reviewer_id = %(reviewer)s AND c.text_key = %(key)s AND c.pair_id <> %(pair)s "
            " AND c.text_key <> '' ORDER BY c.reused LIMIT 1), g.expected, g.attempt_id "
            "FROM review_project p LEFT JOIN review_goldcheck g ON g.assignment_id = %(assignment)s "
            "WHERE p.id = %(project)s", values)
        others = [row[0] for row in queue_sql.fetch(
            "SELECT j.rationale FROM review_assignment a JOIN review_judgment j ON j.id = a.current_judgment_id "
            "WHERE a.pair_id = %(pair)s AND a.reviewer_id <> %(reviewer)s", values)]
        too_short = flag_chars > 0 and len(rationale) < flag_chars
        RationaleCheck.objects.create(
            judgment=judgment, project_id=assignment.project_id, reviewer_id=judgment.reviewer_id,
            pair_id=assignment.pair_id, text_key=key, chars=len(rationale), typing_seconds=values["seconds"],
            typed_chars=values["typed"], pasted_chars=values["pasted_chars"], paste_events=values["pastes"],
            too_short=too_short, reused=earlier is not None, pasted=pasted,
            flagged=too_short or earlier is not None or pasted,
        )
    # Plain prepared statements rather than ORM updates: the first is on the judging path whenever a
    # rationale copies another, and the ORM's Python would cost more than the statement.
    if rationale and is_near_duplicate(rationale, others or ()):
        queue_sql.fetch("UPDATE review_rationalecheck SET near_duplicate = %(yes)s, flagged = %(yes)s "
                         "WHERE judgment_id = %(judgment)s", {"yes": True, "judgment": judgment.pk}, rows=False)
    if earlier is False:  # an unflagged earlier judgment with this text: it is a reuse now too
        queue_sql.fetch(
            "UPDATE review_rationalecheck SET reused = %(yes)s, flagged = %(yes)s WHERE project_id = %(project)s "
            "AND reviewer_id = %(reviewer)s AND text_key = %(key)s AND reused = %(no)s AND pair_id <> %(pair)s",
            {**values, "yes": True, "no": False}, rows=False)
    return expected, attempt_id

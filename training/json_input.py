"""JSON that a user sends, read one bounded way: an API body, a line of an import file, a line of a task file.

Python's own reader follows nesting by recursion and turns any run of digits into an int, so 100 KB of "[" (or of
'{"a": ') runs it out of recursion and a 100,000-digit number passes int's digit limit: both surface as exceptions
no caller expects, a 500 in the app and a traceback from the training command. `read_json` refuses them as
JsonRefused with one reason (bad syntax stays json.JSONDecodeError, as DRF reads it); `read_json_line` refuses a
line of a JSONL file, syntax included, with the one reason that follows its "line N: ". The web
app (annotate/parsers.py for every JSON body, the item import) and the task files (training/tasks.py) all read
through it, and `read_json_file` reads the records a run or a checkpoint folder may hold (run.json, parent.json).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

# Arrays and objects inside one another: what Pairwise reads nests a few levels.
MAX_JSON_DEPTH = 64
JSON_TOO_DEEP = f"nests arrays or objects more than {MAX_JSON_DEPTH} levels deep"
# The characters of one number: Python's own default bound on reading digits as an int (sys.int_info), which holds
# any count, id or test value a task needs.
MAX_NUMBER_CHARS = 4300


class JsonRefused(ValueError):
    """JSON text past a bound (or, from `read_json_line`, not JSON at all); `reason` reads after what was sent ("line 3: nests ...", "the JSON body nests ...")
    and `fix` says what to send instead."""

    def __init__(self, reason: str, fix: str):
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


def _number_text(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise JsonRefused(f"holds a number written with {len(text):,} characters; at most {MAX_NUMBER_CHARS:,}",
                              "send a shorter number, or the digits as a string")
    return text


def _whole_number(text: str) -> int:
    return int(_number_text(text))


def _fraction(text: str) -> float:
    value = float(_number_text(text))
    if math.isinf(value):  # 1e999: no float holds it, and Python would read it as infinity
        raise JsonRefused(f"holds the number {text[:40]}, too large for a 64-bit float",
                              "send a number within ±1.8e308")
    return value


def nested_too_deep(value: Any) -> bool:
    """Whether parsed JSON nests arrays or objects more than MAX_JSON_DEPTH levels (a walk without recursion,
    which stops at the first one too deep)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > MAX_JSON_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def read_json(text: str | bytes, *, parse_constant=None) -> Any:
    """`text` as JSON, within the bounds above: raises json.JSONDecodeError for bad syntax and JsonRefused for
    nesting deeper than MAX_JSON_DEPTH or a number longer than MAX_NUMBER_CHARS (or past a float's range).
    `parse_constant` is json.loads's: a caller that refuses NaN and Infinity passes one that raises ValueError."""
    too_deep = JsonRefused(JSON_TOO_DEEP, "send a flatter one")
    try:
        value = json.loads(text, parse_int=_whole_number, parse_float=_fraction, parse_constant=parse_constant)
    except RecursionError:  # Python's reader gives up long before the end of 100 KB of "["
        raise too_deep from None
    opening = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    # Counting the brackets first (those in strings too) spares the walk on every ordinary line.
    if text.count(opening[0]) + text.count(opening[1]) > MAX_JSON_DEPTH and nested_too_deep(value):
        raise too_deep
    return value


def read_json_line(line: str) -> Any:
    """One line of a JSONL file (an import file, a task file) as JSON; JsonRefused says why it is not, bad syntax
    included ("not valid JSON (Expecting value at column 3)")."""
    try:
        return read_json(line)
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"not valid JSON ({exc.msg} at column {exc.colno})", "fix the line") from None


def read_json_file(path: str | os.PathLike) -> dict | None:
    """The JSON object a file holds, or None when the file is missing, unreadable, not UTF-8, not JSON within the
    bounds above, or not an object: the records of a run or checkpoint folder (run.json, parent.json, a model's
    config.json), which a reader takes as absent when they are not there whole."""
    try:
        value = read_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError: JSONDecodeError, JsonRefused and UnicodeDecodeError
        return None
    return value if isinstance(value, dict) else None

"""Taking the program out of a model's completion: a fenced block, or the plain text."""

from __future__ import annotations

import re

# An unclosed last fence (a generation cut off at max length) runs to the end of the text.
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:\n?```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}


def extract_code(completion: str, entry_point: str | None = None) -> str:
    """Returns the code to run.

    With fenced blocks: the last Python block that defines `entry_point`, else the last Python block.
    Without fences: the whole completion (as in HumanEval, where the prompt is the start of the code).
    """
    blocks = [body for tag, body in _FENCE.findall(completion) if tag.lower() in _PYTHON_TAGS]
    if not blocks:
        return completion
    if entry_point:
        defines = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
        for body in reversed(blocks):
            if defines.search(body):
                return body
    return blocks[-1]

"""Names and ids a user gives (a checkpoint's name, a task's task_id): the one rule for characters no one can see,
and the one key under which two names that look alike are the same name.

A control character (NUL, which PostgreSQL cannot store, a newline, an escape), a format character (the bidi
overrides that show "tiny5" for another name, a zero-width space) or a line or paragraph separator makes two names
that print alike differ, or breaks the one-line messages that name them. The training command (task files) and the
app (checkpoint names, through annotate.limits) both refuse them with `hidden_character`'s reason.
"""

from __future__ import annotations

import unicodedata

# Unicode categories: Cc control, Cf format (bidi controls, zero-width characters), Zl line and Zp paragraph separator.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def hidden_character(name: str, text: str) -> str | None:
    """The one reason `text` (the value of `name`) holds a character that cannot be seen, naming the first and its
    position, or None when it holds none."""
    for position, character in enumerate(text, start=1):
        if unicodedata.category(character) in HIDDEN_CATEGORIES:
            label = unicodedata.name(character, "a control character").lower()
            return (f"{name} holds U+{ord(character):04X} ({label}) at character {position}, an invisible or "
                    "control character; remove it")
    return None


def without_hidden(text: str) -> str:
    """`text` less the characters `hidden_character` refuses: for a name made from a folder's name."""
    return "".join(character for character in text if unicodedata.category(character) not in HIDDEN_CATEGORIES)


def name_key(name: str) -> str:
    """What a name is compared by: Unicode's compatibility-caseless form (NFKC, case folded, NFKC again), so that
    "TINY5", "tiny5" and "ｔｉｎｙ５" (full-width) are one name."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())

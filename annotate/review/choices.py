"""What a reviewer can choose, and how a choice on the screen becomes a choice about the pair.

The one definition of both, imported wherever a choice is read or written (the judgment service, the
reviewer API, the quality statistics, the export pipeline). Pure Python: no Django.

A reviewer sees a pair's two responses in a random left/right order recorded on the assignment
(`a_on_left`) and picks a *click*: left, right, tie or both_bad (per criterion: left, right or tie).
A judgment is stored *un-swapped*, as a *winner* about the pair's responses a and b: a, b, tie or
both_bad. Which response is "a" is only the order of the import file, so no statistic may read a
winner as a category across pairs without counting both orientations (see docs/agreement.md).
"""

from __future__ import annotations

CLICKS = ("left", "right", "tie", "both_bad")
CRITERION_CLICKS = ("left", "right", "tie")
DECISIVE_CLICKS = ("left", "right")

WINNERS = ("a", "b", "tie", "both_bad")
CRITERION_WINNERS = ("a", "b", "tie")
# Integer codes of a winner are its index in WINNERS (the quality statistics work on these).
WINNER_A, WINNER_B, WINNER_TIE, WINNER_BOTH_BAD = range(len(WINNERS))
WINNER_CODES = {name: code for code, name in enumerate(WINNERS)}

# The un-swap, as one table: (click, a_on_left) -> winner. Its inverse is the swap back.
_WINNER_OF_CLICK = {
    ("left", True): "a",
    ("right", True): "b",
    ("left", False): "b",
    ("right", False): "a",
}
_CLICK_OF_WINNER = {(winner, a_on_left): click for (click, a_on_left), winner in _WINNER_OF_CLICK.items()}


def unswap(click: str, *, a_on_left: bool) -> str:
    """A click as the reviewer made it (left/right/tie/both_bad) -> the winner as stored (a/b/tie/both_bad)."""
    return _WINNER_OF_CLICK.get((click, bool(a_on_left)), click)


def swap_back(winner: str, *, a_on_left: bool) -> str:
    """A stored winner -> the click its reviewer made, as they saw the pair."""
    return _CLICK_OF_WINNER.get((winner, bool(a_on_left)), winner)


def reversed_winner(winner: str) -> str:
    """The same judgment of the same pair, with the pair's responses a and b listed the other way round."""
    return {"a": "b", "b": "a"}.get(winner, winner)


# The codes with response a and response b exchanged: which answer is "a" is only the order of the
# import file, so statistics across pairs must not depend on it (docs/agreement.md).
WINNER_SWAP = tuple(WINNER_CODES[reversed_winner(name)] for name in WINNERS)
CRITERION_SWAP = tuple(WINNER_CODES[reversed_winner(name)] for name in CRITERION_WINNERS)

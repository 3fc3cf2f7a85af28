"""The input of Pairwise's quality statistics: one row per current judgment, as numpy columns.

The selector reads non-retracted judgments from the database and builds a ``JudgmentTable``; every
function in ``annotate.quality`` takes one and nothing else from the ORM. Choices are stored
un-swapped ("response a preferred over b"), so ``left_is_a`` is needed only to recover which side
the reviewer clicked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from annotate.review.choices import CRITERION_WINNERS, WINNER_A, WINNER_B, WINNERS

# Codes of the ``winner`` column and of a criterion column: a winner's index in WINNERS or
# CRITERION_WINNERS (annotate/review/choices.py, the one definition of choices, with the codes' a/b
# exchange WINNER_SWAP and CRITERION_SWAP).
CRITERION_MISSING = -1

# Codes of the ``gold`` column.
NO_GOLD = -1

_UNKNOWN_MODEL = "unknown@0"

# The per-row columns of a JudgmentTable, in declaration order (criteria and names excluded).
ROW_COLUMNS = (
    "pair",
    "reviewer",
    "winner",
    "strength",
    "left_is_a",
    "is_retest",
    "seconds",
    "created_at",
    "gold",
    "model_a",
    "model_b",
)


def _column(values: Any, dtype: Any, name: str, length: int | None) -> np.ndarray:
    array = np.ascontiguousarray(values, dtype=dtype)
    if array.ndim != 1:
        raise ValueError(f"JudgmentTable.{name}: expected a 1-D array, got shape {array.shape}")
    if length is not None and array.shape[0] != length:
        raise ValueError(f"JudgmentTable.{name}: has {array.shape[0]} rows, expected {length}")
    array.setflags(write=False)
    return array


def _check_range(array: np.ndarray, name: str, low: int, high: int) -> None:
    if array.size and (array.min() < low or array.max() > high):
        raise ValueError(f"JudgmentTable.{name}: values must lie in [{low}, {high}]")


@dataclass(frozen=True)
class JudgmentTable:
    """Current (non-retracted) judgments of one project, one row each; every column has shape (n,).

    pair        int64  pair id (any integers; not necessarily dense)
    reviewer    int32  index into ``reviewer_names``
    winner      int8   0 = response a preferred, 1 = b preferred, 2 = tie, 3 = both_bad (un-swapped)
    strength    int8   1..3 for a/b wins, 0 for tie and both_bad
    left_is_a   bool   response a was shown on the left
    is_retest   bool   the retest of an earlier judgment of the same pair by the same reviewer
    seconds     float32 time spent; NaN when unknown
    created_at  float64 unix seconds
    gold        int8   -1 not a gold item, 0 a is the gold-preferred answer, 1 b is
    model_a     int32  index into ``model_names`` ("model@version") of response a
    model_b     int32  index into ``model_names`` of response b
    criteria    {key: int8 (n,)}: 0 a, 1 b, 2 tie, -1 missing

    The constructor coerces dtypes, freezes the arrays and raises ValueError on any broken row.
    """

    pair: np.ndarray
    reviewer: np.ndarray
    winner: np.ndarray
    strength: np.ndarray
    left_is_a: np.ndarray
    is_retest: np.ndarray
    seconds: np.ndarray
    created_at: np.ndarray
    gold: np.ndarray
    model_a: np.ndarray
    model_b: np.ndarray
    criteria: Mapping[str, np.ndarray] = field(default_factory=dict)
    reviewer_names: list[str] = field(default_factory=list)
    model_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = np.asarray(self.pair).shape[0] if np.ndim(self.pair) == 1 else None
        if n is None:
            raise ValueError("JudgmentTable.pair: expected a 1-D array")
        specs = {
            "pair": np.int64,
            "reviewer": np.int32,
            "winner": np.int8,
            "strength": np.int8,
            "left_is_a": np.bool_,
            "is_retest": np.bool_,
            "seconds": np.float32,
            "created_at": np.float64,
            "gold": np.int8,
            "model_a": np.int32,
            "model_b": np.int32,
        }
        for name, dtype in specs.items():
            object.__setattr__(self, name, _column(getattr(self, name), dtype, name, n))
        criteria = {
            str(key): _column(values, np.int8, f"criteria[{key!r}]", n)
            for key, values in self.criteria.items()
        }
        object.__setattr__(self, "criteria", criteria)
        object.__setattr__(self, "reviewer_names", [str(name) for name in self.reviewer_names])
        object.__setattr__(self, "model_names", [str(name) for name in self.model_names])

        _check_range(self.reviewer, "reviewer", 0, len(self.reviewer_names) - 1)
        _check_range(self.winner, "winner", 0, 3)
        _check_range(self.gold, "gold", -1, 1)
        _check_range(self.model_a, "model_a", 0, len(self.model_names) - 1)
        _check_range(self.model_b, "model_b", 0, len(self.model_names) - 1)
        for key, values in criteria.items():
            _check_range(values, f"criteria[{key!r}]", -1, 2)
        decisive = self.winner <= WINNER_B
        if np.any(decisive & ((self.strength < 1) | (self.strength > 3))):
            raise ValueError("JudgmentTable.strength: must be 1..3 where winner is a or b")
        if np.any(~decisive & (self.strength != 0)):
            raise ValueError("JudgmentTable.strength: must be 0 where winner is tie or both_bad")
        if np.any(self.seconds < 0):
            raise ValueError("JudgmentTable.seconds: must not be negative (use NaN for unknown)")
        if not np.all(np.isfinite(self.created_at)):
            raise ValueError("JudgmentTable.created_at: must be finite unix seconds")

    def __len__(self) -> int:
        return int(self.pair.shape[0])

    @cached_property
    def pair_ids(self) -> np.ndarray:
        """(p,) int64 distinct pair ids, sorted; ``pair_ids[pair_index]`` gives back ``pair``."""
        return self._dense_pairs[0]

    @cached_property
    def pair_index(self) -> np.ndarray:
        """(n,) int64 dense index of each row's pair into ``pair_ids``."""
        return self._dense_pairs[1]

    @cached_property
    def _dense_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        ids, index = np.unique(self.pair, return_inverse=True)
        return ids, index.astype(np.int64)

    @property
    def clicked_left(self) -> np.ndarray:
        """(n,) bool: the reviewer clicked the left answer (false for tie and both_bad)."""
        return ((self.winner == WINNER_A) & self.left_is_a) | ((self.winner == WINNER_B) & ~self.left_is_a)

    @property
    def signed_strength(self) -> np.ndarray:
        """(n,) int8 in -3..+3: +strength when a won, -strength when b won, 0 for tie and both_bad."""
        sign = np.where(self.winner == WINNER_A, 1, np.where(self.winner == WINNER_B, -1, 0))
        return (sign * self.strength).astype(np.int8)

    @classmethod
    def empty(cls, *, criteria_keys: Iterable[str] = ()) -> JudgmentTable:
        """A table with no rows (a project nobody has judged yet)."""
        return cls.from_records([], criteria_keys=criteria_keys)

    @classmethod
    def from_records(
        cls,
        records: Iterable[Mapping[str, Any]],
        *,
        reviewer_names: list[str] | None = None,
        model_names: list[str] | None = None,
        criteria_keys: Iterable[str] = (),
    ) -> JudgmentTable:
        """Build a table from dicts, for tests and small data.

        Keys per record: ``pair`` (int), ``reviewer`` (name), ``winner`` ("a" | "b" | "tie" |
        "both_bad"), and optionally ``strength`` (default 1 for a/b, 0 otherwise), ``left_is_a``
        (True), ``is_retest`` (False), ``seconds`` (NaN), ``created_at`` (0.0), ``gold`` (None |
        "a" | "b"), ``model_a`` / ``model_b`` (names, default "unknown@0"), ``criteria``
        ({key: "a" | "b" | "tie"}). Names not in the given lists are appended in first-seen order.
        """
        reviewers = list(reviewer_names or [])
        models = list(model_names or [])
        reviewer_index = {name: i for i, name in enumerate(reviewers)}
        model_index = {name: i for i, name in enumerate(models)}

        def index_of(name: str, names: list[str], lookup: dict[str, int]) -> int:
            if name not in lookup:
                lookup[name] = len(names)
                names.append(name)
            return lookup[name]

        def code(value: Any, names: tuple[str, ...], what: str) -> int:
            if isinstance(value, str):
                if value not in names:
                    raise ValueError(f"{what}: {value!r} is not one of {names}")
                return names.index(value)
            return int(value)

        rows: dict[str, list[Any]] = {name: [] for name in ROW_COLUMNS}
        criteria: dict[str, list[int]] = {str(key): [] for key in criteria_keys}
        for number, record in enumerate(records):
            winner = code(record["winner"], WINNERS, f"record {number}: winner")
            gold = record.get("gold")
            rows["pair"].append(int(record["pair"]))
            rows["reviewer"].append(index_of(str(record["reviewer"]), reviewers, reviewer_index))
            rows["winner"].append(winner)
            rows["strength"].append(int(record.get("strength", 1 if winner <= WINNER_B else 0)))
            rows["left_is_a"].append(bool(record.get("left_is_a", True)))
            rows["is_retest"].append(bool(record.get("is_retest", False)))
            rows["seconds"].append(float(record.get("seconds", np.nan)))
            rows["created_at"].append(float(record.get("created_at", 0.0)))
            rows["gold"].append(NO_GOLD if gold is None else code(gold, ("a", "b"), f"record {number}: gold"))
            rows["model_a"].append(index_of(str(record.get("model_a", _UNKNOWN_MODEL)), models, model_index))
            rows["model_b"].append(index_of(str(record.get("model_b", _UNKNOWN_MODEL)), models, model_index))
            given = record.get("criteria") or {}
            for key in given:
                if key not in criteria:
                    # A key first seen late is missing on every earlier row.
                    criteria[key] = [CRITERION_MISSING] * number
            for key, column in criteria.items():
                value = given.get(key)
                column.append(
                    CRITERION_MISSING
                    if value is None
                    else code(value, CRITERION_WINNERS, f"record {number}: criteria[{key!r}]")
                )
        return cls(
            **{name: np.asarray(values) for name, values in rows.items()},
            criteria={key: np.asarray(values, dtype=np.int8) for key, values in criteria.items()},
            reviewer_names=reviewers,
            model_names=models,
        )

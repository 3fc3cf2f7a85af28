"""What an export selects and how it writes it: one validated, normalised value for API, page and command.

`filters_parse` turns user input (a JSON body, form fields, command options) into `ExportFilters` or
raises `ExportError` with one line saying which field is wrong and how to fix it. `as_dict` is what
the Export row and the snapshot manifest record, with every default spelled out, so two exports with
the same filters record the same thing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from annotate.errors import UserMistake
from annotate.limits import MAX_INT32, share_number, true_or_false, whole_number
from training.snapshot import FILE_FORMATS, ROW_FORMATS

GOLD_CHOICES = ("include", "exclude", "only")
# How adjudicators' rulings (annotate/review/adjudication.py) decide pairs: not at all, the pairs whose votes
# have no strict majority, or every pair with a ruling.
ADJUDICATION_CHOICES = ("ignore", "split", "all")


class ExportError(UserMistake):
    """An export mistake the user can fix."""


@dataclass(frozen=True)
class ExportFilters:
    """Which pairs become preference rows, how they are split, and in which format.

    min_judgments          a pair needs at least this many counted votes
    min_agreement          ... and at least this share of them for its majority choice (0-1)
    exclude_ties           drop any pair with a tie or both_bad vote among its counted votes
    criteria_versions      count only judgments made under these criteria versions (empty: all)
    tags                   keep prompts with at least one of these tags (empty: all)
    judged_since/_until    count only judgments made on these days (UTC, both inclusive)
    exclude_flagged        do not count judgments of reviewers the agreement report flags
    exclude_flagged_rationales  do not count judgments whose rationale has a rationale-check flag
    adjudications          ignore rulings; let the latest ruling decide split pairs; or every ruled pair
    gold                   gold (honeypot) prompts: include, exclude, or only them
    max_pairs_per_prompt   keep at most this many pairs of one prompt: the most agreed-on first
    test_ratio, seed       the share of prompts in the test split; the split hashes prompt_id with seed
    row_format             conversational (chat messages) or standard (plain strings)
    file_format            jsonl or parquet
    model_scores           each row's meta carries the attached model reviewers' scores of its two answers
    """

    min_judgments: int = 1
    min_agreement: float = 0.0
    exclude_ties: bool = False
    criteria_versions: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()
    judged_since: dt.date | None = None
    judged_until: dt.date | None = None
    exclude_flagged: bool = False
    exclude_flagged_rationales: bool = False
    adjudications: str = "ignore"
    gold: str = "include"
    max_pairs_per_prompt: int | None = None
    test_ratio: float = 0.1
    seed: int = 0
    row_format: str = "conversational"
    file_format: str = "jsonl"
    model_scores: bool = False

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.model_scores:
            # Recorded only when asked for: an export without it records (and hashes) what it did before.
            del data["model_scores"]
        data["criteria_versions"] = list(self.criteria_versions)
        data["tags"] = list(self.tags)
        for key in ("judged_since", "judged_until"):
            data[key] = data[key].isoformat() if data[key] else None
        return data

    @property
    def judged_since_utc(self) -> dt.datetime | None:
        if self.judged_since is None:
            return None
        return dt.datetime.combine(self.judged_since, dt.time(), tzinfo=dt.UTC)

    @property
    def judged_before_utc(self) -> dt.datetime | None:
        """The first instant after judged_until (the whole last day counts)."""
        if self.judged_until is None:
            return None
        return dt.datetime.combine(self.judged_until + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)


FIELDS = tuple(ExportFilters.__dataclass_fields__)


def _int(name: str, value: Any, *, low: int, high: int = MAX_INT32) -> int:
    return whole_number(name, value, low=low, high=high, error=ExportError)


def _share(name: str, value: Any, *, low: float, high: float) -> float:
    return share_number(name, value, low=low, high=high, error=ExportError)


def _list(name: str, value: Any) -> list:
    """A list, or a comma-separated string (form fields and command options)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return list(value)
    raise ExportError(f"{name}: {value!r} must be a list or a comma-separated string")


def _date(name: str, value: Any) -> dt.date | None:
    if value in (None, ""):
        return None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise ExportError(f"{name}: {value!r} must be a date written YYYY-MM-DD") from None


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ExportError(f"{name}: {value!r} must be one of {', '.join(choices)}")
    return value


def filters_parse(data: Mapping[str, Any]) -> ExportFilters:
    """Validate and normalise export filters; unknown keys are an error (a typo must not be ignored)."""
    if not isinstance(data, Mapping):
        raise ExportError("the export request must be a JSON object of filters")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ExportError(f"{unknown[0]}: unknown filter; the filters are {', '.join(FIELDS)}")
    given = {key: value for key, value in data.items() if value is not None}
    defaults = ExportFilters()
    values: dict[str, Any] = {}
    if "min_judgments" in given:
        values["min_judgments"] = _int("min_judgments", given["min_judgments"], low=1)
    if "min_agreement" in given:
        values["min_agreement"] = _share("min_agreement", given["min_agreement"], low=0.0, high=1.0)
    for name in ("exclude_ties", "exclude_flagged", "exclude_flagged_rationales", "model_scores"):
        if name in given:
            values[name] = true_or_false(name, given[name], error=ExportError)
    if "adjudications" in given:
        values["adjudications"] = _choice("adjudications", given["adjudications"], ADJUDICATION_CHOICES)
    if "criteria_versions" in given:
        versions = {_int("criteria_versions", v, low=1) for v in _list("criteria_versions", given["criteria_versions"])}
        values["criteria_versions"] = tuple(sorted(versions))
    if "tags" in given:
        tags = _list("tags", given["tags"])
        if not all(isinstance(tag, str) and tag for tag in tags):
            raise ExportError(f"tags: {given['tags']!r} must be a list of non-empty strings")
        values["tags"] = tuple(sorted(set(tags)))
    for name in ("judged_since", "judged_until"):
        if name in given:
            values[name] = _date(name, given[name])
    if values.get("judged_since") and values.get("judged_until") and values["judged_since"] > values["judged_until"]:
        raise ExportError(f"judged_until: {values['judged_until']} is before judged_since {values['judged_since']}; "
                          "swap them")
    if "gold" in given:
        values["gold"] = _choice("gold", given["gold"], GOLD_CHOICES)
    if given.get("max_pairs_per_prompt") not in (None, ""):
        values["max_pairs_per_prompt"] = _int("max_pairs_per_prompt", given["max_pairs_per_prompt"], low=1)
    if "test_ratio" in given:
        values["test_ratio"] = _share("test_ratio", given["test_ratio"], low=0.0, high=0.9)
    if "seed" in given:
        values["seed"] = _int("seed", given["seed"], low=0, high=2**32 - 1)
    if "row_format" in given:
        values["row_format"] = _choice("row_format", given["row_format"], ROW_FORMATS)
    if "file_format" in given:
        values["file_format"] = _choice("file_format", given["file_format"], FILE_FORMATS)
    return ExportFilters(**{name: values.get(name, getattr(defaults, name)) for name in FIELDS})

"""What a project backup holds, and the file's framing: a header line, one record a line, a closing line.

Every row tied to the project is kept under its own primary key: the snapshot's rows carry pair ids and
the agreement report reads judgments in id order, so a restore that renumbered them would give a
different snapshot. Users are referenced by username and listed once, with their roles, before the rows.
"""

from __future__ import annotations

import hashlib

import orjson
from django.apps import apps

FORMAT = "pairwise-project-backup"
VERSION = 1

# (model label, the lookup from that model to its project's id), in the order a restore inserts them.
PROJECT_ROWS: tuple[tuple[str, str], ...] = (
    ("review.project", "pk"),
    ("review.criteriaversion", "project"),
    ("review.prompt", "project"),
    ("review.response", "prompt__project"),
    ("review.pair", "project"),
    ("review.assignment", "project"),
    ("review.judgment", "assignment__project"),
    ("review.reviewertally", "project"),
    ("review.qualificationattempt", "project"),
    ("review.goldcheck", "project"),
    ("review.rationalecheck", "project"),
    ("review.reviewerstanding", "project"),
    ("review.adjudicationassignment", "project"),
    ("review.adjudication", "project"),
    ("quality.storedagreementreport", "project"),
)

# Rows tied to a project that a backup leaves out, and why (a test checks every model is either kept or here).
LEFT_OUT = {
    "exports.export": "an export record points at a snapshot folder on this machine's disk, not in the backup",
    "quality.modelreviewer": "a model reviewer points at a checkpoint folder on this machine's disk, not in the "
                             "backup; attach the reward model again after a restore and it scores the pairs anew",
    "quality.modelpairscore": "a model reviewer's scores go with it (see quality.modelreviewer)",
}


class BackupError(Exception):
    """A backup that cannot be made or restored: one line saying what, where and how to fix it."""


def project_models():
    """(model class, project lookup) for every kept model, in insertion order."""
    return [(apps.get_model(label), lookup) for label, lookup in PROJECT_ROWS]


def line_bytes(record: dict) -> bytes:
    """One record as one line: sorted keys, so the same rows always give the same bytes."""
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS | orjson.OPT_NAIVE_UTC) + b"\n"


class LineHasher:
    """sha256 over every line before the closing one: a truncated or edited file no longer matches."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.lines = 0

    def add(self, line: bytes) -> None:
        self.digest.update(line)
        self.lines += 1

    def closing_record(self) -> dict:
        return {"end": {"lines": self.lines, "sha256": self.digest.hexdigest()}}

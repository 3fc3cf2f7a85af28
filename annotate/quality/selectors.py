"""The one read that feeds the quality maths: a project's current judgments as a JudgmentTable.

Streams rows with a server-side cursor (iterator) and converts them a chunk at a time, so memory
grows with the numpy columns only.
"""

import itertools

import numpy as np
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from annotate.quality.report import agreement_report
from annotate.quality.table import CRITERION_MISSING, NO_GOLD, ROW_COLUMNS, JudgmentTable
from annotate.review.choices import CRITERION_WINNERS, WINNER_CODES
from annotate.review.models import Assignment, Project, live_assignment

_CRITERION_CODES = {name: code for code, name in enumerate(CRITERION_WINNERS)}


def judgment_table_for_project(*, project: Project, chunk_size: int = 20_000) -> JudgmentTable:
    """Every reviewer of the project and every live judgment that currently counts (retractions excluded;
    answers of the qualification round are not live judgments: models.live_assignment)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # PostgreSQL plans a server-side cursor for its first rows (cursor_tuple_fraction 0.1): nested
            # loops that took 30 s at 900,000 judgments where the hash joins of a full read take 5 s. This
            # read wants every row.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL cursor_tuple_fraction = 1.0")
        return _read_judgment_table(project=project, chunk_size=chunk_size)


def _read_judgment_table(*, project: Project, chunk_size: int) -> JudgmentTable:
    rows = (
        Assignment.objects.filter(live_assignment(), project=project, current_judgment__isnull=False)
        .order_by("current_judgment_id")
        .values_list(
            "pair_id", "reviewer_id", "current_judgment__winner", "current_judgment__strength", "a_on_left",
            "is_retest", "current_judgment__seconds_spent", "current_judgment__created_at",
            "pair__prompt__gold_response_id", "pair__response_a_id", "pair__response_b_id",
            "pair__response_a__model", "pair__response_a__model_version",
            "pair__response_b__model", "pair__response_b__model_version", "current_judgment__criteria",
        )
        .iterator(chunk_size=chunk_size)
    )
    criteria_keys = sorted({key for version in project.criteria_versions.all() for key in version.keys})
    chunks: list[dict[str, np.ndarray]] = []
    reviewer_index: dict[int, int] = {}
    model_index: dict[str, int] = {}
    # Rows are turned into numpy columns a chunk at a time, so a million judgments never sit in memory
    # as Python objects all at once.
    for batch in iter(lambda: list(itertools.islice(rows, chunk_size)), []):
        (pair, reviewer, winner, strength, a_on_left, is_retest, seconds, created_at, gold_id, a_id, b_id,
         a_model, a_version, b_model, b_version, chosen) = zip(*batch, strict=True)
        winner_codes = np.array([WINNER_CODES[w] for w in winner], dtype=np.int8)
        gold_ids = np.array([-1 if g is None else g for g in gold_id], dtype=np.int64)
        a_ids, b_ids = np.array(a_id, dtype=np.int64), np.array(b_id, dtype=np.int64)
        chunk = {
            "pair": np.array(pair, dtype=np.int64),
            "reviewer": np.array([reviewer_index.setdefault(r, len(reviewer_index)) for r in reviewer], dtype=np.int32),
            "winner": winner_codes,
            "strength": np.where(winner_codes <= 1, np.array([v or 0 for v in strength], dtype=np.int8), 0),
            "left_is_a": np.array(a_on_left, dtype=bool),
            "is_retest": np.array(is_retest, dtype=bool),
            # A negative time (stored before clocks were checked) is unknown, as the judging service now records it.
            "seconds": np.array([np.nan if v is None or v < 0 else v for v in seconds], dtype=np.float32),
            "created_at": np.array([t.timestamp() for t in created_at], dtype=np.float64),
            "gold": np.where(gold_ids == a_ids, 0, np.where(gold_ids == b_ids, 1, NO_GOLD)).astype(np.int8),
            "model_a": np.array([model_index.setdefault(f"{m}@{v}", len(model_index)) for m, v in zip(a_model, a_version, strict=True)], dtype=np.int32),
            "model_b": np.array([model_index.setdefault(f"{m}@{v}", len(model_index)) for m, v in zip(b_model, b_version, strict=True)], dtype=np.int32),
        }
        for key in criteria_keys:
            chunk[f"criterion:{key}"] = np.array(
                [_CRITERION_CODES.get(c.get(key), CRITERION_MISSING) for c in chosen], dtype=np.int8
            )
        chunks.append(chunk)
    # JudgmentTable gives empty columns their types; chunks are typed as they are built, to save memory.
    columns = {name: np.concatenate([c[name] for c in chunks]) if chunks else [] for name in ROW_COLUMNS}
    criteria = {key: np.concatenate([c[f"criterion:{key}"] for c in chunks]) if chunks else []
                for key in criteria_keys}
    # Reviewers of the project who have judged nothing yet still belong in the report.
    usernames = dict(
        get_user_model().objects.filter(assignments__project=project).distinct().values_list("id", "username")
    )
    for user_id in sorted(usernames):
        reviewer_index.setdefault(user_id, len(reviewer_index))
    names_by_index = sorted(reviewer_index, key=reviewer_index.get)
    return JudgmentTable(
        **columns, criteria=criteria, reviewer_names=[usernames[user_id] for user_id in names_by_index],
        model_names=sorted(model_index, key=model_index.get),
    )


def agreement_report_for_project(*, project: Project, bootstrap: int = 1000, seed: int = 0) -> dict:
    """The agreement report (docs/agreement.md) of one project, computed now from its current judgments."""
    report = agreement_report(
        judgment_table_for_project(project=project), bootstrap=bootstrap, seed=seed, overlap=project.overlap
    )
    report["project"] = project.slug
    return report

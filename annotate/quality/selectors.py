"""The one read that feeds the quality maths: a project's current judgments as a JudgmentTable.

Streams rows with a server-side cursor (iterator), so memory grows with the numpy columns only.
"""

import numpy as np
from django.contrib.auth import get_user_model

from annotate.quality.report import agreement_report
from annotate.quality.table import CRITERION_MISSING, NO_GOLD, JudgmentTable
from annotate.review.models import Assignment, Project

_WINNER_CODES = {"a": 0, "b": 1, "tie": 2, "both_bad": 3}
_CRITERION_CODES = {"a": 0, "b": 1, "tie": 2}


def judgment_table_for_project(*, project: Project, chunk_size: int = 20_000) -> JudgmentTable:
    """Every reviewer of the project and every judgment that currently counts (retractions excluded)."""
    rows = (
        Assignment.objects.filter(project=project, current_judgment__isnull=False)
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
    columns: dict[str, list] = {name: [] for name in (
        "pair", "reviewer", "winner", "strength", "left_is_a", "is_retest", "seconds", "created_at", "gold",
        "model_a", "model_b",
    )}
    criteria: dict[str, list[int]] = {key: [] for key in criteria_keys}
    reviewer_index: dict[int, int] = {}
    model_index: dict[str, int] = {}
    for (pair, reviewer, winner, strength, a_on_left, is_retest, seconds, created_at, gold_id, a_id, b_id,
         a_model, a_version, b_model, b_version, chosen) in rows:
        columns["pair"].append(pair)
        columns["reviewer"].append(reviewer_index.setdefault(reviewer, len(reviewer_index)))
        code = _WINNER_CODES[winner]
        columns["winner"].append(code)
        columns["strength"].append((strength or 0) if code <= 1 else 0)
        columns["left_is_a"].append(a_on_left)
        columns["is_retest"].append(is_retest)
        columns["seconds"].append(np.nan if seconds is None else seconds)
        columns["created_at"].append(created_at.timestamp())
        columns["gold"].append(0 if gold_id == a_id else 1 if gold_id == b_id else NO_GOLD)
        columns["model_a"].append(model_index.setdefault(f"{a_model}@{a_version}", len(model_index)))
        columns["model_b"].append(model_index.setdefault(f"{b_model}@{b_version}", len(model_index)))
        for key in criteria_keys:
            criteria[key].append(_CRITERION_CODES.get(chosen.get(key), CRITERION_MISSING))
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
    """The agreement report of DESIGN.md for one project, from its current judgments."""
    report = agreement_report(
        judgment_table_for_project(project=project), bootstrap=bootstrap, seed=seed, overlap=project.overlap
    )
    report["project"] = project.slug
    return report

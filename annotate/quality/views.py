"""The quality dashboard: a project's agreement report as a page, for admins and engineers."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import render

from annotate.quality.charts import charts_for_report, interval, notes_by_key, number, p_value, percent
from annotate.quality.reviewers import (
    FLAG_FAILING_GOLD,
    FLAG_INCONSISTENT_RETEST,
    FLAG_LOW_AGREEMENT,
    FLAG_POSITION_BIAS,
    FLAG_TOO_FAST,
)
from annotate.quality.selectors import agreement_report_for_project
from annotate.review.models import Project
from annotate.review.selectors import user_roles

# Enough resamples for intervals stable to about a percentage point, few enough for a page load.
DASHBOARD_BOOTSTRAP = 500

FLAGS = {
    FLAG_POSITION_BIAS: ("position bias", "Picks one side more often than chance allows, whatever the answers."),
    FLAG_LOW_AGREEMENT: ("low agreement", "Agrees with the other reviewers' majority well below the typical reviewer."),
    FLAG_INCONSISTENT_RETEST: ("inconsistent retests", "Often answers differently when shown a pair again."),
    FLAG_TOO_FAST: ("too fast", "Takes far less time per pair than the typical reviewer."),
    FLAG_FAILING_GOLD: ("failing gold", "Often misses the known answer of gold items."),
}


@dataclass(frozen=True)
class Figure:
    """One number on the page: its text, what qualifies it, and why it is missing when it is."""

    value: str
    detail: str = ""
    missing_reason: str = ""
    label: str = ""


@dataclass(frozen=True)
class ReviewerRow:
    username: str
    judgments: int
    agreement: Figure
    left_rate: Figure
    retest: Figure
    gold: Figure
    seconds: Figure
    flags: list[tuple[str, str]] = field(default_factory=list)


def _figure(value: str, *, missing: bool, reason: str, detail: str = "", label: str = "") -> Figure:
    return Figure(value=value, detail="" if missing else detail,
                  missing_reason=(reason or "cannot be computed") if missing else "", label=label)


def _ci(ci: list[float] | None, show) -> str:
    return f"95% CI {interval(ci, show)}" if ci else ""


def _spread(ci: list[float] | None, count: int, noun: str) -> str:
    """The interval and what the rate is out of, e.g. "55% to 70% · of 59 retests"."""
    return " · ".join(part for part in (interval(ci, percent), f"of {count} {noun}") if part)


def _headline(report: dict, notes: dict[str, str]) -> list[Figure]:
    """Ten figures: how much was judged first, then how far reviewers agree."""
    alpha = report["krippendorff_alpha"]
    bias = report["position_bias"]
    fleiss = report.get("fleiss_kappa") or {}
    retest = report.get("retest") or {}
    gold = report.get("gold") or {}
    reviewers = (report.get("coverage") or {}).get("reviewers_with_judgments", 0)
    figures = [
        Figure(label="Judgments", value=str(report["judgments"]), detail=f"by {reviewers} reviewers"),
        Figure(label="Pairs", value=str(report["pairs"]), detail="judged at least once"),
        Figure(label="Pairs with overlap", value=str(report["pairs_with_overlap"]), detail="two or more judgments"),
        _figure(percent(retest.get("consistency")), label="Retest consistency",
                missing=retest.get("consistency") is None, reason=notes.get("retest.consistency", ""),
                detail=f"{retest.get('retests', 0)} retests"),
        _figure(percent(gold.get("accuracy")), label="Gold accuracy", missing=gold.get("accuracy") is None,
                reason=notes.get("gold.accuracy", ""), detail=f"{gold.get('judgments', 0)} gold judgments"),
        _figure(percent(report["percent_agreement"], 1), label="Percent agreement",
                missing=report["percent_agreement"] is None, reason=notes.get("percent_agreement", ""),
                detail=_ci(report.get("percent_agreement_ci"), lambda v: percent(v, 1))),
    ]
    for level in ("nominal", "ordinal"):
        estimate = alpha[level]
        figures.append(_figure(
            number(estimate["value"], 3), label=f"Krippendorff's α, {level}", missing=estimate["value"] is None,
            reason=notes.get(f"krippendorff_alpha.{level}", ""), detail=_ci(estimate["ci"], number),
        ))
    figures.append(_figure(
        number(fleiss.get("value"), 3), label="Fleiss' κ", missing=fleiss.get("value") is None,
        reason=notes.get("fleiss_kappa", ""),
        detail=f"{fleiss.get('pairs', 0)} pairs with {fleiss.get('judgments_per_pair')} judgments each",
    ))
    figures.append(_figure(
        percent(bias["left_rate"], 1), label="Left rate", missing=bias["left_rate"] is None,
        reason=notes.get("position_bias", ""),
        detail=" · ".join(part for part in (_ci(bias.get("ci"), lambda v: percent(v, 1)), p_value(bias["p_value"]))
                          if part),
    ))
    return figures


def _per_reviewer_reason(notes: dict[str, str], key: str) -> str:
    """"null for 2 reviewer(s): no retest" -> "no retest"."""
    return notes.get(f"reviewers[].{key}", "").rpartition(": ")[2]


def _reviewer_rows(report: dict, notes: dict[str, str]) -> list[ReviewerRow]:
    rows = []
    for r in report["reviewers"]:
        rows.append(ReviewerRow(
            username=r["username"],
            judgments=r["judgments"],
            agreement=_figure(percent(r["agreement_with_others"]), missing=r["agreement_with_others"] is None,
                              reason=_per_reviewer_reason(notes, "agreement_with_others"),
                              detail=_spread(r.get("agreement_ci"), r.get("agreement_judgments", 0), "with a majority")),
            left_rate=_figure(percent(r["left_rate"]), missing=r["left_rate"] is None,
                              reason=_per_reviewer_reason(notes, "left_rate"),
                              detail=_spread(r.get("left_ci"), r.get("decisive_judgments", 0), "a/b choices")),
            retest=_figure(percent(r["retest_consistency"]), missing=r["retest_consistency"] is None,
                           reason=_per_reviewer_reason(notes, "retest_consistency"),
                           detail=_spread(r.get("retest_ci"), r.get("retests", 0), "retests")),
            gold=_figure(percent(r["gold_accuracy"]), missing=r["gold_accuracy"] is None,
                         reason=_per_reviewer_reason(notes, "gold_accuracy"),
                         detail=_spread(r.get("gold_ci"), r.get("gold_judgments", 0), "gold")),
            seconds=_figure(number(r.get("median_seconds"), 0), missing=r.get("median_seconds") is None,
                            reason=_per_reviewer_reason(notes, "median_seconds")),
            flags=[FLAGS.get(flag, (flag.replace("_", " "), "")) for flag in r["flags"]],
        ))
    # Flagged reviewers first: they are what an admin opens this page to find.
    return sorted(rows, key=lambda row: (not row.flags, row.username.casefold()))


def _model_rows(report: dict) -> list[dict]:
    return [
        {
            "rank": rank,
            "model": m["model"],
            "rating": number(m["rating"], signed=True),
            "ci": interval(m.get("ci"), number),
            "wins": m["wins"],
            "losses": m["losses"],
            "ties": m["ties"],
            "both_bad": m.get("both_bad", 0),
            "comparisons": m.get("comparisons", m["wins"] + m["losses"] + m["ties"]),
        }
        for rank, m in enumerate(report["models"], start=1)
    ]


def _criterion_rows(report: dict, notes: dict[str, str], texts: dict[str, str]) -> list[dict]:
    rows = []
    for key, block in (report.get("per_criterion") or {}).items():
        prefix = f"per_criterion.{key}"
        alpha = block["krippendorff_alpha"]
        rows.append({
            "key": key,
            "text": texts.get(key, ""),
            "judgments": block["judgments"],
            "percent_agreement": _figure(percent(block["percent_agreement"], 1),
                                         missing=block["percent_agreement"] is None,
                                         reason=notes.get(f"{prefix}.percent_agreement", "")),
            "nominal": _figure(number(alpha["nominal"]["value"], 3), missing=alpha["nominal"]["value"] is None,
                               reason=notes.get(f"{prefix}.krippendorff_alpha.nominal", ""),
                               detail=interval(alpha["nominal"]["ci"], number)),
            "ordinal": _figure(number(alpha["ordinal"]["value"], 3), missing=alpha["ordinal"]["value"] is None,
                               reason=notes.get(f"{prefix}.krippendorff_alpha.ordinal", ""),
                               detail=interval(alpha["ordinal"]["ci"], number)),
            "fleiss": _figure(number(block["fleiss_kappa"]["value"], 3),
                              missing=block["fleiss_kappa"]["value"] is None,
                              reason=notes.get(f"{prefix}.fleiss_kappa", "")),
        })
    return rows


def quality_dashboard(request, slug: str):
    if not user_roles(request.user) & {"admin", "engineer"}:
        raise PermissionDenied("only admins and engineers can see the quality dashboard")
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise Http404(f"no project {slug!r}")
    report = agreement_report_for_project(project=project, bootstrap=DASHBOARD_BOOTSTRAP)
    notes = notes_by_key(report["notes"])
    criteria = project.criteria_versions.first()  # newest version first
    texts = {item["key"]: item.get("text", "") for item in criteria.items} if criteria else {}
    return render(request, "quality/dashboard.html", {
        "project": project,
        "report": report,
        "headline": _headline(report, notes),
        "charts": charts_for_report(report),
        "reviewers": _reviewer_rows(report, notes),
        "models": _model_rows(report),
        "criteria": _criterion_rows(report, notes, texts),
        "bucket": (report.get("agreement_over_time") or {}).get("bucket"),
        "kappa_min_shared": (report.get("cohen_kappa") or {}).get("min_shared_pairs"),
        "bootstrap": DASHBOARD_BOOTSTRAP,
    })

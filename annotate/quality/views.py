"""The quality dashboard: a project's agreement report as a page, for admins and engineers, with the
qualification round's results and the rationale checks' flags."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince
from django.views.decorators.http import require_POST

from annotate.quality.charts import (
    charts_for_report,
    interval,
    notes_by_key,
    number,
    p_value,
    percent,
    rationale_flags_chart,
)
from annotate.quality.model_agreement import (
    LEFT_OUT_REASONS,
    LEFT_RATE_NOTE,
    ORDER_CONSISTENCY_NOTE,
    TIE_BELOW,
    TOO_FEW_TO_JUDGE_UNDER,
)
from annotate.quality.model_reviewers import attachable_checkpoints, model_reviewer_summaries
from annotate.quality.report import REVIEWER_NULL_REASONS
from annotate.quality.reviewers import (
    FLAG_FAILING_GOLD,
    FLAG_INCONSISTENT_RETEST,
    FLAG_LOW_AGREEMENT,
    FLAG_POSITION_BIAS,
    FLAG_TOO_FAST,
)
from annotate.quality.services import STORED_BOOTSTRAP, StoredReportState, stored_report_read
from annotate.review import selectors as review_selectors
from annotate.review.errors import ReviewError
from annotate.review.models import qualification_gold_short
from annotate.review.qualification import guess_pass_chance, qualification_release
from annotate.review.rationale import FLAGS as RATIONALE_FLAGS
from annotate.review.selectors import project_for_staff_page
from annotate.roles import ADMIN_ROLES, has_role, require_role

RATIONALE_FLAG_TEXT = {
    "too_short": ("too short", "Shorter than the project's rationale flag length."),
    "reused": ("reused", "The reviewer wrote the same text on another pair."),
    "near_duplicate": ("near-duplicate", "Nearly the same as a rationale another reviewer wrote earlier on the pair."),
    "pasted": ("pasted", "Less than half of it was typed on the reviewer page."),
}

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


def _figure(raw, show, *, reason: str, detail: str = "", label: str = "") -> Figure:
    """`raw` shown with `show`; a None value is missing, with the report's reason for it."""
    missing = raw is None
    return Figure(value=show(raw), detail="" if missing else detail,
                  missing_reason=(reason or "cannot be computed") if missing else "", label=label)


def _percent_1(value) -> str:
    return percent(value, 1)


def _number_3(value) -> str:
    return number(value, 3)


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
        Figure(label="Judgments", value=str(report["judgments"]), detail=f"by {reviewers} reviewer{pluralize(reviewers)}"),
        Figure(label="Pairs", value=str(report["pairs"]), detail="judged at least once"),
        Figure(label="Pairs with overlap", value=str(report["pairs_with_overlap"]), detail="two or more judgments"),
        _figure(retest.get("consistency"), percent, label="Retest consistency",
                reason=notes.get("retest.consistency", ""), detail=f"{retest.get('retests', 0)} retests"),
        _figure(gold.get("accuracy"), percent, label="Gold accuracy", reason=notes.get("gold.accuracy", ""),
                detail=f"{gold.get('judgments', 0)} gold judgments"),
        _figure(report["percent_agreement"], _percent_1, label="Percent agreement",
                reason=notes.get("percent_agreement", ""), detail=_ci(report.get("percent_agreement_ci"), _percent_1)),
    ]
    for level in ("nominal", "ordinal"):
        estimate = alpha[level]
        figures.append(_figure(
            estimate["value"], _number_3, label=f"Krippendorff's α, {level}",
            reason=notes.get(f"krippendorff_alpha.{level}", ""), detail=_ci(estimate["ci"], number),
        ))
    figures.append(_figure(
        fleiss.get("value"), _number_3, label="Fleiss' κ", reason=notes.get("fleiss_kappa", ""),
        detail=f"{fleiss.get('pairs', 0)} pairs with {fleiss.get('judgments_per_pair')} judgments each",
    ))
    figures.append(_figure(
        bias["left_rate"], _percent_1, label="Left rate", reason=notes.get("position_bias", ""),
        detail=" · ".join(part for part in (_ci(bias.get("ci"), _percent_1), p_value(bias["p_value"])) if part),
    ))
    return figures


# The reviewer table's rate columns: row field, report key, its interval, its count, what is counted.
_REVIEWER_RATES = (
    ("agreement", "agreement_with_others", "agreement_ci", "agreement_judgments", "with a majority"),
    ("left_rate", "left_rate", "left_ci", "decisive_judgments", "a/b choices"),
    ("retest", "retest_consistency", "retest_ci", "retests", "retests"),
    ("gold", "gold_accuracy", "gold_ci", "gold_judgments", "gold"),
)


def _reviewer_rows(report: dict) -> list[ReviewerRow]:
    rows = []
    for r in report["reviewers"]:
        rates = {
            field_name: _figure(r[key], percent, reason=REVIEWER_NULL_REASONS[key],
                                detail=_spread(r[ci_key], r[count_key], noun))
            for field_name, key, ci_key, count_key, noun in _REVIEWER_RATES
        }
        rows.append(ReviewerRow(
            username=r["username"],
            judgments=r["judgments"],
            **rates,
            seconds=_figure(r["median_seconds"], lambda v: number(v, 0),
                            reason=REVIEWER_NULL_REASONS["median_seconds"]),
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
            "both_bad": m["both_bad"],
            "comparisons": m["comparisons"],
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
            "percent_agreement": _figure(block["percent_agreement"], _percent_1,
                                         reason=notes.get(f"{prefix}.percent_agreement", "")),
            **{level: _figure(alpha[level]["value"], _number_3, detail=interval(alpha[level]["ci"], number),
                              reason=notes.get(f"{prefix}.krippendorff_alpha.{level}", ""))
               for level in ("nominal", "ordinal")},
            "fleiss": _figure(block["fleiss_kappa"]["value"], _number_3, reason=notes.get(f"{prefix}.fleiss_kappa", "")),
        })
    return rows


def _age_line(state: StoredReportState, now) -> str:
    """How old the stored report is and what is being done about it, e.g.
    "computed 3 minutes ago, 12 new judgments since, recomputing"."""
    parts = [f"computed {timesince(state.computed_at, now, depth=1)} ago"]
    if state.stale:
        parts.append(f"{state.judgments_since} new judgment{'' if state.judgments_since == 1 else 's'} since")
        if state.recomputing:
            parts.append("recomputing")
    else:
        parts.append("up to date")
    return ", ".join(parts)


def _qualification_section(project, *, can_release: bool, gold_judgments: int = 0) -> dict:
    """Qualification attempts and unannounced gold checks per reviewer. `gold_judgments` is the report's count behind
    Gold accuracy, which also takes gold items judged as ordinary pairs, so the section says how the two differ."""
    rows = review_selectors.qualification_results(project=project)
    if project.qualification_items:
        # A reviewer whose round could not start (no gold item left for them) has no attempt yet, and still
        # needs a row with the admin's pass.
        listed = {row["username"] for row in rows}
        waiting = (get_user_model().objects.filter(groups__name="reviewer", is_active=True)
                   .exclude(username__in=listed).order_by("username").values_list("username", flat=True))
        rows = sorted(rows + [{"username": name, "status": "not_started", "attempts": [],
                               "live_gold": {"answered": 0, "correct": 0}} for name in waiting],
                      key=lambda row: row["username"].casefold())
    for row in rows:
        # Every state but passed has a way out an admin can press: pass, and (once tried) another attempt.
        row["actions"] = ([] if row["status"] == "passed" or not project.qualification_items
                          else ["pass"] if row["status"] == "not_started" else ["retry", "pass"])
        row["attempt_lines"] = [
            f"{a['number']}: {a['correct']} of {a['answered']} right, {a['status']}"
            + (f" ({a['decided_by']})" if a["decided_by"] else "")
            for a in row["attempts"]
        ]
        gold = row["live_gold"]
        row["live_gold_line"] = (f"{gold['correct']} of {gold['answered']} right ({percent(gold['correct'] / gold['answered'])})"
                                 if gold["answered"] else "—")
    return {
        "required": bool(project.qualification_items), "items": project.qualification_items,
        "pass_mark": percent(project.qualification_pass_mark), "attempts": project.qualification_attempts,
        "guess_pass_chance": percent(guess_pass_chance(items=project.qualification_items,
                                                       pass_mark=project.qualification_pass_mark,
                                                       attempts=project.qualification_attempts), 1),
        "gold_rate": percent(project.gold_rate, 1), "rows": rows, "can_release": can_release,
        "held": sum(row["status"] == "held" for row in rows),
        "gold_short": qualification_gold_short(project), "gold_judgments": gold_judgments,
    }


def _rationale_section(project, report: dict | None) -> dict:
    summary = review_selectors.rationale_flag_summary(project=project)
    judged = {r["username"]: r["judgments"] for r in (report or {}).get("reviewers", [])}
    rows = []
    for username, counts in sorted(summary["per_reviewer"].items(), key=lambda item: item[0].casefold()):
        total = max(judged.get(username, 0), counts["flagged"])
        rows.append({"username": username, "judgments": total, "flagged": counts["flagged"],
                     **{name: counts[name] for name in RATIONALE_FLAGS},
                     "share": percent(counts["flagged"] / total) if total else "—"})
    for item in summary["latest"]:
        item["flag_labels"] = [RATIONALE_FLAG_TEXT[name] for name in item["flags"]]
    return {"rows": rows, "latest": summary["latest"], "chart": rationale_flags_chart(rows),
            "flag_bar": project.rationale_flag_chars, "flag_text": RATIONALE_FLAG_TEXT}


def _rate_figure(block: dict, noun: str) -> Figure:
    """A model reviewer's rate: its value, interval and n, or "too few to judge" under the limit."""
    if block["too_few_to_judge"]:
        return Figure(value="too few to judge", detail=f"{block['n']} {noun}",
                      missing_reason="" if block["n"] else f"no {noun}")
    return Figure(value=_percent_1(block["value"]), detail=_spread(block["ci"], block["n"], noun))


def _agreement_figures(agreement: dict | None, label: str) -> dict | None:
    """A model reviewer's agreement share and kappa over one set of pairs, under its label."""
    if agreement is None:
        return None
    kappa = agreement["cohen_kappa"]
    return {"label": label, "share": _rate_figure(agreement["share"], "pairs with a majority for a or b"),
            "kappa": (Figure(value="too few to judge", detail=f"{agreement['n']} pairs")
                      if agreement["too_few_to_judge"]
                      else _figure(kappa["value"], _number_3, detail=_ci(kappa["ci"], number),
                                   reason="the people and the model used one category throughout"))}


def _model_reviewer_rows(summaries: list[dict]) -> list[dict]:
    rows = []
    for summary in summaries:
        figures = summary["figures"]
        # Pairs it never saw lead: agreement on its own training pairs measures memory (model_agreement.py).
        agreements = [block for block in (
            _agreement_figures(figures["agreement_unseen"], "pairs it never saw"),
            _agreement_figures(figures["agreement_seen"], "its training pairs"),
            _agreement_figures(figures["agreement"], "all pairs")) if block is not None]
        rows.append({
            **summary,
            "agreements": agreements,
            # Not a measurement: both choices come from the same two scores (ORDER_CONSISTENCY_NOTE).
            "order": _figure(figures["order_consistency"]["value"], _number_3, reason="no scored pairs",
                             detail=f"by construction · of {figures['order_consistency']['n']} scored pairs"),
            "left": _rate_figure(figures["left_rate"], "a/b choices"),
            "left_out": [(LEFT_OUT_REASONS[key], count) for key, count in figures["left_out"].items() if count],
        })
    return rows


def _model_reviewer_section(project, *, is_admin: bool) -> dict:
    return {
        "rows": _model_reviewer_rows(model_reviewer_summaries(project=project)),
        "checkpoints": attachable_checkpoints(project) if is_admin else [],
        "can_change": is_admin,
        "adaptive": project.overlap_is_adaptive,
        "too_few_under": TOO_FEW_TO_JUDGE_UNDER,
        "tie_below": TIE_BELOW,
        "order_note": ORDER_CONSISTENCY_NOTE,
        "left_note": LEFT_RATE_NOTE,
    }


def quality_dashboard(request, slug: str):
    project = project_for_staff_page(request, slug, to="see the quality dashboard")
    now = timezone.now()
    state = stored_report_read(project=project, now=now)
    is_admin = has_role(request.user, ADMIN_ROLES)
    sections = {
        "qualification": _qualification_section(
            project, can_release=is_admin, gold_judgments=((state.report or {}).get("gold") or {}).get("judgments", 0)),
        "rationale": _rationale_section(project, state.report),
        "model_reviewers": _model_reviewer_section(project, is_admin=is_admin),
    }
    if state.report is None:
        # Before the first report exists (a worker is computing it): say so instead of a blank page.
        return render(request, "quality/dashboard.html", {
            "project": project, "report": None, "state": state, "bootstrap": STORED_BOOTSTRAP, **sections,
        })
    report = state.report
    notes = notes_by_key(report["notes"])
    criteria = project.criteria_versions.first()  # newest version first
    texts = {item["key"]: item.get("text", "") for item in criteria.items} if criteria else {}
    return render(request, "quality/dashboard.html", {
        "project": project,
        "report": report,
        "state": state,
        "age": _age_line(state, now),
        "headline": _headline(report, notes),
        "charts": charts_for_report(report, notes),
        "reviewers": _reviewer_rows(report),
        "models": _model_rows(report),
        "criteria": _criterion_rows(report, notes, texts),
        "bucket": (report.get("agreement_over_time") or {}).get("bucket"),
        "kappa_min_shared": (report.get("cohen_kappa") or {}).get("min_shared_pairs"),
        "bootstrap": report.get("method", {}).get("bootstrap_resamples", STORED_BOOTSTRAP),
        **sections,
    })


@require_POST
def qualification_release_page(request, slug: str):
    """The dashboard's buttons for a reviewer who has not passed: try the round again, or pass (admins only)."""
    project = project_for_staff_page(request, slug, to="see the quality dashboard")
    require_role(request, ADMIN_ROLES, "only admins can let a reviewer go on")
    reviewer = get_user_model().objects.filter(username=request.POST.get("username", "")).first()
    if reviewer is None:
        messages.error(request, f"no reviewer {request.POST.get('username', '')!r}")
    else:
        try:
            attempt = qualification_release(
                project=project, reviewer=reviewer, action=request.POST.get("action", ""), admin=request.user)
        except ReviewError as exc:
            messages.error(request, str(exc))
        else:
            verb = "passed" if attempt.status == attempt.Status.PASSED else f"may start attempt {attempt.number}"
            messages.success(request, f"{reviewer.get_username()} {verb}.")
    return redirect(reverse("quality-dashboard", args=[project.slug]) + "#qualification")

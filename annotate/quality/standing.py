"""A reviewer's own standing in a project: their figures from the stored agreement report.

Read by the reviewer page (the standing API); the figures come from the quality app's stored report, and
what was last shown is kept on the review side (ReviewerStanding).
"""

from django.contrib.auth.models import AbstractBaseUser

from annotate.quality.models import StoredAgreementReport
from annotate.review.models import Judgment, Project, ReviewerStanding
from annotate.review.qualification import qualification_state
from annotate.review.selectors import reviewer_judged

# A rate needs this many of the reviewer's own judgments behind it before their page shows it.
STANDING_MIN_COUNTS = {"gold_accuracy": 1, "retest_consistency": 1, "agreement_with_others": 10}
_STANDING_FIGURES = (  # standing key, the report's rate, its interval, its count, what is counted
    ("gold_accuracy", "gold_accuracy", "gold_ci", "gold_judgments", "gold items"),
    ("retest_consistency", "retest_consistency", "retest_ci", "retests", "pairs shown to you again"),
    ("agreement_with_others", "agreement_with_others", "agreement_ci", "agreement_judgments",
     "pairs where the other reviewers have a majority"),
)


STANDING_STEP = 10  # the figures move only after this many more judgments of the reviewer's own


def _standing_figures(mine: dict) -> dict:
    """The reviewer's figures from their row of the agreement report, each withheld over too few judgments."""
    figures = {}
    for key, rate_key, ci_key, count_key, noun in _STANDING_FIGURES:
        count, value = mine[count_key], mine[rate_key]
        enough = value is not None and count >= STANDING_MIN_COUNTS[key]
        figures[key] = {
            "value": round(value, 3) if enough else None,
            "ci": [round(bound, 3) for bound in mine[ci_key]] if enough and mine[ci_key] else None,
            "out_of": count,
            "of": noun,
            "missing": "" if enough else f"{count} {noun} so far; shown from {STANDING_MIN_COUNTS[key]}",
        }
    return figures


def _standing_snapshot_new(*, project: Project, reviewer: AbstractBaseUser, judged: int) -> ReviewerStanding | None:
    """New figures from the stored report, once it counts every judgment the reviewer has made (else None,
    and the report is being recomputed)."""
    from annotate.quality.services import stored_report_read  # the report pulls in scipy: only when asked

    state = stored_report_read(project=project)
    latest = (Judgment.objects.filter(reviewer=reviewer, pair__project_id=project.pk)
              .order_by("-pk").values_list("pk", flat=True).first()) or 0
    watermark = StoredAgreementReport.objects.filter(project=project).values_list(
        "judgment_watermark", flat=True).first() or 0
    if state.report is None or watermark < latest:
        return None
    mine = next((row for row in state.report["reviewers"] if row["username"] == reviewer.get_username()), None)
    if mine is None:
        return None
    snapshot, _ = ReviewerStanding.objects.update_or_create(
        project=project, reviewer=reviewer,
        defaults={"judged": judged, "figures": _standing_figures(mine), "report_judgments": mine["judgments"],
                  "as_of": state.computed_at},
    )
    return snapshot


def reviewer_standing(*, project: Project, reviewer: AbstractBaseUser) -> dict:
    """The reviewer's own figures, from the project's stored agreement report (docs/agreement.md).

    Shown once they have judged `project.standing_min_judgments`. Only their own row of the report is
    read, and only rates over several of their own judgments: nothing here says what another reviewer
    chose, or who the others are. The figures shown are kept (ReviewerStanding) and move only after
    STANDING_STEP more judgments of the reviewer's own, from a report that counts all of them: a figure
    that moved after every judgment would give away, by the difference, the others' majority on the pair
    just judged. A stale report queues a recompute and the last figures are shown meanwhile.
    """
    # The reviewer page's own count, so the standing and the header never disagree.
    judged = reviewer_judged(project=project, reviewer=reviewer)
    standing = {"judged": judged, "min_judgments": project.standing_min_judgments, "available": False,
                "reason": "", "as_of": None, "figures": {},
                "qualification": qualification_state(project=project, reviewer=reviewer)}
    if judged < project.standing_min_judgments:
        standing["reason"] = (f"your standing appears once you have judged {project.standing_min_judgments} "
                              f"pairs here; you have judged {judged}")
        return standing
    snapshot = ReviewerStanding.objects.filter(project=project, reviewer=reviewer).first()
    if snapshot is None or judged >= snapshot.judged + STANDING_STEP:
        snapshot = _standing_snapshot_new(project=project, reviewer=reviewer, judged=judged) or snapshot
    if snapshot is None:
        standing["reason"] = "your figures are being computed; look again in a minute"
        return standing
    standing.update(available=True, figures=snapshot.figures, as_of=snapshot.as_of.isoformat(),
                    figures_after=snapshot.judged, next_update_after=snapshot.judged + STANDING_STEP,
                    report_judgments_of_yours=snapshot.report_judgments)
    return standing

"""Reads of the review workflow, shaped for the reviewer API and pages.

What a reviewer is shown never includes a model name, model version, response id, pair id or
anything else from which the left/right order could be inferred.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, Q
from django.http import Http404

from annotate.review import queue_sql
from annotate.review.adjudication import queue_filter_parse, waiting_count
from annotate.review.choices import swap_back
from annotate.review.models import (
    Assignment,
    GoldCheck,
    Project,
    QualificationAttempt,
    RationaleCheck,
    live_assignment_sql,
)
from annotate.review.rationale import FLAGS as RATIONALE_FLAGS
from annotate.review.rendering import markdown_to_safe_html
from annotate.roles import ADJUDICATOR_ROLES, STAFF_ROLES, require_role


def project_or_404(slug: str, *, only: tuple[str, ...] = (), prepared: bool = False) -> Project:
    """The project a page or an API path names, or 404 (Http404, which the API answers as JSON).

    `only` loads just those fields, for pages that show a few. `prepared` reads it with the reviewer queue's
    prepared statement (queue_sql.project_by_slug), for the reviewer API, where it is one of a request's
    few statements.
    """
    if prepared:
        project = queue_sql.project_by_slug(slug=slug)
    else:
        projects = Project.objects.filter(slug=slug)
        project = (projects.only(*only) if only else projects).first()
    if project is None:
        raise project_not_found(slug)
    return project


def project_not_found(slug: str) -> Http404:
    """The 404 for a path naming no project."""
    return Http404(f"no project {slug!r}")


def project_for_staff_page(request, slug: str, *, to: str) -> Project:
    """The project an admin or engineer page is about: 403 for anyone else, 404 for an unknown slug.

    `to` finishes the refusal: "only admins and engineers can <to>".
    """
    require_role(request, STAFF_ROLES, f"only admins and engineers can {to}")
    return project_or_404(slug)


REMAINING_COUNT_CAP = 50  # "50+ left" tells a reviewer as much as an exact count would


def reviewer_progress(*, project: Project, reviewer: AbstractBaseUser) -> dict:
    """How many the reviewer has judged here, and how many more they could be given now.

    Counting the pairs still open stops at a cap, so a project of a million pairs costs no more per
    request than a small one; `remaining_is_at_least` then says the true number is larger.
    """
    return queue_sql.reviewer_progress(
        project_id=project.pk, reviewer_id=reviewer.pk, overlap=project.overlap, cap=REMAINING_COUNT_CAP
    )


def reviewer_judged(*, project: Project, reviewer: AbstractBaseUser) -> int:
    """reviewer_progress's "judged" alone: the reviewer's current live judgments here."""
    return queue_sql.reviewer_judged(project_id=project.pk, reviewer_id=reviewer.pk)


def _text_block(text: str) -> dict:
    return {"text": text, "html": markdown_to_safe_html(text)}


def assignment_payload(*, assignment: Assignment, project: Project, reviewer: AbstractBaseUser) -> dict:
    """The reviewer's view of an assignment: prompt, criteria, left and right answers, progress."""
    texts, progress = queue_sql.assignment_texts_and_progress(
        pair_id=assignment.pair_id, criteria_version_id=assignment.criteria_version_id, project_id=project.pk,
        reviewer_id=reviewer.pk, overlap=project.overlap, cap=REMAINING_COUNT_CAP,
    )
    left, right = (texts["a"], texts["b"]) if assignment.a_on_left else (texts["b"], texts["a"])
    return {
        "id": assignment.pk,
        "prompt": [
            {"role": m["role"], "content": m["content"], "html": markdown_to_safe_html(m["content"])}
            for m in texts["messages"]
        ],
        "criteria": texts["criteria"],
        "left": _text_block(left),
        "right": _text_block(right),
        "expires_at": assignment.expires_at.isoformat(),
        "progress": progress,
        **_qualification_item(assignment=assignment, project=project),
    }


def _qualification_item(*, assignment: Assignment, project: Project) -> dict:
    """{"qualification": where the attempt stands} when the assignment is an item of the qualification round.

    Only the round is announced: a gold check mixed into live work looks like any other assignment.
    """
    if not project.qualification_items:
        return {}
    check = (GoldCheck.objects.filter(assignment_id=assignment.pk, attempt__isnull=False)
             .select_related("attempt").first())
    if check is None:
        return {}
    attempt = check.attempt
    return {"qualification": {
        "attempt": attempt.number, "attempts": max(project.qualification_attempts, attempt.number),
        "items": attempt.items, "answered": attempt.answered, "correct": attempt.correct,
        "pass_mark": attempt.pass_mark,
    }}


def judgment_payload(*, judgment, a_on_left: bool) -> dict:
    """A judgment as its reviewer made it: left/right as they saw them, never a/b."""
    return {
        "id": judgment.pk,
        "assignment": judgment.assignment_id,
        "revision": judgment.revision,
        "choice": swap_back(judgment.winner, a_on_left=a_on_left),
        "strength": judgment.strength,
        "criteria": {key: swap_back(value, a_on_left=a_on_left) for key, value in judgment.criteria.items()},
        "rationale": judgment.rationale,
        "created_at": judgment.created_at.isoformat(),
        **({"feedback": judgment.feedback} if getattr(judgment, "feedback", None) else {}),
    }


def qualification_results(*, project) -> list[dict]:
    """Every reviewer's attempts at the project's qualification round, and their live gold checks."""
    attempts: dict[str, list[dict]] = {}
    for attempt in (QualificationAttempt.objects.filter(project=project).select_related("reviewer")
                    .order_by("reviewer__username", "number")):
        attempts.setdefault(attempt.reviewer.get_username(), []).append({
            "number": attempt.number, "status": attempt.status, "items": attempt.items,
            "answered": attempt.answered, "correct": attempt.correct, "pass_mark": attempt.pass_mark,
            "decided_by": attempt.decided_by, "started_at": attempt.started_at.isoformat(),
            "finished_at": attempt.finished_at.isoformat() if attempt.finished_at else None,
        })
    live: dict[str, dict] = {}
    for username, correct in (GoldCheck.objects.filter(project=project, attempt__isnull=True, correct__isnull=False)
                              .values_list("reviewer__username", "correct")):
        tally = live.setdefault(username, {"answered": 0, "correct": 0})
        tally["answered"] += 1
        tally["correct"] += int(correct)
    rows = []
    for username in sorted(set(attempts) | set(live), key=str.casefold):
        tried = attempts.get(username, [])
        status = tried[-1]["status"] if tried else "not_started"
        if status == "failed" and tried[-1]["number"] >= project.qualification_attempts:
            status = "held"
        rows.append({"username": username, "status": status, "attempts": tried,
                     "live_gold": live.get(username, {"answered": 0, "correct": 0})})
    return rows


def rationale_flag_summary(*, project: Project, recent: int = 25) -> dict:
    """Rationale-check flags of the project's current judgments: counts per reviewer, and the latest flagged.

    Reads only flagged rows (the partial index rationale_flagged), however large the project.
    """
    current = Exists(Assignment.objects.filter(current_judgment_id=OuterRef("judgment_id")))
    flagged = RationaleCheck.objects.filter(project=project, flagged=True).filter(current)
    per_reviewer = {
        row["reviewer__username"]: row
        for row in flagged.values("reviewer__username").annotate(
            flagged=Count("pk"), **{name: Count("pk", filter=Q(**{name: True})) for name in RATIONALE_FLAGS},
        ).order_by()
    }
    latest = []
    for check in flagged.select_related("reviewer", "judgment", "pair__prompt").order_by("-judgment_id")[:recent]:
        latest.append({
            "judgment": check.judgment_id, "reviewer": check.reviewer.get_username(),
            "prompt_id": check.pair.prompt.external_id, "pair": check.pair_id,
            "created_at": check.judgment.created_at, "flags": [name for name in RATIONALE_FLAGS if getattr(check, name)],
            "chars": check.chars, "typing_seconds": check.typing_seconds, "typed_chars": check.typed_chars,
            "pasted_chars": check.pasted_chars, "paste_events": check.paste_events,
            "rationale": check.judgment.rationale,
        })
    return {"per_reviewer": per_reviewer, "latest": latest}


# --- the home page's project rows ------------------------------------------------------------------


def _pairs_and_judged_by_project() -> dict[int, tuple[int, int]]:
    """{project id: (pairs, pairs that reached their overlap)} for every project, in one statement.

    A pair has reached its overlap when its counted votes (the current judgments of first-time, live
    assignments, as the export and adaptive overlap count them) are at least what it needs: its own
    `reviewers_needed` with adaptive overlap, else the project's overlap (the queue's rule in queue_sql._open).
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT p.project_id, COUNT(*),
                   SUM(CASE WHEN COALESCE(v.n, 0) >= COALESCE(NULLIF(p.reviewers_needed, 0), pr.overlap)
                            THEN 1 ELSE 0 END)
            FROM review_pair p
            JOIN review_project pr ON pr.id = p.project_id
            LEFT JOIN (SELECT a.pair_id, COUNT(*) AS n
                       FROM review_assignment a
                       WHERE a.is_retest = %s AND a.current_judgment_id IS NOT NULL AND """
            + live_assignment_sql("a") + """
                       GROUP BY a.pair_id) v ON v.pair_id = p.id
            GROUP BY p.project_id
            """,
            [False],
        )
        return {project_id: (int(pairs), int(judged or 0)) for project_id, pairs, judged in cursor.fetchall()}


def _held_reviewers() -> list[tuple[int, int]]:
    """(project id, reviewer id) of every reviewer held for an admin: their latest qualification attempt
    failed and it was the last one their project allows (QualificationAttempt; qualification.qualification_state)."""
    later = QualificationAttempt.objects.filter(project_id=OuterRef("project_id"), reviewer_id=OuterRef("reviewer_id"),
                                                number__gt=OuterRef("number"))
    return list(
        QualificationAttempt.objects.filter(status=QualificationAttempt.Status.FAILED,
                                            number__gte=F("project__qualification_attempts"),
                                            project__qualification_items__gt=0)
        .exclude(Exists(later))
        .values_list("project_id", "reviewer_id")
    )


def project_rows_for_home(*, user: AbstractBaseUser, roles: set[str]) -> list[dict]:
    """Every project with the figures the home page shows this user, by what their roles can act on.

    All: pairs and the share judged to their overlap. Reviewers: pairs left for them (capped, as on their
    page) or that they are held. Adjudicators and admins: pairs waiting for them to rule (the adjudication
    queue's own count, capped). Admins: reviewers held for an admin. A user without a role sees no project.
    (The home page adds each project's newest finished export for admins and engineers: annotate/home.py.)

    The counts over all projects take one statement each; only the capped per-user counts are read project
    by project.
    """
    if not roles:
        return []
    projects = list(Project.objects.order_by("name").only(
        "slug", "name", "overlap", "min_overlap", "qualification_items", "qualification_attempts"))
    reviews = "reviewer" in roles
    adjudicates = bool(roles & ADJUDICATOR_ROLES)
    counts = _pairs_and_judged_by_project()
    held = _held_reviewers() if reviews or "admin" in roles else []
    rows = []
    for project in projects:
        pairs, judged = counts.get(project.pk, (0, 0))
        held_here = [reviewer_id for project_id, reviewer_id in held if project_id == project.pk]
        row = {"project": project, "pairs": pairs, "judged": judged,
               "judged_share": judged / pairs if pairs else None}
        if reviews:
            row["you_are_held"] = user.pk in held_here
            row["left_for_you"] = None if row["you_are_held"] else reviewer_progress(project=project, reviewer=user)
        if adjudicates:
            row["waiting"] = waiting_count(project=project, adjudicator=user,
                                           queue=queue_filter_parse({}, project=project))
        if "admin" in roles:
            row["held"] = len(held_here)
        rows.append(row)
    return rows

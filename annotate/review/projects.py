"""Projects and their criteria: create or update a project, change its queue, onboarding, rationale and
standing settings, and load criteria versions.

Views and commands validate their input shape, call one function here, and shape the output.
Every function is keyword-only and raises ReviewError (with an HTTP-like status) for a user's mistake.
"""

from django.core.management.base import CommandError
from django.db import transaction

from annotate.limits import share_number, whole_number
from annotate.review.errors import ReviewError
from annotate.review.models import CriteriaVersion, Project, qualification_gold_short
from annotate.review.overlap import (
    OverlapSettingsRejected,
    overlap_settings_check,
    pairs_needed_recompute,
    reviewers_count_check,
    stop_rule_check,
)
from annotate.review.queue_priority import queue_priorities_clear
from annotate.review.signals import leaderboard_priority_turned_on

# How many of the database's projects a refusal names: enough to spot a typo, a line long at most.
PROJECTS_NAMED = 10


def project_or_error(*, slug: str, error: type[Exception] = CommandError) -> Project:
    """The project with this slug, or `error` (a command's CommandError unless told) in the one line every command
    that takes a slug answers: what is missing, where (the database's projects), and how to fix it."""
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        slugs = list(Project.objects.order_by("slug").values_list("slug", flat=True)[:PROJECTS_NAMED + 1])
        named = ", ".join(slugs[:PROJECTS_NAMED]) + (", ..." if len(slugs) > PROJECTS_NAMED else "")
        raise error(f"no project {slug!r} in this database (its projects: {named or 'none'}); give one of those "
                    "slugs, or create the project with manage.py create_project")
    return project


def criteria_version_add(*, project: Project, instructions: str, items: list[dict]) -> tuple[CriteriaVersion, bool]:
    """The project's criteria as given: a new version if they differ from the latest, else the latest.

    Locks the project row so two loads at once cannot both take the same version number.
    """
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        latest = project.criteria_versions.order_by("-version").first()
        if latest and latest.instructions == instructions and latest.items == items:
            return latest, False
        version = CriteriaVersion.objects.create(
            project=project, version=(latest.version + 1) if latest else 1, instructions=instructions, items=items
        )
        return version, True


def criteria_in_force(project: Project) -> CriteriaVersion:
    """The project's latest criteria version, under which assignments are served now (409 when none is loaded)."""
    criteria = project.criteria_versions.order_by("-version").first()
    if criteria is None:
        raise ReviewError(f"project {project.slug!r} has no criteria yet; an admin must load them first", status=409)
    return criteria


def _quality_settings_checked(
    *, rationale_flag_chars: int | None, qualification_items: int | None, qualification_pass_mark: float | None,
    qualification_attempts: int | None, gold_rate: float | None, standing_min_judgments: int | None,
) -> dict:
    """The onboarding, rationale and standing settings given, each checked; ReviewError names the first bad one."""
    def whole(name: str, value, low: int, high: int, meaning: str) -> int | None:
        return None if value is None else whole_number(name, value, low=low, high=high, error=ReviewError,
                                                       hint=meaning)

    def share(name: str, value, meaning: str) -> None:
        if value is not None:
            if isinstance(value, str):  # a JSON string is not a number, even one that reads as one
                raise ReviewError(f"{name}: {value!r} must be a number from 0 to 1 ({meaning})")
            share_number(name, value, error=ReviewError, hint=meaning)

    rationale_flag_chars = whole("rationale flag length", rationale_flag_chars, 0, 2000,
                                 "0 turns the too_short flag off")
    qualification_items = whole("qualification items", qualification_items, 0, 1000,
                                "gold items in the round; 0 means no round")
    share("qualification pass mark", qualification_pass_mark, "the share of the round's items to get right")
    qualification_attempts = whole("qualification attempts", qualification_attempts, 1, 100,
                                   "tries before an admin must decide")
    share("gold rate", gold_rate, "the share of live items that are gold checks")
    standing_min_judgments = whole("standing minimum", standing_min_judgments, 1, 100_000,
                                   "judgments before reviewers see their standing")
    given = {
        "rationale_flag_chars": rationale_flag_chars, "qualification_items": qualification_items,
        "qualification_pass_mark": qualification_pass_mark, "qualification_attempts": qualification_attempts,
        "gold_rate": gold_rate, "standing_min_judgments": standing_min_judgments,
    }
    return {key: value for key, value in given.items() if value is not None}


def _overlap_settings_given(
    *, overlap: int | None, min_overlap: int | None, max_overlap: int | None, overlap_stop_rule: str | None,
    leaderboard_priority: bool | None,
) -> dict:
    """The queue settings given, as Project fields: `overlap` alone is a fixed overlap (no minimum);
    `min_overlap`/`max_overlap` are adaptive (either may be left to its stored value). Their values are
    checked together with the stored ones once applied (_overlap_settings_apply)."""
    if overlap is not None and (min_overlap is not None or max_overlap is not None):
        raise ReviewError("give either overlap (a fixed overlap) or min/max overlap (adaptive), not both")
    if leaderboard_priority is not None and not isinstance(leaderboard_priority, bool):
        raise ReviewError(f"leaderboard priority {leaderboard_priority!r} must be true or false")
    try:  # each on its own before anything is written; together once applied
        for name, value in (("overlap", overlap), ("max overlap", max_overlap), ("min overlap", min_overlap)):
            if value is not None:
                reviewers_count_check(name=name, value=value)
        if overlap_stop_rule is not None:
            stop_rule_check(overlap_stop_rule)
    except OverlapSettingsRejected as exc:
        raise ReviewError(str(exc)) from None
    given: dict = {}
    if overlap is not None:
        given.update(overlap=overlap, min_overlap=None)
    if max_overlap is not None:
        given["overlap"] = max_overlap
    if min_overlap is not None:
        given["min_overlap"] = min_overlap
    if overlap_stop_rule is not None:
        given["overlap_stop_rule"] = overlap_stop_rule
    if leaderboard_priority is not None:
        given["leaderboard_priority"] = leaderboard_priority
    return given


def _overlap_settings_apply(*, project: Project, created: bool, given: dict) -> None:
    """Check the project's queue settings as stored now (in the caller's transaction: a refusal undoes the
    change), then decide again what every pair already started needs under them, and bring the queue
    priorities in line with the leaderboard switch."""
    try:
        overlap_settings_check(overlap=project.overlap, min_overlap=project.min_overlap,
                               stop_rule=project.overlap_stop_rule)
    except OverlapSettingsRejected as exc:
        raise ReviewError(str(exc)) from None
    if not created:
        pairs_needed_recompute(project=project)
    if given.get("leaderboard_priority") is True:
        transaction.on_commit(lambda: leaderboard_priority_turned_on.send(sender=Project, project_id=project.pk))
    elif given.get("leaderboard_priority") is False and not created:
        queue_priorities_clear(project=project)


QUALITY_SETTINGS = ("rationale_flag_chars", "qualification_items", "qualification_pass_mark",
                    "qualification_attempts", "gold_rate", "standing_min_judgments")


def project_settings_update(
    *, project: Project, overlap: int | None = None, min_overlap: int | None = None, max_overlap: int | None = None,
    overlap_stop_rule: str | None = None, leaderboard_priority: bool | None = None, **quality,
) -> Project:
    """Change a project's queue, onboarding, rationale and standing settings (as project_create_or_update
    takes them; `quality` holds any of QUALITY_SETTINGS); all or nothing."""
    quality_given = _quality_settings_checked(**{name: quality.get(name) for name in QUALITY_SETTINGS})
    overlap_given = _overlap_settings_given(overlap=overlap, min_overlap=min_overlap, max_overlap=max_overlap,
                                            overlap_stop_rule=overlap_stop_rule,
                                            leaderboard_priority=leaderboard_priority)
    if not overlap_given and not quality_given:
        raise ReviewError("give at least one of overlap, min_overlap, max_overlap, overlap_stop_rule, "
                          f"leaderboard_priority, {', '.join(QUALITY_SETTINGS)}")
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        for key, value in {**quality_given, **overlap_given}.items():
            setattr(project, key, value)
        project.save(update_fields=[*quality_given, *overlap_given])
        _qualification_fits_gold(project=project, given=quality_given)
        if overlap_given:
            _overlap_settings_apply(project=project, created=False, given=overlap_given)
    return project


def _qualification_fits_gold(*, project: Project, given: dict) -> None:
    """Refuse (in the caller's transaction, so nothing is kept) a qualification round that the project's gold
    pairs cannot fill; checked when the round's items or attempts change. A project's gold that runs short
    later (an import) is shown on the quality dashboard instead."""
    changed = {"qualification_items", "qualification_attempts"} & set(given)
    if changed and (short := qualification_gold_short(project)) is not None:
        raise ReviewError(short)


def project_queue_settings_applied(*, project: Project, changed: list[str]) -> None:
    """After the admin's form saved these queue settings (already checked by Project.clean), in its transaction."""
    _overlap_settings_apply(project=project, created=False, given={name: getattr(project, name) for name in changed})


def project_create_or_update(
    *,
    slug: str,
    name: str | None,
    instructions: str,
    criteria_items: list[dict],
    overlap: int | None = None,
    min_overlap: int | None = None,
    max_overlap: int | None = None,
    overlap_stop_rule: str | None = None,
    leaderboard_priority: bool | None = None,
    retest_rate: float | None = None,
    max_pairs_per_prompt: int | None = None,
    min_rationale_chars: int | None = None,
    rationale_flag_chars: int | None = None,
    qualification_items: int | None = None,
    qualification_pass_mark: float | None = None,
    qualification_attempts: int | None = None,
    gold_rate: float | None = None,
    standing_min_judgments: int | None = None,
) -> tuple[Project, CriteriaVersion, bool]:
    """Create a project (or update the settings given) and load its criteria; returns (project, criteria, created)."""
    quality_settings = _quality_settings_checked(
        rationale_flag_chars=rationale_flag_chars, qualification_items=qualification_items,
        qualification_pass_mark=qualification_pass_mark, qualification_attempts=qualification_attempts,
        gold_rate=gold_rate, standing_min_judgments=standing_min_judgments,
    )
    overlap_settings = _overlap_settings_given(
        overlap=overlap, min_overlap=min_overlap, max_overlap=max_overlap, overlap_stop_rule=overlap_stop_rule,
        leaderboard_priority=leaderboard_priority,
    )
    if retest_rate is not None:
        share_number("retest rate", retest_rate, error=ReviewError, hint="the share of judged pairs shown again")
    settings = {
        "overlap": overlap, "retest_rate": retest_rate, "max_pairs_per_prompt": max_pairs_per_prompt,
        "min_rationale_chars": min_rationale_chars, **quality_settings,
    }
    settings = {key: value for key, value in settings.items() if value is not None}
    settings.update(overlap_settings)  # min_overlap None is a setting: a fixed overlap
    with transaction.atomic():
        project = Project.objects.filter(slug=slug).first()
        created = project is None
        if created:
            project = Project.objects.create(slug=slug, name=name or slug, **settings)
        elif settings or name:
            for key, value in settings.items():
                setattr(project, key, value)
            if name:
                project.name = name
            project.save()
        _qualification_fits_gold(project=project, given=quality_settings)
        if overlap_settings:
            _overlap_settings_apply(project=project, created=created, given=overlap_settings)
        criteria, _ = criteria_version_add(project=project, instructions=instructions, items=criteria_items)
    return project, criteria, created

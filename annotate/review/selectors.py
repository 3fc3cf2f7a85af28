"""Reads of the review workflow, shaped for the reviewer API and pages.

What a reviewer is shown never includes a model name, model version, response id, pair id or
anything else from which the left/right order could be inferred.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache

from annotate.review import queue_sql
from annotate.review.choices import swap_back
from annotate.review.models import Assignment, Project
from annotate.review.rendering import markdown_to_safe_html

ROLES_CACHE_SECONDS = 30  # a role change reaches every worker within this; it saves a query per request


def roles_cache_key(user_id: int) -> str:
    return f"pairwise:roles:{user_id}"


def user_roles(user: AbstractBaseUser) -> set[str]:
    """The user's Pairwise roles; a superuser counts as admin."""
    if not user.is_authenticated:
        return set()
    roles = cache.get(roles_cache_key(user.pk))
    if roles is None:
        roles = set(user.groups.values_list("name", flat=True))
        if user.is_superuser:
            roles.add("admin")
        cache.set(roles_cache_key(user.pk), roles, ROLES_CACHE_SECONDS)
    return roles


def project_for_reviewer(*, slug: str) -> Project | None:
    return queue_sql.project_by_slug(slug=slug)


REMAINING_COUNT_CAP = 50  # "50+ left" tells a reviewer as much as an exact count would


def reviewer_progress(*, project: Project, reviewer: AbstractBaseUser) -> dict:
    """How many the reviewer has judged here, and how many more they could be given now.

    Counting the pairs still open stops at a cap, so a project of a million pairs costs no more per
    request than a small one; `remaining_is_at_least` then says the true number is larger.
    """
    return queue_sql.reviewer_progress(
        project_id=project.pk, reviewer_id=reviewer.pk, overlap=project.overlap, cap=REMAINING_COUNT_CAP
    )


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
    }


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
    }

"""The bytes of a snapshot: a fixed dataset gives files with committed sha256s, whatever order its rows were
stored in, and the batched vote checks decide every pair as the one-pair rule does.

The committed hashes were written by the export as it was before its reads and checks were batched
(bench/results/export.json, docs/exports.md "Speed"), and moved once on purpose when rows gained meta.strength
(the fixture's judgments got strengths of their own then; with the old fixture, the new rows less their strength
were the old bytes). A change that moves them changes what trainers read. If a change is meant to alter the rows,
say so in docs/exports.md and update the hashes here.
"""

import hashlib
import itertools
import random

import numpy as np
import orjson
import pytest
from django.db import connection, transaction

from annotate.exports import selectors
from annotate.exports.filters import filters_parse
from annotate.exports.pipeline import (
    VOTE_EXCLUSIONS,
    export_preview,
    pair_exclusion,
    snapshot_write,
    vote_exclusions,
)
from annotate.exports.selectors import PairVotes
from annotate.review.choices import WINNERS
from annotate.review.consensus import strict_majority
from training.snapshot import prompt_key

PROMPTS = 48
FIRST_ID = 9_100_000  # explicit ids, far above any the test database's sequences hand out
REVIEWERS = 4
# Prompts 40-43 repeat the text of prompts 0-3 under other ids: one prompt each, as the export sees them.
SAME_TEXT_AS = {40 + k: k for k in range(4)}
CREATED = "2026-01-02T03:04:05Z"
FILTERED = {"row_format": "standard", "min_agreement": 0.6, "max_pairs_per_prompt": 1, "exclude_ties": True,
            "tags": ["math", "code"], "gold": "exclude", "seed": 5, "test_ratio": 0.3}

# sha256 of each file and the snapshot id (which hashes the whole manifest but its time), per filter set.
EXPECTED = {
    "default": {
        "train.jsonl": "bb49671764813ea2887304e46d1e7c03d3df7eb154038c3b9c99576d485383cd",
        "test.jsonl": "60a12293889a53380bb5f7179471e2e65ce499d296e2b88b17ba14184e9d7f51",
        "snapshot_id": "snap-c05b3ce52d531476",
    },
    "filtered": {
        "train.jsonl": "a83741d90a53ee62f976f9deb3cb95d095434a115fee484ccb99962ab005e91b",
        "test.jsonl": "66ce58b55a750f02e06b061f2d81e9415fe310186c9b220dc7ecdf18d8e86296",
        "snapshot_id": "snap-6821037e11210b39",
    },
}


def _text(i: int) -> str:
    """Prompt texts with what JSON must escape or keep: quotes, backslashes, newlines, tabs, non-ASCII."""
    return f'Question {i}: what is "{i}" \\ {i * 3}?\n\tAnswer in km/h ✓ — ünïcode {"🚗" * (i % 3)}'


def _votes(pair: int, count: int) -> list[str]:
    """A pair's votes: mostly a majority, some splits, ties and both-bad, from its number alone."""
    pattern = ["a", "a", "b", "a", "tie", "b", "b", "both_bad", "a", "b", "tie", "a", "b"]
    return [pattern[(pair * 5 + k * 3) % len(pattern)] for k in range(count)]


def _strength(judgment_id: int, winner: str) -> int | None:
    """1-3 for an a or b vote, some left without one (as judgments stored before strength was asked for); none for
    a tie or both-bad, as the review form stores them. Majorities of mixed strengths give means like 1.667."""
    if winner not in ("a", "b") or judgment_id % 7 == 0:
        return None
    return 1 + judgment_id % 3


def fill(project, *, shuffle: bool) -> None:
    """The dataset, straight into the tables with explicit ids (pair ids and prompt ids are in every row);
    `shuffle` stores every table's rows in another order."""
    criteria = project.criteria_versions.order_by("-version").first()
    order = random.Random(11).sample if shuffle else (lambda rows, n: rows)
    users, prompts, responses, pairs, assignments, judgments = [], [], [], [], [], []
    for r in range(REVIEWERS):
        users.append((FIRST_ID + r, f"bytes-reviewer-{r}"))
    for i in range(PROMPTS):
        prompt_id = FIRST_ID + i
        messages = [{"role": "user", "content": _text(SAME_TEXT_AS.get(i, i))}]
        tags = [["math"], ["code"], [], ["math", "code"]][i % 4]
        answers = [FIRST_ID + 3 * i + k for k in range(3)]
        for k, response_id in enumerate(answers):
            responses.append((response_id, prompt_id, f"Answer {k} to {i}: {i * (k + 2)} km/h.\n\"Steps\": ✓ {k}"))
        gold = answers[0] if i % 10 == 5 else None
        prompts.append((prompt_id, project.pk, f"q-{i:03d}", orjson.dumps(messages).decode(),
                        orjson.dumps(tags).decode(), prompt_key(messages), gold))
        for j, (a, b) in enumerate(itertools.islice(itertools.combinations(answers, 2), 1 + i % 3)):
            pair_id = FIRST_ID + 3 * i + j
            pairs.append((pair_id, project.pk, prompt_id, a, b))
            for k, winner in enumerate(_votes(pair_id, 1 + (i + j) % REVIEWERS)):
                row_id = FIRST_ID + 4 * (3 * i + j) + k
                assignments.append((row_id, project.pk, pair_id, FIRST_ID + k, (i + k) % 2 == 0, criteria.pk, row_id))
                judgments.append((row_id, row_id, pair_id, FIRST_ID + k, winner, _strength(row_id, winner), criteria.pk,
                                  f"{row_id:032x}"))
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO auth_user (id, password, is_superuser, username, first_name, last_name, email, is_staff, "
            "is_active, date_joined) VALUES (%s, '!', false, %s, '', '', '', false, true, now())",
            order(users, len(users)))
        cursor.executemany(
            "INSERT INTO review_prompt (id, project_id, external_id, messages, tags, content_key, gold_response_id, "
            "created_at) VALUES (%s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, now())", order(prompts, len(prompts)))
        cursor.executemany(
            "INSERT INTO review_response (id, prompt_id, text, text_sha256, model, model_version, created_at) "
            "VALUES (%s, %s, %s, md5(%s), 'sft', 'v1', now())",
            [(rid, pid, text, text) for rid, pid, text in order(responses, len(responses))])
        cursor.executemany(
            "INSERT INTO review_pair (id, project_id, prompt_id, response_a_id, response_b_id, assigned_count, "
            "created_at) VALUES (%s, %s, %s, %s, %s, 1, now())", order(pairs, len(pairs)))
        cursor.executemany(
            "INSERT INTO review_assignment (id, project_id, pair_id, reviewer_id, a_on_left, is_retest, status, "
            "criteria_version_id, served_at, expires_at, completed_at, current_judgment_id, created_at) "
            "VALUES (%s, %s, %s, %s, %s, false, 'completed', %s, now(), now(), now(), %s, now())",
            order(assignments, len(assignments)))
        cursor.executemany(
            "INSERT INTO review_judgment (id, assignment_id, pair_id, reviewer_id, revision, retracted, winner, "
            "strength, criteria, criteria_version_id, rationale, seconds_spent, client_key, created_at) "
            "VALUES (%s, %s, %s, %s, 1, false, %s, %s, '{}'::jsonb, %s, 'Shows the steps.', 20.0, %s::uuid, now())",
            order(judgments, len(judgments)))


def written(project, tmp_path, name: str, filters: dict) -> dict:
    manifest = snapshot_write(project=project, filters=filters_parse(filters), out_dir=tmp_path / name,
                              created_at=CREATED)
    return {**{file: hashlib.sha256((tmp_path / name / file).read_bytes()).hexdigest() for file in manifest["files"]},
            "snapshot_id": manifest["snapshot_id"]}


@pytest.mark.django_db
@pytest.mark.parametrize("shuffle", [False, True], ids=["stored-in-order", "stored-shuffled"])
def test_a_fixed_dataset_gives_the_committed_bytes_in_any_stored_order(make_project, tmp_path, shuffle):
    project = make_project(slug="bytes", overlap=REVIEWERS, retest_rate=0)
    fill(project, shuffle=shuffle)
    got = {"default": written(project, tmp_path, "default", {}),
           "filtered": written(project, tmp_path, "filtered", FILTERED)}
    assert got == EXPECTED


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the COPY read is PostgreSQL's")
@pytest.mark.parametrize("range_pairs", [selectors.RANGE_PAIRS, 7], ids=["one-range", "ranges-of-7-pairs"])
def test_outside_a_transaction_the_rows_read_by_copy_give_the_same_bytes_and_counts(make_project, tmp_path,
                                                                                  monkeypatch, range_pairs):
    """An export job runs outside any transaction: its votes come through COPY on a connection of its own
    (annotate/exports/selectors.py), not the cursor the test above reads inside its transaction; with ranges of
    7 pairs the dataset's prompt keys are read in a dozen ranges, one after the other, and give the same bytes."""
    monkeypatch.setattr(selectors, "RANGE_PAIRS", range_pairs)
    ranges_read = []
    monkeypatch.setattr(selectors, "key_range_bounds",
                        lambda pairs, per_range, cut=selectors.key_range_bounds:
                        ranges_read.append(len(cut(pairs, per_range)) + 1) or cut(pairs, per_range))
    project = make_project(slug="bytes", overlap=REVIEWERS, retest_rate=0)
    with transaction.atomic():  # its rows point at each other before all are in
        fill(project, shuffle=True)
    assert not connection.in_atomic_block
    got = {"default": written(project, tmp_path, "default", {}),
           "filtered": written(project, tmp_path, "filtered", FILTERED)}
    assert got == EXPECTED
    assert ranges_read == ([14, 14] if range_pairs == 7 else [1, 1])  # each export's ranges: 96 pairs
    outside = export_preview(project=project, filters=filters_parse(FILTERED))  # no texts: NULL columns
    with transaction.atomic():
        inside = export_preview(project=project, filters=filters_parse(FILTERED))
    assert outside == inside and outside["train"] + outside["test"] > 0


def test_batched_vote_checks_decide_every_pair_as_the_one_pair_rule():
    rng = np.random.default_rng(3)
    votes = rng.integers(0, 4, size=(3000, len(WINNERS)))
    votes[votes.sum(axis=1) == 0, 0] = 1  # every pair the export sees has a vote
    winners, shares = strict_majority(votes)
    for raw in ({}, {"min_judgments": 4}, {"exclude_ties": True}, {"min_agreement": 0.5},
                {"min_judgments": 3, "exclude_ties": True, "min_agreement": 0.75}):
        filters = filters_parse(raw)
        batched = vote_exclusions(votes, winners, shares, filters)
        for pair_votes, code, share, reason in zip(votes.tolist(), winners.tolist(), shares.tolist(),
                                                   batched.tolist(), strict=True):
            pair = PairVotes(pair_id=1, prompt_pk=1, prompt_id="p", prompt_key="k", messages=None, tags=[],
                             gold=False, votes=tuple(pair_votes), criteria_version=1, text_a=None, text_b=None)
            expected = pair_exclusion(pair, filters, winner=None if code < 0 else WINNERS[code], share=share)
            assert (VOTE_EXCLUSIONS[reason] if reason >= 0 else None) == expected, (raw, pair_votes)


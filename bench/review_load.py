"""Reviewer load: simulated reviewers over HTTP against gunicorn + PostgreSQL.

Each simulated reviewer loops `next` → `judgment` with its own API token. The run is repeated at
several concurrency levels, then once more for one reviewer far ahead of the others: in a project of
its own they already have --far-ahead judgments (a tenth of them retests), the others a few each, all
written with bulk SQL before the run. Last, --adaptive reviewers on a project of its own with adaptive
overlap (2 to 5, lead2): each judgment also decides what its pair needs, under the pair's row lock. Afterwards the database is checked for lost judgments (a 201
whose judgment is not stored), duplicates and over-assigned pairs.

The adjudication levels (--adjudication JUDGMENTS, 0 to leave them out) fill a project of their own with that
many judgments in bulk SQL (bench/export.py's fill: overlap 3, about 30% of pairs split), rule on the
oldest --ruled share of its split pairs as earlier adjudicators would have, then, level after level, as
many adjudicators at once as each number of --adjudicators says (default 1, then 8) loop
`adjudications/next` → `ruling`. Each level reports `next` calls/s and latency; afterwards it
checks the database: no pair ruled or held twice, no ruling lost, no pair handed out that was not waiting,
and none passed over (a split pair left unruled and unheld before the last pair handed out).

    .venv/bin/python bench/review_load.py [--levels 1 8 32] [--far-ahead 10000] [--adaptive 32] [--seconds 15]
                                          [--workers N] [--threads N] [--adjudication 1000000] [--adjudicators 1 8] [--ruled 0.5]

`--levels` with no number leaves out the reviewer levels (with --far-ahead 0 --adaptive 0, the run is the
adjudication levels alone).

Needs PostgreSQL on 127.0.0.1:5432 (trust auth) and Redis for the broker setting (CELERY_BROKER_URL, else
Redis database 0). It creates and drops its own database (--database, `pairwise_bench`). Prints a table and
writes bench/results/review_load.json (--out).
"""

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and the apps

from bench.common import (
    ROOT,
    check_database,
    database_url,
    deployment_gunicorn,
    free_port,
    machine,
    percentile,
    recreate_database,
    results_path,
    setup_django_and_migrate,
    start_gunicorn,
    utc_timestamp,
    write_results,
)
from bench.export import fill

RATIONALE = "The chosen answer divides distance by time correctly."


def make_project(*, slug: str, prompts: int, **overlap):
    """A project (overlap 3 unless given, retests 10%) with `prompts` imported prompts of one pair each."""
    from annotate.review.demo_data import DEMO_CRITERIA
    from annotate.review.import_sql import items_import
    from annotate.review.importing import items_parse
    from annotate.review.projects import project_create_or_update

    project, _, _ = project_create_or_update(
        slug=slug, name=slug.title(), instructions=DEMO_CRITERIA["instructions"],
        criteria_items=DEMO_CRITERIA["criteria"], retest_rate=0.1, **(overlap or {"overlap": 3}),
    )
    rows = [
        {"prompt_id": f"q{i}", "prompt": f"A car travels {i} km in 2 hours. What is its average speed?",
         "responses": [{"text": f"{i / 2:g} km/h: distance over time.", "model": "sft", "model_version": "v3"},
                       {"text": f"{i * 2} km/h.", "model": "sft", "model_version": "v4"}]}
        for i in range(1, prompts + 1)
    ]
    items_import(project=project, items=items_parse(json.dumps(row) for row in rows))
    return project


def user_token(username: str, *, role: str = "reviewer") -> str:
    """A new user with this role; returns their API token."""
    from rest_framework.authtoken.models import Token

    from annotate.review.users import user_add

    user, _, _ = user_add(username=username, role=role, password=secrets.token_urlsafe(16))
    return Token.objects.get_or_create(user=user)[0].key


def prepare(*, prompts: int, reviewers: int, adaptive: bool) -> list[str]:
    """Migrate, import `prompts` prompts (one pair each), make reviewers; returns their tokens."""
    setup_django_and_migrate()
    make_project(slug="load", prompts=prompts)
    if adaptive:
        make_project(slug="load-adaptive", prompts=prompts, min_overlap=2, max_overlap=5)
    return [user_token(f"load{i:03d}") for i in range(reviewers)]


def give_history(cursor, *, project, reviewer_id: int, pair_ids: list[int], retest_every: int) -> int:
    """The reviewer has judged these pairs in this order (and a retest of every `retest_every`-th), 20 s
    apart and ending a minute ago, as the queue would have stored it; returns the judgments written."""
    from datetime import timedelta

    from django.utils import timezone

    criteria_id = project.criteria_versions.order_by("-version").first().pk
    rows = []  # (pair, a_on_left, is_retest)
    for index, pair_id in enumerate(pair_ids):
        rows.append((pair_id, index % 2 == 0, False))
        if retest_every and index % retest_every == retest_every - 1:
            rows.append((pair_id, index % 2 != 0, True))
    start = timezone.now() - timedelta(minutes=1, seconds=20 * len(rows))
    times = [start + timedelta(seconds=20 * i) for i in range(len(rows))]
    who = {"project": project.pk, "reviewer": reviewer_id}
    cursor.execute(
        "INSERT INTO review_assignment (project_id, pair_id, reviewer_id, a_on_left, is_retest, status, "
        "criteria_version_id, served_at, expires_at, completed_at, created_at) "
        "SELECT %(project)s, r.pair, %(reviewer)s, r.a_on_left, r.is_retest, 'completed', %(criteria)s, "
        "r.at - interval '20 seconds', r.at + interval '30 minutes', r.at, r.at - interval '20 seconds' "
        "FROM unnest(%(pairs)s::bigint[], %(left)s::bool[], %(retest)s::bool[], %(times)s::timestamptz[]) "
        "AS r(pair, a_on_left, is_retest, at)",
        {**who, "criteria": criteria_id, "pairs": [r[0] for r in rows], "left": [r[1] for r in rows],
         "retest": [r[2] for r in rows], "times": times},
    )
    cursor.execute(
        "UPDATE review_assignment r SET retest_of_id = o.id FROM review_assignment o "
        "WHERE r.project_id = %(project)s AND r.reviewer_id = %(reviewer)s AND r.is_retest "
        "AND o.reviewer_id = %(reviewer)s AND o.pair_id = r.pair_id AND NOT o.is_retest",
        who,
    )
    cursor.execute(
        "INSERT INTO review_judgment (assignment_id, pair_id, reviewer_id, revision, retracted, winner, strength, "
        "criteria, criteria_version_id, rationale, seconds_spent, client_key, created_at) "
        "SELECT a.id, a.pair_id, a.reviewer_id, 1, false, 'tie', NULL, "
        """'{"correct": "tie", "complete": "tie"}'::jsonb, a.criteria_version_id, %(rationale)s, 20, """
        "gen_random_uuid(), a.completed_at FROM review_assignment a "
        "WHERE a.project_id = %(project)s AND a.reviewer_id = %(reviewer)s",
        {**who, "rationale": RATIONALE},
    )
    cursor.execute(
        "UPDATE review_assignment a SET current_judgment_id = j.id FROM review_judgment j "
        "WHERE j.assignment_id = a.id AND a.project_id = %(project)s AND a.reviewer_id = %(reviewer)s",
        who,
    )
    cursor.execute("UPDATE review_pair SET assigned_count = assigned_count + 1, votes_tie = votes_tie + 1 "
                   "WHERE id = ANY(%s)", [pair_ids])
    retests = sum(r[2] for r in rows)
    cursor.execute(
        "INSERT INTO review_reviewertally (project_id, reviewer_id, judged, judged_once, retests) "
        "VALUES (%s, %s, %s, %s, %s)",
        [project.pk, reviewer_id, len(rows), len(pair_ids), retests],
    )
    return len(rows)


def prepare_far_ahead(*, judgments: int, prompts: int, others: int, others_judged: int) -> str:
    """A project where one reviewer already has `judgments` judgments and `others` reviewers have
    `others_judged` each; returns the far-ahead reviewer's token.

    The far-ahead reviewer took the newest pairs first, as the queue gives them when nobody else has
    started; the others, being behind, finished the far-ahead reviewer's newest pairs, two to a pair.
    """
    from django.contrib.auth import get_user_model
    from django.db import connection

    from annotate.review.models import Pair

    project = make_project(slug="load-far", prompts=prompts)
    token = user_token("far-ahead")
    user_model = get_user_model()
    far_ahead = user_model.objects.get(username="far-ahead")
    behind = user_model.objects.bulk_create([user_model(username=f"behind{i:03d}") for i in range(others)])
    first_time = round(judgments * 10 / 11)  # with a retest of every tenth: `judgments` in all
    newest_first = list(Pair.objects.filter(project=project).order_by("-id").values_list("id", flat=True))
    if first_time + 1 > len(newest_first):
        raise SystemExit(f"--far-ahead-prompts {prompts} is too few for {judgments} judgments; give at least "
                         f"{first_time * 2}")
    with connection.cursor() as cursor:
        give_history(cursor, project=project, reviewer_id=far_ahead.pk, pair_ids=newest_first[:first_time],
                     retest_every=10)
        finished = newest_first[:others * others_judged // 2]
        for i, user in enumerate(behind):
            mine = [pair for k, pair in enumerate(p for p in finished for _ in range(2)) if k % others == i]
            give_history(cursor, project=project, reviewer_id=user.pk, pair_ids=mine, retest_every=0)
        cursor.execute("ANALYZE")  # as autovacuum would after a large import
    return token


async def reviewer_loop(session, base: str, slug: str, token: str, stop_at: float, record: dict) -> None:
    import aiohttp

    headers = {"Authorization": f"Token {token}"}
    rng = random.Random(token)
    while time.monotonic() < stop_at:
        started = time.perf_counter()
        async with session.get(f"{base}/api/v1/projects/{slug}/assignments/next", headers=headers) as response:
            body = await response.read()
            record["next_ms"].append((time.perf_counter() - started) * 1000)
            if response.status == 204:
                record["exhausted"] += 1
                return
            if response.status != 200:
                record["errors"].append(f"next {response.status}: {body[:200]!r}")
                continue
            assignment = json.loads(body)
        choice = rng.choice(["left", "right", "left", "right", "tie"])
        judgment = {
            "choice": choice, "strength": rng.randint(1, 3),
            "criteria": {item["key"]: rng.choice(["left", "right", "tie"]) for item in assignment["criteria"]["items"]},
            "rationale": RATIONALE,
            "client_key": str(uuid.uuid4()),
        }
        started = time.perf_counter()
        try:
            async with session.post(f"{base}/api/v1/assignments/{assignment['id']}/judgment", json=judgment,
                                    headers=headers) as response:
                body = await response.read()
        except aiohttp.ClientError as exc:
            record["errors"].append(f"judgment: {exc}")
            continue
        record["submit_ms"].append((time.perf_counter() - started) * 1000)
        if response.status == 201:
            record["created"].append(json.loads(body)["id"])
        else:
            record["errors"].append(f"judgment {response.status}: {body[:200]!r}")


async def run_level(base: str, tokens: list[str], seconds: float, *, slug: str = "load", label: str = "",
                    history: int = 0) -> dict:
    import aiohttp

    record = {"next_ms": [], "submit_ms": [], "created": [], "errors": [], "exhausted": 0}
    connector = aiohttp.TCPConnector(limit=len(tokens) + 4)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        stop_at = time.monotonic() + seconds
        await asyncio.gather(*(reviewer_loop(session, base, slug, token, stop_at, record) for token in tokens))
        elapsed = time.perf_counter() - started
    both = record["next_ms"] + record["submit_ms"]
    return {
        "level": label or f"{len(tokens)} reviewer{'s' if len(tokens) > 1 else ''}",
        "concurrency": len(tokens),
        "judged_before": history,
        "seconds": round(elapsed, 2),
        "judgments": len(record["created"]),
        "judgments_per_s": round(len(record["created"]) / elapsed, 1),
        "p50_ms": percentile(both, 50),
        "p99_ms": percentile(both, 99),
        "next_p50_ms": percentile(record["next_ms"], 50),
        "next_p99_ms": percentile(record["next_ms"], 99),
        "submit_p99_ms": percentile(record["submit_ms"], 99),
        # A tail past the p99 (a client left waiting to connect) shows as a mean above the p50 and in the max.
        "mean_ms": round(statistics.fmean(both), 1) if both else None,
        "next_max_ms": round(max(record["next_ms"]), 1) if record["next_ms"] else None,
        "errors": len(record["errors"]),
        "first_errors": record["errors"][:3],
        "_created": record["created"],
    }


ADJUDICATION_SLUG = "bench"  # the project bench.export's fill makes
ADJUDICATION_OVERLAP = 3
EARLIER_ADJUDICATOR = "ruled-before"  # rules on the oldest split pairs before the run
ADJUDICATION_TIMEOUT_S = 60  # a request unanswered this long counts as an error, so that a slow queue ends the level
RULING = "The left answer divides the distance by the time; the right one does not."


def split_pairs_sql(*, project_id: int, min_votes: int) -> tuple[str, dict]:
    """The project's split pairs, oldest first, computed here from the judgments themselves (not through the
    app's queue): at least `min_votes` counted votes (current judgments of live first-time assignments) and
    no choice with strictly more votes than every other."""
    from annotate.review.choices import WINNERS
    from annotate.review.models import live_assignment_sql

    counts = ", ".join(f"count(*) FILTER (WHERE j.winner = '{winner}') AS votes_{winner}" for winner in WINNERS)
    top = f"greatest({', '.join(f'votes_{winner}' for winner in WINNERS)})"
    at_top = " + ".join(f"(votes_{winner} = {top})::int" for winner in WINNERS)
    sql = (
        f"SELECT pair_id FROM (SELECT a.pair_id, count(*) AS votes, {counts} "
        "FROM review_assignment a JOIN review_judgment j ON j.id = a.current_judgment_id "
        f"WHERE a.project_id = %(project)s AND NOT a.is_retest AND {live_assignment_sql('a')} "
        f"GROUP BY a.pair_id) v WHERE votes >= %(min_votes)s AND {at_top} > 1 ORDER BY pair_id"
    )
    return sql, {"project": project_id, "min_votes": min_votes}


def prepare_adjudication(*, judgments: int, ruled: float, adjudicators: int) -> tuple[list[str], dict]:
    """The adjudication project, filled in bulk SQL with `judgments` judgments, the oldest `ruled` share of
    its split pairs ruled on by an earlier adjudicator; returns the adjudicators' tokens and what it holds."""
    fill(pairs=-(-judgments // ADJUDICATION_OVERLAP), overlap=ADJUDICATION_OVERLAP)  # sets Django up
    from django.contrib.auth import get_user_model
    from django.db import connection

    from annotate.review.models import Project
    from annotate.review.queue_sql import pair_votes_recount

    project = Project.objects.get(slug=ADJUDICATION_SLUG)
    user_token(EARLIER_ADJUDICATOR, role="adjudicator")
    earlier = get_user_model().objects.get(username=EARLIER_ADJUDICATOR)
    with connection.cursor() as cursor:
        sql, params = split_pairs_sql(project_id=project.pk, min_votes=ADJUDICATION_OVERLAP)
        cursor.execute(f"SELECT count(*) FROM ({sql}) s", params)
        split = cursor.fetchone()[0]
        already = round(split * ruled)
        cursor.execute(
            "INSERT INTO review_adjudicationassignment (project_id, pair_id, adjudicator_id, a_on_left, status, "
            "served_at, expires_at) "
            f"SELECT %(project)s, s.pair_id, %(adjudicator)s, true, 'completed', now() - interval '2 hours', "
            f"now() - interval '90 minutes' FROM ({sql} LIMIT %(already)s) s",
            {**params, "adjudicator": earlier.pk, "already": already},
        )
        cursor.execute(
            "INSERT INTO review_adjudication (project_id, pair_id, assignment_id, adjudicator_id, revision, winner, "
            "strength, criteria, rationale, client_key, created_at) "
            "SELECT project_id, pair_id, id, adjudicator_id, 1, 'a', 2, '{}'::jsonb, %(rationale)s, "
            "gen_random_uuid(), served_at + interval '5 minutes' FROM review_adjudicationassignment "
            "WHERE project_id = %(project)s",
            {"project": project.pk, "rationale": RULING},
        )
        cursor.execute("SELECT count(*) FROM review_pair WHERE project_id = %s", [project.pk])
        pairs = cursor.fetchone()[0]
    pair_votes_recount(project_id=project.pk)  # the rulings just written
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    tokens = [user_token(f"adjudicator{i:03d}", role="adjudicator") for i in range(adjudicators)]
    return tokens, {"judgments": pairs * ADJUDICATION_OVERLAP, "pairs": pairs, "split_pairs": split,
                    "ruled_before": already}


async def adjudicator_loop(session, base: str, token: str, stop_at: float, record: dict) -> None:
    import aiohttp

    headers = {"Authorization": f"Token {token}"}
    rng = random.Random(token)
    while time.monotonic() < stop_at:
        started = time.perf_counter()
        try:
            async with session.get(f"{base}/api/v1/projects/{ADJUDICATION_SLUG}/adjudications/next",
                                   headers=headers) as response:
                body = await response.read()
        except TimeoutError:
            record["errors"].append(f"next: no answer within {ADJUDICATION_TIMEOUT_S} s")
            record["next_timeouts"] += 1
            continue
        except aiohttp.ClientError as exc:
            record["errors"].append(f"next: {exc}")
            continue
        record["next_ms"].append((time.perf_counter() - started) * 1000)
        if response.status == 204:
            record["exhausted"] += 1
            return
        if response.status != 200:
            record["errors"].append(f"next {response.status}: {body[:200]!r}")
            continue
        held = json.loads(body)
        record["served"].append((held["pair"], held["id"]))
        choice = rng.choice(["left", "right", "tie"])
        ruling = {"choice": choice, "strength": 2 if choice != "tie" else None, "rationale": RULING,
                  "client_key": str(uuid.uuid4())}
        started = time.perf_counter()
        try:
            async with session.post(f"{base}/api/v1/adjudications/{held['id']}/ruling", json=ruling,
                                    headers=headers) as response:
                body = await response.read()
        except TimeoutError:
            record["errors"].append(f"ruling: no answer within {ADJUDICATION_TIMEOUT_S} s")
            continue
        except aiohttp.ClientError as exc:
            record["errors"].append(f"ruling: {exc}")
            continue
        record["ruling_ms"].append((time.perf_counter() - started) * 1000)
        if response.status == 201:
            record["rulings"].append(json.loads(body)["id"])
        else:
            record["errors"].append(f"ruling {response.status}: {body[:200]!r}")


async def run_adjudication_level(base: str, tokens: list[str], seconds: float) -> dict:
    import aiohttp

    record = {"next_ms": [], "ruling_ms": [], "served": [], "rulings": [], "errors": [], "exhausted": 0,
              "next_timeouts": 0}
    connector = aiohttp.TCPConnector(limit=len(tokens) + 4)
    timeout = aiohttp.ClientTimeout(total=ADJUDICATION_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.perf_counter()
        stop_at = time.monotonic() + seconds
        await asyncio.gather(*(adjudicator_loop(session, base, token, stop_at, record) for token in tokens))
        elapsed = time.perf_counter() - started
    return {
        "level": f"{len(tokens)} adjudicator{'s' if len(tokens) > 1 else ''}",
        "concurrency": len(tokens),
        "seconds": round(elapsed, 2),
        "next_calls": len(record["next_ms"]),
        "next_calls_per_s": round(len(record["next_ms"]) / elapsed, 1),
        "rulings": len(record["rulings"]),
        "rulings_per_s": round(len(record["rulings"]) / elapsed, 1),
        "next_p50_ms": percentile(record["next_ms"], 50),
        "next_p95_ms": percentile(record["next_ms"], 95),
        "next_p99_ms": percentile(record["next_ms"], 99),
        "ruling_p99_ms": percentile(record["ruling_ms"], 99),
        "exhausted": record["exhausted"],
        "next_timeouts": record["next_timeouts"],
        "errors": len(record["errors"]),
        "first_errors": record["errors"][:3],
        "_served": record["served"],
        "_rulings": record["rulings"],
    }


def check_adjudication(*, served: list[tuple[int, int]], ruling_ids: list[int], ruled_before: int) -> dict:
    """After the adjudicators: rulings answered 201 but not stored, pairs ruled or held twice, pairs handed out
    that were not waiting (not split, or ruled before the run), and split pairs passed over: neither ruled nor
    held, yet older than the newest pair handed out."""
    from django.db import connection

    from annotate.review.models import Project

    project = Project.objects.get(slug=ADJUDICATION_SLUG)
    split_sql, params = split_pairs_sql(project_id=project.pk, min_votes=ADJUDICATION_OVERLAP)
    served_pairs = sorted({pair for pair, _ in served})
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM review_adjudication WHERE id = ANY(%s)", [ruling_ids])
        stored = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM (SELECT pair_id FROM review_adjudication WHERE project_id = %s "
                       "GROUP BY pair_id HAVING count(*) > 1) d", [project.pk])
        ruled_twice = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM (SELECT pair_id FROM review_adjudicationassignment "
                       "WHERE project_id = %s GROUP BY pair_id HAVING count(*) > 1) d", [project.pk])
        held_twice = cursor.fetchone()[0]
        cursor.execute(
            f"SELECT count(*) FROM unnest(%(served)s::bigint[]) AS s(pair_id) WHERE s.pair_id NOT IN ({split_sql}) "
            "OR s.pair_id IN (SELECT r.pair_id FROM review_adjudication r JOIN auth_user u ON u.id = r.adjudicator_id "
            "WHERE u.username = %(earlier)s)",
            {**params, "served": served_pairs, "earlier": EARLIER_ADJUDICATOR},
        )
        not_waiting = cursor.fetchone()[0]
        cursor.execute(
            f"SELECT count(*) FROM ({split_sql}) s WHERE s.pair_id < %(newest)s "
            "AND NOT EXISTS (SELECT 1 FROM review_adjudication r WHERE r.pair_id = s.pair_id) "
            "AND NOT EXISTS (SELECT 1 FROM review_adjudicationassignment h WHERE h.pair_id = s.pair_id "
            "AND h.status = 'active')",
            {**params, "newest": max(served_pairs, default=0)},
        )
        passed_over = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM review_adjudication WHERE project_id = %s", [project.pk])
        in_db = cursor.fetchone()[0]
    return {"responses_201": len(ruling_ids), "stored_of_those": stored, "lost": len(ruling_ids) - stored,
            "rulings_in_db": in_db, "ruled_before": ruled_before, "pairs_served": len(served),
            "served_twice": len(set(served)) - len(served_pairs), "pairs_ruled_twice": ruled_twice,
            "pairs_held_twice": held_twice, "served_not_waiting": not_waiting, "passed_over": passed_over}


# What check_adjudication counts that must be 0.
ADJUDICATION_FAULTS = ("lost", "served_twice", "pairs_ruled_twice", "pairs_held_twice", "served_not_waiting",
                       "passed_over")


def print_adjudication(result: dict) -> None:
    project, checks = result["project"], result["checks"]
    print(f"\nadjudication: {project['judgments']} judgments, {project['pairs']} pairs, {project['split_pairs']} split, "
          f"{project['ruled_before']} ruled before the run")
    print(f"{'level':<20} {'next calls/s':>13} {'rulings/s':>10} {'next p50':>9} {'next p95':>9} {'next p99':>9} "
          f"{'ruling p99':>11} {'errors':>7}")
    for level in result["levels"]:
        shown = {key: "-" if value is None else value for key, value in level.items()}  # no call answered: no figure
        print(f"{shown['level']:<20} {shown['next_calls_per_s']:>13} {shown['rulings_per_s']:>10} "
              f"{shown['next_p50_ms']:>9} {shown['next_p95_ms']:>9} {shown['next_p99_ms']:>9} "
              f"{shown['ruling_p99_ms']:>11} {shown['errors']:>7}")
    print("adjudication checks:", ", ".join(f"{k}={v}" for k, v in checks.items()))
    for level in result["levels"]:
        for error in level["first_errors"]:
            print("error:", error)


def arguments_mistake(args) -> str | None:
    """What is wrong with the command line, in one line, or None."""
    counts = {"--seconds": args.seconds, "--workers": args.workers, "--threads": args.threads,
              "--adjudicators": min(args.adjudicators)}
    for name, value in counts.items():
        if value is not None and value <= 0:
            return f"{name} {value:g} must be above 0"
    for name, value in {"--levels": min(args.levels, default=1), "--far-ahead": args.far_ahead,
                        "--adaptive": args.adaptive, "--adjudication": args.adjudication}.items():
        if value < 0:
            return f"{name} {value} must be 0 or more"
    if min(args.levels, default=1) == 0:
        return "--levels 0: a level needs at least one reviewer (give no number for no reviewer levels)"
    if 0 < args.adjudication < ADJUDICATION_OVERLAP:
        return (f"--adjudication {args.adjudication} is fewer judgments than one pair has "
                f"({ADJUDICATION_OVERLAP}); give 0 for no adjudication level")
    if not 0 <= args.ruled < 1:
        return f"--ruled {args.ruled:g} must be a share from 0 up to (not including) 1"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="*", default=[1, 8, 32],
                        help="reviewers at once, one level each (none: no reviewer levels)")
    parser.add_argument("--seconds", type=float, default=15.0, help="per concurrency level")
    parser.add_argument("--workers", type=int, default=None,
                        help="gunicorn worker processes (default: deploy/gunicorn.conf.py's)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads per gunicorn worker (default: deploy/gunicorn.conf.py's)")
    parser.add_argument("--prompts", type=int, default=6000)
    parser.add_argument("--far-ahead", type=int, default=10000,
                        help="judgments the far-ahead reviewer already has (0: no far-ahead level)")
    parser.add_argument("--far-ahead-prompts", type=int, default=24000, help="pairs in the far-ahead project")
    parser.add_argument("--adaptive", type=int, default=32,
                        help="reviewers at once on a project with adaptive overlap 2-5 (0: no adaptive level)")
    parser.add_argument("--adjudication", type=int, default=1_000_000,
                        help="judgments in the adjudication project (0: no adjudication level)")
    parser.add_argument("--adjudicators", type=int, nargs="+", default=[1, 8],
                        help="adjudicators at once, one adjudication level each (default 1 and 8)")
    parser.add_argument("--ruled", type=float, default=0.5,
                        help="share of the split pairs ruled on before the adjudication level starts (0 to 1)")
    parser.add_argument("--database", default="pairwise_bench", help="created and dropped by the bench")
    parser.add_argument("--out", type=Path, default=results_path("review_load"))
    args = parser.parse_args()
    if mistake := arguments_mistake(args):
        sys.exit(f"review_load.py: {mistake}")

    env = {
        **os.environ, "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": database_url(args.database), "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
        "DJANGO_SETTINGS_MODULE": "annotate.settings", "PAIRWISE_DATA_DIR": str(ROOT / "var/bench"),
    }
    os.environ.update(env)
    recreate_database(args.database)
    if args.adjudication:  # first: its bulk fill writes rows under ids of its own, from 1
        adjudicator_tokens, adjudication_project = prepare_adjudication(
            judgments=args.adjudication, ruled=args.ruled, adjudicators=sum(args.adjudicators))
    warmers = max(args.levels, default=0)
    tokens = prepare(prompts=args.prompts, reviewers=sum(args.levels) + warmers + args.adaptive,
                     adaptive=bool(args.adaptive))
    if args.far_ahead:
        # 31 others with 30 judgments each: behind, as the 32 reviewers of the largest level would be.
        far_token = prepare_far_ahead(judgments=args.far_ahead, prompts=args.far_ahead_prompts, others=31,
                                      others_judged=30)
    port = free_port()
    server = start_gunicorn(env=env, port=port, workers=args.workers, threads=args.threads)
    base = f"http://127.0.0.1:{port}"
    results, created, adjudication = [], [], None
    try:
        # Warm every worker thread once (its database connection, its prepared statements) with reviewers
        # of its own, so the levels measure the steady state rather than each thread's first request.
        if warmers:
            warm = asyncio.run(run_level(base, tokens[-warmers:], 2.0))
            created += warm.pop("_created")
        offset = 0
        for level in args.levels:
            result = asyncio.run(run_level(base, tokens[offset:offset + level], args.seconds))
            offset += level
            created += result.pop("_created")
            results.append(result)
        if args.far_ahead:
            result = asyncio.run(run_level(base, [far_token], args.seconds, slug="load-far",
                                           label=f"1 with {args.far_ahead} judged", history=args.far_ahead))
            created += result.pop("_created")
            results.append(result)
        if args.adaptive:
            result = asyncio.run(run_level(base, tokens[offset:offset + args.adaptive], args.seconds,
                                           slug="load-adaptive", label=f"{args.adaptive} adaptive 2-5"))
            created += result.pop("_created")
            results.append(result)
        if args.adjudication:
            # Warmed by every adjudicator at once; each level then has adjudicators of its own. The rulings of
            # the warm-up and of every level are checked together.
            warm = asyncio.run(run_adjudication_level(base, adjudicator_tokens, 2.0))
            served, rulings, levels, offset = warm["_served"], warm["_rulings"], [], 0
            for count in args.adjudicators:
                level = asyncio.run(run_adjudication_level(base, adjudicator_tokens[offset:offset + count],
                                                           args.seconds))
                offset += count
                served += level.pop("_served")
                rulings += level.pop("_rulings")
                levels.append(level)
            adjudication = {
                "project": {**adjudication_project, "overlap": ADJUDICATION_OVERLAP, "ruled_share": args.ruled},
                "levels": levels,
                "checks": check_adjudication(served=served, ruling_ids=rulings,
                                             ruled_before=adjudication_project["ruled_before"]),
            }
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    checks = check_database(created)

    if results:
        print(f"{'level':<20} {'judgments/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'next p50':>9} "
              f"{'next p99':>9} {'next max':>9} {'submit p99':>11} {'errors':>7}")
    for r in results:
        print(f"{r['level']:<20} {r['judgments_per_s']:>12} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['mean_ms']:>8} "
              f"{r['next_p50_ms']:>9} {r['next_p99_ms']:>9} {r['next_max_ms']:>9} {r['submit_p99_ms']:>11} "
              f"{r['errors']:>7}")
    print("database:", ", ".join(f"{k}={v}" for k, v in checks.items()))
    for r in results:
        for error in r["first_errors"]:
            print("error:", error)
    if adjudication:
        print_adjudication(adjudication)
    report = {
        "benchmark": "review_load", "levels": results, "database_checks": checks, "adjudication": adjudication,
        "gunicorn": deployment_gunicorn(workers=args.workers, threads=args.threads), "seconds_per_level": args.seconds,
        "adaptive": {"reviewers": args.adaptive, "min_overlap": 2, "max_overlap": 5, "stop_rule": "lead2"}
        if args.adaptive else None,
        "far_ahead": {"judged_before": args.far_ahead, "pairs": args.far_ahead_prompts, "others": 31,
                      "others_judged_before": 30} if args.far_ahead else None,
        "machine": machine(),
        "created_at": utc_timestamp(),
    }
    write_results(args.out, report)
    ok = checks["lost"] == checks["duplicate_judgments"] == checks["over_assigned_pairs"] == checks["pair_votes_drift"] == 0
    if adjudication:
        ok = ok and all(level["errors"] == 0 for level in adjudication["levels"]) and all(
            adjudication["checks"][name] == 0 for name in ADJUDICATION_FAULTS)
    return 0 if ok and all(r["errors"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

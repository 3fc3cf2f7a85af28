"""Hand-written SQL of the review app, grouped by technique, not by domain: the statements that run on every
reviewer request, each one short round trip where the ORM would take several.

What is here, by domain: the reviewer queue (take, claim or find an open pair; a reviewer's open assignments
and progress counts; the per-reviewer queue lock), the judgment's write (lock the assignment, check the
client key, insert the revision with its tally and its pair's vote), the pairs' vote counts (withdraw,
recount, adaptive overlap's refresh), and the project by slug that the reviewer API reads. Each domain's
rules stay in its own module (assignments.py, judgments.py, overlap.py, selectors.py); only the statements
are here, because they share one way of running, and a change to it is made once for all of them:

- `fetch` runs a statement server-side bound and prepared once per connection on PostgreSQL (psycopg's
  `prepare=True`), on one reused cursor: for these short statements planning cost more than running them
  (bench/review_load.py measures the queue under load). Django's own queries keep its client-side binding.
  Set DB_PREPARED_STATEMENTS=false behind a pooler that cannot keep prepared statements.
- `model_columns` names the columns instead of `*`, so a column added by a later migration cannot change a
  prepared statement's result type, and `model_instances` loads the rows as the ORM would.
- Reads are portable SQL (PostgreSQL and SQLite); locks are taken only where the database has them.

Other modules run their own statements through `fetch`: the rationale checks (rationale.py) and the API
token lookup (annotate/authentication.py).

Anything unusual (every pair the one-statement take could take locked by someone else, no criteria)
falls back to the general path in assignments.py, which handles it fully.

While untouched pairs are left, what a request reads does not grow with the reviewer's history, so a
reviewer with 10,000 judgments is served about as fast as one with ten (bench/review_load.py measures
both); see STARTED_LOOKAHEAD. Past that point, the exact look of first_open_pair and the progress count
walk the reviewer's own started pairs.

Adaptive overlap (annotate/review/overlap.py) gives each pair the number of reviewers it needs
(Pair.reviewers_needed, decided when a judgment lands or is undone, under the pair's row lock); with a
fixed overlap it stays 0 and the project's overlap applies. The queue reads pairs through
Pair.open_fill, a generated column that is the assigned count while the pair is open and PAIR_CLOSED
once it has what it needs, so a decided pair leaves the index range the queue walks, and a split pair,
started and fuller than a fresh one, comes first.
"""

import functools
import json
from collections.abc import Sequence
from datetime import datetime

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model

from annotate.review.choices import WINNERS
from annotate.review.models import Assignment, Judgment, Project, live_assignment_sql
from annotate.review.overlap import reviewers_needed

# pg_advisory_xact_lock(key1, key2): key1 says the lock is Pairwise's per-reviewer queue lock.
REVIEWER_LOCK_KEY = 0x50574931  # "PWI1"


def _statement_cursor(db) -> psycopg.Cursor:
    """The psycopg cursor the hot path's statements run on: one per database connection, reused.

    A new cursor copies the connection's adapters and looks its result loaders up again, which cost the
    client about as much as a short statement itself. Statements run one at a time on a connection and
    each one's rows are fetched at once, so one cursor serves them all; a new connection gets a new one.
    """
    cursor = db.__dict__.get("_pairwise_statement_cursor")
    if cursor is None or cursor.connection is not db.connection:
        cursor = db._pairwise_statement_cursor = psycopg.Cursor(db.connection)
    return cursor


def fetch(sql: str, params: Sequence | dict, *, rows: bool = True) -> list[tuple]:
    """Run one statement; return its rows (pass rows=False for a statement that returns none)."""
    db = connections[DEFAULT_DB_ALIAS]  # what `connection` stands for, looked up once
    if db.vendor == "postgresql" and settings.PAIRWISE_PREPARED_STATEMENTS:
        db.ensure_connection()
        with db.wrap_database_errors:
            cursor = _statement_cursor(db)
            cursor.execute(sql, params, prepare=True)
            return cursor.fetchall() if rows else []
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if rows else []


def _json(value):
    """jsonb arrives as text from Django's PostgreSQL adapters and from SQLite; decode it once here."""
    return json.loads(value) if isinstance(value, str) else value


@functools.lru_cache(maxsize=32)
def model_columns(model: type[Model], alias: str) -> str:
    """The model's concrete columns, in field order, for a SELECT or RETURNING list."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + field.column for field in model._meta.concrete_fields)


@functools.lru_cache(maxsize=32)
def _converters(model: type[Model], vendor: str) -> list[tuple[int, object, list]]:
    """The database converters the ORM would apply to each column (SQLite's datetimes, JSON fields)."""
    table = model._meta.db_table
    found = []
    for index, field in enumerate(model._meta.concrete_fields):
        column = field.get_col(table)
        functions = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        if functions:
            found.append((index, column, functions))
    return found


@functools.lru_cache(maxsize=32)
def _attnames(model: type[Model]) -> list[str]:
    return [field.attname for field in model._meta.concrete_fields]


def model_instances(model: type[Model], rows: list[tuple]) -> list:
    """Model instances from rows selected with `model_columns(model, ...)`, as the ORM would load them."""
    db = connections[DEFAULT_DB_ALIAS]
    converters = _converters(model, db.vendor)
    names = _attnames(model)
    width = len(names)
    out = []
    for row in rows:
        values = list(row[:width])
        for index, column, functions in converters:
            for function in functions:
                values[index] = function(values[index], column, db)
        out.append(model.from_db(db.alias, names, values))
    return out


# How many the reviewer has judged in the project, from their tally (models.ReviewerTally).
_JUDGED = (
    "coalesce((SELECT judged FROM review_reviewertally "
    "          WHERE project_id = %(project)s AND reviewer_id = %(reviewer)s), 0)"
)


def lock_reviewer(*, reviewer_id: int) -> None:
    """Serialise one reviewer's queue requests (a double click must not take two pairs).

    A transaction-scoped advisory lock: unlike a row lock it writes nothing, so a request that only
    hands back an assignment the reviewer already holds commits without a WAL flush.
    """
    if connection.vendor == "postgresql":
        fetch("SELECT pg_advisory_xact_lock(%s::int4, %s::int4)", [REVIEWER_LOCK_KEY, reviewer_id])


def reviewer_open_assignments(*, project_id: int, reviewer_id: int) -> tuple[list[Assignment], int]:
    """The reviewer's active and scheduled assignments in the project, oldest first, and how many they judged."""
    rows = fetch(
        f"SELECT {model_columns(Assignment, 'a')}, {_JUDGED} "
        "FROM review_assignment a WHERE a.project_id = %(project)s AND a.reviewer_id = %(reviewer)s "
        "AND a.status IN ('active', 'scheduled') ORDER BY a.id",
        {"project": project_id, "reviewer": reviewer_id},
    )
    return model_instances(Assignment, rows), (rows[0][-1] if rows else 0)


# Not one of the reviewer's own pairs (a reviewer never gets a pair twice except as a retest).
def _not_mine(pair_id: str) -> str:
    return (
        "NOT EXISTS (SELECT 1 FROM review_assignment a "
        f"            WHERE a.pair_id = {pair_id} AND a.reviewer_id = %(reviewer)s AND NOT a.is_retest)"
    )


_NOT_MINE = _not_mine("p.id")


def _open(alias: str, overlap: int) -> str:
    """The pair still needs a reviewer: fewer assigned than it needs (0: the project's overlap, the maximum).

    With adaptive overlap every pair anyone has taken has its own number (take_fresh_pair sets it), so
    the project's maximum only ever applies to a fixed overlap and to untouched pairs.
    """
    return f"{alias}.assigned_count < coalesce(nullif({alias}.reviewers_needed, 0), {int(overlap)})"


def _first_needed(first_needed: int | None, alias: str = "p") -> str:
    """SET clause: an adaptive pair taken for the first time gets the reviewers a pair without votes needs."""
    if first_needed is None:
        return ""
    return (f", reviewers_needed = CASE WHEN {alias}.reviewers_needed = 0 THEN {int(first_needed)} "
            f"ELSE {alias}.reviewers_needed END")


# How many started pairs (someone holds or judged them, the overlap is not reached) the queue looks at
# before it takes an untouched pair instead. Looking at all of them would be exact "fullest first", but a
# reviewer far ahead of the others is the one holding nearly every started pair, so that look walked past
# every pair they had judged on every request, a cost growing with each judgment. A reviewer
# keeping pace has a handful of their own near the front, and at most one pair is locked by each request
# in flight, so for them nothing changes. The reviewer far ahead gets an untouched pair while one that
# somebody else started waits further back; the others, who take the fullest pairs first, finish it.
# Only the order of pairs is traded: no pair is over-assigned, repeated, or left out (first_open_pair).
STARTED_LOOKAHEAD = 100


def _started_near_front(*, overlap: int, lock: str) -> str:
    """The fullest started pair among the first STARTED_LOOKAHEAD, not the reviewer's own.

    Decided pairs are not in the range at all (open_fill); a split pair still open has more reviewers
    than a fresh one, so it comes first. The count is tested again on the joined row, so a lock taken
    after another request raised it re-checks it on the newest version and moves on to the next pair.
    """
    return f"""
        SELECT p.id FROM (
            SELECT id, open_fill, queue_priority FROM review_pair
            WHERE project_id = %(project)s AND open_fill BETWEEN 1 AND {overlap - 1}
            ORDER BY open_fill DESC, queue_priority DESC, id DESC
            LIMIT {STARTED_LOOKAHEAD}
        ) near JOIN review_pair p ON p.id = near.id
        WHERE {_open("p", overlap)} AND {_not_mine("near.id")}
        ORDER BY near.open_fill DESC, near.queue_priority DESC, near.id DESC
        LIMIT 1{lock}
    """


def _untouched(*, lock: str) -> str:
    """The untouched pair of highest queue priority, newest first among equals (a pair the reviewer had
    and let expire is still theirs). The priority is 0 everywhere except in leaderboard projects.

    `open_fill < 1`, not `= 0`: with it in the sort key only pair_open_slots gives this order; with
    `= 0` the planner walked the primary key backwards past every started pair instead, the most for a
    reviewer far ahead of the others, whose pairs are the newest (bench/review_load.py).
    """
    return f"""
        SELECT p.id FROM review_pair p
        WHERE p.project_id = %(project)s AND p.open_fill < 1 AND {_NOT_MINE}
        ORDER BY p.open_fill DESC, p.queue_priority DESC, p.id DESC
        LIMIT 1{lock}
    """


def _anywhere(*, overlap: int, lock: str) -> str:
    """The fullest open pair not the reviewer's own, however far back: exact, and it walks every started
    pair of the reviewer's that is in front of it."""
    return f"""
        SELECT p.id FROM review_pair p
        WHERE p.project_id = %(project)s AND p.open_fill < {overlap} AND {_open("p", overlap)} AND {_NOT_MINE}
        ORDER BY p.open_fill DESC, p.queue_priority DESC, p.id DESC
        LIMIT 1{lock}
    """


def take_fresh_pair(
    *, project_id: int, reviewer_id: int, overlap: int, a_on_left: bool, now: datetime, expires_at: datetime,
    everywhere: bool = False, first_needed: int | None = None,
) -> Assignment | None:
    """PostgreSQL: lock an open pair (SKIP LOCKED), count it, and assign it, in one statement.

    Fullest pairs first, so pairs reach their overlap (and agreement can be measured) early: a started pair
    near the front of the queue (see STARTED_LOOKAHEAD), else an untouched one, else (`everywhere`) any open
    pair. FOR NO KEY UPDATE, since only the counter changes: it does not block the foreign-key checks of
    other reviewers' inserts that point at the pair. A lock that finds the row changed re-checks the count
    on its newest version, and the UPDATE re-checks it too, so a pair is never over-assigned. Returns None
    when no unlocked pair was found.

    `overlap` is the project's (the maximum, with adaptive overlap); `first_needed`, given only with
    adaptive overlap, is what an untouched pair needs, written on it as it is first taken.
    """
    overlap = int(overlap)  # written into the statement: see _PROGRESS_COLUMNS
    lock = "\n        FOR NO KEY UPDATE OF p SKIP LOCKED"
    # Each look runs only when the ones before it found nothing (a one-time filter in the plan).
    anywhere, or_anywhere = "", ""
    if everywhere:
        anywhere = f"""
        ), anywhere AS (
            SELECT id FROM ({_anywhere(overlap=overlap, lock=lock)}) w
            WHERE NOT EXISTS (SELECT 1 FROM started) AND NOT EXISTS (SELECT 1 FROM untouched)"""
        or_anywhere = " UNION ALL SELECT id FROM anywhere"
    rows = fetch(
        f"""
        WITH started AS ({_started_near_front(overlap=overlap, lock=lock)}
        ), untouched AS (
            SELECT id FROM ({_untouched(lock=lock)}) u WHERE NOT EXISTS (SELECT 1 FROM started){anywhere}
        ), candidate AS (
            SELECT id FROM started UNION ALL SELECT id FROM untouched{or_anywhere}
        ), counted AS (
            UPDATE review_pair p SET assigned_count = p.assigned_count + 1{_first_needed(first_needed)}
            FROM candidate WHERE p.id = candidate.id AND {_open("p", overlap)}
            RETURNING p.id
        ), criteria AS (
            SELECT id FROM review_criteriaversion WHERE project_id = %(project)s ORDER BY version DESC LIMIT 1
        )
        INSERT INTO review_assignment (project_id, pair_id, reviewer_id, a_on_left, is_retest, status,
                                       criteria_version_id, served_at, expires_at, created_at)
        SELECT %(project)s, counted.id, %(reviewer)s, %(left)s, false, 'active', criteria.id,
               %(now)s, %(expires)s, %(now)s
        FROM counted, criteria
        RETURNING {model_columns(Assignment, '')}
        """,
        {"project": project_id, "reviewer": reviewer_id, "left": a_on_left, "now": now, "expires": expires_at},
    )
    return model_instances(Assignment, rows)[0] if rows else None


def first_open_pair(*, project_id: int, reviewer_id: int, overlap: int) -> int | None:
    """The open pair the reviewer would be given next, locked or not; None when none is left for them.

    take_fresh_pair's order with `everywhere`: exact, so "nothing left" is never said while a pair is
    left. Only the last look walks the reviewer's own started pairs, and it runs only when nothing near
    the front and nothing untouched is left for them. Portable (coalesce evaluates its arguments in
    turn, on both databases): SQLite's way to find a pair, and PostgreSQL's check before it tries again.
    """
    overlap = int(overlap)
    rows = fetch(
        f"""
        SELECT coalesce(({_started_near_front(overlap=overlap, lock="")}), ({_untouched(lock="")}),
                        ({_anywhere(overlap=overlap, lock="")}))
        """,
        {"project": project_id, "reviewer": reviewer_id},
    )
    return rows[0][0]


def claim_pair(*, pair_id: int, overlap: int, first_needed: int | None = None) -> bool:
    """Count one more reviewer on the pair if it is still open (re-checked by the UPDATE); True if counted.

    SQLite's take: its single-writer lock serialises the UPDATE, so the re-check is enough there.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE review_pair SET assigned_count = assigned_count + 1{_first_needed(first_needed, 'review_pair')} "
            f"WHERE id = %s AND {_open('review_pair', overlap)}",
            [pair_id],
        )
        return cursor.rowcount == 1


# The reviewer page's two counts (docs/agreement.md, "What the reviewer page counts"). Judged: the reviewer's
# current live judgments, retests included (the quality table's Judgments): the tally less their answers in the
# qualification round, which the page shows apart. Left: the pairs they have not judged and could still be given;
# never a retest, which would announce one.
_JUDGED_LIVE = (
    f"{_JUDGED} - (SELECT count(*) FROM review_goldcheck g JOIN review_assignment qa ON qa.id = g.assignment_id "
    "WHERE g.project_id = %(project)s AND g.reviewer_id = %(reviewer)s AND g.attempt_id IS NOT NULL "
    "AND qa.current_judgment_id IS NOT NULL)"
)


def reviewer_judged(*, project_id: int, reviewer_id: int) -> int:
    """The first of the reviewer page's counts alone (the standing's): one indexed read."""
    (row,) = fetch("SELECT " + _JUDGED_LIVE, {"project": project_id, "reviewer": reviewer_id})
    return row[0]


# The project's overlap and the count's cap are written into the statement, not bound: a plan made
# for unknown values of them (a prepared statement's generic plan) joined every open pair with every
# one of the reviewer's assignments, a cost growing with the reviewer's history (bench/review_load.py).
# Open pairs are counted emptiest first, where the reviewer's own pairs almost never are: in id order,
# a reviewer ahead of the others walked past every pair they had judged on every request.
_PROGRESS_COLUMNS = f"""
    {_JUDGED_LIVE},
    (SELECT count(*) FROM review_assignment a
     WHERE a.project_id = %(project)s AND a.reviewer_id = %(reviewer)s AND a.status IN ('active', 'scheduled')
       AND NOT a.is_retest AND {live_assignment_sql("a")}),
    (SELECT count(*) FROM (
       SELECT 1 FROM review_pair p
       WHERE p.project_id = %(project)s AND p.open_fill < {{overlap}}
         AND p.assigned_count < coalesce(nullif(p.reviewers_needed, 0), {{overlap}}) AND {_NOT_MINE}
       ORDER BY p.open_fill, p.queue_priority, p.id
       LIMIT {{cap}}) open_pairs)
"""


def _progress(judged: int, waiting: int, open_pairs: int, cap: int) -> dict:
    return {"judged": judged, "remaining": open_pairs + waiting, "remaining_is_at_least": open_pairs >= cap}


def reviewer_progress(*, project_id: int, reviewer_id: int, overlap: int, cap: int) -> dict:
    """Judged so far, and how many more the reviewer could be given (counting stops at `cap`)."""
    (row,) = fetch(
        "SELECT " + _PROGRESS_COLUMNS.format(overlap=int(overlap), cap=int(cap)),
        {"project": project_id, "reviewer": reviewer_id},
    )
    return _progress(*row, cap)


def assignment_texts_and_progress(
    *, pair_id: int, criteria_version_id: int, project_id: int, reviewer_id: int, overlap: int, cap: int
) -> tuple[dict, dict] | None:
    """The prompt, both answers and the criteria shown with an assignment, and the reviewer's progress: one read."""
    rows = fetch(
        f"""
        SELECT pr.messages, ra.text, rb.text, cv.version, cv.instructions, cv.items,
               {_PROGRESS_COLUMNS.format(overlap=int(overlap), cap=int(cap))}
        FROM review_pair p
        JOIN review_prompt pr ON pr.id = p.prompt_id
        JOIN review_response ra ON ra.id = p.response_a_id
        JOIN review_response rb ON rb.id = p.response_b_id
        JOIN review_criteriaversion cv ON cv.id = %(criteria)s
        WHERE p.id = %(pair)s
        """,
        {"pair": pair_id, "criteria": criteria_version_id, "project": project_id, "reviewer": reviewer_id},
    )
    if not rows:
        return None
    messages, a_text, b_text, version, instructions, items, judged, waiting, open_pairs = rows[0]
    texts = {"messages": _json(messages), "a": a_text, "b": b_text,
             "criteria": {"version": version, "instructions": instructions, "items": _json(items)}}
    return texts, _progress(judged, waiting, open_pairs, cap)


def lock_assignment_for_judgment(*, assignment_id: int, reviewer_id: int) -> tuple[Assignment, dict] | None:
    """The reviewer's assignment, locked, with what judging it needs from its project and criteria.

    FOR NO KEY UPDATE: the judgment changes the row's status, never its id, so the new judgment's
    foreign-key check on it does not wait.
    """
    lock = " FOR NO KEY UPDATE OF a" if connection.vendor == "postgresql" else ""
    rows = fetch(
        f"SELECT {model_columns(Assignment, 'a')}, p.min_rationale_chars, p.retest_rate, p.retest_gap, cv.items "
        "FROM review_assignment a JOIN review_project p ON p.id = a.project_id "
        "LEFT JOIN review_criteriaversion cv ON cv.id = a.criteria_version_id "
        "WHERE a.id = %s AND a.reviewer_id = %s" + lock,
        [assignment_id, reviewer_id],
    )
    if not rows:
        return None
    min_rationale, retest_rate, retest_gap, items = rows[0][-4:]
    rules = {
        "min_rationale_chars": min_rationale, "retest_rate": retest_rate, "retest_gap": retest_gap,
        "criteria_keys": [item["key"] for item in _json(items or "[]")],
    }
    return model_instances(Assignment, rows)[0], rules


def judgment_state(*, client_key_db, assignment_id: int) -> tuple[int | None, int]:
    """Read after the assignment lock: (the judgment already made with this client key or None,
    the assignment's last revision)."""
    (row,) = fetch(
        "SELECT (SELECT id FROM review_judgment WHERE client_key = %(key)s), "
        "(SELECT max(revision) FROM review_judgment WHERE assignment_id = %(assignment)s)",
        {"key": client_key_db, "assignment": assignment_id},
    )
    earlier_id, last_revision = row
    return earlier_id, last_revision or 0


def tally_add_retest(*, project_id: int, reviewer_id: int) -> None:
    fetch(
        "UPDATE review_reviewertally SET retests = retests + 1 WHERE project_id = %s AND reviewer_id = %s",
        [project_id, reviewer_id],
        rows=False,
    )


def project_by_slug(*, slug: str) -> Project | None:
    rows = fetch(f"SELECT {model_columns(Project, '')} FROM review_project WHERE slug = %s", [slug])
    return model_instances(Project, rows)[0] if rows else None


def project_by_slug_locking_reviewer(*, slug: str, reviewer_id: int) -> Project | None:
    """project_by_slug and lock_reviewer in one statement: the project, with the reviewer's queue lock taken
    (in the caller's transaction), or None, with no lock taken, when no project has this slug.

    Only the project is read here, and it is read whatever the wait for the lock: what the queue reads
    under the lock comes in the statements after it, which see everything committed before it was granted.
    """
    if connection.vendor != "postgresql":
        return project_by_slug(slug=slug)  # SQLite's single-writer lock serialises the queue instead
    rows = fetch(
        f"SELECT {model_columns(Project, '')}, pg_advisory_xact_lock(%s::int4, %s::int4) FROM review_project WHERE slug = %s",
        [REVIEWER_LOCK_KEY, reviewer_id, slug],
    )
    return model_instances(Project, rows)[0] if rows else None


def judgment_insert(*, assignment: Assignment, reviewer_id: int, revision: int | None, winner: str,
                    strength: int | None, criteria: dict, rationale: str, seconds_spent: float | None, client_key_db,
                    now: datetime) -> tuple[Judgment, dict] | None:
    """Insert a judgment revision, complete the assignment with it, and count it in the reviewer's tally.

    Returns the Judgment and the tally after counting it. A vote (a first-time, live judgment) is also
    counted on its pair (Pair.votes_*), which takes the pair's row lock. PostgreSQL does all four in one
    statement; elsewhere, four. With adaptive overlap, a vote also decides, in this transaction, how many
    reviewers its pair needs now (pair_needed_refresh), under that lock, so two judgments of one pair
    landing together are decided one after the other.

    `revision` None (PostgreSQL only, under the assignment's lock): the statement itself numbers the revision
    after the assignment's last one, and stores nothing, returning None, when a judgment already has this
    client key; judgment_state's read, done in the insert.
    """
    values = {
        "assignment": assignment.pk, "pair": assignment.pair_id, "reviewer": reviewer_id, "revision": revision,
        "winner": winner, "strength": strength, "criteria": json.dumps(criteria),
        "criteria_version": assignment.criteria_version_id, "rationale": rationale, "seconds": seconds_spent,
        "key": client_key_db, "now": now, "project": assignment.project_id, "once": 0 if assignment.is_retest else 1,
        "original": not assignment.is_retest,
    }
    insert = (
        "INSERT INTO review_judgment (assignment_id, pair_id, reviewer_id, revision, retracted, winner, strength, "
        "criteria, criteria_version_id, rationale, seconds_spent, client_key, created_at) "
        "VALUES (%(assignment)s, %(pair)s, %(reviewer)s, %(revision)s, false, %(winner)s, %(strength)s, "
        "%(criteria)s, %(criteria_version)s, %(rationale)s, %(seconds)s, %(key)s, %(now)s) RETURNING id"
    )
    complete = (
        "UPDATE review_assignment SET status = 'completed', completed_at = %(now)s, current_judgment_id = {judgment} "
        "WHERE id = %(assignment)s"
    )
    count = (
        "INSERT INTO review_reviewertally (project_id, reviewer_id, judged, judged_once, retests) "
        f"{_COUNT_VALUES} "
        "ON CONFLICT (project_id, reviewer_id) DO UPDATE SET judged = review_reviewertally.judged + 1, "
        "judged_once = review_reviewertally.judged_once + excluded.judged_once "
        "RETURNING judged, judged_once, retests"
    )
    if revision is None:
        if connection.vendor != "postgresql":
            raise ValueError("judgment_insert numbers the revision itself on PostgreSQL only")
        # Each part acts only when the judgment went in: nothing is written when the client key was used.
        rows = fetch(
            f"WITH judgment AS ({_JUDGMENT_INSERT_NEXT_REVISION}), "
            f"completed AS ({complete.format(judgment='(SELECT id FROM judgment)')} "
            "AND EXISTS (SELECT 1 FROM judgment)), "
            f"counted AS ({count.replace(_COUNT_VALUES, _COUNT_VALUES_IF_STORED)}), "
            f"voted AS ({_vote_add(' AND EXISTS (SELECT 1 FROM judgment)')}) "
            "SELECT judgment.id, counted.judged, counted.judged_once, counted.retests, "
            "(SELECT adaptive FROM voted), judgment.revision FROM judgment, counted",
            values,
        )
        if not rows:
            return None
        row = rows[0]
        revision = row[5]
    elif connection.vendor == "postgresql":
        (row,) = fetch(
            f"WITH judgment AS ({insert}), "
            f"completed AS ({complete.format(judgment='(SELECT id FROM judgment)')}), "
            f"counted AS ({count}), "
            f"voted AS ({_VOTE_ADD}) "
            "SELECT judgment.id, counted.judged, counted.judged_once, counted.retests, "
            "(SELECT adaptive FROM voted) FROM judgment, counted",
            values,
        )
    else:
        ((judgment_id,),) = fetch(insert, values)
        fetch(complete.format(judgment="%(judgment)s"), {**values, "judgment": judgment_id}, rows=False)
        # SQLite has no row locks: its single-writer lock already serialises this transaction's writes.
        voted = fetch(_VOTE_ADD, values)
        row = (judgment_id, *fetch(count, values)[0], voted[0][0] if voted else None)
    if row[4]:
        pair_needed_refresh(pair_id=assignment.pair_id, locked=True)
    row = row[:4]
    judgment = Judgment(
        id=row[0], assignment=assignment, pair_id=assignment.pair_id, reviewer_id=reviewer_id, revision=revision,
        retracted=False, winner=winner, strength=strength, criteria=criteria,
        criteria_version_id=assignment.criteria_version_id, rationale=rationale, seconds_spent=seconds_spent,
        created_at=now,
    )
    judgment._state.adding = False
    judgment._state.db = connection.alias
    return judgment, {"judged": row[1], "judged_once": row[2], "retests": row[3]}


# judgment_insert's judgment when it numbers the revision itself: the next after the assignment's last (read under
# the assignment's lock, by this statement, so after every judgment committed before the lock was granted), and
# only if no judgment has the client key yet (what judgment_state reads otherwise).
_JUDGMENT_INSERT_NEXT_REVISION = (
    "INSERT INTO review_judgment (assignment_id, pair_id, reviewer_id, revision, retracted, winner, strength, "
    "criteria, criteria_version_id, rationale, seconds_spent, client_key, created_at) "
    "SELECT %(assignment)s, %(pair)s, %(reviewer)s, "
    "(SELECT coalesce(max(revision), 0) + 1 FROM review_judgment WHERE assignment_id = %(assignment)s), false, "
    "%(winner)s, %(strength)s, %(criteria)s, %(criteria_version)s, %(rationale)s, %(seconds)s, %(key)s, %(now)s "
    "WHERE NOT EXISTS (SELECT 1 FROM review_judgment WHERE client_key = %(key)s) RETURNING id, revision"
)
_COUNT_VALUES = "VALUES (%(project)s, %(reviewer)s, 1, %(once)s, 0)"
_COUNT_VALUES_IF_STORED = "SELECT %(project)s, %(reviewer)s, 1, %(once)s, 0 FROM judgment"


def _vote_add(condition: str = "") -> str:
    """Count a vote on its pair, for a first-time judgment (a retest is not a vote: the export counts each reviewer
    once); an answer of the qualification round adds nothing, yet its pair is still decided again below, as any
    first-time judgment's. An UPDATE adds to the latest committed counters, so two votes landing together are
    both counted. Returns whether the project's overlap is adaptive (the pair needs deciding again); no row for
    a retest. `condition` (SQL, starting with AND) is one more for the pair's row to be counted.
    """
    return (
        "UPDATE review_pair SET "
        + ", ".join(f"votes_{winner} = votes_{winner} + CASE WHEN vote.live AND %(winner)s = '{winner}' THEN 1 ELSE 0 END"
                    for winner in WINNERS)
        + " FROM (SELECT EXISTS (SELECT 1 FROM review_assignment a WHERE "
        f"a.id = %(assignment)s AND {live_assignment_sql('a')}) AS live) vote "
        f"WHERE review_pair.id = %(pair)s AND %(original)s{condition} "
        "RETURNING (SELECT pr.min_overlap < pr.overlap FROM review_project pr WHERE pr.id = review_pair.project_id) "
        "AS adaptive"
    )


_VOTE_ADD = _vote_add()


def pair_vote_withdraw(*, pair_id: int, winner: str) -> None:
    """Take back a vote for `winner` from the pair's counters (its judgment was undone); locks the pair's row."""
    column = f"votes_{WINNERS[WINNERS.index(winner)]}"  # only a known choice names a column
    fetch(f"UPDATE review_pair SET {column} = {column} - 1 WHERE id = %s", [pair_id], rows=False)


_VOTES_RECOUNTED = (
    "UPDATE review_pair SET "
    + ", ".join(f"votes_{winner} = counted.votes_{winner}" for winner in WINNERS)
    + ", ruled = counted.ruled FROM (SELECT p.id AS pair_id, "
    + ", ".join(f"count(j.id) FILTER (WHERE j.winner = '{winner}') AS votes_{winner}" for winner in WINNERS)
    + ", EXISTS (SELECT 1 FROM review_adjudication r WHERE r.pair_id = p.id) AS ruled "
    "FROM review_pair p LEFT JOIN review_assignment a ON a.pair_id = p.id AND NOT a.is_retest "
    f"AND a.current_judgment_id IS NOT NULL AND {live_assignment_sql('a')} "
    "LEFT JOIN review_judgment j ON j.id = a.current_judgment_id "
    "WHERE p.project_id = %s GROUP BY p.id) counted WHERE review_pair.id = counted.pair_id AND ("
    + " OR ".join(f"review_pair.votes_{winner} <> counted.votes_{winner}" for winner in WINNERS)
    + " OR review_pair.ruled <> counted.ruled)"
)


def pair_votes_recount(*, project_id: int) -> int:
    """Write every pair's vote counters and ruled flag of the project from its judgments and rulings; returns
    how many pairs changed.

    For rows written in bulk rather than one vote at a time: a restored backup, a benchmark's or a test's
    fill. Run it where no vote lands meanwhile (it reads the votes without the pairs' locks).
    """
    with connection.cursor() as cursor:
        cursor.execute(_VOTES_RECOUNTED, [project_id])
        return cursor.rowcount


# The pair's votes as the export counts them (current judgments of first-time, live assignments), one column per
# winner in WINNERS order, with the project's overlap settings and what the pair needs now.
_PAIR_VOTES = (
    "SELECT pr.min_overlap, pr.overlap, pr.overlap_stop_rule, p.reviewers_needed, "
    + ", ".join(f"coalesce(sum(CASE WHEN j.winner = '{winner}' THEN 1 ELSE 0 END), 0)" for winner in WINNERS)
    + " FROM review_pair p JOIN review_project pr ON pr.id = p.project_id "
    "LEFT JOIN review_assignment a ON a.pair_id = p.id AND NOT a.is_retest AND a.current_judgment_id IS NOT NULL "
    f"AND {live_assignment_sql('a')} "
    "LEFT JOIN review_judgment j ON j.id = a.current_judgment_id "
    "WHERE p.id = %s GROUP BY pr.min_overlap, pr.overlap, pr.overlap_stop_rule, p.reviewers_needed"
)


def pair_needed_refresh(*, pair_id: int, locked: bool = False) -> int:
    """Decide how many reviewers the pair needs from its votes now, store it, and return it.

    Called in the transaction that adds or withdraws a vote (a judgment lands or is undone), so the
    pair's open or closed state never lags its votes; never on a reviewer's `next`. Takes the pair's row
    lock first (unless the caller holds it: `locked`), then reads the votes and the project's settings in
    a statement of their own, which on PostgreSQL sees every vote committed before the lock was granted.
    With a fixed overlap the pair needs the project's overlap (stored as 0).
    """
    if not locked and connection.vendor == "postgresql":
        fetch("SELECT id FROM review_pair WHERE id = %s FOR NO KEY UPDATE", [pair_id])
    (row,) = fetch(_PAIR_VOTES, [pair_id])
    min_overlap, overlap, stop_rule, stored = row[:4]
    if min_overlap is not None and min_overlap < overlap:
        needed = int(reviewers_needed([row[4:]], min_overlap=min_overlap, max_overlap=overlap,
                                      stop_rule=stop_rule)[0])
    else:
        needed = 0
    if needed != stored:
        fetch("UPDATE review_pair SET reviewers_needed = %s WHERE id = %s", [needed, pair_id], rows=False)
    return needed

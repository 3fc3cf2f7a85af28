"""Reads of the export pipeline: votes per pair straight from SQL, and the export records.

`pair_votes_stream` is the hot path. The database does the counting (GROUP BY pair over current,
original, live judgments: answers of the qualification round are never votes) and hands back one row per pair, streamed
(COPY, or a server-side cursor inside a transaction), so memory stays flat however many judgments there are; Python
only sees pairs, never judgments. Each row also carries how many pairs there are in all, so the progress bar's total
costs no second pass over the judgments. With the answer texts, outside a transaction, the rows come one prompt-key
range at a time (`_ranged_votes_batches`), so that the database sorts a range while Python writes the one before.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import islice

import orjson
import psycopg
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Max, QuerySet

from annotate.exports.filters import ExportFilters
from annotate.exports.models import Export
from annotate.review.models import (
    Assignment,
    CriteriaVersion,
    GoldCheck,
    Judgment,
    Pair,
    Project,
    Prompt,
    RationaleCheck,
    Response,
    live_assignment_sql,
)

FETCH_ROWS = 2000
TAGS_CACHED = 1024  # distinct tag lists parsed once and shared: most prompts repeat a few


# Not frozen: a frozen dataclass sets each field through object.__setattr__, several times slower to build, and
# the export builds one per pair.
@dataclass(slots=True)
class PairVotes:
    """One pair with its counted votes (a, b, tie, both_bad) and, when asked for, its texts."""

    pair_id: int
    prompt_pk: int
    prompt_id: str
    prompt_key: str  # Prompt.content_key: which prompts are the same prompt
    messages: list | None
    tags: list
    gold: bool
    votes: tuple[int, int, int, int]
    criteria_version: int
    text_a: str | None
    text_b: str | None
    # Mean strength of the counted votes for a (for b) among those that gave one; None when none did.
    strength_a: float | None = None
    strength_b: float | None = None


def votes_aggregate_sql(*, filters: ExportFilters, excluded_reviewers: frozenset[int], project: Project,
                        live: bool = True, with_total: bool = True) -> tuple[str, list]:
    """The counting part of the votes query: one row per pair with its counted votes, newest criteria version and
    mean strengths (and, `with_total`, how many pairs there are in all); `live` False counts instead the
    qualification answers the export leaves out (same filters)."""
    assignment, judgment = Assignment._meta.db_table, Judgment._meta.db_table
    criteria = CriteriaVersion._meta.db_table
    where = ["a.project_id = %s", "a.is_retest = %s", "j.retracted = %s"]
    if live:
        where.append(live_assignment_sql("a"))
        qualification = ""
    else:
        # From the qualification round's gold checks to their assignments (one check per assignment at most):
        # a project's few qualification answers are found without reading every judgment of it.
        qualification = (f"JOIN {GoldCheck._meta.db_table} qualification_check ON "
                         "qualification_check.assignment_id = a.id AND qualification_check.attempt_id IS NOT NULL")
    params: list = [project.pk, False, False]
    if filters.criteria_versions:
        where.append(f"cv.version IN ({', '.join(['%s'] * len(filters.criteria_versions))})")
        params += list(filters.criteria_versions)
    if filters.judged_since_utc is not None:
        where.append("j.created_at >= %s")
        params.append(filters.judged_since_utc)
    if filters.judged_before_utc is not None:
        where.append("j.created_at < %s")
        params.append(filters.judged_before_utc)
    if excluded_reviewers:
        where.append(f"a.reviewer_id NOT IN ({', '.join(['%s'] * len(excluded_reviewers))})")
        params += sorted(excluded_reviewers)
    if filters.exclude_flagged_rationales:
        where.append(f"NOT EXISTS (SELECT 1 FROM {RationaleCheck._meta.db_table} rc "
                     "WHERE rc.judgment_id = j.id AND rc.flagged = %s)")
        params.append(True)
    total = ", count(*) OVER () AS pairs_total" if with_total else ""
    sql = f"""
            SELECT a.pair_id AS pair_id,
                   SUM(CASE WHEN j.winner = 'a' THEN 1 ELSE 0 END) AS votes_a,
                   SUM(CASE WHEN j.winner = 'b' THEN 1 ELSE 0 END) AS votes_b,
                   SUM(CASE WHEN j.winner = 'tie' THEN 1 ELSE 0 END) AS votes_tie,
                   SUM(CASE WHEN j.winner = 'both_bad' THEN 1 ELSE 0 END) AS votes_both_bad,
                   MAX(cv.version) AS criteria_version,
                   -- Whole-number sum over count: the same float whatever order the judgments come in. Divided
                   -- here so each pair adds two numbers, not four: a wider result tips the planner into hashing
                   -- the texts instead of these rows, which spills to disk.
                   CAST(SUM(CASE WHEN j.winner = 'a' THEN j.strength END) AS DOUBLE PRECISION)
                       / NULLIF(COUNT(CASE WHEN j.winner = 'a' THEN j.strength END), 0) AS strength_a,
                   CAST(SUM(CASE WHEN j.winner = 'b' THEN j.strength END) AS DOUBLE PRECISION)
                       / NULLIF(COUNT(CASE WHEN j.winner = 'b' THEN j.strength END), 0) AS strength_b
                   {total}
            FROM {assignment} a
            {qualification}
            JOIN {judgment} j ON j.id = a.current_judgment_id
            JOIN {criteria} cv ON cv.id = j.criteria_version_id
            WHERE {' AND '.join(where)}
            GROUP BY a.pair_id
    """
    return sql, params


def _votes_columns(*, texts: str, total: str) -> str:
    """The columns of a votes read, in the order and of the types VOTES_COLUMN_TYPES gives (the COPY read declares
    them): the votes `v`, the prompt `pr`, then `texts` (the prompt's messages and both answers, or NULLs) and
    `total` (how many pairs in all)."""
    return f"""v.pair_id, pr.id, pr.external_id, pr.content_key, pr.tags, pr.gold_response_id,
               v.votes_a, v.votes_b, v.votes_tie, v.votes_both_bad, v.criteria_version,
               v.strength_a, v.strength_b, {texts}, {total}"""


TEXTS = "pr.messages, ra.text, rb.text"  # the texts' columns, with `ra` and `rb` the pair's answers


def votes_sql(*, filters: ExportFilters, excluded_reviewers: frozenset[int], with_texts: bool,
               project: Project, live: bool = True) -> tuple[str, list]:
    """The votes query in one statement, in the export's order; `live` False counts instead the qualification
    answers it leaves out."""
    aggregate, params = votes_aggregate_sql(filters=filters, excluded_reviewers=excluded_reviewers,
                                            project=project, live=live)
    pair, prompt, response = Pair._meta.db_table, Prompt._meta.db_table, Response._meta.db_table
    joins = (f"JOIN {response} ra ON ra.id = p.response_a_id JOIN {response} rb ON rb.id = p.response_b_id"
             if with_texts else "")
    sql = f"""
        SELECT {_votes_columns(texts=TEXTS if with_texts else "NULL, NULL, NULL", total="v.pairs_total")}
        FROM ({aggregate}) v
        JOIN {pair} p ON p.id = v.pair_id
        JOIN {prompt} pr ON pr.id = p.prompt_id
        {joins}
        ORDER BY pr.content_key, v.pair_id
    """
    return sql, params


def _json(value):
    return orjson.loads(value) if isinstance(value, str | bytes) else value


# The types of the votes query's columns, in its order, for COPY's text rows (_votes_batches).
VOTES_COLUMN_TYPES = ("int8", "int8", "text", "text", "text", "int8", "int8", "int8", "int8", "int8", "int8",
                      "float8", "float8", "text", "text", "text", "int8")


@contextmanager
def _votes_batches(sql: str, params: list, fetch_rows: int) -> Iterator[Iterator[list[tuple]]]:
    """The votes query's rows, `fetch_rows` at a time, memory flat however many.

    On PostgreSQL outside a transaction (an export job, export_snapshot) they come from COPY ... TO STDOUT on a
    connection of its own: a cursor (DECLARE) never gets a parallel plan, and the votes query ran about 1.6x as
    long through one as through COPY at a million judgments. The Django connection stays free for the export's
    progress, and sees the same committed rows. Inside a transaction (a caller's atomic block, whose own
    writes another connection cannot see) and on SQLite, a server-side cursor reads them, as before.
    """
    if not _reads_through_copy():
        with connection.chunked_cursor() as cursor:
            cursor.execute(sql, params)
            yield iter(lambda: cursor.fetchmany(fetch_rows), [])
        return
    copying = _copy_connection()
    try:
        with copying.cursor() as cursor, cursor.copy(f"COPY ({sql}) TO STDOUT", params) as copy:
            copy.set_types(list(VOTES_COLUMN_TYPES))
            rows = copy.rows()
            yield iter(lambda: list(islice(rows, fetch_rows)), [])
    finally:
        copying.close()


def _reads_through_copy() -> bool:
    return connection.vendor == "postgresql" and not connection.in_atomic_block


# The COPY connection's application_name: what an operator (and bench/soak.py) sees of the export in pg_stat_activity.
EXPORT_APPLICATION_NAME = "pairwise export"


def _copy_connection(isolation_level: psycopg.IsolationLevel | None = None):
    """A connection of the export's own for its COPY reads, next to Django's."""
    copying = connection.get_new_connection(connection.get_connection_params())
    try:
        copying.isolation_level = isolation_level
        copying.execute("SELECT set_config('application_name', %s, false)", [EXPORT_APPLICATION_NAME])
        # The votes query crosses PostgreSQL's default JIT threshold, and compiling it cost more than it
        # saved (docs/benchmarks/export.md, "JIT off for the votes read").
        copying.execute("SET jit = off")
    except BaseException:
        copying.close()
        raise
    return copying


# Pairs a prompt-key range holds, on average, when the export reads its votes range by range
# (_ranged_votes_batches): the writer holds one range's rows and the reader the next, so this bounds the
# export's memory whatever the project's size (docs/benchmarks/export.md). Smaller ranges were slower: each range
# scans the counted votes again.
RANGE_PAIRS = 40_000
# ... and fewer where answers are long: a range's prompts and answers hold about this many bytes at most (the bench's
# run about 25 MB a range, so its ranges stay at RANGE_PAIRS), so long answers do not make a range hundreds of MB.
RANGE_TEXT_BYTES = 32 << 20
ROW_WIDTH_SAMPLE = 1000  # counted pairs whose texts' length estimates a row's
# Temporary tables: they live and die with the export's COPY connection.
VOTES_TABLE = "pairwise_export_votes"
BOUNDS_TABLE = "pairwise_export_key_bounds"
# The count's setting on the COPY connection: the planner priced the gathering of the workers' partial counts
# above what they save and counted in one process, slower than two workers (docs/benchmarks/export.md).
COUNT_SETTINGS = ("SET parallel_tuple_cost = 0",)
# After the count, the ranges' settings: a range's sort fits in memory, and one process joins it, so the database
# leaves the other core to the writer.
RANGE_SETTINGS = ("SET work_mem = '64MB'", "SET max_parallel_workers_per_gather = 0")


def pairs_per_range(text_bytes_per_pair: float) -> int:
    """How many pairs a range holds: RANGE_PAIRS, or fewer when a pair's prompt and answers are long."""
    return max(1, min(RANGE_PAIRS, int(RANGE_TEXT_BYTES // max(text_bytes_per_pair, 1))))


def key_range_bounds(pairs: int, per_range: int | None = None) -> list[str]:
    """Bounds that cut prompt keys (sha256 hex) into ranges of about `per_range` pairs each: four-digit hex
    prefixes, evenly spaced in code-point order. The database sorts them again in its own collation before they are
    used (_ranged_votes_batches): not every collation sorts hex as code points do (Danish and Norwegian take "aa"
    for "å", after "z")."""
    ranges = max(1, -(-pairs // (per_range or RANGE_PAIRS)))
    return [f"{i * 0x10000 // ranges:04x}" for i in range(1, ranges)]


@contextmanager
def _ranged_votes_batches(aggregate: str, params: list) -> Iterator[Iterator[list[tuple]]]:
    """The votes query's rows with their texts, read through COPY one prompt-key range at a time, so that
    PostgreSQL joins and sorts a range while Python writes the one before.

    Through one statement the database counted, joined and sorted every pair before the first row came, with
    Python waiting; then Python wrote every row with the database waiting. Here the votes are counted once into
    a temporary table (with their pairs' prompt and answer ids), in the one snapshot (repeatable read) that
    every range then reads. A reader thread copies one range at a time (psycopg waits on the network without
    the GIL) and starts the next only when the writer has taken the last, so memory holds two ranges at most.

    The ranges give the rows of the one ordered statement, in its order: their bounds are sorted by the database in
    the collation that both the range conditions and the ORDER BY use, so consecutive ranges follow one another in
    that order, and one prompt text (one key) falls in one range.
    """
    copying = _copy_connection(psycopg.IsolationLevel.REPEATABLE_READ)
    finished = threading.Event()
    # Ranges' rows, then None, or the reader's error. may_read, not the queue, bounds what it holds: the reader
    # starts a range only once the writer has taken the one before.
    ranges: queue.Queue = queue.Queue()
    may_read = threading.Semaphore(1)
    reader: threading.Thread | None = None

    def may_read_next() -> bool:
        """Wait until the writer has taken the last range; False once the export is finished."""
        while not may_read.acquire(timeout=0.1):
            if finished.is_set():
                return False
        return not finished.is_set()

    try:
        pair, prompt, response = Pair._meta.db_table, Prompt._meta.db_table, Response._meta.db_table
        with copying.cursor() as cursor:
            for setting in COUNT_SETTINGS:
                cursor.execute(setting)
            cursor.execute(f"""
                CREATE TEMPORARY TABLE {VOTES_TABLE} AS
                SELECT v.*, p.prompt_id, p.response_a_id, p.response_b_id
                FROM ({aggregate}) v JOIN {pair} p ON p.id = v.pair_id
            """, params)
            total = cursor.rowcount
            cursor.execute(f"ANALYZE {VOTES_TABLE}")
            for setting in RANGE_SETTINGS:
                cursor.execute(setting)
            # The bounds sorted as the keys are: in a table whose column is made like Prompt.content_key, collation
            # included.
            cursor.execute(f"CREATE TEMPORARY TABLE {BOUNDS_TABLE} AS SELECT content_key FROM {prompt} WITH NO DATA")
            cursor.execute(f"""
                SELECT coalesce(avg(octet_length(pr.messages::text) + octet_length(ra.text) + octet_length(rb.text)), 0)
                FROM (SELECT prompt_id, response_a_id, response_b_id FROM {VOTES_TABLE} LIMIT %s) v
                JOIN {prompt} pr ON pr.id = v.prompt_id
                JOIN {response} ra ON ra.id = v.response_a_id
                JOIN {response} rb ON rb.id = v.response_b_id
            """, [ROW_WIDTH_SAMPLE])
            per_range = pairs_per_range(float(cursor.fetchone()[0]))
            cursor.execute(f"INSERT INTO {BOUNDS_TABLE} SELECT unnest(%s::text[])",
                           [key_range_bounds(total, per_range)])
            cursor.execute(f"SELECT DISTINCT content_key FROM {BOUNDS_TABLE} ORDER BY content_key")
            bounds = [None, *(bound for (bound,) in cursor.fetchall()), None]

        def read_ranges() -> None:
            try:
                for low, high in zip(bounds, bounds[1:], strict=False):
                    if not may_read_next():
                        return
                    where, range_params = ["TRUE"], [total]
                    if low is not None:
                        where.append("pr.content_key >= %s")
                        range_params.append(low)
                    if high is not None:
                        where.append("pr.content_key < %s")
                        range_params.append(high)
                    sql = f"""
                        SELECT {_votes_columns(texts=TEXTS, total="%s::int8")}
                        FROM {VOTES_TABLE} v
                        JOIN {prompt} pr ON pr.id = v.prompt_id
                        JOIN {response} ra ON ra.id = v.response_a_id
                        JOIN {response} rb ON rb.id = v.response_b_id
                        WHERE {" AND ".join(where)}
                        ORDER BY pr.content_key, v.pair_id
                    """
                    with copying.cursor() as cursor, cursor.copy(f"COPY ({sql}) TO STDOUT", range_params) as copy:
                        copy.set_types(list(VOTES_COLUMN_TYPES))
                        rows = list(copy.rows())
                    if rows:
                        ranges.put(rows)
                    else:
                        may_read.release()  # nothing for the writer to take
                ranges.put(None)
            except BaseException as error:  # raised again in the writer's thread
                ranges.put(error)

        reader = threading.Thread(target=read_ranges, name="export-votes-reader", daemon=True)
        reader.start()

        def batches() -> Iterator[list[tuple]]:
            while (item := ranges.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                may_read.release()
                yield item

        yield batches()
    finally:
        finished.set()
        try:
            # A range the writer no longer wants stops at once; asked again in case the reader's COPY had not
            # reached the server when the first cancel did.
            while reader is not None and reader.is_alive():
                with suppress(psycopg.Error):
                    copying.cancel_safe()
                reader.join(timeout=1)
        finally:
            copying.close()


def _drained(rows: list) -> Iterator:
    """The rows in order, each let go as it is taken: the writer's range shrinks while the reader fills the next."""
    rows.reverse()
    while rows:
        yield rows.pop()


def pair_votes_stream(*, project: Project, filters: ExportFilters, excluded_reviewers: frozenset[int] = frozenset(),
                      with_texts: bool = True, fetch_rows: int = FETCH_ROWS,
                      on_total: Callable[[int], None] | None = None) -> Iterator[PairVotes]:
    """Every pair of the project with at least one counted vote, ordered by prompt key then pair, so the
    pairs of one prompt text (under any prompt_id) come together.

    Counted votes: the current (not retracted) judgment of each original, live assignment (retests left
    out, so nobody votes twice; qualification answers left out: models.live_assignment), made under the chosen criteria versions, on the chosen days, by a
    reviewer not excluded, and (with exclude_flagged_rationales) with no rationale-check flag.
    `criteria_version` is the newest version among the pair's counted votes; `strength_a` (`strength_b`) the mean
    strength of those of its counted votes for a (for b) that gave one, None when none did.
    `on_total` is called once, before the first pair, with how many pairs the stream holds (0 when none).
    On PostgreSQL the rows come through COPY on a connection of their own (with texts, range by range:
    _ranged_votes_batches), or inside a transaction through a server-side cursor (_votes_batches).
    """
    if with_texts and _reads_through_copy():
        aggregate, params = votes_aggregate_sql(filters=filters, excluded_reviewers=excluded_reviewers,
                                                project=project, with_total=False)
        reading = _ranged_votes_batches(aggregate, params)
    else:
        sql, params = votes_sql(filters=filters, excluded_reviewers=excluded_reviewers, with_texts=with_texts,
                                project=project)
        reading = _votes_batches(sql, params, fetch_rows)
    tags_of: dict = {}
    with reading as batches:
        total_told = on_total is None
        for rows in batches:
            if not total_told:
                on_total(int(rows[0][-1]))
                total_told = True
            for (pair_id, prompt_pk, prompt_id, prompt_key, tags_json, gold_id, votes_a, votes_b, votes_tie,
                 votes_both_bad, version, strength_a, strength_b, messages, text_a, text_b, _) in _drained(rows):
                if isinstance(tags_json, str):
                    tags = tags_of.get(tags_json)
                    if tags is None:
                        if len(tags_of) >= TAGS_CACHED:
                            tags_of.clear()
                        tags = tags_of[tags_json] = orjson.loads(tags_json) or []
                else:
                    tags = tags_json or []
                yield PairVotes(
                    pair_id=pair_id, prompt_pk=prompt_pk, prompt_id=prompt_id, prompt_key=prompt_key,
                    messages=_json(messages) if messages is not None else None, tags=tags,
                    gold=gold_id is not None, votes=(int(votes_a), int(votes_b), int(votes_tie), int(votes_both_bad)),
                    criteria_version=int(version), text_a=text_a, text_b=text_b,
                    strength_a=strength_a, strength_b=strength_b,
                )
        if not total_told:
            on_total(0)


def qualification_answers_left_out(*, project: Project, filters: ExportFilters,
                                   excluded_reviewers: frozenset[int] = frozenset()) -> int:
    """How many answers of the qualification round the export's filters would otherwise have counted as votes."""
    sql, params = votes_aggregate_sql(filters=filters, excluded_reviewers=excluded_reviewers, project=project,
                                      live=False, with_total=False)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(sum(votes_a + votes_b + votes_tie + votes_both_bad), 0) FROM ({sql}) counted",
                       params)
        return int(cursor.fetchone()[0])


def reviewer_ids_by_username(*, usernames: list[str]) -> frozenset[int]:
    return frozenset(get_user_model().objects.filter(username__in=usernames).values_list("id", flat=True))


def exports_for_project(*, project: Project) -> QuerySet[Export]:
    return Export.objects.filter(project=project).select_related("created_by", "cancelled_by").order_by("-id")


def export_get(*, export_id: int) -> Export | None:
    return Export.objects.select_related("project", "created_by", "cancelled_by").filter(pk=export_id).first()


def latest_done_exports() -> dict[int, dict]:
    """{project id: its newest finished export's id, time and train/test counts}."""
    newest = (Export.objects.filter(status=Export.Status.DONE).values("project_id")
              .annotate(newest=Max("pk")).values("newest"))
    return {
        row["project_id"]: {"id": row["pk"], "created_at": row["created_at"],
                            "train": (row["counts"] or {}).get("train"), "test": (row["counts"] or {}).get("test")}
        for row in Export.objects.filter(pk__in=newest).values("pk", "project_id", "created_at", "counts")
    }

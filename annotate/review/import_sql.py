"""The import's writes, set-based: a file goes through temporary staging tables a chunk of lines at a
time, and reaches the review tables in a few INSERT ... SELECT statements per chunk, in one transaction.

Why not the ORM row by row: that costs a query or two per response, many times slower on PostgreSQL
(docs/benchmarks/import.md). Here the database does the lookups, conflict checks and pairing a chunk at a time, and
Python holds one chunk of lines at a time, so memory does not grow with the file; neither does the
database's, since foreign keys are checked at the end of each statement rather than kept for the
commit. On PostgreSQL the staging rows go in by COPY (psycopg's `cursor.copy`); on SQLite, the embedded
default, by executemany; the SQL after that is the same on both but for two spellings (`_sha256_hex`,
the tag merge).

All or nothing: a chunk is written as soon as it is staged and checked, but the file is only kept if, at
its end, no line had an error, no prompt_id came twice (every id read is kept in an indexed staging
table to find those) and no known prompt_id came with another text; otherwise the transaction is rolled
back. Writing stops at the first problem found, so a bad file costs little more than reading it.

Imports into one project take turns (a transaction-scoped advisory lock on PostgreSQL, SQLite's single
writer): the pair cap counts the prompt's pairs and the changed-prompt check reads the stored prompts.

`items_import` (checked items) and `items_import_file` (a JSONL file, streamed) are the import's entry points.
"""

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice

import orjson
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from annotate.review.importing import MAX_ERRORS, ImportedItem, ImportRejected, errors_in_order, items_read
from annotate.review.models import Pair, Project, Prompt, Response

CHUNK_ITEMS = 5000  # items staged and written at a time: bounds memory, amortises each statement
# pg_advisory_xact_lock(key1, key2): key1 says the lock is the import's, key2 is the project.
IMPORT_LOCK_KEY = 0x50574932  # "PWI2"; the reviewer queue's lock is "PWI1"
PROMPTS, RESPONSES, IDS = "import_prompt_stage", "import_response_stage", "import_id_stage"
PROMPT_T, RESPONSE_T, PAIR_T = Prompt._meta.db_table, Response._meta.db_table, Pair._meta.db_table
# PostgreSQL settings while chunks are written (SET LOCAL: the transaction's only; restored after them).
CHUNK_SETTINGS = {
    # Every join here is a chunk's few thousand rows against an index. The statistics of the tables
    # written lag behind an import in progress, and a plan made on them would hash or sort a whole table
    # for every chunk; without hash and merge joins each join is a lookup per row.
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    # Nor compile each chunk's statements: on those overgrown estimates, JIT compiling takes longer than
    # running them.
    "jit": "off",
    "work_mem": "16MB",  # a chunk's file-order sorts, texts included, stay in memory
}
# How long a refresh of the statistics waits for another transaction's ANALYZE of the same tables (a
# concurrent import into another project holds them until it commits) before going without.
ANALYZE_LOCK_WAIT = "2s"
LOCK_NOT_AVAILABLE = "55P03"


@dataclass(frozen=True)
class ImportSummary:
    prompts_created: int
    prompts_existing: int
    responses_created: int
    pairs_created: int


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _create_stage(cursor) -> None:
    """The chunk's prompts and responses (emptied for each chunk) and every prompt_id read so far."""
    json_type, on_commit = ("jsonb", " ON COMMIT DROP") if _postgres() else ("text", "")
    for table in (PROMPTS, RESPONSES, IDS):
        cursor.execute(f"DROP TABLE IF EXISTS {table}")  # an earlier import's, in the same outer transaction
    cursor.execute(f"""
        CREATE TEMP TABLE {PROMPTS} (line integer NOT NULL, external_id text NOT NULL, messages {json_type} NOT NULL,
                                     tags {json_type} NOT NULL, content_key text NOT NULL, gold integer,
                                     gold_reason text NOT NULL DEFAULT '', prompt_pk bigint){on_commit}""")
    cursor.execute(f"""
        CREATE TEMP TABLE {RESPONSES} (line integer NOT NULL, position integer NOT NULL, text text NOT NULL,
                                       text_sha256 text NOT NULL, model text NOT NULL,
                                       model_version text NOT NULL){on_commit}""")
    cursor.execute(f"CREATE TEMP TABLE {IDS} (line integer NOT NULL, external_id text NOT NULL){on_commit}")
    cursor.execute(f"CREATE INDEX {PROMPTS}_line ON {PROMPTS} (line)")
    cursor.execute(f"CREATE INDEX {IDS}_id ON {IDS} (external_id, line)")
    cursor.execute(f"CREATE INDEX {RESPONSES}_line ON {RESPONSES} (line, position)")


@dataclass(frozen=True, slots=True)
class _Chunk:
    """A chunk of checked lines as staging rows."""

    prompts: list[tuple]
    responses: list[tuple]


def _chunks(items: Iterable[ImportedItem]) -> Iterator[_Chunk]:
    items = iter(items)
    while chunk := list(islice(items, CHUNK_ITEMS)):
        yield _Chunk(
            prompts=[(item.line, item.prompt_id, orjson.dumps(item.messages).decode(), orjson.dumps(item.tags).decode(),
                      item.prompt_key, item.gold_preferred, item.gold_reason) for item in chunk],
            responses=[(item.line, position, response.text, response.text_sha256, response.model,
                        response.model_version) for item in chunk for position, response in enumerate(item.responses)],
        )


def _read_ahead(chunks: Iterator[_Chunk]) -> Iterator[_Chunk]:
    """`chunks`, the next one read and checked in a thread while the database stores this one: reading
    holds the interpreter, but waiting on the database lets it go, so the two overlap."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-reader") as reader:
        upcoming = reader.submit(next, chunks, None)
        while (chunk := upcoming.result()) is not None:
            upcoming = reader.submit(next, chunks, None)
            yield chunk


def _stage_chunk(cursor, chunk: _Chunk) -> None:
    if _postgres():
        for table in (PROMPTS, RESPONSES):
            cursor.execute(f"TRUNCATE {table}")
        raw = cursor.cursor  # psycopg's own cursor, under Django's wrapper
        with raw.copy(f"COPY {PROMPTS} (line, external_id, messages, tags, content_key, gold, gold_reason) "
                      "FROM STDIN") as copy:
            for row in chunk.prompts:
                copy.write_row(row)
        with raw.copy(f"COPY {RESPONSES} (line, position, text, text_sha256, model, model_version) FROM STDIN") as copy:
            for row in chunk.responses:
                copy.write_row(row)
    else:
        for table in (PROMPTS, RESPONSES):
            cursor.execute(f"DELETE FROM {table}")
        cursor.executemany(f"INSERT INTO {PROMPTS} (line, external_id, messages, tags, content_key, gold, gold_reason) "
                           "VALUES (%s, %s, %s, %s, %s, %s, %s)", chunk.prompts)
        cursor.executemany(f"INSERT INTO {RESPONSES} VALUES (%s, %s, %s, %s, %s, %s)", chunk.responses)
    cursor.execute(f"INSERT INTO {IDS} (line, external_id) SELECT line, external_id FROM {PROMPTS}")


def _repeated_ids(cursor) -> list[tuple[int, str]]:
    """The chunk's lines that repeat the prompt_id of an earlier line, in this chunk or any before it.

    An index lookup per line among the ids read so far, chunk by chunk: one check of the whole file at
    its end would sort or hash every id at once.
    """
    cursor.execute(f"""
        SELECT line, external_id, first_line
        FROM (SELECT s.line, s.external_id,
                     (SELECT MIN(i.line) FROM {IDS} i WHERE i.external_id = s.external_id) AS first_line
              FROM {PROMPTS} s) seen
        WHERE first_line < line
        ORDER BY line
        LIMIT {MAX_ERRORS}""")
    return [(line, f"line {line}: prompt_id {external_id!r} already appears on line {first_line}")
            for line, external_id, first_line in cursor.fetchall()]


# Lookups of the chunk's prompt_ids go through prompt_external_id_unique one line at a time, as scalar
# subqueries that a planner cannot turn into joins: a join's plan would rest on statistics that an import
# in progress has outgrown, and scan the whole table for every chunk.
_STORED = f"FROM {PROMPT_T} p WHERE p.project_id = %s AND p.external_id = s.external_id"


def _changed_prompts(cursor, project_id: int) -> list[tuple[int, str]]:
    cursor.execute(f"""
        SELECT s.line, s.external_id FROM {PROMPTS} s WHERE (SELECT p.content_key {_STORED}) <> s.content_key
        ORDER BY s.line LIMIT {MAX_ERRORS}""", [project_id])
    return [(line, f"line {line}: prompt_id {external_id!r} already exists with a different prompt; "
                   "give the new prompt its own prompt_id")
            for line, external_id in cursor.fetchall()]


def _resolve_prompts(cursor, project_id: int) -> None:
    """Note each staged line's prompt row, once every prompt of the chunk is stored."""
    cursor.execute(f"UPDATE {PROMPTS} AS s SET prompt_pk = (SELECT p.id {_STORED})", [project_id])


def _merge_tags(cursor) -> None:
    """A known prompt keeps its tags and gains the file's new ones, in the file's order."""
    if _postgres():
        cursor.execute(f"""
            UPDATE {PROMPT_T} p
            SET tags = p.tags || (SELECT jsonb_agg(t.value ORDER BY t.position)
                                  FROM jsonb_array_elements(s.tags) WITH ORDINALITY AS t(value, position)
                                  WHERE NOT p.tags @> jsonb_build_array(t.value))
            FROM {PROMPTS} s
            WHERE p.id = s.prompt_pk AND s.tags <> '[]' AND NOT p.tags @> s.tags""")
        return
    # SQLite: its JSON functions keep no order in an aggregate, so the few prompts concerned are merged here.
    cursor.execute(f"""
        SELECT p.id, p.tags, s.tags FROM {PROMPTS} s JOIN {PROMPT_T} p ON p.id = s.prompt_pk
        WHERE s.tags <> '[]'""")
    changed = []
    for prompt_id, stored, given in cursor.fetchall():  # one chunk's lines at most
        stored = orjson.loads(stored)
        added = [tag for tag in orjson.loads(given) if tag not in stored]
        if added:
            changed.append((orjson.dumps(stored + added).decode(), prompt_id))
    cursor.executemany(f"UPDATE {PROMPT_T} SET tags = %s WHERE id = %s", changed)


def _insert_prompts(cursor, project_id: int, now) -> int:
    cursor.execute(f"""
        INSERT INTO {PROMPT_T} (project_id, external_id, messages, tags, content_key, created_at)
        SELECT %s, s.external_id, s.messages, s.tags, s.content_key, %s
        FROM {PROMPTS} s
        WHERE true
        ORDER BY s.line
        ON CONFLICT DO NOTHING""", [project_id, now])  # a known prompt
    return cursor.rowcount


def _insert_responses(cursor, now) -> int:
    """Answers the prompt does not have yet (an answer: model, model_version and text), in file order."""
    cursor.execute(f"""
        INSERT INTO {RESPONSE_T} (prompt_id, text, text_sha256, model, model_version, created_at)
        SELECT s.prompt_pk, r.text, r.text_sha256, r.model, r.model_version, %s
        FROM {RESPONSES} r JOIN {PROMPTS} s ON s.line = r.line
        WHERE true
        ORDER BY r.line, r.position
        ON CONFLICT DO NOTHING""", [now])  # a known answer, or one given twice in a line
    return cursor.rowcount


def _set_gold(cursor) -> None:
    cursor.execute(f"""
        UPDATE {PROMPT_T} SET gold_response_id = g.response_id, gold_reason = g.reason
        FROM (SELECT s.prompt_pk, s.gold_reason AS reason,
                     (SELECT e.id FROM {RESPONSE_T} e WHERE e.prompt_id = s.prompt_pk AND e.model = r.model
                      AND e.model_version = r.model_version AND e.text_sha256 = r.text_sha256) AS response_id
              FROM {PROMPTS} s JOIN {RESPONSES} r ON r.line = s.line AND r.position = s.gold) g
        WHERE {PROMPT_T}.id = g.prompt_pk
          AND ({PROMPT_T}.gold_response_id IS NULL OR {PROMPT_T}.gold_response_id <> g.response_id
               OR {PROMPT_T}.gold_reason <> g.reason)""")


def _sha256_hex(expression: str) -> str:
    # SQLite has no sha256 of its own; Django registers SHA256 (hex) on every SQLite connection.
    return f"encode(sha256(convert_to({expression}, 'UTF8')), 'hex')" if _postgres() else f"SHA256({expression})"


def _insert_pairs(cursor, project: Project, now) -> int:
    """Pair every two answers of each prompt in the file whose texts differ, where not paired yet.

    Under the project's cap a prompt gets at most `max_pairs_per_prompt` pairs in all: those whose
    sha256 of (prompt_id, the two texts' sha256s in sorted order) sorts first. A function of the prompt
    and the two texts only, so the same prompt and answers give the same pairs whatever order the file
    listed them in, in any project.
    """
    candidates = f"""
        SELECT s.prompt_pk AS prompt_id, a.id AS a_id, b.id AS b_id, s.line AS line, s.external_id AS external_id,
               a.text_sha256 AS sha_a, b.text_sha256 AS sha_b
        FROM {PROMPTS} s
        JOIN {RESPONSE_T} a ON a.prompt_id = s.prompt_pk
        JOIN {RESPONSE_T} b ON b.prompt_id = s.prompt_pk AND b.id > a.id AND b.text_sha256 <> a.text_sha256"""
    insert = f"INSERT INTO {PAIR_T} (project_id, prompt_id, response_a_id, response_b_id, assigned_count, created_at)"
    if project.max_pairs_per_prompt is None:
        cursor.execute(f"""
            {insert}
            SELECT %s, c.prompt_id, c.a_id, c.b_id, 0, %s FROM ({candidates}) c
            WHERE true
            ORDER BY c.line, c.a_id, c.b_id
            ON CONFLICT DO NOTHING""", [project.pk, now])  # a pair made before
        return cursor.rowcount
    low, high = ("LEAST", "GREATEST") if _postgres() else ("MIN", "MAX")
    choice = _sha256_hex(f"c.external_id || '|' || {low}(c.sha_a, c.sha_b) || {high}(c.sha_a, c.sha_b)")
    cursor.execute(f"""
        {insert}
        SELECT %s, ranked.prompt_id, ranked.a_id, ranked.b_id, 0, %s
        FROM (SELECT c.prompt_id, c.a_id, c.b_id, c.line,
                     ROW_NUMBER() OVER (PARTITION BY c.prompt_id ORDER BY {choice}, c.a_id, c.b_id) AS rank,
                     (SELECT COUNT(*) FROM {PAIR_T} e WHERE e.prompt_id = c.prompt_id) AS existing
              FROM ({candidates}) c
              WHERE NOT EXISTS (SELECT 1 FROM {PAIR_T} e WHERE e.response_a_id = c.a_id AND e.response_b_id = c.b_id)
             ) ranked
        WHERE ranked.rank <= %s - ranked.existing
        ORDER BY ranked.line, ranked.a_id, ranked.b_id
        ON CONFLICT DO NOTHING""", [project.pk, now, project.max_pairs_per_prompt])
    return cursor.rowcount


def _planned_prompts(cursor, project_id: int) -> float:
    """How many prompts the planner's statistics say the project holds."""
    cursor.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {PROMPT_T} WHERE project_id = %s", [project_id])
    plan = cursor.fetchone()[0]
    return (orjson.loads(plan) if isinstance(plan, str | bytes) else plan)[0]["Plan"]["Plan Rows"]


# What ANALYZE refreshes: during an import, the prompts' columns its lookups go by (a tenth of
# what all three tables take; docs/benchmarks/import.md); after it, every table it wrote. Both begin with the prompts,
# so two imports never wait on each other in a circle.
LOOKUP_STATISTICS = f"{PROMPT_T} (project_id, external_id)"
IMPORTED_TABLES = f"{PROMPT_T}, {RESPONSE_T}, {PAIR_T}"


def _refresh_statistics(cursor, tables: str) -> None:
    """ANALYZE `tables`; nothing, if another transaction holds them past ANALYZE_LOCK_WAIT.

    Inside the import's transaction ANALYZE counts the rows not committed yet, and keeps the tables from
    other ANALYZEs and VACUUMs (not from reads or writes) until the commit.
    """
    cursor.execute("SELECT current_setting('lock_timeout')")
    lock_timeout = cursor.fetchone()[0]
    try:
        with transaction.atomic():  # a savepoint: a lock not granted undoes only this
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [ANALYZE_LOCK_WAIT])
            cursor.execute(f"ANALYZE {tables}")
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [lock_timeout])
    except OperationalError as error:
        if getattr(error.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise


@dataclass
class _StatisticsWatch:
    """Refreshes the statistics, on PostgreSQL, once an import has stored more than twice the prompts
    that they say the project holds.

    Statistics taken of a table of a few rows (after a small import) say that every column is unique,
    project_id included: a lookup by (project_id, external_id) then looks as cheap through
    prompt_content_key, which reads every prompt of the project for each line, as through
    prompt_external_id_unique (10,000 prompts after one: 12 times as long as into a new project).
    Refreshed each time the import has doubled what it stored, so a 1M import refreshes at most 8 times.
    """

    project_id: int
    created: int = 0
    created_at_refresh: int = 0

    def prompts_created(self, cursor, count: int) -> None:
        self.created += count
        if not (_postgres() and count and self.created > 2 * self.created_at_refresh):
            return
        if self.created > 2 * _planned_prompts(cursor, self.project_id):
            _refresh_statistics(cursor, LOOKUP_STATISTICS)
            self.created_at_refresh = self.created  # also when refused: the next try waits for the next doubling


def _write_chunk(cursor, project: Project, now, statistics: _StatisticsWatch) -> tuple[int, int, int]:
    """Store the staged chunk; returns (prompts, responses, pairs) created."""
    prompts = _insert_prompts(cursor, project.pk, now)
    statistics.prompts_created(cursor, prompts)  # before the lookups of the prompts just stored
    _resolve_prompts(cursor, project.pk)
    _merge_tags(cursor)  # a new prompt has the file's tags already: only known ones change
    responses = _insert_responses(cursor, now)
    _set_gold(cursor)
    return prompts, responses, _insert_pairs(cursor, project, now)


def _analyze_imported_tables() -> None:
    """Fresh statistics once a bulk import has committed. Until autovacuum gets round to it, the planner
    takes the new rows for a handful and plans the reviewer queue's count of open pairs as a sort of every
    pair, hundreds of times slower a request (docs/benchmarks/import.md)."""
    with transaction.atomic(), connection.cursor() as cursor:
        _refresh_statistics(cursor, IMPORTED_TABLES)  # when another import holds them, its own refresh will do


def items_store(*, project: Project, items: Iterable[ImportedItem], read_errors: list[tuple[int, str]],
                empty_is_error: bool) -> ImportSummary:
    """Stage and store `items` a chunk at a time; all or nothing.

    `read_errors` is the reader's list of (line, 'line N: reason'), filled while `items` is consumed. Any
    error there, a prompt_id given twice, or a known prompt_id with a different prompt rejects the file
    (ImportRejected, listing them in that order of precedence) and nothing is stored.
    """
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    staged = prompts_created = responses_created = pairs_created = 0
    repeated: list[tuple[int, str]] = []
    changed: list[tuple[int, str]] = []
    statistics = _StatisticsWatch(project.pk)
    with transaction.atomic(), connection.cursor() as cursor:
        if _postgres():
            cursor.execute("SELECT pg_advisory_xact_lock(%s::int4, %s::int4)", [IMPORT_LOCK_KEY, project.pk])
            cursor.execute(f"SELECT {', '.join(f'current_setting({name!r})' for name in CHUNK_SETTINGS)}")
            settings_before = dict(zip(CHUNK_SETTINGS, cursor.fetchone(), strict=True))
            for name, value in CHUNK_SETTINGS.items():
                cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
            # Check foreign keys statement by statement: deferred to the commit, the database would keep
            # every new row's check in memory until then. (Rolled back with the import if it fails.)
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        _create_stage(cursor)
        for chunk in _read_ahead(_chunks(items)):
            _stage_chunk(cursor, chunk)
            staged += len(chunk.prompts)
            # Problems in their order of precedence; once there is one, nothing more is written.
            if len(repeated) < MAX_ERRORS:
                repeated += _repeated_ids(cursor)
            if read_errors or repeated:
                continue
            if len(changed) < MAX_ERRORS:
                changed += _changed_prompts(cursor, project.pk)
            if not changed:
                created = _write_chunk(cursor, project, now, statistics)
                prompts_created, responses_created, pairs_created = (
                    total + new for total, new in zip((prompts_created, responses_created, pairs_created), created,
                                                      strict=True))
        if _postgres():
            for name, value in settings_before.items():  # the rest of the caller's transaction plans as usual
                cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
        errors = errors_in_order([*read_errors, *repeated])
        if not errors and not staged and empty_is_error:
            errors = ["line 1: the file has no items"]
        errors = errors or errors_in_order(changed)
        if errors:
            raise ImportRejected(errors)
        for table in (PROMPTS, RESPONSES, IDS):
            cursor.execute(f"DROP TABLE {table}")
        if _postgres():
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")  # Django's foreign keys' own setting, for the caller
            if prompts_created or pairs_created:
                transaction.on_commit(_analyze_imported_tables)
    return ImportSummary(prompts_created, staged - prompts_created, responses_created, pairs_created)


def items_import(*, project: Project, items: Iterable[ImportedItem]) -> ImportSummary:
    """Store checked items (from `items_parse`): new prompts, new responses, new pairs; all or nothing.

    Re-importing a prompt_id adds only responses not already there (a response is its model, version
    and text) and pairs them with the old ones; its new tags are added, its gold set as given. A
    prompt_id that exists with a different prompt text rejects the whole file, since judgments already
    made would lose their meaning. Identical texts are never paired; the project's pair cap holds.
    """
    return items_store(project=project, items=items, read_errors=[], empty_is_error=False)


def items_import_file(*, project: Project, lines: Iterable[str | bytes]) -> ImportSummary:
    """Read, check and store an import file (JSONL lines) as `items_import` does, in one streaming pass.

    Memory does not grow with the file. ImportRejected lists every problem as 'line N: reason', and
    then nothing is stored.
    """
    read_errors: list[tuple[int, str]] = []
    return items_store(project=project, items=items_read(lines, read_errors), read_errors=read_errors,
                       empty_is_error=True)

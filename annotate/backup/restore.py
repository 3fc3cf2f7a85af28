"""restore_read: a project backup back into a database that does not hold the project (docs/backup.md).

The file is read twice. The first pass checks it whole and writes nothing: the header, every line's JSON,
the counts and the sha256 of the closing line. The second inserts every row under its own id in one
transaction: any error undoes everything, and the error names the line. On PostgreSQL the rows are
stored with COPY, their values converted as Django's deserializer converts them; any row that COPY or the
conversion refuses goes through the deserializer itself, so its error is the one a row-by-row restore gives.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from threading import Event, Thread
from typing import Any

import orjson
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core import serializers
from django.core.exceptions import FieldDoesNotExist, ObjectDoesNotExist, ValidationError
from django.core.management.color import no_style
from django.core.serializers.base import DeserializationError, DeserializedObject
from django.db import DatabaseError, IntegrityError, connection, connections, models, transaction
from django.db.migrations.recorder import MigrationRecorder

from annotate.backup.contents import (
    FORMAT,
    PROJECT_ROWS,
    VERSION,
    BackupError,
    LineHasher,
    project_models,
)
from annotate.review.models import Project
from annotate.review.queue_sql import pair_votes_recount
from annotate.roles import ROLES

KNOWN_MODELS = {label for label, _ in PROJECT_ROWS}
BATCH_ROWS = 500  # rows a single INSERT stores: 2,000 was 5% faster but its peak memory grew with the backup
COPY_ROWS = 2000  # rows a single COPY stores: their records are kept until it ends, for the row-by-row redo
READ_AHEAD_BATCHES = 2  # COPY batches read and converted ahead of the one being stored
# What storing a row can raise when the row itself is wrong: the line is named, the file called damaged.
ROW_ERRORS = (DeserializationError, FieldDoesNotExist, ValidationError, ObjectDoesNotExist, ValueError, TypeError,
              LookupError, DatabaseError)


@dataclass
class CheckedBackup:
    """What the first pass found: the header, the users to match or create, how many rows of each model."""

    header: dict
    users: list[dict] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)


def _lines(path: Path) -> Iterator[tuple[int, bytes, dict]]:
    """(line number, raw bytes, parsed record) of every line; a line that is not one JSON object is an error."""
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if not raw.endswith(b"\n"):
                raise BackupError(f"{path}: line {number} is cut off (no line end): the file is truncated; "
                                  "make the backup again or use a complete copy")
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError as error:
                raise BackupError(f"{path}: line {number}: not JSON ({error}); the file is damaged") from None
            if not isinstance(record, dict):
                raise BackupError(f"{path}: line {number}: not a JSON object; the file is damaged")
            yield number, raw, record


def _check_header(path: Path, record: dict) -> None:
    if record.get("format") != FORMAT:
        raise BackupError(f"{path}: line 1 is not the header of a Pairwise project backup "
                          f"(no \"format\": \"{FORMAT}\"); give a file made by manage.py backup_project")
    if not isinstance(record.get("version"), int) or not 1 <= record["version"] <= VERSION:
        raise BackupError(f"{path}: line 1: backup format version {record.get('version')!r} is not one this "
                          f"Pairwise reads (1 to {VERSION}); restore it with the Pairwise version that made it")
    if not isinstance(record.get("project"), str) or not isinstance(record.get("counts"), dict):
        raise BackupError(f"{path}: line 1: the header has no project slug or no counts; the file is damaged")


def backup_check(path: Path) -> CheckedBackup:
    """The first pass: the whole file checked, nothing written. Raises BackupError naming the line."""
    if not path.is_file():
        raise BackupError(f"{path}: no such file")
    hasher, checked, closing, rows_started = LineHasher(), None, None, False
    for number, raw, record in _lines(path):
        if closing is not None:
            raise BackupError(f"{path}: line {number}: more lines after the closing line {closing}; "
                              "the file is damaged (two backups joined?)")
        if number == 1:
            _check_header(path, record)
            checked = CheckedBackup(header=record)
        elif "end" in record:
            end = record["end"]
            if not isinstance(end, dict) or end.get("lines") != hasher.lines or end.get("sha256") != hasher.digest.hexdigest():
                raise BackupError(f"{path}: line {number}: the closing line's count or sha256 does not match the "
                                  "lines before it: the file was changed or damaged after it was written")
            closing = number
            continue
        elif "user" in record:
            user = record["user"]
            if rows_started or not isinstance(user, dict) or not isinstance(user.get("username"), str):
                raise BackupError(f"{path}: line {number}: a user record out of place or without a username; "
                                  "the file is damaged")
            checked.users.append(user)
            checked.counts["users"] += 1
        elif record.get("model") in KNOWN_MODELS and isinstance(record.get("fields"), dict):
            rows_started = True
            checked.counts[record["model"]] += 1
            if record["model"] == "review.project" and record["fields"].get("slug") != checked.header["project"]:
                raise BackupError(f"{path}: line {number}: the project's slug is not the header's "
                                  f"{checked.header['project']!r}; the file is damaged")
        else:
            raise BackupError(f"{path}: line {number}: not a record of a project backup (a row of "
                              f"{record.get('model')!r}?); the file is damaged")
        hasher.add(raw)
    if checked is None:
        raise BackupError(f"{path}: the file is empty; give a file made by manage.py backup_project")
    if closing is None:
        raise BackupError(f"{path}: the file ends at line {hasher.lines} without its closing line: it is truncated; "
                          "make the backup again or use a complete copy")
    for label in sorted(set(checked.header["counts"]) | set(checked.counts)):
        expected = checked.header["counts"].get(label, 0)
        if checked.counts[label] != expected:
            raise BackupError(f"{path}: the header counts {expected} {label} row(s) and the file holds "
                              f"{checked.counts[label]}; the file is damaged")
    return checked


def _check_target(path: Path, checked: CheckedBackup) -> None:
    slug = checked.header["project"]
    if Project.objects.filter(slug=slug).exists():
        raise BackupError(f"{path}: project {slug!r} already exists in this database; restore into a database "
                          "without it (nothing was written)")
    applied = MigrationRecorder(connection).applied_migrations()
    for app, name in sorted((checked.header.get("schema") or {}).items()):
        if (app, name) not in applied:
            raise BackupError(f"{path}: the backup was made at migration {app}.{name}, which this database does not "
                              "have; run manage.py migrate with the Pairwise version that made it, then restore")


def _users_create(users: list[dict]) -> tuple[int, int]:
    """Create the users this database lacks (no usable password, their roles); returns (created, matched).

    A user who already exists is matched by username and left as they are, roles included.
    """
    user_model, created = get_user_model(), 0
    groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
    for user in users:
        if user_model._default_manager.filter(username=user["username"]).exists():
            continue
        roles = [role for role in user.get("roles", []) if role in ROLES]
        new = user_model(username=user["username"], is_active=bool(user.get("is_active", True)),
                         is_staff="admin" in roles)
        new.set_unusable_password()
        new.save()
        new.groups.add(*[groups[role] for role in roles])
        created += 1
    return created, len(users) - created


def _user_fields(label: str) -> list[str]:
    """The names of a model's foreign keys to the user's primary key: a backup writes them as ["username"]."""
    user_model = get_user_model()
    return [field.name for field in apps.get_model(label)._meta.concrete_fields
            if field.many_to_one and field.related_model is user_model and field.target_field.primary_key]


def _rows(path: Path, position: list[int], user_pks: dict[str, int]) -> Iterator[dict]:
    """The row records, in file order; `position[0]` is the line of the one being read.

    A user reference naming one of the backup's users becomes that user's id here, so the deserializer
    looks up no user per row; any other reference is left for it to resolve, or to refuse as before.
    """
    user_fields: dict[str, list[str]] = {}
    for number, _, record in _lines(path):
        if "model" in record:
            position[0] = number
            if record["model"] not in user_fields:
                user_fields[record["model"]] = _user_fields(record["model"])
            values = record["fields"]
            for name in user_fields[record["model"]]:
                key = values.get(name)
                if isinstance(key, list) and len(key) == 1 and isinstance(key[0], str) and key[0] in user_pks:
                    values[name] = user_pks[key[0]]
            yield record


def _user_pks(users: list[dict]) -> dict[str, int]:
    """{username: id} here of the backup's users, all of whom exist once _users_create has run."""
    user_model = get_user_model()
    names = [user["username"] for user in users]
    return dict(user_model._default_manager.filter(**{f"{user_model.USERNAME_FIELD}__in": names})
                .values_list(user_model.USERNAME_FIELD, "pk"))


def _rows_insert(batch: list[tuple[int, DeserializedObject]], position: list[int]) -> None:
    """Store rows of one model in one INSERT, each under its own id; a batch that fails is stored again row by
    row, so the error names the exact line, as a row-by-row restore would.

    The INSERT is the one a deserialized row's save() makes (Model.save_base with raw=True), for many rows:
    raw keeps every value as the backup holds it (auto_now_add is not applied) and, like save_base, it runs
    neither the model's save() nor save signals. bulk_create would set created_at anew.
    """
    if not batch:
        return
    model = type(batch[0][1].object)
    fields = [field for field in model._meta.local_concrete_fields if not field.generated]
    size = max(1, connection.ops.bulk_batch_size(fields, batch))  # SQLite caps the values in one statement
    for start in range(0, len(batch), size):
        chunk = batch[start:start + size]
        try:
            with transaction.atomic():
                model._base_manager._insert([row.object for _, row in chunk], fields=fields, using=connection.alias,
                                            raw=True)
        except ROW_ERRORS:
            for number, row in chunk:
                position[0] = number
                with transaction.atomic():
                    row.save(force_insert=True)
        else:
            for number, row in chunk:  # what DeserializedObject.save does after its INSERT
                position[0] = number
                for accessor_name, object_list in (row.m2m_data or {}).items():
                    getattr(row.object, accessor_name).set(object_list)
                row.m2m_data = None
    batch.clear()


def _rows_deserialize(path: Path, position: list[int], user_pks: dict[str, int]) -> None:
    """Every row of the backup stored in file order: deserialized one by one (an error names its line), inserted
    in batches of one model. A row without an id is saved alone, so the database numbers it as before.
    The way on databases other than PostgreSQL."""
    batch: list[tuple[int, DeserializedObject]] = []
    rows = serializers.deserialize("python", _rows(path, position, user_pks), handle_forward_references=False)
    while True:
        try:
            row = next(rows, None)
        except ROW_ERRORS:
            # A damaged line: the rows before it are stored first, so an earlier row's error is the one named.
            number = position[0]
            _rows_insert(batch, position)
            position[0] = number
            raise
        if row is None:
            break
        number = position[0]
        if batch and (type(row.object) is not type(batch[0][1].object) or len(batch) >= BATCH_ROWS):
            _rows_insert(batch, position)
        if row.object.pk is None:
            _rows_insert(batch, position)
            position[0] = number
            row.save(force_insert=True)
        else:
            batch.append((number, row))
    _rows_insert(batch, position)



# Django's own field classes whose to_python returns a value of this type unchanged, and whose database
# form is that value: such a value needs no conversion at all (a custom subclass is converted in full).
TO_PYTHON_KEEPS = ((models.BooleanField, bool), (models.IntegerField, int), (models.FloatField, float),
                   (models.CharField, str), (models.TextField, str))
# A time as Django's serializer writes it, which PostgreSQL reads as Python does: sent as it is written, as
# formatting the parsed time again (datetime.isoformat) takes several times as long as parsing it.
RFC3339_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{6})?[+-]\d\d:\d\d")


class RowNotPlain(Exception):
    """A value COPY is not given as is (a natural key, a naive time): the deserializer stores that row."""


class NoType:
    """The type of no value: a converter whose values all need converting keeps values of this type."""


def _copy_converter(field, database) -> tuple[type, Callable[[Any], Any]]:
    """How `field`'s value in a backup becomes the value COPY stores: (a type whose values are stored as they
    are, the converter of any other value). That is the deserializer's conversion (to_python, a foreign key's
    by its target field), then the value's database form, as a raw INSERT stores it (no pre_save, so
    auto_now_add keeps the backup's time). COPY's text format leaves each value's final check to the
    database's own input functions, as an INSERT's parameters do."""
    target = field.target_field if field.is_relation else field
    to_python = target.to_python
    if field.is_relation:
        def to_python(value, target_to_python=to_python):
            if value is not None and type(value) is not int:
                raise RowNotPlain  # a natural key, or another form the deserializer resolves or refuses
            return target_to_python(value)
    if type(target).__module__.startswith("django.db."):
        for field_class, kind in TO_PYTHON_KEEPS:
            if isinstance(target, field_class):
                return kind, to_python
        if isinstance(target, models.UUIDField):
            # Any text both uuid.UUID and PostgreSQL read holds the same 32 hex digits.
            return NoType, lambda value: value if to_python(value) is None or type(value) is str else str(
                to_python(value))
        if isinstance(target, models.DateTimeField) and settings.USE_TZ:
            def datetime_text(value):
                parsed = to_python(value)
                if parsed is not None and parsed.utcoffset() is None:
                    raise RowNotPlain  # Django makes it aware in the default time zone, with a warning
                if parsed is None or type(value) is str and RFC3339_TIME.fullmatch(value):
                    return value
                return parsed.isoformat()
            return NoType, datetime_text
    return NoType, lambda value: field.get_db_prep_save(to_python(value), database)


@dataclass
class TableCopy:
    """One model's rows as COPY stores them: the statement, and how each record's values become a row."""

    table: str
    statement: str
    names: frozenset[str]  # the field names a record holds: every concrete field but the primary key
    pk: Callable[[Any], Any]
    # (field name, type kept as it is, converter) in the statement's column order (see _copy_converter)
    stored: list[tuple[str, type, Callable[[Any], Any]]]
    checked: list[tuple[str, type, Callable[[Any], Any]]]  # generated fields: converted, not stored

    @classmethod
    def of(cls, model) -> TableCopy | None:
        """None for a model COPY does not store alone (one inheriting its table from a parent). The converters
        hold this thread's database connection: they are called in another (_read_ahead), and query nothing."""
        meta, database = model._meta, connections[connection.alias]
        if meta.parents:
            return None
        fields = [field for field in meta.local_concrete_fields if not field.primary_key]
        quote = connection.ops.quote_name
        columns = [meta.pk.column] + [field.column for field in fields if not field.generated]
        return cls(table=meta.db_table, statement=f"COPY {quote(meta.db_table)} ({', '.join(map(quote, columns))}) FROM STDIN",
                   names=frozenset(field.name for field in fields), pk=_copy_converter(meta.pk, database)[1],
                   stored=[(field.name, *_copy_converter(field, database)) for field in fields if not field.generated],
                   checked=[(field.name, *_copy_converter(field, database)) for field in fields if field.generated])

    def row(self, record: dict) -> list | None:
        """The record's row for COPY, or None when the deserializer has to see it: a field missing or unknown,
        no id, a value it would convert otherwise or refuse."""
        values = record["fields"]
        if values.keys() != self.names:
            return None
        try:
            pk = self.pk(record.get("pk"))
            if pk is None:
                return None  # saved alone, so that the database numbers it
            # The type test is written out here: a call per value would cost more than the rest of the row.
            row = [pk, *[value if type(value := values[name]) is kind else convert(value)
                         for name, kind, convert in self.stored]]
            for name, kind, convert in self.checked:
                if type(values[name]) is not kind:
                    convert(values[name])
        except Exception:  # the deserializer raises its own error for this row, naming the line
            return None
        return row


def _records_save(records: list[tuple[int, dict]], position: list[int]) -> None:
    """Each record deserialized and saved alone (Model.save_base with raw=True), so an error names its line."""
    for number, record in records:
        position[0] = number
        for row in serializers.deserialize("python", [record], handle_forward_references=False):
            with transaction.atomic():
                row.save(force_insert=True)


class ForeignKeyChecks:
    """When the database checks the foreign keys of the rows COPY stores.

    Django's foreign keys are checked at the end of the transaction (DEFERRABLE INITIALLY DEFERRED); there, a
    million judgments' rows take about a minute in which nothing else is done. A key to a table whose rows
    are all stored already (an earlier model in PROJECT_ROWS, or a user) is checked as each COPY ends
    instead, while the next rows are read (_read_ahead). Keys to later rows, or to the table itself, stay
    deferred. Once any row goes through the deserializer, every key is deferred again, so that errors come
    as a row-by-row restore's.
    """

    def __init__(self, tables: list[str]) -> None:
        self.immediate, self.statements = True, {}
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            for index, table in enumerate(tables):
                cursor.execute("SELECT conname FROM pg_constraint WHERE contype = 'f' AND condeferrable "
                               "AND conrelid = %s::regclass AND NOT confrelid = ANY(%s::regclass[])",
                               [table, tables[index:]])
                names = [quote(name) for name, in cursor.fetchall()]
                self.statements[table] = f"SET CONSTRAINTS {', '.join(names)} IMMEDIATE" if names else ""

    def copying(self, table: str) -> None:
        """Before a COPY into `table`: its keys to complete tables checked from now on (said once a table)."""
        statement = self.statements.pop(table, "")
        if self.immediate and statement:
            with connection.cursor() as cursor:
                cursor.execute(statement)

    def row_by_row(self) -> None:
        """Before a row is stored by the deserializer: every key deferred to the end, for the rest."""
        if self.immediate:
            self.immediate = False
            with connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def _batch_copy(table: TableCopy, batch: list[tuple[int, dict, list]], position: list[int],
                checks: ForeignKeyChecks) -> None:
    """Store rows of one model in one COPY; a batch that fails is stored again row by row, as the deserializer
    does, so the error names the exact line (COPY, like the raw INSERT, runs no save() and no save signals)."""
    checks.copying(table.table)
    try:
        with (transaction.atomic(), connection.wrap_database_errors, connection.cursor() as cursor,
              cursor.copy(table.statement) as copy):
            for _, _, row in batch:
                copy.write_row(row)
    except DatabaseError:
        checks.row_by_row()
        _records_save([(number, record) for number, record, _ in batch], position)


def _copy_batches(path: Path, user_pks: dict[str, int], tables: dict[str, TableCopy | None]) -> Iterator[
        tuple[TableCopy | None, list[tuple[int, dict, list | None]]]]:
    """The backup's rows in file order as (table, rows of one model for one COPY), each row (line number,
    record, COPY's values); a row COPY is not given (see TableCopy.row) comes alone, with no table and
    no values, for the deserializer. Reads no database, so that it may run in its own thread."""
    position = [0]  # this reader's own: the line a refused row names comes with the row
    table, batch = None, []
    for record in _rows(path, position, user_pks):
        number, current = position[0], tables[record["model"]]
        if batch and (current is not table or len(batch) >= COPY_ROWS):
            yield table, batch
            batch = []
        table = current
        row = table.row(record) if table is not None else None
        if row is None:
            if batch:
                yield table, batch
                batch = []
            yield None, [(number, record, None)]
        else:
            batch.append((number, record, row))
    if batch:
        yield table, batch


def _read_ahead(items: Iterator, depth: int) -> Iterator:
    """`items` made in a thread of their own, at most `depth` ahead of the caller: reading and converting the
    next rows goes on while the database stores the last ones (the GIL is free while psycopg waits)."""
    ready: Queue = Queue(maxsize=depth)
    stop, end = Event(), object()

    def produce() -> None:
        try:
            for item in items:
                ready.put(item)
                if stop.is_set():
                    return
            ready.put(end)
        except Exception as error:  # raised again in the caller's thread
            ready.put(error)
        finally:
            items.close()

    thread = Thread(target=produce, name="restore-read-ahead", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not end:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a put the reader may be waiting in
            with suppress(Empty):
                ready.get(timeout=0.1)
        thread.join()


def _rows_copy(path: Path, position: list[int], user_pks: dict[str, int]) -> None:
    """PostgreSQL: every row of the backup stored in file order, in COPYs of one model; a row COPY is not given
    is stored by the deserializer, after the rows before it."""
    tables = {label: TableCopy.of(apps.get_model(label)) for label in KNOWN_MODELS}
    checks = ForeignKeyChecks([model._meta.db_table for model, _ in project_models()])
    for table, batch in _read_ahead(_copy_batches(path, user_pks, tables), depth=READ_AHEAD_BATCHES):
        if table is None:
            checks.row_by_row()
            _records_save([(number, record) for number, record, _ in batch], position)
        else:
            _batch_copy(table, batch, position, checks)


def _rows_store(path: Path, position: list[int], user_pks: dict[str, int]) -> None:
    if connection.vendor == "postgresql":
        _rows_copy(path, position, user_pks)
    else:
        _rows_deserialize(path, position, user_pks)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def restore_read(path: Path) -> dict:
    """Restore the backup at `path`; returns what was written. All or nothing; raises BackupError."""
    checked = backup_check(path)
    _check_target(path, checked)
    position = [0]
    with transaction.atomic():
        created, matched = _users_create(checked.users)
        try:
            _rows_store(path, position, _user_pks(checked.users))
        except IntegrityError as error:
            raise BackupError(f"{path}: line {position[0]}: cannot be stored here: {_first_line(error)}; "
                              "restore into an empty database, or one that holds none of the backup's "
                              "rows (ids are kept)") from None
        except ROW_ERRORS as error:
            raise BackupError(f"{path}: line {position[0]}: {_first_line(error)}; the file is damaged") from None
        models = [model for model, _ in project_models()]
        try:
            connection.check_constraints(table_names=[model._meta.db_table for model in models])
        except IntegrityError as error:
            raise BackupError(f"{path}: the backup's rows do not fit together ({_first_line(error)}); "
                              "the file is damaged") from None
        # Rows came in under their own ids: move each id sequence past them, so new rows do not collide.
        with connection.cursor() as cursor:
            for statement in connection.ops.sequence_reset_sql(no_style(), models):
                cursor.execute(statement)
        # The pairs' vote counters and ruled flags from the rows themselves: a backup made before pairs kept
        # them has none, and adjudication's queue reads them.
        pair_votes_recount(project_id=Project.objects.get(slug=checked.header["project"]).pk)
    return {"project": checked.header["project"], "users_created": created, "users_matched": matched,
            "rows": {label: count for label, count in checked.counts.items() if label != "users"}}

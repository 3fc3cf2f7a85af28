"""restore_read: a project backup back into a database that does not hold the project (docs/backup.md).

The file is read twice. The first pass checks it whole and writes nothing: the header, every line's JSON,
the counts and the sha256 of the closing line. The second inserts every row under its own id in one
transaction: any error undoes everything, and the error names the line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core import serializers
from django.core.exceptions import FieldDoesNotExist, ObjectDoesNotExist, ValidationError
from django.core.management.color import no_style
from django.core.serializers.base import DeserializationError, DeserializedObject
from django.db import DatabaseError, IntegrityError, connection, transaction
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


def _rows_store(path: Path, position: list[int], user_pks: dict[str, int]) -> None:
    """Every row of the backup stored in file order: deserialized one by one (an error names its line), inserted
    in batches of one model. A row without an id is saved alone, so the database numbers it as before."""
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

"""backup_write: one project, every row tied to it, as a JSONL file (format: docs/backup.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core import serializers
from django.db import connection, transaction
from django.db.migrations.recorder import MigrationRecorder

from annotate.backup.contents import (
    FORMAT,
    VERSION,
    BackupError,
    LineHasher,
    line_bytes,
    project_models,
)
from annotate.review.models import Project
from annotate.review.projects import project_or_error
from annotate.roles import ROLES
from training.atomic_write import atomic_file

CHUNK = 2000  # rows read and serialised at a time: memory stays flat however large the project


def schema_state() -> dict[str, str]:
    """The newest migration applied for each app whose rows a backup holds: a restore needs them all."""
    newest: dict[str, str] = {}
    for app, name in MigrationRecorder(connection).applied_migrations():
        if app in ("review", "quality", "auth") and name > newest.get(app, ""):
            newest[app] = name
    return newest


def _user_fields(model) -> list:
    """The model's foreign keys to the user: a backup writes each as the user's username."""
    return [field for field in model._meta.concrete_fields
            if field.is_relation and field.related_model is get_user_model()]


def _project_rows(model, lookup: str, project: Project):
    return model._base_manager.filter(**{lookup: project.pk}).order_by("pk")


def _users(project: Project) -> list[dict]:
    """Every user any kept row points at, by username, with their roles, in the order of their ids."""
    user_ids: set[int] = set()
    for model, lookup in project_models():
        for attname in (field.attname for field in _user_fields(model)):
            user_ids.update(_project_rows(model, lookup, project).exclude(**{f"{attname}__isnull": True})
                            .order_by().values_list(attname, flat=True).distinct())
    users = []
    for user in get_user_model().objects.filter(pk__in=user_ids).prefetch_related("groups").order_by("pk"):
        roles = sorted({group.name for group in user.groups.all()} & set(ROLES) | ({"admin"} if user.is_superuser
                                                                                    else set()))
        users.append({"user": {"username": user.get_username(), "roles": roles, "is_active": user.is_active}})
    return users


def _records(project: Project):
    """Every kept row as Django's serialised form, model by model in insertion order, each in id order.

    The users a row points at come joined to it: the serialiser writes each by its natural key (the username),
    and would otherwise fetch that user once per row.
    """
    for model, lookup in project_models():
        users = [field.name for field in _user_fields(model)]
        rows = _project_rows(model, lookup, project).select_related(*users).iterator(chunk_size=CHUNK)
        while chunk := [row for _, row in zip(range(CHUNK), rows, strict=False)]:
            yield from serializers.serialize("python", chunk, use_natural_foreign_keys=True)


def backup_write(*, slug: str, out: Path) -> dict:
    """Write the backup of project `slug` to `out` (written aside, then renamed); return the header's counts.

    On PostgreSQL the rows are read in one REPEATABLE READ transaction, so judging that goes on meanwhile
    never leaves an assignment in the file pointing at a judgment that is not.
    """
    project = project_or_error(slug=slug, error=BackupError)
    if out.exists():
        raise BackupError(f"{out} already exists; give a new file name (a backup never overwrites one)")
    if not out.parent.is_dir():
        raise BackupError(f"{out.parent} is not a folder; create it first")
    outermost = not connection.in_atomic_block
    # The file is renamed into place once the transaction has ended (the outer block closes last).
    with atomic_file(out, "wb") as stream, transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        hasher = LineHasher()

        def write(record: dict) -> None:
            line = line_bytes(record)
            hasher.add(line)
            stream.write(line)

        users = _users(project)
        counts = {"users": len(users)} | {model._meta.label_lower: _project_rows(model, lookup, project).count()
                                          for model, lookup in project_models()}
        write({"format": FORMAT, "version": VERSION, "project": project.slug, "counts": counts,
               "schema": schema_state(), "made_at": datetime.now(UTC).isoformat()})
        for user in users:
            write(user)
        for record in _records(project):
            write(record)
        stream.write(line_bytes(hasher.closing_record()))
    return counts

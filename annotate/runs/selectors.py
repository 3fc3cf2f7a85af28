"""Reads of training runs and checkpoints for pages that list them in short (the home page).

Only the columns a short list shows are read: a run's metrics, ledger and log tail can be large.
"""

from annotate.runs.models import Checkpoint, Run


def latest_runs(*, limit: int = 5) -> list[dict]:
    """The newest runs: id, kind, status, when made, the checkpoint each started from and the one it made."""
    rows = Run.objects.order_by("-id").values(
        "id", "kind", "status", "created_at", "base_checkpoint_id", "base_checkpoint__name",
        "output_checkpoint__id", "output_checkpoint__name",
    )[:limit]
    return [
        {"id": row["id"], "kind": row["kind"], "status": row["status"], "created_at": row["created_at"],
         "base_checkpoint": _checkpoint_ref(row["base_checkpoint_id"], row["base_checkpoint__name"]),
         "made_checkpoint": _checkpoint_ref(row["output_checkpoint__id"], row["output_checkpoint__name"])}
        for row in rows
    ]


def latest_checkpoints(*, limit: int = 5) -> list[dict]:
    """The newest checkpoints: id, name, when registered, their parent and the run that made them."""
    rows = Checkpoint.objects.order_by("-id").values(
        "id", "name", "created_at", "parent_id", "parent__name", "run_id", "run__kind",
    )[:limit]
    return [
        {"id": row["id"], "name": row["name"], "created_at": row["created_at"],
         "parent": _checkpoint_ref(row["parent_id"], row["parent__name"]),
         "run": {"id": row["run_id"], "kind": row["run__kind"]} if row["run_id"] else None}
        for row in rows
    ]


def _checkpoint_ref(checkpoint_id: int | None, name: str | None) -> dict | None:
    return {"id": checkpoint_id, "name": name} if checkpoint_id else None

"""What the API and the pages show of runs and checkpoints: one description of each, so the JSON the run
page polls and the page itself never disagree."""

from __future__ import annotations

from django.urls import reverse

from annotate.runs.audit import audit_results
from annotate.runs.charts import run_charts, zero_variance_share
from annotate.runs.evaluation import eval_side_by_side
from annotate.runs.models import Checkpoint, Run
from annotate.runs.services import why_no_checkpoint_made

# Config keys whose values are credentials (TRL's `hub_token`, a tracker's API key). New launches refuse them,
# but a run recorded before that, or registered from a folder, may still hold one: it is never shown.
SECRET_KEY_WORDS = ("token", "secret", "password", "api_key", "apikey")
HIDDEN = "(hidden)"


def config_without_secrets(value):
    """A run's config as it may be shown to any engineer: every credential-named key's value hidden."""
    if isinstance(value, dict):
        return {key: HIDDEN if value[key] and any(word in str(key).lower() for word in SECRET_KEY_WORDS)
                else config_without_secrets(value[key]) for key in value}
    if isinstance(value, list):
        return [config_without_secrets(item) for item in value]
    return value


def checkpoint_summary(checkpoint: Checkpoint | None) -> dict | None:
    if checkpoint is None:
        return None
    return {"id": checkpoint.pk, "name": checkpoint.name, "uri": checkpoint.uri,
            "content_hash": checkpoint.content_hash or None, "parent": checkpoint.parent_id,
            "run": checkpoint.run_id, "url": reverse("checkpoint-page", args=[checkpoint.pk])}


def snapshot_summary(run: Run) -> dict | None:
    """The snapshot behind a DPO run: its id, project, the judgments in its rows and the criteria version."""
    if not run.snapshot_path:
        return None
    manifest = run.snapshot_manifest or {}
    counts = manifest.get("counts") or {}
    return {
        "path": run.snapshot_path,
        "snapshot_id": manifest.get("snapshot_id"),
        "project": manifest.get("project"),
        "criteria_version": manifest.get("criteria_version"),
        "judgments": counts.get("judgments_in_rows", counts.get("judgments_counted")),
        "rows": {"train": counts.get("train"), "test": counts.get("test")},
        "export": {"id": run.export_id, "project": run.export.project.slug} if run.export_id else None,
    }


def tasks_summary(run: Run) -> dict | None:
    """The task file behind a GRPO run, with the scorers that scored it (from run.json)."""
    if not run.tasks_path:
        return None
    record = run.record or {}
    tasks = record.get("tasks") or {}
    task_set = run.task_set
    return {"path": run.tasks_path, "sha256": tasks.get("sha256") or (task_set.sha256 if task_set else None),
            "count": tasks.get("count") or (task_set.count if task_set else None),
            "trained_on": tasks.get("trained_on"), "scorers": record.get("scorers") or {},
            "task_set": {"id": task_set.pk, "name": task_set.name, "sha256": task_set.sha256,
                         "families": task_set.families, "variant": task_set.variant} if task_set else None}


def eval_table(run: Run) -> list[dict]:
    """Held-out scores, base against trained: a DPO run's test split (run.json results.test)."""
    test = ((run.record or {}).get("results") or {}).get("test") or {}
    base, trained = test.get("base") or {}, test.get("trained") or {}
    names = {"preference_accuracy": "preference accuracy (log-likelihood)",
             "reward_accuracy": "implicit-reward accuracy", "reward_margin": "mean implicit-reward margin"}
    return [{"metric": text, "key": key, "base": base.get(key), "trained": trained.get(key)}
            for key, text in names.items() if key in base or key in trained]


def latest(metrics: list[dict]) -> dict:
    """The last training row: step, loss and the rest as last logged."""
    rows = [row for row in metrics if row.get("event", "train") == "train" and "loss" in row]
    return rows[-1] if rows else {}


def run_payload(run: Run, *, detail: bool = False) -> dict:
    made = run.made_checkpoint
    unmade = why_no_checkpoint_made(run)
    payload = {
        "id": run.pk,
        "url": reverse("run-detail", args=[run.pk]),
        "page": reverse("run-page", args=[run.pk]),
        "kind": run.kind,
        "status": run.status,
        "backend": run.backend,
        "base_checkpoint": checkpoint_summary(run.base_checkpoint),
        "snapshot": snapshot_summary(run),
        "tasks": tasks_summary(run),
        "output_checkpoint": checkpoint_summary(made),
        "no_output_checkpoint": unmade.reason if unmade else None,
        "weights_unchanged": unmade.weights_unchanged if unmade else False,
        "folder": run.folder,
        "steps": latest(run.metrics).get("step"),
        "exit_code": run.exit_code,
        "error": run.error or None,
        "cancel_requested": run.cancel_requested,
        "slurm_job_id": run.slurm_job_id or None,
        "launched_by": run.launched_by.get_username() if run.launched_by else None,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }
    if detail:
        payload.update({
            "config": config_without_secrets(run.config),
            "resolved_config": config_without_secrets(run.resolved_config),
            "latest": latest(run.metrics),
            "metrics": run.metrics,
            "zero_variance_share": zero_variance_share(run.metrics, run.record),
            "ledger": run.ledger,
            "eval": eval_table(run),
            "evaluation": eval_side_by_side(run) if run.kind == Run.Kind.EVAL else None,
            "log_tail": run.log_tail,
            "charts": {name: str(svg) for name, svg in run_charts(run.metrics).items()},
            "audit": audit_results(run=run) if run.kind == Run.Kind.GRPO else [],
        })
    return payload


def ancestry(checkpoint: Checkpoint, limit: int = 20) -> list[Checkpoint]:
    """The checkpoint's parents, nearest first (a chain is short; the limit guards against a cycle)."""
    chain, current = [], checkpoint.parent
    while current is not None and len(chain) < limit and current not in chain:
        chain.append(current)
        current = current.parent
    return chain


def children_by_kind(checkpoint: Checkpoint) -> dict[str, list[dict]]:
    """Checkpoints trained from this one, by the kind of run that made them (DPO and GRPO side by side),
    with the runs from it that made nothing yet (queued, running, failed)."""
    columns: dict[str, list[dict]] = {"dpo": [], "grpo": []}
    trained = checkpoint.runs_from.filter(kind__in=list(columns))  # evaluations and comparisons train nothing
    for run in trained.select_related("output_checkpoint", "launched_by").order_by("id"):
        unmade = why_no_checkpoint_made(run)
        columns[run.kind].append({"run": run, "checkpoint": run.made_checkpoint,
                                  "no_output_checkpoint": unmade.reason if unmade else None,
                                  "weights_unchanged": unmade.weights_unchanged if unmade else False,
                                  "eval": eval_table(run), "steps": latest(run.metrics).get("step")})
    made_here = {entry["checkpoint"].pk for entries in columns.values() for entry in entries if entry["checkpoint"]}
    for child in checkpoint.children.exclude(pk__in=made_here).order_by("id"):
        columns.setdefault("registered", []).append({"run": None, "checkpoint": child, "eval": [], "steps": None})
    return columns

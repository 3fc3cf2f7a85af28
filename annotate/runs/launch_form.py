"""What the runs page's forms offer: the app's own snapshots, task sets and reward models to pick from, a starting
config per kind that runs on a CPU, and the form's values from a link ("Train DPO on this snapshot", "Train a reward
model on this snapshot", "Train GRPO on this task set") or a submitted form. Paths stay possible through the API only (docs/runs.md, "Launching")."""

from __future__ import annotations

from dataclasses import dataclass

from annotate.exports.models import Export
from annotate.runs.models import Checkpoint, Run, TaskSet
from annotate.runs.services import snapshot_manifest
from training.task_families import FAMILIES, VARIANTS

# Short runs that finish on two CPU cores with the tiny demo model; an engineer edits them for real work.
DEFAULT_CONFIGS = {
    "dpo": "learning_rate: 5.0e-6\nmax_steps: 40\nper_device_train_batch_size: 4\nlogging_steps: 1\n",
    "grpo": ("learning_rate: 1.0e-4\nmax_steps: 40\nnum_generations: 4\nper_device_train_batch_size: 8\n"
             "max_completion_length: 48\nlogging_steps: 1\n"),
    "reward": "learning_rate: 1.0e-4\nmax_steps: 20\nper_device_train_batch_size: 4\nlogging_steps: 1\n",
}
FORM_FIELDS = ("kind", "base_checkpoint", "export", "task_set", "reward_model", "backend", "config")
# The links that open the form with an input chosen, by the kind they launch.
LINK_KINDS = {"dpo_on_export": "dpo", "reward_on_export": "reward", "grpo_on_task_set": "grpo"}


@dataclass(frozen=True)
class SnapshotChoice:
    """A finished export as the launch form lists it."""

    export: Export

    @property
    def label(self) -> str:
        export, counts = self.export, self.export.counts or {}
        version = (snapshot_manifest(export.out_dir) or {}).get("criteria_version")
        criteria_text = f"criteria v{version}" if isinstance(version, int) else f"criteria {version or 'mixed'}"
        by = export.created_by.get_username() if export.created_by else "command line"
        return (f"{export.project.name} · export {export.pk} · {counts.get('train', 0)} train / "
                f"{counts.get('test', 0)} test rows · {criteria_text} · {export.created_at:%Y-%m-%d %H:%M} by {by}")


def snapshot_choices(limit: int = 200) -> list[SnapshotChoice]:
    exports = (Export.objects.filter(status=Export.Status.DONE).select_related("project", "created_by")
               .order_by("-id")[:limit])
    return [SnapshotChoice(export) for export in exports]


def task_set_label(task_set: TaskSet) -> str:
    families = ", ".join(f"{family} {count}" for family, count in task_set.families.items())
    variant = f" · {task_set.variant}" if task_set.variant else ""
    return f"{task_set.name} · {task_set.count} tasks ({families}){variant}"


def task_set_choices() -> list[tuple[int, str]]:
    return [(task_set.pk, task_set_label(task_set)) for task_set in TaskSet.objects.order_by("name")]


def launch_values(query) -> dict:
    """The launch form's starting values: a link may choose what to train on ("Train DPO on this snapshot":
    `dpo_on_export`, "Train a reward model on this snapshot": `reward_on_export`, "Train GRPO on this task set":
    `grpo_on_task_set`). Its own names, apart from the runs table's filters (kind, export, task_set), so a link never
    narrows the table or a filter the form."""
    kind = next((kind for link, kind in LINK_KINDS.items() if query.get(link)), "dpo")
    return {"kind": kind, "backend": "local", "config": DEFAULT_CONFIGS[kind], "base_checkpoint": default_base_name(),
            "export": query.get("reward_on_export") or query.get("dpo_on_export", ""),
            "task_set": query.get("grpo_on_task_set", ""), "reward_model": ""}


def default_base_name() -> str:
    """The base a new run most likely starts from: the newest checkpoint with no parent (an SFT checkpoint such as
    the demo's), not whichever trained child sorts first by name."""
    root = Checkpoint.objects.filter(parent__isnull=True).exclude(run__kind=Run.Kind.REWARD).order_by("-id").first()
    return root.name if root else ""


def launch_inputs(values: dict) -> dict:
    """The input the chosen kind reads, from the form: the other picker keeps its value for the next launch but is
    not sent (a DPO or reward run reads a snapshot, a GRPO run a task set and, if one is picked, a reward model)."""
    if values["kind"] in ("dpo", "reward"):
        return {"export": values.get("export") or None}
    return {"task_set": values.get("task_set") or None, "reward_model": values.get("reward_model") or None}


def compare_prompts_source(value: str) -> dict:
    """The compare form's one "Prompts from" select: `project:SLUG` or `task_set:ID`."""
    kind, _, reference = str(value).partition(":")
    if kind == "project" and reference:
        return {"prompts_project": reference}
    if kind == "task_set" and reference:
        return {"task_set": reference}
    return {}


FAMILY_CHOICES = sorted(FAMILIES)
VARIANT_CHOICES = VARIANTS

"""What the runs page's forms offer: the app's own snapshots, task sets and reward models to pick from, a starting
config per kind that runs on a CPU, and the form's values from a link ("Train DPO on this snapshot", "Train a reward
model on this snapshot", "Train GRPO on this task set") or a submitted form. Paths stay possible through the API only (docs/runs.md, "Launching")."""

from __future__ import annotations

from dataclasses import dataclass

from annotate.errors import UserMistake
from annotate.exports.models import Export
from annotate.runs.launch import export_for_training, export_snapshot_folder
from annotate.runs.models import Checkpoint, Run, TaskSet
from training.snapshot import SnapshotError, read_manifest
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
    """A finished export a launch would take, as the launch form lists it."""

    export: Export
    manifest: dict

    @property
    def label(self) -> str:
        export, counts = self.export, self.export.counts or {}
        version = self.manifest.get("criteria_version")  # null: the rows were judged under several versions
        criteria_text = f"criteria v{version}" if isinstance(version, int) else f"criteria {version or 'mixed'}"
        by = export.created_by.get_username() if export.created_by else "command line"
        test = f"{counts.get('test', 0)} test rows" if counts.get("test") else "no test split"
        return (f"{export.project.name} · export {export.pk} · {counts.get('train', 0)} train / {test} · "
                f"{criteria_text} · {export.created_at:%Y-%m-%d %H:%M} by {by}")


def usable_manifest(export: Export) -> dict:
    """The manifest of a finished export's snapshot, or UserMistake with the reason a launch would refuse it: the
    launch's own checks (export_snapshot_folder), then the training command's (a manifest it can read)."""
    folder = export_snapshot_folder(export)
    try:
        return read_manifest(folder)
    except SnapshotError as error:
        raise UserMistake(str(error)) from None


def snapshot_choices(limit: int = 200) -> list[SnapshotChoice]:
    """The newest finished exports a launch would take; one it would refuse is not offered (snapshot_note says why
    when a link or an earlier run names it)."""
    exports = (Export.objects.filter(status=Export.Status.DONE).select_related("project", "created_by")
               .order_by("-id")[:limit])
    choices = []
    for export in exports:
        try:
            choices.append(SnapshotChoice(export, usable_manifest(export)))
        except UserMistake:
            continue
    return choices


def snapshot_note(reference, choices: list[SnapshotChoice]) -> str | None:
    """Why the export a link ("Train DPO on this snapshot") or a run launched again names is not among `choices`, in
    the words a launch would refuse it with; None when it is listed (or when nothing is named)."""
    text = str(reference or "").strip()
    if not text or any(str(choice.export.pk) == text for choice in choices):
        return None
    try:
        usable_manifest(export_for_training(text))
    except UserMistake as mistake:
        return str(mistake)
    return None


def task_set_label(task_set: TaskSet) -> str:
    families = ", ".join(f"{family} {count}" for family, count in task_set.families.items())
    variant = f" · {task_set.variant}" if task_set.variant else ""
    return f"{task_set.name} · {task_set.count} tasks ({families}){variant}"


def task_set_choices(*, for_training: bool) -> list[tuple[int, str]]:
    """The task sets a form offers, the ones its purpose wants first: train sets for a launch (a held-out set is
    marked as being for evaluation, and a GRPO run on it is refused unless asked for), held-out sets to evaluate."""
    task_sets = sorted(TaskSet.objects.all(), key=lambda task_set: ((task_set.variant == "heldout") == for_training,
                                                                    task_set.name))
    return [(task_set.pk, task_set_label(task_set) + (" (for evaluation)" if for_training and task_set.variant ==
                                                      "heldout" else "")) for task_set in task_sets]


def default_snapshot(choices: list[SnapshotChoice]) -> str:
    """The export a launch form starts on: the newest with a test split (a run on one without cannot be judged on
    held-out pairs), else the newest."""
    with_test = [choice for choice in choices if (choice.export.counts or {}).get("test")]
    chosen = (with_test or choices or [None])[0]
    return str(chosen.export.pk) if chosen else ""


def launch_values(query) -> dict:
    """The launch form's starting values: a link may choose what to train on ("Train DPO on this snapshot":
    `dpo_on_export`, "Train a reward model on this snapshot": `reward_on_export`, "Train GRPO on this task set":
    `grpo_on_task_set`). Its own names, apart from the runs table's filters (kind, export, task_set), so a link never
    narrows the table or a filter the form. A checkpoint's "Train from it" names its base (`train_from`)."""
    kind = next((kind for link, kind in LINK_KINDS.items() if query.get(link)), "dpo")
    return {"kind": kind, "backend": "local", "config": DEFAULT_CONFIGS[kind],
            "base_checkpoint": query.get("train_from") or default_base_name(),
            "export": query.get("reward_on_export") or query.get("dpo_on_export", ""),
            "task_set": query.get("grpo_on_task_set", ""), "reward_model": "", "train_on_heldout": False}


def heldout_asked_for(run_id) -> bool:
    """Whether a run launched again had asked to train on a held-out task set: a GRPO run on one is recorded only
    when asked for (run_launch refuses it otherwise), so the form that launches it again asks the same."""
    text = str(run_id).strip()
    return text.isdigit() and Run.objects.filter(pk=int(text), kind=Run.Kind.GRPO, task_set__variant="heldout").exists()


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

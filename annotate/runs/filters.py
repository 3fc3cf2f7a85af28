"""The runs list narrowed by kind, status, base checkpoint and input, and a run's launch prefilled from an earlier
one ("Launch again").

Filters are the page's GET parameters. A value that names nothing the app knows (a kind that does not exist, a
checkpoint no run starts from, an export that is gone) is ignored and said in one line above the table, so a stale
link still shows the runs rather than an error page. The launch form's links use names of their own
(`dpo_on_export`, `grpo_on_task_set`: annotate/runs/launch_form.py), so choosing what to train never narrows the
table, and a filter never fills the form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from django.db.models import Q, QuerySet

from annotate.errors import UserMistake
from annotate.exports.models import Export
from annotate.runs.launch import SET_BY_LAUNCH, SNAPSHOT_KINDS
from annotate.runs.models import Checkpoint, Run, TaskSet
from annotate.runs.present import is_credential_key

# The trainers a config launches from the page's form; evaluations and comparisons have forms of their own.
AGAIN_KINDS = (Run.Kind.DPO, Run.Kind.GRPO, Run.Kind.REWARD)


# The selects' labels differ from the launch form's ("Kind", "Base checkpoint"), which shares the page.
@dataclass
class RunFilter:
    """One select of the filter form: its GET parameter, label, known values (value, text) and the chosen one."""

    name: str
    label: str
    options: list[tuple[str, str]]
    chosen: str = ""


@dataclass
class RunFilters:
    fields: list[RunFilter]
    notes: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return any(item.chosen for item in self.fields)

    @property
    def chosen(self) -> dict[str, str]:
        return {item.name: item.chosen for item in self.fields if item.chosen}


def _path_text(path: str) -> str:
    """A path as the select shows it: its last two parts, which tell snapshot and task files apart."""
    parts = Path(path).parts
    return str(Path(*parts[-2:])) if len(parts) > 2 else path


def _export_text(export: Export) -> str:
    return f"export {export.pk}" + (f" · {export.snapshot_id}" if export.snapshot_id else "")


def _input_options(runs: QuerySet, *, model, fk: str, path_field: str, path_of, text_of, chosen: str
                   ) -> list[tuple[str, str]]:
    """The exports (or task sets) runs read, then the paths runs read that are none of theirs; and the chosen
    one, which a link may name before any run has read it."""
    used = runs.exclude(**{fk: None}).values(fk)
    picked = Q(pk=int(chosen)) if chosen.isdigit() and len(chosen) < 19 else Q(pk__in=[])
    rows = list(model.objects.filter(Q(pk__in=used) | picked).order_by("-pk"))
    options = [(str(row.pk), text_of(row)) for row in rows]
    known = {path_of(row) for row in rows}
    paths = runs.filter(**{fk: None}).exclude(**{path_field: ""}).values_list(path_field, flat=True)
    return options + [(path, _path_text(path)) for path in sorted(set(paths) - known)]


def _input_match(value: str, *, model, fk: str, path_field: str, path_of) -> Q:
    """Runs that read this export or task set (picked, or given by its path), or this path."""
    if value.isdigit():
        picked = model.objects.filter(pk=int(value)).first()
        match = Q(**{f"{fk}_id": int(value)})
        path = path_of(picked) if picked else ""
        return match | Q(**{path_field: path}) if path else match
    return Q(**{path_field: value})


INPUTS = {
    "export": {"model": Export, "fk": "export", "path_field": "snapshot_path", "path_of": lambda row: row.out_dir},
    "task_set": {"model": TaskSet, "fk": "task_set", "path_field": "tasks_path", "path_of": lambda row: row.path},
}


def runs_filtered(*, params) -> tuple[QuerySet, RunFilters]:
    """Runs matching the filters in `params` (the page's GET parameters), newest first, and the filter form's
    selects with the values the runs hold."""
    runs = Run.objects.all()
    wanted = {name: str(params.get(name) or "").strip() for name in ("kind", "status", "base", "export", "task_set")}
    bases = Checkpoint.objects.filter(pk__in=runs.exclude(base_checkpoint=None).values("base_checkpoint"))
    fields = [
        RunFilter("kind", "Run type", [(kind, kind) for kind in Run.Kind.values]),
        RunFilter("status", "Status", [(status, status) for status in Run.Status.values]),
        RunFilter("base", "Started from", [(str(c.pk), c.name) for c in bases.order_by("name")]),
        RunFilter("export", "Input snapshot", _input_options(runs, **INPUTS["export"], text_of=_export_text,
                                                       chosen=wanted["export"])),
        RunFilter("task_set", "Input task set", _input_options(runs, **INPUTS["task_set"], text_of=lambda row: row.name,
                                                         chosen=wanted["task_set"])),
    ]
    matches = {
        "kind": lambda value: Q(kind=value),
        "status": lambda value: Q(status=value),
        "base": lambda value: Q(base_checkpoint_id=int(value)),
        "export": lambda value: _input_match(value, **INPUTS["export"]),
        "task_set": lambda value: _input_match(value, **INPUTS["task_set"]),
    }
    notes = []
    for item in fields:
        value = wanted[item.name]
        if not value:
            continue
        if value not in {option for option, _ in item.options}:
            shown = value if len(value) <= 80 else value[:79] + "…"
            notes.append(f"{item.label.lower()} {shown!r} is not one the runs know; that filter is ignored (pick "
                         "one the form offers)")
            continue
        item.chosen = value
        runs = runs.filter(matches[item.name](value))
    return runs.order_by("-id"), RunFilters(fields=fields, notes=notes)


def launch_values_from_run(*, run_id) -> dict[str, str]:
    """The launch form's fields as `run_id` was launched: kind, backend, base checkpoint, input and the config's own
    keys as YAML (without the keys the launch sets, which the form's fields give). A credential-named key a run
    recorded is left out: the page never shows its value, and a launch from the app refuses such keys anyway."""
    text = str(run_id).strip()
    run = Run.objects.select_related("base_checkpoint", "reward_model").filter(pk=int(text)).first() if text.isdigit() else None
    if run is None:
        raise UserMistake(f"there is no run {text[:40]!r} to launch again; pick one from the runs table", status=404)
    if run.kind not in AGAIN_KINDS:
        raise UserMistake(f"run {run.pk} is {run.kind}: only {', '.join(AGAIN_KINDS[:-1])} and {AGAIN_KINDS[-1]} runs "
                          "are launched from this form; use the form of its kind below")
    own = {key: value for key, value in (run.config or {}).items()
           if key not in SET_BY_LAUNCH and key != "reward_model" and not is_credential_key(key)}
    values = {"kind": run.kind, "backend": run.backend,
              "base_checkpoint": run.base_checkpoint.name if run.base_checkpoint else "",
              "config": yaml.safe_dump(own, sort_keys=True, default_flow_style=False, allow_unicode=True) if own else "",
              "snapshot": "", "tasks": "", "export": "", "task_set": "",
              "reward_model": run.reward_model.name if run.reward_model_id else ""}
    if run.export_id:
        values["export"] = str(run.export_id)
    elif run.task_set_id:
        values["task_set"] = str(run.task_set_id)
    elif run.kind in SNAPSHOT_KINDS:
        values["snapshot"] = run.snapshot_path
    else:
        values["tasks"] = run.tasks_path
    return values

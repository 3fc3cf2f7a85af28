"""Evaluation runs: checkpoints side by side on a task file (held-out variants), by `python -m training eval`
in a run of kind "eval"; its JSON (per checkpoint and task family: success rate with a 95% Wilson
interval, lengths, failures; per task: samples correct and scored) is kept in the run and shown on the run and
checkpoint pages, so a child is judged against its parent on the same tasks and seed: side by side, and task by
task in one sentence (better, worse, or too short to show a difference: training/evaluate.py paired_change)."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser

from annotate.errors import UserMistake
from annotate.limits import MAX_INT32, whole_number
from annotate.runs.checkpoints import local_checkpoints
from annotate.runs.input_paths import input_path
from annotate.runs.models import Checkpoint, Run
from annotate.runs.queue import generation_engine_checked, queue_checkpoints_run
from annotate.runs.task_sets import task_set_for_path, task_set_resolve
from training.evaluate import change_sentence, paired_change
from training.json_input import read_json_file

EVAL_FILE = "eval.json"

# A held-out figure on fewer test rows than this (DPO test pairs, an evaluation's scored tasks) is shown as "too
# few to judge", not as a number: at 10 rows a 95% Wilson interval around 0.5 already spans 0.24-0.76, and below
# that it covers most of the scale, so no child could be told apart from its parent. docs/runs.md says the same.
TOO_FEW_TO_JUDGE = 10


def too_few_to_judge(rows: int | None) -> bool:
    """Whether a held-out figure over `rows` test rows is too thin to read (an unknown count is not judged)."""
    return rows is not None and rows < TOO_FEW_TO_JUDGE


def eval_launch(*, checkpoints: list, tasks: str | None = None, task_set=None, samples: int = 1,
                temperature: float = 0.0, max_new_tokens: int = 128, seed: int = 0, engine: str = "transformers",
                launched_by: AbstractBaseUser | None = None, enqueue: bool = True) -> Run:
    """Check an evaluation and queue it; the first checkpoint is the base the others are read against. The tasks
    are a task set of the app or, through the API, a task file's path."""
    chosen = local_checkpoints(checkpoints, at_least=1, purpose="evaluate")
    if bool(tasks) == bool(task_set):
        raise UserMistake("give the tasks once: a task set (task_set), or a task file's path (tasks)")
    picked = task_set_resolve(task_set) if task_set else None
    tasks_path = input_path("tasks", picked.path if picked else tasks)
    if not tasks_path.is_file():
        raise UserMistake(f"tasks {tasks} is not a file; make one with python -m training tasks make --variant heldout")
    picked = picked or task_set_for_path(str(tasks_path))
    samples = whole_number("samples", samples, low=1, high=64)
    max_new_tokens = whole_number("max_new_tokens", max_new_tokens, low=1, high=4096)
    seed = whole_number("seed", seed, low=0, high=MAX_INT32)
    if not 0 <= float(temperature) <= 5:
        raise UserMistake("temperature must be 0-5")
    if float(temperature) == 0 and int(samples) != 1:
        raise UserMistake("temperature 0 is greedy and gives one answer per task; set samples to 1 or raise it")
    engine = generation_engine_checked(engine)
    return queue_checkpoints_run(kind=Run.Kind.EVAL, checkpoints=chosen, launched_by=launched_by, enqueue=enqueue,
                                 tasks_path=str(tasks_path), task_set=picked,
                                 options={"tasks": str(tasks_path), "samples": int(samples),
                                          "temperature": float(temperature), "max_new_tokens": int(max_new_tokens),
                                          "seed": int(seed), "engine": engine})


def eval_command_args(run: Run) -> list[str]:
    Path(run.folder).mkdir(parents=True, exist_ok=True)  # eval writes its --out into an existing folder
    config = run.config
    args = ["eval", "--tasks", config["tasks"], "--out", str(Path(run.folder) / EVAL_FILE),
            "--samples", str(config["samples"]), "--temperature", str(config["temperature"]),
            "--max-new-tokens", str(config["max_new_tokens"]), "--seed", str(config["seed"]),
            "--engine", config.get("engine", "transformers")]
    for checkpoint in config["checkpoints"]:
        args += ["--checkpoint", checkpoint["path"]]
    return args


def eval_result(run: Run) -> dict | None:
    return read_json_file(Path(run.folder) / EVAL_FILE)


def eval_side_by_side(run: Run) -> dict | None:
    """The eval as a table: one row per task family (and all) with its number of tasks, one column per checkpoint,
    by its name now (a checkpoint renamed since is shown under its new name). A cell scored on fewer than
    TOO_FEW_TO_JUDGE tasks says so rather than give a rate; one scored on none has no rate at all."""
    result = (run.record or {}).get("eval")
    if not result:
        return None
    evaluated = run.config.get("checkpoints", [])
    current = dict(Checkpoint.objects.filter(pk__in=[c.get("id") for c in evaluated if c.get("id")])
                   .values_list("pk", "name"))
    names = {c["path"]: current.get(c.get("id"), c["name"]) for c in evaluated}
    columns = [names.get(c["checkpoint"], c.get("label") or c["checkpoint"]) for c in result["checkpoints"]]
    rows = []
    for family in [*result["families"], "all"]:
        cells, tasks = [], None
        for report in result["checkpoints"]:
            figures = report["all"] if family == "all" else report["families"].get(family) or {}
            scored = figures.get("tasks_scored")
            tasks = figures.get("tasks", tasks)
            cells.append({"success_rate": figures.get("success_rate") if scored != 0 else None,
                          "interval": figures.get("interval") if scored != 0 else None, "tasks": scored,
                          "too_few_to_judge": too_few_to_judge(scored)})
        rows.append({"family": family, "tasks": tasks, "cells": cells})
    return {"columns": columns, "rows": rows, "settings": result.get("settings"), "interval": result.get("interval"),
            "changes": eval_changes(result, evaluated, names), "too_few_to_judge_under": TOO_FEW_TO_JUDGE}


def _read_against(evaluated: list[dict]) -> list[tuple[dict, dict, bool]]:
    """(child, the checkpoint it is read against, whether that is its parent) for the checkpoints of an evaluation:
    each one whose parent was evaluated too against its parent, whatever the order they were given in (a multiple
    select sends them in the list's order, not the order they were picked in); when none was, each against the
    first, the base the evaluation names."""
    ids = [c["id"] for c in evaluated if c.get("id")]
    parents = dict(Checkpoint.objects.filter(pk__in=ids).values_list("pk", "parent_id"))
    by_id = {c["id"]: c for c in evaluated if c.get("id")}
    lineage = [(c, by_id[parents[c["id"]]], True) for c in evaluated
               if c.get("id") and parents.get(c["id"]) in by_id and parents[c["id"]] != c["id"]]
    return lineage or [(c, evaluated[0], False) for c in evaluated[1:]]


def eval_changes(result: dict, evaluated: list[dict], names: dict[str, str]) -> list[dict]:
    """Each child's change from its parent over all tasks, task by task (training/evaluate.py paired_change), with
    the sentence the pages show: better, worse, or too short to show a difference; on fewer than TOO_FEW_TO_JUDGE
    tasks scored by both, too few to judge. An evaluation written before per-task counts were kept has none."""
    settings = result.get("settings") or {}
    per_task = {c["checkpoint"]: c.get("per_task") for c in result.get("checkpoints", [])}
    changes = []
    for child, against, parent in _read_against(evaluated):
        before, after = per_task.get(against["path"]), per_task.get(child["path"])
        if not isinstance(before, dict) or not isinstance(after, dict):
            continue
        change = paired_change(before, after)
        name, against_name = names[child["path"]], names[against["path"]]
        versus = f"its parent {against_name}" if parent else against_name
        if too_few_to_judge(change["tasks"]):
            sentence = (f"Too few tasks to judge a difference from {versus}: {change['tasks']} scored by both, at "
                        f"least {TOO_FEW_TO_JUDGE} needed.")
            change = {**change, "real": False, "direction": None}
        else:
            sentence = change_sentence(change, against=against_name, parent=parent,
                                       samples=settings.get("samples") or 1)
        changes.append({**change, "checkpoint": name, "checkpoint_id": child.get("id"), "against": against_name,
                        "against_id": against.get("id"), "against_parent": parent,
                        "samples": settings.get("samples"), "too_few_to_judge": too_few_to_judge(change["tasks"]),
                        "sentence": sentence})
    return changes


def evals_of(checkpoint: Checkpoint) -> list[Run]:
    """Succeeded evaluation runs that include this checkpoint, newest first."""
    runs = Run.objects.filter(kind=Run.Kind.EVAL, status=Run.Status.SUCCEEDED).order_by("-id")
    return [run for run in runs if any(c.get("id") == checkpoint.pk for c in run.config.get("checkpoints", []))]

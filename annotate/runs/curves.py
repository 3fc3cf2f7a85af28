"""Several runs' curves side by side (the runs' curves page): which runs, and their charts."""

from __future__ import annotations

from annotate.errors import UserMistake
from annotate.runs.charts import MAX_RUNS, run_swatch, runs_curves
from annotate.runs.models import Run


def run_name(run: Run) -> str:
    """How a run is named on a shared chart: id, kind and the checkpoint it starts from."""
    base = run.base_checkpoint.name if run.base_checkpoint else "no base checkpoint"
    return f"run {run.pk} · {run.kind} · {base}"


def runs_curves_compare(*, run_ids: list[str]) -> dict:
    """The runs `run_ids` names (two to MAX_RUNS distinct ids, in the order given) and one chart per metric with a
    line for each; UserMistake naming the first id that is not a run's."""
    ids: list[int] = []
    for text in (str(value).strip() for value in run_ids):
        if not text.isdigit() or len(text) > 18:
            raise UserMistake(f"run {text[:40]!r} is not a run id; tick runs in the runs table")
        if int(text) not in ids:
            ids.append(int(text))
    if len(ids) < 2:
        raise UserMistake(f"choose two or more runs to compare their curves (got {len(ids)}); tick them in the runs "
                          "table and press Compare curves")
    if len(ids) > MAX_RUNS:
        raise UserMistake(f"at most {MAX_RUNS} runs fit on one chart (got {len(ids)}); tick fewer runs")
    found = Run.objects.select_related("base_checkpoint", "export", "task_set").in_bulk(ids)
    unknown = [run_id for run_id in ids if run_id not in found]
    if unknown:
        raise UserMistake(f"there is no run {unknown[0]}; tick runs in the runs table")
    runs = [found[run_id] for run_id in ids]
    return {
        "runs": [{"run": run, "name": run_name(run), "swatch": run_swatch(index, label=run_name(run)),
                  "steps": max((row["step"] for row in run.metrics or [] if isinstance(row.get("step"), int | float)),
                               default=None)}
                 for index, run in enumerate(runs)],
        "charts": runs_curves([(run_name(run), run.metrics or []) for run in runs]),
        "busy": any(not run.finished for run in runs),
    }

"""What the API and the pages show of runs and checkpoints: one description of each, so the JSON the run
page polls and the page itself never disagree."""

from __future__ import annotations

import re

from django.urls import reverse

from annotate.runs.audit import audit_results
from annotate.runs.charts import run_charts, zero_variance_share
from annotate.runs.checkpoints import is_reward_model
from annotate.runs.demo_checkpoint import sft_log_metrics
from annotate.runs.evaluation import TOO_FEW_TO_JUDGE, eval_side_by_side, evals_of, too_few_to_judge
from annotate.runs.models import Checkpoint, Run
from annotate.runs.services import why_no_checkpoint_made
from training.config import is_credential_key

# Config keys whose values are credentials (training.config.is_credential_key: `hub_token`, a tracker's API key).
# Configs holding one are refused at any depth, but a run recorded before that, or registered from a folder, may
# still hold one: it is never shown.
HIDDEN = "(hidden)"


def config_without_secrets(value):
    """A run's config as it may be shown to any engineer: every credential-named key's value hidden."""
    if isinstance(value, dict):
        return {key: HIDDEN if value[key] and is_credential_key(key)
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
            "trained_on": tasks.get("trained_on"),
            # run.json lists the scorers each phase saw ({"training": [...]}); shown as text
            "scorers": {phase: ", ".join(map(str, names)) if isinstance(names, list) else names
                        for phase, names in (record.get("scorers") or {}).items()},
            "task_set": {"id": task_set.pk, "name": task_set.name, "sha256": task_set.sha256,
                         "families": task_set.families, "variant": task_set.variant} if task_set else None}


def test_pairs(run: Run) -> int | None:
    """How many test pairs a DPO run's held-out scores stand on: what the run scored (results.test's `pairs`),
    else its snapshot's test split as its manifest counts it; None when neither says."""
    test = ((run.record or {}).get("results") or {}).get("test") or {}
    for side in ("base", "trained"):
        if isinstance((test.get(side) or {}).get("pairs"), int):
            return test[side]["pairs"]
    counted = ((run.snapshot_manifest or {}).get("counts") or {}).get("test")
    return counted if isinstance(counted, int) else None


def eval_table(run: Run) -> list[dict]:
    """Held-out scores, base against trained: a DPO run's test split (run.json results.test), each row with the
    number of test pairs behind it. Under TOO_FEW_TO_JUDGE pairs the row says so (`too_few_to_judge`) and the
    pages show that instead of the figures; a figure over no pair at all is never given."""
    test = ((run.record or {}).get("results") or {}).get("test") or {}
    base, trained = test.get("base") or {}, test.get("trained") or {}
    pairs = test_pairs(run)
    names = {"preference_accuracy": "preference accuracy (log-likelihood)",
             "reward_accuracy": "implicit-reward accuracy", "reward_margin": "mean implicit-reward margin"}
    nothing = pairs == 0
    return [{"metric": text, "key": key, "base": None if nothing else base.get(key),
             "trained": None if nothing else trained.get(key), "pairs": pairs,
             "too_few_to_judge": too_few_to_judge(pairs)}
            for key, text in names.items() if key in base or key in trained]


def test_change(run: Run) -> dict | None:
    """A DPO run's change from its base on the test split, pair by pair (training/dpo.py change_from_base), with
    the sentence the page shows: a change beyond chance, or a run too short (or a split too small) to show one.
    None when the run recorded none, or on too few pairs to judge."""
    change = (((run.record or {}).get("results") or {}).get("test") or {}).get("change")
    if not isinstance(change, dict) or too_few_to_judge(change.get("pairs") or 0):
        return None
    accuracy, margin = change["preference_accuracy"], change["log_likelihood_margin"]
    return {**change, "sentence": (
        f"Against its base on {change['pairs']} held-out pairs: preference accuracy {accuracy['difference']:+.3f} "
        f"({accuracy['gained']} pairs gained, {accuracy['lost']} lost; McNemar's exact p {accuracy['p_value']:.3g}), "
        f"log-likelihood margin {margin['mean_change']:+.3f} ({margin.get('confidence', 0.95):.1%} interval "
        f"{margin['interval'][0]:+.3f} to {margin['interval'][1]:+.3f}). "
        + ("That is a change beyond chance." if change["real"] else
           "Neither test shows a change: this run was too short, or its test split too small, to show one."))}


def parent_evaluations(run: Run, limit: int = 3) -> list[dict]:
    """A GRPO run judged on held-out tasks: the succeeded evaluations that read the checkpoint it made against its
    base checkpoint, task by task (annotate/runs/evaluation.py eval_changes), newest first, each with its sentence
    (better, worse, or too short to show a difference). A GRPO run scores no held-out set itself."""
    made = run.made_checkpoint if run.kind == Run.Kind.GRPO and run.base_checkpoint_id else None
    if made is None:
        return []
    found = []
    for evaluation in evals_of(made):
        side = eval_side_by_side(evaluation) or {}
        for change in side.get("changes", []):
            if change["checkpoint_id"] == made.pk and change["against_id"] == run.base_checkpoint_id:
                found.append({**change, "run": evaluation.pk, "page": reverse("run-page", args=[evaluation.pk]),
                              "task_set": evaluation.task_set.name if evaluation.task_set else None,
                              "tasks_path": evaluation.config.get("tasks")})
        if len(found) >= limit:
            break
    return found


# A reward run's test-split figures (run.json results.test, training/reward.py reward_summary): each row with the
# pairs it stands on; the length split's rows stand on their own subsets, so one can be too few while the rest are not.
REWARD_ROWS = (("accuracy", "accuracy (chosen scored above rejected)"),
               ("chosen_shorter", "accuracy, chosen answer shorter"),
               ("chosen_longer", "accuracy, chosen answer longer"),
               ("mean_margin", "mean margin (chosen − rejected)"),
               ("length_correlation", "reward vs answer length (Pearson r)"))


def reward_table(run: Run) -> list[dict]:
    """A reward run's held-out figures: {"metric", "key", "pairs", "value", "interval", "too_few_to_judge"} per row
    (accuracy with its 95% Wilson interval, the same for pairs whose chosen answer is the shorter or the longer one,
    mean margin, reward-length correlation). Under TOO_FEW_TO_JUDGE pairs a row says so; over none it has no value."""
    if run.kind != Run.Kind.REWARD:
        return []
    test = ((run.record or {}).get("results") or {}).get("test")
    if not isinstance(test, dict) or not isinstance(test.get("n"), int):
        return []
    rows = []
    for key, text in REWARD_ROWS:
        figure = test.get(key)
        if isinstance(figure, dict) and "accuracy" in figure:  # a length split: a subset with its own count
            pairs, value, interval = figure.get("n"), figure.get("accuracy"), figure.get("interval")
        elif key == "length_correlation":
            pairs, value, interval = test["n"], (figure or {}).get("pearson"), None
        else:
            pairs, value, interval = test["n"], figure, test.get("interval") if key == "accuracy" else None
        nothing = not pairs
        rows.append({"metric": text, "key": key, "pairs": pairs, "value": None if nothing else value,
                     "interval": None if nothing else interval, "too_few_to_judge": too_few_to_judge(pairs)})
    # The one length rule (training.reward_model_scorer.fits_max_length): pairs over max_length are not scored.
    train = ((run.record or {}).get("results") or {}).get("train_over_max_length") or {}
    for key, text, pairs in (
            ("left_out_over_max_length", "test pairs longer than max_length: not scored", test.get(
                "left_out_over_max_length")),
            ("train_over_max_length", "train pairs longer than max_length: left out of training", train.get("pairs"))):
        if isinstance(pairs, int):
            rows.append({"metric": text, "key": key, "pairs": pairs, "value": None, "interval": None,
                         "too_few_to_judge": False})
    return rows


def reward_model_mismatch(run: Run) -> str | None:
    """For a finished GRPO run scored by a picked reward model: one line when run.json's reward_model is not the
    checkpoint picked (another content hash, or none recorded). Neither record is ever rewritten; pages show it."""
    scorer = run.reward_model
    if scorer is None or run.status != Run.Status.SUCCEEDED or not run.record:
        return None
    recorded = run.record.get("reward_model") or {}
    if not recorded:
        return (f"run.json records no reward model, though {scorer.name!r} was picked: its answers were not scored "
                "by that reward model")
    if scorer.content_hash and recorded.get("content_hash") != scorer.content_hash:
        return (f"run.json's reward model {recorded.get('path')} has content hash {recorded.get('content_hash')}, "
                f"not {scorer.content_hash} of the picked checkpoint {scorer.name!r}: the run was scored by other "
                "weights than the ones registered under that name")
    return None


def reward_model_summary(run: Run) -> dict | None:
    """The reward model that scored a GRPO run: the checkpoint, the reward run that trained it and that run's
    snapshot (its lineage), what run.json recorded, and a mismatch between the two."""
    scorer = run.reward_model
    if scorer is None:
        return None
    trained_by = scorer.run
    return {**checkpoint_summary(scorer),
            "trained_by": {"id": trained_by.pk, "page": reverse("run-page", args=[trained_by.pk]),
                           "snapshot": snapshot_summary(trained_by)} if trained_by else None,
            "recorded": (run.record or {}).get("reward_model"), "mismatch": reward_model_mismatch(run)}


def eval_note(run: Run) -> str | None:
    """Why a DPO run has no held-out scores, as run.json says (an empty test split, ZeRO-3)."""
    results = (run.record or {}).get("results") or {}
    return results.get("note") if not results.get("test") else None


# ledger.json, as a table (docs/training.md, "The run folder"). The time a GRPO run spent, phase by phase in the
# order its own printed table uses, each with its share of the wall time; then what it consumed and counted;
# then every other key, flattened to "a / b" rows (a key this list does not know is shown, never dropped); the
# inputs and outputs (paths and hashes) last. PostgreSQL's jsonb does not keep a ledger's key order, hence
# the explicit orders.
LEDGER_TIME_PHASES = {
    "generation": "generation", "verification": "verification", "update": "update (forward, backward, optimizer)",
    "loading_switching": "loading and switching", "loading": "of which loading and saving the model",
    "switching": "of which pushing weights to vLLM", "recording": "recording rollouts",
    "difficulty_prepass": "difficulty pre-pass", "train_loop": "the training loop (all but loading and the pre-pass)",
}
LEDGER_ORDER = ("consumed", "optimizer_steps", "completions", "completions_trained", "tokens_generated",
                "completion_length", "truncated_share", "groups", "gpu_hours")
LEDGER_LAST = ("inputs", "outputs")
LEDGER_NESTED_ORDER = ("optimizer_steps", "epochs", "train_pairs", "pairs_seen", "tasks", "completions",
                       "tokens_generated", "wall_s", "groups", "zero_variance", "zero_variance_share", "all_correct",
                       "all_wrong", "dropped", "surplus", "refill_rounds", "mean", "max", "kind")


def _ledger_keys(mapping: dict, first: tuple = LEDGER_NESTED_ORDER) -> list:
    known = [key for key in first if key in mapping]
    return known + sorted((key for key in mapping if key not in known), key=str)


def _ledger_name(key) -> str:
    text = str(key)
    return (text[:-2] if text.endswith("_s") else text).replace("_", " ")


def _ledger_value(key, value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float) and str(key).endswith("_s"):
        return f"{value:,.2f} s"
    if isinstance(value, int | float) and str(key).endswith("_share"):
        return f"{value:.1%}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, list):
        return ", ".join(_ledger_value("", item) for item in value) or "—"
    return str(value)


def _ledger_flat(prefix: str, key, value) -> list[dict]:
    """One row per scalar under `key`: dicts by key, lists of dicts by each item's kind (else its place)."""
    name = f"{prefix} / {_ledger_name(key)}" if prefix else _ledger_name(key)
    if isinstance(value, dict) and value:
        return [row for inner in _ledger_keys(value) for row in _ledger_flat(name, inner, value[inner])]
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return [row for number, item in enumerate(value, 1)
                for row in _ledger_flat(name, item.get("kind") or number,
                                        {inner: v for inner, v in item.items() if inner != "kind"})]
    return [{"name": name, "value": _ledger_value(key, value), "share": None}]


def ledger_rows(ledger: dict | None) -> list[dict]:
    """ledger.json as rows of a table: {"name", "value", "share"}, as shown: "share" is the share of the wall time
    a time row took ("40.1%"), None on other rows."""
    if not isinstance(ledger, dict) or not ledger:
        return []
    rest = dict(ledger)
    if isinstance(rest.get("cycle"), dict):
        del rest["cycle"]  # a staged run's cycle has a table of its own (cycle_ledger)
    time_s = rest.pop("time_s") if isinstance(ledger.get("time_s"), dict) else {}
    consumed = ledger.get("consumed") if isinstance(ledger.get("consumed"), dict) else {}
    wall = time_s.get("wall", consumed.get("wall_s"))
    wall = wall if isinstance(wall, int | float) and not isinstance(wall, bool) else None
    rows = []
    for key in [*(k for k in LEDGER_TIME_PHASES if k in time_s), *sorted(set(time_s) - {*LEDGER_TIME_PHASES, "wall"})]:
        seconds = time_s[key]
        timed = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        rows.append({"name": f"time / {LEDGER_TIME_PHASES.get(key, _ledger_name(key))}",
                     "value": f"{seconds:,.2f} s" if timed else _ledger_value(key, seconds),
                     "share": f"{seconds / wall:.1%}" if timed and wall else None})
    if wall is not None:
        rows.append({"name": "time / wall", "value": f"{wall:,.2f} s", "share": "100.0%" if wall else None})
        if consumed.get("wall_s") == wall:  # the row above; a differing one stays below
            rest["consumed"] = {key: value for key, value in consumed.items() if key != "wall_s"}
            if not rest["consumed"]:
                del rest["consumed"]
    order = [key for key in LEDGER_ORDER if key in rest]
    order += sorted((key for key in rest if key not in order and key not in LEDGER_LAST), key=str)
    order += [key for key in LEDGER_LAST if key in rest]
    for key in order:
        rows += _ledger_flat("", key, rest[key])
    return rows


# A staged or overlapped GRPO run's cycle (docs/training.md, "The staged cycle"): run.json's `cycle` as it advances,
# and ledger.json's `cycle` once it ends: where the time went per kind of work, each lane's idle time.
CYCLE_WORK = (("generation_s", "generation"), ("verification_s", "verification"),
              ("switching_s", "switching (process start, loading, saving)"), ("update_s", "update"))
CYCLE_COUNTS = (("cycles", "cycles"), ("switching_share", "switching share of wall time"),
                ("records_dropped_stale", "records dropped as stale"), ("stage_restarts", "stage restarts"),
                ("tokens_generated", "tokens generated"), ("mean_length", "mean completion length"))
# The parts of switching (training/grpo/cycle.py's SWITCHING_PARTS), each a row under switching.
CYCLE_SWITCHING_PARTS = (("cold_start_s", "process start"), ("loading_s", "loading"),
                         ("hashing_s", "hashing the weights"), ("saving_s", "saving"), ("export_s", "writing the version"))
# Nested counts of the cycle's ledger: TRL's correction of stale answers, and the versions retention removed.
CYCLE_NESTED_COUNTS = (
    ("stale_correction", (("updates", "updates on stale answers"), ("ratio_min", "stale answer weight: min"),
                          ("ratio_mean", "stale answer weight: mean"), ("ratio_max", "stale answer weight: max"),
                          ("masked_share", "stale answers masked (share)"),
                          ("negligible_share", "stale answers weighted below 0.001 (share)"),
                          ("effective_sample_size_min", "effective sample size (smallest)"))),
    ("retention", (("versions_removed", "versions removed by retention"), ("bytes_freed", "bytes freed by retention"))),
    # generation_engine vllm: vLLM's log-probabilities against the training forward's, and TRL's correction of them
    ("sampler_mismatch", (("batches", "batches sampled by vLLM"),
                          ("mean_abs", "vLLM vs training log-probability: mean |difference| per token"),
                          ("max_abs", "vLLM vs training log-probability: max |difference|"),
                          ("kl_k3", "KL estimate, vLLM to training (k3, per token)"))),
    ("sampler_correction", (("ratio_min", "vLLM answer weight: min"), ("ratio_mean", "vLLM answer weight: mean"),
                            ("ratio_max", "vLLM answer weight: max"),
                            ("masked_share", "vLLM answers masked (share)"))),
)
CYCLE_PER_BATCH = ("batch", "generated_by", "trained", "lag", "generation_s", "verification_s", "switching_s",
                   "update_s", "loss")
# Each batch's sampler_mismatch (vLLM batches; a dash for the others).
CYCLE_PER_BATCH_MISMATCH = ("mean_abs", "max_abs", "kl_k3")
VERSION_NAME = re.compile(r"^v(\d{4,})$")


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _versions_written(cycle: dict, update: dict) -> int | None:
    """How many versions exist (v0000 counts): run.json's count, or one past the version the update names."""
    counts = [cycle["versions"]] if isinstance(cycle.get("versions"), int) else []
    match = VERSION_NAME.match(str(update.get("version") or ""))
    if match:
        counts.append(int(match.group(1)) + 1)
    return max(counts, default=None)


def cycle_progress(run: Run) -> dict | None:
    """A staged or overlapped GRPO run's cycle as run.json last said it: its mode, the batch being generated (by
    which version, and how far: generating, scoring, scored), the version being trained (updating, or written),
    and how many versions are written; None for a run without a cycle."""
    record = run.record or {}
    cycle = record.get("cycle")
    if run.kind != Run.Kind.GRPO or not isinstance(cycle, dict):
        return None
    generation = cycle.get("generation") if isinstance(cycle.get("generation"), dict) else {}
    update = cycle.get("update") if isinstance(cycle.get("update"), dict) else {}
    state = "completed" if cycle.get("state") == "completed" else "running" if generation or update else (
        cycle.get("state") or "starting")
    return {
        "mode": record.get("mode"), "max_staleness": record.get("max_staleness"), "state": state,
        "generation": {key: generation.get(key) for key in ("batch", "version", "state")},
        "update": {key: update.get(key) for key in ("version", "state")},
        "versions": _versions_written(cycle, update),
    }


def cycle_ledger(ledger: dict | None) -> dict | None:
    """ledger.json's `cycle` as tables: each kind of work and each lane's idle time with its share of the wall
    time, the counts (switching share, records dropped as stale, stage restarts), and one row per cycle."""
    cycle = ledger.get("cycle") if isinstance(ledger, dict) else None
    if not isinstance(cycle, dict):
        return None
    wall = cycle.get("wall_s") if _number(cycle.get("wall_s")) else None
    idle = cycle.get("idle_s") if isinstance(cycle.get("idle_s"), dict) else {}
    time_rows = [(name, cycle.get(key)) for key, name in CYCLE_WORK]
    time_rows += [(f"{lane} lane idle", seconds) for lane, seconds in sorted(idle.items())]
    split = cycle.get("switching_split_s") if isinstance(cycle.get("switching_split_s"), dict) else {}
    time_rows += [(f"switching / {name}", split[key]) for key, name in CYCLE_SWITCHING_PARTS if key in split]
    if "queue_idle_s" in cycle:
        time_rows.append(("queue and idle (no stage running)", cycle["queue_idle_s"]))
    return {
        "mode": cycle.get("mode"), "max_staleness": cycle.get("max_staleness"),
        "wall": _ledger_value("wall_s", wall),
        "time": [{"name": name, "value": _ledger_value("_s", seconds),
                  "share": f"{seconds / wall:.1%}" if _number(seconds) and wall else None}
                 for name, seconds in time_rows],
        "counts": [{"name": name, "value": _ledger_value(key, cycle.get(key))} for key, name in CYCLE_COUNTS] + [
            {"name": name, "value": _ledger_value(key, cycle[group][key])}
            for group, keys in CYCLE_NESTED_COUNTS if isinstance(cycle.get(group), dict)
            for key, name in keys if key in cycle[group]],
        "per_cycle": [[_ledger_value(key, row.get(key)) for key in CYCLE_PER_BATCH]
                      + [_ledger_value(key, (row.get("sampler_mismatch") or {}).get(key)) for key in CYCLE_PER_BATCH_MISMATCH]
                      for row in cycle.get("per_cycle") or [] if isinstance(row, dict)],
    }


def latest(metrics: list[dict]) -> dict:
    """The last training row: step, loss and the rest as last logged."""
    rows = [row for row in metrics if row.get("event", "train") == "train" and "loss" in row]
    return rows[-1] if rows else {}


# The kinds that train through TRL and log its metrics; an SFT build logs its loss in its log; evaluations and
# comparisons train nothing, so their pages draw no curve.
TRL_TRAINING_KINDS = (Run.Kind.DPO, Run.Kind.GRPO, Run.Kind.REWARD)


def training_rows(run: Run) -> list[dict]:
    """A run's training rows: its metrics.jsonl, or an SFT build's step lines."""
    return sft_log_metrics(run.log_tail) if run.kind == Run.Kind.SFT else run.metrics


def run_curves(run: Run) -> dict[str, str]:
    """The charts a run of its kind draws: every curve for DPO, GRPO and reward runs, the loss of an SFT build,
    none for an evaluation or a comparison."""
    if run.kind == Run.Kind.SFT:
        return {"loss": str(run_charts(training_rows(run))["loss"])}
    if run.kind not in TRL_TRAINING_KINDS:
        return {}
    return {name: str(svg) for name, svg in run_charts(run.metrics).items()}


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
        "reward_model": reward_model_summary(run),
        "output_checkpoint": checkpoint_summary(made),
        "no_output_checkpoint": unmade.reason if unmade else None,
        "weights_unchanged": unmade.weights_unchanged if unmade else False,
        "folder": run.folder,
        "steps": latest(training_rows(run)).get("step"),
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
            "cycle": cycle_progress(run),
            "eval": eval_table(run),
            "eval_note": eval_note(run),
            "test_change": test_change(run),
            "parent_evaluations": parent_evaluations(run),
            "reward_eval": reward_table(run),
            "too_few_to_judge_under": TOO_FEW_TO_JUDGE,
            "evaluation": eval_side_by_side(run) if run.kind == Run.Kind.EVAL else None,
            "log_tail": run.log_tail,
            "charts": run_curves(run),
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


def checkpoint_payload(checkpoint: Checkpoint) -> dict:
    """A checkpoint with its lineage, for GET /api/v1/checkpoints/{id}: its parents nearest first, the run that
    made it, and the checkpoints trained from it by the kind of run that made them."""
    made_by = checkpoint.run
    return {
        **checkpoint_summary(checkpoint),
        "registered_by": checkpoint.registered_by.get_username() if checkpoint.registered_by else None,
        "created_at": checkpoint.created_at,
        "parents": [checkpoint_summary(parent) for parent in ancestry(checkpoint)],
        "is_reward_model": is_reward_model(checkpoint),
        "made_by": run_payload(made_by) | {"eval": eval_table(made_by), "reward_eval": reward_table(made_by)}
        if made_by else None,
        "scored_runs": [run.pk for run in checkpoint.runs_scored.order_by("id")],
        "children": {kind: [{"checkpoint": checkpoint_summary(entry["checkpoint"]),
                             "run": entry["run"].pk if entry["run"] else None,
                             "status": entry["run"].status if entry["run"] else None,
                             "no_output_checkpoint": entry.get("no_output_checkpoint"), "eval": entry["eval"],
                             "reward_eval": entry.get("reward_eval", [])}
                            for entry in entries]
                     for kind, entries in children_by_kind(checkpoint).items()},
    }


def children_by_kind(checkpoint: Checkpoint) -> dict[str, list[dict]]:
    """Checkpoints trained from this one, by the kind of run that made them (DPO, GRPO and reward models side by
    side), with the runs from it that made nothing yet (queued, running, failed)."""
    columns: dict[str, list[dict]] = {"dpo": [], "grpo": [], "reward": []}
    trained = checkpoint.runs_from.filter(kind__in=list(columns))  # evaluations and comparisons train nothing
    for run in trained.select_related("output_checkpoint", "launched_by").order_by("id"):
        unmade = why_no_checkpoint_made(run)
        columns[run.kind].append({"run": run, "checkpoint": run.made_checkpoint,
                                  "no_output_checkpoint": unmade.reason if unmade else None,
                                  "weights_unchanged": unmade.weights_unchanged if unmade else False,
                                  "eval": eval_table(run), "reward_eval": reward_table(run),
                                  "steps": latest(run.metrics).get("step")})
    made_here = {entry["checkpoint"].pk for entries in columns.values() for entry in entries if entry["checkpoint"]}
    for child in checkpoint.children.exclude(pk__in=made_here).order_by("id"):
        columns.setdefault("registered", []).append({"run": None, "checkpoint": child, "eval": [], "steps": None})
    return columns

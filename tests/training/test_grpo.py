"""`python -m training grpo`, `grpo-filter` and `rescore` on the tiny checkpoint, on the CPU.

Every run here is a few GRPO steps with short completions: enough to see the weights change and every
attempt recorded, not to see learning (bench/grpo_learning.py measures that).
"""

import json
import math
import random
import shutil

import pytest

from tests.training.helpers import write_grpo_config as write_config
from tests.training.helpers import write_unlearnable_tasks
from training.cli import main
from training.run_folder import checkpoint_content_hash

from .conftest import run_training_cli

pytestmark = pytest.mark.slow

ROLLOUT_FIELDS = {
    "rollout_id", "batch", "group_id", "member", "task_id", "prompt", "completion", "completion_token_ids", "logprobs",
    "logprobs_source", "finish_reason", "length", "status", "reward", "components", "component_scores", "reason",
    "scorer", "reward_model_score", "reward_model", "advantage", "in_batch", "policy_step", "policy_weights_sha256",
    "policy_version", "process_index",
}


def load_weights(folder):
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def rollouts(run):
    from training.grpo.rollouts import read_rollouts

    return read_rollouts(run).to_pylist()


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, grpo_checkpoint, speed_tasks):
    tmp_path = tmp_path_factory.mktemp("smoke")
    result = run_training_cli("grpo", "--config", str(write_config(tmp_path, grpo_checkpoint, speed_tasks,
                                                                   max_steps=3, scale_rewards="group")))
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp_path / "grpo", result


def test_a_few_steps_change_the_weights_and_record_the_lineage(smoke_run, grpo_checkpoint, speed_tasks):
    run, result = smoke_run
    before, after = load_weights(grpo_checkpoint), load_weights(run / "checkpoint")
    assert before.keys() == after.keys()
    assert any(not before[name].equal(after[name]) for name in before)

    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and record["kind"] == "grpo" and record["steps"] == 3
    assert record["base_checkpoint"]["content_hash"] == checkpoint_content_hash(grpo_checkpoint)
    assert record["config"]["num_generations"] == 4 and record["config"]["scale_rewards"] == "group"
    assert record["output_checkpoint"]["content_hash"] == checkpoint_content_hash(run / "checkpoint")
    assert record["weights_changed"] is True and record["weights_unchanged_reason"] is None
    parent = json.loads((run / "checkpoint" / "parent.json").read_text())
    assert parent["parent"]["content_hash"] == record["base_checkpoint"]["content_hash"] and parent["kind"] == "grpo"
    assert parent["weights_changed"] is True
    assert [t["task_id"] for t in map(json.loads, (run / "tasks.jsonl").read_text().splitlines())] == \
        [t["task_id"] for t in map(json.loads, speed_tasks.read_text().splitlines())]
    assert "where the time went" in result.stdout and "zero-variance groups" in result.stdout


def test_every_completion_is_on_record_with_every_field(smoke_run):
    run, _ = smoke_run
    rows = rollouts(run)
    assert len(rows) == 3 * 8  # three steps of eight completions
    assert set(rows[0]) == ROLLOUT_FIELDS
    tasks = {t["task_id"]: t for t in map(json.loads, (run / "tasks.jsonl").read_text().splitlines())}
    for row in rows:
        assert row["task_id"] in tasks and row["prompt"] == tasks[row["task_id"]]["prompt"]
        assert row["length"] == len(row["completion_token_ids"]) > 0
        assert len(row["logprobs"]) == row["length"] and all(lp <= 0 for lp in row["logprobs"])
        assert row["logprobs_source"] == "policy forward in the update"
        assert row["finish_reason"] in ("stopped", "truncated")
        assert (row["finish_reason"] == "truncated") == (row["length"] == 24 and row["completion_token_ids"][-1] != 2)
        assert row["status"] in ("correct", "wrong") and row["scorer"].startswith("math@")
        assert set(dict(row["component_scores"])) >= {"answer", "format"}
        assert json.loads(row["components"])["answer"] == dict(row["component_scores"])["answer"]
        assert row["in_batch"] and row["policy_weights_sha256"].startswith("sha256:")
    # Four completions per group, one prompt each; a new policy version each step.
    groups = {}
    for row in rows:
        groups.setdefault(row["group_id"], set()).add(row["task_id"])
    assert len(groups) == 6 and all(len(ids) == 1 for ids in groups.values())
    by_step = {}
    for row in rows:
        by_step.setdefault(row["policy_step"], set()).add(row["policy_weights_sha256"])
    assert sorted(by_step) == [0, 1, 2] and all(len(hashes) == 1 for hashes in by_step.values())
    assert len(set().union(*by_step.values())) == 3


def test_every_advantage_is_recomputed_from_its_group_and_the_config(smoke_run):
    from training.grpo.rollouts import recompute_advantages

    run, _ = smoke_run
    rows = rollouts(run)
    config = json.loads((run / "run.json").read_text())["config"]
    recomputed = recompute_advantages(rows, scale_rewards=config["scale_rewards"],
                                      multi_objective_aggregation=config["multi_objective_aggregation"])
    for row in rows:
        assert math.isclose(recomputed[row["rollout_id"]], row["advantage"], abs_tol=1e-4), row["rollout_id"]
    # The check above is not vacuous however the run's groups came out (all of them may score alike, and then every
    # advantage is 0): the same arithmetic on a group worked by hand. Rewards 1, 0, 0, 0: mean 0.25, standard
    # deviation with Bessel's correction sqrt(0.75 / 3) = 0.5, so (r - 0.25) / (0.5 + 1e-4); unscaled r - 0.25.
    worked = [{"rollout_id": f"w-{i}", "group_id": "w", "batch": 0, "reward": reward}
              for i, reward in enumerate([1.0, 0.0, 0.0, 0.0])]
    by_hand = {"group": [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001],
               "none": [0.75, -0.25, -0.25, -0.25]}
    for scale, expected in by_hand.items():
        advantages = recompute_advantages(worked, scale_rewards=scale)
        assert [round(advantages[f"w-{i}"], 6) for i in range(4)] == [round(value, 6) for value in expected]


def test_zero_variance_groups_are_counted_per_step_and_per_run(smoke_run):
    run, _ = smoke_run
    rows = rollouts(run)
    per_group = {}
    for row in rows:
        per_group.setdefault(row["group_id"], []).append(row["reward"])
    expected = sum(len(set(rewards)) == 1 for rewards in per_group.values())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if m["event"] == "generation"]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert sum(m["zero_variance"] for m in steps) == expected
    assert all(m["groups"] == 2 for m in steps)
    assert all("zero_variance/share" in m for m in metrics if m["event"] == "train" and "loss" in m)
    ledger = json.loads((run / "ledger.json").read_text())
    assert ledger["groups"]["groups"] == 6 and ledger["groups"]["zero_variance"] == expected
    assert ledger["completions"] == 24 and ledger["tokens_generated"] == sum(r["length"] for r in rows)
    assert ledger["completion_length"]["max"] == max(r["length"] for r in rows)
    for key in ("generation", "verification", "update", "loading_switching", "recording", "wall"):
        assert ledger["time_s"][key] >= 0, key
    assert ledger["time_s"]["generation"] > 0 and ledger["time_s"]["verification"] > 0
    assert ledger["gpu_hours"] is None


def test_rescore_stores_new_scores_beside_the_original(smoke_run, tmp_path):
    import pyarrow.parquet as pq

    run, _ = smoke_run
    before = rollouts(run)
    scorer = tmp_path / "answer-only.yaml"
    scorer.write_text("format_weight: 0\nunit_weight: 0\n")  # a changed exam: only the number counts

    result = run_training_cli("rescore", "--run", str(run), "--scorer", str(scorer), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "original" in result.stdout and "rescored" in result.stdout

    assert rollouts(run) == before  # never over the original scores
    files = list((run / "rescored").glob("*.parquet"))
    assert len(files) == 1 and "+config-" in files[0].name
    rescored = {r["rollout_id"]: r for r in pq.read_table(files[0]).to_pylist()}
    assert rescored.keys() == {r["rollout_id"] for r in before}
    for row in before:
        new = rescored[row["rollout_id"]]
        assert new["original_reward"] == row["reward"] and new["original_scorer"] == row["scorer"]
        assert new["scorer"] != row["scorer"] and "+config-" in new["scorer"]
        # Only the answer weighs now: the reward is the answer component (a right number with a wrong unit
        # scores 1 and is still not correct).
        assert new["reward"] == json.loads(new["components"])["answer"]
        assert new["status"] == row["status"]  # the same verdicts; the reward's make-up changed
    record = json.loads((run / "run.json").read_text())
    assert record["rescores"][-1]["file"] == f"rescored/{files[0].name}"

    again = run_training_cli("rescore", "--run", str(run), "--scorer", str(scorer), timeout=120)
    assert again.returncode == 2 and "never overwrites" in again.stderr
    unknown = run_training_cli("rescore", "--run", str(run), "--scorer", "math@99", timeout=120)
    assert unknown.returncode == 2 and "math@99 is not installed here" in unknown.stderr
    assert "Traceback" not in unknown.stderr + again.stderr


def test_a_run_whose_groups_all_score_alike_says_its_weights_did_not_change(tmp_path, tiny_checkpoint):
    tasks = write_unlearnable_tasks(tmp_path / "missing.jsonl")
    result = run_training_cli("grpo", "--config", str(write_config(tmp_path, tiny_checkpoint, tasks,
                                                                   max_completion_length=4)))
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "grpo"
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and record["steps"] == 2
    assert record["output_checkpoint"]["content_hash"] == checkpoint_content_hash(tiny_checkpoint)
    assert record["weights_changed"] is False
    assert record["weights_unchanged_reason"] == ("every group's answers were all wrong (4 of 4 groups), so no "
                                                  "answer had an advantage to learn from")
    assert json.loads((run / "checkpoint" / "parent.json").read_text())["weights_changed"] is False
    assert ("weights unchanged: every group's answers were all wrong (4 of 4 groups), so no answer had an advantage "
            "to learn from; checkpoint/ holds the base's weights, not a new model") in result.stdout


def test_dynamic_sampling_replaces_zero_variance_groups_and_records_them(tmp_path, grpo_checkpoint, speed_tasks):
    # Seed 3: its first batches hold zero-variance groups (four of them over the two steps), so the replacement runs.
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, max_steps=2, dynamic_sampling=True,
                          dynamic_sampling_max_rounds=1, scale_rewards="batch", seed=3)
    assert main(["grpo", "--config", str(config)]) == 0
    run = tmp_path / "grpo"
    rows = rollouts(run)
    ledger = json.loads((run / "ledger.json").read_text())
    groups = ledger["groups"]
    # Each step trains on exactly one batch of 8; extra rounds add records, never training rows.
    assert sum(r["in_batch"] for r in rows) == 16 == ledger["completions_trained"]
    assert len(rows) == 16 + 8 * groups["refill_rounds"]
    assert len(rows) == ledger["completions"]
    left_out = {r["group_id"] for r in rows if not r["in_batch"]}
    assert len(left_out) == groups["dropped"] + groups["surplus"]
    # The groups left out are the zero-variance ones it dropped (some here: the replacement was exercised) and,
    # beside them, the surplus groups with signal that the full batch had no room for.
    zero_variance = {g for g in left_out if len({r["reward"] for r in rows if r["group_id"] == g}) == 1}
    assert len(zero_variance) == groups["dropped"] > 0 and groups["refill_rounds"] > 0
    assert all(r["logprobs"] is not None and len(r["logprobs"]) == r["length"] for r in rows)
    # Batch scaling: the standard deviation of each scoring call's rewards, recomputed from the records.
    from training.grpo.rollouts import recompute_advantages

    recomputed = recompute_advantages(rows, scale_rewards="batch")
    assert all(math.isclose(recomputed[r["rollout_id"]], r["advantage"], abs_tol=1e-4) for r in rows)


def test_generated_token_budget_stops_the_run(tmp_path, grpo_checkpoint, speed_tasks):
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, max_steps=50, max_generated_tokens=20)
    assert main(["grpo", "--config", str(config)]) == 0
    record = json.loads((tmp_path / "grpo" / "run.json").read_text())
    assert record["steps"] == 1  # 8 completions of at least 3 tokens pass 20 tokens in the first step


def test_difficulty_prepass_keeps_the_tasks_inside_the_band_whatever_the_order(tmp_path, grpo_checkpoint,
                                                                             speed_tasks, capsys):
    from training.grpo.difficulty import pass_rates

    rows = [json.loads(line) for line in speed_tasks.read_text().splitlines()][:6]
    shuffled = rows[:]
    random.Random(1).shuffle(shuffled)
    settings = {"checkpoint": grpo_checkpoint, "samples": 3, "temperature": 1.0, "max_new_tokens": 24, "seed": 0,
                "workers": 1}
    rates = pass_rates(tasks=rows, **settings)
    assert pass_rates(tasks=shuffled, **settings) == rates
    assert all(r["samples"] == 3 and r["pass_rate"] == round(r["correct"] / 3, 4) for r in rates.values())

    tasks, out = tmp_path / "shuffled.jsonl", tmp_path / "kept.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in shuffled))
    code = main(["grpo-filter", "--checkpoint", str(grpo_checkpoint), "--tasks", str(tasks), "--out", str(out),
                 "--samples", "3", "--max-new-tokens", "24"])
    inside = [r["task_id"] for r in shuffled if 0 < rates[r["task_id"]]["pass_rate"] < 1]
    if inside:
        assert code == 0
        kept = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["task_id"] for r in kept] == inside  # in the file's order, each with its pass rate
        assert all(r["meta"]["pass_rate"] == rates[r["task_id"]]["pass_rate"] for r in kept)
        assert all(r["meta"]["pass_rate_checkpoint"] == checkpoint_content_hash(grpo_checkpoint) for r in kept)
    else:
        assert code == 2 and "no task" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(("case", "message"), [
    ("missing tasks", "cannot read the file"),
    ("bad task line", "line 2:"),
    ("not a checkpoint", "has no config.json"),
    ("config typo", "unknown key 'num_generation' (did you mean 'num_generations'?)"),
    ("reference without beta", "reference_checkpoint is used only by the KL term, and beta is 0.0"),
    ("reference not a checkpoint", "reference_checkpoint"),
    ("reference of another architecture", "tie_word_embeddings is False but the base checkpoint's is True"),
    ("reference with sync_ref_model", "reference_checkpoint cannot be set with sync_ref_model"),
    ("beta null", "beta is null; give a number: 0 for no KL term"),
])
def test_bad_input_is_one_line_exit_2_and_no_run_folder(tmp_path, grpo_checkpoint, speed_tasks, capsys, case,
                                                        message):
    checkpoint, tasks, extra = grpo_checkpoint, speed_tasks, {}
    if case == "missing tasks":
        tasks = tmp_path / "no-such-tasks.jsonl"
    elif case == "bad task line":
        tasks = tmp_path / "bad.jsonl"
        first = speed_tasks.read_text().splitlines()[0]
        tasks.write_text(first + "\n" + json.dumps({"task_id": "x", "kind": "poem", "prompt": "hi"}) + "\n")
    elif case == "not a checkpoint":
        checkpoint = tmp_path / "plain-folder"
        checkpoint.mkdir()
    elif case == "reference without beta":
        extra = {"reference_checkpoint": str(grpo_checkpoint)}
    elif case == "reference not a checkpoint":
        (tmp_path / "plain-folder").mkdir()
        extra = {"reference_checkpoint": str(tmp_path / "plain-folder"), "beta": 0.04}
        message = f"reference_checkpoint {tmp_path / 'plain-folder'} has no config.json"
    elif case == "reference of another architecture":
        untied = tmp_path / "untied"
        shutil.copytree(grpo_checkpoint, untied)
        model_config = json.loads((untied / "config.json").read_text())
        (untied / "config.json").write_text(json.dumps({**model_config, "tie_word_embeddings": False}))
        extra = {"reference_checkpoint": str(untied), "beta": 0.04}
    elif case == "reference with sync_ref_model":
        extra = {"reference_checkpoint": str(grpo_checkpoint), "beta": 0.04, "sync_ref_model": True}
    elif case == "beta null":
        extra = {"beta": None}
    else:
        extra = {"num_generation": 4}
    assert main(["grpo", "--config", str(write_config(tmp_path, checkpoint, tasks, **extra))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "grpo").exists()


def test_the_kl_term_measures_against_reference_checkpoint_not_the_policy_it_starts_from(tmp_path, smoke_run,
                                                                                        grpo_checkpoint, speed_tasks):
    """A second round starts from a GRPO child; reference_checkpoint keeps its KL term on the SFT parent."""
    child = smoke_run[0] / "checkpoint"

    def first_step(name, **extra):
        result = run_training_cli("grpo", "--config", str(write_config(tmp_path, child, speed_tasks, name=name,
                                                                       max_steps=1, beta=0.04, **extra)))
        assert result.returncode == 0, result.stderr[-3000:]
        run = tmp_path / name
        metrics = [row for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "kl" in row]
        return metrics[0]["kl"], json.loads((run / "run.json").read_text()), json.loads((run / "ledger.json").read_text())

    own_kl, own_record, _ = first_step("own-start")
    parent_kl, record, ledger = first_step("parent-reference", reference_checkpoint=str(grpo_checkpoint))
    # Before its first update the policy is its own start: no distance to it, a clear one to the parent. The policy
    # itself is the same in both runs (the same answers, with the same log-probabilities): only the reference moved.
    assert own_kl == pytest.approx(0.0, abs=1e-6) and parent_kl > 1e-3
    own_rows, parent_rows = rollouts(tmp_path / "own-start"), rollouts(tmp_path / "parent-reference")
    assert [(r["completion"], r["logprobs"]) for r in own_rows] == [(r["completion"], r["logprobs"]) for r in parent_rows]
    assert own_record["kl_reference"]["content_hash"] == checkpoint_content_hash(child)
    assert record["kl_reference"]["content_hash"] == checkpoint_content_hash(grpo_checkpoint)
    assert record["base_checkpoint"]["content_hash"] == checkpoint_content_hash(child)
    assert {"kind": "kl_reference", **record["kl_reference"]} in ledger["inputs"]

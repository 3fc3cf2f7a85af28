"""GRPO with a reward model: open tasks scored by it alone, mixed with the verifier through TRL's reward_weights,
its identity on every rollout and in the lineage, a rescore by another reward model, and its bad input."""

import json

import pytest
import yaml

from tests.conftest import TORCH_THREADS
from training.cli import main
from training.grpo.rollouts import read_rollouts, recompute_advantages
from training.run_folder import checkpoint_content_hash

from .conftest import run_training_cli, train_reward_model

pytestmark = pytest.mark.slow


def write_tasks_file(path, *, open_kind: bool, n: int = 8):
    from training.task_families import make_tasks, open_tasks
    from training.tasks import write_tasks

    tasks = make_tasks("speed", n=n, seed=5)
    write_tasks(path, open_tasks(tasks) if open_kind else tasks)
    return path


def write_config(tmp_path, checkpoint, tasks, *, name="grpo", **overrides):
    config = {
        "base_checkpoint": str(checkpoint), "tasks": str(tasks), "output_dir": str(tmp_path / name),
        "max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 16,
        "learning_rate": 5e-3, "logging_steps": 1, "save_strategy": "no", "use_cpu": True, "torch_threads": TORCH_THREADS,
        "verifier_workers": 1, "report_to": ["none"], "seed": 0, **overrides,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def open_run(tmp_path_factory, tiny_checkpoint, tiny_reward_model):
    tmp_path = tmp_path_factory.mktemp("open-run")
    tasks = write_tasks_file(tmp_path / "open.jsonl", open_kind=True)
    result = run_training_cli("grpo", "--config", str(write_config(tmp_path, tiny_checkpoint, tasks,
                                                                   reward_model=str(tiny_reward_model))))
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp_path / "grpo", result


def test_open_tasks_are_scored_by_the_reward_model_alone_and_it_is_named_everywhere(open_run, tiny_reward_model,
                                                                                     tiny_snapshot):
    run, result = open_run
    identity = "reward_model@" + checkpoint_content_hash(tiny_reward_model)
    rows = read_rollouts(run).to_pylist()
    assert len(rows) == 16
    for row in rows:
        assert row["status"] == "unverified" and row["reward"] is None and row["scorer"] == "none"
        assert row["reward_model"] == identity and isinstance(row["reward_model_score"], float)
    # The advantages TRL trained on are those of the reward model's scores, group by group (TRL computes in float32:
    # where a group's scores lie close, dividing by their small spread magnifies its rounding, hence rel).
    recomputed = recompute_advantages(rows, scale_rewards="group", reward_weights=(1.0, 1.0))
    assert {r["rollout_id"]: r["advantage"] for r in rows} == pytest.approx(recomputed, rel=1e-2, abs=1e-4)
    assert any(abs(r["advantage"]) > 0.1 for r in rows)

    record = json.loads((run / "run.json").read_text())
    assert record["reward_model"]["identity"] == identity
    assert record["reward_model"]["path"] == str(tiny_reward_model.resolve())
    assert record["reward_functions"] == [{"name": "verifier", "weight": 1.0}, {"name": "reward_model", "weight": 1.0}]
    assert record["scorers"]["training"] == [identity]
    parent = json.loads((run / "checkpoint" / "parent.json").read_text())
    snapshot_id = json.loads((tiny_snapshot / "manifest.json").read_text())["snapshot_id"]
    assert parent["reward_model"] == {"path": str(tiny_reward_model.resolve()),
                                      "content_hash": checkpoint_content_hash(tiny_reward_model),
                                      "snapshot_id": snapshot_id}
    ledger = json.loads((run / "ledger.json").read_text())
    assert {"kind": "reward_model", **record["reward_model"]} in ledger["inputs"]
    # Reward and length side by side, step by step, from the rollouts themselves.
    assert [step["step"] for step in ledger["by_step"]] == [1, 2]
    for step in ledger["by_step"]:
        written = [r for r in rows if r["policy_step"] == step["step"] - 1]
        assert step["mean_length"] == pytest.approx(sum(r["length"] for r in written) / len(written), abs=1e-3)
        assert step["reward_model"] == pytest.approx(sum(r["reward_model_score"] for r in written) / len(written),
                                                     abs=1e-3)
        assert step["reward"] == step["reward_model"] and step["correct_share"] is None
    assert "reward model  correct  mean length" in result.stdout


def test_the_benchmark_verifies_a_reward_model_runs_answers_afterwards_from_its_recorded_rows(open_run):
    """training/reward_model_check.py reads a real run's rollouts and scores each recorded answer against its task."""
    from training.reward_model_check import verified_afterwards
    from training.task_families import make_tasks
    from training.verifiers.task_verifier import TaskVerifier

    run, _ = open_run
    tasks = make_tasks("speed", n=8, seed=5)  # the verifiable tasks behind the open ones the run trained on
    afterwards = verified_afterwards(run, tasks, windows=2)
    rows = read_rollouts(run).to_pylist()
    by_id = {task["task_id"]: task for task in tasks}
    with TaskVerifier(workers=1) as verifier:
        correct = [v.status == "correct" for v in verifier.verify_many([(by_id[r["task_id"]], r["completion"])
                                                                        for r in rows])]
    assert afterwards["answers"] == len(rows) == 16
    assert [w["steps"] for w in afterwards["correct_share_by_steps"]] == [[0, 0], [1, 1]]
    for window in afterwards["correct_share_by_steps"]:
        inside = [c for c, r in zip(correct, rows, strict=True) if r["policy_step"] == window["steps"][0]]
        assert window["answers"] == len(inside) == 8
        assert window["correct_share"] == round(sum(inside) / len(inside), 4)
    groups = {}
    for is_correct, row in zip(correct, rows, strict=True):
        groups.setdefault(row["group_id"], []).append(is_correct)
    assert afterwards["within_prompt"]["all"]["pairs"] == sum(g.count(True) * g.count(False) for g in groups.values())


def test_a_reward_model_beside_the_verifier_is_weighted_by_trl(tmp_path, tiny_checkpoint, tiny_reward_model):
    """Verifiable tasks, reward model only ([0, 1]): the verifier still checks every answer for the record, but the
    advantages come from the reward model's scores."""
    tasks = write_tasks_file(tmp_path / "speed.jsonl", open_kind=False)
    config = write_config(tmp_path, tiny_checkpoint, tasks, reward_model=str(tiny_reward_model),
                          reward_weights=[0.0, 1.0], max_steps=1)
    assert main(["grpo", "--config", str(config)]) == 0
    rows = read_rollouts(tmp_path / "grpo").to_pylist()
    assert all(r["status"] in ("correct", "wrong") and r["scorer"].startswith("math@") for r in rows)
    assert all(isinstance(r["reward_model_score"], float) for r in rows)
    recorded = {r["rollout_id"]: r["advantage"] for r in rows}
    assert recorded == pytest.approx(recompute_advantages(rows, scale_rewards="group", reward_weights=(0.0, 1.0)),
                                     rel=1e-2, abs=1e-4)
    by_reward_model_alone = recompute_advantages([{**r, "reward": None} for r in rows], scale_rewards="group",
                                                 reward_weights=(1.0, 1.0))
    assert recorded == pytest.approx(by_reward_model_alone, rel=1e-2, abs=1e-4)


def test_rescoring_with_another_reward_model_keeps_both_scores(open_run, tmp_path, tiny_checkpoint, tiny_snapshot,
                                                              capsys):
    run, _ = open_run
    other = train_reward_model(tmp_path, tiny_checkpoint, tiny_snapshot, steps=3)
    rollout_bytes = {p.name: p.read_bytes() for p in (run / "rollouts").iterdir()}

    assert main(["rescore", "--run", str(run), "--reward-model", str(other)]) == 0
    out = capsys.readouterr().out
    assert "Pearson r between the two" in out and "the original rollouts are unchanged" in out

    import pyarrow.parquet as pq

    identity = "reward_model@" + checkpoint_content_hash(other)
    files = list((run / "rescored").glob("reward_model@*.parquet"))
    assert len(files) == 1
    rescored = pq.read_table(files[0]).to_pylist()
    originals = {r["rollout_id"]: r for r in read_rollouts(run).to_pylist()}
    assert {r["rollout_id"] for r in rescored} == set(originals)
    for row in rescored:
        assert row["reward_model"] == identity
        assert row["original_reward_model"] == originals[row["rollout_id"]]["reward_model"] != identity
        assert row["original_reward_model_score"] == originals[row["rollout_id"]]["reward_model_score"]
    assert {p.name: p.read_bytes() for p in (run / "rollouts").iterdir()} == rollout_bytes
    record = json.loads((run / "run.json").read_text())
    assert record["rescores"][-1]["rescored"]["reward_models"] == [identity]

    # Scores already stored are never overwritten.
    assert main(["rescore", "--run", str(run), "--reward-model", str(other)]) == 2
    assert "never overwrites stored scores" in capsys.readouterr().err


@pytest.mark.parametrize(("case", "message"), [
    ("open tasks, no reward model", "which no verifier scores; set reward_model"),
    ("a causal LM as reward model", "is not a trained reward model"),
    ("one weight for two functions", "reward_weights has 1 weights but the run has 2 reward functions"),
    ("open tasks, reward model weighted 0", "give it a weight above 0"),
])
def test_bad_reward_model_input_is_one_line_and_no_run_folder(tmp_path, tiny_checkpoint, tiny_reward_model, capsys,
                                                              case, message):
    tasks = write_tasks_file(tmp_path / "open.jsonl", open_kind=True, n=4)
    extra = {
        "open tasks, no reward model": {},
        "a causal LM as reward model": {"reward_model": str(tiny_checkpoint)},
        "one weight for two functions": {"reward_model": str(tiny_reward_model), "reward_weights": [1.0]},
        "open tasks, reward model weighted 0": {"reward_model": str(tiny_reward_model), "reward_weights": [1.0, 0.0]},
    }[case]
    assert main(["grpo", "--config", str(write_config(tmp_path, tiny_checkpoint, tasks, **extra))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "grpo").exists()


def test_reward_score_scores_each_answer_alone_and_refuses_bad_lines(tmp_path, tiny_reward_model, tiny_checkpoint,
                                                                      capsys):
    answers = tmp_path / "answers.jsonl"
    answers.write_text("\n".join(json.dumps(row) for row in [
        {"id": "p1-left", "prompt": [{"role": "user", "content": "A car drives 60 km in 2 hours. Speed?"}],
         "answer": "60 / 2 = 30\nAnswer: 30 km/h"},
        {"id": "p1-right", "prompt": [{"role": "user", "content": "A car drives 60 km in 2 hours. Speed?"}],
         "answer": "I am not sure."},
    ]) + "\n")
    out = tmp_path / "scores.json"
    assert main(["reward-score", "--reward-model", str(tiny_reward_model), "--answers", str(answers),
                 "--out", str(out)]) == 0
    scores = json.loads(out.read_text())
    assert scores["reward_model"]["identity"] == "reward_model@" + checkpoint_content_hash(tiny_reward_model)
    assert [row["id"] for row in scores["scores"]] == ["p1-left", "p1-right"]
    # Each answer is scored alone: the same answer in another file, in another place, gets the same score.
    alone = tmp_path / "alone.jsonl"
    alone.write_text(answers.read_text().splitlines()[1] + "\n")
    assert main(["reward-score", "--reward-model", str(tiny_reward_model), "--answers", str(alone),
                 "--out", str(tmp_path / "alone.json")]) == 0
    again = json.loads((tmp_path / "alone.json").read_text())["scores"][0]["score"]
    assert again == pytest.approx(scores["scores"][1]["score"], abs=1e-5)
    capsys.readouterr()

    answers.write_text(json.dumps({"id": "x", "prompt": "", "answer": "y"}) + "\n" + json.dumps({"id": "x"}) + "\n")
    assert main(["reward-score", "--reward-model", str(tiny_reward_model), "--answers", str(answers),
                 "--out", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 1: prompt is empty" in err[0] and "line 2: needs exactly the keys" in err[0]
    assert not (tmp_path / "bad.json").exists()
    assert main(["reward-score", "--reward-model", str(tiny_checkpoint), "--answers", str(alone),
                 "--out", str(tmp_path / "bad.json")]) == 2
    assert "is not a trained reward model" in capsys.readouterr().err


def capped_reward_model(tiny_reward_model, folder, max_length: int):
    """A copy of the reward model's run folder whose run.json says it was trained under `max_length`."""
    import shutil

    shutil.copytree(tiny_reward_model.parent, folder)
    record = json.loads((folder / "run.json").read_text())
    record["config"]["max_length"] = max_length
    (folder / "run.json").write_text(json.dumps(record))
    return folder / "checkpoint"


def test_an_answer_over_max_length_is_not_scored_and_is_counted_wherever_a_reward_model_scores(
        tmp_path, tiny_reward_model, open_run, capsys):
    """One length rule (fits_max_length): reward-score, GRPO's reward function and rescore leave an over-length
    answer unscored (None), never cut, and say how many."""
    import shutil

    from training.grpo.rewards import RewardModelReward
    from training.reward_model_scorer import RewardModelScorer

    prompt = [{"role": "user", "content": "A car drives 60 km in 2 hours. Speed?"}]
    short, long = "Answer: 30 km/h", "60 / 2 = 30, so the speed is 30 km/h. " * 20 + "Answer: 30 km/h"
    full = RewardModelScorer(tiny_reward_model)
    short_length, long_length = len(full.sequence(prompt, short)), len(full.sequence(prompt, long))
    checkpoint = capped_reward_model(tiny_reward_model, tmp_path / "capped", max_length=short_length)
    assert short_length < long_length

    answers = tmp_path / "answers.jsonl"
    answers.write_text("\n".join(json.dumps({"id": name, "prompt": prompt, "answer": answer})
                                 for name, answer in (("short", short), ("long", long))) + "\n")
    out = tmp_path / "scores.json"
    assert main(["reward-score", "--reward-model", str(checkpoint), "--answers", str(answers), "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    scores = {row["id"]: row["score"] for row in written["scores"]}
    assert scores["long"] is None and written["over_max_length"] == 1
    assert scores["short"] == pytest.approx(full.score([prompt], [short])[0], abs=1e-5)  # what fits is as before
    assert f"1 of 2 answers longer than max_length ({short_length} tokens) not scored" in capsys.readouterr().out

    logged = {}
    reward = RewardModelReward(RewardModelScorer(checkpoint))
    given = reward(prompts=[prompt, prompt], completions=[[{"role": "assistant", "content": short}],
                                                          [{"role": "assistant", "content": long}]],
                   log_metric=lambda name, value: logged.update({name: value}))
    assert given[1] is None and given[0] == pytest.approx(scores["short"], abs=1e-5)
    assert logged == {"reward_model/over_max_length": 0.5}

    # Rescoring a copy of a GRPO run with a model that fits nothing: every new score is null, and said.
    run = tmp_path / "run-copy"
    shutil.copytree(open_run[0], run)
    nothing = capped_reward_model(tiny_reward_model, tmp_path / "fits-nothing", max_length=1)
    rollouts = read_rollouts(run).num_rows
    assert main(["rescore", "--run", str(run), "--reward-model", str(nothing)]) == 0
    out = capsys.readouterr().out
    assert f"{rollouts} of {rollouts} completions longer than max_length (1 tokens) not scored" in out
    rescored = json.loads((run / "run.json").read_text())["rescores"][-1]["rescored"]
    assert rescored["over_max_length"] == rollouts and rescored["completions"] == 0
    assert rescored["mean_score"] is None


def test_the_staged_cycle_counts_answers_over_the_reward_models_max_length(tmp_path, tiny_checkpoint,
                                                                           tiny_reward_model):
    """The staged score stage records how many answers the reward model left unscored, and the update logs the same
    share in-process GRPO logs: a reward model that fits nothing is never silent."""
    from training.grpo.stages import (
        SCORED,
        RecordedModelScores,
        batch_folder,
        generate_stage,
        read_records,
        score_stage,
    )

    nothing = capped_reward_model(tiny_reward_model, tmp_path / "fits-nothing", max_length=1)
    tasks = write_tasks_file(tmp_path / "open.jsonl", open_kind=True)
    config = write_config(tmp_path, tiny_checkpoint, tasks, name="staged", reward_model=str(nothing), max_steps=1,
                          mode="staged")
    result = run_training_cli("cycle", "--config", str(config), "--prepare-only")
    assert result.returncode == 0, result.stderr
    run = tmp_path / "staged"
    generate_stage(run, 0, 0)
    record = score_stage(run, 0)
    assert record["completions"] == 8 and record["reward_model_over_max_length"] == 8
    assert json.loads((batch_folder(run, 0) / "score.json").read_text())["reward_model_over_max_length"] == 8

    scored = read_records(batch_folder(run, 0) / SCORED)
    logged = {}
    given = RecordedModelScores(scored)(pairwise_record=list(range(len(scored))),
                                        log_metric=lambda name, value: logged.update({name: value}))
    assert given == [None] * 8 and logged == {"reward_model/over_max_length": 1.0}


def test_in_process_grpo_with_a_reward_model_that_fits_no_answer_runs_and_says_so(tmp_path, tiny_checkpoint,
                                                                                  tiny_reward_model):
    """Open tasks scored by a reward model whose max_length no answer fits: every reward is None (TRL leaves such an
    answer out), the run ends as a run that learned nothing rather than with a traceback, and the share is logged."""
    nothing = capped_reward_model(tiny_reward_model, tmp_path / "fits-nothing", max_length=1)
    tasks = write_tasks_file(tmp_path / "open.jsonl", open_kind=True)
    config = write_config(tmp_path, tiny_checkpoint, tasks, name="unscored", reward_model=str(nothing), max_steps=1)
    result = run_training_cli("grpo", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    steps = [json.loads(line) for line in (tmp_path / "unscored" / "metrics.jsonl").read_text().splitlines()]
    assert any(step.get("rewards/pairwise_reward_model/over_max_length") == 1.0
               or step.get("reward_model/over_max_length") == 1.0 for step in steps), steps
    rows = read_rollouts(tmp_path / "unscored").to_pylist()
    assert rows and all(row["reward_model_score"] is None for row in rows)

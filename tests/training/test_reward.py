"""`python -m training reward`: a reward model from the tiny checkpoint on a snapshot, scored on its test split."""

import json

import pytest

from tests.training.helpers import load_weights, write_snapshot_run_config
from training.cli import main
from training.run_folder import checkpoint_content_hash

from .conftest import run_training_cli

pytestmark = pytest.mark.slow


def write_config(tmp_path, checkpoint, snapshot, **overrides):
    return write_snapshot_run_config(tmp_path, checkpoint, snapshot, name="reward", **overrides)


def copied_snapshot(out, source, *, with_test=True, with_strength=False):
    """The rows of `source` in a new snapshot: without its test split, or with a judgment strength in meta."""
    from training.snapshot import SnapshotWriter, iter_rows

    with SnapshotWriter(out, project="tiny-demo", created_at="2025-01-01T00:00:00Z", criteria_version=1,
                        filters={"copied": True}) as writer:
        for split in ("train", "test") if with_test else ("train",):
            for number, row in enumerate(iter_rows(source, split)):
                meta = {**row["meta"], "strength": 1 + number % 3} if with_strength else row["meta"]
                writer.add_row(split, {**row, "meta": meta})
    return out


def test_two_reward_steps_train_a_classifier_and_score_the_test_split(tmp_path, tiny_checkpoint, tiny_snapshot):
    result = run_training_cli("reward", "--config", str(write_config(tmp_path, tiny_checkpoint, tiny_snapshot)))
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    for name in ("run.json", "metrics.jsonl", "ledger.json", "checkpoint/model.safetensors",
                 "checkpoint/parent.json", "checkpoint/tokenizer_config.json"):
        assert (run / name).is_file(), name

    # The body the classifier shares with the causal LM it started from has moved; the LM head became a score head.
    before, after = load_weights(tiny_checkpoint), load_weights(run / "checkpoint")
    shared = before.keys() & after.keys()
    assert shared and any(not before[name].equal(after[name]) for name in shared)
    assert after["score.weight"].shape[0] == 1
    model_config = json.loads((run / "checkpoint" / "config.json").read_text())
    assert model_config["architectures"] == ["LlamaForSequenceClassification"]
    assert model_config["pad_token_id"] is not None

    record = json.loads((run / "run.json").read_text())
    assert record["format"] == "pairwise.run/1" and record["kind"] == "reward"
    assert record["status"] == "completed" and record["steps"] == 2 and record["weights_changed"] is True
    assert record["config"]["max_steps"] == 2 and record["config"]["margin_from_strength"] is False
    base_hash = checkpoint_content_hash(tiny_checkpoint)
    assert record["base_checkpoint"]["content_hash"] == base_hash
    snapshot_id = json.loads((tiny_snapshot / "manifest.json").read_text())["snapshot_id"]
    assert record["snapshot"]["snapshot_id"] == snapshot_id

    parent = json.loads((run / "checkpoint" / "parent.json").read_text())
    assert parent["parent"] == {"path": str(tiny_checkpoint.resolve()), "content_hash": base_hash}
    assert parent["snapshot_id"] == snapshot_id and parent["kind"] == "reward"
    ledger = json.loads((run / "ledger.json").read_text())
    assert ledger["consumed"]["optimizer_steps"] == 2

    test = record["results"]["test"]
    assert test["n"] == 8 and 0.0 <= test["accuracy"] <= 1.0
    low, high = test["interval"]
    assert 0.0 <= low <= test["accuracy"] <= high <= 1.0
    assert test["chosen_shorter"]["n"] + test["chosen_longer"]["n"] + test["equal_length_pairs"] == 8
    assert test["length_correlation"]["answers"] == 16
    assert -1.0 <= test["length_correlation"]["pearson"] <= 1.0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["event"] == "train" and "loss" in r and "eval_loss" not in r] == [1, 2]
    # TRL's own evaluation loop on the test split, every tenth of training (here every step): a test-accuracy curve.
    evaluated = [r for r in rows if "eval_accuracy" in r]
    assert [r["step"] for r in evaluated] == [1, 2] and all(0.0 <= r["eval_accuracy"] <= 1.0 for r in evaluated)
    assert [r["accuracy"] for r in rows if r["event"] == "test"] == [test["accuracy"]]
    assert "accuracy (chosen above rejected)" in result.stdout and "reward vs length" in result.stdout


def test_a_snapshot_without_test_rows_trains_and_says_it_was_not_scored(tmp_path, tiny_checkpoint, tiny_snapshot,
                                                                         capsys):
    snapshot = copied_snapshot(tmp_path / "train-only", tiny_snapshot, with_test=False)
    config = write_config(tmp_path, tiny_checkpoint, snapshot, max_steps=1, report_to=["none"])

    assert main(["reward", "--config", str(config)]) == 0

    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "completed"
    assert record["results"] == {"test": None, "note": "not scored: the snapshot has no test split",
                                 "train_over_max_length": {"pairs": 0, "of": 24, "max_length": 1024}}
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert "eval_accuracy" not in metrics  # nothing to evaluate on
    assert "not scored: the snapshot has no test split" in capsys.readouterr().out


def first_step_loss(run) -> float:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return next(row["loss"] for row in rows if row["event"] == "train" and "loss" in row)


def test_margin_from_strength_asks_for_a_larger_reward_gap(tmp_path, tiny_checkpoint, tiny_snapshot):
    snapshot = copied_snapshot(tmp_path / "with-strength", tiny_snapshot, with_strength=True)
    losses = {}
    for margin in (False, True):
        folder = tmp_path / f"margin-{margin}"
        folder.mkdir()
        config = write_config(folder, tiny_checkpoint, snapshot, max_steps=1, report_to=["none"],
                              margin_from_strength=margin)
        assert main(["reward", "--config", str(config)]) == 0
        losses[margin] = first_step_loss(folder / "run")
    # Same seed, head and batch: only the margin differs, and -log sigmoid(gap - margin) is larger.
    assert losses[True] > losses[False]


def test_standard_format_parquet_snapshot_trains_as_is(tmp_path, tiny_checkpoint):
    from training.tiny import write_tiny_snapshot

    snapshot = tmp_path / "standard"
    write_tiny_snapshot(snapshot, train=8, test=4, row_format="standard", file_format="parquet")
    config = write_config(tmp_path, tiny_checkpoint, snapshot, max_steps=1, report_to=["none"])

    assert main(["reward", "--config", str(config)]) == 0
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "completed" and record["results"]["test"]["n"] == 4


def test_check_prints_the_resolved_config_and_writes_nothing(tmp_path, tiny_checkpoint, tiny_snapshot, capsys):
    config = write_config(tmp_path, tiny_checkpoint, tiny_snapshot, center_rewards_coefficient=0.01)

    assert main(["reward", "--config", str(config), "--check"]) == 0

    resolved = json.loads(capsys.readouterr().out)
    assert resolved["center_rewards_coefficient"] == 0.01 and resolved["max_length"] == 1024
    assert resolved["base_checkpoint"] == str(tiny_checkpoint)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("case", "message"), [
    ("config typo", "unknown key 'margin_from_strenght' (did you mean 'margin_from_strength'?)"),
    ("not a checkpoint", "has no config.json, so it is not a Hugging Face checkpoint"),
    ("not a classifier", "AutoModelForSequenceClassification cannot load"),
    ("no strength in meta", "has no judgment strength (its meta has no strength, only task_id)"),
])
def test_bad_input_is_one_line_exit_2_and_no_run_folder(tmp_path, tiny_checkpoint, tiny_snapshot, capsys, case,
                                                        message):
    checkpoint, extra = tiny_checkpoint, {}
    if case == "config typo":
        extra = {"margin_from_strenght": True}
    elif case == "not a checkpoint":
        checkpoint = tmp_path / "plain-folder"
        checkpoint.mkdir()
    elif case == "not a classifier":
        checkpoint = tmp_path / "vision"
        checkpoint.mkdir()
        (checkpoint / "config.json").write_text(json.dumps({"model_type": "vit"}))
    else:
        extra = {"margin_from_strength": True}
    config = write_config(tmp_path, checkpoint, tiny_snapshot, **extra)

    for argv in (["reward", "--config", str(config)], ["reward", "--config", str(config), "--check"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert not (tmp_path / "run").exists()


def test_bad_key_from_the_command_line_shows_no_traceback(tmp_path, tiny_checkpoint, tiny_snapshot):
    config = write_config(tmp_path, tiny_checkpoint, tiny_snapshot, learnig_rate=0.1)
    result = run_training_cli("reward", "--config", str(config), timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {config}: unknown key 'learnig_rate' (did you mean 'learning_rate'?); see the keys with --help-config"]
    assert not (tmp_path / "run").exists()


def test_help_config_lists_the_reward_keys(capsys):
    assert main(["reward", "--help-config"]) == 0
    out = capsys.readouterr().out
    for key in ("base_checkpoint", "snapshot", "margin_from_strength", "center_rewards_coefficient", "max_length"):
        assert key in out, key


def test_pairs_over_max_length_are_left_out_of_training_and_test_scoring_and_counted(tmp_path, tiny_checkpoint,
                                                                                      tiny_snapshot):
    """One length rule (training.reward_model_scorer.fits_max_length): a pair with an answer longer than max_length
    is left out of training (TRL's filter) and of test scoring, and both counts are recorded and printed."""
    from transformers import AutoTokenizer

    from training.reward_model_scorer import fits_max_length, sequence_ids
    from training.snapshot import iter_rows

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)

    def longest(row):
        return max(len(sequence_ids(tokenizer, row, key)) for key in ("chosen", "rejected"))

    train, test = list(iter_rows(tiny_snapshot, "train")), list(iter_rows(tiny_snapshot, "test"))
    max_length = sorted(longest(row) for row in train + test)[len(train + test) // 2]
    over_train = sum(not fits_max_length([0] * longest(row), max_length) for row in train)
    over_test = sum(not fits_max_length([0] * longest(row), max_length) for row in test)
    assert 0 < over_train < len(train) and over_test < len(test)

    result = run_training_cli("reward", "--config", str(write_config(tmp_path, tiny_checkpoint, tiny_snapshot,
                                                                     max_length=max_length)))
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "run.json").read_text())["results"]
    assert results["train_over_max_length"] == {"pairs": over_train, "of": len(train), "max_length": max_length}
    assert results["test"]["left_out_over_max_length"] == over_test
    assert results["test"]["n"] == len(test) - over_test
    assert (f"train split: {over_train} of {len(train)} pairs longer than max_length ({max_length} tokens) not "
            "scored") in result.stdout

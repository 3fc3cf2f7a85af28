"""`python -m training dpo`: trains from the tiny checkpoint on a snapshot and records the lineage."""

import json

import pytest

from tests.training.helpers import load_weights, write_snapshot_run_config
from training.cli import main
from training.run_folder import checkpoint_content_hash

from .conftest import run_training_cli

pytestmark = pytest.mark.slow


def write_config(tmp_path, checkpoint, snapshot, **overrides):
    return write_snapshot_run_config(tmp_path, checkpoint, snapshot, name="dpo", **overrides)


def test_two_dpo_steps_change_the_weights_and_record_the_lineage(tmp_path, tiny_checkpoint, tiny_snapshot):
    result = run_training_cli("dpo", "--config", str(write_config(tmp_path, tiny_checkpoint, tiny_snapshot)))
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"

    before, after = load_weights(tiny_checkpoint), load_weights(run / "checkpoint")
    assert before.keys() == after.keys()
    assert any(not before[name].equal(after[name]) for name in before)

    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and record["kind"] == "dpo" and record["steps"] == 2
    assert record["base_checkpoint"]["content_hash"] == checkpoint_content_hash(tiny_checkpoint)
    manifest = json.loads((tiny_snapshot / "manifest.json").read_text())
    assert record["snapshot"]["snapshot_id"] == manifest["snapshot_id"]
    assert record["config"]["beta"] == 0.1 and record["config"]["max_steps"] == 2
    for key in ("code_version", "hardware", "libraries", "started_at", "ended_at", "scorers"):
        assert key in record, key
    assert record["output_checkpoint"]["content_hash"] == checkpoint_content_hash(run / "checkpoint")
    test = record["results"]["test"]
    assert test["base"]["pairs"] == test["trained"]["pairs"] == 8
    assert test["base"]["reward_margin"] == 0.0
    assert test["trained"]["reward_margin"] != 0.0

    parent = json.loads((run / "checkpoint" / "parent.json").read_text())
    assert parent["parent"]["content_hash"] == record["base_checkpoint"]["content_hash"]
    ledger = json.loads((run / "ledger.json").read_text())
    assert ledger["consumed"]["optimizer_steps"] == 2

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["event"] == "train" and "loss" in r]
    assert [r["step"] for r in train_rows] == [1, 2]
    assert {"rewards/margins", "rewards/accuracies"} <= set(train_rows[0])
    assert {r["model"] for r in rows if r["event"] == "test"} == {"base", "trained"}
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert "preference accuracy" in result.stdout


def test_resume_continues_from_the_last_checkpoint(tmp_path, tiny_checkpoint, tiny_snapshot):
    config = write_config(tmp_path, tiny_checkpoint, tiny_snapshot, max_steps=1, save_steps=1, report_to=["none"])
    assert main(["dpo", "--config", str(config)]) == 0
    fresh_base = json.loads((tmp_path / "run" / "run.json").read_text())["results"]["test"]["base"]
    config = write_config(tmp_path, tiny_checkpoint, tiny_snapshot, max_steps=2, save_steps=1, report_to=["none"],
                          resume_from_checkpoint=True)
    assert main(["dpo", "--config", str(config)]) == 0

    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["steps"] == 2 and record["status"] == "completed"
    assert record["resumed"][0]["from"].endswith("checkpoint-1")
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
             if '"loss"' in line]
    assert steps == [1, 2]
    # After a resume the base model is scored from its checkpoint on disk: the same figures as the fresh run.
    assert record["results"]["test"]["base"] == fresh_base


def test_lora_run_saves_an_adapter_and_merged_weights(tmp_path, tiny_checkpoint, tiny_snapshot):
    config = write_config(tmp_path, tiny_checkpoint, tiny_snapshot, use_peft=True, lora_r=4, lora_alpha=8,
                          max_steps=1, learning_rate=1e-2, report_to=["none"])
    assert main(["dpo", "--config", str(config)]) == 0

    run = tmp_path / "run"
    assert (run / "adapter" / "adapter_config.json").is_file()
    before, after = load_weights(tiny_checkpoint), load_weights(run / "checkpoint")
    assert before.keys() == after.keys()
    assert any(not before[name].equal(after[name]) for name in before)



def test_standard_format_parquet_snapshot_trains_as_is(tmp_path, tiny_checkpoint):
    from training.tiny import write_tiny_snapshot

    snapshot = tmp_path / "standard"
    write_tiny_snapshot(snapshot, train=8, test=4, row_format="standard", file_format="parquet")
    config = write_config(tmp_path, tiny_checkpoint, snapshot, max_steps=1, report_to=["none"])

    assert main(["dpo", "--config", str(config)]) == 0
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "completed" and record["results"]["test"]["trained"]["pairs"] == 4

def corrupt(tmp_path, tiny_snapshot, how):
    import shutil

    copy = tmp_path / "snap"
    shutil.copytree(tiny_snapshot, copy)
    if how == "tampered":
        (copy / "train.jsonl").write_text((copy / "train.jsonl").read_text().replace("Answer", "Answr", 1))
    elif how == "unknown version":
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["format"] = "pairwise.snapshot/9"
        (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.parametrize(("case", "message"), [
    ("missing snapshot", "does not exist or is not a folder"),
    ("tampered", "train.jsonl does not match its sha256"),
    ("unknown version", "pairwise.snapshot/9"),
    ("not a checkpoint", "has no config.json"),
    ("not a causal LM", "not a causal language model"),
    ("config typo", "unknown key 'betta' (did you mean 'beta'?)"),
])
def test_bad_input_is_one_line_exit_2_and_no_run_folder(tmp_path, tiny_checkpoint, tiny_snapshot, capsys, case,
                                                        message):
    checkpoint, snapshot, extra = tiny_checkpoint, tiny_snapshot, {}
    if case == "missing snapshot":
        snapshot = tmp_path / "no-such-snapshot"
    elif case in ("tampered", "unknown version"):
        snapshot = corrupt(tmp_path, tiny_snapshot, case)
    elif case == "not a checkpoint":
        checkpoint = tmp_path / "plain-folder"
        checkpoint.mkdir()
    elif case == "not a causal LM":
        checkpoint = tmp_path / "vision"
        checkpoint.mkdir()
        (checkpoint / "config.json").write_text(json.dumps({"model_type": "vit"}))
    else:
        extra = {"betta": 0.2}
    config = write_config(tmp_path, checkpoint, snapshot, **extra)

    assert main(["dpo", "--config", str(config)]) == 2

    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run").exists()


def test_bad_input_from_the_command_line_shows_no_traceback(tmp_path, tiny_checkpoint):
    config = write_config(tmp_path, tiny_checkpoint, tmp_path / "missing")
    result = run_training_cli("dpo", "--config", str(config), timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: snapshot")
    assert not (tmp_path / "run").exists()


def test_existing_run_folder_is_not_overwritten(tmp_path, tiny_checkpoint, tiny_snapshot, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    assert main(["dpo", "--config", str(write_config(tmp_path, tiny_checkpoint, tiny_snapshot))]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "run" / "run.json").read_text() == "{}"


def test_the_change_from_the_base_is_paired_and_worked_by_hand():
    from training.dpo import change_from_base

    # Ten test pairs as (log p(chosen), log p(rejected)): the base ranks pair 0 right, the trained model pairs 0-7.
    reference = [(-1.0, -2.0)] + [(-2.0, -1.0)] * 9
    policy = [(-1.0, -2.0)] * 8 + [(-2.0, -1.0)] * 2
    change = change_from_base(policy, reference)
    accuracy, margin = change["preference_accuracy"], change["log_likelihood_margin"]
    # 7 gained, 0 lost: +0.7, Wald spread sqrt(7 - 49/10)/10; McNemar's exact p = 2 x 0.5^7.
    assert (accuracy["gained"], accuracy["lost"], accuracy["difference"]) == (7, 0, 0.7)
    assert accuracy["interval"] == pytest.approx([0.7 - 1.96 * 2.1 ** 0.5 / 10, 0.7 + 1.96 * 2.1 ** 0.5 / 10], abs=1e-4)
    assert accuracy["p_value"] == pytest.approx(2 * 0.5 ** 7)
    # Margin changes: 0, seven of +2, two of 0: mean 1.4, sd sqrt(8.4/9); each of the two tests at 2.5%, so the
    # interval is 97.5%: t(0.9875, 9) = 2.6850.
    half = 2.685011 * (8.4 / 9) ** 0.5 / 10 ** 0.5
    assert margin["mean_change"] == pytest.approx(1.4)
    assert margin["interval"] == pytest.approx([1.4 - half, 1.4 + half], abs=1e-5)
    assert margin["confidence"] == 0.975 and change["real"] is True


def test_a_wald_interval_that_excludes_zero_is_not_enough_when_the_exact_test_is_not():
    from training.dpo import change_from_base

    # 5 gained and none lost of 10: the Wald interval (+0.19 to +0.81) excludes 0, McNemar's exact p is 0.0625.
    reference = [(-2.0, -1.0)] * 10
    policy = [(-1.0, -2.0)] * 5 + [(-2.8, -1.0)] * 5
    change = change_from_base(policy, reference)
    assert change["preference_accuracy"]["interval"][0] > 0
    assert change["preference_accuracy"]["p_value"] == pytest.approx(0.0625)
    # The margin moved by +2 on five pairs and by -0.8 on the others: mean +0.6, its 97.5% interval reaches below 0.
    assert change["log_likelihood_margin"]["mean_change"] == pytest.approx(0.6)
    assert change["log_likelihood_margin"]["interval"][0] < 0
    assert change["real"] is False


def test_a_run_that_changed_nothing_is_within_chance():
    from training.dpo import change_from_base

    pairs = [(-1.0, -2.0), (-2.0, -1.0), (-1.5, -1.4), (-3.0, -2.0)]
    change = change_from_base(pairs, pairs)
    assert change["preference_accuracy"]["difference"] == 0 and change["preference_accuracy"]["p_value"] == 1.0
    assert change["log_likelihood_margin"]["interval"] == [0.0, 0.0]
    assert change["real"] is False

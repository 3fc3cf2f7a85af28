"""The staged GRPO cycle (`python -m training cycle`, and its generate / score / update stages) on the tiny
checkpoint, on the CPU: the same weights as in-process GRPO, versions named on every record, refusals, reruns,
overlap within a staleness bound, and killed processes."""

import json
import shutil

import pytest

from tests.training.helpers import COMPARED_BETA, load_weights, records, rollout_rows, version_record
from tests.training.helpers import write_grpo_config as write_config
from training.run_folder import checkpoint_content_hash

from .conftest import run_training_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def staged_run(tmp_path_factory, grpo_checkpoint, speed_tasks):
    tmp = tmp_path_factory.mktemp("staged")
    config = write_config(tmp, grpo_checkpoint, speed_tasks, name="run", mode="staged", beta=COMPARED_BETA)
    result = run_training_cli("cycle", "--config", str(config))
    assert result.returncode == 0, result.stderr
    return tmp / "run", result.stdout


def test_staged_mode_trains_the_same_weights_on_the_same_answers_as_in_process(grpo_in_process_run, staged_run,
                                                                                grpo_checkpoint):
    staged, printed = staged_run
    in_process_weights, staged_weights = load_weights(grpo_in_process_run / "checkpoint"), load_weights(staged / "checkpoint")
    assert staged_weights.keys() == in_process_weights.keys()
    assert all((staged_weights[name] == in_process_weights[name]).all() for name in staged_weights), \
        "two staged cycles must end on the in-process run's weights, bit for bit"
    assert any((staged_weights[name] != load_weights(grpo_checkpoint)[name]).any() for name in staged_weights)

    left, right = rollout_rows(grpo_in_process_run), rollout_rows(staged)
    assert [r["rollout_id"] for r in right] == [r["rollout_id"] for r in left] and len(right) == 16
    for field in ("completion", "completion_token_ids", "reward", "advantage", "status"):
        assert [r[field] for r in right] == [r[field] for r in left], field
    # The staged records carry the log-probabilities the generating version recorded; in-process ones come from the
    # update's forward pass of the same weights: the same numbers.
    assert all(r["logprobs"] == s["logprobs"] for r, s in zip(left, right, strict=True))
    assert {r["policy_version"] for r in right if r["batch"] == 1} == {"v0001"}
    assert {r["policy_version"] for r in left if r["batch"] == 1} == {"v0001"}
    assert right[-1]["logprobs_source"] == "recorded at generation (v0001)"

    # Versions: v0000 is the base, each later one names its parent and the batch that trained it.
    assert version_record(staged, 0)["content_hash"] == checkpoint_content_hash(grpo_checkpoint)
    second = version_record(staged, 2)
    assert second["parent"] == "v0001" and second["trained_on"]["batch"] == 1
    assert second["content_hash"] == checkpoint_content_hash(staged / "checkpoint")
    assert (staged / "versions" / "v0001" / "optimizer.pt").is_file()
    assert {r["policy_weights_sha256"] for r in records(staged, 1)} == {version_record(staged, 1)["content_hash"]}

    record = json.loads((staged / "run.json").read_text())
    assert record["status"] == "completed" and record["mode"] == "staged" and record["steps"] == 2
    ledger = json.loads((staged / "ledger.json").read_text())["cycle"]
    assert ledger["cycles"] == 2 and ledger["completions"] == 16 and ledger["records_dropped_stale"] == 0
    assert ledger["generation_s"] > 0 and ledger["update_s"] > 0 and ledger["switching_s"] > 0
    assert "switching (start, load, save)" in printed and "generation lane idle" in printed


def test_an_update_runs_once_per_version(staged_run):
    staged, _ = staged_run
    before = checkpoint_content_hash(staged / "versions" / "v0002")
    result = run_training_cli("update", "--run", str(staged), "--version", "1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {staged}: the update of v0001 already ran (v0002 exists); an update runs once per version"]
    assert checkpoint_content_hash(staged / "versions" / "v0002") == before


def test_a_rerun_generation_writes_the_same_records(staged_run, tmp_path):
    staged, _ = staged_run
    copy = tmp_path / "copy"
    shutil.copytree(staged, copy)
    before = records(copy, 1, "generated.parquet")
    result = run_training_cli("generate", "--run", str(copy), "--batch", "1", "--version", "v0001")
    assert result.returncode == 0, result.stderr
    assert records(copy, 1, "generated.parquet") == before


def test_an_update_refuses_records_another_version_wrote(staged_run, tmp_path):
    staged, _ = staged_run
    copy = tmp_path / "copy"
    shutil.copytree(staged, copy)
    for stage, *args in (("generate", "--batch", "2", "--version", "1"), ("score", "--batch", "2")):
        result = run_training_cli(stage, "--run", str(copy), *args)
        assert result.returncode == 0, result.stderr
    result = run_training_cli("update", "--run", str(copy), "--version", "2")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "generated by version v0001, 1 behind the trainer's v0002, more than max_staleness 0" in line
    assert not (copy / "versions" / "v0003").exists()

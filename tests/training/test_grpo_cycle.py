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
    assert right[-1]["logprobs_source"] == "recorded at generation (v0001, policy forward after generation)"

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
    # Switching split into its parts, hashing each loaded version's weights among them; the time in which no stage
    # ran under its own name.
    split = ledger["switching_split_s"]
    assert set(split) == {"cold_start_s", "loading_s", "hashing_s", "saving_s", "export_s"}
    assert split["hashing_s"] > 0 and split["export_s"] > 0
    assert abs(sum(split.values()) - ledger["switching_s"]) < 0.01
    assert 0 < ledger["queue_idle_s"] < ledger["wall_s"] and "queue and idle (no stage)" in printed
    # Weights readable as any new file is (0644 under umask 022), for an inference job of another user.
    readable = 0o666 & ~_umask()
    for folder in (staged / "versions" / "v0001", staged / "checkpoint"):
        assert (folder / "model.safetensors").stat().st_mode & 0o777 == readable


def _umask() -> int:
    import os

    umask = os.umask(0o022)
    os.umask(umask)
    return umask


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
    # What a generate process killed while writing leaves: its hidden partial file, which the rerun removes.
    leftover = copy / "batches" / "000001" / ".generated.parquet.partial-0123456789ab"
    leftover.write_bytes(b"half a parquet file")
    result = run_training_cli("generate", "--run", str(copy), "--batch", "1", "--version", "v0001")
    assert result.returncode == 0, result.stderr
    assert records(copy, 1, "generated.parquet") == before
    assert not leftover.exists()
    # A stage a scheduler runs (a Slurm job) shows itself in run.json's cycle, for the run page.
    cycle = json.loads((copy / "run.json").read_text())["cycle"]
    assert cycle["generation"] == {"batch": 1, "version": "v0001", "state": "generated"} and cycle["versions"] == 3


def test_weights_are_checked_against_their_version_and_records_against_their_weights(staged_run, tmp_path):
    staged, _ = staged_run
    copy = tmp_path / "copy"
    shutil.copytree(staged, copy)
    # One flipped byte in v0001's weights (past the safetensors header): its version.json no longer names them.
    weights = copy / "versions" / "v0001" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0x01
    weights.write_bytes(bytes(data))
    result = run_training_cli("generate", "--run", str(copy), "--batch", "1", "--version", "1")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert f"{copy / 'versions' / 'v0001'}: its weights hash sha256:" in line and "its version.json names" in line

    # Records v0000 wrote, relabelled v0001: the update refuses them rather than train them as on-policy.
    copy = tmp_path / "relabelled"
    shutil.copytree(staged, copy)
    shutil.rmtree(copy / "versions" / "v0002")
    import pyarrow.parquet as pq

    scored = copy / "batches" / "000001" / "scored.parquet"
    table = pq.read_table(scored)
    rows = [{**row, "policy_weights_sha256": version_record(copy, 0)["content_hash"]} for row in table.to_pylist()]
    pq.write_table(table.from_pylist(rows, schema=table.schema), scored)
    result = run_training_cli("update", "--run", str(copy), "--version", "1")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "names policy version v0001 but carries the weights hash " + version_record(copy, 0)["content_hash"] in line
    assert not (copy / "versions" / "v0002").exists()


def test_version_v0000_is_a_copy_a_write_to_it_leaves_the_base_as_it_was(grpo_checkpoint, tmp_path):
    from training.grpo.versions import export_base_version

    base_hash = checkpoint_content_hash(grpo_checkpoint)
    export_base_version(tmp_path / "run", grpo_checkpoint, base_hash)
    weights = tmp_path / "run" / "versions" / "v0000" / "model.safetensors"
    with open(weights, "r+b") as handle:  # written through, in place
        handle.seek(-100, 2)
        handle.write(b"\xff")
    assert checkpoint_content_hash(grpo_checkpoint) == base_hash
    assert weights.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_use_vllm_is_refused_in_staged_and_overlapped_modes(tmp_path, grpo_checkpoint, speed_tasks):
    for mode, extra in (("staged", {}), ("overlapped", {"max_staleness": 1})):
        config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name=mode, mode=mode, use_vllm=True, **extra)
        result = run_training_cli("cycle", "--config", str(config), "--check")
        assert result.returncode == 2
        [line] = result.stderr.strip().splitlines()
        assert f"{config}: use_vllm is true, but mode {mode} generates with transformers" in line


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


def test_retention_keeps_the_last_every_mth_the_live_the_reference_and_the_kept_versions(tmp_path):
    from training.grpo.versions import KEEP_FILE, prune_versions

    run = tmp_path / "run"
    for number in range(10):
        folder = run / "versions" / f"v{number:04d}"
        folder.mkdir(parents=True)
        (folder / "version.json").write_text(json.dumps({"number": number}))
        (folder / "model.safetensors").write_bytes(b"w" * 1000)
    (run / "versions" / "v0001" / KEEP_FILE).write_text("registered as a checkpoint\n")
    # Without a setting every version stays.
    assert prune_versions(run, keep_last=None, keep_every=None, max_staleness=1)["versions_removed"] == []
    retention = prune_versions(run, keep_last=2, keep_every=4, max_staleness=1, keep=(0,))
    kept = sorted(path.name for path in (run / "versions").iterdir() if path.is_dir())
    # v0007-v0009: the last max_staleness + 2 (a live stage may load them); v0004, v0008: every 4th; v0000: the KL
    # reference; v0001: its KEEP file.
    assert kept == ["v0000", "v0001", "v0004", "v0007", "v0008", "v0009"]
    assert retention["versions_removed"] == ["v0002", "v0003", "v0005", "v0006"]
    assert retention["bytes_freed"] == 4 * (1000 + len(json.dumps({"number": 2})))
    assert json.loads((run / "versions" / "retention.json").read_text()) == retention


def test_the_cycle_bench_says_a_run_that_learned_nothing_missed_its_target():
    from bench.grpo_cycle import inside_and_learned

    in_process = {"success_rate": 0.12, "interval": [0.06, 0.2]}
    parent = {"success_rate": 0.08, "interval": [0.03, 0.15]}
    # The untrained parent lies inside in-process's interval: a child no better than it learned nothing.
    assert not inside_and_learned({"success_rate": 0.08}, in_process, parent)
    assert not inside_and_learned({"success_rate": 0.15}, in_process, parent)
    assert inside_and_learned({"success_rate": 0.17}, in_process, parent)
    assert not inside_and_learned({"success_rate": 0.25}, in_process, parent)  # outside in-process's interval

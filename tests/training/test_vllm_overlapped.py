"""The overlapped cycle with vLLM's engine in the generate stage (`mode: overlapped`, `generation_engine: vllm`), on
the tiny checkpoint, on the CPU: the next batch is sampled by vLLM while the update trains, at most max_staleness
versions old, and the ledger reports the two engines' difference per batch.

It needs the generation environment (scripts/install_vllm.sh) and fails, never skips, without it: the cycle refuses
the config in one line."""

import json

import pytest

from tests.training.helpers import records, rollout_rows, version_record
from tests.training.helpers import write_grpo_config as write_config

from .conftest import run_training_cli

pytestmark = pytest.mark.slow


def test_an_overlapped_cycle_samples_the_next_batch_with_vllm_while_the_update_trains(grpo_checkpoint, speed_tasks,
                                                                                      tmp_path):
    # Two steps are the fewest that overlap: batch 1 is sampled while v0000 trains. The lanes launcher, whose update
    # lane keeps one trainer, must turn on TRL's correction for vLLM's answers as the update stage does.
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="overlapped", max_staleness=1,
                          max_steps=2, generation_engine="vllm", max_completion_length=12, stage_launcher="lanes")
    result = run_training_cli("cycle", "--config", str(config), timeout=900)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and record["steps"] == 2
    assert (run / "checkpoint").is_dir()

    # Each batch names the version that sampled it and the engine; batch 1 was sampled by v0000 and trained by v0001.
    for batch in (0, 1):
        generated = records(run, batch, "generated.parquet")
        assert len(generated) == 8
        assert {r["policy_version"] for r in generated} == {"v0000"}
        assert {r["policy_weights_sha256"] for r in generated} == {version_record(run, 0)["content_hash"]}
        assert {r["logprobs_source"] for r in generated} == {"vllm sampler"}
    assert [version_record(run, n)["parent"] for n in (1, 2)] == ["v0000", "v0001"]
    assert [version_record(run, n)["trained_on"]["max_lag"] for n in (1, 2)] == [0, 1]
    rows = rollout_rows(run)
    assert len(rows) == 16
    assert {r["logprobs_source"] for r in rows} == {"recorded at generation (v0000, vllm sampler)"}

    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    assert ledger["mode"] == "overlapped" and ledger["max_staleness"] == 1 and ledger["records_dropped_stale"] == 0
    trained = [(row["batch"], row["generated_by"], row["trained"], row["lag"]) for row in ledger["per_cycle"]]
    assert trained == [(0, "v0000", "v0000", 0), (1, "v0000", "v0001", 1)]
    for row in ledger["per_cycle"]:
        stage = json.loads((run / "batches" / f"{row['batch']:06d}" / "generate.json").read_text())
        mismatch = stage["sampler_mismatch"]
        assert row["generation_engine"] == "vllm" and row["sampler_mismatch"] == mismatch
        assert mismatch["tokens"] == sum(r["length"] for r in records(run, row["batch"], "generated.parquet"))
        assert 0 <= mismatch["mean_abs"] <= mismatch["max_abs"] < 0.5 and mismatch["kl_k3"] >= 0
    assert ledger["sampler_mismatch"]["batches"] == 2
    assert "vLLM against the training forward over 2 batches" in result.stdout
    # TRL's correction ran on both updates: on batch 0 for vLLM's answers of the same weights (weights near 1), on
    # batch 1 for answers one version old.
    assert ledger["sampler_correction"]["updates"] == 1 and ledger["stale_correction"]["updates"] == 1
    same_weights = ledger["per_cycle"][0]["correction"]
    assert same_weights["min"] == pytest.approx(1, abs=1e-3) and same_weights["max"] == pytest.approx(1, abs=1e-3)

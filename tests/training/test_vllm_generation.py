"""vLLM's offline engine in the generation environment (scripts/install_vllm.sh): the staged cycle's generate stage
(`generation_engine: vllm`) on the tiny and the small BPE checkpoints, and `python -m training eval --engine vllm`;
the same seed gives the same answers; without the environment every vLLM setting is refused in one line. The app's
comparison sampling with vLLM (`python -m training sample --engine vllm` in a run) is tests/runs/test_compare.py's.

Every test but the refusals needs the generation environment, and fails (never skips) when it is missing."""

import json
import subprocess
import sys

import pytest

from tests.training.helpers import records
from tests.training.helpers import write_grpo_config as write_config
from training.vllm_generation import DEFAULT_PYTHON, MISSING, PYTHON_ENV

from .conftest import REPO, run_training_cli

pytestmark = pytest.mark.slow

VLLM_SETTINGS = {"generation_engine": "vllm", "mode": "staged", "max_steps": 1, "max_completion_length": 12}


@pytest.fixture(scope="module")
def generation_environment():
    """The generation environment's python, as Pairwise finds it; a test that needs it fails when it is missing."""
    import os

    named = os.environ.get(PYTHON_ENV)
    python = named or (str(DEFAULT_PYTHON) if DEFAULT_PYTHON.is_file() else None)
    if python is None:
        pytest.fail(f"these tests need vLLM's generation environment: run scripts/install_vllm.sh (or set {PYTHON_ENV})")
    return python


@pytest.fixture(scope="module")
def bpe_checkpoint(tmp_path_factory) -> str:
    """The small BPE checkpoint (a Qwen2 model with a byte-level BPE tokenizer), its weights untrained: vLLM is tested
    on the architecture and the tokenizer, not on what the model has learned."""
    out = tmp_path_factory.mktemp("bpe") / "small"
    result = run_training_cli("bpe-sft", "--size", "small", "--steps", "0", "--eval-tasks", "2", "--out", str(out),
                              timeout=600)
    assert result.returncode == 0, result.stderr
    return str(out)


def test_vllm_settings_are_refused_in_one_line_without_the_generation_environment(tmp_path, grpo_checkpoint,
                                                                                  speed_tasks, monkeypatch):
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "absent" / "python"))
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="staged", **VLLM_SETTINGS)
    result = run_training_cli("cycle", "--config", str(config), "--check")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {config}: generation_engine is vllm: {PYTHON_ENV}=") and line.endswith(MISSING)
    assert not (tmp_path / "staged").exists()

    result = run_training_cli("eval", "--checkpoint", str(grpo_checkpoint), "--tasks", str(speed_tasks),
                              "--engine", "vllm")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.endswith(MISSING)

    monkeypatch.delenv(PYTHON_ENV)
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="in_process",
                          **{**VLLM_SETTINGS, "mode": "in_process"})
    result = run_training_cli("cycle", "--config", str(config), "--check")
    assert result.returncode == 2
    assert "generation_engine is vllm, which is the generate stage's engine in modes staged and overlapped" in \
        result.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def vllm_staged_run(generation_environment, tmp_path_factory, grpo_checkpoint, speed_tasks):
    tmp = tmp_path_factory.mktemp("vllm-staged")
    config = write_config(tmp, grpo_checkpoint, speed_tasks, name="run", **VLLM_SETTINGS)
    result = run_training_cli("cycle", "--config", str(config), timeout=900)
    assert result.returncode == 0, result.stderr
    return tmp / "run", result.stdout


def test_a_staged_cycle_generates_with_vllm_and_the_ledger_reports_the_two_engines_difference(vllm_staged_run):
    from tests.training.helpers import rollout_rows, version_record

    run, printed = vllm_staged_run
    generated = records(run, 0, "generated.parquet")
    assert len(generated) == 8
    assert {r["logprobs_source"] for r in generated} == {"vllm sampler"}
    assert {r["policy_version"] for r in generated} == {"v0000"}
    assert {r["policy_weights_sha256"] for r in generated} == {version_record(run, 0)["content_hash"]}
    assert all(len(r["logprobs"]) == r["length"] == len(r["completion_token_ids"]) > 0 for r in generated)
    assert all(r["finish_reason"] in ("stopped", "truncated") for r in generated)
    assert len({tuple(r["completion_token_ids"]) for r in generated}) > 1, "sampled answers, not one greedy answer"

    stage = json.loads((run / "batches" / "000000" / "generate.json").read_text())
    assert stage["generation_engine"] == "vllm" and stage["vllm"]["version"] == "0.31.0"
    # vLLM's start and weight load count as switching (loading), its sampling as generation.
    assert stage["loading_s"] >= stage["vllm"]["engine_start_s"] > 0
    mismatch = stage["sampler_mismatch"]
    assert mismatch["tokens"] == sum(r["length"] for r in generated)
    # The same float32 weights in two engines: close, but each figure is there to be read.
    assert 0 <= mismatch["mean_abs"] <= mismatch["max_abs"] < 0.5 and mismatch["kl_k3"] >= 0

    # The update's own forward (TRL's, recomputing the log-probabilities on the same version) finds the same difference.
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trl = next(row for row in logged if "sampling/sampling_logp_difference/max" in row)
    assert trl["sampling/sampling_logp_difference/max"] == pytest.approx(mismatch["max_abs"], rel=1e-3, abs=1e-9)
    assert trl["sampling/sampling_logp_difference/mean"] == pytest.approx(mismatch["mean_abs"], rel=1e-3, abs=1e-9)

    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    [row] = ledger["per_cycle"]
    assert row["generation_engine"] == "vllm" and row["sampler_mismatch"] == mismatch
    assert ledger["sampler_mismatch"]["batches"] == 1 and ledger["sampler_mismatch"]["max_abs"] == mismatch["max_abs"]
    # The update ran TRL's importance-sampling correction on vLLM's answers (lag 0: not a stale update).
    assert ledger["sampler_correction"]["updates"] == 1 and ledger["stale_correction"]["updates"] == 0
    assert "vLLM against the training forward over 1 batches" in printed
    assert {r["policy_version"] for r in rollout_rows(run)} == {"v0000"}
    # The rollouts say which engine's log-probabilities they carry, as generated.parquet does.
    assert {r["logprobs_source"] for r in rollout_rows(run)} == {"recorded at generation (v0000, vllm sampler)"}
    assert (run / "versions" / "v0001").is_dir()

    from annotate.runs.present import cycle_ledger

    shown = cycle_ledger({"cycle": ledger})
    names = {row["name"] for row in shown["counts"]}
    assert "vLLM vs training log-probability: mean |difference| per token" in names
    assert "vLLM answer weight: mean" in names
    assert len(shown["per_cycle"][0]) == 12


def test_a_batch_longer_than_vllms_step_budget_is_sampled_whole_and_each_seed_gives_its_own_answer(
        generation_environment, grpo_checkpoint):
    """48 prompts of 100 tokens are more than the 4,096 tokens vLLM reads in a step on a CPU by default; split over
    steps, a seeded prompt failed ("CPU Generator does not use offset"). A prompt under the same seed gets the same
    answer wherever it stands in the batch."""
    from transformers import AutoTokenizer

    from training.vllm_generation import Sampling, vllm_generate

    tokenizer = AutoTokenizer.from_pretrained(grpo_checkpoint)
    prompts = [tokenizer(f"A train goes {n} km in {n % 7 + 2} hours. " * 3, add_special_tokens=False)["input_ids"][:100]
               for n in range(48)]
    assert sum(map(len, prompts)) > 4096
    seeds = list(range(48))
    prompts[47], seeds[47] = prompts[0], seeds[0]  # the first prompt again, under its seed, at the other end
    answers = vllm_generate(grpo_checkpoint, prompts, seeds, Sampling(temperature=1.0, max_tokens=24), eos_token_ids=[],
                            threads=2)
    assert len(answers.token_ids) == 48 and all(1 <= len(ids) <= 24 for ids in answers.token_ids)
    assert answers.token_ids[47] == answers.token_ids[0] and answers.logprobs[47] == answers.logprobs[0]
    assert len({tuple(ids) for ids in answers.token_ids}) > 1


def test_the_small_bpe_model_generates_with_vllm_in_the_generate_stage(generation_environment, bpe_checkpoint,
                                                                        speed_tasks, tmp_path):
    """The generate stage on the Qwen2 architecture with its BPE tokenizer. (Run to run, the same seeds give the same
    answers: the eval test below runs vLLM twice; within a batch, the long-batch test above.)"""
    config = write_config(tmp_path, bpe_checkpoint, speed_tasks, name="bpe", **VLLM_SETTINGS)
    result = run_training_cli("cycle", "--config", str(config), "--prepare-only")
    assert result.returncode == 0, result.stderr
    run = tmp_path / "bpe"
    result = run_training_cli("generate", "--run", str(run), "--batch", "0", timeout=600)
    assert result.returncode == 0, result.stderr
    generated = records(run, 0, "generated.parquet")
    assert len(generated) == 8 and {r["logprobs_source"] for r in generated} == {"vllm sampler"}
    assert all(len(r["logprobs"]) == r["length"] == len(r["completion_token_ids"]) > 0 for r in generated)
    stage = json.loads((run / "batches" / "000000" / "generate.json").read_text())
    assert stage["sampler_mismatch"]["max_abs"] < 0.5


def test_eval_with_vllm_gives_the_same_answers_for_the_same_seed(generation_environment, bpe_checkpoint, speed_tasks,
                                                                 tmp_path):
    results = []
    for name in ("first", "second"):
        out = tmp_path / f"{name}.json"
        result = run_training_cli("eval", "--checkpoint", bpe_checkpoint, "--tasks", str(speed_tasks), "--engine",
                                  "vllm", "--samples", "2", "--temperature", "1", "--max-new-tokens", "16", "--seed",
                                  "5", "--out", str(out), timeout=600)
        assert result.returncode == 0, result.stderr
        assert "sampled by vLLM" in result.stdout
        results.append(json.loads(out.read_text()))
    first, second = results
    assert first["settings"]["engine"] == "vllm"
    assert first["checkpoints"] == second["checkpoints"]
    assert first["checkpoints"][0]["families"] and first == second


def test_a_checkpoint_vllm_cannot_load_is_refused_in_one_line_naming_its_architecture(generation_environment,
                                                                                      grpo_checkpoint, speed_tasks,
                                                                                      tmp_path):
    """Checked in the generation environment before the engine loads anything (vLLM's own error would come after
    its engine start, as a traceback)."""
    import shutil

    folder = tmp_path / "unknown-architecture"
    shutil.copytree(grpo_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["PairwiseToyForCausalLM"]}))
    out = tmp_path / "eval.json"
    result = run_training_cli("eval", "--checkpoint", str(folder), "--tasks", str(speed_tasks), "--engine", "vllm",
                              "--out", str(out), timeout=600)
    assert result.returncode != 0 and not out.exists()
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: vLLM 0.31.0 cannot load {folder}: its architecture PairwiseToyForCausalLM "
                      "(config.json architectures) is not one vLLM implements; sample it with transformers instead"]
    assert "Traceback" not in result.stderr


def test_a_vllm_child_past_its_bound_is_stopped_with_all_it_started_in_one_line(generation_environment,
                                                                                grpo_checkpoint, speed_tasks,
                                                                                tmp_path, monkeypatch):
    import psutil

    from training.vllm_generation import TIMEOUT_ENV

    monkeypatch.setenv(TIMEOUT_ENV, "2")  # past the child's own imports, before its engine has loaded
    mark = f"bounded-{tmp_path.name}"  # inherited by the child and what it starts; nothing else carries it
    monkeypatch.setenv("PAIRWISE_TEST_MARK", mark)
    out = tmp_path / "eval.json"
    result = run_training_cli("eval", "--checkpoint", str(grpo_checkpoint), "--tasks", str(speed_tasks), "--engine",
                              "vllm", "--out", str(out), timeout=300)
    assert result.returncode != 0 and not out.exists()
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: vLLM's engine ({generation_environment}) on {grpo_checkpoint} ran past 2 s "
                      f"({TIMEOUT_ENV}) and was stopped; raise the bound where the command runs, or sample fewer or "
                      "shorter answers"]

    def marked(process) -> bool:
        try:
            return process.environ().get("PAIRWISE_TEST_MARK") == mark
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            return False

    assert [process.pid for process in psutil.process_iter() if marked(process)] == []


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf"])
def test_a_vllm_bound_that_is_not_seconds_is_refused_by_the_check_the_run_shares(generation_environment, value,
                                                                                  monkeypatch):
    from training.errors import PairwiseInputError
    from training.vllm_generation import TIMEOUT_ENV, check_engine

    monkeypatch.setenv(TIMEOUT_ENV, value)
    with pytest.raises(PairwiseInputError) as refused:  # what the app's launch forms and the configs call
        check_engine("vllm", where="--engine")
    assert str(refused.value) == (f"{TIMEOUT_ENV}={value} is not a number of seconds above 0; set it to one "
                                  "(default 3600) or unset it")


def test_a_vllm_bound_that_is_not_seconds_stops_eval_in_one_line_before_it_loads(generation_environment,
                                                                                  grpo_checkpoint, speed_tasks,
                                                                                  tmp_path, monkeypatch):
    from training.vllm_generation import TIMEOUT_ENV

    monkeypatch.setenv(TIMEOUT_ENV, "an hour")
    out = tmp_path / "eval.json"
    result = run_training_cli("eval", "--checkpoint", str(grpo_checkpoint), "--tasks", str(speed_tasks), "--engine",
                              "vllm", "--out", str(out), timeout=300)
    assert result.returncode != 0 and not out.exists() and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [
        f"error: {TIMEOUT_ENV}=an hour is not a number of seconds above 0; set it to one (default 3600) or unset it"]


@pytest.mark.parametrize(("version", "refused"), [("0.31.0", False), ("0.22.0", False), ("0.32.0", True),
                                                  ("0.21.1", True)])
def test_a_vllm_outside_trls_range_is_refused_before_it_loads(grpo_checkpoint, version, refused):
    from training.vllm_generation import refusal_before_loading, trl_vllm_range

    supported = trl_vllm_range()
    assert supported is not None and "0.31.0" in supported  # TRL 1.16's vllm extra
    why = refusal_before_loading(str(grpo_checkpoint), version, supported, {"LlamaForCausalLM"})
    if refused:
        assert why == (f"the generation environment has vLLM {version}, outside the {supported} that TRL supports; "
                       "install a vLLM in that range there (scripts/install_vllm.sh installs 0.31.0)")
    else:
        assert why is None


def test_the_generation_environment_imports_pairwise(generation_environment):
    """The install puts Pairwise in the generation environment, so its command line starts there."""
    result = subprocess.run([generation_environment, "-m", "training", "--help"], capture_output=True, text=True,
                            cwd=REPO / "tests", timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "usage: python -m training" in result.stdout
    assert sys.executable != generation_environment

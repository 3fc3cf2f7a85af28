"""The Slurm backend against stand-in sbatch, scancel and squeue on PATH that record what they were given:
the rendered job script is valid bash naming this run's config and log, the job id is kept, cancel calls
scancel, the run ends when its run.json says so, and a kind with no template is refused at launch."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from annotate.runs import execute
from annotate.runs import slurm as slurm_backend
from annotate.runs.launch import run_cancel, run_config_check
from annotate.runs.models import Run
from annotate.runs.slurm import slurm_refresh
from tests.runs.helpers import slurm_run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("kind", ["dpo", "grpo", "reward"])
def test_the_rendered_job_is_valid_bash_for_this_run_and_the_job_id_is_kept(base_checkpoint, slurm, tmp_path, kind):
    run = execute.run_execute(run_id=slurm_run(base_checkpoint, kind).pk, worker="w1@test")
    assert run.status == "running" and run.slurm_job_id == "4242"
    script = (tmp_path / "submitted.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "submitted.sbatch")]).returncode == 0
    assert f"#SBATCH --job-name=pairwise-run-{run.pk}\n" in script
    assert f"#SBATCH --output={run.folder}.log\n" in script
    assert f"CONFIG=${{1:-{run.folder}.yaml}}\n" in script and f'deploy/slurm/train.sh {kind} "$CONFIG"' in script
    assert "--parsable" in slurm.read_text()
    assert yaml.safe_load(Path(run.folder + ".yaml").read_text()) == run.config


@pytest.mark.slow
def test_a_reward_launch_on_slurm_is_queued_then_submitted_as_the_reward_template(engineer_api, base_checkpoint,
                                                                                 tiny_snapshot, run_root, slurm,
                                                                                 tmp_path):
    started = engineer_api.post("/api/v1/runs", {"kind": "reward", "backend": "slurm", "base_checkpoint": "tiny-sft",
                                                 "snapshot": str(tiny_snapshot), "config": {"max_steps": 2}},
                                format="json")
    assert started.status_code == 202, started.json()
    assert run_config_check(started.json()["id"], enqueue=False).status == "queued"
    run = execute.run_execute(run_id=started.json()["id"], worker="w1@test")
    assert run.status == "running" and run.slurm_job_id == "4242" and run.folder == str(run_root / f"run-{run.pk:06d}")
    script = (tmp_path / "submitted.sbatch").read_text()
    assert f"CONFIG=${{1:-{run.folder}.yaml}}\n" in script and 'deploy/slurm/train.sh reward "$CONFIG"' in script
    assert f"#SBATCH --output={run.folder}.log\n" in script
    assert yaml.safe_load(Path(run.folder + ".yaml").read_text())["snapshot"] == str(tiny_snapshot)


def test_a_slurm_launch_of_a_kind_with_no_template_is_one_line_and_nothing_is_queued(engineer_api, base_checkpoint,
                                                                                      tiny_snapshot, monkeypatch,
                                                                                      tmp_path):
    monkeypatch.setattr(slurm_backend, "template_path", lambda kind: tmp_path / "no-templates" / f"{kind}.sbatch")
    refused = engineer_api.post("/api/v1/runs", {"kind": "dpo", "backend": "slurm", "base_checkpoint": "tiny-sft",
                                                 "snapshot": str(tiny_snapshot)}, format="json")
    assert (refused.status_code, refused.json()) == (400, {"detail": "backend slurm has no job template for dpo runs "
                                                                     "(deploy/slurm/dpo.sbatch); launch it on the "
                                                                     "local backend"})
    assert not Run.objects.exists()


def test_cancel_calls_scancel_with_the_job_id(base_checkpoint, slurm):
    run = execute.run_execute(run_id=slurm_run(base_checkpoint).pk, worker="w1@test")
    cancelled = run_cancel(run)
    assert cancelled.status == "cancelled" and "scancel 4242" in cancelled.error
    assert "scancel 4242" in slurm.read_text().splitlines()


def test_sbatch_refusing_the_job_fails_the_run_with_its_words(base_checkpoint, slurm, monkeypatch):
    monkeypatch.setenv("SBATCH_FAIL", "1")
    run = execute.run_execute(run_id=slurm_run(base_checkpoint).pk, worker="w1@test")
    assert run.status == "failed" and run.exit_code == 1
    assert run.error == "sbatch refused the job: sbatch: error: invalid partition specified: gpu"


def test_a_slurm_run_ends_when_its_run_json_says_so(base_checkpoint, slurm):
    run = execute.run_execute(run_id=slurm_run(base_checkpoint).pk, worker="w1@test")
    folder = Path(run.folder)
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"event": "train", "step": 1, "loss": 0.69}) + "\n")
    (folder / "run.json").write_text(json.dumps({"status": "running"}))
    assert slurm_refresh(run).status == "running" and len(run.metrics) == 1
    (folder / "run.json").write_text(json.dumps({"status": "failed", "error": "CUDA out of memory"}))
    ended = slurm_refresh(Run.objects.get(pk=run.pk))
    assert ended.status == "failed" and ended.error == "CUDA out of memory"

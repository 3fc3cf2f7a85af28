"""The Slurm backend against stand-in sbatch, scancel and squeue on PATH that record what they were given, for
what the one-node cluster of test_slurm_cluster.py cannot show (each such test says what); and the checks of a
run's slurm: mapping and of a kind with no template, which stop a launch before any Slurm command runs."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from annotate.runs import execute
from annotate.runs import slurm as slurm_backend
from annotate.runs.models import Run
from annotate.runs.slurm import slurm_refresh
from tests.runs.helpers import slurm_run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("kind", ["dpo", "grpo", "reward"])
def test_the_rendered_job_is_valid_bash_for_this_run_and_the_job_id_is_kept(base_checkpoint, slurm, tmp_path, kind,
                                                                            settings):
    """Stand-in sbatch: a GPU deployment on two nodes with extra options, which a one-node CPU cluster cannot run."""
    settings.PAIRWISE_SLURM_NODES, settings.PAIRWISE_SLURM_GPUS_PER_NODE = 2, 4
    settings.PAIRWISE_SLURM_EXTRA_OPTIONS = "--exclusive --qos=high"
    run = execute.run_execute(run_id=slurm_run(base_checkpoint, kind).pk, worker="w1@test")
    assert run.status == "running" and run.slurm_job_id == "4242"
    script = (tmp_path / "submitted.sbatch").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "submitted.sbatch")]).returncode == 0
    assert f"#SBATCH --job-name=pairwise-run-{run.pk}\n" in script
    assert f"#SBATCH --output={run.folder}.log\n" in script
    assert f"CONFIG=${{1:-{run.folder}.yaml}}\n" in script and f'deploy/slurm/train.sh {kind} "$CONFIG"' in script
    resources = script[script.index("# Resources:"):script.index("set -euo pipefail")].splitlines()[1:]
    assert resources == ["#SBATCH --nodes=2", "#SBATCH --gpus-per-node=4", "#SBATCH --cpus-per-task=8",
                         "#SBATCH --time=24:00:00", "#SBATCH --exclusive", "#SBATCH --qos=high"]
    assert "--parsable" in slurm.read_text()
    assert yaml.safe_load(Path(run.folder + ".yaml").read_text()) == run.config


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


def test_an_account_sbatch_refuses_fails_the_run_with_its_words(base_checkpoint, slurm, monkeypatch, settings):
    """Stand-in sbatch: a cluster without an accounting database (the one-node one) takes any account."""
    settings.PAIRWISE_SLURM_ACCOUNT = "no-such-lab"
    monkeypatch.setenv("SBATCH_FAIL", "1")
    run = execute.run_execute(run_id=slurm_run(base_checkpoint).pk, worker="w1@test")
    assert run.status == "failed" and run.exit_code == 1
    assert run.error == ("sbatch refused the job: sbatch: error: Batch job submission failed: Invalid account or "
                         "account/partition combination specified")
    assert "#SBATCH --account=no-such-lab\n" in Path(run.folder + ".sbatch").read_text()


def test_a_slurm_run_ends_when_its_run_json_says_so(base_checkpoint, slurm):
    """Stand-in sbatch: a trainer's own failure in run.json (CUDA out of memory) needs a GPU."""
    run = execute.run_execute(run_id=slurm_run(base_checkpoint).pk, worker="w1@test")
    folder = Path(run.folder)
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"event": "train", "step": 1, "loss": 0.69}) + "\n")
    (folder / "run.json").write_text(json.dumps({"status": "running"}))
    assert slurm_refresh(run).status == "running" and len(run.metrics) == 1
    (folder / "run.json").write_text(json.dumps({"status": "failed", "error": "CUDA out of memory"}))
    ended = slurm_refresh(Run.objects.get(pk=run.pk))
    assert ended.status == "failed" and ended.error == "CUDA out of memory"


@pytest.mark.parametrize(("config", "backend", "said"), [
    ({"slurm": {"exclusive": True}}, "slurm", "config: slurm.exclusive is not a job resource a run may set; slurm takes "
     "partition, account, nodes, gpus_per_node, cpus_per_task, mem, time"),
    ({"slurm": {"--qos": "high"}}, "slurm", "config: slurm.--qos is not a job resource a run may set; slurm takes "
     "partition, account, nodes, gpus_per_node, cpus_per_task, mem, time (extra sbatch options are the "
     "deployment's: PAIRWISE_SLURM_EXTRA_OPTIONS)"),
    ({"slurm": {"time": "4:00:00\n#SBATCH --exclusive"}}, "slurm", "config: slurm.time must be a time limit such as "
     "90, 04:00:00 or 1-12:00:00, got '4:00:00\\n#SBATCH --exclusive'"),
    ({"slurm": {"partition": "gpu --exclusive"}}, "slurm", "config: slurm.partition must be a partition name "
     "(letters, digits, _ . -), got 'gpu --exclusive'"),
    ({"slurm": {"gpus_per_node": -1}}, "slurm", "config: slurm.gpus_per_node must be a whole number from 0 to 64, "
     "got '-1'"),
    ({"slurm": {"nodes": "²"}}, "slurm", "config: slurm.nodes must be a whole number from 1 to 1024, got '²'"),
    ({"slurm": "cpu"}, "slurm", "config: slurm must be a mapping such as {partition: cpu, cpus_per_task: 4}"),
    ({"slurm": {"partition": "cpu"}}, "local", "config: slurm: sets a Slurm job's resources, and this run's backend "
     "is local; remove it or launch on backend slurm"),
])
def test_a_runs_slurm_mapping_is_checked_before_anything_is_recorded(engineer_api, base_checkpoint, tiny_snapshot,
                                                                     config, backend, said):
    refused = engineer_api.post("/api/v1/runs", {"kind": "dpo", "backend": backend, "base_checkpoint": "tiny-sft",
                                                 "snapshot": str(tiny_snapshot), "config": config}, format="json")
    assert (refused.status_code, refused.json()) == (400, {"detail": said})
    assert not Run.objects.exists()

"""The Slurm backend on a real one-node cluster (tests/runs/slurm_cluster.py: Debian's slurm-wlm, slurmctld, slurmd
and munged started under a temporary folder). Runs are launched from the app with backend slurm on the CPU
partition, followed by the sweep alone (no page view) through squeue and sacct, cancelled with scancel from the
run page's Cancel; the run page shows what the job asked for, a pending job's reason from Slurm, sbatch's own
refusal and the log tail of a job that failed on the node."""

import json
import re
import socket
import time
from pathlib import Path

import pytest
import yaml
from django.core.management.base import CommandError
from django.test import Client

from annotate.runs import execute, sweeps
from annotate.runs.launch import run_config_check
from annotate.runs.models import Run
from tests.runs.helpers import register
from tests.runs.slurm_cluster import slurm_cluster  # noqa: F401 (the session's cluster)
from tests.training.helpers import write_unlearnable_tasks

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

FOLLOW_S = 600  # a two-step DPO run on the slow machine's CPU takes about a minute; the rest is margin
TWO_STEPS = {"max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1, "learning_rate": 1e-3}
RESUME_BUTTON = '<button type="submit" id="resume" data-busy="Resuming…">Resume from {version}</button>'
GRPO_ONE_CYCLE = {"max_steps": 1, "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 4,
                  "use_cpu": True, "verifier_workers": 1, "report_to": ["none"], "save_strategy": "no", "seed": 0}


@pytest.fixture(autouse=True)
def cpu_partition(settings, slurm_cluster):  # noqa: F811
    """The deployment's settings for the one-node cluster: its CPU partition, one CPU, no GPUs, a time limit."""
    settings.PAIRWISE_SLURM_PARTITION = "cpu"
    settings.PAIRWISE_SLURM_GPUS_PER_NODE = 0
    settings.PAIRWISE_SLURM_CPUS_PER_TASK = 1
    settings.PAIRWISE_SLURM_MEM = "4G"
    settings.PAIRWISE_SLURM_TIME = "30"
    return slurm_cluster


@pytest.fixture
def page(make_user):
    client = Client()
    client.force_login(make_user("erin", "engineer"))
    return client


def launched(api, snapshot: Path | None, config: dict, kind: str = "dpo", tasks: Path | None = None) -> Run:
    """A run launched from the app (the API, then its config check and the worker's submission)."""
    given = {"tasks": str(tasks)} if tasks else {"snapshot": str(snapshot)}
    answer = api.post("/api/v1/runs", {"kind": kind, "backend": "slurm", "base_checkpoint": "tiny-sft", **given,
                                       "config": config}, format="json")
    assert answer.status_code == 202, answer.json()
    assert run_config_check(answer.json()["id"], enqueue=False).status == "queued"
    return execute.run_execute(run_id=answer.json()["id"], worker="w1@test")


def swept_until(run: Run, done, bound_s: float = FOLLOW_S, what: str = "the run to end") -> Run:
    """Run the periodic sweep (as beat does) until done(run) holds; fail in one line after bound_s."""
    deadline = time.monotonic() + bound_s
    while True:
        sweeps.slurm_runs_poll()
        run.refresh_from_db()
        if done(run):
            return run
        if time.monotonic() > deadline:
            pytest.fail(f"waited {bound_s:.0f} s for {what}; run {run.pk} is {run.status}: {run.error or run.log_tail[-300:]}")
        time.sleep(0.5)


def queue_lists(cluster, job_id: str) -> bool:
    return bool(cluster.command("squeue", "-h", "-j", job_id, "-o", "%i").stdout.strip())


def left_queue(cluster, job_id: str, bound_s: float = 60) -> None:
    deadline = time.monotonic() + bound_s
    while queue_lists(cluster, job_id):
        if time.monotonic() > deadline:
            pytest.fail(f"Slurm job {job_id} was still in the queue after {bound_s:.0f} s")
        time.sleep(0.5)


def queue_emptied(cluster, bound_s: float = 180) -> None:
    """Every job of the cluster gone from the queue: an earlier test's job holds CPUs until its processes have exited,
    a while after its run.json says completed on a busy machine."""
    deadline = time.monotonic() + bound_s
    while listed := cluster.command("squeue", "-h", "-o", "%i %T %r").stdout.strip():
        if time.monotonic() > deadline:
            pytest.fail(f"jobs still in the queue after {bound_s:.0f} s: {' | '.join(listed.splitlines())}")
        time.sleep(0.5)


def test_a_dpo_launch_on_the_cpu_partition_runs_to_done_followed_by_the_sweep_alone(engineer_api, base_checkpoint,
                                                                                     tiny_snapshot, page,
                                                                                     cpu_partition):
    run = launched(engineer_api, tiny_snapshot, {**TWO_STEPS, "slurm": {"time": "20"}})
    assert run.status == "running" and run.slurm_job_id, run.error
    script = Path(run.folder + ".sbatch").read_text()
    assert "#SBATCH --partition=cpu\n" in script and "#SBATCH --time=20\n" in script
    assert "--gpus" not in script  # a CPU partition: no GPU option for Slurm to refuse
    assert "slurm" not in yaml.safe_load(Path(run.folder + ".yaml").read_text())  # the job's, not the trainer's

    run = swept_until(run, lambda run: run.finished)
    assert run.status == "succeeded", run.error
    assert run.made_checkpoint is not None and Path(run.made_checkpoint.uri).is_dir()
    assert [row["step"] for row in run.metrics if "loss" in row][-1] == 2
    # run.json says completed a moment before the job's script returns; then Slurm records the job's end.
    left_queue(cpu_partition, run.slurm_job_id)
    ended = cpu_partition.command("sacct", "--completion", "-n", "-P", "-j", run.slurm_job_id, "-o", "State")
    assert ended.stdout.split() == ["COMPLETED"]

    shown = page.get(f"/runs/{run.pk}/").content.decode()
    assert "succeeded" in shown and f"job {run.slurm_job_id}" in shown
    assert "<td><code>--partition</code></td><td>cpu</td><td>deployment</td>" in shown
    assert "<td><code>--time</code></td><td>20</td><td>this run</td>" in shown
    assert "<td><code>--gpus-per-node</code></td><td>none</td><td>deployment</td>" in shown
    assert f"<td>{run.slurm_job_id}</td><td>pairwise-run-{run.pk}</td><td>completed</td>" in shown


def test_reward_and_grpo_launches_on_the_cpu_partition_run_to_done(engineer_api, base_checkpoint, tiny_snapshot,
                                                                   tmp_path, cpu_partition):
    reward = launched(engineer_api, tiny_snapshot, TWO_STEPS, kind="reward")
    tasks = write_unlearnable_tasks(tmp_path / "tasks.jsonl")
    grpo = launched(engineer_api, None, {**GRPO_ONE_CYCLE, "max_steps": 2}, kind="grpo", tasks=tasks)
    assert "deploy/slurm/train.sh reward" in Path(reward.folder + ".sbatch").read_text()
    assert "deploy/slurm/train.sh grpo" in Path(grpo.folder + ".sbatch").read_text()
    for run in (reward, grpo):  # both queued at once: one CPU each
        run = swept_until(run, lambda run: run.finished)
        assert run.status == "succeeded", (run.kind, run.error)
        assert max(row.get("step") or 0 for row in run.metrics) == 2, (run.kind, run.metrics)
        left_queue(cpu_partition, run.slurm_job_id, bound_s=180)


def test_a_dpo_run_of_two_processes_asks_for_two_cpus_and_trains_as_two_on_the_node(engineer_api, base_checkpoint,
                                                                                    tiny_snapshot, page, cpu_partition):
    """processes: 2 on the CPU partition: the job asks for two CPUs (over the deployment's one), train.sh starts the
    two processes with accelerate on the node, and the run says it trained as two; three are refused at launch, the
    node having two CPUs."""
    cpus = int(cpu_partition.command("sinfo", "-h", "-o", "%c").stdout.strip())
    refused = engineer_api.post("/api/v1/runs", {"kind": "dpo", "backend": "slurm", "base_checkpoint": "tiny-sft",
                                                 "snapshot": str(tiny_snapshot),
                                                 "config": {**TWO_STEPS, "processes": cpus + 1}}, format="json")
    assert (refused.status_code, refused.json()) == (400, {"detail": (
        f"processes is {cpus + 1} but a node of partition cpu has {cpus} CPUs, and a run's processes share one node; "
        f"set processes to {cpus} or fewer, or pick a partition of larger nodes (slurm: {{partition: NAME}})")})
    assert not Run.objects.exists()

    queue_emptied(cpu_partition)  # both CPUs free for the job
    run = launched(engineer_api, tiny_snapshot, {**TWO_STEPS, "processes": 2})
    assert run.status == "running", run.error
    assert "#SBATCH --cpus-per-task=2\n" in Path(run.folder + ".sbatch").read_text()
    run = swept_until(run, lambda run: run.finished)
    assert run.status == "succeeded", run.error
    assert json.loads((Path(run.folder) / "run.json").read_text())["hardware"]["world_size"] == 2
    assert "2 processes: accelerate launch --config_file deploy/accelerate/cpu_ddp.yaml --num_processes 2" in \
        Path(run.folder + ".log").read_text()
    shown = page.get(f"/runs/{run.pk}/").content.decode()
    assert '<span id="run-processes">2 processes</span>' in shown
    assert "<td><code>--cpus-per-task</code></td><td>2</td><td>processes: 2</td>" in shown
    left_queue(cpu_partition, run.slurm_job_id, bound_s=180)


def test_a_job_pending_for_resources_shows_slurms_reason_and_cancel_scancels_it(engineer_api, base_checkpoint,
                                                                                tiny_snapshot, page, cpu_partition):
    # Every CPU of the node taken by another job: the run's job waits for resources.
    queue_emptied(cpu_partition)
    cpus = cpu_partition.command("sinfo", "-h", "-o", "%c").stdout.strip()
    blocker = cpu_partition.command("sbatch", "--parsable", "--partition=cpu", f"--cpus-per-task={cpus}", "--mem=1G",
                                    "--output=/dev/null", "--wrap", "sleep 300").stdout.strip()
    try:
        deadline = time.monotonic() + 60  # an earlier test's job may still be leaving the node
        while cpu_partition.command("squeue", "-h", "-j", blocker, "-o", "%T").stdout.strip() != "RUNNING":
            state = cpu_partition.command("squeue", "-h", "-o", "%i %T %r").stdout.strip().replace("\n", " | ")
            assert time.monotonic() < deadline, f"the job {blocker} taking all {cpus} CPUs did not start within 60 s: {state}"
            time.sleep(0.5)
        run = launched(engineer_api, tiny_snapshot, TWO_STEPS)
        assert run.status == "running", run.error
        job = run.slurm_job_id
        swept_until(run, lambda run: "Resources" in page.get(f"/runs/{run.pk}/").content.decode(), bound_s=60,
                    what="Slurm's reason on the run page")
        shown = page.get(f"/runs/{run.pk}/").content.decode()
        assert f"Job {job} is pending: Slurm says <strong>Resources</strong>." in shown
        assert run.status == "running"

        cancelled = page.post(f"/runs/{run.pk}/cancel", follow=True)
        assert cancelled.status_code == 200
        run.refresh_from_db()
        assert run.status == "cancelled" and f"scancel {job}" in run.error
        left_queue(cpu_partition, job)
        ended = cpu_partition.command("sacct", "--completion", "-n", "-P", "-j", job, "-o", "State")
        assert ended.stdout.split()[0].startswith("CANCELLED")
    finally:
        cpu_partition.command("scancel", blocker)


def test_a_partition_that_does_not_exist_fails_the_run_with_sbatchs_message(engineer_api, base_checkpoint,
                                                                             tiny_snapshot, page):
    run = launched(engineer_api, tiny_snapshot, {**TWO_STEPS, "slurm": {"partition": "gpu-a100"}})
    assert run.status == "failed" and not run.slurm_job_id
    assert run.error == "sbatch refused the job: sbatch: error: Batch job submission failed: Invalid partition name " \
                        "specified"
    assert "Invalid partition name specified" in page.get(f"/runs/{run.pk}/").content.decode()


def test_a_job_whose_interpreter_is_missing_on_the_node_fails_with_its_log_tail(engineer_api, base_checkpoint,
                                                                               tiny_snapshot, page, settings):
    settings.PAIRWISE_SLURM_PYTHON = "/opt/no-such-venv/bin/python"
    run = launched(engineer_api, tiny_snapshot, TWO_STEPS)
    assert run.status == "running", run.error
    run = swept_until(run, lambda run: run.finished, bound_s=120)
    assert run.status == "failed"
    assert run.error.startswith(f"Slurm job {run.slurm_job_id} (pairwise-run-{run.pk}) ended FAILED")
    assert "/opt/no-such-venv/bin/python" in run.error and "No such file or directory" in run.error
    shown = page.get(f"/runs/{run.pk}/").content.decode()
    assert "execve(): /opt/no-such-venv/bin/python: No such file or directory" in shown  # the log tail


def test_a_job_over_its_memory_limit_is_killed_and_shows_its_log_tail(engineer_api, base_checkpoint, tiny_snapshot,
                                                                     page):
    run = launched(engineer_api, tiny_snapshot, {**TWO_STEPS, "slurm": {"mem": "150M"}})
    assert run.status == "running", run.error
    run = swept_until(run, lambda run: run.finished, bound_s=180)
    assert run.status == "failed"
    assert "exceeded memory limit" in run.log_tail
    assert "exceeded memory limit" in page.get(f"/runs/{run.pk}/").content.decode()


@pytest.mark.parametrize("down", ["munged", "slurmctld"])
def test_munge_or_slurmctld_not_answering_fails_the_launch_in_one_line_naming_which(engineer_api, base_checkpoint,
                                                                                    tiny_snapshot, cpu_partition,
                                                                                    monkeypatch, tmp_path, down):
    """The cluster's own slurm.conf with munged's socket, or slurmctld's port, where nothing answers."""
    conf = cpu_partition.conf.read_text()
    if down == "munged":
        conf = re.sub(r"^AuthInfo=.*$", f"AuthInfo=socket={tmp_path}/munge.socket", conf, flags=re.MULTILINE)
    else:
        with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        conf = re.sub(r"^SlurmctldPort=.*$", f"SlurmctldPort={port}", conf, flags=re.MULTILINE)
    (tmp_path / "slurm.conf").write_text(conf)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    run = launched(engineer_api, tiny_snapshot, TWO_STEPS)
    assert run.status == "failed"
    if down == "munged":
        assert run.error.startswith("sbatch refused the job: munge is not answering on this host (sbatch could not "
                                    "sign its request): sbatch: error: Munge encode failed: Failed to access "
                                    f'"{tmp_path}/munge.socket"'), run.error
    else:
        assert run.error == ("sbatch refused the job: slurmctld is not answering: sbatch: error: Batch job submission "
                             "failed: Unable to contact slurm controller (connect failure)")



def test_a_staged_grpo_cycle_is_one_job_per_stage_chained_with_afterok_and_runs_to_done(engineer_api,
                                                                                         base_checkpoint, tmp_path,
                                                                                         page, cpu_partition):
    """With processes: 2, as a user scales the update past one process: the update job trains as two data-parallel
    processes on the node (accelerate launch from grpo_stage.sbatch), the other stages as one."""
    tasks = write_unlearnable_tasks(tmp_path / "tasks.jsonl")
    queue_emptied(cpu_partition)  # both CPUs free for the two-process update
    run = launched(engineer_api, None, {**GRPO_ONE_CYCLE, "mode": "staged", "processes": 2}, kind="grpo", tasks=tasks)
    assert run.status == "running", run.error
    prefix = f"pairwise-run-{run.pk}"
    jobs = dict(line.split(" ", 1)[::-1] for line in Path(run.folder + ".jobs").read_text().splitlines())
    assert list(jobs) == [f"{prefix}-prepare-v0000", f"{prefix}-generate-v0000", f"{prefix}-score-v0000",
                          f"{prefix}-update-v0000", f"{prefix}-finish-v0001"]
    shown = cpu_partition.command("squeue", "-h", "-j", ",".join(jobs.values()), "-o", "%j|%E").stdout
    after = dict(line.split("|", 1) for line in shown.splitlines())
    assert after[f"{prefix}-score-v0000"].startswith(f"afterok:{jobs[f'{prefix}-generate-v0000']}")

    run = swept_until(run, lambda run: run.finished)
    assert run.status == "succeeded", run.error
    logs = Path(run.folder + ".logs")
    assert sorted(path.name.rsplit("-", 1)[0] for path in logs.glob("*.out")) == sorted(jobs)
    stage_logs = {path.name.rsplit("-", 1)[0]: path.read_text() for path in logs.glob("*.out")}
    launcher = "2 processes: accelerate launch --config_file deploy/accelerate/cpu_ddp.yaml --num_processes 2"
    assert launcher in stage_logs[f"{prefix}-update-v0000"]
    assert not any(launcher in text for name, text in stage_logs.items() if "-update-" not in name)
    [cycle] = json.loads((Path(run.folder) / "ledger.json").read_text())["cycle"]["per_cycle"]
    assert cycle["update_world_size"] == 2
    for name, job in jobs.items():
        left_queue(cpu_partition, job)
        ended = cpu_partition.command("sacct", "--completion", "-n", "-P", "-j", job, "-o", "JobName,State")
        assert ended.stdout.split() == [f"{name}|COMPLETED"]
    shown = page.get(f"/runs/{run.pk}/").content.decode()
    assert "succeeded" in shown
    for name, job in jobs.items():  # each stage's job, its version in its name, as sacct says it ended
        assert f"<td>{job}</td><td>{name}</td><td>completed</td><td>exit code 0:0</td>" in shown


def test_a_stage_job_cancelled_mid_run_cancels_the_chain_says_which_and_resumes_from_the_last_version(
        engineer_api, base_checkpoint, tmp_path, page, cpu_partition):
    tasks = write_unlearnable_tasks(tmp_path / "tasks.jsonl")
    run = launched(engineer_api, None, {**GRPO_ONE_CYCLE, "mode": "staged"}, kind="grpo", tasks=tasks)
    assert run.status == "running", run.error
    prefix = f"pairwise-run-{run.pk}"
    jobs = dict(line.split(" ", 1)[::-1] for line in Path(run.folder + ".jobs").read_text().splitlines())
    generate = jobs[f"{prefix}-generate-v0000"]
    swept_until(run, lambda run: cpu_partition.command("squeue", "-h", "-j", generate, "-o", "%T").stdout.strip()
                == "RUNNING", bound_s=300, what=f"the generate job {generate} to start")
    cpu_partition.command("scancel", generate)  # by hand, outside the app: an operator's scancel

    run = swept_until(run, lambda run: run.finished, bound_s=120)
    assert run.status == "cancelled"
    assert run.error.startswith(f"Slurm job {generate} ({prefix}-generate-v0000) ended CANCELLED"), run.error
    shown = page.get(f"/runs/{run.pk}/").content.decode()
    assert f"<td>{jobs[f'{prefix}-prepare-v0000']}</td><td>{prefix}-prepare-v0000</td><td>completed</td>" in shown
    assert f"<td>{generate}</td><td>{prefix}-generate-v0000</td><td>cancelled</td>" in shown
    for later in ("score-v0000", "update-v0000", "finish-v0001"):  # Slurm cancels them: afterok can never hold
        left_queue(cpu_partition, jobs[f"{prefix}-{later}"])
        assert f"<td>{jobs[f'{prefix}-{later}']}</td><td>{prefix}-{later}</td><td>cancelled</td>" in \
            page.get(f"/runs/{run.pk}/").content.decode()

    # Resumed from its last complete version (v0000, which the prepare job wrote) by the run page's Resume button: a
    # new chain with no prepare job.
    assert RESUME_BUTTON.format(version="v0000") in page.get(f"/runs/{run.pk}/").content.decode()
    answer = page.post(f"/runs/{run.pk}/resume", follow=True)
    run.refresh_from_db()
    assert run.status == "running"
    assert f"Run {run.pk}: resumed, following Slurm job {run.slurm_job_id}." in answer.content.decode()
    assert 'id="resume"' not in answer.content.decode()  # running: nothing to resume
    resumed = [line.split(" ", 1)[1] for line in Path(run.folder + ".jobs").read_text().splitlines()]
    assert resumed == [f"{prefix}-generate-v0000", f"{prefix}-score-v0000", f"{prefix}-update-v0000",
                       f"{prefix}-finish-v0001"]
    run = swept_until(run, lambda run: run.finished)
    assert run.status == "succeeded", run.error
    assert (Path(run.folder) / "versions" / "v0001" / "version.json").is_file()

    # Done: no button, and a Resume sent all the same (or manage.py resume_slurm_run, the same code) says why not.
    refused = page.post(f"/runs/{run.pk}/resume")
    said = f"run {run.pk} is succeeded; only a cancelled or failed run goes on from a version"
    assert refused.status_code == 409 and said in refused.content.decode()
    assert 'id="resume"' not in refused.content.decode()
    with pytest.raises(CommandError, match=f"^{said}$"):
        register("resume_slurm_run", str(run.pk))

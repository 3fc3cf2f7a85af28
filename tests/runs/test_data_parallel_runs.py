"""The local backend runs a trainer as `processes` data-parallel processes: a config asking for more than the machine's
cores is refused at launch in one line; one asking for two trains as two, and its record and its page say so."""

import os
import threading
from pathlib import Path

import pytest

from annotate.errors import UserMistake
from annotate.runs import execute
from annotate.runs.folder import sidecar
from annotate.runs.launch import run_cancel, run_launch
from annotate.runs.models import Run
from annotate.runs.queue import execute_in_thread
from tests.exports.helpers import wait_for

THREE_STEPS = {"learning_rate": 1e-3, "max_steps": 3, "per_device_train_batch_size": 2, "logging_steps": 1,
               "torch_threads": 1, "use_cpu": True, "report_to": ["none"], "seed": 0}


@pytest.mark.django_db
def test_more_processes_than_cores_is_refused_in_one_line(base_checkpoint, tiny_snapshot):
    cores = os.cpu_count()
    with pytest.raises(UserMistake) as refused:
        run_launch(kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot), enqueue=False,
                   config={**THREE_STEPS, "processes": cores + 1})
    line = str(refused.value)
    assert "\n" not in line
    assert f"processes is {cores + 1} but this machine has {cores} CPU cores; set it to at most {cores}" in line


@pytest.mark.django_db
def test_a_slurm_run_is_not_held_to_this_machines_cores(base_checkpoint, tiny_snapshot, settings, monkeypatch,
                                                        tmp_path):
    """A Slurm run starts on a node of its partition, not here: the launch holds `processes` to that node's CPUs
    (sinfo; test_slurm_cluster.py refuses one more than the node has), never to this machine's cores. With no
    cluster to ask, nothing here bounds it, and the run is queued as asked."""
    settings.PAIRWISE_SLURM_GPUS_PER_NODE = 0
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))  # no cluster: sinfo cannot say
    cores = os.cpu_count()
    run = run_launch(kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot), enqueue=False,
                     backend="slurm", config={**THREE_STEPS, "processes": cores + 1})
    assert run.status == Run.Status.QUEUED
    assert run.resolved_config["processes"] == cores + 1


@pytest.mark.django_db
def test_a_two_process_run_trains_as_two_and_says_so(base_checkpoint, tiny_snapshot, make_user, client):
    launched = run_launch(kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot), enqueue=False,
                          config={**THREE_STEPS, "processes": 2})
    run = execute.run_execute(run_id=launched.pk, worker="w1@test")
    assert run.status == Run.Status.SUCCEEDED, (run.error, run.log_tail[-2000:])
    assert run.record["hardware"]["world_size"] == 2
    assert [row["step"] for row in run.metrics if row.get("event") == "train" and "loss" in row] == [1, 2, 3]
    client.force_login(make_user("eve", "engineer"))
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert '<span id="run-processes">2 processes</span>' in page


def processes_reading(config_file: Path) -> list[int]:
    """The pids whose command line names `config_file`: the launcher and every training process it started."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone, or not a process
        if entry.name.isdigit() and str(config_file).encode() in command:
            found.append(int(entry.name))
    return found


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_every_process_of_a_two_process_run(base_checkpoint, tiny_snapshot):
    launched = run_launch(kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot), enqueue=False,
                          config={**THREE_STEPS, "max_steps": 100_000, "processes": 2})
    follower = threading.Thread(target=execute_in_thread, args=(launched.pk,))  # as a launch with no broker does
    follower.start()
    try:
        wait_for(lambda: Run.objects.get(pk=launched.pk).metrics, "the first step's metrics", timeout=180)
        running = Run.objects.get(pk=launched.pk)
        config_file = sidecar(running.folder, ".yaml")
        assert len(processes_reading(config_file)) >= 3  # the launcher and two training processes
        run_cancel(running)
        follower.join(timeout=60)
    finally:
        follower.join(timeout=60)
    assert Run.objects.get(pk=launched.pk).status == Run.Status.CANCELLED
    wait_for(lambda: not processes_reading(config_file), "every process of the run to end", timeout=30)


def test_a_staged_grpo_run_is_started_as_one_process_that_launches_its_update():
    """The worker starts a staged or overlapped GRPO run's cycle as one process (it starts its update as `processes`
    itself: tests/training/test_data_parallel.py); an in-process GRPO run is launched as its processes."""
    config = {"processes": 2}
    for mode, launched in (("staged", 1), ("overlapped", 1), ("in_process", 2)):
        run = Run(kind=Run.Kind.GRPO, config=config, resolved_config={"mode": mode, "processes": 2})
        assert execute.launched_processes(run) == launched, mode

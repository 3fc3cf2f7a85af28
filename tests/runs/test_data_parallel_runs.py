"""The local backend runs a trainer as `processes` data-parallel processes: a config asking for more than the machine's
cores is refused at launch in one line; one asking for two trains as two, and its record and its page say so."""

import os

import pytest

from annotate.errors import UserMistake
from annotate.runs import execute
from annotate.runs.launch import run_launch
from annotate.runs.models import Run

pytestmark = pytest.mark.django_db

THREE_STEPS = {"learning_rate": 1e-3, "max_steps": 3, "per_device_train_batch_size": 2, "logging_steps": 1,
               "torch_threads": 1, "use_cpu": True, "report_to": ["none"], "seed": 0}


def test_more_processes_than_cores_is_refused_in_one_line(base_checkpoint, tiny_snapshot):
    cores = os.cpu_count()
    with pytest.raises(UserMistake) as refused:
        run_launch(kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot), enqueue=False,
                   config={**THREE_STEPS, "processes": cores + 1})
    line = str(refused.value)
    assert "\n" not in line
    assert f"processes is {cores + 1} but this machine has {cores} CPU cores; set it to at most {cores}" in line


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

"""The local backend's follower: metrics and log streamed into the run, exit codes kept, cancel stopping the
whole process group, the made checkpoint registered with its parent (never an existing checkpoint: a run that
changed no weight says why and links none), and a restarted worker's leftovers."""

import json
import socket
import threading
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotate.runs import execute
from annotate.runs.launch import run_cancel, run_launch
from annotate.runs.models import Checkpoint, Run
from annotate.runs.queue import execute_in_thread
from tests.conftest import TORCH_THREADS
from tests.exports.helpers import wait_for
from tests.runs.conftest import process_alive
from tests.runs.helpers import queued_run
from tests.training.helpers import write_unlearnable_tasks


@pytest.mark.django_db
def test_a_successful_run_streams_its_metrics_and_registers_its_checkpoint_under_the_base(base_checkpoint,
                                                                                         stand_in_trainer):
    run = execute.run_execute(run_id=queued_run(base_checkpoint, "succeed").pk, worker="w1@test")
    run.refresh_from_db()
    assert run.status == "succeeded" and run.exit_code == 0 and run.error == ""
    assert [row["step"] for row in run.metrics] == [1, 2, 3]
    assert "step 3 of 3" in run.log_tail
    made = Checkpoint.objects.get(run=run)
    assert made.parent == base_checkpoint and made.content_hash.startswith("sha256:")
    assert made.uri == str(Path(run.folder) / "checkpoint")
    assert execute.run_execute(run_id=run.pk, worker="w1@test") is None  # a repeated delivery runs nothing


@pytest.mark.django_db
def test_a_follow_pass_that_finds_no_new_metrics_lines_does_not_write_them_again(base_checkpoint, monkeypatch):
    run = queued_run(base_checkpoint, "hang")
    Run.objects.filter(pk=run.pk).update(status="running", pid=2 ** 22 + 17)  # a pid no process has
    run.refresh_from_db()
    folder = Path(run.folder)
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"status": "completed", "config": run.config}))
    metrics = folder / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 0.6}\n{"step": 2, "loss": 0.5}\n')
    polls = []

    def process_alive() -> bool:  # four passes; a third metrics line appears before the fourth
        polls.append(len(polls))
        if len(polls) == 4:
            with open(metrics, "a") as handle:
                handle.write('{"step": 3, "loss": 0.4}\n')
        return len(polls) < 4

    monkeypatch.setattr(execute, "POLL_S", 0)
    with CaptureQueriesContext(connection) as queries:
        execute.follow(run, exit_code=lambda: None, process_alive=process_alive)
    metrics_updates = [q["sql"] for q in queries.captured_queries
                       if q["sql"].startswith(f'UPDATE "{Run._meta.db_table}"') and '"metrics"' in q["sql"]]
    assert len(polls) == 4 and len(metrics_updates) == 2  # the first pass and the one that found step 3
    run.refresh_from_db()
    assert run.status == "succeeded" and [row["step"] for row in run.metrics] == [1, 2, 3]
    assert run.resolved_config == run.config


@pytest.mark.django_db
def test_a_failed_run_keeps_its_exit_code_log_tail_and_the_trainers_one_line(base_checkpoint, stand_in_trainer):
    run = execute.run_execute(run_id=queued_run(base_checkpoint, "fail").pk, worker="w1@test")
    run.refresh_from_db()
    assert run.status == "failed" and run.exit_code == 2
    assert run.error == "snapshot speed-1 has no train rows; export it with looser filters (exit code 2)"
    assert "error: snapshot speed-1" in run.log_tail and "step 3 of 3" in run.log_tail
    assert not Checkpoint.objects.filter(run=run).exists()


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_the_trainer_and_everything_it_started(base_checkpoint, stand_in_trainer):
    run = queued_run(base_checkpoint, "hang")
    follower = threading.Thread(target=execute_in_thread, args=(run.pk,))  # as a launch with no broker does
    follower.start()
    try:
        wait_for(lambda: len(Run.objects.get(pk=run.pk).metrics) == 3, "the trainer's metrics")
        running = Run.objects.get(pk=run.pk)
        child = int(Path(running.folder + ".child").read_text())
        assert running.status == "running" and process_alive(running.pid) and process_alive(child)
        run_cancel(running)
        follower.join(timeout=30)
    finally:
        follower.join(timeout=30)
    cancelled = Run.objects.get(pk=run.pk)
    assert cancelled.status == "cancelled" and "process group was stopped" in cancelled.error
    assert not process_alive(cancelled.pid) and not process_alive(child)


@pytest.mark.django_db
def test_a_queued_run_is_cancelled_at_once_and_never_starts(base_checkpoint, stand_in_trainer):
    run = run_cancel(queued_run(base_checkpoint, "succeed"))
    assert run.status == "cancelled" and run.error == "cancelled before it started"
    assert execute.run_execute(run_id=run.pk, worker="w1@test") is None
    assert not Path(run.folder).exists()


@pytest.mark.django_db
def test_a_restarted_worker_fails_its_runs_whose_process_is_gone_and_leaves_others_alone(base_checkpoint):
    gone = queued_run(base_checkpoint, "hang")
    other_worker = queued_run(base_checkpoint, "hang", seed=1)
    dead_pid = 2 ** 22 + 17  # above any pid this machine hands out (pid_max is at most 2^22)
    Run.objects.filter(pk=gone.pk).update(status="running", worker="w1@test", host=socket.gethostname(),
                                          pid=dead_pid)
    Run.objects.filter(pk=other_worker.pk).update(status="running", worker="w2@test", pid=dead_pid)

    assert execute.runs_reconcile(worker="w1@test") == []
    failed = Run.objects.get(pk=gone.pk)
    assert failed.status == "failed" and "restarted while it ran" in failed.error and str(dead_pid) in failed.error
    assert Run.objects.get(pk=other_worker.pk).status == "running"


@pytest.mark.slow
@pytest.mark.django_db
def test_a_grpo_run_that_changes_no_weight_links_no_checkpoint_and_says_why(base_checkpoint, make_user, client,
                                                                           client_for, tmp_path):
    tasks = write_unlearnable_tasks(tmp_path / "missing.jsonl")
    config = {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 4,
              "learning_rate": 5e-3, "logging_steps": 1, "save_strategy": "no", "use_cpu": True, "torch_threads": TORCH_THREADS,
              "verifier_workers": 1, "report_to": ["none"], "seed": 0}
    launched = run_launch(kind="grpo", base_checkpoint="tiny-sft", tasks=str(tasks), config=config, enqueue=False)
    run = execute.run_execute(run_id=launched.pk, worker="w1@test")
    assert run.status == "succeeded", (run.error, run.log_tail[-2000:])
    assert run.record["output_checkpoint"]["content_hash"] == base_checkpoint.content_hash

    base = Checkpoint.objects.get()  # no other checkpoint was registered, and the base's origin is as it was
    assert (base.pk, base.run_id, base.parent_id) == (base_checkpoint.pk, None, None)
    assert Run.objects.get(pk=run.pk).made_checkpoint is None
    why = ("its weights did not change: every group's answers were all wrong (4 of 4 groups), so no answer had an "
           "advantage to learn from")
    engineer = make_user("eve", "engineer")
    payload = client_for(engineer).get(f"/api/v1/runs/{run.pk}").json()
    assert payload["output_checkpoint"] is None and payload["no_output_checkpoint"] == why

    client.force_login(engineer)
    run_page = client.get(f"/runs/{run.pk}/").content.decode()
    made = run_page.split('id="lineage-output"')[1].split("</li>")[0]
    assert "none" in made and "its weights did not change" in made and base.name not in made
    assert "every group&#x27;s answers were all wrong (4 of 4 groups)" in run_page.split('id="weights-unchanged"')[1]
    base_page = client.get(f"/checkpoints/{base.pk}/").content.decode()
    assert "Registered from outside" in base_page.split('id="origin"')[1].split("</section>")[0]
    grpo_children = base_page.split('id="children-grpo"')[1]
    assert f"run {run.pk}" in grpo_children and "weights unchanged" in grpo_children

    # Reading the folder again, or registering its checkpoint/ by hand, writes no origin either.
    Run.objects.filter(pk=run.pk).update(status="running")
    execute.run_follow_again(run_id=run.pk)
    with pytest.raises(CommandError, match=r"holds the same weights as checkpoint 'tiny-sft'"):
        call_command("register_checkpoint", str(Path(run.folder) / "checkpoint"))
    base.refresh_from_db()
    assert (Checkpoint.objects.count(), base.run_id, base.parent_id) == (1, None, None)

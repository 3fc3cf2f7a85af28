"""A launch that leaves the training command's check off the request: recorded `checking` at once, then queued or
failed with "config refused: <the line>" by run_config_check; cancellable while checking; never checking forever."""

import datetime as dt

import pytest
from django.utils import timezone

from annotate.runs.launch import CHECK_TIMEOUT_S, run_cancel, run_config_check, run_launch
from annotate.runs.models import Run
from annotate.runs.sweeps import lost_checks_mark

pytestmark = pytest.mark.django_db

TWO_STEPS = {"learning_rate": 1e-3, "max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1,
             "torch_threads": 1, "use_cpu": True, "report_to": ["none"]}


def launched(snapshot, config) -> Run:
    return run_launch(kind="dpo", base_checkpoint="tiny-sft", snapshot=str(snapshot), config=config, enqueue=False,
                      check_now=False)


def test_a_launch_is_recorded_checking_and_the_check_queues_it(base_checkpoint, tiny_snapshot):
    run = launched(tiny_snapshot, TWO_STEPS)
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.get_status_display(), stored.resolved_config) == ("checking", "checking config", None)
    assert not stored.finished
    assert stored.config["output_dir"] == stored.folder

    checked = run_config_check(run.pk, enqueue=False)
    assert checked.status == Run.Status.QUEUED and checked.error == ""
    assert checked.resolved_config["output_dir"] == checked.folder
    assert checked.resolved_config["learning_rate"] == 1e-3


def test_a_config_the_training_command_refuses_fails_the_run_with_its_line(base_checkpoint, tiny_snapshot):
    run = launched(tiny_snapshot, {**TWO_STEPS, "learnig_rate": 1e-4})
    assert Run.objects.get(pk=run.pk).status == Run.Status.CHECKING

    refused = run_config_check(run.pk, enqueue=False)
    assert refused.status == Run.Status.FAILED and refused.finished_at is not None
    assert refused.error == ("config refused: config: unknown key 'learnig_rate' (did you mean 'learning_rate'?); "
                             "see the keys with --help-config")
    assert refused.resolved_config is None


def test_a_run_cancelled_while_checking_stays_cancelled(base_checkpoint, tiny_snapshot):
    run = launched(tiny_snapshot, TWO_STEPS)
    assert run_cancel(run).status == Run.Status.CANCELLED

    assert run_config_check(run.pk, enqueue=False) is None  # the check that ends afterwards writes nothing
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.error, stored.resolved_config) == ("cancelled", "cancelled before it started", None)


def test_a_check_that_never_ended_is_failed_by_the_sweep(base_checkpoint, tiny_snapshot):
    """Counted from when the check started, so a check that waited its turn in the queue is not called lost; one
    that never started is failed only long after its launch."""
    from annotate.runs.sweeps import CHECK_NEVER_STARTED_S

    lost, waiting, never, recent = (launched(tiny_snapshot, TWO_STEPS) for _ in range(4))
    long_ago = timezone.now() - dt.timedelta(seconds=CHECK_TIMEOUT_S + 120)
    Run.objects.filter(pk=lost.pk).update(created_at=long_ago, heartbeat_at=long_ago)  # started long ago
    Run.objects.filter(pk=waiting.pk).update(created_at=long_ago)  # launched long ago, never started: waiting
    Run.objects.filter(pk=never.pk).update(created_at=timezone.now() - dt.timedelta(seconds=CHECK_NEVER_STARTED_S + 1))

    assert lost_checks_mark() == [lost.pk, never.pk]
    failed = Run.objects.get(pk=lost.pk)
    assert failed.status == Run.Status.FAILED and failed.finished_at is not None
    assert failed.error.startswith("lost: the check of its config did not finish")
    assert "launch it again" in failed.error and "\n" not in failed.error
    assert {Run.objects.get(pk=run.pk).status for run in (waiting, recent)} == {Run.Status.CHECKING}


def test_a_check_that_breaks_on_the_server_is_not_called_a_refused_config(base_checkpoint, tiny_snapshot, monkeypatch):
    """check_config's 5xx (the training command itself failed, e.g. a worker without the training packages) is the
    server's fault: the run says the check failed, not that the config was refused."""
    from annotate.errors import UserMistake

    def broken_check(kind, config, **_):
        raise UserMistake("the training command's check failed (exit code 1): ModuleNotFoundError: No module named "
                          "'transformers'", status=500)

    run = launched(tiny_snapshot, TWO_STEPS)
    monkeypatch.setattr("annotate.runs.launch.check_config", broken_check)
    failed = run_config_check(run.pk, enqueue=False)
    assert failed.status == Run.Status.FAILED
    assert failed.error == ("the config check failed: the training command's check failed (exit code 1): "
                            "ModuleNotFoundError: No module named 'transformers'; launch it again")


def test_checks_take_turns_and_one_that_waits_past_its_bound_says_so(base_checkpoint, tiny_snapshot, monkeypatch):
    from annotate.runs import launch

    run = launched(tiny_snapshot, TWO_STEPS)
    monkeypatch.setattr(launch, "CHECK_TURN_WAIT_S", 0.1)
    taken = [launch.CHECKS_AT_ONCE.acquire(timeout=1) for _ in range(2)]  # two other checks are running
    try:
        assert all(taken)
        waited = run_config_check(run.pk, enqueue=False)
    finally:
        for _ in range(sum(taken)):
            launch.CHECKS_AT_ONCE.release()
    assert waited.status == Run.Status.FAILED
    assert waited.error == ("the config check did not get its turn within 0.1 s (other launches were being checked); "
                            "launch it again")

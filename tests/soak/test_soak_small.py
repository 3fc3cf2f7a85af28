"""A small soak (bench/soak.py): 10 reviewers, 1,000 judgments, a database restart and an export whose worker
is killed; every invariant a reviewer or an admin would notice holds. The bench brings its own PostgreSQL
cluster and Redis, so nothing else on the machine is restarted."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

needs_servers = pytest.mark.skipif(
    not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or shutil.which("redis-server") is None
    or (os.geteuid() == 0 and shutil.which("runuser") is None),
    reason="needs PostgreSQL's server binaries (/usr/lib/postgresql/*/bin) and redis-server to start its own",
)


@pytest.fixture(scope="module")
def soak(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("soak") / "soak.json"
    soak = subprocess.Popen([sys.executable, "bench/soak.py", "--reviewers", "10", "--judgments", "1000",
                             "--drop", "0.05", "--resend", "0.05", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = soak.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        soak.terminate()  # the bench stops the servers it started before it exits
        output, _ = soak.communicate(timeout=120)
    assert out.exists(), f"the soak wrote no result:\n{output[-5000:]}"
    return json.loads(out.read_text())


pytestmark = [pytest.mark.slow, needs_servers]


def test_every_acknowledged_judgment_is_stored_once(soak):
    checks = soak["database_checks"]
    assert checks["acknowledged"] >= 1000
    assert checks["acknowledged_not_stored"] == 0 and checks["lost"] == 0
    assert checks["duplicate_judgments"] == 0 and checks["duplicate_assignments"] == 0
    assert checks["stored_not_acknowledged"] == 0, "a dropped submit was stored and its retry did not get it back"
    assert soak["drops"] > 0 and soak["resends"] > 0 and soak["resend_mismatches"] == 0
    assert soak["gave_up"] == 0


def test_no_pair_gets_more_reviewers_than_the_overlap(soak):
    assert soak["database_checks"]["over_assigned_pairs"] == 0
    assert soak["database_checks"]["pair_counter_drift"] == 0


def test_errors_were_503_with_retry_after_and_only_while_the_database_was_down(soak):
    errors = soak["errors"]
    assert soak["database_down_seconds"] is not None, "the database was not restarted"
    assert errors["503_with_retry_after"] > 0, "no request met the database down"
    assert set(errors["error_statuses"]) == {"503"}, errors
    assert errors["errors_outside_window"] == 0, errors["first_outside"]
    assert errors["transport_errors_outside_window"] == 0, errors["first_transport_outside"]


def test_the_export_whose_worker_was_killed_completes_on_retry(soak):
    export = soak["export_worker_killed"]
    assert export["status_when_killed"] == "running"
    assert "worker" in export["error_after_kill"] and "retry it" in export["error_after_kill"]
    assert export["retry_status"] == 202 and export["final_status"] == "done" and export["attempt"] == 2
    assert export["rows"]["train"] + export["rows"]["test"] > 0
    assert soak["ok"] is True

"""Who may run the code verifier: as an ordinary user `python -m training verify` scores code (the
user-namespace mode); where neither root nor user namespaces are available the sandbox refuses, in
one line naming what is missing, and never runs a candidate unsandboxed. (The attack suite in
test_sandbox_attacks.py runs in both modes.)"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from training.verifiers.code_verifier import CodeVerifier
from training.verifiers.sandbox import SandboxPool, SandboxServer, SandboxUnavailable
from training.verifiers.sandbox_as_user import (
    UNPRIVILEGED_UID,
    UserCodeVerifier,
    as_user_command,
    readable_interpreter,
    readable_package_copy,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these tests change uid and make user namespaces")

# Runs the rest of argv as uid/gid 65534 inside a new user namespace (ids 0-65535 mapped to the
# host's own) whose limit on user namespaces is 0: the kernel's own way of saying "none here", as
# user.max_user_namespaces=0 or a distribution's switch does for a whole machine.
WITHOUT_USER_NAMESPACES = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
unshared_r, unshared_w = os.pipe()
mapped_r, mapped_w = os.pipe()
child = os.fork()
if child == 0:
    if libc.unshare(0x10000000) != 0:
        os._exit(90)
    os.write(unshared_w, b"x")
    os.read(mapped_r, 1)
    with open("/proc/sys/user/max_user_namespaces", "w") as limit:
        limit.write("0")
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    os.execv(sys.argv[1], sys.argv[1:])
os.read(unshared_r, 1)
for name in ("uid_map", "gid_map"):
    with open(f"/proc/{child}/{name}", "w") as id_map:
        id_map.write("0 0 65536\n")
os.write(mapped_w, b"x")
_, status = os.waitpid(child, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
WITHOUT_USER_NAMESPACES_PREFIX = [sys.executable, "-c", WITHOUT_USER_NAMESPACES]
REFUSAL = (
    "the code sandbox needs root or unprivileged user namespaces (user.max_user_namespaces=0 here); "
    "code answers cannot be scored"
)


def test_verifier_refuses_in_one_line_without_root_or_user_namespaces():
    verifier = UserCodeVerifier(uid=UNPRIVILEGED_UID, workers=1, command_prefix=WITHOUT_USER_NAMESPACES_PREFIX)
    with pytest.raises(SandboxUnavailable) as refused:
        verifier.start()
    assert str(refused.value) == REFUSAL
    assert verifier.worker is None  # nothing was left running


@pytest.fixture
def verify_command(add_task, add_solution):
    """`python -m training verify` on one add task and its right answer, as uid 65534: the command
    line to run (after a prefix that changes user), the folder to run it in, and its --out file."""
    package = readable_package_copy()
    work = Path(tempfile.mkdtemp(prefix="pairwise-verify-as-user-"))
    work.chmod(0o777)
    (work / "tasks.jsonl").write_text(json.dumps(add_task) + "\n")
    (work / "completions.jsonl").write_text(json.dumps({"task_id": "add-001", "completion": add_solution}) + "\n")
    for name in ("tasks.jsonl", "completions.jsonl"):
        (work / name).chmod(0o644)
    out = work / "results.jsonl"
    command = [readable_interpreter(UNPRIVILEGED_UID), "-m", "training", "verify", "--tasks", str(work / "tasks.jsonl"),
               "--completions", str(work / "completions.jsonl"), "--out", str(out)]
    yield command, package, out
    shutil.rmtree(package)
    shutil.rmtree(work)


def test_verify_command_scores_code_as_an_ordinary_user(verify_command):
    command, package, out = verify_command
    run = subprocess.run([*as_user_command(UNPRIVILEGED_UID), *command], cwd=package, env={}, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(row["task_id"], row["status"], row["reward"]) for row in rows] == [("add-001", "correct", 1.0)]
    assert out.stat().st_uid == UNPRIVILEGED_UID  # written by that user, so it really ran as them


def test_verify_command_prints_the_line_and_exits_2_without_user_namespaces(verify_command):
    command, package, out = verify_command
    run = subprocess.run([*WITHOUT_USER_NAMESPACES_PREFIX, *command], cwd=package, env={}, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith("error: ") and REFUSAL in run.stderr
    assert run.stdout == ""
    assert not out.exists()


def test_root_mode_refuses_when_the_server_is_not_root(add_task, add_solution):
    # Asked for root's mode without root, the server cannot make namespaces or drop to another uid.
    server = SandboxServer()
    assert server.mode == "root"
    interpreter = readable_interpreter(UNPRIVILEGED_UID)
    server.worker.command = [*as_user_command(UNPRIVILEGED_UID), interpreter, *server.worker.command[1:]]
    with pytest.raises(SandboxUnavailable, match=r"cannot isolate candidate code \(root mode\)"):
        server.start()
    assert not server.worker.alive

    pool = SandboxPool(workers=1)
    pool._all.append(server)  # the broken server stands in for the pool's
    pool._idle.put(server)
    pool._started = True
    with CodeVerifier(pool=pool) as verifier:
        result = verifier.verify(add_task, add_solution)
    assert result.status == "error"
    assert result.reward is None
    assert "cannot isolate" in result.reason

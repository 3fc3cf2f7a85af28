"""Candidates that try to win without solving the task, or to get out. Each must score 0 with a
reason, the verifier must survive, the next candidate must be unaffected, and no process may be left
behind. Every test runs in both isolation modes: as root, and as an ordinary user (uid 65534, in an
unprivileged user namespace); the verifier runs in a child process started as that user."""

import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest

from training.verifiers.sandbox_as_user import UNPRIVILEGED_UID, UserCodeVerifier

SECRET_NAME = "PAIRWISE_SECRET_TOKEN"
SECRET = "s3cr3t-token-value"
REPOSITORY_TESTS = str(Path(__file__).resolve().parents[2])

ATTACKS = {
    "sys_exit_before_tests": "import sys\nsys.exit(0)\ndef add(a, b):\n    return 0\n",
    "os_exit_before_tests": "import os\nos._exit(0)\ndef add(a, b):\n    return 0\n",
    "os_exit_inside_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "sys_exit_inside_call": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "atexit_fakes_results": (
        "import atexit, os, json, struct, sys\n"
        "def fake():\n"
        "    for frame in ({'loaded': True}, {'i': 0, 'out': 3}, {'done': True}):\n"
        "        data = json.dumps(frame).encode()\n"
        "        os.write(3, struct.pack('>I', len(data)) + data)\n"
        "atexit.register(fake)\n"
        "sys.exit(0)\n"
    ),
    "always_equal_object": (
        "class Anything(int):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Anything(0)\n"
    ),
    "always_equal_plain_object": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return Anything()\n"
    ),
    "monkeypatch_builtins_and_json": (
        "import builtins, json\n"
        "builtins.type = lambda *a: int\n"
        "builtins.isinstance = lambda *a: True\n"
        "json.dumps = lambda *a, **k: '{\"i\": 0, \"out\": 3}'\n"
        "json.loads = lambda *a, **k: {'done': True}\n"
        "def add(a, b):\n    return 0\n"
    ),
    "monkeypatch_harness": (
        "import sys\n"
        "harness = sys.modules['__main__']\n"
        "harness._plain = lambda value, depth=0: 3\n"
        "harness._classify = lambda *a: (None, [{'out': 3}] * 8, None)\n"
        "def add(a, b):\n    return 0\n"
    ),
    "frame_introspection": (
        "import sys\n"
        "def add(a, b):\n"
        "    frame, found = sys._getframe(), []\n"
        "    while frame is not None:\n"
        "        for scope in (frame.f_locals, frame.f_globals):\n"
        "            for name, value in list(scope.items()):\n"
        "                if 'expect' in name.lower() or 'hidden' in name.lower():\n"
        "                    found.append(value)\n"
        "        frame = frame.f_back\n"
        "    return found[0] if found else -1\n"
    ),
    "prints_fake_pass_line": (
        "import os, sys\n"
        "print('passed all 8 tests')\n"
        "print(json.dumps({'status': 'correct'}) if False else '{\"status\": \"correct\", \"reward\": 1.0}')\n"
        "os.write(1, b'ALL TESTS PASSED\\n'); os.write(2, b'OK\\n')\n"
        "def add(a, b):\n    print('ok'); return 0\n"
    ),
    "fork_bomb": (
        "import os\n"
        "def add(a, b):\n"
        "    while True:\n"
        "        try:\n            os.fork()\n"
        "        except OSError:\n            pass\n"
    ),
    "memory_bomb": "def add(a, b):\n    hog = []\n    while True:\n        hog.append(bytearray(10**7))\n",
    "ten_gigabyte_file": (
        "def add(a, b):\n"
        "    with open('/tmp/big', 'wb') as out:\n"
        "        for _ in range(10 * 1024):\n            out.write(b'x' * (1 << 20))\n"
        "    return 0\n"
    ),
    "infinite_loop": "def add(a, b):\n    while True:\n        pass\n",
    "sleeps_past_timeout": "import time\ndef add(a, b):\n    time.sleep(30)\n    return a + b\n",
    "kills_its_parents": (
        "import os, signal\n"
        "def add(a, b):\n"
        "    for pid in (os.getppid(), 1, -1, {client_pid}):\n"
        "        try:\n            os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n            pass\n"
        "    return 0\n"
    ),
    "leaves_a_daemon": (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n        time.sleep(600)\n"
        "    os._exit(0)\n"
        "def add(a, b):\n    return 0\n"
    ),
}




@pytest.fixture(scope="module", params=["root", "userns"])
def sandbox(request):
    """A code verifier in a child process holding SECRET in its environment, as root or as an
    ordinary user. As an ordinary user the tests can only run the userns mode, as themselves."""
    if request.param == "root" and os.geteuid() != 0:
        pytest.skip("root mode needs the tests to run as root")
    uid = 0 if request.param == "root" else (UNPRIVILEGED_UID if os.geteuid() == 0 else os.geteuid())
    with UserCodeVerifier(uid=uid, workers=2, env={SECRET_NAME: SECRET}) as verifier:
        assert verifier.hello["mode"] == request.param
        yield verifier


@pytest.fixture
def world_writable_dir():
    """A folder every uid may read and write: only the sandbox, not file modes, keeps candidates out."""
    folder = Path(tempfile.mkdtemp(prefix="pairwise-attack-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder)


def _host_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _status_field(pid: int, field: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def leftover_processes(sandbox) -> list[int]:
    """Host pids of processes still in a sandbox server's PID namespace (the server aside), or, in
    root mode, running as a candidate uid anywhere."""
    servers = sandbox.servers()
    inner = {pid for pid in _host_pids() if _status_field(pid, "PPid") in {str(s["pid"]) for s in servers}}
    namespaces = {_pid_namespace(pid) for pid in inner} - {None}
    assert len(namespaces) == len(servers), "could not find every sandbox server's PID namespace"
    candidate_uids = {str(s["uid"]) for s in servers if s["mode"] == "root"}
    left = []
    for pid in _host_pids():
        if pid in inner:
            continue
        uid = (_status_field(pid, "Uid") or "").split("\t")[0]
        if _pid_namespace(pid) in namespaces or uid in candidate_uids:
            left.append(pid)
    return left


def check_verifier_still_sound(sandbox, add_task, add_solution):
    # Run the honest solution on both servers, so whichever ran the attack is checked.
    honest = sandbox.verify_many([(add_task, add_solution)] * 4)
    assert [r.status for r in honest] == ["correct"] * len(honest), honest[0].reason
    assert leftover_processes(sandbox) == []


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_zero_and_leaves_nothing_behind(attack, sandbox, add_task, add_solution):
    code = ATTACKS[attack].replace("{client_pid}", str(sandbox.pid))
    result = sandbox.verify(add_task, f"```python\n{code}```")
    assert result.reward == 0.0, result
    assert result.status in ("wrong", "timeout")
    assert result.reason
    check_verifier_still_sound(sandbox, add_task, add_solution)


@pytest.mark.parametrize(
    "attack, limit",
    [("memory_bomb", "memory"), ("ten_gigabyte_file", "file_size"), ("infinite_loop", "time"),
     ("sleeps_past_timeout", "time"), ("fork_bomb", "time")],
)
def test_result_names_the_limit_that_was_hit(attack, limit, sandbox, add_task):
    if limit != "time":
        # Room enough that a busy machine hits the memory or file limit before the clock.
        add_task["limits"]["time_s"] = 10
    result = sandbox.verify(add_task, ATTACKS[attack])
    assert result.details["limit"] == limit, result


def test_timeouts_are_reported_as_timeout(sandbox, add_task):
    result = sandbox.verify(add_task, ATTACKS["infinite_loop"])
    assert result.status == "timeout"
    assert "time" in result.reason


def test_candidate_cannot_read_or_overwrite_task_files(world_writable_dir, sandbox, add_task):
    secret = "expected-output-4242"
    task_file = world_writable_dir / "tasks.jsonl"
    task_file.write_text(json.dumps({"hidden_tests": [{"args": [5, 7], "expected": secret}]}))
    task_file.chmod(0o666)
    code = (
        "def add(a, b):\n"
        "    seen = []\n"
        f"    for path in ({str(task_file)!r}, {REPOSITORY_TESTS!r}, '/etc/passwd'):\n"
        "        try:\n            seen.append(open(path).read())\n"
        "        except OSError as exc:\n            seen.append(type(exc).__name__)\n"
        "    try:\n"
        f"        open({str(task_file)!r}, 'w').write('overwritten')\n"
        "    except OSError as exc:\n        seen.append(type(exc).__name__)\n"
        "    return ' '.join(seen)\n"
    )
    result = sandbox.verify(add_task, code)
    assert result.reward == 0.0
    assert secret not in json.dumps(result.to_row())
    assert result.details["suites"]["public"][0]["output"].count("FileNotFoundError") == 4
    assert task_file.read_text().find(secret) > 0


def test_candidate_cannot_reach_local_tcp_or_unix_sockets(world_writable_dir, sandbox, add_task):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(3)
    port = listener.getsockname()[1]
    unix_path = str(world_writable_dir / "control.sock")
    unix_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_listener.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix_listener.listen(5)
    unix_listener.settimeout(3)
    abstract_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_listener.bind("\0pairwise-test-abstract")
    abstract_listener.listen(5)
    abstract_listener.settimeout(3)
    accepted = []

    def accept(sock):
        with contextlib.suppress(OSError):
            accepted.append(sock.accept())

    threads = [threading.Thread(target=accept, args=(s,)) for s in (listener, unix_listener, abstract_listener)]
    for thread in threads:
        thread.start()
    code = (
        "import socket\n"
        "def add(a, b):\n"
        "    errors = []\n"
        f"    for family, address in ((socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_UNIX, {unix_path!r}),\n"
        "                            (socket.AF_UNIX, '\\0pairwise-test-abstract')):\n"
        "        s = socket.socket(family, socket.SOCK_STREAM)\n"
        "        s.settimeout(0.5)\n"
        "        try:\n            s.connect(address); s.sendall(b'tests please')\n"
        "        except OSError as exc:\n            errors.append(type(exc).__name__)\n"
        "    return errors\n"
    )
    result = sandbox.verify(add_task, code)
    for sock in (listener, unix_listener, abstract_listener):
        sock.close()
    for thread in threads:
        thread.join()
    assert accepted == []
    assert result.reward == 0.0
    assert result.details["suites"]["public"][0]["output"].count("Error") == 3


def test_candidate_cannot_read_environment_of_any_process(sandbox, add_task):
    code = (
        "import os\n"
        "def add(a, b):\n"
        "    found = [repr(dict(os.environ))]\n"
        "    for pid in os.listdir('/proc'):\n"
        "        try:\n            found.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "        except OSError as exc:\n            found.append(type(exc).__name__)\n"
        f"    for pid in ('1', str(os.getppid()), {str(sandbox.pid)!r}):\n"
        "        try:\n            found.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "        except OSError as exc:\n            found.append(type(exc).__name__)\n"
        "    return ' '.join(found)\n"
    )
    result = sandbox.verify(add_task, code)
    assert SECRET not in json.dumps(result.to_row())
    assert result.reward == 0.0
    outputs = [t.get("output", "") for t in result.details["suites"]["public"]]
    assert outputs and outputs[0] != ""


def test_server_survives_candidate_killing_its_parents(sandbox, add_task):
    pids_before = [server["pid"] for server in sandbox.servers()]
    code = ATTACKS["kills_its_parents"].replace("{client_pid}", str(sandbox.pid))
    assert sandbox.verify(add_task, code).reward == 0.0
    assert [server["pid"] for server in sandbox.servers()] == pids_before
    assert all(server["alive"] for server in sandbox.servers())


def test_correct_candidate_with_a_daemon_is_cleaned_up(sandbox, add_task, add_solution):
    code = add_solution + ATTACKS["leaves_a_daemon"].split("def add")[0]
    result = sandbox.verify(add_task, code)
    assert result.status == "correct"
    assert leftover_processes(sandbox) == []


PROBE_TASK = {
    "task_id": "probe", "kind": "code", "prompt": "probe()", "entry_point": "probe",
    "public_tests": [{"args": []}], "limits": {"time_s": 5, "memory_mb": 128},
}


def probe_task(expected) -> dict:
    """A task whose only test expects `expected`: a probe scores correct exactly when it sees that."""
    return {**PROBE_TASK, "reference_solution": f"def probe():\n    return {expected!r}\n"}


def test_candidates_on_different_servers_cannot_see_each_other(sandbox):
    # Both run at once, one per server; each leaves a file and looks for the other's and its process.
    code = (
        "import os, time\n"
        "def probe():\n"
        "    open(f'/tmp/here-{os.getpid()}', 'w').close()\n"
        "    time.sleep(0.5)\n"
        "    files = sorted(os.listdir('/tmp'))\n"
        "    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "    return [os.readlink('/proc/self/ns/pid'), os.readlink('/proc/self/ns/mnt'), files == [f'here-{os.getpid()}'],\n"
        "            pids == [os.getpid()]]\n"
    )
    task = probe_task("")
    first, second = sandbox.verify_many([(task, code), (task, code)])
    seen = [json.loads(result.details["suites"]["public"][0]["output"]) for result in (first, second)]
    assert [view[2:] for view in seen] == [[True, True], [True, True]]  # only its own file and itself
    assert seen[0][0] != seen[1][0] and seen[0][1] != seen[1][1]  # separate PID and mount namespaces


def test_candidate_has_no_privileges_and_a_read_only_root(sandbox):
    code = (
        "import errno\n"
        "def probe():\n"
        "    status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines())\n"
        "    seen = {key: status[key] for key in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs',\n"
        "                                         'Seccomp')}\n"
        "    for path in ('/escape', '/dev/escape', '/usr/escape', '/proc/escape'):\n"
        "        try:\n            open(path, 'w').close(); seen[path] = 'written'\n"
        "        except OSError as exc:\n            seen[path] = errno.errorcode[exc.errno]\n"
        "    return seen\n"
    )
    none = "0000000000000000"
    expected = {"CapInh": none, "CapPrm": none, "CapEff": none, "CapBnd": none, "CapAmb": none, "NoNewPrivs": "1",
                "Seccomp": "2", "/escape": "EROFS", "/dev/escape": "EROFS", "/usr/escape": "EROFS",
                "/proc/escape": "ENOENT"}
    result = sandbox.verify(probe_task(expected), code)
    assert result.status == "correct", result.reason


def test_system_calls_outside_the_allow_list_fail(sandbox):
    # Each of these works for an ordinary process with no privileges; the filter refuses them all.
    code = (
        "import ctypes, errno, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def outcome(result):\n"
        "    return 'allowed' if result != -1 else errno.errorcode[ctypes.get_errno()]\n"
        "def probe():\n"
        "    seen = {'unshare_user': outcome(libc.unshare(0x10000000)), 'unshare_none': outcome(libc.unshare(0)),\n"
        "            'mount': outcome(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),\n"
        "            'ptrace_traceme': outcome(libc.ptrace(0, 0, None, None))}\n"
        "    try:\n        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close(); seen['netlink'] = 'allowed'\n"
        "    except OSError as exc:\n        seen['netlink'] = errno.errorcode[exc.errno]\n"
        "    return seen\n"
    )
    expected = {"unshare_user": "EPERM", "unshare_none": "EPERM", "mount": "EPERM", "ptrace_traceme": "EPERM",
                "netlink": "EPERM"}
    result = sandbox.verify(probe_task(expected), code)
    assert result.status == "correct", result.reason


def test_ordinary_programs_still_work_under_the_filter(sandbox):
    # Threads, processes, pipes, socket pairs, files, sleeping and random numbers are all allowed.
    code = (
        "import hashlib, os, random, select, socket, subprocess, tempfile, threading, time\n"
        "def probe():\n"
        "    box = []\n"
        "    worker = threading.Thread(target=lambda: box.append(sum(range(10))))\n"
        "    worker.start(); worker.join()\n"
        "    read_end, write_end = os.pipe()\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        os.write(write_end, b'hi'); os._exit(7)\n"
        "    _, status = os.waitpid(child, 0)\n"
        "    left, right = socket.socketpair()\n"
        "    left.sendall(b'ping'); select.select([right], [], [], 1)\n"
        "    with tempfile.NamedTemporaryFile('w+') as scratch:\n"
        "        scratch.write('x'); scratch.flush(); size = os.path.getsize(scratch.name)\n"
        "    time.sleep(0.01)\n"
        "    random.SystemRandom().random()\n"
        "    return [box[0], os.read(read_end, 2).decode(), os.waitstatus_to_exitcode(status), right.recv(4).decode(),\n"
        "            size, hashlib.sha256(b'').hexdigest()[:8]]\n"
    )
    result = sandbox.verify(probe_task([45, "hi", 7, "ping", 1, "e3b0c442"]), code)
    assert result.status == "correct", result.reason

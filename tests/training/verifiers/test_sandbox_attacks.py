"""Candidates that try to win without solving the task. Each must score 0 with a reason, the
verifier must survive, the next candidate must be unaffected, and no process may be left behind."""

import contextlib
import json
import os
import socket
import threading

import pytest

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


def check_verifier_still_sound(code_verifier, add_task, add_solution, leftover_processes):
    # Run the honest solution on both servers, so whichever ran the attack is checked.
    honest = code_verifier.verify_many([(add_task, add_solution)] * code_verifier.pool.size * 2)
    assert [r.status for r in honest] == ["correct"] * len(honest), honest[0].reason
    assert leftover_processes() == []


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_zero_and_leaves_nothing_behind(
    attack, code_verifier, add_task, add_solution, leftover_processes
):
    code = ATTACKS[attack].replace("{client_pid}", str(os.getpid()))
    result = code_verifier.verify(add_task, f"```python\n{code}```")
    assert result.reward == 0.0, result
    assert result.status in ("wrong", "timeout")
    assert result.reason
    check_verifier_still_sound(code_verifier, add_task, add_solution, leftover_processes)


@pytest.mark.parametrize(
    "attack, limit",
    [("memory_bomb", "memory"), ("ten_gigabyte_file", "file_size"), ("infinite_loop", "time"),
     ("sleeps_past_timeout", "time"), ("fork_bomb", "time")],
)
def test_result_names_the_limit_that_was_hit(attack, limit, code_verifier, add_task):
    if limit != "time":
        # Room enough that a busy machine hits the memory or file limit before the clock.
        add_task["limits"]["time_s"] = 10
    result = code_verifier.verify(add_task, ATTACKS[attack])
    assert result.details["limit"] == limit, result


def test_timeouts_are_reported_as_timeout(code_verifier, add_task):
    result = code_verifier.verify(add_task, ATTACKS["infinite_loop"])
    assert result.status == "timeout"
    assert "time" in result.reason


def test_candidate_cannot_read_or_overwrite_task_files(tmp_path, code_verifier, add_task):
    secret = "expected-output-4242"
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text(json.dumps({"hidden_tests": [{"args": [5, 7], "expected": secret}]}))
    code = (
        "def add(a, b):\n"
        "    seen = []\n"
        f"    for path in ({str(task_file)!r}, '/work/main/tests', '/etc/passwd'):\n"
        "        try:\n            seen.append(open(path).read())\n"
        "        except OSError as exc:\n            seen.append(type(exc).__name__)\n"
        "    try:\n"
        f"        open({str(task_file)!r}, 'w').write('overwritten')\n"
        "    except OSError as exc:\n        seen.append(type(exc).__name__)\n"
        "    return ' '.join(seen)\n"
    )
    result = code_verifier.verify(add_task, code)
    assert result.reward == 0.0
    assert secret not in json.dumps(result.to_row())
    assert task_file.read_text().find(secret) > 0


def test_candidate_cannot_reach_local_tcp_or_unix_sockets(tmp_path, code_verifier, add_task):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(3)
    port = listener.getsockname()[1]
    unix_path = str(tmp_path / "control.sock")
    unix_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_listener.bind(unix_path)
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
        "    return 0\n"
    )
    result = code_verifier.verify(add_task, code)
    for sock in (listener, unix_listener, abstract_listener):
        sock.close()
    for thread in threads:
        thread.join()
    assert accepted == []
    assert result.reward == 0.0


def test_candidate_cannot_read_environment_of_any_process(code_verifier, add_task, monkeypatch):
    monkeypatch.setenv("PAIRWISE_SECRET_TOKEN", "s3cr3t-token-value")
    code = (
        "import os\n"
        "def add(a, b):\n"
        "    found = [repr(dict(os.environ))]\n"
        "    for pid in os.listdir('/proc'):\n"
        "        try:\n            found.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "        except OSError as exc:\n            found.append(type(exc).__name__)\n"
        f"    for pid in ('1', str(os.getppid()), {str(os.getpid())!r}):\n"
        "        try:\n            found.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
        "        except OSError as exc:\n            found.append(type(exc).__name__)\n"
        "    return ' '.join(found)\n"
    )
    result = code_verifier.verify(add_task, code)
    assert "s3cr3t-token-value" not in json.dumps(result.to_row())
    assert result.reward == 0.0
    outputs = [t.get("output", "") for t in result.details["suites"]["public"]]
    assert outputs and outputs[0] != ""


def test_server_survives_candidate_killing_its_parents(code_verifier, add_task):
    pids_before = [server.server_pid for server in code_verifier.pool._all]
    code = ATTACKS["kills_its_parents"].replace("{client_pid}", str(os.getpid()))
    assert code_verifier.verify(add_task, code).reward == 0.0
    assert [server.server_pid for server in code_verifier.pool._all] == pids_before
    assert all(server.worker.alive for server in code_verifier.pool._all)


def test_correct_candidate_with_a_daemon_is_cleaned_up(code_verifier, add_task, add_solution, leftover_processes):
    code = add_solution + ATTACKS["leaves_a_daemon"].split("def add")[0]
    result = code_verifier.verify(add_task, code)
    assert result.status == "correct"
    assert leftover_processes() == []


def test_sandbox_refuses_to_run_code_where_it_cannot_isolate(add_task, add_solution):
    from training.verifiers.code_verifier import CodeVerifier
    from training.verifiers.sandbox import SandboxPool, SandboxServer, SandboxUnavailable

    # An unprivileged server cannot make namespaces or drop to another uid.
    server = SandboxServer()
    server.worker.command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *server.worker.command]
    with pytest.raises(SandboxUnavailable, match="cannot isolate"):
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

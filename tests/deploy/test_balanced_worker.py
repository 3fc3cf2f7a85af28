"""The deployment's gunicorn worker (annotate/gunicorn_worker.py), run by real gunicorn processes with
deploy/gunicorn.conf.py: kept-alive clients spread over the workers, and a client past the bound is served by a
connection handed over to it, not left waiting for a kept-alive one to time out."""

import http.client
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gunicorn.workers.gthread import DEFAULT_WORKER_DATA_TIMEOUT

from bench.common import free_port

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy/gunicorn.conf.py"
# Far longer than a handover takes (about IDLE_SECONDS_BEFORE_HANDOVER): a client that waits for a kept-alive
# connection to time out instead gets no answer within CLIENT_TIMEOUT and the test fails.
KEEPALIVE_SECONDS = 60
CLIENT_TIMEOUT = 20


@pytest.fixture
def serve(tmp_path):
    """serve(workers, threads, connections) starts gunicorn on the deployment's config with that layout and
    waits until every worker has booted; returns the port."""
    servers = []

    def start(*, workers: int, threads: int, connections: int) -> int:
        port = free_port()
        log = tmp_path / f"gunicorn-{port}.log"
        env = {**os.environ, "PAIRWISE_BIND": f"127.0.0.1:{port}", "PAIRWISE_WORKERS": str(workers),
               "PAIRWISE_THREADS": str(threads), "PAIRWISE_WORKER_CONNECTIONS": str(connections),
               "PAIRWISE_LOG_LEVEL": "info", "GUNICORN_CMD_ARGS": f"--keep-alive {KEEPALIVE_SECONDS}"}
        with log.open("w") as out:
            servers.append(subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", str(CONFIG), "tests.deploy.pid_app:application"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        while log.read_text().count("Booting worker") < workers:
            assert servers[-1].poll() is None, f"gunicorn exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"gunicorn's workers did not boot:\n{log.read_text()}"
            time.sleep(0.1)
        return port

    yield start
    for server in servers:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # still waiting on a client's connection to end
            server.kill()
            server.wait()


def ask(conn: http.client.HTTPConnection, path: str = "/") -> tuple[str, str | None]:
    """One request on a kept connection: the serving worker's pid and the response's Connection header."""
    conn.request("GET", path)
    response = conn.getresponse()
    return response.read().decode(), response.getheader("Connection")


def wait_until(condition, what: str, seconds: float = 10) -> None:
    """Poll `condition` until it holds; after `seconds`, fail in one line saying what did not happen."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {seconds} s")
        time.sleep(0.01)


def accept_queue(port: int) -> int:
    """Connections to 127.0.0.1:`port` that no worker has accepted yet: the listening socket's queue, as the
    kernel's table of TCP sockets shows it (Linux)."""
    listening = f"0100007F:{port:04X}"  # 127.0.0.1, as the table writes an address
    rows = (line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:])
    return sum(int(row[4].split(":")[1], 16) for row in rows if row[1] == listening and row[3] == "0A")


def connect(port: int) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)
    conn.connect()
    return conn


def test_kept_alive_clients_spread_evenly_over_the_workers(serve):
    port = serve(workers=2, threads=1, connections=3)
    conns = [connect(port) for _ in range(6)]
    # Each worker accepts 3 and then no more: once none waits, each worker holds 3, whatever asks first.
    wait_until(lambda: accept_queue(port) == 0, "both workers accepting all 6 connections")
    pids = [ask(conn)[0] for conn in conns]
    assert sorted(pids.count(pid) for pid in set(pids)) == [3, 3]


# With one thread and room for 3 connections, a worker keeps at most 2 idle (gunicorn keeps `threads` slots for
# work), so it is full with two idle connections and one request in a thread.

def test_a_client_past_the_bound_gets_the_connection_idle_longest(serve):
    port = serve(workers=1, threads=1, connections=3)
    oldest, newer, busy = connect(port), connect(port), connect(port)
    ask(oldest)
    ask(newer)
    busy.request("GET", "/?sleep=2")  # full now
    waiting = connect(port)
    pid, _ = ask(waiting)  # answered once `oldest` has been idle a second, long before its keep-alive ends
    assert pid and busy.getresponse().read().decode() == pid
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        ask(oldest)
    assert ask(newer)[0] == pid  # the connection idle for less was kept


def test_a_full_worker_with_a_client_waiting_closes_the_connection_it_answers(serve, tmp_path):
    port = serve(workers=1, threads=1, connections=3)
    started = tmp_path / "busy-started"
    silent = connect(port)  # sends nothing: gunicorn's thread waits for its first request, then sets it aside
    time.sleep(DEFAULT_WORKER_DATA_TIMEOUT + 0.2)
    asking, busy = connect(port), connect(port)
    ask(asking)
    busy.request("GET", f"/?sleep=1&started={started}")  # full now, with one connection idle: gunicorn alone
    # would keep `asking`. `busy` is in its thread before anyone waits, so its own answer keeps its connection.
    wait_until(started.exists, "the app starting on busy's request")
    waiting = [connect(port), connect(port)]  # two, so one still waits if `silent` is handed over meanwhile
    _, connection = ask(asking)  # idle for less than a second, so not handed over: answered after `busy`
    assert connection == "close"
    assert busy.getresponse().read()
    assert all(ask(conn)[0] for conn in waiting)  # each served on a slot given up
    silent.close()


def test_the_deployment_uses_the_balanced_worker_only_on_the_gunicorn_it_was_written_for(monkeypatch, capsys):
    import gunicorn

    config = runpy.run_path(str(CONFIG))
    assert config["worker_class"] == "annotate.gunicorn_worker.BalancedThreadWorker"
    low, high = config["BALANCED_WORKER_GUNICORN"]
    assert low <= gunicorn.version_info < high
    monkeypatch.setattr(gunicorn, "version_info", high)
    monkeypatch.setattr(gunicorn, "__version__", ".".join(map(str, high)))
    fallback = runpy.run_path(str(CONFIG))
    assert fallback["worker_class"] == "gthread"
    assert fallback["worker_connections"] == 1000  # gunicorn's own: no bound that nothing would hand over
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "using gunicorn's gthread worker" in warning[0]

"""The trusted side of the code sandbox: starts fork servers and asks them to run candidates.

A `SandboxServer` is one warm fork server (see sandbox_server.py for what it isolates and how),
started as a fresh interpreter with an empty environment, never forked from this process, so nothing
this process holds (a model, tasks, expected outputs) is in the server's memory. `SandboxPool` keeps
one server per worker thread.

The isolation mode follows who runs this process: as root, "root" (namespaces made with root's
privileges, each candidate under its own unused uid); as an ordinary user, "userns" (the same
namespaces inside an unprivileged user namespace, candidates with no capabilities). Where neither
works, starting a server raises `SandboxUnavailable` with one line naming what is missing, and
nothing runs unsandboxed.
"""

from __future__ import annotations

import os
import queue
import random
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from training.verifiers.worker_process import WorkerDied, WorkerProcess, WorkerTimeout

SERVER_SCRIPT = Path(__file__).with_name("sandbox_server.py")
ROOT_MODE = "root"
USERNS_MODE = "userns"
# Candidates run as a uid picked from a range no real account uses, one uid per server.
SANDBOX_UID_RANGE = (1_000_000, 2_000_000_000)


class SandboxUnavailable(RuntimeError):
    """The sandbox could not isolate candidate code here, so it refuses to run any."""


class SandboxFailed(RuntimeError):
    """The sandbox itself broke while running a candidate (not the candidate's fault)."""


def isolation_mode() -> str:
    """"root" when this process runs as root, else "userns" (an unprivileged user namespace)."""
    return ROOT_MODE if os.geteuid() == 0 else USERNS_MODE


class SandboxServer:
    """One warm fork server. Not thread-safe: one per thread.

    `seccomp=False` leaves out the system call filter; it exists only to measure what the filter
    costs (bench/verify.py) and every other layer of isolation stays.
    """

    def __init__(self, uid: int | None = None, *, seccomp: bool = True):
        self.mode = isolation_mode()
        # Used in root mode; in userns mode candidates keep the namespace's one uid (an ordinary user
        # can map no other).
        self.uid = uid if uid is not None else random.randint(*SANDBOX_UID_RANGE)
        command = [sys.executable, "-I", "-S", str(SERVER_SCRIPT), self.mode, str(self.uid)]
        if not seccomp:
            command.append("no-seccomp")
        self.worker = WorkerProcess(command, env={}, start_timeout_s=30)
        self.server_pid: int | None = None

    def start(self) -> None:
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable(
                f"the code sandbox needs Linux namespaces and this is {sys.platform}; code answers cannot be scored"
            )
        try:
            hello = self.worker.start()
        except (WorkerDied, WorkerTimeout, OSError) as exc:
            raise SandboxUnavailable(f"the sandbox server did not start: {exc}") from exc
        if not hello.get("ready"):
            self.worker.kill()
            error = str(hello.get("error"))
            if hello.get("user_namespaces_missing"):
                raise SandboxUnavailable(error)
            raise SandboxUnavailable(
                f"cannot isolate candidate code ({self.mode} mode): {error}; code answers cannot be scored"
            )
        self.server_pid = self.worker.process.pid

    def run(self, *, code: str, entry_point: str, calls: list[list], time_s: float, memory_mb: int) -> dict:
        """Runs code, calls entry_point(*args) for each args list, and returns the server's report.

        The report has `load_error`, `results` (one `{"out": value}` or `{"error": text}` per call, or
        None where the call never returned), `protocol_error`, `exit_code`, `exit_signal`, `limit`
        (None, "time", "cpu", "file_size", "output") and `wall_s`.
        """
        if not self.worker.alive:
            self.start()
        request = {
            "code": code,
            "entry_point": entry_point,
            "calls": calls,
            "time_s": time_s,
            "memory_mb": memory_mb,
        }
        # The server enforces time_s per call; this outer deadline only catches a broken server.
        budget = time_s * (len(calls) + 2) + 10
        try:
            reply = self.worker.request(request, timeout_s=budget)
        except (WorkerDied, WorkerTimeout) as exc:
            raise SandboxFailed(f"the sandbox server failed and was restarted: {exc}") from exc
        if "server_error" in reply:
            raise SandboxFailed(f"the sandbox server failed: {reply['server_error']}")
        return reply

    def close(self) -> None:
        self.worker.close()


class SandboxPool:
    """A fixed set of warm fork servers, one per worker thread."""

    def __init__(self, workers: int | None = None, *, seccomp: bool = True):
        self.size = workers or max(1, min(4, os.cpu_count() or 1))
        self.seccomp = seccomp
        self._idle: queue.Queue[SandboxServer] = queue.Queue()
        self._all: list[SandboxServer] = []
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="pairwise-sandbox")
        self._started = False

    def start(self) -> None:
        """Starts every server now; raises SandboxUnavailable if isolation is impossible."""
        with self._lock:
            if self._started:
                return
            try:
                for _ in range(self.size):
                    server = SandboxServer(seccomp=self.seccomp)
                    self._all.append(server)
                    server.start()
                    self._idle.put(server)
            except SandboxUnavailable:
                for server in self._all:
                    server.close()
                self._all.clear()
                raise
            self._started = True

    def run(self, **request) -> dict:
        """Runs one request on an idle server (blocking until one is free)."""
        self.start()
        server = self._idle.get()
        try:
            return server.run(**request)
        finally:
            self._idle.put(server)

    def submit(self, function, *args):
        """Runs function(*args) on the pool's threads, so up to `size` servers work at once."""
        return self._executor.submit(function, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        for server in self._all:
            server.close()
        self._all.clear()
        self._started = False

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

"""Scores code as another, ordinary user: the code verifier in a child process under that uid.

The code sandbox runs in "userns" mode when the verifier is an ordinary user (sandbox.py). CI and
the benchmarks run as root, so to exercise and measure that mode they start this module's `serve()`
as uid 65534 (`setpriv`), on an interpreter that uid can read and a copy of the `training` package
it can read, and speak to it with the frames of worker_process.py:

    {"op": "verify_many", "pairs": [[task, completion], ...]}  -> {"rows": [...], "seconds": s}
    {"op": "prepare", "tasks": [...]}                          -> {"seconds": s}
    {"op": "servers"}                                          -> {"pid": p, "servers": [...]}

`UserCodeVerifier` is the root side. Like the sandbox it imports only the standard library and this
package, so it runs on the system's Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from training.verifiers.results import VerificationResult
from training.verifiers.worker_process import FrameReader, WorkerDied, WorkerProcess, encode_frame

UNPRIVILEGED_UID = 65534  # "nobody" on Debian and most distributions
PACKAGE_DIR = Path(__file__).resolve().parents[1]
REQUEST_TIMEOUT_S = 900.0


def as_user_command(uid: int) -> list[str]:
    """A command prefix that runs what follows as uid (and gid uid), with no supplementary groups."""
    if uid == os.geteuid():
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def readable_interpreter(uid: int) -> str:
    """A Python 3.10+ interpreter that uid can run: this one if it can, else the system's python3.

    A virtual environment's interpreter often lives under a home directory other users cannot enter.
    """
    # The sandbox starts its servers with sys.executable, so that must work as uid too.
    check = (
        "import subprocess, sys; assert sys.version_info >= (3, 10); "
        "subprocess.run([sys.executable, '-I', '-c', ''], check=True)"
    )
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if not candidate:
            continue
        result = subprocess.run(
            [*as_user_command(uid), candidate, "-I", "-c", check], env={}, capture_output=True, check=False
        )
        if result.returncode == 0:
            return candidate
    raise RuntimeError(f"no Python 3.10+ interpreter here that uid {uid} can run")


def readable_package_copy() -> Path:
    """A copy of the `training` package in a new folder every user can read; the caller removes it.

    The repository itself may sit where another uid cannot read (a clone under /root).
    """
    folder = Path(tempfile.mkdtemp(prefix="pairwise-as-user-"))
    folder.chmod(0o755)
    shutil.copytree(PACKAGE_DIR, folder / "training", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


class UserCodeVerifier:
    """A CodeVerifier run as `uid` in a child process. Needs root (it changes uid to start it).

    `env` is the child's whole environment (the sandbox servers it starts get an empty one anyway).
    Raises `training.verifiers.sandbox.SandboxUnavailable`, with the child's one line, where the
    sandbox cannot isolate code as that user.
    """

    def __init__(self, *, uid: int = UNPRIVILEGED_UID, workers: int = 2, seccomp: bool = True,
                 env: dict[str, str] | None = None, command_prefix: list[str] | None = None):
        self.uid = uid
        self.workers = workers
        self.seccomp = seccomp
        self.env = env or {}
        # Something to run before the interpreter, instead of a plain uid change (tests use it).
        self.command_prefix = command_prefix
        self.package_copy: Path | None = None
        self.worker: WorkerProcess | None = None
        self.hello: dict = {}

    def start(self) -> UserCodeVerifier:
        from training.verifiers.sandbox import SandboxUnavailable

        self.package_copy = readable_package_copy()
        try:
            interpreter = readable_interpreter(self.uid)
            code = (
                f"import sys; sys.path.insert(0, {str(self.package_copy)!r}); "
                f"from training.verifiers.sandbox_as_user import serve; serve({self.workers}, {self.seccomp})"
            )
            prefix = self.command_prefix if self.command_prefix is not None else as_user_command(self.uid)
            self.worker = WorkerProcess([*prefix, interpreter, "-I", "-c", code], env=self.env, start_timeout_s=120)
            self.hello = self.worker.start()
        except BaseException:
            self.close()
            raise
        if not self.hello.get("ready"):
            message = self.hello.get("unavailable") or self.hello.get("error")
            self.close()
            raise SandboxUnavailable(message)
        return self

    @property
    def pid(self) -> int:
        """The pid of the child that holds the verifier (the sandbox servers' client)."""
        return self.worker.process.pid

    def _request(self, value: dict) -> dict:
        reply = self.worker.request(value, timeout_s=REQUEST_TIMEOUT_S)
        if "error" in reply:
            raise RuntimeError(f"the verifier running as uid {self.uid} failed: {reply['error']}")
        return reply

    def timed_verify_many(self, pairs: list[tuple[dict, str]]) -> tuple[list[VerificationResult], float]:
        """Results, and the seconds verify_many took inside the child (no pipe transfer counted)."""
        reply = self._request({"op": "verify_many", "pairs": [list(pair) for pair in pairs]})
        return [VerificationResult(**row) for row in reply["rows"]], reply["seconds"]

    def verify_many(self, pairs: list[tuple[dict, str]]) -> list[VerificationResult]:
        return self.timed_verify_many(pairs)[0]

    def verify(self, task: dict, completion: str) -> VerificationResult:
        return self.verify_many([(task, completion)])[0]

    def prepare(self, tasks: list[dict]) -> float:
        """Prepares every task (reference and generator runs); returns the seconds it took."""
        return self._request({"op": "prepare", "tasks": tasks})["seconds"]

    def servers(self) -> list[dict]:
        """Per sandbox server: its outer `pid`, whether it is `alive`, its `mode` and candidate `uid`
        (the uid candidates run as in root mode; in userns mode they keep the user's own)."""
        return self._request({"op": "servers"})["servers"]

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        if self.package_copy is not None:
            shutil.rmtree(self.package_copy, ignore_errors=True)
            self.package_copy = None

    def __enter__(self) -> UserCodeVerifier:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()


def serve(workers: int, seccomp: bool) -> None:
    """The child: starts a CodeVerifier's sandbox pool and answers requests until stdin closes."""
    from training.verifiers.code_verifier import CodeVerifier
    from training.verifiers.sandbox import SandboxPool, SandboxUnavailable

    out = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    verifier = CodeVerifier(pool=SandboxPool(workers, seccomp=seccomp))
    try:
        verifier.pool.start()
    except SandboxUnavailable as exc:
        os.write(out, encode_frame({"ready": False, "unavailable": str(exc)}))
        return
    os.write(out, encode_frame({"ready": True, "pid": os.getpid(), "mode": verifier.pool._all[0].mode}))
    reader = FrameReader(0)
    with verifier:
        while True:
            try:
                request = reader.read(None)
            except WorkerDied:
                return
            try:
                reply = _answer(verifier, request)
            except Exception as exc:  # reported to the root side, which raises it there
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            os.write(out, encode_frame(reply))


def _answer(verifier, request: dict) -> dict:
    if request["op"] == "verify_many":
        pairs = [(task, completion) for task, completion in request["pairs"]]
        started = time.perf_counter()
        results = verifier.verify_many(pairs)
        return {"rows": [result.to_row() for result in results], "seconds": time.perf_counter() - started}
    if request["op"] == "prepare":
        started = time.perf_counter()
        for task in request["tasks"]:
            verifier.prepare(task)
        return {"seconds": time.perf_counter() - started}
    if request["op"] == "servers":
        return {"servers": [
            {"pid": server.worker.process.pid if server.worker.process else None, "alive": server.worker.alive,
             "mode": server.mode, "uid": server.uid}
            for server in verifier.pool._all
        ]}
    raise ValueError(f"unknown op {request['op']!r}")

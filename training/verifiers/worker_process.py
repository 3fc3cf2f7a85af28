"""A long-lived helper process spoken to over pipes, with deadlines and hard kills.

Both verifier back ends use it: math-verify workers (whose own signal-based timeouts do not work in
threads) and the code sandbox's fork server. Messages are 4-byte big-endian lengths followed by
UTF-8 JSON. A request that overruns its deadline kills the process; the next request starts a new
one, so one bad input never poisons the next.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import subprocess
import time


class WorkerDied(RuntimeError):
    """The helper process exited or broke the protocol; the verifier itself failed."""


class WorkerTimeout(RuntimeError):
    """The helper did not answer in time and was killed."""


def encode_frame(value) -> bytes:
    data = json.dumps(value).encode()
    return struct.pack(">I", len(data)) + data


class FrameReader:
    """Reads frames from a pipe's file descriptor, honouring an absolute monotonic deadline."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = b""

    def _fill(self, need: int, deadline: float | None) -> None:
        while len(self.buffer) < need:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WorkerTimeout("no answer before the deadline")
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise WorkerDied("the process closed its output")
            self.buffer += chunk

    def read(self, deadline: float | None):
        """The next frame; waits until deadline (time.monotonic() value), or forever if None."""
        self._fill(4, deadline)
        size = struct.unpack(">I", self.buffer[:4])[0]
        self._fill(4 + size, deadline)
        body, self.buffer = self.buffer[4 : 4 + size], self.buffer[4 + size :]
        try:
            return json.loads(body)
        except ValueError as exc:
            raise WorkerDied(f"the process sent malformed output: {exc}") from exc


class WorkerProcess:
    """One helper process. Not thread-safe: give each thread its own."""

    def __init__(self, command: list[str], *, env: dict[str, str], start_timeout_s: float = 60.0):
        self.command = command
        self.env = env
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self.reader: FrameReader | None = None
        self.hello: dict | None = None

    def start(self) -> dict:
        """Starts the process and returns its first frame (its hello)."""
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            close_fds=True,
            start_new_session=True,
        )
        self.reader = FrameReader(self.process.stdout.fileno())
        try:
            self.hello = self.reader.read(time.monotonic() + self.start_timeout_s)
        except (WorkerDied, WorkerTimeout):
            self.kill()
            raise
        return self.hello

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def request(self, value, timeout_s: float):
        """Sends one request and returns the reply; kills the process on timeout or breakage."""
        if not self.alive:
            raise WorkerDied("the process is not running")
        try:
            self.process.stdin.write(encode_frame(value))
            self.process.stdin.flush()
            return self.reader.read(time.monotonic() + timeout_s)
        except (WorkerDied, WorkerTimeout):
            self.kill()
            raise
        except OSError as exc:
            self.kill()
            raise WorkerDied(f"the process stopped listening: {exc}") from exc

    def kill(self) -> None:
        """Kills the whole process group; children die with it (the sandbox's via its PID namespace)."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                stream.close()

    def close(self) -> None:
        """Asks the process to exit by closing its input, then makes sure it is gone."""
        process = self.process
        if process is None:
            return
        try:
            process.stdin.close()
            process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

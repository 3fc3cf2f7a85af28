"""The Pairwise code sandbox: a warm fork server that runs untrusted candidate code.

This file is run as a script by `training.verifiers.sandbox.SandboxServer`, with `python -I -S` and an
empty environment, so it imports only the standard library and holds nothing worth stealing (no
model, no task file, no expected outputs).

Isolation, set up once at start (and the server refuses to serve if any step fails):
  * new network namespace (only a loopback that is down), PID, mount, IPC and UTS namespaces;
  * a fresh root built on a tmpfs: /usr and the Python standard library bound read-only, a fresh
    /proc (hidepid), a tiny /dev (null, zero, random, urandom), and a small writable /tmp;
    everything else of the host (the repository, tests, task files, /root, /work) is absent;
  * this server is PID 1 of its namespace, so when it dies every candidate dies with it.

Per candidate, the server forks a child that drops to an unprivileged uid with no supplementary
groups, sets no_new_privs and rlimits (address space, CPU, file size, processes, open files, no
core), clears its environment, closes every descriptor but the result pipe, and then runs the
candidate. The child writes length-prefixed JSON frames: the plain JSON value returned by each
call, or the error it raised. Expected outputs never enter this process. After each candidate the
server kills every other process in the namespace and empties /tmp, so the next candidate starts
clean.

Protocol on stdin/stdout: 4-byte big-endian length, then UTF-8 JSON.
"""

import contextlib
import ctypes
import errno
import json
import os
import resource
import select
import shutil
import signal
import struct
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

NEW_ROOT = "/tmp"
WORK_DIR = "/tmp"
MAX_FRAME_BYTES = 1 << 20
MAX_RESULT_BYTES = 8 << 20
FILE_SIZE_LIMIT = 16 << 20
TMP_SIZE = "16m"
MAX_PROCESSES = 16
MAX_OPEN_FILES = 64

# Modules many candidates import; loading them once here makes each candidate's import free.
WARM_MODULES = (
    "math", "cmath", "re", "string", "collections", "itertools", "functools", "heapq", "bisect",
    "typing", "fractions", "decimal", "statistics", "random", "copy", "operator", "hashlib",
    "datetime", "dataclasses", "enum", "array", "textwrap", "unicodedata", "numbers",
)

_libc = ctypes.CDLL(None, use_errno=True)
_write = os.write
_dumps = json.dumps


class IsolationError(RuntimeError):
    """The sandbox could not be isolated; the server must not run candidates."""


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise IsolationError(f"{what} failed: {os.strerror(err)} (errno {err})")


def _mount(source, target, fstype, flags, data=None):
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _bind_read_only(source, target, extra_flags=MS_NODEV):
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass
    _mount(source, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | extra_flags)


# ---------------------------------------------------------------- framing


def send_frame(fd, value):
    data = _dumps(value).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        n = _write(fd, data)
        data = data[n:]


def _read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd):
    header = _read_exact(fd, 4)
    if header is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", header)[0])
    return None if body is None else json.loads(body)


# ---------------------------------------------------------------- isolation (once)


def enter_namespaces():
    """Runs in the process the client started: unshare, fork PID 1 of the new namespace, wait."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    _check(_libc.unshare(flags), "unshare(mount, network, pid, ipc, uts namespaces)")
    pid = os.fork()
    if pid:
        # The outer process only waits; stdin/stdout belong to the server inside.
        os.close(0)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")


def build_root(stdlib_dir):
    """Builds a read-only root with only what a Python candidate needs, and pivots into it."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for name in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + name
        if os.path.islink(host):
            os.symlink(os.readlink(host), f"{NEW_ROOT}/{name}")
        elif os.path.isdir(host):
            _bind_read_only(host, f"{NEW_ROOT}/{name}")
    if not stdlib_dir.startswith("/usr/"):
        _bind_read_only(stdlib_dir, NEW_ROOT + stdlib_dir)
    os.makedirs(f"{NEW_ROOT}/proc")
    _mount("proc", f"{NEW_ROOT}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    os.makedirs(f"{NEW_ROOT}/dev")
    _mount("tmpfs", f"{NEW_ROOT}/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
    for device in ("null", "zero", "random", "urandom"):
        # A read-only bind of a device node still reads and writes; only nodev would block it.
        _bind_read_only(f"/dev/{device}", f"{NEW_ROOT}/dev/{device}", extra_flags=0)
    os.makedirs(f"{NEW_ROOT}/tmp")
    _mount("tmpfs", f"{NEW_ROOT}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMP_SIZE},mode=1777")
    os.makedirs(f"{NEW_ROOT}/.old")
    machine = os.uname().machine
    if machine not in SYS_PIVOT_ROOT:
        raise IsolationError(f"pivot_root is not known for machine {machine}")
    _check(
        _libc.syscall(SYS_PIVOT_ROOT[machine], NEW_ROOT.encode(), f"{NEW_ROOT}/.old".encode()),
        "pivot_root",
    )
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _check(_libc.sethostname(b"sandbox", 7), "sethostname")


def check_isolation():
    """Proves the isolation holds before serving: no way out through the network or the host files."""
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(0.2)
    try:
        probe.connect(("127.0.0.1", 9))
    except OSError as exc:
        if exc.errno not in (errno.ENETUNREACH, errno.ECONNREFUSED, errno.EHOSTUNREACH):
            raise IsolationError(f"network probe gave an unexpected error: {exc}") from exc
    finally:
        probe.close()
    if os.path.exists("/work") or os.path.exists("/home") or os.path.exists("/etc"):
        raise IsolationError("host directories are still visible inside the sandbox root")
    if os.getpid() != 1:
        raise IsolationError("the server is not PID 1 of its own namespace")


# ---------------------------------------------------------------- the child (untrusted side)


def _plain(value, depth=0):
    """Exact plain JSON types only: a subclass (say, an int whose __eq__ lies) is refused."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if depth > 64:
        raise TypeError("returned a value nested deeper than 64 levels")
    if kind is list or kind is tuple:
        return [_plain(item, depth + 1) for item in value]
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"returned a dict with a {type(key).__name__} key, not a JSON object")
            out[key] = _plain(item, depth + 1)
        return out
    raise TypeError(f"returned a {kind.__name__}, which is not a plain JSON value")


def _describe(exc):
    text = f"{type(exc).__name__}: {exc}"
    return text[:300]


def run_candidate(result_fd, request, uid):
    """Runs in the forked child. Never returns."""
    try:
        os.setsid()
        time_s = float(request["time_s"])
        memory = int(request["memory_mb"]) << 20
        cpu = int(time_s * (len(request["calls"]) + 1)) + 1
        limits = (
            (resource.RLIMIT_AS, request["base_vm"] + memory),
            (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
            (resource.RLIMIT_NPROC, MAX_PROCESSES),
            (resource.RLIMIT_NOFILE, MAX_OPEN_FILES),
            (resource.RLIMIT_CORE, 0),
        )
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        # A soft CPU limit below the hard one delivers SIGXCPU, which names the limit that was hit.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if os.getuid() != uid or os.geteuid() != uid:
            os._exit(70)
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        os.chdir(WORK_DIR)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.dup2(result_fd, 3)
        os.closerange(4, 65536)
        result_fd = 3
        os.environ.clear()
        sys.argv = ["candidate"]
    except BaseException as exc:
        try:
            send_frame(result_fd, {"load_error": "sandbox setup failed: " + _describe(exc)})
        finally:
            os._exit(71)

    calls = request["calls"]
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(request["code"], "<candidate>", "exec"), namespace)
        function = namespace.get(request["entry_point"])
        if not callable(function):
            raise NameError(f"the code defines no function named {request['entry_point']!r}")
    except BaseException as exc:
        send_frame(result_fd, {"load_error": _describe(exc)})
        os._exit(0)
    send_frame(result_fd, {"loaded": True})
    for index, args in enumerate(calls):
        try:
            frame = {"i": index, "out": _plain(function(*args))}
            data = _dumps(frame)
            if len(data) > MAX_FRAME_BYTES:
                frame = {"i": index, "error": "OutputTooLarge: the returned value is over 1 MiB"}
        except BaseException as exc:
            frame = {"i": index, "error": _describe(exc)}
        try:
            send_frame(result_fd, frame)
        except BaseException:
            os._exit(72)
    send_frame(result_fd, {"done": True})
    # os._exit skips atexit handlers and finalizers the candidate may have registered.
    os._exit(0)


# ---------------------------------------------------------------- the server (trusted side)


def _parse_frames(buffer, frames):
    """Moves every complete frame out of buffer; returns the rest, or None if a frame is malformed."""
    while len(buffer) >= 4:
        size = struct.unpack(">I", buffer[:4])[0]
        if size > MAX_FRAME_BYTES:
            return None
        if len(buffer) < 4 + size:
            break
        try:
            frames.append(json.loads(buffer[4 : 4 + size]))
        except (ValueError, RecursionError):
            return None
        buffer = buffer[4 + size :]
    return buffer


def _classify(frames, n_calls):
    """Checks the frames follow the protocol; returns (load_error, results, protocol_error)."""
    load_error = None
    results = [None] * n_calls
    expect = "loaded"
    for frame in frames:
        if not isinstance(frame, dict):
            return load_error, results, "a frame that is not an object"
        if expect == "loaded":
            if "load_error" in frame and isinstance(frame["load_error"], str):
                load_error = frame["load_error"]
                expect = "end"
            elif frame == {"loaded": True}:
                expect = 0
            else:
                return load_error, results, "a result before the code loaded"
        elif expect == "end":
            return load_error, results, "frames after the run ended"
        elif frame == {"done": True}:
            if expect != n_calls:
                return load_error, results, "'done' before every call returned"
            expect = "end"
        else:
            ok = frame.get("i") == expect and type(frame.get("i")) is int and len(frame) == 2
            ok = ok and ("out" in frame or isinstance(frame.get("error"), str))
            if not ok:
                return load_error, results, "a result frame out of order or malformed"
            results[expect] = {k: v for k, v in frame.items() if k != "i"}
            expect += 1
    return load_error, results, None


def _kill_everything_else():
    """As PID 1, kill(-1) reaches every other process in the namespace, however it was forked."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    statuses = {}
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return statuses
        statuses[pid] = status


def _empty_tmp():
    for entry in os.scandir(WORK_DIR):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def serve_one(request, uid, base_vm):
    request["base_vm"] = base_vm
    n_calls = len(request["calls"])
    time_s = float(request["time_s"])
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        run_candidate(write_fd, request, uid)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    pidfd = os.pidfd_open(pid)
    buffer, frames, total = b"", [], 0
    limit, exit_status, pipe_open = None, None, True
    # Each frame buys the next call another time_s; a silent child is killed at the deadline.
    deadline = started + time_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            limit = "time"
            break
        watch = [pidfd] + ([read_fd] if pipe_open else [])
        ready, _, _ = select.select(watch, [], [], remaining)
        if read_fd in ready:
            try:
                data = os.read(read_fd, 1 << 16)
            except BlockingIOError:
                data = None
            if data == b"":
                pipe_open = False
            elif data:
                total += len(data)
                if total > MAX_RESULT_BYTES:
                    limit = "output"
                    break
                before = len(frames)
                buffer = _parse_frames(buffer + data, frames)
                if buffer is None:
                    break
                if len(frames) > before:
                    deadline = time.monotonic() + time_s
                if frames and frames[-1] == {"done": True}:
                    break
        if pidfd in ready:
            _, exit_status = os.waitpid(pid, 0)
            while buffer is not None and total <= MAX_RESULT_BYTES:
                try:
                    data = os.read(read_fd, 1 << 16)
                except BlockingIOError:
                    break
                if not data:
                    break
                total += len(data)
                buffer = _parse_frames(buffer + data, frames)
            break
    _kill_everything_else()
    wall_s = time.monotonic() - started
    os.close(read_fd)
    os.close(pidfd)
    _empty_tmp()

    load_error, results, protocol_error = _classify(frames, n_calls)
    if buffer is None:
        protocol_error = "a malformed frame"
    exit_code = exit_signal = None
    # Only an exit the child made by itself is reported; the kill after 'done' or a timeout is ours.
    if exit_status is not None:
        if os.WIFSIGNALED(exit_status):
            exit_signal = signal.Signals(os.WTERMSIG(exit_status)).name
        elif os.WIFEXITED(exit_status):
            exit_code = os.WEXITSTATUS(exit_status)
    if limit is None and exit_signal == "SIGXCPU":
        limit = "cpu"
    elif limit is None and exit_signal == "SIGXFSZ":
        limit = "file_size"
    return {
        "load_error": load_error,
        "results": results,
        "protocol_error": protocol_error,
        "exit_code": exit_code,
        "exit_signal": exit_signal,
        "limit": limit,
        "wall_s": round(wall_s, 6),
    }


def main():
    uid = int(sys.argv[1])
    stdin_fd, stdout_fd = 0, os.dup(1)
    os.dup2(os.open("/dev/null", os.O_RDWR), 1)
    try:
        if os.geteuid() != 0:
            raise IsolationError("the sandbox server must start as root to drop candidates to their own uid")
        stdlib_dir = os.path.dirname(os.__file__)
        for name in WARM_MODULES:
            __import__(name)
        enter_namespaces()
        build_root(stdlib_dir)
        check_isolation()
    except (IsolationError, OSError) as exc:
        send_frame(stdout_fd, {"ready": False, "error": str(exc)})
        os._exit(3)
    with open("/proc/self/statm") as statm:
        base_vm = int(statm.read().split()[0]) * resource.getpagesize()
    send_frame(stdout_fd, {"ready": True, "pid": os.getpid()})
    # SIGCHLD must keep its default so waitpid works; nothing else may stop the server.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        request = read_frame(stdin_fd)
        if request is None:
            os._exit(0)
        try:
            reply = serve_one(request, uid, base_vm)
        except Exception as exc:
            reply = {"server_error": _describe(exc)}
        send_frame(stdout_fd, reply)


if __name__ == "__main__":
    main()

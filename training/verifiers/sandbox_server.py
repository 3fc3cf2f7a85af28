"""The Pairwise code sandbox: a warm fork server that runs untrusted candidate code.

This file is run as a script by `training.verifiers.sandbox.SandboxServer`, with `python -I -S` and an
empty environment, so it imports only the standard library and holds nothing worth stealing (no
model, no task file, no expected outputs). Its arguments are the isolation mode ("root" or "userns"),
the candidate uid (root mode) and, for measurements only, "no-seccomp".

Isolation, set up once at start (the server refuses to serve if any step fails):
  * new network (only a loopback that is down), PID, mount, IPC and UTS namespaces; in "userns" mode
    also a new user namespace in which the server's own uid is mapped to 0 (setgroups denied), which
    gives it the capabilities to build the root below, over its own namespaces and nothing else;
  * a fresh root built on a tmpfs: /usr and the Python standard library bound read-only, a fresh
    /proc (hidepid), a read-only /dev with only null, zero, random and urandom, and a small writable
    /tmp; everything else of the host (the repository, tests, task files, /root, /home) is absent;
  * this server is PID 1 of its namespace, so when it dies every candidate dies with it, and it is
    not dumpable, so no candidate can ptrace it or open its /proc files;
  * its capability bounding set is emptied, ambient capabilities cleared and the securebits locked
    so that no later execve gives a capability back (SECBIT_NOROOT); in "userns" mode the user
    namespace limit inside is set to 0, so a candidate cannot make a namespace of its own.

Per candidate, the server forks a child that drops privileges and then runs the candidate:
  * root mode: the child drops to an unprivileged uid picked for this server, with no supplementary
    groups; its capabilities go with the uid change;
  * userns mode: an unprivileged user can map only its own uid, so the child keeps uid 0 of the
    server's namespace and sets its capabilities to none (capset) on top of the empty bounding set
    and locked securebits. So a candidate cannot signal or trace the server (PID 1, not dumpable),
    write the root (read-only), or reach anything outside the namespaces;
  * both modes: no_new_privs, rlimits (address space, CPU, file size, processes, open files, no
    core), an empty environment, every descriptor closed but the result pipe, and the seccomp
    filter, which the server installed on itself once and every child inherits.

The seccomp filter is an allow-list (deny by default, EPERM): the file, memory, process, time,
signal, poll and socket calls a Python program makes; clone only without namespace flags (clone3
answers ENOSYS so the C library falls back to clone); socket only for AF_UNIX/AF_INET/AF_INET6; the
uid and capability calls a child needs to confine itself, which without privileges can only keep or
lower what it has. Everything else (mount, unshare, setns, ptrace, keyctl, bpf, perf_event_open,
io_uring, process_vm_*, ...) fails with EPERM. libseccomp (the C library, through ctypes, so this
script stays standard-library only) compiles it; without libseccomp the server refuses to start.

It is installed once, in the server, and every child inherits it: installed in each child it cost a fifth or
more of a candidate's time, since the kernel compiles the program at every install. So installed, it costs
nothing measurable per candidate; the figures are in docs/benchmarks/verify.md (bench/verify.py).
It costs little, so it is on; the server's `no-seccomp` argument exists only for that benchmark.

The child writes length-prefixed JSON frames: the plain JSON value returned by each call, or the
error it raised. Expected outputs never enter this process. After each candidate the server kills
every other process in the namespace and empties /tmp, so the next candidate starts clean.

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
import socket
import struct
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWTIME = 0x00000080
NAMESPACE_FLAGS = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
    | CLONE_NEWTIME
)
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
PR_SET_DUMPABLE = 4
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
# NOROOT and NO_CAP_AMBIENT_RAISE set; KEEP_CAPS and NO_SETUID_FIXUP clear (root mode relies on the
# uid change dropping every capability); all four locked.
SECUREBITS = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7)
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

# libseccomp's constants (seccomp.h).
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO = 0x00050000
SCMP_CMP_EQ = 4
SCMP_CMP_MASKED_EQ = 7
SCMP_FLTATR_CTL_OPTIMIZE = 8

ROOT_MODE = "root"
USERNS_MODE = "userns"
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

# The system calls a candidate may make; any other fails with EPERM. Names unknown on this machine's
# architecture (open on aarch64, say) are skipped. clone and socket are allowed below with arguments.
ALLOWED_SYSCALLS = (
    # files and descriptors
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
    "open", "openat", "openat2", "creat", "close", "close_range", "stat", "fstat", "lstat", "newfstatat",
    "statx", "statfs", "fstatfs", "lseek", "access", "faccessat", "faccessat2", "getdents", "getdents64",
    "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat",
    "renameat2", "link", "linkat", "symlink", "symlinkat", "readlink", "readlinkat", "chmod", "fchmod",
    "fchmodat", "fchmodat2", "umask", "utime", "utimes", "utimensat", "futimesat", "truncate", "ftruncate",
    "fallocate", "fsync", "fdatasync", "flock", "fcntl", "dup", "dup2", "dup3", "pipe", "pipe2", "sendfile",
    "copy_file_range", "splice", "tee", "fadvise64", "readahead", "memfd_create", "ioctl", "getxattr",
    "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore", "membarrier",
    # processes, threads and signals
    "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid",
    "getresgid", "getpgid", "getpgrp", "getsid", "setsid", "setpgid", "fork", "vfork", "execve", "execveat",
    "exit", "exit_group", "wait4", "waitid", "kill", "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask",
    "rt_sigreturn", "rt_sigsuspend", "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
    "rt_tgsigqueueinfo", "sigaltstack", "pause", "restart_syscall", "set_tid_address", "set_robust_list",
    "get_robust_list", "rseq", "futex", "futex_waitv", "sched_yield", "sched_getaffinity",
    "sched_setaffinity", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
    "sched_get_priority_min", "sched_rr_get_interval", "getpriority", "setpriority", "getrlimit",
    "setrlimit", "prlimit64", "getrusage", "times", "uname", "sysinfo", "arch_prctl", "prctl", "capget",
    "getrandom", "getcpu", "pidfd_open",
    # what the server itself and a child confining itself need; without privileges they can only
    # keep or lower what a process has (setgroups needs CAP_SETGID, capset can only drop)
    "setgroups", "setresuid", "setresgid", "capset",
    # time
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time", "alarm",
    "setitimer", "getitimer", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
    "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    # waiting on descriptors
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
    # sockets (the network namespace has no way out; socket itself is filtered by family below)
    "socketpair", "connect", "bind", "listen", "accept", "accept4", "sendto", "recvfrom", "sendmsg",
    "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "getsockname", "getpeername", "setsockopt", "getsockopt",
)

_libc = ctypes.CDLL(None, use_errno=True)
_write = os.write
_dumps = json.dumps


class IsolationError(RuntimeError):
    """The sandbox could not be isolated; the server must not run candidates."""


class UserNamespacesMissing(IsolationError):
    """This kernel or its settings give an ordinary user no user namespace."""


class _ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


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


def _locked_flags(path):
    """The flags of the mount holding path that a remount must keep: in a user namespace the kernel
    refuses to clear nosuid, nodev, noexec or read-only on a mount inherited from the host."""
    flags = os.statvfs(path).f_flag
    return (
        (MS_RDONLY if flags & os.ST_RDONLY else 0)
        | (MS_NOSUID if flags & os.ST_NOSUID else 0)
        | (MS_NODEV if flags & os.ST_NODEV else 0)
        | (MS_NOEXEC if flags & os.ST_NOEXEC else 0)
    )


def _bind_read_only(source, target, extra_flags=MS_NODEV):
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | extra_flags | _locked_flags(source)
    _mount(None, target, None, flags)


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


def _read_setting(path):
    try:
        with open(path) as setting:
            return setting.read().strip()
    except OSError:
        return None


APPARMOR_RESTRICTS_USERNS = "kernel.apparmor_restrict_unprivileged_userns=1"


def user_namespace_blockers():
    """The settings, among those distributions use, that deny ordinary users a user namespace here."""
    blockers = []
    for path, name, blocking in (
        ("/proc/sys/kernel/unprivileged_userns_clone", "kernel.unprivileged_userns_clone", "0"),
        ("/proc/sys/user/max_user_namespaces", "user.max_user_namespaces", "0"),
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "kernel.apparmor_restrict_unprivileged_userns",
         "1"),
    ):
        if _read_setting(path) == blocking:
            blockers.append(f"{name}={blocking}")
    return blockers


def user_namespaces_missing(why):
    """The one line saying that, and `why`, an ordinary user gets no user namespace here."""
    return (
        f"the code sandbox needs root or unprivileged user namespaces ({why} here); "
        "code answers cannot be scored"
    )


def _write_file(path, text):
    with open(path, "w") as out:
        out.write(text)


def enter_namespaces(mode):
    """Runs in the process the client started: unshare, fork PID 1 of the new namespace, wait."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if mode == USERNS_MODE:
        uid, gid = os.geteuid(), os.getegid()
        if _libc.unshare(flags | CLONE_NEWUSER) != 0:
            failed = f"unshare(CLONE_NEWUSER) failed: {os.strerror(ctypes.get_errno())}"
            raise UserNamespacesMissing(user_namespaces_missing(", ".join(user_namespace_blockers()) or failed))
        try:
            # An unprivileged process may map only its own ids, and gids only once setgroups is denied.
            _write_file("/proc/self/setgroups", "deny")
            _write_file("/proc/self/uid_map", f"0 {uid} 1")
            _write_file("/proc/self/gid_map", f"0 {gid} 1")
        except OSError as exc:
            failed = f"writing the user namespace's id maps failed: {exc.strerror}"
            raise UserNamespacesMissing(user_namespaces_missing(", ".join(user_namespace_blockers()) or failed)) from exc
    else:
        _check(_libc.unshare(flags), "unshare(mount, network, pid, ipc, uts namespaces)")
    pid = os.fork()
    if pid:
        # The outer process only waits; stdin/stdout belong to the server inside.
        os.close(0)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")


def build_root(stdlib_dir, mode):
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
    if mode == USERNS_MODE:
        # Limits in this namespace bind every namespace below it: no candidate may make its own.
        _write_file(f"{NEW_ROOT}/proc/sys/user/max_user_namespaces", "0")
    os.makedirs(f"{NEW_ROOT}/dev")
    _mount("tmpfs", f"{NEW_ROOT}/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
    for device in ("null", "zero", "random", "urandom"):
        # A read-only bind of a device node still reads and writes; only nodev would block it.
        _bind_read_only(f"/dev/{device}", f"{NEW_ROOT}/dev/{device}", extra_flags=0)
    # Read-only: in userns mode candidates share the uid that owns this tmpfs.
    _mount(None, f"{NEW_ROOT}/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
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


def build_seccomp_filter():
    """The candidates' allow-list as a BPF program, compiled by libseccomp.

    libseccomp knows each architecture's system call numbers and guards against other ABIs (x32, or
    32-bit calls on x86_64); writing that by hand would be ours to keep right on every kernel.
    """
    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError as exc:
        raise IsolationError(
            "libseccomp is missing (the system library libseccomp.so.2; Debian/Ubuntu: apt-get install "
            "libseccomp2)"
        ) from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ScmpArgCmp)
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    context = lib.seccomp_init(SCMP_ACT_ERRNO | errno.EPERM)
    if not context:
        raise IsolationError("libseccomp could not start a filter")
    # A binary tree over the call numbers: fewer instructions per call than a linear list.
    lib.seccomp_attr_set(context, SCMP_FLTATR_CTL_OPTIMIZE, 2)
    try:
        def allow(action, name, *comparisons):
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:
                return
            array = (_ScmpArgCmp * len(comparisons))(*comparisons) if comparisons else None
            status = lib.seccomp_rule_add_array(context, action, number, len(comparisons), array)
            if status < 0:
                raise IsolationError(f"seccomp rule for {name} failed: {os.strerror(-status)}")

        for name in ALLOWED_SYSCALLS:
            allow(SCMP_ACT_ALLOW, name)
        allow(SCMP_ACT_ALLOW, "clone", _ScmpArgCmp(0, SCMP_CMP_MASKED_EQ, NAMESPACE_FLAGS, 0))
        for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
            allow(SCMP_ACT_ALLOW, "socket", _ScmpArgCmp(0, SCMP_CMP_EQ, int(family), 0))
        # ENOSYS, not EPERM: the C library then falls back to clone, which the rule above checks.
        allow(SCMP_ACT_ERRNO | errno.ENOSYS, "clone3")
        read_fd, write_fd = os.pipe()
        try:
            status = lib.seccomp_export_bpf(context, write_fd)
            os.close(write_fd)
            write_fd = None
            if status < 0:
                raise IsolationError(f"libseccomp could not export the filter: {os.strerror(-status)}")
            program = b""
            while chunk := os.read(read_fd, 1 << 16):
                program += chunk
        finally:
            os.close(read_fd)
            if write_fd is not None:
                os.close(write_fd)
    finally:
        lib.seccomp_release(context)
    if not program or len(program) % 8:
        raise IsolationError("libseccomp exported an empty or malformed filter")
    buffer = ctypes.create_string_buffer(program, len(program))
    return buffer, _SockFprog(len(program) // 8, ctypes.addressof(buffer))


def lock_capabilities():
    """Once, in the server: no execve may ever give a capability back to anything forked from here."""
    last_cap = int(_read_setting("/proc/sys/kernel/cap_last_cap") or 40)
    for capability in range(last_cap + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), f"prctl(CAPBSET_DROP {capability})")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl(CAP_AMBIENT_CLEAR_ALL)")
    _check(_libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0), "prctl(SET_SECUREBITS)")
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(SET_DUMPABLE)")


def check_isolation():
    """Proves the isolation holds before serving: no way out through the network or the host files."""
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


_CAP_HEADER = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)


def confine(mode, uid):
    """In a freshly forked child: no capabilities (and in root mode, the candidate uid), no_new_privs."""
    if mode == ROOT_MODE:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise IsolationError("the child did not change to the candidate uid")
    # Root mode: the uid change already emptied them. Userns mode: the child is still uid 0 inside.
    _check(_libc.capset(ctypes.byref(_CAP_HEADER), (_CapData * 2)()), "capset")
    left = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(_CAP_HEADER), left), "capget")
    if any(data.effective or data.permitted or data.inheritable for data in left):
        raise IsolationError("the child kept capabilities")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def install_seccomp(program):
    if program is not None:
        _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program[1]), 0, 0), "seccomp")


def check_confinement(mode, uid, seccomp):
    """Forks one child confined as a candidate would be and checks what it can no longer do."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            confine(mode, uid)
            if _libc.prctl(PR_CAPBSET_READ, 0, 0, 0, 0) != 0:
                code = 10  # the bounding set is not empty
            elif _libc.unshare(CLONE_NEWNS) == 0:
                code = 11  # it could still make a mount namespace
            elif (seccomp or mode == USERNS_MODE) and _libc.unshare(CLONE_NEWUSER) == 0:
                code = 12  # it could make a user namespace of its own
            elif seccomp and _libc.unshare(0) == 0:
                code = 13  # the filter is not in force
        except BaseException:
            code = 14
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise IsolationError(f"a child confined like a candidate kept a privilege (check {code})")


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


def run_candidate(result_fd, request, mode, uid):
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
        confine(mode, uid)
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


def serve_one(request, mode, uid, base_vm):
    request["base_vm"] = base_vm
    n_calls = len(request["calls"])
    time_s = float(request["time_s"])
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        run_candidate(write_fd, request, mode, uid)
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
    mode, uid = sys.argv[1], int(sys.argv[2])
    seccomp = "no-seccomp" not in sys.argv[3:]
    stdin_fd, stdout_fd = 0, os.dup(1)
    os.dup2(os.open("/dev/null", os.O_RDWR), 1)
    try:
        if mode not in (ROOT_MODE, USERNS_MODE):
            raise IsolationError(f"unknown isolation mode {mode!r}")
        if mode == ROOT_MODE and os.geteuid() != 0:
            raise IsolationError("root mode needs the server to start as root")
        stdlib_dir = os.path.dirname(os.__file__)
        for name in WARM_MODULES:
            __import__(name)
        program = build_seccomp_filter() if seccomp else None
        enter_namespaces(mode)
        try:
            build_root(stdlib_dir, mode)
        except IsolationError as exc:
            # Ubuntu's AppArmor switch lets unshare succeed but takes the namespace's capabilities.
            # (Only that one: build_root itself sets user.max_user_namespaces=0 in here.)
            if mode == USERNS_MODE and APPARMOR_RESTRICTS_USERNS in user_namespace_blockers():
                raise UserNamespacesMissing(user_namespaces_missing(APPARMOR_RESTRICTS_USERNS)) from exc
            raise
        check_isolation()
        lock_capabilities()
        # Once, here: every candidate forked from now on inherits the filter at no cost of its own.
        install_seccomp(program)
        check_confinement(mode, uid, program is not None)
    except (IsolationError, OSError) as exc:
        missing = isinstance(exc, UserNamespacesMissing)
        send_frame(stdout_fd, {"ready": False, "error": str(exc), "user_namespaces_missing": missing})
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
            reply = serve_one(request, mode, uid, base_vm)
        except Exception as exc:
            reply = {"server_error": _describe(exc)}
        send_frame(stdout_fd, reply)


if __name__ == "__main__":
    main()

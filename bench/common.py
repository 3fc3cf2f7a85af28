"""What the benchmarks share: where results go and how they are written, the machine they ran on, a PostgreSQL
database of their own and Django on it, measured child processes and the memory of a process tree, local servers and their ports, latency
percentiles, and the database checks after simulated reviewers.

A benchmark runs as `python bench/NAME.py` (or `python -m bench.NAME` from the repository root): it puts the
repository first on sys.path, then imports this module as bench.common.
"""

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"
LOCAL_POSTGRES = "postgres://postgres@127.0.0.1:5432"  # the benchmarks' server: trust auth, as scripts/test.sh uses
# Versions worth knowing beside a figure; those not installed are left out.
RECORDED_PACKAGES = ("django", "psycopg", "numpy", "scipy", "torch", "transformers", "trl")


def results_path(name: str) -> Path:
    return RESULTS_DIR / f"{name}.json"


def shown_path(path: Path) -> str:
    """`path` relative to the repository when it is inside it, else as given."""
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def write_results(path: Path, results: dict) -> str:
    """Write the results as indented JSON (its folder made if needed); returns shown_path(path)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return shown_path(path)


def utc_timestamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def machine() -> dict:
    """The machine a benchmark ran on: CPUs, memory, Python and the versions of the main packages."""
    packages = {}
    for name in RECORDED_PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            packages[name] = metadata.version(name)
    memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {"cpus": os.cpu_count(), "memory_gb": memory_gb, "processor": platform.machine(),
            "platform": platform.platform(), "python": platform.python_version(), "packages": packages}


def database_url(name: str) -> str:
    return f"{LOCAL_POSTGRES}/{name}"


def recreate_database(name: str) -> str:
    """Drop the database `name` on the local PostgreSQL (ending its connections) and create it empty; returns
    its URL."""
    import psycopg

    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return database_url(name)


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def setup_django_and_migrate() -> None:
    """Django on the database DATABASE_URL names (the embedded SQLite file when unset), its tables made."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


@dataclass
class ChildRun:
    exit_code: int
    wall_s: float
    cpu_s: float  # user + system time of the child and of the processes it waited for
    peak_rss_bytes: int
    output: str


def run_measured(command: list[str], *, env: dict, keep: Literal["stdout", "stderr", "both"]) -> ChildRun:
    """Run a child process in the repository to its end and measure it (wait4: this child's own usage, not
    that of every child so far). `keep` says what it printed that comes back: stdout or stderr (the other is
    discarded), or both merged."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as printed:
        streams = {"stdout": {"stdout": printed, "stderr": subprocess.DEVNULL},
                   "stderr": {"stdout": subprocess.DEVNULL, "stderr": printed},
                   "both": {"stdout": printed, "stderr": subprocess.STDOUT}}[keep]
        process = subprocess.Popen(command, cwd=ROOT, env=env, **streams)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        wall = time.perf_counter() - started
        printed.seek(0)
        output = printed.read()
    return ChildRun(exit_code=process.returncode, wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime,
                    peak_rss_bytes=usage.ru_maxrss * 1024, output=output)  # ru_maxrss is in KiB on Linux


class TreeMemory:
    """The memory of this process's descendants (and of this process, with `include_self`), sampled in a thread while
    the block runs: `peak`, the largest sum of their proportional set sizes (PSS splits a page that forked processes
    share, where summed RSS would count it in each), and `largest`, the largest resident set any one of them reached.
    wait4's ru_maxrss sees only the processes a child reaps, not those a server it started forks."""

    def __init__(self, *, include_self: bool = False, every_s: float = 0.5):
        import threading

        import psutil

        self.psutil, self.me, self.include_self, self.every_s = psutil, psutil.Process(), include_self, every_s
        self.peak = self.largest = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        while not self.stop.wait(self.every_s):
            sizes = []
            for process in [self.me] * self.include_self + self.me.children(recursive=True):
                with contextlib.suppress(self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                    sizes.append(process.memory_full_info())  # suppressed: it ended between the listing and the read
            self.peak = max(self.peak, sum(size.pss for size in sizes))
            self.largest = max([self.largest, *(size.rss for size in sizes)])

    def __enter__(self) -> "TreeMemory":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded: how busy the shared cores were beside a figure."""
    return [round(value, 2) for value in os.getloadavg()]


# A child's ru_maxrss (what run_measured reports) starts at its parent's peak on Linux: exec keeps the larger of
# the old and new high-water marks. A Python child run through this wrapper writes its own VmHWM (the high-water
# mark of the memory it has had since its exec) to PEAK_FILE as it exits.
_OWN_PEAK_WRAPPER = """
import atexit, os, runpy, sys
def peak():
    with open("/proc/self/status") as status, open(os.environ["PEAK_FILE"], "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
atexit.register(peak)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_python_measured(script_and_arguments: list[str], *, env: dict,
                        keep: Literal["stdout", "stderr", "both"]) -> ChildRun:
    """run_measured for `python SCRIPT ARGUMENTS`, with peak_rss_bytes the child's own peak, not its parent's
    when the parent is larger."""
    with tempfile.NamedTemporaryFile("r", prefix="bench-peak-") as peak:
        run = run_measured([sys.executable, "-c", _OWN_PEAK_WRAPPER, *script_and_arguments],
                           env={**env, "PEAK_FILE": peak.name}, keep=keep)
        run.peak_rss_bytes = int(peak.read() or 0) * 1024  # VmHWM is in kB
    return run


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, *, seconds: float, process: subprocess.Popen | None = None,
                  probe_timeout: float = 0.2) -> bool:
    """Whether something listens on the local `port` within `seconds` (False at once if `process` exits)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=probe_timeout).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False


def deployment_gunicorn(*, workers: int | None = None, threads: int | None = None) -> dict:
    """The gunicorn layout a bench runs: deploy/gunicorn.conf.py's as this machine resolves it (its environment
    variables included), with `workers` and `threads` in place of the config's where given, and
    GUNICORN_CMD_ARGS when set."""
    import runpy

    config = runpy.run_path(str(ROOT / "deploy/gunicorn.conf.py"))
    layout = {name: config[name] for name in ("workers", "threads", "worker_connections", "worker_class")}
    layout.update({name: value for name, value in (("workers", workers), ("threads", threads)) if value is not None})
    if os.environ.get("GUNICORN_CMD_ARGS"):  # gunicorn reads these after the config file, over it
        layout["GUNICORN_CMD_ARGS"] = os.environ["GUNICORN_CMD_ARGS"]
    return layout


def start_gunicorn(*, env: dict, port: int, workers: int | None = None, threads: int | None = None) -> subprocess.Popen:
    """The app under gunicorn with the deployment's config, listening on `port`; `workers` and `threads`, where
    given, in place of the config's."""
    command = [str(ROOT / ".venv/bin/gunicorn"), "-c", str(ROOT / "deploy/gunicorn.conf.py"), "annotate.wsgi:application"]
    env = {**env, "PAIRWISE_BIND": f"127.0.0.1:{port}"}
    if workers is not None:
        env["PAIRWISE_WORKERS"] = str(workers)
    if threads is not None:
        env["PAIRWISE_THREADS"] = str(threads)
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    if not wait_for_port(port, seconds=30):
        server.kill()
        raise SystemExit("gunicorn did not start within 30 s")
    return server


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of `values`, rounded to a tenth; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))], 1)


# What check_database counts besides the judgments it was told of, each a count(*) over the whole database.
DATABASE_CHECKS = {
    "judgments_in_db": "SELECT count(*) FROM review_judgment",
    "duplicate_judgments": (
        "SELECT count(*) FROM (SELECT assignment_id FROM review_judgment WHERE NOT retracted "
        "GROUP BY 1 HAVING count(*) > 1) d"
    ),
    "duplicate_assignments": (
        "SELECT count(*) FROM (SELECT a.pair_id, a.reviewer_id FROM review_assignment a "
        "WHERE NOT a.is_retest GROUP BY 1, 2 HAVING count(*) > 1) d"
    ),
    "over_assigned_pairs": (
        "SELECT count(*) FROM (SELECT a.pair_id FROM review_assignment a JOIN review_project p ON p.id = a.project_id "
        "WHERE NOT a.is_retest AND a.status IN ('active', 'completed') GROUP BY a.pair_id, p.overlap "
        "HAVING count(*) > p.overlap) o"
    ),
    "pair_counter_drift": (
        "SELECT count(*) FROM review_pair p WHERE p.assigned_count <> (SELECT count(*) FROM review_assignment a "
        "WHERE a.pair_id = p.id AND NOT a.is_retest AND a.status IN ('active', 'completed'))"
    ),
    # Pairs whose vote counters (what adjudication's queue reads) disagree with their counted votes: current
    # judgments of first-time assignments outside the qualification round.
    "pair_votes_drift": (
        "SELECT count(*) FROM review_pair p LEFT JOIN (SELECT a.pair_id, "
        "count(*) FILTER (WHERE j.winner = 'a') AS a, count(*) FILTER (WHERE j.winner = 'b') AS b, "
        "count(*) FILTER (WHERE j.winner = 'tie') AS tie, count(*) FILTER (WHERE j.winner = 'both_bad') AS both_bad "
        "FROM review_assignment a JOIN review_judgment j ON j.id = a.current_judgment_id WHERE NOT a.is_retest "
        "AND NOT EXISTS (SELECT 1 FROM review_goldcheck g WHERE g.assignment_id = a.id AND g.attempt_id IS NOT NULL) "
        "GROUP BY a.pair_id) v ON v.pair_id = p.id WHERE (p.votes_a, p.votes_b, p.votes_tie, p.votes_both_bad) "
        "IS DISTINCT FROM (coalesce(v.a, 0), coalesce(v.b, 0), coalesce(v.tie, 0), coalesce(v.both_bad, 0))"
    ),
}


def check_database(created_ids: list[int]) -> dict:
    """After simulated reviewers: judgments answered 201 but not stored, judgments or assignments stored twice,
    pairs with more reviewers than the overlap, pair counters that disagree with the assignments or the votes."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM review_judgment WHERE id = ANY(%s)", [created_ids])
        stored = cursor.fetchone()[0]
        counts = {}
        for name, query in DATABASE_CHECKS.items():
            cursor.execute(query)
            counts[name] = cursor.fetchone()[0]
    return {"responses_201": len(created_ids), "stored_of_those": stored, "lost": len(created_ids) - stored, **counts}

"""A small team on the embedded SQLite database: do reviewers get "database is locked"?

The demo's own server (`manage.py runserver`, threaded) on a fresh SQLite file under a temporary data
directory, with the demo data (`seed_demo`). Each simulated reviewer loops as the reviewer page does:
`next` and `standing` at once (the page asks for both after every tenth judgment; here after every one,
to make the collision common), then the judgment. The run is repeated for each SQLite setup below, each
on a fresh copy of the same database; the server's log is read for "database is locked". Latencies are of
the requests the server answered (not the 503s).

    .venv/bin/python bench/embedded_sqlite.py [--reviewers 5] [--seconds 20] [--prompts 300]

Setups: `deferred`: WAL with a 20 s busy timeout and SQLite's default deferred transactions (the settings
before); `app`: what annotate/settings.py sets now. Prints a table and writes
bench/results/embedded_sqlite.json.
"""

import argparse
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and the apps

from bench.common import (
    ROOT,
    free_port,
    machine,
    percentile,
    results_path,
    utc_timestamp,
    wait_for_port,
    write_results,
)

RATIONALE = "The chosen answer divides distance by time correctly."
SLUG = "demo"
# A settings module per setup: the app's settings, with the SQLite options replaced where a setup says so.
SETUPS = {
    "deferred": {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 20},
    "app": None,
}


def prepare(data_dir: Path, *, prompts: int, reviewers: int) -> list[str]:
    """Migrate a fresh SQLite file, load the demo, make reviewers; returns their API tokens."""
    env = {**os.environ, "PAIRWISE_DATA_DIR": str(data_dir)}
    env.pop("DATABASE_URL", None)
    env.pop("CELERY_BROKER_URL", None)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "seed_demo", "--prompts", str(prompts)], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    tokens = []
    for i in range(reviewers):
        name = f"team{i}"
        subprocess.run([*manage, "add_user", name, "--role", "reviewer", "--password", secrets.token_urlsafe(16)],
                       cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        made = subprocess.run([*manage, "drf_create_token", name], cwd=ROOT, env=env, check=True,
                              capture_output=True, text=True)
        tokens.append(made.stdout.split()[2])  # "Generated token KEY for user NAME"
    return tokens


def settings_module(folder: Path, options: dict | None) -> str:
    if options is None:
        return "annotate.settings"
    (folder / "bench_sqlite_settings.py").write_text(
        "from annotate.settings import *  # noqa: F403\n"
        f"DATABASES['default']['OPTIONS'] = {options!r}  # noqa: F405\n"
    )
    return "bench_sqlite_settings"


def start_server(*, env: dict, port: int, log) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    if wait_for_port(port, seconds=60, process=server, probe_timeout=0.5):
        return server
    if server.poll() is not None:
        raise SystemExit(f"runserver exited with {server.returncode}; see its log")
    server.kill()
    raise SystemExit("runserver did not listen within 60 s")


def reviewer_loop(base: str, token: str, stop_at: float, counts: Counter, lock: threading.Lock,
                  answered_ms: list[float]) -> None:
    import requests

    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    rng = random.Random(token)

    def timed(method: str, path: str, **kwargs):
        started = time.perf_counter()
        try:
            response = session.request(method, f"{base}/api/v1/{path}", timeout=60, **kwargs)
        except requests.RequestException:
            return None
        if response.status_code < 500:
            with lock:
                answered_ms.append((time.perf_counter() - started) * 1000)
        return response

    def get(path: str):
        return timed("GET", path)

    def note(what: str, response) -> None:
        with lock:
            counts[(what, response.status_code if response is not None else "no reply")] += 1

    with ThreadPoolExecutor(2) as both:
        while time.monotonic() < stop_at:
            upcoming = both.submit(get, f"projects/{SLUG}/assignments/next")
            standing = both.submit(get, f"projects/{SLUG}/standing")
            nxt, stand = upcoming.result(), standing.result()
            note("next", nxt)
            note("standing", stand)
            if nxt is None or nxt.status_code == 204:
                if nxt is not None:
                    return
                continue
            if nxt.status_code != 200:
                continue
            assignment = nxt.json()
            choice = rng.choice(["left", "right", "tie"])
            judgment = {"choice": choice, "strength": rng.randint(1, 3) if choice != "tie" else None,
                        "criteria": {item["key"]: rng.choice(["left", "right", "tie"])
                                     for item in assignment["criteria"]["items"]},
                        "rationale": RATIONALE, "client_key": str(uuid.uuid4())}
            for _ in range(5):  # as the page does: the same body and client_key until the server answers
                sent = timed("POST", f"assignments/{assignment['id']}/judgment", json=judgment)
                note("judgment", sent)
                if sent is not None and sent.status_code < 500:
                    break
                time.sleep(0.2)


def run_setup(name: str, options: dict | None, *, seed_dir: Path, tokens: list[str], seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"pairwise-sqlite-{name}-") as scratch:
        scratch = Path(scratch)
        data_dir = scratch / "data"
        shutil.copytree(seed_dir, data_dir)
        env = {**os.environ, "PAIRWISE_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE":
               settings_module(scratch, options), "PYTHONPATH": os.pathsep.join([str(scratch), str(ROOT)])}
        env.pop("DATABASE_URL", None)
        env.pop("CELERY_BROKER_URL", None)
        port = free_port()
        log_path = scratch / "server.log"
        counts: Counter = Counter()
        answered_ms: list[float] = []
        lock = threading.Lock()
        with open(log_path, "wb") as log:
            server = start_server(env=env, port=port, log=log)
            try:
                stop_at = time.monotonic() + seconds
                threads = [threading.Thread(target=reviewer_loop,
                                            args=(f"http://127.0.0.1:{port}", token, stop_at, counts, lock,
                                                  answered_ms))
                           for token in tokens]
                started = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                elapsed = time.perf_counter() - started
            finally:
                server.terminate()
                server.wait(timeout=30)
        locked_lines = log_path.read_text(errors="replace").count("database is locked")
    requests_made = sum(counts.values())
    unavailable = sum(n for (_, code), n in counts.items() if code == 503)
    by_endpoint = {what: sum(n for (w, code), n in counts.items() if w == what and code == 503)
                   for what in ("next", "standing", "judgment")}
    return {
        "setup": name, "sqlite_options": options if options is not None else app_sqlite_options(),
        "seconds": round(elapsed, 1), "requests": requests_made,
        "judgments": counts[("judgment", 201)], "judgments_per_s": round(counts[("judgment", 201)] / elapsed, 2),
        "status_503": unavailable, "share_503": round(unavailable / requests_made, 4) if requests_made else None,
        "status_503_by_endpoint": by_endpoint,
        "no_reply": sum(n for (_, code), n in counts.items() if code == "no reply"),
        "other_errors": {f"{w} {code}": n for (w, code), n in counts.items()
                         if code not in (200, 201, 204, 503, "no reply")},
        "database_is_locked_logged": locked_lines,
        "answered_p50_ms": percentile(answered_ms, 50), "answered_p99_ms": percentile(answered_ms, 99),
    }


def app_sqlite_options() -> dict:
    env = {**os.environ}
    env.pop("DATABASE_URL", None)
    shown = subprocess.run([sys.executable, "-c", "import json, django; django.setup(); from django.conf import "
                            "settings; print(json.dumps(settings.DATABASES['default']['OPTIONS']))"],
                           cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "annotate.settings",
                                          "PAIRWISE_DATA_DIR": tempfile.mkdtemp()},
                           check=True, capture_output=True, text=True)
    return json.loads(shown.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviewers", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0, help="per setup")
    parser.add_argument("--prompts", type=int, default=300, help="demo prompts (one pair each)")
    parser.add_argument("--setups", nargs="+", choices=sorted(SETUPS), default=list(SETUPS))
    parser.add_argument("--out", type=Path, default=results_path("embedded_sqlite"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pairwise-sqlite-seed-") as seed:
        seed_dir = Path(seed)
        tokens = prepare(seed_dir, prompts=args.prompts, reviewers=args.reviewers)
        results = [run_setup(name, SETUPS[name], seed_dir=seed_dir, tokens=tokens, seconds=args.seconds)
                   for name in args.setups]

    print(f"{'setup':<10} {'requests':>9} {'judgments':>10} {'judgments/s':>12} {'503s':>6} {'503 share':>10} "
          f"{'503 next/standing/judgment':>27} {'no reply':>9} {'locked in log':>14} {'p50 ms':>7} {'p99 ms':>7}")
    for r in results:
        by = r["status_503_by_endpoint"]
        split = f"{by['next']}/{by['standing']}/{by['judgment']}"
        print(f"{r['setup']:<10} {r['requests']:>9} {r['judgments']:>10} {r['judgments_per_s']:>12} "
              f"{r['status_503']:>6} {r['share_503']:>10.2%} {split:>27} "
              f"{r['no_reply']:>9} {r['database_is_locked_logged']:>14} {r['answered_p50_ms']:>7} "
              f"{r['answered_p99_ms']:>7}")
        if r["other_errors"]:
            print(f"  {r['setup']}: other answers {r['other_errors']}")
    report = {
        "benchmark": "embedded_sqlite", "reviewers": args.reviewers, "seconds_per_setup": args.seconds,
        "prompts": args.prompts, "server": "manage.py runserver --noreload (threaded)", "setups": results,
        "machine": machine(),
        "created_at": utc_timestamp(),
    }
    write_results(args.out, report)
    return 0 if results[-1]["status_503"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

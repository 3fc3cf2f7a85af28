"""Import at scale: JSONL files of 10k and 1M prompts (two answers each) through `manage.py import_items`.

    .venv/bin/python bench/import.py [--sizes 10000,1000000] [--api-size 10000] [--database NAME] [--keep-database]

Creates and drops its own database (`--database`, by default `pairwise_bench_import`). For each size
it writes a file (prompts with two answers, tags, every tenth a gold item), then:

- after 1 prompt: into a fresh project, first a file of one other prompt, then the file: the tables'
  statistics, refreshed after the small import, describe a table of a few rows when the large one starts
  (the first rows of a fresh database, so this case runs first);
- first import: into a fresh project, `manage.py import_items` in a child process (start-up included),
  with its peak RSS;
- re-import: the same file again, which stores nothing;
- API: `POST /api/v1/projects/{slug}/items` with the file as multipart upload, through Django's test
  client in a child process (the view, the upload handling and the import; no network), after one
  request that loads the URLs and views, as a running server has.

Besides wall-clock seconds it reports CPU seconds, the child's and its database backend's (read from
/proc while it runs), and the load average when the run started: on a shared machine the wall clock
says as much about the neighbours as about the import. Memory: the child's peak RSS ("app MB") and the
peak private memory of its database backend ("db MB", RssAnon; shared buffers are not counted).

Needs PostgreSQL on 127.0.0.1:5432 (trust auth). Prints a table and writes bench/results/import.json.
Targets: 10k prompts under 2 s, 1M under 3 minutes, peak RSS flat in the file's size.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and the apps

from bench.common import (
    database_url,
    drop_database,
    machine,
    recreate_database,
    results_path,
    run_measured,
    setup_django_and_migrate,
    write_results,
)

DB_NAME = "pairwise_bench_import"  # --database replaces it
TARGETS = {"seconds_10k": 2.0, "seconds_1m": 180.0}


def write_file(path: Path, prompts: int) -> int:
    """`prompts` lines of the import format, written as they are made; returns the file's bytes."""
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(prompts):
            first, hours = 10 + i % 390, 2 + i % 4
            row = {
                "prompt_id": f"q{i:07d}",
                "prompt": f"A car travels {first} km, then {i % 97 + 5} km. The whole trip takes {hours} hours. "
                          f"What is its average speed? (case {i})",
                "responses": [
                    {"text": f"Average speed is total distance over total time: ({first} + {i % 97 + 5}) / {hours} "
                             f"= {(first + i % 97 + 5) / hours:.2f} km/h. The legs' own speeds do not matter; only the "
                             f"totals do. (case {i})", "model": "sft", "model_version": "v3"},
                    {"text": f"Add the distances and divide by the number of legs: {(first + i % 97 + 5) / 2:.1f} "
                             f"km/h. (case {i})", "model": "sft", "model_version": "v4"},
                ],
                "tags": ["math", "speed"] if i % 2 else ["math"],
            }
            if i % 10 == 0:
                row["gold"] = {"preferred": 0}
            handle.write(json.dumps(row) + "\n")
    return path.stat().st_size


def setup_project(slug: str) -> None:
    from annotate.review.demo_data import DEMO_CRITERIA
    from annotate.review.projects import project_create_or_update

    project_create_or_update(slug=slug, name=slug, instructions=DEMO_CRITERIA["instructions"],
                             criteria_items=DEMO_CRITERIA["criteria"])


def child_env() -> dict:
    return {**os.environ, "DATABASE_URL": database_url(DB_NAME), "DB_CONN_MAX_AGE": "0"}


class BackendWatch:
    """CPU seconds and peak private memory (RssAnon) of the benchmark database's backends, other than
    the watcher's own, while a child runs."""

    def __init__(self):
        import psycopg

        self._conn = psycopg.connect(database_url(DB_NAME).replace("postgres://", "postgresql://"), autocommit=True)
        self._seen: dict[int, float] = {}
        self.peak_private_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(0.1):
            pids = [row[0] for row in self._conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [DB_NAME])]
            for pid in pids:
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue  # gone, or not on this machine
                self._seen[pid] = (int(fields[11]) + int(fields[12])) / tick
                private_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("RssAnon"))
                self.peak_private_mb = max(self.peak_private_mb, private_kb / 1024)

    def __enter__(self) -> "BackendWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()

    @property
    def seconds(self) -> float:
        return sum(self._seen.values())


def run_child(args: list[str]) -> dict:
    """Run a child process: its seconds, CPU seconds (its own and its database backend's), peak RSS, output."""
    from django.db import connections

    connections.close_all()  # so the only other backend of the database is the child's
    load = os.getloadavg()[0]
    with BackendWatch() as backend:
        child = run_measured(args, env=child_env(), keep="both")
    printed = child.output.strip()
    if child.exit_code != 0:
        sys.exit(f"{' '.join(args[1:3])} failed:\n{printed[-3000:]}")
    return {"seconds": child.wall_s, "cpu_seconds_child": child.cpu_s,
            "cpu_seconds_database": backend.seconds, "peak_rss_mb": child.peak_rss_bytes / 2**20,
            "database_peak_private_mb": backend.peak_private_mb,
            "load_average": load, "printed": printed}


def import_command(slug: str, path: Path) -> dict:
    return run_child([sys.executable, "manage.py", "import_items", slug, str(path)])


def api_upload(slug: str, path: Path) -> dict:
    """The upload in a child process (so its RSS is its own); the child prints the request's own seconds."""
    measured = run_child([sys.executable, str(Path(__file__).resolve()), "--database", DB_NAME,
                          "--api-child", slug, str(path)])
    return {**measured, "seconds": float(measured["printed"].splitlines()[-1])}


def api_child(slug: str, path: Path) -> None:
    import django

    django.setup()
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from annotate.review.users import user_add

    user, _, _ = user_add(username="bench-admin", role="admin", password="bench-password-long")
    client = APIClient(SERVER_NAME="localhost")  # a host the default ALLOWED_HOSTS accepts
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    client.options(f"/api/v1/projects/{slug}/items")  # loads the URLs and views, as a running server has
    with open(path, "rb") as handle:
        started = time.perf_counter()
        response = client.post(f"/api/v1/projects/{slug}/items", {"file": handle}, format="multipart")
        seconds = time.perf_counter() - started
    if response.status_code != 201:
        sys.exit(f"upload failed: {response.status_code} {response.content[:2000]!r}")
    print(json.dumps(response.json()))
    print(f"{seconds:.3f}")


def row_of(prompts: int, file_bytes: int, run: str, via: str, measured: dict) -> dict:
    return {"prompts": prompts, "file_mb": round(file_bytes / 2**20, 1), "run": run, "via": via,
            "seconds": round(measured["seconds"], 2), "prompts_per_second": round(prompts / measured["seconds"]),
            "cpu_seconds_child": round(measured["cpu_seconds_child"], 1),
            "cpu_seconds_database": round(measured["cpu_seconds_database"], 1),
            "peak_rss_mb": round(measured["peak_rss_mb"], 1),
            "database_peak_private_mb": round(measured["database_peak_private_mb"], 1),
            "load_average": round(measured["load_average"], 1),
            "printed": measured["printed"].splitlines()[-1 if via == "import_items" else -2]}  # the summary


def main() -> None:
    global DB_NAME
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,1000000", help="prompts per file, comma-separated")
    parser.add_argument("--api-size", type=int, default=10000, help="prompts in the file uploaded through the API")
    parser.add_argument("--database", default=DB_NAME, help="the database to create, use and drop")
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument("--api-child", nargs=2, metavar=("SLUG", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    DB_NAME = args.database

    os.environ["DATABASE_URL"] = database_url(DB_NAME)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    own_data_dir = "PAIRWISE_DATA_DIR" not in os.environ  # the children inherit it
    if own_data_dir:
        os.environ["PAIRWISE_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-import-data-")
    if args.api_child:
        api_child(args.api_child[0], Path(args.api_child[1]))
        return

    sizes = [int(size) for size in args.sizes.split(",")]
    recreate_database(DB_NAME)
    setup_django_and_migrate()
    work = Path(tempfile.mkdtemp(prefix="bench-import-"))
    measured = []
    try:
        for size in sizes:
            path = work / f"items-{size}.jsonl"
            file_bytes = write_file(path, size)
            # One prompt that is not in the file, then the file, into the same project.
            tiny_path = work / "items-1.jsonl"
            write_file(tiny_path, 1)
            tiny_path.write_text(tiny_path.read_text().replace('"q0000000"', '"tiny-first"'))
            slug = f"bench-{size}-after-1"
            setup_project(slug)
            import_command(slug, tiny_path)
            measured.append(row_of(size, file_bytes, "after 1 prompt", "import_items", import_command(slug, path)))
            slug = f"bench-{size}"
            setup_project(slug)
            for run in ("first import", "re-import"):
                measured.append(row_of(size, file_bytes, run, "import_items", import_command(slug, path)))
        if args.api_size:
            path = work / f"items-{args.api_size}.jsonl"
            if not path.exists():
                write_file(path, args.api_size)
            slug = f"bench-api-{args.api_size}"
            setup_project(slug)
            measured.append(row_of(args.api_size, path.stat().st_size, "first import", "API upload",
                                   api_upload(slug, path)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if own_data_dir:
            shutil.rmtree(os.environ["PAIRWISE_DATA_DIR"], ignore_errors=True)
        if not args.keep_database:
            from django.db import connections

            connections.close_all()
            drop_database(DB_NAME)

    print(f"{'prompts':>9} {'file MB':>8}  {'run':<15}{'via':<13}{'seconds':>9}{'prompts/s':>10}"
          f"{'CPU s app':>10}{'CPU s db':>9}{'app MB':>8}{'db MB':>7}{'load':>6}")
    for row in measured:
        print(f"{row['prompts']:>9} {row['file_mb']:>8}  {row['run']:<15}{row['via']:<13}{row['seconds']:>9.2f}"
              f"{row['prompts_per_second']:>10}{row['cpu_seconds_child']:>10.1f}{row['cpu_seconds_database']:>9.1f}"
              f"{row['peak_rss_mb']:>8.1f}{row['database_peak_private_mb']:>7.1f}{row['load_average']:>6.1f}")
    seconds_of = {(row["prompts"], row["run"], row["via"]): row["seconds"] for row in measured}
    meets = {}
    if (10000, "first import", "import_items") in seconds_of:
        meets["seconds_10k"] = max(seconds for (size, _, _), seconds in seconds_of.items()
                                   if size == 10000) < TARGETS["seconds_10k"]
    if (1_000_000, "first import", "import_items") in seconds_of:
        meets["seconds_1m"] = max(seconds for (size, _, _), seconds in seconds_of.items()
                                  if size == 1_000_000) < TARGETS["seconds_1m"]
    print(f"targets: 10k < {TARGETS['seconds_10k']:.0f} s, 1M < {TARGETS['seconds_1m']:.0f} s; met: {meets}")
    result = {
        "runs": measured,
        "targets": TARGETS,
        "meets_targets": meets,
        "machine": machine(),
        "note": "seconds are the whole child process (start-up, reading, checking, staging, writing, commit), "
                "except the API row: the upload request alone, through Django's test client; CPU seconds are the "
                "child's (start-up included) and its database backend's; peak RSS is the child process's own; database "
                "peak private MB is its backend's RssAnon (shared buffers not counted); "
                "load is the 1-minute load average when the run started",
    }
    write_results(results_path("import"), result)


if __name__ == "__main__":
    main()

"""Project backup and restore at scale: N judgments → backup_project → an empty database → restore_project.

    .venv/bin/python bench/restore.py [--judgments 1000000] [--overlap 3]

Creates its own database, `pairwise_bench_restore` (--database to change), and fills one project with bulk
SQL as bench/export.py does (its fill). Then, in the same run:

- before: `manage.py export_snapshot` and `manage.py agreement --json` (the report is stored, so the backup
  holds it too), the project's row counts per table;
- backup: `manage.py backup_project` in a child process: wall, CPU, peak RSS, file size;
- restore: the database dropped and created empty, `manage.py migrate`, then `manage.py restore_project` in
  a child process: wall, CPU, peak RSS;
- after: the row counts again, a snapshot with the same options (same snapshot id, same file bytes) and the
  agreement report (the same text).

Needs PostgreSQL on 127.0.0.1:5432 (trust auth). Prints a table and records the run under its size in
bench/results/restore.json (--out to change), beside the runs at other sizes already there, so that peak
RSS can be compared across sizes. Targets: restore of 1M judgments under 180 s; peak RSS of the restore
flat in N (the largest run at most 1.25x the smallest). A size not measured is extrapolated from the
largest run's rows per second. Exits non-zero when a check after the restore fails.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and the apps

from bench.common import (
    ChildRun,
    database_url,
    drop_database,
    machine,
    recreate_database,
    results_path,
    run_python_measured,
    utc_timestamp,
    write_results,
)
from bench.export import fill

DB_NAME = "pairwise_bench_restore"
SLUG = "bench"  # the project bench.export's fill makes
TARGETS = {"restore_seconds": 180.0, "at_judgments": 1_000_000, "flat_memory_max_ratio": 1.25}
def manage(*arguments: str, env: dict, keep: str = "both") -> ChildRun:
    """`manage.py ARGUMENTS` in a measured child process, its peak RSS its own (run_python_measured); exits with
    its output when it fails."""
    run = run_python_measured(["manage.py", *arguments], env=env, keep=keep)
    if run.exit_code != 0:
        sys.exit(f"manage.py {arguments[0]} failed:\n{run.output[-3000:]}")
    return run


def figures(run: ChildRun) -> dict:
    return {"seconds": round(run.wall_s, 2), "cpu_seconds": round(run.cpu_s, 2),
            "peak_rss_mb": round(run.peak_rss_bytes / 2**20, 1)}


def row_counts() -> dict[str, int]:
    """The project's rows per kept model, and the users; the Django connection closed after, as the database
    may be dropped next."""
    from django.contrib.auth import get_user_model
    from django.db import connections

    from annotate.backup.contents import project_models
    from annotate.review.models import Project

    project = Project.objects.get(slug=SLUG)
    counts = {model._meta.label_lower: model._base_manager.filter(**{lookup: project.pk}).count()
              for model, lookup in project_models()}
    counts["users"] = get_user_model().objects.count()
    connections.close_all()
    return counts


def snapshot(out: Path, *, env: dict) -> tuple[ChildRun, dict]:
    """An export snapshot to `out`; returns the run and (snapshot id, sha256 of every file but the manifest)."""
    run = manage("export_snapshot", SLUG, "--out", str(out), env=env)
    manifest = json.loads((out / "manifest.json").read_text())
    hashes = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
              for path in sorted(out.iterdir()) if path.name != "manifest.json"}
    return run, {"snapshot_id": manifest["snapshot_id"], "files": hashes}


def agreement(env: dict) -> str:
    """`manage.py agreement --json`: the report as printed (it holds no timestamps, so it may be compared whole)."""
    return manage("agreement", SLUG, "--json", env=env, keep="stdout").output


def measure(*, judgments: int, overlap: int, database: str, work: Path) -> dict:
    """One run at one size: fill, before, backup, restore into an empty database, after."""
    pairs = -(-judgments // overlap)
    env = {**os.environ, "DATABASE_URL": database_url(database), "DB_CONN_MAX_AGE": "0"}
    recreate_database(database)
    started = time.perf_counter()
    fill(pairs=pairs, overlap=overlap)
    fill_seconds = time.perf_counter() - started

    _, snapshot_before = snapshot(work / "before", env=env)
    report_before = agreement(env)
    counts_before = row_counts()

    backup = work / "bench.jsonl"
    backup_run = manage("backup_project", SLUG, "--out", str(backup), env=env)

    recreate_database(database)
    migrate_run = manage("migrate", "--verbosity", "0", env=env)
    restore_run = manage("restore_project", str(backup), env=env)

    counts_after = row_counts()
    _, snapshot_after = snapshot(work / "after", env=env)
    report_after = agreement(env)
    rows = sum(count for label, count in counts_before.items() if label != "users")
    checks = {"row_counts_equal": counts_after == counts_before,
              "snapshot_identical": snapshot_after == snapshot_before,
              "agreement_report_identical": report_after == report_before}
    return {
        "judgments": pairs * overlap,
        "pairs": pairs,
        "rows": rows,
        "row_counts": counts_before,
        "fill_seconds": round(fill_seconds, 1),
        "backup": {**figures(backup_run), "file_bytes": backup.stat().st_size,
                   "rows_per_second": round(rows / backup_run.wall_s)},
        "migrate_empty_database": figures(migrate_run),
        "restore": {**figures(restore_run), "rows_per_second": round(rows / restore_run.wall_s)},
        "checks": checks,
        "snapshot_id": snapshot_before["snapshot_id"],
        "restore_output": restore_run.output.strip(),
        "measured_at": utc_timestamp(),
    }


def summary(runs: dict[str, dict]) -> dict:
    """Targets met over every run recorded: the restore time at the target size (measured, or extrapolated
    from the largest run's rows per second), and the restore's peak RSS from the smallest to the largest run."""
    by_size = sorted(runs.values(), key=lambda run: run["judgments"])
    smallest, largest = by_size[0], by_size[-1]
    target_run = next((run for run in by_size if run["judgments"] >= TARGETS["at_judgments"]), None)
    if target_run is not None:
        seconds, how = target_run["restore"]["seconds"], f"measured at {target_run['judgments']} judgments"
    else:
        rows = largest["rows"] * TARGETS["at_judgments"] / largest["judgments"]
        seconds = round(rows / largest["restore"]["rows_per_second"], 1)
        how = (f"extrapolated from {largest['judgments']} judgments at {largest['restore']['rows_per_second']} "
               "rows/s (linear in rows)")
    ratio = round(largest["restore"]["peak_rss_mb"] / smallest["restore"]["peak_rss_mb"], 2)
    return {
        "restore_seconds_at_1m": seconds,
        "restore_seconds_at_1m_is": how,
        "restore_peak_rss_mb_by_judgments": {str(run["judgments"]): run["restore"]["peak_rss_mb"] for run in by_size},
        "restore_peak_rss_ratio_largest_to_smallest": ratio,
        "meets_targets": {"restore_seconds": seconds < TARGETS["restore_seconds"],
                          "flat_memory": len(by_size) > 1 and ratio <= TARGETS["flat_memory_max_ratio"],
                          "checks_after_restore": all(all(run["checks"].values()) for run in by_size)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judgments", type=int, default=1_000_000)
    parser.add_argument("--overlap", type=int, default=3)
    parser.add_argument("--database", default=DB_NAME, help=f"the database to create and drop (default {DB_NAME})")
    parser.add_argument("--out", type=Path, default=results_path("restore"),
                        help="the results file; the run is added beside those at other sizes")
    parser.add_argument("--note", help="a note kept in the results (say, why a size was not measured)")
    parser.add_argument("--keep-database", action="store_true")
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = database_url(args.database)
    os.environ["DB_CONN_MAX_AGE"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    os.environ.setdefault("PAIRWISE_DATA_DIR", tempfile.mkdtemp(prefix="bench-restore-"))
    work = Path(tempfile.mkdtemp(prefix="bench-restore-"))
    try:
        run = measure(judgments=args.judgments, overlap=args.overlap, database=args.database, work=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep_database:
            drop_database(args.database)

    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    runs = {**previous.get("runs", {}), str(run["judgments"]): run}
    result = {"targets": TARGETS, **summary(runs), "runs": runs, "machine": machine(),
              "note": args.note or previous.get("note") or
              "seconds are whole child processes (start-up included); peak RSS is each child's own VmHWM as it "
              "exits (bench.common.run_python_measured)"}

    print(f"{run['judgments']} judgments, {run['rows']} rows; backup file {run['backup']['file_bytes'] / 2**20:.1f} MiB")
    print(f"{'':20}{'seconds':>9}{'CPU s':>9}{'rows/s':>9}{'peak RSS MB':>13}")
    for name in ("backup", "restore"):
        step = run[name]
        print(f"{name + '_project':20}{step['seconds']:>9.2f}{step['cpu_seconds']:>9.2f}{step['rows_per_second']:>9}"
              f"{step['peak_rss_mb']:>13.1f}")
    print("checks after restore: " + ", ".join(f"{name} {'ok' if ok else 'FAILED'}" for name, ok in run["checks"].items()))
    print(f"restore at 1M judgments: {result['restore_seconds_at_1m']} s ({result['restore_seconds_at_1m_is']}; "
          f"target < {TARGETS['restore_seconds']:.0f} s); restore peak RSS by judgments: "
          f"{result['restore_peak_rss_mb_by_judgments']}")
    print(f"wrote {write_results(args.out, result)}")
    if not all(run["checks"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()

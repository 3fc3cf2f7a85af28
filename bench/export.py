"""Snapshot export at scale: 1M judgments → a snapshot, against a plain PostgreSQL COPY of the same rows.

    .venv/bin/python bench/export.py [--judgments 1000000] [--overlap 3] [--database pairwise_bench_export]

Creates and drops its own database (`--database`, default `pairwise_bench_export`), and fills it with bulk SQL
(INSERT ... SELECT generate_series), not through the services: prompts with two answers each, one pair
per prompt, `overlap` judgments per pair (mostly agreeing, some ties, both-bad and splits). Then, in the
same run:

- COPY: `COPY (<the export's own votes query>) TO STDOUT`, read and discarded: the floor set by the
  database for the same rows, at the server's settings and again with JIT off (as the export reads them);
- export: `manage.py export_snapshot` in a child process (votes query, rows, files, hashes, manifest;
  the agreement report only with --exclude-flagged), with its own peak RSS (bench.common.run_python_measured).

The three are timed `--runs` times, interleaved, on the same filled database; the table gives each one's
median, and the ratio is of the medians (one run of each moved by a third with the machine's load).
Every run's snapshot must have the same id.

Needs PostgreSQL on 127.0.0.1:5432 (trust auth). Prints a table and writes bench/results/export.json.
Targets: export under 60 s, peak RSS under 500 MB, at most 2x the COPY at the server's settings.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and the apps

from bench.common import (
    ROOT,
    database_url,
    drop_database,
    machine,
    recreate_database,
    results_path,
    run_python_measured,
    setup_django_and_migrate,
    write_results,
)

DEFAULT_DATABASE = "pairwise_bench_export"
REVIEWERS = 60
TARGETS = {"seconds": 60.0, "peak_rss_mb": 500.0, "ratio_to_copy": 2.0}


def fill(*, pairs: int, overlap: int) -> None:
    """Project, criteria and reviewers through the services; prompts to judgments in bulk SQL."""
    setup_django_and_migrate()
    from django.apps import apps
    from django.core.management.color import no_style
    from django.db import connection, transaction

    from annotate.review.demo_data import DEMO_CRITERIA
    from annotate.review.projects import project_create_or_update
    from annotate.review.queue_sql import pair_votes_recount

    project, criteria, _ = project_create_or_update(
        slug="bench", name="Bench", instructions=DEMO_CRITERIA["instructions"],
        criteria_items=DEMO_CRITERIA["criteria"], overlap=overlap, retest_rate=0,
    )
    params = {"project": project.pk, "criteria": criteria.pk, "pairs": pairs, "overlap": overlap,
              "reviewers": REVIEWERS}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO auth_user (id, password, is_superuser, username, first_name, last_name, email, is_staff,
                                   is_active, date_joined)
            SELECT 1000 + r, '!', false, 'bench' || r, '', '', '', false, true, now()
            FROM generate_series(0, %(reviewers)s - 1) r""", params)
        # content_key as training.snapshot.prompt_key spells it: sha256 of the messages' canonical JSON.
        cursor.execute("""
            INSERT INTO review_prompt (id, project_id, external_id, messages, tags, content_key, created_at)
            SELECT i, %(project)s, 'q' || lpad(i::text, 7, '0'),
                   jsonb_build_array(jsonb_build_object('role', 'user', 'content', content)),
                   jsonb_build_array(CASE WHEN i %% 2 = 0 THEN 'math' ELSE 'speed' END),
                   encode(sha256(convert_to('[{"content":' || to_json(content)::text || ',"role":"user"}]', 'UTF8')),
                          'hex'),
                   now()
            FROM generate_series(1, %(pairs)s) i,
                 LATERAL (SELECT 'A car travels ' || i || ' km in 2 hours, then stops for ' || (i %% 7) || ' minutes. '
                                 || 'What is its average speed while moving? ' || md5(i::text) AS content) c""", params)
        cursor.execute("""
            INSERT INTO review_response (id, prompt_id, text, text_sha256, model, model_version, created_at)
            SELECT 2 * i + k, i,
                   'Step 1: distance ' || i || ' km. Step 2: time 2 h. ' || repeat(md5((2 * i + k)::text), 6)
                   || ' Answer: ' || (i / 2.0 + k) || ' km/h',
                   md5((2 * i + k)::text), 'sft', 'v' || k, now()
            FROM generate_series(1, %(pairs)s) i, generate_series(0, 1) k""", params)
        cursor.execute("""
            INSERT INTO review_pair (id, project_id, prompt_id, response_a_id, response_b_id, assigned_count, created_at)
            SELECT i, %(project)s, i, 2 * i, 2 * i + 1, %(overlap)s, now()
            FROM generate_series(1, %(pairs)s) i""", params)
        # Foreign keys are deferred until commit, so assignments may name their judgments before they exist.
        cursor.execute("""
            INSERT INTO review_assignment (id, project_id, pair_id, reviewer_id, a_on_left, is_retest, status,
                                           criteria_version_id, served_at, expires_at, completed_at,
                                           current_judgment_id, created_at)
            SELECT i * %(overlap)s + k, %(project)s, i, 1000 + (i + k * 7) %% %(reviewers)s, (i + k) %% 2 = 0, false,
                   'completed', %(criteria)s, now(), now() + interval '30 minutes', now(), i * %(overlap)s + k, now()
            FROM generate_series(1, %(pairs)s) i, generate_series(0, %(overlap)s - 1) k""", params)
        # Mostly the pair's majority side, some of the other side, a few ties and both-bad; strength 1-3 for an a or
        # b vote and none for a tie or both-bad, as the review form stores them.
        cursor.execute("""
            INSERT INTO review_judgment (id, assignment_id, pair_id, reviewer_id, revision, retracted, winner,
                                         strength, criteria, criteria_version_id, rationale, seconds_spent,
                                         client_key, created_at)
            SELECT i * %(overlap)s + k, i * %(overlap)s + k, i, 1000 + (i + k * 7) %% %(reviewers)s, 1, false,
                   CASE WHEN v < 12 THEN (CASE WHEN i %% 2 = 0 THEN 'a' ELSE 'b' END)
                        WHEN v < 16 THEN (CASE WHEN i %% 2 = 0 THEN 'b' ELSE 'a' END)
                        WHEN v < 18 THEN 'tie' ELSE 'both_bad' END,
                   CASE WHEN v < 16 THEN 1 + (i + k) %% 3 END, '{"correct": "tie", "complete": "tie"}'::jsonb, %(criteria)s,
                   'The chosen answer shows the steps.', 20.0, md5((i * %(overlap)s + k)::text)::uuid, now()
            FROM (SELECT i, k, (i * 31 + k * 17) %% 20 AS v
                  FROM generate_series(1, %(pairs)s) i, generate_series(0, %(overlap)s - 1) k) s""", params)
    pair_votes_recount(project_id=project.pk)
    with connection.cursor() as cursor:
        # Rows went in under ids of their own: move each id sequence past them, so the app can go on adding rows.
        for statement in connection.ops.sequence_reset_sql(no_style(), apps.get_models()):
            cursor.execute(statement)
        cursor.execute("VACUUM ANALYZE")  # as autovacuum would after a large load


def votes_query() -> tuple[str, list]:
    """The export's own votes query (with texts) for the bench's project, as COPY is given it."""
    import django

    django.setup()
    from annotate.exports.filters import filters_parse
    from annotate.exports.selectors import votes_sql
    from annotate.review.models import Project

    return votes_sql(filters=filters_parse({}), excluded_reviewers=frozenset(), with_texts=True,
                     project=Project.objects.get(slug="bench"))


def copy_seconds(database: str, sql: str, params: list, *, jit: bool) -> tuple[float, int, int]:
    """Time a COPY of the votes query; returns (seconds, rows, bytes). `jit` False turns PostgreSQL's JIT off for
    it, as the export's own read does."""
    import psycopg

    with psycopg.connect(database_url(database).replace("postgres://", "postgresql://")) as conn, conn.cursor() as cursor:
        if not jit:
            cursor.execute("SET jit = off")
        started = time.perf_counter()
        size = lines = 0
        with cursor.copy(f"COPY ({sql}) TO STDOUT", params) as copy:
            for block in copy:
                size += len(block)
                lines += bytes(block).count(b"\n")
        return time.perf_counter() - started, lines, size


def run_export(out: Path, database: str) -> tuple[float, float, float, str]:
    """`manage.py export_snapshot` in a child process; returns (seconds, its CPU seconds, its own peak RSS MB, its
    output)."""
    env = {**os.environ, "DATABASE_URL": database_url(database), "DB_CONN_MAX_AGE": "0"}
    run = run_python_measured([str(ROOT / "manage.py"), "export_snapshot", "bench", "--out", str(out)], env=env,
                              keep="both")
    if run.exit_code != 0:
        sys.exit(f"export failed:\n{run.output[-3000:]}")
    printed = "\n".join(line for line in run.output.splitlines() if line.startswith(str(out)))  # not the bar
    return run.wall_s, run.cpu_s, run.peak_rss_bytes / 2**20, printed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judgments", type=int, default=1_000_000)
    parser.add_argument("--overlap", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs of each timing (the median is shown)")
    parser.add_argument("--database", default=DEFAULT_DATABASE, help="the database to create, fill and drop")
    parser.add_argument("--keep-database", action="store_true")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs is {args.runs}; give 1 or more")
    pairs = -(-args.judgments // args.overlap)

    os.environ["DATABASE_URL"] = database_url(args.database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    os.environ.setdefault("PAIRWISE_DATA_DIR", tempfile.mkdtemp(prefix="bench-export-"))
    recreate_database(args.database)
    started = time.perf_counter()
    fill(pairs=pairs, overlap=args.overlap)
    fill_seconds = time.perf_counter() - started

    load_before = os.getloadavg()[0]  # the machine may be shared: the figures mean more beside its load
    copies: list[float] = []
    copies_jit_off: list[float] = []
    exports: list[tuple[float, float, float]] = []  # seconds, CPU seconds, peak RSS MB
    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    try:
        sql, params = votes_query()
        for run in range(args.runs):
            copy_s, copy_rows, copy_bytes = copy_seconds(args.database, sql, params, jit=True)
            copies.append(copy_s)
            copies_jit_off.append(copy_seconds(args.database, sql, params, jit=False)[0])
            out = work / f"snapshot-{run}"
            export_s, export_cpu_s, peak_mb, printed = run_export(out, args.database)
            exports.append((export_s, export_cpu_s, peak_mb))
            manifest = json.loads((out / "manifest.json").read_text())
            if run == 0:
                first_manifest = manifest
                sizes = {name: (out / name).stat().st_size for name in manifest["files"]}
            elif manifest["snapshot_id"] != first_manifest["snapshot_id"]:
                sys.exit(f"run {run + 1} wrote snapshot {manifest['snapshot_id']}, run 1 {first_manifest['snapshot_id']}: "
                         "the export is not deterministic")
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep_database:
            drop_database(args.database)

    copy_s, copy_jit_off_s = statistics.median(copies), statistics.median(copies_jit_off)
    export_s = statistics.median(seconds for seconds, _, _ in exports)
    export_cpu_s = statistics.median(cpu for _, cpu, _ in exports)
    peak_mb = max(peak for _, _, peak in exports)
    counts = first_manifest["counts"]
    rows = counts["train"] + counts["test"]
    result = {
        "judgments": pairs * args.overlap,
        "pairs": pairs,
        "rows_written": rows,
        "runs": args.runs,
        "copy": {"seconds": round(copy_s, 2), "runs_seconds": [round(value, 2) for value in copies],
                 "rows": copy_rows, "bytes": copy_bytes},
        "copy_jit_off": {"seconds": round(copy_jit_off_s, 2),
                         "runs_seconds": [round(value, 2) for value in copies_jit_off]},
        "export": {"seconds": round(export_s, 2), "runs_seconds": [round(value, 2) for value, _, _ in exports],
                   "cpu_seconds": round(export_cpu_s, 2), "rows_per_second": round(rows / export_s),
                   "pairs_per_second": round(pairs / export_s), "peak_rss_mb": round(peak_mb, 1),
                   "snapshot_id": first_manifest["snapshot_id"], "file_bytes": sizes, "counts": counts},
        "ratio_to_copy": round(export_s / copy_s, 2),
        "ratio_to_copy_jit_off": round(export_s / copy_jit_off_s, 2),
        "fill_seconds": round(fill_seconds, 1),
        "load_average_1m": {"before_copy": round(load_before, 2), "after_export": round(os.getloadavg()[0], 2)},
        "targets": TARGETS,
        "meets_targets": {"seconds": export_s < TARGETS["seconds"], "peak_rss_mb": peak_mb < TARGETS["peak_rss_mb"],
                          "ratio_to_copy": export_s / copy_s <= TARGETS["ratio_to_copy"]},
        "machine": machine(),
        "note": "medians of interleaved runs; export time is the whole `manage.py export_snapshot` process: start-up, "
                "votes query, rows, hashes, manifest; the ratio target is against the COPY at the server's settings, "
                "ratio_to_copy_jit_off against the COPY with JIT off, as the export reads",
    }
    print(f"{'median of ' + str(args.runs) + ' runs':24}{'seconds':>9}{'CPU s':>9}{'rows':>10}{'rows/s':>10}"
          f"{'peak RSS MB':>13}")
    print(f"{'COPY (same query)':24}{copy_s:>9.2f}{'':>9}{copy_rows:>10}{copy_rows / copy_s:>10.0f}{'':>13}")
    print(f"{'COPY, JIT off':24}{copy_jit_off_s:>9.2f}{'':>9}{copy_rows:>10}{copy_rows / copy_jit_off_s:>10.0f}{'':>13}")
    print(f"{'export_snapshot':24}{export_s:>9.2f}{export_cpu_s:>9.2f}{rows:>10}{rows / export_s:>10.0f}{peak_mb:>13.1f}")
    print(f"ratio export / COPY: {export_s / copy_s:.2f}x, / COPY with JIT off: {export_s / copy_jit_off_s:.2f}x  "
          f"(targets: < {TARGETS['seconds']:.0f} s, < {TARGETS['peak_rss_mb']:.0f} MB, <= {TARGETS['ratio_to_copy']:.0f}x "
          "the COPY)")
    print(printed)
    write_results(results_path("export"), result)


if __name__ == "__main__":
    main()

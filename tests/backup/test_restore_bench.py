"""bench/restore.py on a tiny project: backup, restore into an empty database, and the same snapshot after."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                       reason="the bench creates its own database on the local PostgreSQL"),
]


def test_a_tiny_restore_bench_gives_the_same_snapshot_report_and_counts(tmp_path):
    # A database of its own, named after this run's so that two checkouts or workers do not share it.
    database = f"{settings.DATABASES['default']['NAME']}_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_bench"
    out = tmp_path / "restore.json"
    bench = subprocess.run([sys.executable, "bench/restore.py", "--judgments", "300", "--database", database,
                            "--out", str(out)], cwd=REPO, env={**os.environ, "PAIRWISE_DATA_DIR": str(tmp_path)},
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
    run = json.loads(out.read_text())["runs"]["300"]
    assert run["checks"] == {"row_counts_equal": True, "snapshot_identical": True, "agreement_report_identical": True}
    assert run["row_counts"]["review.judgment"] == 300 and run["backup"]["file_bytes"] > 0

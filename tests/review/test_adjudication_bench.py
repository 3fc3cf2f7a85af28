"""bench/review_load.py's adjudication level on a small project: adjudicators over HTTP, every check at zero."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

REPO = Path(__file__).resolve().parents[2]



def review_load(*arguments: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # A database of its own, named after this run's so that two checkouts or workers do not share it.
    database = f"{settings.DATABASES['default']['NAME']}_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_bench"
    return subprocess.run([sys.executable, "bench/review_load.py", "--database", database, *arguments], cwd=REPO,
                          env={**os.environ, "PAIRWISE_DATA_DIR": str(tmp_path)}, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
@pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                    reason="the bench creates its own database on the local PostgreSQL")
def test_a_small_adjudication_level_rules_pairs_once_each_and_passes_none_over(tmp_path):
    out = tmp_path / "review_load.json"
    bench = review_load("--levels", "--far-ahead", "0", "--adaptive", "0", "--prompts", "10", "--adjudication", "3000",
                        "--adjudicators", "1", "3", "--ruled", "0.5", "--seconds", "3", "--workers", "1", "--out", str(out),
                        tmp_path=tmp_path)
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
    report = json.loads(out.read_text())
    adjudication = report["adjudication"]
    assert [level["concurrency"] for level in adjudication["levels"]] == [1, 3]
    for level in adjudication["levels"]:
        assert level["errors"] == 0 and level["rulings"] > 0 and level["next_calls"] >= level["rulings"]
    checks = adjudication["checks"]
    assert checks["lost"] == checks["served_twice"] == checks["pairs_ruled_twice"] == checks["pairs_held_twice"] == 0
    assert checks["served_not_waiting"] == checks["passed_over"] == 0
    assert checks["ruled_before"] == round(adjudication["project"]["split_pairs"] * 0.5) > 0
    assert checks["rulings_in_db"] == checks["ruled_before"] + checks["responses_201"]
    assert report["database_checks"]["pair_votes_drift"] == 0
    assert "next calls/s" in bench.stdout and "adjudication checks:" in bench.stdout


@pytest.mark.parametrize("arguments, words", [
    (["--ruled", "1"], "--ruled 1 must be a share from 0 up to (not including) 1"),
    (["--adjudication", "2"], "--adjudication 2 is fewer judgments than one pair has (3)"),
    (["--adjudicators", "2", "0"], "--adjudicators 0 must be above 0"),
    (["--levels", "0"], "--levels 0: a level needs at least one reviewer"),
])
def test_a_bad_option_is_one_line_and_nothing_runs(tmp_path, arguments, words):  # before any database
    bench = review_load(*arguments, tmp_path=tmp_path)
    assert bench.returncode != 0 and words in bench.stderr
    assert len(bench.stderr.strip().splitlines()) == 1 and not bench.stdout

"""The suite's own order: the two workers get the test files slowest first, by tests/file_durations.json, which
scripts/record_test_durations.py writes from a JUnit report."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import FILE_DURATIONS, slowest_files_first

ROOT = Path(__file__).resolve().parents[1]
RECORDER = ROOT / "scripts" / "record_test_durations.py"


def items_of(root: Path, names: list[str]) -> list:
    """Stand-ins for collected tests: pytest's order reads only an item's path."""
    return [SimpleNamespace(path=root / name.split("::")[0], nodeid=name) for name in names]


def test_files_go_slowest_first_and_each_file_keeps_its_own_order(tmp_path, monkeypatch):
    record = tmp_path / "file_durations.json"
    record.write_text(json.dumps({"tests/a.py": 1.0, "tests/b.py": 30.0, "tests/c.py": 5.0, "tests/d.py": 2.0}))
    monkeypatch.setattr("tests.conftest.FILE_DURATIONS", record)
    names = ["tests/a.py::one", "tests/a.py::two", "tests/b.py::one", "tests/new.py::one", "tests/c.py::one",
             "tests/c.py::two", "tests/d.py::one"]
    ordered = [item.nodeid for item in slowest_files_first(items_of(tmp_path, names), tmp_path)]
    # b (30 s); the unrecorded file counts as the median (5 s), level with c, and was collected first; d, a.
    assert ordered == ["tests/b.py::one", "tests/new.py::one", "tests/c.py::one", "tests/c.py::two",
                       "tests/d.py::one", "tests/a.py::one", "tests/a.py::two"]


def test_without_a_record_the_collection_order_stands(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.conftest.FILE_DURATIONS", tmp_path / "missing.json")
    names = ["tests/z.py::one", "tests/a.py::one", "tests/z.py::two"]
    assert [item.nodeid for item in slowest_files_first(items_of(tmp_path, names), tmp_path)] == \
        ["tests/z.py::one", "tests/z.py::two", "tests/a.py::one"]


def test_every_recorded_file_exists():
    """A moved or deleted test file leaves a stale record; record a whole run again."""
    recorded = json.loads(FILE_DURATIONS.read_text(encoding="utf-8"))
    assert recorded and [name for name in recorded if not (ROOT / name).is_file()] == []


def test_the_recorder_sums_each_files_tests_from_a_junit_report(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.training.test_grpo" name="test_one" time="2.5"/>'
        '<testcase classname="tests.training.test_grpo" name="test_two" time="1.25"/>'
        '<testcase classname="tests.review.test_api.TestNext" name="test_three" time="0.5"/>'
        '</testsuite></testsuites>')
    out = tmp_path / "durations.json"
    done = subprocess.run([sys.executable, str(RECORDER), str(report), "--out", str(out)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == {"tests/review/test_api.py": 0.5, "tests/training/test_grpo.py": 3.8}


def test_the_recorder_refuses_what_is_not_a_report_in_one_line(tmp_path):
    not_xml = tmp_path / "report.txt"
    not_xml.write_text("1321 passed")
    out = tmp_path / "durations.json"
    for argument in (str(not_xml), str(tmp_path / "missing.xml")):
        done = subprocess.run([sys.executable, str(RECORDER), argument, "--out", str(out)], capture_output=True,
                              text=True)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "--junitxml" in done.stderr
    assert not out.exists()

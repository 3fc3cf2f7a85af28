#!/usr/bin/env python3
"""Write tests/file_durations.json, each test file's seconds, from a JUnit XML report of a whole run:

    scripts/test.sh --junitxml=/tmp/junit.xml && python scripts/record_test_durations.py /tmp/junit.xml

tests/conftest.py hands the test files to the two pytest-xdist workers slowest first, by these seconds, so that
no long file starts last while the other worker has nothing left to do. A file missing from the record (a new
one) is placed as a file of typical length; the record only needs refreshing when the slow files change.
"""

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "tests" / "file_durations.json"


def file_of(classname: str) -> str:
    """tests.training.test_grpo.TestSomething → tests/training/test_grpo.py (class names start upper case)."""
    return "/".join(part for part in classname.split(".") if not part[:1].isupper()) + ".py"


def file_seconds(report: Path) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        seconds[file_of(case.get("classname", ""))] += float(case.get("time") or 0.0)
    return {name: round(value, 1) for name, value in sorted(seconds.items())}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Record each test file's seconds from a JUnit XML report.")
    parser.add_argument("report", type=Path, help="a report of a whole run (pytest --junitxml=FILE)")
    parser.add_argument("--out", type=Path, default=RECORD, help=f"where to write (default {RECORD.name} in tests/)")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(f"{args.report}: no such file; write a report with pytest --junitxml=FILE", file=sys.stderr)
        return 2
    try:
        seconds = file_seconds(args.report)
    except ET.ParseError as error:
        print(f"{args.report} is not a JUnit XML report ({error}); write one with pytest --junitxml=FILE",
              file=sys.stderr)
        return 2
    if not seconds:
        print(f"{args.report} holds no test case; record a whole run", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(seconds, indent=1) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(seconds)} files, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`python -m training tasks describe --tasks FILE`: a task file checked as a run checks it, summarised.

The web app keeps task sets (annotate/runs/task_sets.py) but never imports the verifiers, so it asks this
command, in a subprocess, whether a file is a valid task file and which scorers would score it. The summary is
one JSON line: the file's sha256 (the same hash run.json records), the number of tasks, tasks per family (or per
kind where a row names no family), the variant when every row names the same one, and the scorer of each kind.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from training.errors import PairwiseInputError
from training.tasks import load_tasks


def scorer_of_kind() -> dict[str, str]:
    """The scorer name and version each task kind is scored by today (training/verifiers/task_verifier.py)."""
    from training.verifiers.code_verifier import CODE_SCORER
    from training.verifiers.length import SHORT_ANSWER_SCORER
    from training.verifiers.math_verifier import math_scorer_name
    from training.verifiers.missing_info import MISSING_INFO_SCORER

    return {"math": math_scorer_name(), "code": CODE_SCORER, "missing_info": MISSING_INFO_SCORER,
            "short_answer": SHORT_ANSWER_SCORER}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def summarise_tasks(path: str | Path, *, verifier=None) -> dict:
    """Every row checked (schema and reference solutions, as a GRPO run loads them), then the summary. `verifier`
    (a TaskVerifier) is the one to check with; without it one is started and stopped for this file."""
    tasks = load_tasks(path, verifier=verifier)  # a TaskFileError is the CLI's one line
    families = Counter(((task.get("meta") or {}).get("family") or task["kind"]) for task in tasks)
    variants = {(task.get("meta") or {}).get("variant") for task in tasks}
    scorers = scorer_of_kind()
    kinds = sorted({task["kind"] for task in tasks})
    return {"sha256": file_sha256(Path(path)), "count": len(tasks), "families": dict(sorted(families.items())),
            "variant": variants.pop() if len(variants) == 1 and None not in variants else "",
            "kinds": kinds, "scorers": {kind: scorers.get(kind, "none") for kind in kinds}}


def tasks_describe_main(args) -> int:
    """One JSON line per --tasks file, in order; the first bad file stops it with its one line. One verifier
    checks every file: its worker processes start once, not once per file (the demo checks sixteen files)."""
    from training.verifiers.task_verifier import TaskVerifier

    paths = [Path(name) for name in args.tasks]
    for path in paths:
        if not path.is_file():
            raise PairwiseInputError(f"--tasks {path}: no such file; give a task file (JSONL)")
    with TaskVerifier() as verifier:
        for path in paths:
            print(json.dumps(summarise_tasks(path, verifier=verifier), sort_keys=True), flush=True)
    return 0

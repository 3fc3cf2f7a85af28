"""Benchmark of Pairwise's agreement report on a large synthetic project with planted faulty reviewers.

    python bench/agreement.py [--pairs 300000] [--reviewers 200] [--bootstrap 1000] [--seed 0] [--better-first]

Generates ~1M judgments (300k pairs x 3 reviewers + 1/9 retests), times ``agreement_report`` and
its peak resident memory, checks that the planted reviewers get their flags and that the stronger
model ranks first, prints a table and writes bench/results/agreement.json. Exits non-zero when a
check fails. The memory figure is the process's peak RSS while the report ran (the high-water mark
is reset after generating the data, where Linux allows it), and the whole-process peak beside it.
``--better-first`` lists the stronger model's answer first on every pair (an import sorted best-first),
the case where orientation-blind agreement figures collapsed; the report counts every pair in both
orientations, and the table shows the share of a/b choices that went to "a" beside the alphas.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and the apps

from annotate.quality.agreement import krippendorff_alpha, unit_value_counts
from annotate.quality.report import agreement_report
from annotate.quality.reviewers import FLAG_INCONSISTENT_RETEST, FLAG_LOW_AGREEMENT, FLAG_POSITION_BIAS
from annotate.quality.synthetic import ALWAYS_LEFT, RANDOM_CLICKER, SELF_CONTRADICTING, synthetic_project
from bench.common import machine, results_path, shown_path, write_results

EXPECTED_FLAGS = {
    ALWAYS_LEFT: FLAG_POSITION_BIAS,
    RANDOM_CLICKER: FLAG_LOW_AGREEMENT,
    SELF_CONTRADICTING: FLAG_INCONSISTENT_RETEST,
}
TARGET_SECONDS = 15.0
TARGET_MEMORY_MB = 2048.0


def _with_ci(figure: dict) -> str:
    if figure["value"] is None:
        return "null"
    ci = "" if figure["ci"] is None else f" [{figure['ci'][0]:.3f}, {figure['ci'][1]:.3f}]"
    return f"{figure['value']:.3f}{ci}"


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux: write 5 to clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_mb() -> float:
    """Peak RSS since the last reset (VmHWM), else since the process started."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300_000)
    parser.add_argument("--reviewers", type=int, default=200)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--better-first", action="store_true", help="response a is always the stronger model's")
    parser.add_argument("--out", type=Path, default=results_path("agreement"))
    args = parser.parse_args()

    started = time.perf_counter()
    project = synthetic_project(
        n_pairs=args.pairs, n_reviewers=args.reviewers, seed=args.seed, better_first=args.better_first
    )
    generate_seconds = time.perf_counter() - started
    table = project.table

    peak_was_reset = _reset_peak_rss()
    started = time.perf_counter()
    report = agreement_report(table, bootstrap=args.bootstrap, seed=args.seed)
    report_seconds = time.perf_counter() - started
    report_peak_mb = _peak_rss_mb()
    started = time.perf_counter()
    encoded = json.dumps(report, allow_nan=False)
    encode_seconds = time.perf_counter() - started
    process_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    by_name = {reviewer["username"]: reviewer for reviewer in report["reviewers"]}
    checks = {
        f"{name} flagged {flag}": flag in by_name[name]["flags"] for name, flag in EXPECTED_FLAGS.items()
    }
    false_flags = sum(bool(r["flags"]) for name, r in by_name.items() if name not in EXPECTED_FLAGS)
    checks["no careful reviewer flagged"] = false_flags == 0
    strongest = table.model_names[int(project.model_strength.argmax())]
    checks["strongest model ranked first"] = (
        bool(report["models"]) and report["models"][0]["model"] == strongest
    )
    checks[f"report under {TARGET_SECONDS:.0f} s"] = report_seconds < TARGET_SECONDS
    checks[f"report peak RSS under {TARGET_MEMORY_MB:.0f} MB"] = report_peak_mb < TARGET_MEMORY_MB

    alpha = report["krippendorff_alpha"]
    decisive = table.winner[table.winner <= 1]
    a_share = float((decisive == 0).mean()) if decisive.size else float("nan")
    one_way = _one_orientation_alpha(table)
    rows = [
        ("judgments", f"{report['judgments']:,}"),
        ("pairs", f"{report['pairs']:,}"),
        ("reviewers", f"{len(table.reviewer_names):,}"),
        ("bootstrap resamples", f"{args.bootstrap:,}"),
        ("generate data (s)", f"{generate_seconds:.2f}"),
        ("agreement_report (s)", f"{report_seconds:.2f}"),
        ("json.dumps (s)", f"{encode_seconds:.2f}  ({len(encoded) / 1e6:.1f} MB)"),
        (
            "peak RSS during report (MB)",
            f"{report_peak_mb:.0f}" + ("" if peak_was_reset else " (whole process)"),
        ),
        ("peak RSS whole process (MB)", f"{process_peak_mb:.0f}"),
        ("a/b choices that went to a", f"{100 * a_share:.1f}%" + ("  (import lists the better first)" if args.better_first else "")),
        ("alpha nominal [95% CI]", _with_ci(alpha["nominal"])),
        ("alpha nominal, a/b as listed (old)", "null" if one_way is None else f"{one_way:.3f}"),
        ("alpha ordinal [95% CI]", _with_ci(alpha["ordinal"])),
        ("Fleiss' kappa", _with_ci(report["fleiss_kappa"] | {"ci": None})),
        ("reviewer pairs with Cohen's kappa", f"{report['cohen_kappa']['reviewer_pairs']:,}"),
        *((f"flags of {name}", ", ".join(by_name[name]["flags"]) or "-") for name in EXPECTED_FLAGS),
        ("careful reviewers flagged", str(false_flags)),
        (
            "top model (true strongest)",
            f"{report['models'][0]['model'] if report['models'] else '-'} ({strongest})",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 40}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print()
    for name, passed in checks.items():
        print(f"{'ok  ' if passed else 'FAIL'}  {name}")

    result = {
        "benchmark": "agreement_report",
        "machine": machine(),
        "parameters": vars(args) | {"out": shown_path(args.out)},
        "judgments": report["judgments"],
        "pairs": report["pairs"],
        "reviewers": len(table.reviewer_names),
        "generate_seconds": round(generate_seconds, 3),
        "report_seconds": round(report_seconds, 3),
        "json_seconds": round(encode_seconds, 3),
        "report_json_bytes": len(encoded),
        "report_peak_rss_mb": round(report_peak_mb, 1),
        "process_peak_rss_mb": round(process_peak_mb, 1),
        "peak_rss_reset_before_report": peak_was_reset,
        "a_share_of_a_b_choices": round(a_share, 4),
        "alpha_nominal": alpha["nominal"],
        "alpha_ordinal": alpha["ordinal"],
        "alpha_nominal_one_orientation": one_way,
        "fleiss_kappa": report["fleiss_kappa"]["value"],
        "planted_flags": {name: by_name[name]["flags"] for name in EXPECTED_FLAGS},
        "careful_reviewers_flagged": false_flags,
        "checks": checks,
    }
    write_results(args.out, result)
    return 0 if all(checks.values()) else 1


def _one_orientation_alpha(table) -> float | None:
    """Nominal alpha with a and b read as the import listed them: the figure before orientation doubling."""
    original = ~table.is_retest
    counts = unit_value_counts(
        unit_index=table.pair_index[original], value_index=table.winner[original],
        n_units=table.pair_ids.size, n_values=4,
    )
    return krippendorff_alpha(value_counts=counts, level="nominal", n_resamples=0, rng=np.random.default_rng(0)).value


if __name__ == "__main__":
    sys.exit(main())

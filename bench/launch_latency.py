"""How long a launch takes to answer, and how long its config check takes, while a training run is running.

Starts the demo on the embedded defaults (bench/demo_start.py's demo_server: scripts/demo.sh, a fresh data
folder, a free port), launches one long DPO run as load and waits until it runs, then times --count launches of a
small DPO config on the judged demo's export (base tiny-sft) through POST /api/v1/runs, one after another: the
seconds the POST took (it answers 202 with the run `checking`), and the seconds from the POST until the run left
`checking` (queued, or failed with its refused line). Each launched run is cancelled once its check has ended (and
waited for until it has stopped), the load run at the end, and the demo is stopped.

    .venv/bin/python bench/launch_latency.py [--count 20] [--out bench/results/launch_latency.json] [--timeout 3600]

Prints a table and writes the JSON; exits 1 if a launch is refused or a step does not happen within --timeout.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common

from bench.common import machine, percentile, results_path, write_results
from bench.demo_start import demo_server, judged_export, request, wait_for

SMALL_DPO = {"learning_rate": 5.0e-6, "max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1}
LOAD_DPO = {**SMALL_DPO, "max_steps": 100000}  # runs for the whole measurement, then is cancelled
FINISHED = ("succeeded", "failed", "cancelled")


def run_status(base: str, token: str, run_id: int) -> dict:
    return request(f"{base}/api/v1/runs/{run_id}", token=token)[1] or {}


def cancelled(base: str, token: str, run_id: int, deadline: float) -> None:
    """Cancel a run and wait until it has ended: its trainer has a process group of its own, which stopping the
    demo would leave running."""
    request(f"{base}/api/v1/runs/{run_id}/cancel", token=token, body={})
    wait_for(f"run {run_id} to end", lambda: run_status(base, token, run_id).get("status") in FINISHED,
             deadline=deadline, every=0.5)


def launched(base: str, token: str, export: int, config: dict) -> tuple[int, float, float]:
    """A DPO launch through the API: the run's id, when the POST was sent (monotonic) and the seconds it took."""
    asked = time.monotonic()
    status, run = request(base + "/api/v1/runs", token=token, timeout=300, body={
        "kind": "dpo", "base_checkpoint": "tiny-sft", "export": export, "config": config})
    took = time.monotonic() - asked
    if status != 202:
        raise SystemExit(f"launch_latency: the launch was refused ({status}): {run}")
    return run["id"], asked, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--out", default=str(results_path("launch_latency")))
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    rows = []
    with demo_server(args.timeout) as (base, token, _):
        export = judged_export(base, token)
        load, _, _ = launched(base, token, export, LOAD_DPO)
        try:
            wait_for("the load run to run", lambda: run_status(base, token, load).get("status") == "running",
                     deadline=deadline)
            for _ in range(args.count):
                run_id, asked, post_s = launched(base, token, export, SMALL_DPO)
                ended = wait_for("the config check to end",
                                 lambda run_id=run_id: run_status(base, token, run_id).get("status") != "checking"
                                 and time.monotonic(), deadline=deadline, every=0.25)
                after = run_status(base, token, run_id)
                rows.append({"run": run_id, "post_s": round(post_s, 3), "checked_s": round(ended - asked, 3),
                             "then": after.get("status"), "error": after.get("error") or ""})
                cancelled(base, token, run_id, deadline)
        finally:
            cancelled(base, token, load, time.monotonic() + 120)
    figures = {"post_ms": [row["post_s"] * 1000 for row in rows], "left_checking_s": [row["checked_s"] for row in rows]}
    summary = {name: {"p50": percentile(values, 50), "p95": percentile(values, 95), "max": round(max(values), 1)}
               for name, values in figures.items()}
    print(f"| {len(rows)} launches, one DPO run running | p50 | p95 | max |\n|---|---|---|---|")
    for name, label in (("post_ms", "POST /api/v1/runs answered (ms)"),
                        ("left_checking_s", "from the POST until the run left checking (s)")):
        print(f"| {label} | {summary[name]['p50']} | {summary[name]['p95']} | {summary[name]['max']} |")
    write_results(Path(args.out), {
        "bench": "launch_latency", "machine": {**machine(), "load_1min_at_end": os.getloadavg()[0]},
        "count": len(rows), **summary, "launches": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

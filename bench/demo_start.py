"""From `scripts/demo.sh` to a first launched run, as a training engineer meets the demo.

Starts scripts/demo.sh on a fresh data folder and a free port (the install step is a no-op once .venv is
installed), and times: the server answering /healthz; the demo checkpoint tiny-sft registered (seed_demo registers
the shipped one before the server starts, so the runs page's Launch button never waits); a DPO run on the judged
demo's export accepted by POST /api/v1/runs (202), as the launch form sends it, and how long that request took.
The demo is stopped afterwards (its process group).

    .venv/bin/python bench/demo_start.py [--out bench/results/demo_start.json] [--timeout 1800]

Prints a table and writes the JSON; exits 1 if a step did not happen within --timeout seconds.
"""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common

from bench.common import ROOT, free_port, machine, results_path, write_results

DPO_CONFIG = {"learning_rate": 5.0e-6, "max_steps": 40, "per_device_train_batch_size": 4, "logging_steps": 1}


def request(url: str, *, token: str | None = None, body: dict | None = None, timeout: float = 30) -> tuple[int, object]:
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=timeout) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, None


def wait_for(what: str, check, *, deadline: float, every: float = 1.0):
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise SystemExit(f"demo_start: {what} did not happen before the timeout")


@contextlib.contextmanager
def demo_server(timeout: float, marks: dict | None = None):
    """scripts/demo.sh on a fresh data folder and a free port, with the embedded defaults, until the demo
    checkpoint is registered; yields (base url, an engineer's API token, the demo's environment), then stops the
    demo (its process group). `marks` gets the seconds to each step."""
    marks = {} if marks is None else marks
    data_dir = Path(tempfile.mkdtemp(prefix="pairwise-demo-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PAIRWISE_DATA_DIR": str(data_dir), "PAIRWISE_ADDRESS": f"127.0.0.1:{port}"}
    env.pop("DATABASE_URL", None)
    env.pop("CELERY_BROKER_URL", None)  # the embedded defaults, as scripts/demo.sh runs
    started = time.monotonic()
    deadline = started + timeout
    demo = subprocess.Popen(["scripts/demo.sh"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for("/healthz", lambda: request(base + "/healthz")[0] == 200, deadline=deadline, every=0.25)
        marks["server answers"] = time.monotonic() - started
        token = subprocess.run([sys.executable, "manage.py", "drf_create_token", "engineer"], cwd=ROOT, env=env,
                               capture_output=True, text=True, check=True).stdout.split()[2]

        def demo_checkpoint():
            status, checkpoints = request(base + "/api/v1/checkpoints", token=token)
            return status == 200 and any(c["name"] == "tiny-sft" for c in checkpoints)

        wait_for("the demo checkpoint", demo_checkpoint, deadline=deadline, every=2.0)
        marks["demo checkpoint registered"] = time.monotonic() - started
        yield base, token, env
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=60)


def judged_export(base: str, token: str) -> int:
    """The judged demo's finished export, as the launch form picks it."""
    _, exports = request(base + "/api/v1/projects/demo-judged/exports", token=token)
    return next(e for e in exports if e["status"] == "done")["id"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(results_path("demo_start")))
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    marks = {}
    started = time.monotonic()
    with demo_server(args.timeout, marks) as (base, token, _):
        asked = time.monotonic()
        status, run = request(base + "/api/v1/runs", token=token, body={
            "kind": "dpo", "base_checkpoint": "tiny-sft", "export": judged_export(base, token),
            "config": DPO_CONFIG}, timeout=300)
        if status != 202:
            raise SystemExit(f"demo_start: the launch was refused ({status}): {run}")
        marks["first run launched"] = time.monotonic() - started
        marks["(the launch request alone)"] = time.monotonic() - asked
    rows = [{"step": step, "seconds": round(seconds, 1)} for step, seconds in marks.items()]
    print("| from scripts/demo.sh on a fresh data folder to | seconds |\n|---|---|")
    for row in rows:
        print(f"| {row['step']} | {row['seconds']} |")
    write_results(Path(args.out), {
        "bench": "demo_start", "machine": {**machine(), "load_1min_at_end": os.getloadavg()[0]}, "steps": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

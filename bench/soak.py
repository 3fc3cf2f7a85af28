"""Soak: many reviewers over HTTP while the database restarts and an export's worker is killed.

--reviewers simulated reviewers (own API tokens) loop `next` → `judgment` against gunicorn
(deploy/gunicorn.conf.py) until --judgments judgments are stored. Faults along the way:

- client retries: a submit that fails (503, a dropped connection, a timeout) is sent again with the same
  client_key, after the server's Retry-After; and --resend of the stored ones are sent again on purpose;
- dropped connections: --drop of the submits are written to a raw socket that is closed before the answer
  comes (half of them mid-body), then sent again properly with the same client_key;
- a PostgreSQL restart (stop -m immediate, --down seconds, start) at 40% of the judgments;
- at 60%: an export (queued as the API queues it) whose Celery worker is killed (SIGKILL) while it runs; the worker
  is started again under its name (it fails what it held) and the export retried over the API.

The bench starts its own PostgreSQL cluster (initdb into a temporary folder, a free port; as the
postgres user when run as root, since initdb refuses root) and its own Redis, and removes them after:
it never touches a server someone else uses. Afterwards it checks: every judgment the server
acknowledged (201, or 200 for a resend) is stored under the id it was given, none is stored twice, no pair
has more reviewers than the overlap, every error was a 503 with Retry-After (JSON) while the database was
down or just after it came back, and the export completed on retry. A Celery worker killed during a
training run is not part of it (runs belong to annotate/runs).

    .venv/bin/python bench/soak.py [--reviewers 50] [--judgments 20000] [--out bench/results/soak.json]

Prints a table and writes bench/results/soak.json; exits 1 when an invariant does not hold.
"""

import argparse
import asyncio
import contextlib
import json
import os
import pwd
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and the apps

from bench.common import (
    ROOT,
    check_database,
    deployment_gunicorn,
    free_port,
    machine,
    percentile,
    results_path,
    start_gunicorn,
    utc_timestamp,
    write_results,
)

RATIONALE = "The chosen answer divides the distance by the time and keeps the unit."
RESTART_AT, EXPORT_AT = 0.4, 0.6  # shares of --judgments at which the faults come
SETTLE_SECONDS = 3.0  # after the database is back, how long stale connections may still answer 503
ATTEMPTS = 30  # sends of one request before a simulated reviewer gives up on it


def postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise SystemExit("soak: PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin "
                         "(apt-get install postgresql)")
    return found[-1].parent


class OwnPostgres:
    """A PostgreSQL cluster of the bench's own: initdb into a folder, pg_ctl on a free port."""

    def __init__(self, folder: Path):
        self.bin = postgres_bin()
        self.data, self.port = folder / "pgdata", free_port()
        self.run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        folder.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            postgres = pwd.getpwnam("postgres")
            os.chown(folder, postgres.pw_uid, postgres.pw_gid)
            folder.parent.chmod(0o711)  # the postgres user passes through the bench's private folder
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        self.options = (f"-p {self.port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off "
                        "-c synchronous_commit=on -c max_connections=200")
        self.log = folder / "postgres.log"

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.run_as, str(self.bin / tool), *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SystemExit(f"soak: {tool} failed: {done.stderr.strip()}")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-o", self.options, "-l", str(self.log), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/pairwise"


class OwnRedis:
    def __init__(self):
        self.port = free_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True).stdout.strip() != b"PONG":
            if time.monotonic() > deadline:
                raise SystemExit("soak: redis-server did not start within 10 s")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class Worker:
    """`celery -A annotate worker` for exports, under a fixed name so a restart fails what it held."""

    NAME = "soak-exports@soak"

    def __init__(self, env: dict, log: Path):
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "annotate", "worker", "-P", "solo", "--without-mingle",
             "--without-gossip", "--without-heartbeat", "-n", self.NAME, "-l", "info"],
            cwd=ROOT, env={**env, "DB_CONN_MAX_AGE": "0"}, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while " ready." not in log.read_text(errors="replace").split("--- restart ---")[-1]:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"soak: the Celery worker did not start; see {log}")
            time.sleep(0.2)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        with self.log.open("a") as log:
            log.write("\n--- restart ---\n")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def prepare(*, reviewers: int, judgments: int) -> tuple[list[str], str]:
    """A project (overlap 3, 10% retests) with enough pairs for the judgments; reviewer and admin tokens."""
    from rest_framework.authtoken.models import Token

    from annotate.review.demo_data import DEMO_CRITERIA
    from annotate.review.import_sql import items_import
    from annotate.review.importing import items_parse
    from annotate.review.projects import project_create_or_update
    from annotate.review.users import user_add

    project, _, _ = project_create_or_update(
        slug="soak", name="Soak", instructions=DEMO_CRITERIA["instructions"],
        criteria_items=DEMO_CRITERIA["criteria"], overlap=3, retest_rate=0.1)
    prompts = judgments // 3 + judgments // 10 + 100  # retests take a tenth of the judgments
    rows = ({"prompt_id": f"q{i}", "prompt": f"A car travels {i} km in 2 hours. What is its average speed?",
             "responses": [{"text": f"{i / 2:g} km/h: distance over time.", "model": "sft", "model_version": "v3"},
                           {"text": f"{i * 2} km/h.", "model": "sft", "model_version": "v4"}]}
            for i in range(1, prompts + 1))
    items_import(project=project, items=items_parse(json.dumps(row) for row in rows))

    def token(username: str, role: str) -> str:
        user, _, _ = user_add(username=username, role=role, password=secrets.token_urlsafe(16))
        return Token.objects.get_or_create(user=user)[0].key

    return [token(f"soak-reviewer-{i:03d}", "reviewer") for i in range(reviewers)], token("soak-admin", "admin")


@dataclass
class Record:
    """What the simulated reviewers saw, shared by all of them."""

    target: int
    acknowledged: dict = field(default_factory=dict)  # client_key -> judgment id the server gave
    answers: list = field(default_factory=list)  # (monotonic time, kind, status, retry_after, json_body)
    transport_errors: list = field(default_factory=list)  # (monotonic time, kind, error)
    latencies_ms: list = field(default_factory=list)
    resends: int = 0
    resend_mismatches: int = 0
    drops: int = 0
    drops_stored_before_retry: int = 0  # the dropped send was stored; the retry got it back (Idempotent-Replayed)
    gave_up: int = 0
    exhausted: int = 0
    milestones: dict = field(default_factory=dict)  # share -> asyncio.Event, set when reached

    def stored(self, client_key: str, judgment_id: int) -> None:
        self.acknowledged[client_key] = judgment_id
        for share, event in self.milestones.items():
            if len(self.acknowledged) >= share * self.target:
                event.set()


async def drop_mid_request(port: int, path: str, token: str, body: bytes, *, mid_body: bool) -> None:
    """Send a submit on a raw connection and close it before the answer (or halfway through the body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    writer.write(head + (body[: len(body) // 2] if mid_body else body))
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def send(session, record: Record, kind: str, method: str, url: str, headers: dict, body: dict | None = None):
    """One request with retries: (status, parsed body, replayed) of the first answer that is not a 503 or a
    transport error (replayed: the server already had this client_key); None when every attempt failed."""
    import aiohttp

    for _ in range(ATTEMPTS):
        started = time.perf_counter()
        try:
            async with session.request(method, url, json=body, headers=headers,
                                       timeout=aiohttp.ClientTimeout(total=30)) as response:
                raw = await response.read()
                record.latencies_ms.append((time.perf_counter() - started) * 1000)
                is_json = response.headers.get("Content-Type", "").startswith("application/json")
                retry_after = response.headers.get("Retry-After")
                if response.status >= 400:
                    record.answers.append((time.monotonic(), kind, response.status, retry_after, is_json))
                if response.status == 503:
                    await asyncio.sleep(min(float(retry_after or 1), 5.0))
                    continue
                return (response.status, json.loads(raw) if raw and is_json else None,
                        response.headers.get("Idempotent-Replayed") == "true")
        except (TimeoutError, aiohttp.ClientError) as error:
            record.transport_errors.append((time.monotonic(), kind, type(error).__name__))
            await asyncio.sleep(0.5)
    record.gave_up += 1
    return None


async def reviewer_loop(session, base: str, port: int, token: str, record: Record, *, drop: float,
                        resend: float, rng: random.Random) -> None:
    headers = {"Authorization": f"Token {token}"}
    while len(record.acknowledged) < record.target:
        answer = await send(session, record, "next", "GET", f"{base}/api/v1/projects/soak/assignments/next", headers)
        if answer is None:
            continue
        status, assignment, _ = answer
        if status == 204:
            record.exhausted += 1
            return
        if status != 200:
            continue
        choice = rng.choice(["left", "right", "left", "right", "tie"])
        judgment = {"choice": choice, "strength": rng.randint(1, 3), "rationale": RATIONALE,
                    "criteria": {item["key"]: rng.choice(["left", "right", "tie"])
                                 for item in assignment["criteria"]["items"]},
                    "client_key": str(uuid.uuid4())}
        path = f"/api/v1/assignments/{assignment['id']}/judgment"
        dropped = rng.random() < drop
        if dropped:
            record.drops += 1
            try:
                await drop_mid_request(port, path, token, json.dumps(judgment).encode(), mid_body=rng.random() < 0.5)
            except OSError as error:
                record.transport_errors.append((time.monotonic(), "drop", type(error).__name__))
        answer = await send(session, record, "judgment", "POST", base + path, headers, judgment)
        if answer is None or answer[0] not in (200, 201):
            continue
        record.stored(judgment["client_key"], answer[1]["id"])
        record.drops_stored_before_retry += dropped and answer[2]
        if rng.random() < resend:  # the page sends it again (a double click, a lost answer): stored once
            record.resends += 1
            again = await send(session, record, "resend", "POST", base + path, headers, judgment)
            if again is None or again[0] not in (200, 201) or again[1]["id"] != answer[1]["id"] or not again[2]:
                record.resend_mismatches += 1


def export_queue(*, admin_username: str) -> dict:
    """Create an export of the soak project and send it to the workers (annotate/exports/services.py)."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from annotate.exports import services
    from annotate.exports.filters import filters_parse
    from annotate.review.models import Project

    try:
        export = services.export_create(project=Project.objects.get(slug="soak"),
                                        filters=filters_parse({"min_judgments": 2}),
                                        created_by=get_user_model().objects.get(username=admin_username))
        return {"id": export.pk}
    finally:
        connection.close()  # this thread's connection: the server it points at is restarted by the soak


def api_answer(api, method: str, path: str, deadline: float, ok=(200,)):
    """One admin call, waiting out 503s as a client should: a server thread whose connection predates the
    database restart answers 503 (with Retry-After) once before it reconnects. Any other failure stops the soak."""
    while True:
        answer = api.request(method, path)
        if answer.status_code != 503:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"soak: {method} {path} still answered 503 at the deadline")
        time.sleep(min(float(answer.headers.get("Retry-After") or 1), 2.0))
    if answer.status_code not in ok:
        raise SystemExit(f"soak: {method} {path} answered {answer.status_code}: {answer.text[:300]}")
    return answer


def kill_worker_mid_export(*, base: str, admin_token: str, worker_box: list, env: dict, log: Path,
                           database_url: str) -> dict:
    """Start an export, hold it where it reads the answers' table, SIGKILL its worker, start the
    worker again (in worker_box[0], so it is stopped at the end whatever happens), retry the export over the
    API; returns what happened."""
    import httpx
    import psycopg

    from annotate.exports.selectors import EXPORT_APPLICATION_NAME

    headers = {"Authorization": f"Token {admin_token}"}
    url = database_url.replace("postgres://", "postgresql://")
    # The export's own connection (its votes read), waiting on a lock.
    waiting = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
               f"AND application_name = '{EXPORT_APPLICATION_NAME}' AND pid <> pg_backend_pid()")
    started = time.monotonic()
    with httpx.Client(base_url=base, headers=headers, timeout=30) as api:
        # Hold the answers' table for the moment it takes the export to reach it: the kill lands mid-export.
        with psycopg.connect(url, autocommit=False) as blocker, psycopg.connect(url, autocommit=True) as watcher:
            blocker.execute("LOCK TABLE review_response IN ACCESS EXCLUSIVE MODE")
            # Queued as the API's POST does, but from here: while the lock holds, every server thread may be
            # busy with a reviewer waiting on it, and a request would wait with them.
            export = export_queue(admin_username="soak-admin")
            deadline = time.monotonic() + 60
            while not watcher.execute(waiting).fetchall():
                if time.monotonic() > deadline:
                    raise SystemExit("soak: the export never reached the answers' table")
                time.sleep(0.05)
            # Read from the database, not the API: the server's threads may all be waiting on the lock too.
            status_when_killed = watcher.execute("SELECT status FROM exports_export WHERE id = %s",
                                                 [export["id"]]).fetchone()[0]
            worker_box[0].kill()
            for (pid,) in watcher.execute(waiting).fetchall():
                watcher.execute("SELECT pg_terminate_backend(%s)", [pid])
            blocker.rollback()
        worker_box[0] = Worker(env, log)
        path = f"/api/v1/exports/{export['id']}"
        deadline = time.monotonic() + 60
        while (state := api_answer(api, "GET", path, deadline).json())["status"] != "failed":
            if time.monotonic() > deadline:
                raise SystemExit(f"soak: the killed export was not marked failed: {state}")
            time.sleep(0.2)
        failed_error = state["error"]
        deadline = time.monotonic() + 300
        retried = api_answer(api, "POST", f"{path}/retry", deadline, ok=(202,))
        while (state := api_answer(api, "GET", path, deadline).json())["status"] not in ("done", "failed"):
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
    return {"export": export["id"], "status_when_killed": status_when_killed, "error_after_kill": failed_error,
            "retry_status": retried.status_code, "final_status": state["status"], "attempt": state.get("attempt"),
            "snapshot_id": state.get("snapshot_id"), "rows": {k: (state.get("counts") or {}).get(k)
                                                              for k in ("train", "test")},
            "seconds": round(time.monotonic() - started, 1)}


async def run_soak(args, base: str, port: int, tokens: list[str], admin_token: str, pg: OwnPostgres,
                   worker_box: list, env: dict, folder: Path) -> dict:
    import aiohttp

    record = Record(target=args.judgments)
    restart_reached, export_reached = asyncio.Event(), asyncio.Event()
    record.milestones = {RESTART_AT: restart_reached, EXPORT_AT: export_reached}
    faults: dict = {}
    loop = asyncio.get_running_loop()

    async def restart_database() -> None:
        await restart_reached.wait()
        faults["database_down_at"] = time.monotonic()
        await loop.run_in_executor(None, pg.stop, "immediate")
        await asyncio.sleep(args.down)
        await loop.run_in_executor(None, pg.start)
        faults["database_up_at"] = time.monotonic()
        faults["judgments_when_restarted"] = int(RESTART_AT * args.judgments)

    async def kill_export_worker() -> None:
        await export_reached.wait()
        faults["export"] = await loop.run_in_executor(None, lambda: kill_worker_mid_export(
            base=base, admin_token=admin_token, worker_box=worker_box, env=env, log=folder / "worker.log",
            database_url=pg.url))

    started = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=len(tokens) + 4)
    async with aiohttp.ClientSession(connector=connector) as session:
        fault_tasks = [asyncio.create_task(restart_database()), asyncio.create_task(kill_export_worker())]
        await asyncio.gather(*(reviewer_loop(session, base, port, token, record, drop=args.drop, resend=args.resend,
                                             rng=random.Random(f"{args.seed}:{i}"))
                               for i, token in enumerate(tokens)))
        elapsed = time.perf_counter() - started
        # A fault that began runs to its end; one whose moment never came (every reviewer out of work) is dropped.
        for task, reached in zip(fault_tasks, (restart_reached, export_reached), strict=True):
            if not reached.is_set():
                task.cancel()
        for task in fault_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return {"record": record, "faults": faults, "seconds": elapsed}


def classify(record: Record, faults: dict) -> dict:
    """Every error answer and transport error, inside or outside the database's down window."""
    down, up = faults.get("database_down_at"), faults.get("database_up_at")

    def in_window(moment: float) -> bool:
        return down is not None and up is not None and down <= moment <= up + SETTLE_SECONDS

    statuses: dict = {}
    outside = []
    for moment, kind, status, retry_after, is_json in record.answers:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        proper_503 = status == 503 and retry_after is not None and is_json
        if not (proper_503 and in_window(moment)):
            outside.append(f"{kind} {status} (Retry-After {retry_after}, json {is_json})")
    transport_outside = [f"{kind} {error}" for moment, kind, error in record.transport_errors
                         if not in_window(moment) and kind != "drop"]
    return {"error_statuses": statuses, "errors_outside_window": len(outside), "first_outside": outside[:5],
            "transport_errors": len(record.transport_errors), "transport_errors_outside_window": len(transport_outside),
            "first_transport_outside": transport_outside[:5],
            "503_with_retry_after": sum(1 for _, _, s, r, j in record.answers if s == 503 and r and j)}


def check_acknowledged(record: Record) -> dict:
    """Every acknowledged judgment is stored under the id the server gave it; what was stored unacknowledged."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT client_key::text, id FROM review_judgment")
        stored = dict(cursor.fetchall())
    missing = [key for key, judgment_id in record.acknowledged.items() if stored.get(key) != judgment_id]
    return {"acknowledged": len(record.acknowledged), "acknowledged_not_stored": len(missing),
            "stored_not_acknowledged": len(set(stored) - set(record.acknowledged))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviewers", type=int, default=50)
    parser.add_argument("--judgments", type=int, default=20000, help="stop once this many are acknowledged")
    parser.add_argument("--drop", type=float, default=0.02, help="share of submits first sent on a dropped connection")
    parser.add_argument("--resend", type=float, default=0.02, help="share of stored judgments sent again on purpose")
    parser.add_argument("--down", type=float, default=3.0, help="seconds the database stays down")
    parser.add_argument("--workers", type=int, default=None,
                        help="gunicorn worker processes (default: deploy/gunicorn.conf.py's)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads per gunicorn worker (default: deploy/gunicorn.conf.py's)")
    parser.add_argument("--seed", type=int, default=0, help="the simulated reviewers' choices")
    parser.add_argument("--out", type=Path, default=results_path("soak"))
    args = parser.parse_args()
    for tool in ("redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            raise SystemExit(f"soak: {tool} not found (apt-get install redis-server)")

    # Stopped from outside (a test's timeout, Ctrl-C): the servers it started are still stopped and removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"soak: stopped by signal {signum}"))
    folder = Path(tempfile.mkdtemp(prefix="pairwise-soak-"))
    pg = OwnPostgres(folder / "pg")
    pg.start()
    redis = OwnRedis()
    worker_box: list = [None]
    server = None
    try:
        subprocess.run([*pg.run_as, str(pg.bin / "createdb"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                        "pairwise"], check=True)
        env = {**os.environ, "DEBUG": "false", "SECRET_KEY": secrets.token_urlsafe(50), "DATABASE_URL": pg.url,
               "CELERY_BROKER_URL": redis.url, "DJANGO_SETTINGS_MODULE": "annotate.settings",
               "PAIRWISE_DATA_DIR": str(folder / "data"), "PAIRWISE_SNAPSHOT_ROOT": str(folder / "snapshots"),
               # Each thread checks its kept connection before use: after the restart it reconnects at once.
               "DB_CONN_HEALTH_CHECKS": "true", "DB_CONN_MAX_AGE": "60", "LOG_LEVEL": "ERROR",
               "PAIRWISE_LOG_LEVEL": "error"}
        os.environ.update(env)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        import django

        django.setup()
        prepare_started = time.perf_counter()
        tokens, admin_token = prepare(reviewers=args.reviewers, judgments=args.judgments)
        prepare_seconds = time.perf_counter() - prepare_started
        from django.db import connection

        connection.close()  # the restart would break it
        worker_box[0] = Worker(env, folder / "worker.log")
        port = free_port()
        server = start_gunicorn(env=env, port=port, workers=args.workers, threads=args.threads)
        base = f"http://127.0.0.1:{port}"
        outcome = asyncio.run(run_soak(args, base, port, tokens, admin_token, pg, worker_box, env, folder))
        record, faults = outcome["record"], outcome["faults"]
        connection.close()
        errors = classify(record, faults)
        checks = {**check_acknowledged(record), **check_database(list(record.acknowledged.values()))}
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
        if worker_box[0] is not None:
            worker_box[0].stop()
        redis.stop()
        pg.stop("fast")
        shutil.rmtree(folder, ignore_errors=True)

    export = faults.get("export") or {}
    down_window = (round(faults["database_up_at"] - faults["database_down_at"], 1)
                   if "database_up_at" in faults else None)
    invariants = {
        "every acknowledged judgment stored": checks["acknowledged_not_stored"] == 0 and checks["lost"] == 0,
        "nothing stored twice": checks["duplicate_judgments"] == checks["duplicate_assignments"] == 0
        and record.resend_mismatches == 0,
        "no pair over-assigned": checks["over_assigned_pairs"] == 0 and checks["pair_counter_drift"] == 0,
        "every vote counted on its pair": checks["pair_votes_drift"] == 0,
        "only 503 with Retry-After, only while the database was down": errors["errors_outside_window"] == 0
        and errors["transport_errors_outside_window"] == 0,
        "database restarted mid-run": down_window is not None,
        "export killed mid-run completed on retry": export.get("status_when_killed") == "running"
        and export.get("final_status") == "done",
        "no reviewer gave up": record.gave_up == 0,
    }
    latencies = record.latencies_ms
    result = {
        "benchmark": "soak", "reviewers": args.reviewers, "judgments_target": args.judgments,
        "seconds": round(outcome["seconds"], 1), "prepare_seconds": round(prepare_seconds, 1),
        "judgments_per_s": round(len(record.acknowledged) / outcome["seconds"], 1),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "drops": record.drops, "drops_stored_before_retry": record.drops_stored_before_retry, "resends": record.resends, "resend_mismatches": record.resend_mismatches,
        "gave_up": record.gave_up, "reviewers_out_of_work": record.exhausted,
        "database_down_seconds": down_window, "database_down_planned_seconds": args.down,
        "errors": errors, "database_checks": checks,
        "export_worker_killed": {k: v for k, v in export.items()},
        "worker_killed_during_training_run": "not run: training runs belong to annotate/runs",
        "invariants": invariants, "ok": all(invariants.values()),
        "gunicorn": deployment_gunicorn(workers=args.workers, threads=args.threads),
        "faults": {"drop": args.drop, "resend": args.resend, "restart_at": RESTART_AT, "export_at": EXPORT_AT},
        "machine": machine(),
        "created_at": utc_timestamp(),
    }
    print(f"{'reviewers':>9} {'judgments':>9} {'seconds':>8} {'judg/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'drops':>6} {'resends':>7} {'503s':>5} {'db down s':>9} {'export':>14}")
    print(f"{args.reviewers:>9} {len(record.acknowledged):>9} {result['seconds']:>8} {result['judgments_per_s']:>7} "
          f"{result['p50_ms']:>7} {result['p99_ms']:>7} {record.drops:>6} {record.resends:>7} "
          f"{errors['503_with_retry_after']:>5} {down_window!s:>9} "
          f"{(export.get('final_status') or '-') + ' @' + str(export.get('attempt') or '-'):>14}")
    print("database:", ", ".join(f"{k}={v}" for k, v in checks.items()))
    print("errors:", json.dumps(errors))
    for name, held in invariants.items():
        print(f"{'ok  ' if held else 'FAIL'} {name}")
    write_results(args.out, result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Shared fixtures: a project with criteria, imported items, reviewers with API tokens."""

import json
import os
import shutil
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from filelock import FileLock
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotate.review.assignments import assignment_next
from annotate.review.demo_data import DEMO_CRITERIA
from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.judgments import judgment_submit
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add


def _own_folders_and_broker_per_worker() -> None:
    """Under pytest-xdist (scripts/test.sh runs two workers) each worker gets its own data folder, Redis
    database and one torch thread: test databases are already per worker, but export and run folders are
    numbered by database rows, a queue on a shared broker would hand one worker's task to the other's
    Celery worker, and two torch processes each spinning two threads on two cores slow each other tenfold."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    from django.conf import settings

    index = int(worker.removeprefix("gw"))
    data_dir = Path(settings.DATA_DIR) / worker
    settings.DATA_DIR = data_dir
    settings.SNAPSHOT_ROOT, settings.RUN_ROOT = data_dir / "snapshots", data_dir / "runs"
    settings.INPUTS_ROOT = data_dir / "inputs"
    settings.PAIRWISE_RUN_INPUT_ROOTS = [settings.SNAPSHOT_ROOT, settings.RUN_ROOT, settings.INPUTS_ROOT]
    os.environ["PAIRWISE_DATA_DIR"] = str(data_dir)  # for the manage.py and worker processes tests start
    if redis_url := os.environ.get("PAIRWISE_TEST_REDIS_URL"):
        base, _, database = redis_url.rpartition("/")
        os.environ["PAIRWISE_TEST_REDIS_URL"] = f"{base}/{(int(database or 0) - index) % 16}"
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


_own_folders_and_broker_per_worker()
# Threads for the tests' training runs: two when the suite runs alone, one per worker under pytest-xdist.
TORCH_THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2


TEST_SFT_STEPS = 20  # enough for a loadable checkpoint; tests never need it to be good


def built_once_root(tmp_path_factory) -> Path:
    """The folder of what built_once builds: in the run's temporary folder, above each xdist worker's own."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-N/, above each worker's popen-gwK/
    return root / "built-once"


def built_once(tmp_path_factory, name: str, build) -> Path:
    """The folder `name` (a relative path) that `build(folder)` writes, built once per test run and then only read.

    Under pytest-xdist the workers share it: the first to ask builds it under a file lock in the run's common
    temporary folder and the others wait and reuse it, so a session checkpoint is trained once rather than once
    per worker. It is built aside and renamed into place, so a build that fails leaves nothing to reuse.
    """
    folder = built_once_root(tmp_path_factory) / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):
        if not folder.exists():
            partial = folder.with_name(f".{folder.name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            build(partial)
            partial.rename(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """The tiny SFT checkpoint of tests that need a loadable model (20 steps of 8 problems): never written to by a
    test. Both test workers wait for it at the start of a run, so it is kept small."""
    from training.tiny import TinySFTConfig, build_tiny_sft

    return built_once(tmp_path_factory, "tiny/sft", lambda out: build_tiny_sft(
        out, TinySFTConfig(steps=TEST_SFT_STEPS, batch_size=8, warmup_steps=4, eval_tasks=3), log=lambda line: None))


@pytest.fixture(scope="session")
def tiny_snapshot(tmp_path_factory) -> Path:
    from training.tiny import write_tiny_snapshot

    return built_once(tmp_path_factory, "snapshots/tiny", lambda out: write_tiny_snapshot(out, train=24, test=8, seed=0))


@pytest.fixture(scope="session")
def grpo_checkpoint(tmp_path_factory) -> Path:
    """A tiny checkpoint trained long enough to write answers in the right shape, so that the answers of a
    group differ in reward (the 20-step one of the other tests writes noise: every reward 0, nothing to learn)."""
    from training.tiny import TinySFTConfig, build_tiny_sft

    return built_once(tmp_path_factory, "tiny-60/sft-60", lambda out: build_tiny_sft(
        out, TinySFTConfig(steps=60, warmup_steps=10, eval_tasks=2), log=lambda line: None))


def pytest_addoption(parser):
    parser.addoption(
        "--quick", action="store_true",
        help="the quick run for development: every test but those marked slow (they train a model, run many "
             "subprocesses, or repeat a start of the training stack that a quick test already makes) or e2e (they "
             "drive Chromium); CI runs the whole suite",
    )


FILE_DURATIONS = Path(__file__).with_name("file_durations.json")


def slowest_files_first(items: list, root: Path) -> list:
    """The items file by file, the files in descending order of their recorded seconds (tests/file_durations.json,
    scripts/record_test_durations.py), each file's tests in their own order.

    scripts/test.sh gives the two workers whole files (--dist loadfile) in this order (--no-loadscope-reorder):
    longest first, so the last files to start are short ones and both workers finish near the same time, where
    xdist's own order (most tests first) started the longest file, a single test, last. A file with no record
    counts as a file of median length."""
    recorded = json.loads(FILE_DURATIONS.read_text(encoding="utf-8")) if FILE_DURATIONS.is_file() else {}
    typical = sorted(recorded.values())[len(recorded) // 2] if recorded else 0.0
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(item.path.relative_to(root).as_posix(), len(first_seen))

    def order(item) -> tuple[float, int]:
        name = item.path.relative_to(root).as_posix()
        return -recorded.get(name, typical), first_seen[name]

    return sorted(items, key=order)


def pytest_collection_modifyitems(config, items):
    """--quick leaves out the slow and browser tests; the test files go slowest first; row-locking tests are
    skipped, saying so, on SQLite."""
    from django.conf import settings

    if config.getoption("quick"):
        quick = [item for item in items if "slow" not in item.keywords and "e2e" not in item.keywords]
        if len(quick) < len(items):
            kept = set(map(id, quick))
            config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
            items[:] = quick
    items[:] = slowest_files_first(items, config.rootpath)
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL row locks; set DATABASE_URL=postgres://... to run it")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


def make_items(count: int, *, responses: int = 2, model_prefix: str = "model") -> list[dict]:
    return [
        {
            "prompt_id": f"p-{i:04d}",
            "prompt": f"Question {i}: what is {i} + {i}?",
            "responses": [
                {"text": f"Answer {k} to question {i}: {2 * i + k}", "model": f"{model_prefix}-{k}", "model_version": f"v{k}"}
                for k in range(responses)
            ],
        }
        for i in range(count)
    ]


def import_rows(project, rows: list[dict]):
    return items_import(project=project, items=items_parse(json.dumps(row) for row in rows))


def judge_until_done(project, reviewer, pick, *, seconds: float = 20) -> int:
    """The reviewer judges until nothing is left for them; returns how many they judged.

    pick(assignment) gives left, right, tie or both_bad. Each pair takes `seconds` on a simulated clock,
    so nobody looks too fast and the judgments spread over time.
    """
    clock, judged = timezone.now(), 0
    while (assignment := assignment_next(project=project, reviewer=reviewer, now=clock)) is not None:
        clock += timedelta(seconds=seconds)
        choice = pick(assignment)
        judgment_submit(
            assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
            criteria={"correct": choice if choice in ("left", "right") else "tie", "complete": "tie"},
            rationale="Chosen for being right and clear.", client_key=uuid.uuid4(), now=clock,
        )
        judged += 1
    return judged


def answer_gold(project, reviewer, *, right: bool) -> None:
    """The reviewer's next item, a gold one, answered right or wrong."""
    assignment = assignment_next(project=project, reviewer=reviewer)
    pair = assignment.pair
    a_wins = (pair.prompt.gold_response_id == pair.response_a_id) == right
    choice = "left" if a_wins == assignment.a_on_left else "right"
    criteria = project.criteria_versions.order_by("-version").first().items
    judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
                    criteria={item["key"]: choice for item in criteria},
                    rationale="Checked the sum against the question twice.", client_key=uuid.uuid4())


@pytest.fixture
def make_project(db):
    def make(slug: str = "speed", **settings):
        project, _, _ = project_create_or_update(
            slug=slug, name=slug.title(), instructions=DEMO_CRITERIA["instructions"],
            criteria_items=DEMO_CRITERIA["criteria"], **settings,
        )
        return project

    return make


@pytest.fixture
def project(make_project):
    project = make_project()
    import_rows(project, make_items(5))
    return project


@pytest.fixture
def make_user(db):
    def make(username: str, role: str = "reviewer"):
        user, _, _ = user_add(username=username, role=role, password="a-long-test-password")
        return user

    return make


@pytest.fixture
def client_for(db):
    def make(user) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
        return client

    return make


@pytest.fixture
def valid_judgment():
    def make(choice: str = "left", **overrides) -> dict:
        body = {
            "choice": choice, "strength": 2, "criteria": {"correct": choice if choice in ("left", "right") else "tie",
                                                          "complete": "tie"},
            "rationale": "The left one shows every step and gets the unit right.",
            "client_key": str(uuid.uuid4()),
        }
        body.update(overrides)
        return body

    return make


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture
def own_data_folders(settings, tmp_path):
    """Snapshot, run and input folders of this test's own. Database rows roll back after each test but folders
    stay, and export folders are numbered per project: a test that seeds the demo (whose judged project is
    exported at once) would otherwise find the folder an earlier test on the same worker left."""
    data_dir = tmp_path / "data"
    settings.DATA_DIR = data_dir
    settings.SNAPSHOT_ROOT, settings.RUN_ROOT = data_dir / "snapshots", data_dir / "runs"
    settings.INPUTS_ROOT = data_dir / "inputs"
    settings.PAIRWISE_RUN_INPUT_ROOTS = [settings.SNAPSHOT_ROOT, settings.RUN_ROOT, settings.INPUTS_ROOT]
    return data_dir


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Tests make many users; the production hasher is slow on purpose."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def jobs_in_this_thread(monkeypatch):
    """With no broker, a job handed off after commit (annotate/jobs.py enqueue) runs in the test's own thread as a
    worker would, instead of in a thread of its own that could not see the test's uncommitted rows."""
    from annotate import jobs

    monkeypatch.setattr(jobs, "start_thread", lambda name, task_name, *args: jobs.celery_app.tasks[task_name](*args))


@pytest.fixture
def task_set_checks_in_this_thread(monkeypatch):
    """A task set's check, handed off after commit, runs in the test's own thread as a worker would, instead of in a
    thread of its own that could not see the test's uncommitted rows (tests/runs/test_task_sets_and_inputs.py runs
    it in a thread and in a real worker)."""
    from annotate.celery import app as celery_app

    monkeypatch.setattr("annotate.runs.task_sets.enqueue",
                        lambda task_name, *args, **options: celery_app.tasks[task_name](*args))

"""Inputs are chosen, not typed: task sets made from the families or uploaded (checked by the training command's
own loader), exports picked for DPO, a project's prompts or a task set for a comparison; paths only through the
API, under the run input folders."""

import hashlib
import html
import json
import re
import uuid
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from annotate.celery import app as celery_app
from annotate.errors import UserMistake
from annotate.exports.models import Export
from annotate.runs.compare import compare_launch
from annotate.runs.evaluation import eval_launch
from annotate.runs.launch import run_launch
from annotate.runs.models import Run, TaskSet
from annotate.runs.task_sets import CHECK_TASK_SET, task_set_make, task_set_resolve, task_set_upload
from tests.conftest import import_rows, make_items
from tests.exports.helpers import REDIS_URL, Worker, configure_celery, needs_redis, wait_for

pytestmark = pytest.mark.django_db

TWO_STEPS = {"max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1, "report_to": ["none"]}


@pytest.fixture
def finished_export(make_project, tiny_snapshot):
    project = make_project("speed")
    return Export.objects.create(project=project, filters={}, status=Export.Status.DONE, out_dir=str(tiny_snapshot),
                                 counts={"train": 24, "test": 8})


def test_a_task_set_made_from_families_is_checked_kept_by_hash_and_listed(settings, make_user):
    made = task_set_make(families=["speed", "code"], variant="heldout", n=6, seed=3, created_by=make_user("eve",
                                                                                                         "engineer"))
    path = Path(made.path)
    assert path.is_file() and path.is_relative_to(settings.INPUTS_ROOT)
    assert made.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and path.name == f"{made.sha256}.jsonl"
    assert (made.count, made.families, made.variant) == (6, {"code": 3, "speed": 3}, "heldout")
    assert made.scorers["math"].startswith("math@") and made.scorers["code"].startswith("code@")
    assert made.name == "speed+code · heldout · 6 · seed 3"
    assert made.recipe == {"families": ["speed", "code"], "variant": "heldout", "n": 6, "seed": 3}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert {row["meta"]["variant"] for row in rows} == {"heldout"}

    with pytest.raises(UserMistake, match="holds the same tasks as task set 'speed\\+code · heldout · 6 · seed 3'"):
        task_set_make(families=["speed", "code"], variant="heldout", n=6, seed=3, name="again")
    with pytest.raises(UserMistake, match="unknown family 'sped'; choose from"):
        task_set_make(families=["sped"], n=6, seed=3)
    assert TaskSet.objects.count() == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing half-written beside it


def test_an_uploaded_task_file_with_bad_lines_is_refused_whole_by_line(settings, django_capture_on_commit_callbacks,
                                                                        task_set_checks_in_this_thread):
    """An upload is checked once recorded (in-process here, as in the embedded default); a refused one keeps its
    one line and no file, and the same name may be uploaded again."""
    good = {"task_id": "t-1", "kind": "math", "prompt": "What is 2 + 3?", "answer": "5"}
    lines = [json.dumps(good), json.dumps({"task_id": "t-2", "kind": "math", "prompt": ""}), "{not json"]
    upload = SimpleUploadedFile("my-tasks.jsonl", "\n".join(lines).encode())
    with django_capture_on_commit_callbacks(execute=True):
        refused = task_set_upload(upload=upload)
    refused.refresh_from_db()
    message = refused.error
    assert refused.status == "refused" and not TaskSet.objects.exists()
    assert message.startswith("my-tasks.jsonl: line 2: ") and "line 3: " in message and "\n" not in message
    assert str(settings.INPUTS_ROOT) not in message  # the user's file name, not where the server kept it
    assert not [p for p in (Path(settings.INPUTS_ROOT) / "task-sets").iterdir()]

    with django_capture_on_commit_callbacks(execute=True):
        kept = task_set_upload(upload=SimpleUploadedFile("my-tasks.jsonl", json.dumps(good).encode() + b"\n"))
    kept.refresh_from_db()
    assert (kept.name, kept.status, kept.count, kept.source, kept.families, kept.variant) == (
        "my-tasks", "ready", 1, "uploaded", {"math": 1}, "")
    assert Path(kept.path).name == f"{kept.sha256}.jsonl" and list(TaskSet.records.all()) == [kept]


def test_the_runs_page_makes_and_uploads_task_sets_and_says_what_went_wrong(make_user, client,
                                                                            django_capture_on_commit_callbacks,
                                                                            task_set_checks_in_this_thread):
    client.force_login(make_user("eve", "engineer"))
    with django_capture_on_commit_callbacks(execute=True):  # a made set is checked off the request, as an upload
        made = client.post("/runs/task-sets", {"source": "make", "families": ["arithmetic"], "variant": "train",
                                               "n": "4", "seed": "1", "name": "sums"}, follow=True)
    assert "Task set &#x27;sums&#x27; is being checked; the list below shows its result." in made.content.decode()
    page = client.get("/runs/").content.decode()
    row = page.split('id="task-set-list"')[1].split("</table>")[0]
    assert "sums" in row and "Train GRPO on this task set" in row and "checking" not in row
    assert TaskSet.records.get(name="sums").count == 4
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/runs/task-sets", {"source": "upload", "file": SimpleUploadedFile("x.jsonl", b"[1]\n")})
    refused = client.get("/runs/").content.decode()
    row = refused.split('id="task-set-list"')[1].split("</table>")[0]
    assert "refused: x.jsonl: line 1: " in row and "Forget it" in row
    forget = re.search(r'action="(/runs/task-sets/\d+/forget)"', row).group(1)
    assert "Task set &#x27;x&#x27; forgotten." in client.post(forget, follow=True).content.decode()
    assert not TaskSet.records.filter(name="x").exists()
    assert client.post("/runs/task-sets", {"source": "make", "families": [], "n": "4", "seed": "1"},
                       follow=True).content.decode().count("Task set: no family chosen") == 1


@pytest.mark.slow
def test_dpo_launches_from_a_picked_export_and_grpo_from_a_task_set(base_checkpoint, finished_export,
                                                                    engineer_api):
    launched = engineer_api.post("/api/v1/runs", {"kind": "dpo", "base_checkpoint": "tiny-sft",
                                                  "export": finished_export.pk, "config": TWO_STEPS}, format="json")
    assert launched.status_code == 202, launched.json()
    run = Run.objects.get(pk=launched.json()["id"])
    assert (run.export_id, run.snapshot_path) == (finished_export.pk, finished_export.out_dir)
    assert run.config["snapshot"] == finished_export.out_dir

    task_set = task_set_make(families=["speed"], n=4, seed=1)
    grpo = run_launch(kind="grpo", base_checkpoint="tiny-sft", task_set=task_set.name, enqueue=False,
                      config={**TWO_STEPS, "num_generations": 4, "max_completion_length": 8})
    assert (grpo.task_set_id, grpo.tasks_path) == (task_set.pk, task_set.path)
    # A path that is a task set's file is linked to the set as well.
    by_path = run_launch(kind="grpo", base_checkpoint="tiny-sft", tasks=task_set.path, enqueue=False,
                         config={**TWO_STEPS, "num_generations": 4, "max_completion_length": 8})
    assert by_path.task_set_id == task_set.pk


def test_picked_inputs_that_cannot_be_used_are_one_line(base_checkpoint, finished_export, engineer_api, tmp_path):
    running = Export.objects.create(project=finished_export.project, filters={}, status=Export.Status.RUNNING,
                                    out_dir=str(tmp_path / "not-yet"))
    cases = [
        ({"kind": "dpo", "export": 999}, "export '999' is not an export of this app; pick one from a project's "
                                         "Exports page"),
        ({"kind": "dpo", "export": running.pk}, f"export {running.pk} of speed is running, not done; a run trains "
                                                "on a finished snapshot"),
        ({"kind": "dpo", "export": finished_export.pk, "snapshot": finished_export.out_dir},
         "give the snapshot once: a path or the app's export, not both"),
        ({"kind": "grpo", "export": finished_export.pk}, "a grpo run takes a task set, not a snapshot"),
        ({"kind": "grpo", "task_set": "nothing"}, "task_set 'nothing' is not a task set (none exists yet: make one "
                                                  "on the Training runs page)"),
        ({"kind": "grpo", "tasks": "/etc/passwd"}, "tasks /etc/passwd is outside the folders runs read from"),
    ]
    for body, detail in cases:
        refused = engineer_api.post("/api/v1/runs", {"base_checkpoint": "tiny-sft", **body}, format="json")
        assert refused.status_code == 400 and refused.json()["detail"].startswith(detail), (body, refused.json())
    assert not Run.objects.exists()


def test_a_comparison_takes_a_projects_prompts_or_a_task_set(base_checkpoint, second_checkpoint, make_project,
                                                            settings):
    project = make_project("speed")
    import_rows(project, make_items(3))
    run = compare_launch(checkpoints=["tiny-sft", "tiny-nudged"], prompts_project="speed", project="speed",
                         enqueue=False)
    prompts = Path(run.config["prompts"])
    assert prompts.is_relative_to(settings.INPUTS_ROOT)
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    assert [row["prompt_id"] for row in rows] == ["p-0000", "p-0001", "p-0002"]
    assert rows[0]["prompt"] == [{"role": "user", "content": "Question 0: what is 0 + 0?"}]

    task_set = task_set_make(families=["speed"], variant="heldout", n=3, seed=1)
    from_tasks = compare_launch(checkpoints=["tiny-sft", "tiny-nudged"], task_set=task_set.pk, project="speed",
                                enqueue=False)
    assert from_tasks.config["prompts"] == task_set.path
    with pytest.raises(UserMistake, match="give the prompts once"):
        compare_launch(checkpoints=["tiny-sft", "tiny-nudged"], task_set=task_set.pk, prompts_project="speed",
                       project="speed", enqueue=False)
    evaluation = eval_launch(checkpoints=["tiny-sft"], task_set=task_set.name, enqueue=False)
    assert (evaluation.task_set_id, evaluation.config["tasks"]) == (task_set.pk, task_set.path)


def test_an_exports_row_offers_dpo_on_its_snapshot_and_the_form_comes_prefilled(base_checkpoint, finished_export,
                                                                                 make_user, client):
    client.force_login(make_user("eve", "engineer"))
    exports_page = client.get("/projects/speed/exports/").content.decode()
    assert f'href="/runs/?dpo_on_export={finished_export.pk}#launch">Train DPO on this snapshot' in exports_page
    runs_page = client.get(f"/runs/?dpo_on_export={finished_export.pk}").content.decode()
    assert f'<option value="{finished_export.pk}" selected>Speed · export {finished_export.pk} · 24 train / 8 test' \
        in runs_page


@pytest.fixture
def unusable_exports(finished_export, tmp_path, tmp_path_factory, settings):
    """Three finished exports a launch refuses: its snapshot folder deleted, a snapshot outside the folders runs read
    from, a snapshot whose manifest cannot be read."""
    import shutil

    from tests.conftest import built_once_root

    inside = tmp_path / "inside"
    settings.PAIRWISE_RUN_INPUT_ROOTS = [inside, built_once_root(tmp_path_factory)]  # the tiny snapshot's folder
    deleted = inside / "deleted"
    outside = shutil.copytree(finished_export.out_dir, tmp_path / "elsewhere")
    broken = shutil.copytree(finished_export.out_dir, inside / "broken")
    (broken / "manifest.json").write_text("{not json")

    def export(folder):
        return Export.objects.create(project=finished_export.project, filters={}, status=Export.Status.DONE,
                                     out_dir=str(folder), counts={"train": 24, "test": 8})

    return {"deleted": export(deleted), "outside": export(outside), "broken": export(broken)}


def test_the_launch_form_offers_only_snapshots_a_launch_takes(base_checkpoint, finished_export, unusable_exports,
                                                              make_user, client, engineer_api):
    client.force_login(make_user("ed", "engineer"))
    page = client.get("/runs/").content.decode()
    offered = re.findall(r'<option value="(\d+)"[^>]*>Speed · export', page)
    assert offered == [str(finished_export.pk)]
    assert "criteria mixed" not in page
    # The server's check stands: picked through the API, each is refused in one line.
    refusals = {
        "deleted": f"export {unusable_exports['deleted'].pk}'s snapshot folder {unusable_exports['deleted'].out_dir} "
                   "is gone; export the project again",
        "outside": f"snapshot {unusable_exports['outside'].out_dir} is outside the folders runs read from",
    }
    for name, detail in refusals.items():
        refused = engineer_api.post("/api/v1/runs", {"base_checkpoint": "tiny-sft", "kind": "dpo",
                                                     "export": unusable_exports[name].pk}, format="json")
        assert refused.status_code == 400 and refused.json()["detail"].startswith(detail), refused.json()
    assert not Run.objects.exists()


@pytest.mark.parametrize(("name", "reason"), [
    ("deleted", "snapshot folder {out_dir} is gone; export the project again"),
    ("outside", "snapshot {out_dir} is outside the folders runs read from"),
    ("broken", "manifest.json is not valid JSON"),
])
def test_a_link_to_a_snapshot_the_form_leaves_out_says_why(base_checkpoint, finished_export, unusable_exports,
                                                           make_user, client, name, reason):
    client.force_login(make_user("ed", "engineer"))
    export = unusable_exports[name]
    page = client.get(f"/runs/?dpo_on_export={export.pk}").content.decode()
    note = re.search(r'<p class="muted small" id="launch-snapshot-note">(.*?)</p>', page, re.S)
    assert note is not None and "That snapshot is not offered below: " in note.group(1)
    assert html.escape(reason.format(out_dir=export.out_dir), quote=True) in note.group(1)
    assert f'<option value="{export.pk}"' not in page
    assert "launch-snapshot-note" not in client.get(f"/runs/?dpo_on_export={finished_export.pk}").content.decode()


def test_task_sets_over_the_api_made_uploaded_listed_and_refused_by_line(engineer_api,
                                                                        django_capture_on_commit_callbacks,
                                                                        task_set_checks_in_this_thread):
    with django_capture_on_commit_callbacks(execute=True):  # checked off the request once the row is committed
        made = engineer_api.post("/api/v1/task-sets", {"families": ["convert"], "variant": "heldout", "n": 3,
                                                       "seed": 4}, format="json")
    assert made.status_code == 202 and made.json()["status"] == "checking", made.json()
    body = engineer_api.get(f"/api/v1/task-sets/{made.json()['id']}").json()
    assert body["status"] == "ready"
    assert (body["name"], body["count"], body["families"], body["variant"]) == (
        "convert · heldout · 3 · seed 4", 3, {"convert": 3}, "heldout")
    upload = {"file": SimpleUploadedFile("bad.jsonl", b'{"kind": "math"}\n')}
    with django_capture_on_commit_callbacks(execute=True):  # the check runs in-process once the row is committed
        refused = engineer_api.post("/api/v1/task-sets", upload, format="multipart")
    assert refused.status_code == 202 and refused.json()["status"] == "checking"
    shown = engineer_api.get(f"/api/v1/task-sets/{refused.json()['id']}").json()
    assert shown["status"] == "refused" and shown["error"].startswith("bad.jsonl: line 1: task_id must be")
    assert engineer_api.delete(f"/api/v1/task-sets/{refused.json()['id']}").status_code == 204
    assert engineer_api.post("/api/v1/task-sets", {"families": "speed", "n": 3, "seed": 1},
                             format="json").json() == {"detail": 'families must be a list of task families, such as '
                                                                 '["speed", "code"]'}
    assert [row["name"] for row in engineer_api.get("/api/v1/task-sets").json()] == ["convert · heldout · 3 · seed 4"]


def test_the_django_admin_lists_task_sets_and_changes_only_their_name(make_user, client):
    admin = make_user("ada", "admin")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    kept = task_set_make(families=["simple"], n=2, seed=1)
    client.force_login(admin)
    assert kept.name in client.get("/admin/runs/taskset/").content.decode()
    assert client.get("/admin/runs/taskset/add/").status_code == 403  # made or uploaded where the file is checked
    page = client.get(f"/admin/runs/taskset/{kept.pk}/change/").content.decode()
    assert 'name="name"' in page and 'name="sha256"' not in page


# Long enough for a good set's check (a training-command process) on two slow, busy cores; far under the sleepy
# set's three minutes.
CHECK_BOUND_S = 20


@pytest.fixture
def task_set_worker(tmp_path, settings, monkeypatch):
    """Task-set checks sent through Redis to a real Celery worker on a queue of its own, its checks bounded to
    CHECK_BOUND_S (PAIRWISE_TASK_SET_CHECK_S, read by the worker)."""
    queue = f"task-sets-test-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("PAIRWISE_INPUTS_ROOT", str(settings.INPUTS_ROOT))
    monkeypatch.setenv("PAIRWISE_TASK_SET_CHECK_S", str(CHECK_BOUND_S))
    saved = {key: celery_app.conf[key] for key in ("broker_url", "task_always_eager", "task_routes")}
    configure_celery(broker_url=REDIS_URL, task_always_eager=False,
                     task_routes={CHECK_TASK_SET: {"queue": queue}})
    worker = Worker(queue=queue, name="task-sets@pairwise-tests", snapshot_root=tmp_path / "snapshots",
                    log=tmp_path / "worker.log")
    yield worker
    worker.stop()
    configure_celery(**saved)


SLEEPY = {"task_id": "sleepy", "kind": "code", "prompt": "Write double(x).", "entry_point": "double",
          "reference_solution": "import time\ndef double(x):\n    time.sleep(60)\n    return 2 * x",
          "public_tests": [{"args": [1], "expected": 2}], "limits": {"time_s": 60}}


@pytest.mark.postgres
@needs_redis
@pytest.mark.django_db(transaction=True)
def test_an_upload_is_checked_off_the_request_by_a_worker_and_a_slow_one_is_refused_at_the_bound(
        engineer_api, task_set_worker, settings):
    """A task file whose reference solutions sleep a minute each held the upload's request until they ended; now
    the API answers at once with the set `checking`, a worker checks it, and the check stops at its bound."""
    good = {"task_id": "t-1", "kind": "math", "prompt": "What is 2 + 3?", "answer": "5"}
    uploaded = {}
    for name, rows in (("sums", [good]), ("sleepy", [{**SLEEPY, "task_id": f"sleepy-{i}"} for i in range(3)])):
        body = "".join(json.dumps(row) + "\n" for row in rows).encode()
        answer = engineer_api.post("/api/v1/task-sets", {"file": SimpleUploadedFile(f"{name}.jsonl", body)},
                                   format="multipart")
        assert (answer.status_code, answer.json()["status"]) == (202, "checking"), answer.json()
        uploaded[name] = answer.json()["id"]

    def settled(name: str) -> dict | None:
        shown = engineer_api.get(f"/api/v1/task-sets/{uploaded[name]}").json()
        return shown if shown["status"] != "checking" else None

    sums = wait_for(lambda: settled("sums"), "the good set's check")
    assert (sums["status"], sums["count"], sums["error"]) == ("ready", 1, None), task_set_worker.log.read_text()[-2000:]
    assert Path(sums["path"]).is_relative_to(settings.INPUTS_ROOT) and Path(sums["path"]).is_file()
    sleepy = wait_for(lambda: settled("sleepy"), "the slow set's check")
    assert sleepy["status"] == "refused" and sleepy["error"].startswith(
        f"checking sleepy.jsonl took over {CHECK_BOUND_S} s (PAIRWISE_TASK_SET_CHECK_S)"), sleepy
    assert [row["name"] for row in engineer_api.get("/api/v1/task-sets").json()] == ["sleepy", "sums"]
    with pytest.raises(UserMistake, match=f"^task_set 'sleepy' was refused: checking sleepy.jsonl took over {CHECK_BOUND_S} s"):
        task_set_resolve("sleepy")  # what a launch, evaluation or comparison naming it is told


@pytest.mark.django_db(transaction=True)
def test_with_no_broker_an_upload_answers_before_its_check_which_runs_in_a_thread(engineer_api, settings):
    """The embedded default runs Celery tasks eagerly: the check would run inside the upload's request. It is
    handed to a thread instead, as a training run is, so the request answers with the set still checking."""
    assert celery_app.conf.task_always_eager  # the embedded default, as scripts/demo.sh runs
    good = {"task_id": "t-1", "kind": "math", "prompt": "What is 2 + 3?", "answer": "5"}
    answer = engineer_api.post("/api/v1/task-sets", {"file": SimpleUploadedFile("sums.jsonl", json.dumps(good).encode())},
                               format="multipart")
    assert answer.status_code == 202 and answer.json()["status"] == "checking"
    ready = wait_for(lambda: TaskSet.records.filter(pk=answer.json()["id"], status="ready").first(),
                     "the upload's check in its thread")
    assert ready.count == 1


def test_a_refused_upload_does_not_keep_its_name_from_a_set_made_later(settings, django_capture_on_commit_callbacks,
                                                                        task_set_checks_in_this_thread):
    with django_capture_on_commit_callbacks(execute=True):
        refused = task_set_upload(upload=SimpleUploadedFile("sums.jsonl", b'{"kind": "math"}\n'), name="sums")
    refused.refresh_from_db()
    assert refused.status == "refused"
    made = task_set_make(families=["arithmetic"], variant="train", n=3, seed=1, name="sums")
    assert made.status == "ready" and list(TaskSet.records.values_list("name", flat=True)) == ["sums"]

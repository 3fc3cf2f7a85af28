"""Reward-model runs from the app, a reward model in a GRPO run's lineage, and open task sets from a project's prompts.

The end-to-end test trains a real reward model (two CPU steps on the tiny checkpoint) through the local backend; the
lineage tests register a reward model, a GRPO run scored by it and its checkpoint by hand, with run.json as the
training command writes it, so the pages are checked without a GRPO run on a reward model."""

import json
from pathlib import Path

import pytest

from annotate.errors import UserMistake
from annotate.exports.models import Export
from annotate.exports.pipeline import prompt_split
from annotate.runs.checkpoints import checkpoint_register, is_reward_model
from annotate.runs.execute import run_execute
from annotate.runs.launch import run_config_check, run_launch
from annotate.runs.models import Checkpoint, Run, TaskSet
from tests.conftest import TORCH_THREADS, import_rows, make_items
from tests.training.helpers import write_unlearnable_tasks
from training.snapshot import read_manifest

pytestmark = pytest.mark.django_db

TWO_STEPS = {"learning_rate": 1e-3, "max_steps": 2, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8,
             "logging_steps": 1, "torch_threads": TORCH_THREADS, "use_cpu": True, "report_to": ["none"]}


@pytest.fixture
def finished_export(make_project, tiny_snapshot):
    return Export.objects.create(project=make_project("speed"), filters={}, status=Export.Status.DONE,
                                 out_dir=str(tiny_snapshot), counts={"train": 24, "test": 8})


@pytest.fixture
def reward_model(base_checkpoint, tmp_path):
    """A reward model's checkpoint folder as `python -m training reward` saves one (a sequence classifier's config),
    registered by hand: its weights are a stand-in, nothing here loads them."""
    folder = tmp_path / "reward-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"],
                                                    "num_labels": 1}))
    (folder / "model.safetensors").write_bytes(b"a score head on the tiny model")
    return checkpoint_register(uri=str(folder), name="tiny-rm", parent=base_checkpoint)


def launch(api, **body):
    return api.post("/api/v1/runs", body, format="json")


@pytest.mark.slow
def test_a_reward_run_trains_through_the_local_backend_and_registers_a_reward_model(
        engineer_api, base_checkpoint, finished_export, make_user, client, tmp_path):
    started = launch(engineer_api, kind="reward", base_checkpoint="tiny-sft", export=finished_export.pk,
                     config=TWO_STEPS)
    assert started.status_code == 202, started.json()
    body = started.json()
    assert body["kind"] == "reward" and body["snapshot"]["export"] == {"id": finished_export.pk, "project": "speed"}

    assert run_config_check(body["id"], enqueue=False).status == "queued"
    run = run_execute(run_id=body["id"], worker="tests")
    assert run.status == "succeeded", (run.error, run.log_tail[-2000:])
    made = Checkpoint.objects.get(run=run)
    assert made.name == f"tiny-sft · reward · run {run.pk}" and made.parent == base_checkpoint
    assert is_reward_model(made)
    assert json.loads((Path(made.uri) / "config.json").read_text())["architectures"][0].endswith(
        "ForSequenceClassification")

    detail = engineer_api.get(body["url"]).json()
    accuracy = next(row for row in detail["reward_eval"] if row["key"] == "accuracy")
    assert accuracy["pairs"] == 8 and accuracy["too_few_to_judge"]  # the tiny snapshot's 8 test pairs
    client.force_login(make_user("ed", "engineer"))
    run_page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Test split (reward model)" in run_page and "too few to judge" in run_page
    # TRL evaluated on the test split during training: a test-accuracy curve on the run page.
    evaluated = [row for row in run.metrics if "eval_accuracy" in row]
    assert evaluated and evaluated[-1]["step"] == 2
    chart = run_page.split('id="chart-accuracy"')[1].split("</div>")[0]
    assert "<svg" in chart and "test accuracy" in chart
    assert f">{made.name}</a>" in run_page

    # The reward model is offered as a GRPO run's reward model, not as a base.
    launch_form = client.get("/runs/").content.decode()
    base_select = launch_form.split('name="base_checkpoint"')[1].split("</select>")[0]
    scorer_select = launch_form.split('name="reward_model"')[1].split("</select>")[0]
    assert made.name not in base_select and "tiny-sft" in base_select
    assert made.name in scorer_select and ">tiny-sft<" not in scorer_select
    refused = launch(engineer_api, kind="dpo", base_checkpoint=made.name, export=finished_export.pk, config=TWO_STEPS)
    assert refused.status_code == 400 and refused.json()["detail"].startswith(
        f"base_checkpoint {made.name!r} is a reward model (a sequence classifier that scores answers)")

    # A GRPO run on open tasks from the project's prompts, scored by that reward model: the app writes its folder
    # into the config and the training command's own check accepts it.
    import_rows(finished_export.project, make_items(4))
    open_set = engineer_api.post("/api/v1/task-sets", {"prompts_project": "speed"}, format="json")
    assert open_set.status_code == 201, open_set.json()
    grpo = launch(engineer_api, kind="grpo", base_checkpoint="tiny-sft", task_set=open_set.json()["id"],
                  reward_model=made.name, config={"max_steps": 1, "num_generations": 2,
                                                  "per_device_train_batch_size": 2, "use_cpu": True})
    assert grpo.status_code == 202, grpo.json()
    queued = run_config_check(grpo.json()["id"], enqueue=False)
    assert queued.status == "queued", queued.error
    assert queued.reward_model == made and queued.config["reward_model"] == made.uri
    assert grpo.json()["reward_model"]["trained_by"]["id"] == run.pk


def test_a_reward_run_needs_a_snapshot_and_a_text_model_as_its_base(engineer_api, base_checkpoint, reward_model,
                                                                   tmp_path, tiny_snapshot):
    tasks = str(tmp_path / "tasks.jsonl")
    not_text = ("is a reward model (a sequence classifier that scores answers), not a model that writes text, so it "
                "cannot be the base of a {kind} run; pick a causal LM such as the one it was trained from")
    cases = [
        ({"kind": "reward", "base_checkpoint": "tiny-sft"},
         "snapshot is required for a reward run: give a snapshot (an export of a project, or a snapshot folder)"),
        ({"kind": "reward", "base_checkpoint": "tiny-sft", "tasks": tasks}, "a reward run takes a snapshot, not a task set"),
        ({"kind": "reward", "base_checkpoint": "tiny-rm", "snapshot": str(tiny_snapshot)},
         "base_checkpoint 'tiny-rm' " + not_text.format(kind="reward")),
        ({"kind": "dpo", "base_checkpoint": "tiny-rm", "snapshot": str(tiny_snapshot)},
         "base_checkpoint 'tiny-rm' " + not_text.format(kind="dpo")),
        ({"kind": "grpo", "base_checkpoint": str(reward_model.pk), "tasks": tasks},
         "base_checkpoint 'tiny-rm' " + not_text.format(kind="grpo")),
        ({"kind": "grpo", "base_checkpoint": "tiny-sft", "tasks": tasks, "reward_model": "tiny-sft"},
         "reward_model 'tiny-sft' is not a reward model (its config.json names no ...ForSequenceClassification "
         "architecture and no reward run made it); train one with a reward run on a snapshot and pick its checkpoint"),
        ({"kind": "grpo", "base_checkpoint": "tiny-sft", "tasks": tasks, "reward_model": "tiny-rn"},
         "reward_model 'tiny-rn' is not a registered checkpoint (registered: tiny-rm, tiny-sft); register it with "
         "manage.py register_checkpoint PATH"),
        ({"kind": "dpo", "base_checkpoint": "tiny-sft", "snapshot": str(tiny_snapshot), "reward_model": "tiny-rm"},
         "reward_model is for grpo runs (a reward model scores their answers); a dpo run takes none: leave it out"),
        ({"kind": "grpo", "base_checkpoint": "tiny-sft", "tasks": tasks, "config": {"reward_model": reward_model.uri}},
         "config: reward_model is set by the launch from the reward model you pick (a registered reward-model "
         "checkpoint, by name or id); pick it as reward_model and remove it from the config"),
        ({"kind": "grpo", "base_checkpoint": "tiny-sft", "tasks": tasks, "reward_model": "tiny-rm",
          "config": {"reward_model": str(tmp_path / "elsewhere")}},
         f"config: reward_model {tmp_path / 'elsewhere'} is not the folder of the reward model picked, 'tiny-rm' "
         f"({reward_model.uri}); remove reward_model from the config"),
    ]
    for body, detail in cases:
        refused = launch(engineer_api, **body)
        assert (refused.status_code, refused.json()) == (400, {"detail": detail}), body
    assert not Run.objects.exists()


def test_a_reward_model_is_refused_for_evaluations_and_comparisons(make_user, client_for, engineer_api,
                                                                   base_checkpoint, reward_model, project, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    refusal = ("checkpoint 'tiny-rm' is a reward model (a sequence classifier that scores answers), not a model that "
               "writes text, so it cannot {what}; pick a causal LM such as the one it was trained from")
    evaluated = engineer_api.post("/api/v1/runs/evaluate", {"checkpoints": ["tiny-sft", "tiny-rm"],
                                                            "tasks": str(tasks)}, format="json")
    assert (evaluated.status_code, evaluated.json()) == (
        400, {"detail": refusal.format(what="write the answers an evaluation scores")})
    admin = client_for(make_user("ada", "admin"))
    compared = admin.post("/api/v1/runs/compare", {"checkpoints": ["tiny-sft", "tiny-rm"], "prompts_project": "speed",
                                                   "project": "speed"}, format="json")
    assert (compared.status_code, compared.json()) == (
        400, {"detail": refusal.format(what="write the answers a comparison samples")})
    assert not Run.objects.exists()


def test_the_exports_link_opens_the_form_on_a_reward_run(make_user, client, base_checkpoint, reward_model,
                                                        finished_export):
    client.force_login(make_user("eve", "engineer"))
    page = client.get(f"/runs/?reward_on_export={finished_export.pk}").content.decode()
    assert '<option value="reward" selected>' in page
    assert f'<option value="{finished_export.pk}" selected>' in page
    assert "max_steps: 20" in page  # the reward run's own starting config


def grpo_child_of(reward_model, base_checkpoint, tiny_snapshot, finished_export, tmp_path, *, recorded_hash: str):
    """A succeeded reward run that made `reward_model`, a succeeded GRPO run scored by it whose run.json records
    `recorded_hash` as its reward model's, and the checkpoint that GRPO run made."""
    reward_run = Run.objects.create(
        kind="reward", status="succeeded", base_checkpoint=base_checkpoint, folder=str(tmp_path / "reward-run"),
        snapshot_path=str(tiny_snapshot), snapshot_manifest=read_manifest(tiny_snapshot), export=finished_export,
        record={"results": {"test": {
            "n": 40, "accuracy": 0.725, "interval": [0.5721, 0.8393], "mean_margin": 0.41,
            "chosen_shorter": {"n": 6, "accuracy": 0.5, "interval": [0.1876, 0.8124]},
            "chosen_longer": {"n": 34, "accuracy": 0.7647, "interval": [0.6, 0.8756]},
            "length_correlation": {"pearson": 0.12, "answers": 80}, "left_out_over_max_length": 3},
            "train_over_max_length": {"pairs": 11, "of": 360, "max_length": 512}}})
    Checkpoint.objects.filter(pk=reward_model.pk).update(run=reward_run)  # registered before its run existed here
    grpo_run = Run.objects.create(
        kind="grpo", status="succeeded", base_checkpoint=base_checkpoint, reward_model=reward_model,
        folder=str(tmp_path / "grpo-run"), tasks_path=str(tmp_path / "open.jsonl"),
        record={"reward_model": {"path": reward_model.uri, "content_hash": recorded_hash,
                                 "identity": f"reward_model@{recorded_hash}"}})
    child = Checkpoint.objects.create(name=f"tiny-sft · grpo · run {grpo_run.pk}", uri=str(tmp_path / "grpo-ckpt"),
                                      content_hash="sha256:" + "c" * 64, parent=base_checkpoint, run=grpo_run)
    return reward_run, grpo_run, child


def test_a_grpo_childs_page_names_the_reward_model_that_shaped_it(make_user, client, engineer_api, base_checkpoint,
                                                                 reward_model, tiny_snapshot, finished_export,
                                                                 tmp_path):
    reward_run, grpo_run, child = grpo_child_of(reward_model, base_checkpoint, tiny_snapshot, finished_export,
                                                tmp_path, recorded_hash=reward_model.content_hash)
    snapshot_id = reward_run.snapshot_manifest["snapshot_id"]
    client.force_login(make_user("eve", "engineer"))
    page = client.get(f"/checkpoints/{child.pk}/").content.decode()
    shaped = page.split('id="shaped-by">')[1].split("</p>")[0]
    assert f'<a href="/checkpoints/{reward_model.pk}/"><strong>tiny-rm</strong></a>' in shaped
    assert f'<a href="/runs/{reward_run.pk}/">run {reward_run.pk}</a>' in shaped
    assert f"{snapshot_id} of project tiny-demo" in shaped
    # snapshot -> reward model -> GRPO run -> checkpoint, in that order
    lineage = page.split('class="lineage"')[1].split("</ol>")[0]
    steps = [lineage.index(text) for text in (snapshot_id, ">tiny-rm</a>", f">run {grpo_run.pk}</a> (grpo",
                                              "This checkpoint")]
    assert steps == sorted(steps)
    assert "Reward model mismatch" not in page

    run_page = client.get(f"/runs/{grpo_run.pk}/").content.decode()
    run_lineage = run_page.split('class="lineage"')[1].split("</ol>")[0]
    steps = [run_lineage.index(text) for text in (snapshot_id, ">tiny-rm</a>", "This run", child.name)]
    assert steps == sorted(steps)

    made_by = engineer_api.get(f"/api/v1/checkpoints/{child.pk}").json()["made_by"]
    assert made_by["reward_model"]["name"] == "tiny-rm" and made_by["reward_model"]["mismatch"] is None
    assert made_by["reward_model"]["trained_by"]["snapshot"]["snapshot_id"] == snapshot_id

    scorer_page = client.get(f"/checkpoints/{reward_model.pk}/").content.decode()
    assert "A reward model" in scorer_page
    scored = scorer_page.split('id="scored-runs"')[1].split("</section>")[0]
    assert f">run {grpo_run.pk}</a>" in scored and f">{child.name}</a>" in scored


def test_a_reward_model_hash_that_differs_from_run_json_is_shown_and_neither_record_changes(
        make_user, client, base_checkpoint, reward_model, tiny_snapshot, finished_export, tmp_path):
    other = "sha256:" + "d" * 64
    _, grpo_run, child = grpo_child_of(reward_model, base_checkpoint, tiny_snapshot, finished_export, tmp_path,
                                       recorded_hash=other)
    client.force_login(make_user("eve", "engineer"))
    for url in (f"/checkpoints/{child.pk}/", f"/runs/{grpo_run.pk}/"):
        page = client.get(url).content.decode()
        alert = page.split('id="reward-model-mismatch">')[1].split("</p>")[0]
        assert f"has content hash {other}, not {reward_model.content_hash} of the picked checkpoint" in alert, url
    hash_before = reward_model.content_hash
    grpo_run.refresh_from_db()
    reward_model.refresh_from_db()
    assert grpo_run.record["reward_model"]["content_hash"] == other
    assert reward_model.content_hash == hash_before and grpo_run.reward_model_id == reward_model.pk
    # Nor can a later save point the run at other weights: which reward model scored it is written once.
    grpo_run.reward_model = None
    with pytest.raises(ValueError, match=rf"run {grpo_run.pk}: its origin \(reward_model_id\) is written once"):
        grpo_run.save()


def test_a_reward_runs_test_figures_show_with_intervals_and_the_too_few_rule(
        make_user, client, base_checkpoint, reward_model, tiny_snapshot, finished_export, tmp_path):
    reward_run, _, _ = grpo_child_of(reward_model, base_checkpoint, tiny_snapshot, finished_export, tmp_path,
                                     recorded_hash=reward_model.content_hash)
    client.force_login(make_user("eve", "engineer"))
    table = client.get(f"/runs/{reward_run.pk}/").content.decode().split('id="reward-test-split"')[1].split(
        "</table>")[0]
    rows = {cells[0]: cells[1:] for cells in (
        [cell.split(">", 1)[1] for cell in row.split("</td>")[:-1]] for row in table.split("<tr>")[2:])}
    assert rows["accuracy (chosen scored above rejected)"] == ["40", "0.725", "0.572–0.839"]
    assert rows["accuracy, chosen answer shorter"] == ["6", "too few to judge"]
    assert rows["accuracy, chosen answer longer"] == ["34", "0.765", "0.600–0.876"]
    assert rows["reward vs answer length (Pearson r)"] == ["40", "0.120", ""]
    # Pairs over max_length are not scored (one rule in training and test scoring), and the page says how many.
    assert rows["test pairs longer than max_length: not scored"] == ["3", "—", ""]
    assert rows["train pairs longer than max_length: left out of training"] == ["11", "—", ""]


@pytest.fixture
def prompts_project(make_project):
    project = make_project("speed")
    items = make_items(30)
    items.append({**make_items(1)[0], "prompt_id": "p-same-text"})  # one text under two ids: one prompt
    import_rows(project, items)
    return project


def task_rows(task_set: TaskSet) -> list[dict]:
    return [json.loads(line) for line in Path(task_set.path).read_text().splitlines()]


def test_an_open_task_set_from_a_projects_prompts_holds_each_prompt_once(engineer_api, prompts_project, make_project):
    made = engineer_api.post("/api/v1/task-sets", {"prompts_project": "speed"}, format="json")
    assert made.status_code == 201, made.json()
    body = made.json()
    assert (body["count"], body["families"], body["scorers"]) == (30, {"open": 30}, {"open": "none"})
    assert body["source"] == "prompts" and body["name"] == "speed prompts · open · all"
    rows = task_rows(TaskSet.objects.get(pk=body["id"]))
    assert [row["task_id"] for row in rows] == [f"speed/p-{i:04d}" for i in range(30)]
    assert {row["kind"] for row in rows} == {"open"} and "p-same-text" not in json.dumps(rows)

    sides = {}
    for variant in ("train", "heldout"):
        made = engineer_api.post("/api/v1/task-sets", {"prompts_project": "speed", "variant": variant, "seed": 3,
                                                       "test_ratio": 0.3}, format="json")
        assert made.status_code == 201, made.json()
        assert made.json()["variant"] == variant
        sides[variant] = {row["task_id"] for row in task_rows(TaskSet.objects.get(pk=made.json()["id"]))}
    assert sides["train"].isdisjoint(sides["heldout"]) and len(sides["train"] | sides["heldout"]) == 30
    expected = {f"speed/{prompt.external_id}" for prompt in prompts_project.prompts.exclude(external_id="p-same-text")
                if prompt_split(prompt_key=prompt.content_key, seed=3, test_ratio=0.3) == "test"}
    assert sides["heldout"] == expected and sides["heldout"]

    make_project("empty")
    cases = [
        ({"prompts_project": "empty"}, "project empty has no prompts to make open tasks from; import some first"),
        ({"prompts_project": "nowhere"}, "no project 'nowhere' to take prompts from; give a project's slug"),
        ({"prompts_project": "speed", "variant": "test"}, "variant must be one of all, train, heldout, got 'test'"),
        ({"prompts_project": "speed", "families": ["speed"]},
         "unknown field 'families'; an open task set from a project's prompts takes name, prompts_project, seed, "
         "test_ratio, variant"),
    ]
    for body, detail in cases:
        refused = engineer_api.post("/api/v1/task-sets", body, format="json")
        assert (refused.status_code, refused.json()) == (400, {"detail": detail}), body
    assert TaskSet.objects.count() == 3


@pytest.mark.slow
def test_a_grpo_runs_kl_reference_is_a_registered_checkpoint_whose_folder_the_launch_gives(base_checkpoint,
                                                                                            reward_model, tmp_path,
                                                                                            grpo_checkpoint):
    """A second round starts from a GRPO child and keeps its KL term on the SFT parent; the parent is picked like
    the base, by name or id, and the trainer gets the registered folder, never a path as typed."""
    tasks = str(write_unlearnable_tasks(tmp_path / "tasks.jsonl"))
    parent = checkpoint_register(uri=str(grpo_checkpoint), name="tiny-sft-60")
    launched = run_launch(kind="grpo", base_checkpoint="tiny-sft", tasks=tasks, enqueue=False,
                          config={"beta": 0.04, "reference_checkpoint": str(parent.pk)})
    assert launched.config["reference_checkpoint"] == parent.uri != base_checkpoint.uri
    assert launched.resolved_config["reference_checkpoint"] == parent.uri
    assert launched.config["base_checkpoint"] == base_checkpoint.uri

    refusals = [
        ({"beta": 0.04, "reference_checkpoint": str(tmp_path)},
         f"reference_checkpoint {str(tmp_path)!r} is not a registered checkpoint (registered: tiny-rm, tiny-sft, "
         "tiny-sft-60); "
         "register it with manage.py register_checkpoint PATH"),
        ({"beta": 0.04, "reference_checkpoint": "tiny-rm"},
         "reference_checkpoint 'tiny-rm' is a reward model (a sequence classifier that scores answers), not a model "
         "that writes text, so it cannot be the reference of a KL term; pick a causal LM such as the one it was "
         "trained from"),
        ({"reference_checkpoint": "tiny-sft"},
         "config: reference_checkpoint is used only by the KL term, and beta is 0.0; set beta above 0 or remove it"),
        ({"beta": 0.04, "reference_checkpoint": ""},
         "config: reference_checkpoint is empty; give a checkpoint folder, or null for the base checkpoint"),
    ]
    for config, message in refusals:
        with pytest.raises(UserMistake) as refused:
            run_launch(kind="grpo", base_checkpoint="tiny-sft", tasks=tasks, enqueue=False, config=config)
        assert str(refused.value) == message, config
    assert Run.objects.count() == 1

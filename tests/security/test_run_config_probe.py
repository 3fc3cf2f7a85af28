"""A security probe of training runs launched from the app: a run's config cannot steer the run (no value
becomes another key, the keys the launch sets come out as the app set them, nothing leaves the server,
no file outside the run input folders is read), and the runs endpoints refuse hostile input in one line.
Each refusal is a 4xx, and nothing is queued or written: no run row, an empty run root."""

# ruff: noqa: F811 - the fixtures below are imported from the runs tests by name

import json
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from annotate.runs import execute, launch
from annotate.runs.audit import audit_create
from annotate.runs.launch import CONFIG_REFUSED, run_config_check
from annotate.runs.models import AuditItem, AuditJudgment, Checkpoint, Run
from annotate.runs.queue import run_folder_for
from tests.runs.conftest import (  # noqa: F401 - fixtures
    base_checkpoint,
    engineer_api,
    grpo_run,
    run_root,
    second_checkpoint,
)
from tests.security.helpers import assert_one_json_line

pytestmark = pytest.mark.django_db

DPO_STEPS = {"learning_rate": 1e-3, "max_steps": 2, "per_device_train_batch_size": 4, "torch_threads": 1,
             "use_cpu": True, "report_to": ["none"]}
GRPO_STEPS = {"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2, "torch_threads": 1,
              "use_cpu": True, "report_to": ["none"]}


@pytest.fixture
def tasks_file(tmp_path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"task_id": "sum-1", "kind": "math", "prompt": "What is 2 + 2?", "answer": "4"}) + "\n")
    return path


@pytest.fixture
def outside() -> Path:
    """A folder outside the run input folders (the tests' own temporary folders), as any server file is."""
    folder = Path(tempfile.mkdtemp(prefix="pairwise-outside-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def refused(response, status: int = 400) -> str:
    """The one-line refusal's text; nothing was queued and the run root holds nothing."""
    detail = assert_one_json_line(response, status)["detail"]
    assert not Run.objects.exists()
    return detail


def refused_by_the_check(response) -> str:
    """The line the training command's check refused an accepted launch with: answered 202 `checking`, then the
    run failed with "config refused: <the line>" and its config never resolved, so nothing was queued."""
    assert (response.status_code, response.json()["status"]) == (202, "checking"), response.json()
    run = run_config_check(response.json()["id"], enqueue=False)
    assert (run.status, run.resolved_config) == ("failed", None), run.error
    assert run.error.startswith(CONFIG_REFUSED) and "\n" not in run.error
    return run.error.removeprefix(CONFIG_REFUSED)


def assert_run_root_empty(root: Path) -> None:
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.startswith(".check-")]


def launch_dpo(api, snapshot, config):
    return api.post("/api/v1/runs", {"kind": "dpo", "base_checkpoint": "tiny-sft", "snapshot": str(snapshot),
                                     "config": config}, format="json")


def launch_grpo(api, tasks, config):
    return api.post("/api/v1/runs", {"kind": "grpo", "base_checkpoint": "tiny-sft", "tasks": str(tasks),
                                     "config": config}, format="json")


# --- High: a list value became extra arguments ------------------------------------------------------------


@pytest.mark.slow
def test_a_list_item_cannot_move_a_grpo_runs_output_out_of_the_run_root(engineer_api, base_checkpoint, tasks_file,
                                                                        outside, run_root):
    elsewhere = outside / "x"
    detail = refused_by_the_check(launch_grpo(engineer_api, tasks_file,
                                 {**GRPO_STEPS, "reward_weights": [1.0, f"--output_dir={elsewhere}"]}))
    assert detail == (f"config: reward_weights item '--output_dir={elsewhere}' is not a value of reward_weights; a "
                      "list item cannot be an option (set each key on its own line)")
    assert not elsewhere.exists()
    assert_run_root_empty(run_root)


@pytest.mark.slow
def test_a_list_item_cannot_swap_a_dpo_runs_base_checkpoint(engineer_api, base_checkpoint, tiny_snapshot,
                                                            tiny_checkpoint, tmp_path, run_root):
    unregistered = tmp_path / "unregistered"
    shutil.copytree(tiny_checkpoint, unregistered)
    detail = refused_by_the_check(launch_dpo(engineer_api, tiny_snapshot, {
        **DPO_STEPS, "use_peft": True, "lora_target_modules": ["q_proj", f"--base_checkpoint={unregistered}"]}))
    assert detail.startswith("config: lora_target_modules item '--base_checkpoint=")
    assert Checkpoint.objects.get().name == "tiny-sft"  # the lineage names only what was registered
    assert_run_root_empty(run_root)


def test_a_launch_key_the_parser_resolves_otherwise_is_refused(engineer_api, base_checkpoint, tiny_snapshot,
                                                               tmp_path, monkeypatch, run_root, outside):
    """Whatever a config could do to the training command's parser, the keys the launch sets are compared
    with what the app resolved before anything is queued (here a stand-in check moves output_dir)."""
    stand_in = tmp_path / "stand_in_check.py"
    stand_in.write_text(textwrap.dedent(f'''
        import json, sys, yaml
        config = yaml.safe_load(open(sys.argv[sys.argv.index("--config") + 1]))
        print(json.dumps({{**config, "output_dir": {str(outside / "x")!r}}}))
    '''))
    monkeypatch.setattr(launch, "training_command", lambda *args: [sys.executable, str(stand_in), *args])
    detail = refused_by_the_check(launch_dpo(engineer_api, tiny_snapshot, DPO_STEPS))
    assert detail.startswith(f"config: output_dir came out of the training command's parser as '{outside / 'x'}', "
                             "not '") and detail.endswith("as the launch set it; nothing was queued")
    assert_run_root_empty(run_root)


# --- Medium: aliases, keys that leave the server, files outside the input folders ---------------------------


def test_yaml_aliases_are_refused_before_they_expand(engineer_api, base_checkpoint, tiny_snapshot, run_root):
    # 8^6 copies of nine words from under 500 bytes of YAML
    bomb = "max_steps: 2\nmodel_init_kwargs:\n  dtype: float32\n  a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"  a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 8)}]\n" for n in range(1, 7))
    assert len(bomb) < 500
    detail = refused(launch_dpo(engineer_api, tiny_snapshot, bomb))
    assert detail == "config: line 5 repeats a value with the YAML alias *a0; write the value out instead"
    assert_run_root_empty(run_root)


@pytest.mark.parametrize(("key", "value"), [
    ("push_to_hub", True), ("hub_token", "hf_probe_secret_token"), ("hub_model_id", "someone/tiny"),
    ("trust_remote_code", True), ("report_to", "wandb"), ("report_to", ["tensorboard", "wandb"]),
])
def test_keys_that_leave_the_server_are_refused(engineer_api, base_checkpoint, tiny_snapshot, run_root,
                                                key, value):
    detail = refused(launch_dpo(engineer_api, tiny_snapshot, {**DPO_STEPS, key: value}))
    if key == "report_to":
        assert detail == ("config: report_to 'wandb' would send metrics off this server; a run launched from the "
                          "app reports to tensorboard (in its folder) or none")
    elif key == "hub_token":
        assert detail.startswith("config: hub_token is a credential, and a config is stored with its run; remove it")
    elif key == "trust_remote_code":
        assert detail.startswith("config: trust_remote_code is refused: it runs code shipped with a checkpoint")
    else:
        assert detail.startswith(f"config: {key} is refused: a run launched from the app stays on this server")
    assert "hf_probe_secret_token" not in detail  # never shown, never stored
    assert_run_root_empty(run_root)


NESTED_PROBES = [
    ({"model_init_kwargs": {"trust_remote_code": True}},
     "config: model_init_kwargs.trust_remote_code is refused: it runs code shipped with a checkpoint"),
    ({"model_init_kwargs": '{"trust_remote_code": true}'},
     "config: model_init_kwargs.trust_remote_code is refused: it runs code shipped with a checkpoint"),
    ({"model_init_kwargs": '{"token": "hf_probe_secret_token"}'},
     "config: model_init_kwargs.token is a credential, and a config is stored with its run; remove it"),
    ({"model_init_kwargs": {"dtype": "float32", "revision": "main"}},
     "config: model_init_kwargs.revision is not handed to the model loader; model_init_kwargs takes only dtype, "),
    ({"deepspeed": {"zero_optimization": {"stage": 2, "wandb_api_key": "hf_probe_secret_token"}}},
     "config: deepspeed.zero_optimization.wandb_api_key is a credential"),
    ({"deepspeed": {"zero_optimization": {"stage": 2}, "hub_model_id": "someone/tiny"}},
     "config: deepspeed.hub_model_id is refused: a run launched from the app stays on this server"),
    ({"lr_scheduler_kwargs": '{"report_to": ["wandb"]}'},
     "config: lr_scheduler_kwargs.report_to 'wandb' would send metrics off this server"),
    ("max_steps: 2\nmodel_init_kwargs: '{\"token\": \"hf_probe_secret_token\"}'\n",
     "config: model_init_kwargs.token is a credential"),
]


@pytest.mark.parametrize("kind", ["dpo", "grpo", "reward"])
@pytest.mark.parametrize(("config", "message"), NESTED_PROBES)
def test_nested_settings_are_held_to_the_rules_of_the_top_level(engineer_api, base_checkpoint, tiny_snapshot,
                                                                 tasks_file, run_root, kind, config, message):
    """The probe's nested requests (a mapping, JSON text of one, YAML text) for every kind a config launches: one
    line, nothing queued, and a credential is never repeated, stored or shown."""
    inputs = {"tasks": str(tasks_file)} if kind == "grpo" else {"snapshot": str(tiny_snapshot)}
    answer = engineer_api.post("/api/v1/runs", {"kind": kind, "base_checkpoint": "tiny-sft", **inputs,
                                                "config": config}, format="json")
    assert refused(answer).startswith(message)
    assert "hf_probe_secret_token" not in answer.content.decode()
    assert_run_root_empty(run_root)


def test_a_step_count_past_its_bound_is_refused_before_anything_is_queued(engineer_api, base_checkpoint, tiny_snapshot,
                                                                          run_root, monkeypatch):
    monkeypatch.delenv("PAIRWISE_MAX_TRAIN_STEPS", raising=False)
    detail = refused_by_the_check(launch_dpo(engineer_api, tiny_snapshot, {**DPO_STEPS, "max_steps": 10**12}))
    assert detail == ("config: max_steps is 1000000000000, past the bound of 1000000; lower it, or raise the bound by "
                      "setting PAIRWISE_MAX_TRAIN_STEPS where the training command runs")
    assert_run_root_empty(run_root)


def test_a_token_recorded_before_the_refusal_is_never_shown(engineer_api, base_checkpoint, make_user, client):
    """A run recorded with a credential in its config (launched before hub keys were refused, or registered
    from a folder) shows the key but never its value, on the API or on the run page."""
    from django.urls import reverse

    run = Run.objects.create(kind="dpo", base_checkpoint=base_checkpoint, folder="", config={
        "base_checkpoint": base_checkpoint.uri, "hub_token": "hf_probe_secret_token",
        "callbacks": [{"wandb_api_key": "probe-secret-key"}], "learning_rate": 0.001,
    }, resolved_config={"hub_token": "hf_probe_secret_token", "push_to_hub": False})
    answer = engineer_api.get(reverse("run-detail", args=[run.pk]))
    assert answer.status_code == 200
    assert answer.json()["config"]["hub_token"] == "(hidden)" and answer.json()["config"]["learning_rate"] == 0.001
    assert answer.json()["resolved_config"] == {"hub_token": "(hidden)", "push_to_hub": False}
    client.force_login(make_user("ed", "engineer"))
    page = client.get(reverse("run-page", args=[run.pk])).content.decode()
    assert "hub_token" in page
    for secret in ("hf_probe_secret_token", "probe-secret-key"):
        assert secret not in answer.content.decode() and secret not in page


def test_the_local_backend_runs_the_trainer_offline(base_checkpoint, tmp_path, monkeypatch):
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(execute, "POLL_S", 0.1)
    script = tmp_path / "print_env.py"
    script.write_text("import os\nfor name in ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE', 'HF_DATASETS_OFFLINE'):\n"
                      "    print(f'{name}={os.environ.get(name)}')\n")
    monkeypatch.setattr(execute, "training_command", lambda *args: [sys.executable, str(script), *args])
    run = Run.objects.create(kind="dpo", base_checkpoint=base_checkpoint, folder="")
    run.folder = str(run_folder_for(run.pk))
    run.config = {"base_checkpoint": base_checkpoint.uri, "output_dir": run.folder}
    run.save()
    run = execute.run_execute(run_id=run.pk, worker="w1@test")
    assert run.status == "succeeded", (run.error, run.log_tail)
    assert "HF_HUB_OFFLINE=1" in run.log_tail and "TRANSFORMERS_OFFLINE=1" in run.log_tail
    assert "HF_DATASETS_OFFLINE=1" in run.log_tail


@pytest.mark.parametrize("key", ["accelerator_config", "deepspeed", "fsdp_config"])
def test_a_path_valued_key_outside_the_input_folders_is_never_read(engineer_api, base_checkpoint, tiny_snapshot,
                                                                   outside, run_root, key):
    secret = outside / "settings.json"
    secret.write_text(json.dumps({"database_password_of_the_server": "hunter2"}))
    detail = refused(launch_dpo(engineer_api, tiny_snapshot, {**DPO_STEPS, key: str(secret)}))
    assert detail.startswith(f"config: {key} {secret} is outside the folders runs read from (")
    assert "database_password" not in detail and "hunter2" not in detail
    assert_run_root_empty(run_root)


def test_input_files_outside_the_input_folders_are_never_read(engineer_api, base_checkpoint, second_checkpoint,
                                                              tmp_path, outside, make_user, client_for, make_project,
                                                              run_root):
    secret = outside / "passwords.txt"
    secret.write_text("root:hunter2:0:0\n")
    linked = tmp_path / "tasks-link.jsonl"  # inside the input folders, pointing out of them
    linked.symlink_to(secret)
    for tasks in (secret, linked):
        detail = refused(launch_grpo(engineer_api, tasks, GRPO_STEPS))
        assert detail.startswith(f"tasks {tasks} is outside the folders runs read from (") and "hunter2" not in detail
    detail = refused(engineer_api.post("/api/v1/runs", {"kind": "dpo", "base_checkpoint": "tiny-sft",
                                                        "snapshot": str(outside)}, format="json"))
    assert detail.startswith(f"snapshot {outside} is outside the folders runs read from (")
    detail = refused(engineer_api.post("/api/v1/runs/evaluate", {"checkpoints": ["tiny-sft"], "tasks": str(secret)},
                                       format="json"))
    assert detail.startswith(f"tasks {secret} is outside the folders runs read from (")
    make_project(slug="speed")
    admin = client_for(make_user("ada", "admin"))
    detail = refused(admin.post("/api/v1/runs/compare", {"checkpoints": ["tiny-sft", "tiny-nudged"],
                                                         "prompts": str(secret), "project": "speed"}, format="json"))
    assert detail.startswith(f"prompts {secret} is outside the folders runs read from (") and "hunter2" not in detail
    assert_run_root_empty(run_root)


# --- Low ----------------------------------------------------------------------------------------------------


def test_only_admins_compare_checkpoints_into_a_project(engineer_api, base_checkpoint, make_user, client_for, client,
                                                        tmp_path, make_project):
    project = make_project(slug="compare")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt_id": "p1", "prompt": "What is 2 + 3?"}) + "\n")
    body = {"checkpoints": ["tiny-sft", "tiny-sft"], "prompts": str(prompts), "project": project.slug}
    assert refused(engineer_api.post("/api/v1/runs/compare", body, format="json"), 403) == "only admins can do this"
    client.force_login(make_user("erin", "engineer"))
    assert client.post("/runs/compare", body).status_code == 403
    assert "Only admins can compare checkpoints" in client.get("/runs/").content.decode()
    # An admin gets through to the comparison's own checks (here: one checkpoint twice).
    admin = client_for(make_user("ada", "admin"))
    assert refused(admin.post("/api/v1/runs/compare", body, format="json")) == (
        "choose at least 2 different checkpoints to compare")
    assert not project.prompts.exists()


def _served(client) -> dict:
    served = client.get("/api/v1/audits/next")
    assert served.status_code == 200
    return served.json()


@pytest.mark.parametrize(("rationale", "detail"), [
    ("x" * 10_001, "rationale is 10,001 characters; at most 10,000: shorten it"),
    ("The reasoning holds\x00 here.", "rationale contains a NUL character; remove it"),
])
def test_an_audit_rationale_is_bounded_and_has_no_nul(grpo_run, make_user, client_for, rationale, detail):
    audit_create(run=grpo_run, size=2, overlap=2)
    ann = client_for(make_user("ann"))
    item = _served(ann)
    answer = ann.post(f"/api/v1/audits/{item['id']}/judgment",
                      {"verdict": "yes", "rationale": rationale, "token": item["token"]}, format="json")
    assert assert_one_json_line(answer, 400) == {"detail": detail}
    assert not AuditJudgment.objects.exists()


@pytest.mark.parametrize("seed", [2**63, 2**31])
def test_an_audit_seed_past_its_column_is_one_line_400(grpo_run, engineer_api, seed):
    answer = engineer_api.post(f"/api/v1/runs/{grpo_run.pk}/audits", {"size": 2, "seed": seed}, format="json")
    assert assert_one_json_line(answer, 400)["detail"].startswith(f"seed: {seed} must be a whole number from 0 to ")
    assert not AuditItem.objects.exists()


def test_a_nul_in_a_path_is_one_line_400(engineer_api, base_checkpoint, tmp_path, make_user, client_for, run_root):
    nul = str(tmp_path / "tasks\x00.jsonl")
    assert refused(launch_grpo(engineer_api, nul, GRPO_STEPS)) == (
        "tasks contains a NUL character; remove it")
    assert refused(engineer_api.post("/api/v1/runs", {"kind": "dpo", "base_checkpoint": "tiny-sft", "snapshot": nul},
                                     format="json")) == "snapshot contains a NUL character; remove it"
    assert refused(launch_dpo(engineer_api, tmp_path, {**DPO_STEPS, "deepspeed": nul})) == (
        "config: deepspeed contains a NUL character; remove it")
    with pytest.raises(CommandError, match="^the checkpoint's folder or URI contains a NUL character; remove it$"):
        call_command("register_checkpoint", nul)
    assert_run_root_empty(run_root)


def test_the_audit_page_with_an_item_that_is_not_a_number_is_a_400(grpo_run, make_user, client):
    audit_create(run=grpo_run, size=2, overlap=2)
    client.force_login(make_user("ann"))
    page = client.post("/audit/", {"item": "abc", "verdict": "yes", "rationale": "The steps hold up to the end."})
    assert page.status_code == 400
    assert "item: &#x27;abc&#x27; must be a whole number from 1 to" in page.content.decode()
    assert not AuditJudgment.objects.exists()


def test_a_checkpoint_name_with_an_equals_sign_is_refused_at_registration(tiny_checkpoint, tmp_path):
    with pytest.raises(CommandError, match=r"^checkpoint name 'sft=v2' may not contain '='"):
        call_command("register_checkpoint", str(tiny_checkpoint), "--name", "sft=v2")
    assert not Checkpoint.objects.exists()
    folder = tmp_path / "sft=v2"  # a name taken from the folder leaves the '=' out
    shutil.copytree(tiny_checkpoint, folder)
    call_command("register_checkpoint", str(folder))
    assert Checkpoint.objects.get().name == "sft-v2"


def test_a_verdict_only_on_an_answer_served_to_that_reviewer(grpo_run, make_user, client_for, client):
    audit_create(run=grpo_run, size=3, overlap=1)
    ann, bob = client_for(make_user("ann")), client_for(make_user("bob"))
    served_to_ann = _served(ann)
    reason = "It divides by the right time and says so."
    item = AuditItem.objects.exclude(pk=served_to_ann["id"]).first()
    for token in ("", served_to_ann["token"], "forged:token"):  # never served; served to ann only; made up
        answer = bob.post(f"/api/v1/audits/{item.pk}/judgment", {"verdict": "yes", "rationale": reason,
                                                                 "token": token}, format="json")
        assert assert_one_json_line(answer, 404) == {"detail": f"no audit item {item.pk} was served to you; ask for "
                                                               "the next one"}
    answer = bob.post(f"/api/v1/audits/{served_to_ann['id']}/judgment",
                      {"verdict": "yes", "rationale": reason, "token": served_to_ann["token"]}, format="json")
    assert answer.status_code == 404  # ann's token is hers alone
    client.force_login(make_user("cy"))
    page = client.post("/audit/", {"item": item.pk, "verdict": "yes", "rationale": reason})
    assert page.status_code == 404 and "was served to you" in page.content.decode()
    assert not AuditJudgment.objects.exists()
    answer = ann.post(f"/api/v1/audits/{served_to_ann['id']}/judgment",
                      {"verdict": "yes", "rationale": reason, "token": served_to_ann["token"]}, format="json")
    assert answer.status_code == 201


def test_only_credential_named_keys_are_hidden_not_every_name_with_token_in_it():
    from annotate.runs.present import config_without_secrets

    shown = config_without_secrets({"max_new_tokens": 64, "max_prompt_length": 128, "hub_token": "hf_x",
                                    "wandb_api_key": "k", "nested": {"client_secret": "s", "tokenizer_name": "t"}})
    assert shown == {"max_new_tokens": 64, "max_prompt_length": 128, "hub_token": "(hidden)",
                     "wandb_api_key": "(hidden)", "nested": {"client_secret": "(hidden)", "tokenizer_name": "t"}}


def test_json_text_nested_past_the_bound_inside_a_config_is_one_line(engineer_api, base_checkpoint, tiny_snapshot,
                                                                     run_root):
    deep = "{" + '"a": {' * 5000 + "}" * 5001
    detail = refused(launch_dpo(engineer_api, tiny_snapshot, {"model_init_kwargs": deep}))
    assert detail == ("model_init_kwargs is JSON text that nests arrays or objects more than 64 levels deep; send a "
                      "flatter one")
    assert_run_root_empty(run_root)

"""Names that say what a checkpoint is (its base and the run that made it; renamed by engineers, its origin
untouched), the ledger as a table, and held-out tables that say how many rows they stand on and call too few
rows too few to judge."""

import html
import re

import pytest

from annotate.runs import execute
from annotate.runs.evaluation import TOO_FEW_TO_JUDGE
from annotate.runs.models import Checkpoint, Run
from tests.runs.helpers import finished_run_folder, queued_run, register

pytestmark = pytest.mark.django_db


def text(fragment: str) -> str:
    """HTML as a reader sees it: tags dropped, entities decoded, white space collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def table_rows(page: str, table_id: str) -> list[list[str]]:
    """The cells of a table's body rows, as text."""
    body = page.split(f'id="{table_id}"')[1].split("<tbody>")[1].split("</tbody>")[0]
    return [[text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)]


@pytest.fixture
def engineer(make_user):
    return make_user("eve", "engineer")


@pytest.fixture
def registered(db):
    """A parent and a child made by a DPO run, registered without weights here (URIs)."""
    parent = Checkpoint.objects.create(name="tiny-sft", uri="s3://models/tiny-sft", content_hash="sha256:parent")
    run = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=parent, folder="/runs/run-1")
    child = Checkpoint.objects.create(name=f"tiny-sft · dpo · run {run.pk}", uri="s3://models/child",
                                      content_hash="sha256:child", parent=parent, run=run)
    return parent, run, child


# --- names ------------------------------------------------------------------------------------------------------

def test_the_checkpoint_a_run_makes_is_named_after_its_base_and_the_run(base_checkpoint, stand_in_trainer,
                                                                         engineer, client):
    run = execute.run_execute(run_id=queued_run(base_checkpoint, "succeed").pk, worker="w1@test")
    made = Checkpoint.objects.get(run=run)
    assert made.name == f"tiny-sft · dpo · run {run.pk}"
    client.force_login(engineer)
    assert made.name in client.get(f"/runs/{run.pk}/").content.decode()

    # The name the next run would get is taken already (a checkpoint renamed to it by hand): it is made unique.
    second = queued_run(base_checkpoint, "succeed", seed=1)
    Checkpoint.objects.create(name=f"tiny-sft · dpo · run {second.pk}", uri="s3://models/by-hand")
    execute.run_execute(run_id=second.pk, worker="w1@test")
    assert Checkpoint.objects.get(run=second).name == f"tiny-sft · dpo · run {second.pk}-2"


def test_a_run_folder_registered_by_command_names_its_checkpoint_the_same_way(tiny_checkpoint, tiny_snapshot,
                                                                              tmp_path):
    said = register("register_run", str(finished_run_folder(tmp_path, tiny_checkpoint, tiny_snapshot)))
    run = Run.objects.get()
    made = run.made_checkpoint
    assert made.name == f"{run.base_checkpoint.name} · dpo · run {run.pk}" and "=" not in made.name
    assert f"checkpoint {made.name} from {run.base_checkpoint.name}" in said


def test_engineers_rename_a_checkpoint_through_the_api_and_its_origin_stays(registered, engineer, client_for,
                                                                             make_user):
    parent, run, child = registered
    api = client_for(engineer)
    shown = api.get(f"/api/v1/checkpoints/{child.pk}").json()
    assert shown["name"] == f"tiny-sft · dpo · run {run.pk}" and [p["name"] for p in shown["parents"]] == ["tiny-sft"]
    assert shown["made_by"]["id"] == run.pk and shown["made_by"]["kind"] == "dpo"
    assert [entry["checkpoint"]["name"] for entry in api.get(f"/api/v1/checkpoints/{parent.pk}").json()
            ["children"]["dpo"]] == [f"tiny-sft · dpo · run {run.pk}"]

    renamed = api.patch(f"/api/v1/checkpoints/{child.pk}", {"name": "  tiny-dpo-beta-0.1 "}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "tiny-dpo-beta-0.1"
    child.refresh_from_db()
    assert (child.name, child.parent_id, child.run_id, child.uri, child.content_hash) == (
        "tiny-dpo-beta-0.1", parent.pk, run.pk, "s3://models/child", "sha256:child")
    assert api.get(f"/api/v1/runs/{run.pk}").json()["output_checkpoint"]["name"] == "tiny-dpo-beta-0.1"

    assert client_for(make_user("rita", "reviewer")).patch(
        f"/api/v1/checkpoints/{child.pk}", {"name": "mine"}, format="json").status_code == 403
    assert api.get("/api/v1/checkpoints/987654321").status_code == 404


@pytest.mark.parametrize(("body", "detail"), [
    ({"name": "   "}, "checkpoint name is blank; give a short name such as tiny-sft-dpo-beta-0.1"),
    ({"name": "beta=0.1"}, "checkpoint name 'beta=0.1' may not contain '=' (compare and evaluate pass checkpoints "
                           "as NAME=PATH); choose another name"),
    ({"name": "tiny\x00dpo"}, "checkpoint name holds U+0000 (a control character) at character 5, an invisible or "
                              "control character; remove it"),
    ({"name": "tiny\ndpo"}, "checkpoint name holds U+000A (a control character) at character 5, an invisible or "
                            "control character; remove it"),
    # A right-to-left override shows "tiny-ops" in a list while the name holds other letters; a zero-width space
    # and a line separator hide in a name too.
    ({"name": "tiny-\u202espo"}, "checkpoint name holds U+202E (right-to-left override) at character 6, an "
                                 "invisible or control character; remove it"),
    ({"name": "tiny\u200bsft"}, "checkpoint name holds U+200B (zero width space) at character 5, an invisible or "
                                "control character; remove it"),
    ({"name": "tiny\u2028sft"}, "checkpoint name holds U+2028 (line separator) at character 5, an invisible or "
                                "control character; remove it"),
    # Alike is taken: case, and Unicode's compatibility forms (full-width letters, the "ﬁ" ligature).
    ({"name": "TINY-SFT"}, "a checkpoint named 'TINY-SFT' exists already as 'tiny-sft': names that differ only in "
                           "case or in Unicode's forms of a character are one name (checkpoint {parent}); choose "
                           "another name"),
    ({"name": "ｔｉｎｙ-ｓｆｔ"}, "a checkpoint named 'ｔｉｎｙ-ｓｆｔ' exists already as 'tiny-sft': names that differ "
                                  "only in case or in Unicode's forms of a character are one name (checkpoint "
                                  "{parent}); choose another name"),
    ({"name": "42"}, "checkpoint name '42' is digits only, which launches read as a checkpoint's id; add a letter"),
    ({"name": "x" * 201}, "checkpoint name is 201 characters long; keep it to 200 or fewer"),
    ({"name": "tiny-sft"}, "a checkpoint named 'tiny-sft' exists already (checkpoint {parent}); choose another name"),
    ({"name": 7}, "name must be text, such as tiny-sft-dpo-beta-0.1"),
    ({"label": "x"}, 'send a JSON object with the new name only: {"name": "tiny-sft-dpo-beta-0.1"}'),
])
def test_each_refused_rename_is_one_line_and_changes_nothing(registered, engineer, client_for, body, detail):
    parent, _, child = registered
    child.name = "tiny-dpo"
    child.save(update_fields=["name"])
    refused = client_for(engineer).patch(f"/api/v1/checkpoints/{child.pk}", body, format="json")
    assert (refused.status_code, refused.json()["detail"]) == (400, detail.replace("{parent}", str(parent.pk)))
    assert "\n" not in refused.json()["detail"] and Checkpoint.objects.get(pk=child.pk).name == "tiny-dpo"


def test_the_checkpoint_page_renames_and_shows_a_refusal_in_one_line(registered, engineer, client):
    _, run, child = registered
    client.force_login(engineer)
    page = client.get(f"/checkpoints/{child.pk}/").content.decode()
    assert f'action="/checkpoints/{child.pk}/rename"' in page

    done = client.post(f"/checkpoints/{child.pk}/rename", {"name": "tiny-dpo-first"}, follow=True)
    assert done.redirect_chain == [(f"/checkpoints/{child.pk}/", 302)]
    shown = done.content.decode()
    assert "<h1>Checkpoint tiny-dpo-first</h1>" in shown and "is now called &#x27;tiny-dpo-first&#x27;" in shown
    assert f'<a href="/runs/{run.pk}/">run {run.pk}</a>' in shown  # still made by its run

    refused = client.post(f"/checkpoints/{child.pk}/rename", {"name": "tiny-sft"})
    assert refused.status_code == 400
    error = refused.content.decode().split('id="rename-error">')[1].split("</p>")[0]
    assert html.unescape(error) == (f"a checkpoint named 'tiny-sft' exists already (checkpoint {child.parent_id}); "
                                    "choose another name")
    assert 'value="tiny-sft"' in refused.content.decode()  # what was typed, to correct
    assert Checkpoint.objects.get(pk=child.pk).name == "tiny-dpo-first"
    assert client.post(f"/checkpoints/{child.pk}/rename", {"name": "a=b"}).status_code == 400


# --- the ledger ---------------------------------------------------------------------------------------------------

GRPO_LEDGER = {
    "inputs": [{"kind": "checkpoint", "path": "/models/tiny-sft", "content_hash": "sha256:parent"},
               {"kind": "tasks", "path": "/inputs/speed.jsonl", "sha256": "ab12"}],
    "outputs": [{"kind": "checkpoint", "path": "checkpoint", "content_hash": "sha256:child"}],
    "consumed": {"optimizer_steps": 4, "epochs": 1.0, "tasks": 8, "completions": 32, "tokens_generated": 12345,
                 "wall_s": 20.0},
    "time_s": {"generation": 8.0, "verification": 1.0, "update": 9.0, "loading_switching": 1.5, "loading": 1.5,
               "switching": 0.0, "recording": 0.5, "difficulty_prepass": 0.0, "train_loop": 18.5, "wall": 20.0},
    "completion_length": {"mean": 38.5, "max": 64}, "truncated_share": 0.125,
    "groups": {"groups": 8, "zero_variance": 2, "zero_variance_share": 0.25, "all_correct": 1, "all_wrong": 1},
    "gpu_hours": None,
    "reward_model": {"calls": 32, "cache": {"hits": 3}},  # a key the app does not know yet is shown too
}


def test_the_run_page_shows_the_ledger_as_a_table_with_each_phases_share_of_the_wall_time(registered, engineer,
                                                                                           client):
    parent, _, _ = registered
    run = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=parent, folder="/runs/run-2",
                             ledger=GRPO_LEDGER)
    client.force_login(engineer)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    rows = table_rows(page, "ledger-table")
    assert rows[:4] == [["time / generation", "8.00 s", "40.0%"], ["time / verification", "1.00 s", "5.0%"],
                        ["time / update (forward, backward, optimizer)", "9.00 s", "45.0%"],
                        ["time / loading and switching", "1.50 s", "7.5%"]]
    assert ["time / wall", "20.00 s", "100.0%"] in rows
    for expected in (["consumed / tokens generated", "12,345", ""], ["completion length / max", "64", ""],
                     ["truncated share", "12.5%", ""], ["groups / zero variance share", "25.0%", ""],
                     ["gpu hours", "—", ""], ["reward model / cache / hits", "3", ""],
                     ["inputs / tasks / sha256", "ab12", ""], ["outputs / checkpoint / content hash", "sha256:child", ""]):
        assert expected in rows
    assert [row[0].split(" / ")[0] for row in rows][-6:] == ["inputs"] * 4 + ["outputs"] * 2  # paths and hashes last
    assert "<summary>Raw JSON</summary>" in page


def test_a_dpo_ledger_gives_its_wall_time_and_what_it_consumed(registered, engineer, client):
    parent, _, _ = registered
    run = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=parent, folder="/runs/run-3",
                             ledger={"consumed": {"optimizer_steps": 2, "train_pairs": 120, "pairs_seen": 16,
                                                  "wall_s": 4.2}})
    client.force_login(engineer)
    assert table_rows(client.get(f"/runs/{run.pk}/").content.decode(), "ledger-table") == [
        ["time / wall", "4.20 s", "100.0%"], ["consumed / optimizer steps", "2", ""],
        ["consumed / train pairs", "120", ""], ["consumed / pairs seen", "16", ""]]


# --- too few to judge -----------------------------------------------------------------------------------------

def dpo_run_scored_on(parent: Checkpoint, pairs: int) -> Run:
    scores = {"pairs": pairs, "preference_accuracy": 0.0, "reward_accuracy": None, "reward_margin": 0.0}
    trained = {"pairs": pairs, "preference_accuracy": 0.6667, "reward_accuracy": 0.75, "reward_margin": 0.0125}
    return Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=parent, folder=f"/runs/dpo-{pairs}",
                              record={"results": {"test": {"base": scores, "trained": trained}}})


def test_a_test_split_of_three_pairs_is_too_few_to_judge_and_one_of_forty_is_shown(registered, engineer, client,
                                                                                    client_for):
    parent, _, _ = registered
    thin, enough = dpo_run_scored_on(parent, 3), dpo_run_scored_on(parent, 40)
    client.force_login(engineer)

    rows = table_rows(client.get(f"/runs/{thin.pk}/").content.decode(), "test-split")
    assert rows == [["preference accuracy (log-likelihood)", "3", "too few to judge"],
                    ["implicit-reward accuracy", "3", "too few to judge"],
                    ["mean implicit-reward margin", "3", "too few to judge"]]
    rows = table_rows(client.get(f"/runs/{enough.pk}/").content.decode(), "test-split")
    assert rows[0] == ["preference accuracy (log-likelihood)", "40", "0.0", "0.6667"]

    body = client_for(engineer).get(f"/api/v1/runs/{thin.pk}").json()
    assert body["too_few_to_judge_under"] == TOO_FEW_TO_JUDGE == 10
    assert [(row["pairs"], row["too_few_to_judge"]) for row in body["eval"]] == [(3, True)] * 3

    parent_page = client.get(f"/checkpoints/{parent.pk}/").content.decode()
    children = parent_page.split('id="children-dpo"')[1].split('id="children-grpo"')[0]
    assert "preference accuracy (log-likelihood): too few to judge (3 test pairs)" in text(children)
    assert "preference accuracy (log-likelihood): 0.0 → 0.6667" in text(children)


def test_an_empty_test_split_shows_no_figure_at_all(registered, engineer, client):
    parent, _, _ = registered
    run = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=parent, folder="/runs/empty",
                             record={"results": {"test": None, "note": "the snapshot's test split is empty"}})
    client.force_login(engineer)
    section = client.get(f"/runs/{run.pk}/").content.decode().split('id="eval"')[1].split("</section>")[0]
    assert "Not scored: the snapshot&#x27;s test split is empty." in section and "0.0" not in section


def test_the_evaluation_table_counts_tasks_and_calls_a_thin_family_too_few_to_judge(registered, engineer, client):
    parent, _, child = registered

    def figures(scored: int, rate: float) -> dict:
        return {"tasks": scored, "tasks_scored": scored, "success_rate": rate, "interval": [0.1, 0.9]}

    def report(path: str, rate: float) -> dict:
        return {"checkpoint": path, "families": {"speed": figures(3, rate), "code": figures(12, rate),
                                                 "unit": {"tasks": 2, "tasks_scored": 0, "success_rate": None,
                                                          "interval": None}},
                "all": figures(17, rate)}

    run = Run.objects.create(
        kind="eval", status="succeeded", folder="/runs/eval",
        config={"checkpoints": [{"id": parent.pk, "name": "tiny-sft", "path": "/models/parent"},
                                {"id": child.pk, "name": child.name, "path": "/models/child"}],
                "tasks": "/inputs/heldout.jsonl"},
        record={"eval": {"families": ["code", "speed", "unit"], "settings": {"samples": 1, "temperature": 0.0,
                                                                             "seed": 0},
                         "checkpoints": [report("/models/parent", 0.25), report("/models/child", 0.5)]}})
    Checkpoint.objects.filter(pk=child.pk).update(name="tiny-dpo-renamed")
    client.force_login(engineer)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    table = page.split('class="data compact evaluation"')[1].split("</table>")[0]
    assert re.findall(r'<th scope="col" class="num">(.*?)</th>', table) == ["Tasks", "tiny-sft", "tiny-dpo-renamed"]
    rows = table_rows(page.replace('class="data compact evaluation"', 'id="evaluation-table"'), "evaluation-table")
    assert rows == [
        ["code", "12", "0.250 0.10–0.90, 12 tasks", "0.500 0.10–0.90, 12 tasks"],
        ["speed", "3", "too few to judge 3 tasks scored", "too few to judge 3 tasks scored"],
        ["unit", "2", "too few to judge 0 tasks scored", "too few to judge 0 tasks scored"],
        ["all", "17", "0.250 0.10–0.90, 17 tasks", "0.500 0.10–0.90, 17 tasks"],
    ]


def test_look_alike_names_are_one_name_wherever_a_checkpoint_gets_one(registered, engineer, client_for):
    """Registering (the API's and the command's registration), a run's made checkpoint and the database itself hold
    one checkpoint a look-alike name."""
    from django.db import IntegrityError, transaction

    from annotate.errors import UserMistake
    from annotate.runs.checkpoints import checkpoint_register, unique_name

    parent, _, _ = registered
    with pytest.raises(UserMistake, match="^a checkpoint named 'Tiny-SFT' exists already as 'tiny-sft'"):
        checkpoint_register(uri="s3://models/other", name="Tiny-SFT")
    with pytest.raises(UserMistake, match=r"^checkpoint name holds U\+202E \(right-to-left override\) at character 1"):
        checkpoint_register(uri="s3://models/other", name="\u202etfs-ynit")
    assert unique_name("TINY-SFT") == "TINY-SFT-2" and unique_name("tiny\u202e-sft=x") == "tiny-sft-x"
    with pytest.raises(IntegrityError), transaction.atomic():
        Checkpoint.objects.create(name="TINY-SFT", uri="s3://models/third", content_hash="sha256:third")
    assert list(Checkpoint.objects.filter(name__iexact="tiny-sft")) == [parent]


def test_the_django_admin_renames_a_checkpoint_by_the_same_rule(registered, make_user, client):
    parent, _, child = registered
    admin = make_user("ada", "admin")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    refused = client.post(f"/admin/runs/checkpoint/{child.pk}/change/", {"name": "Tiny-SFT", "uri": child.uri,
                                                                          "registered_by": ""})
    assert refused.status_code == 200 and "exists already as &#x27;tiny-sft&#x27;" in refused.content.decode()
    assert Checkpoint.objects.get(pk=child.pk).name == child.name


@pytest.mark.django_db(transaction=True)
def test_checkpoints_stored_before_the_rule_keep_their_names_and_look_alikes_get_their_id():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("runs", "0005_task_set_checked_off_the_request")], [("runs", "0007_checkpoint_name_key_unique")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("runs", "Checkpoint")
    first, second, third = (old.objects.create(name=name, uri=f"s3://models/{n}", content_hash=f"sha256:{n}")
                            for n, name in enumerate(["tiny5", "TINY5", "other"]))
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())  # back to where the other tests expect the schema

    names = dict(Checkpoint.objects.values_list("pk", "name"))
    assert names == {first.pk: "tiny5", second.pk: f"TINY5 ({second.pk})", third.pk: "other"}


def test_a_name_whose_compatibility_form_outgrows_its_key_is_refused_in_one_line(base_checkpoint):
    from annotate.errors import UserMistake
    from annotate.runs.checkpoints import checkpoint_rename

    name = "\ufdfa" * 30  # 30 characters, 540 once NFKC unfolds each into 18
    with pytest.raises(UserMistake, match=r"^checkpoint name unfolds to \d+ characters in its compatibility form"):
        checkpoint_rename(checkpoint=base_checkpoint, name=name)

"""One notion of "the same prompt" for the whole export: its text (training.snapshot.prompt_key), not its id.

A project imported in two batches can hold one prompt text under two prompt_ids. Whatever the seed, both
land in one split, count as one prompt, and share one max_pairs_per_prompt.
"""

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from annotate.exports.filters import filters_parse
from annotate.exports.pipeline import export_preview
from annotate.review.models import Prompt
from tests.conftest import import_rows
from training import snapshot
from training.snapshot import prompt_key

from .conftest import judge, read_jsonl

pytestmark = pytest.mark.django_db

SEEDS = range(21)


def rows_for(prompt_ids: list[str], *, text_of=lambda prompt_id: f"How far is {prompt_id}?") -> list[dict]:
    return [
        {"prompt_id": prompt_id, "prompt": text_of(prompt_id),
         "responses": [{"text": f"{prompt_id}: {k} km", "model": "sft", "model_version": f"v{k}"} for k in range(2)]}
        for prompt_id in prompt_ids
    ]


def export(slug: str, out, *options) -> dict:
    call_command("export_snapshot", slug, "--out", str(out), *options, stdout=io.StringIO(), stderr=io.StringIO())
    return json.loads((out / "manifest.json").read_text())


def split_of(out) -> dict[str, str]:
    """prompt_id → the split its rows are in."""
    return {row["meta"]["prompt_id"]: split for split in ("train", "test") for row in read_jsonl(out / f"{split}.jsonl")}


def test_a_plain_string_prompt_is_its_one_user_message():
    # So a prompt's standard and conversational rows, and a string and a chat import, are one prompt.
    assert prompt_key("2+2?") == prompt_key([{"role": "user", "content": "2+2?"}])
    assert prompt_key([{"content": "2+2?", "role": "user"}]) == prompt_key("2+2?")
    assert prompt_key("2+2?") != prompt_key([{"role": "system", "content": "2+2?"}])
    assert prompt_key("2+2?") != prompt_key("2+2? ")


def test_two_prompt_ids_with_one_text_land_in_one_split_for_every_seed(make_project, make_user, tmp_path):
    project = make_project(slug="batches", overlap=1, retest_rate=0)
    same_text = lambda prompt_id: "How far is Lyon?" if prompt_id in ("lyon", "lyon-again") else f"How far is {prompt_id}?"  # noqa: E731
    import_rows(project, rows_for(["lyon", *[f"city-{i}" for i in range(6)]], text_of=same_text))
    import_rows(project, rows_for(["lyon-again", *[f"town-{i}" for i in range(6)]], text_of=same_text))  # batch two
    judge(project, make_user("ann"), lambda assignment: "a")

    sides_seen = set()
    for seed in SEEDS:
        out = tmp_path / f"seed-{seed}"
        manifest = export("batches", out, "--seed", str(seed), "--test-ratio", "0.5")
        splits = split_of(out)
        assert splits["lyon"] == splits["lyon-again"], f"seed {seed}"
        sides_seen.add(splits["lyon"])
        assert manifest["counts"]["prompts"]["train"] + manifest["counts"]["prompts"]["test"] == 13  # 14 ids, 13 texts
        assert manifest["counts"]["train"] + manifest["counts"]["test"] == 14
    assert sides_seen == {"train", "test"}  # the seeds did move the text between the splits


def test_the_split_of_a_text_depends_neither_on_its_id_nor_on_the_import_order(make_project, make_user, tmp_path):
    texts = {f"city-{i}": f"How far is city {i}?" for i in range(20)}
    first = make_project(slug="first", overlap=1, retest_rate=0)
    import_rows(first, rows_for(list(texts), text_of=texts.get))
    renamed = make_project(slug="renamed", overlap=1, retest_rate=0)
    import_rows(renamed, rows_for([f"other-{name}" for name in reversed(texts)],
                                  text_of=lambda prompt_id: texts[prompt_id.removeprefix("other-")]))
    for project in (first, renamed):
        judge(project, make_user(f"rev-{project.slug}"), lambda assignment: "a")

    for seed in (0, 7):
        test_texts = []
        for slug in ("first", "renamed"):
            out = tmp_path / f"{slug}-{seed}"
            export(slug, out, "--seed", str(seed), "--test-ratio", "0.5")
            test_texts.append(sorted(row["prompt"][0]["content"] for row in read_jsonl(out / "test.jsonl")))
        assert test_texts[0] == test_texts[1] and test_texts[0]


def test_max_pairs_per_prompt_and_the_prompt_counts_count_texts_not_ids(make_project, make_user, tmp_path):
    project = make_project(slug="capped", overlap=1, retest_rate=0)
    import_rows(project, rows_for(["lyon", "lyon-again", "paris"],
                                  text_of=lambda prompt_id: "How far is Paris?" if prompt_id == "paris" else "Lyon?"))
    judge(project, make_user("ann"), lambda assignment: "a")
    filters = {"max_pairs_per_prompt": 1}
    preview = export_preview(project=project, filters=filters_parse(filters))
    manifest = export("capped", tmp_path / "snap", "--max-pairs-per-prompt", "1")

    assert manifest["counts"]["train"] + manifest["counts"]["test"] == 2  # one row per text
    assert manifest["counts"]["excluded"]["max_pairs_per_prompt"] == 1
    assert sum(manifest["counts"]["prompts"].values()) == 2
    assert preview["prompts"] == manifest["counts"]["prompts"]
    assert (preview["train"], preview["test"]) == (manifest["counts"]["train"], manifest["counts"]["test"])


@pytest.mark.slow  # seeds and exports the whole demo once per seed
def test_the_demo_exports_with_every_seed(tmp_path, own_data_folders):
    call_command("seed_demo", stdout=io.StringIO())
    prompts = Prompt.objects.filter(project__slug="demo")
    keys = list(prompts.values_list("content_key", flat=True))
    assert len(set(keys)) < len(keys)  # the demo holds texts under several ids, as a project imported twice does
    project = prompts.first().project
    for username in ("reviewer", "reviewer2", "reviewer3"):
        judge(project, get_user_model().objects.get(username=username), lambda assignment: "a")

    with_test_rows = 0
    for seed in SEEDS:
        out = tmp_path / f"seed-{seed}"
        export("demo", out, "--seed", str(seed))
        data = snapshot.load(out)  # verifies every hash and row
        assert len(data["train"]) + len(data["test"]) == 30
        train = {json.dumps(row["prompt"]) for row in data["train"]}
        test = {json.dumps(row["prompt"]) for row in data["test"]}
        assert not train & test
        with_test_rows += bool(test)
    assert with_test_rows > 0

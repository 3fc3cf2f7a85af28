"""The export option model_scores: each row's meta carries the attached model reviewers' scores of its two answers,
as {identity: {"chosen", "rejected"}}; without the option the snapshot is byte for byte what it was."""

import io
import json

import pytest
from django.core.management import call_command

from annotate.exports.filters import ExportError, filters_parse
from annotate.quality.models import ModelPairScore, ModelReviewer
from annotate.review.models import Pair
from annotate.runs.models import Checkpoint

from .conftest import read_jsonl

pytestmark = pytest.mark.django_db


def export(slug, out, *options) -> dict:
    call_command("export_snapshot", slug, "--out", str(out), *options, stdout=io.StringIO(), stderr=io.StringIO())
    return json.loads((out / "manifest.json").read_text())


def files(folder) -> bytes:
    return (folder / "train.jsonl").read_bytes() + (folder / "test.jsonl").read_bytes()


def scored_by(project, name: str, content_hash: str, *, score_of_a) -> ModelReviewer:
    """A model reviewer whose stored scores are score_of_a(pair) for response a and its negation for b."""
    checkpoint = Checkpoint.objects.create(name=name, uri=f"/models/{name}", content_hash=content_hash)
    reviewer = ModelReviewer.objects.create(project=project, checkpoint=checkpoint, content_hash=content_hash,
                                            identity=f"reward_model@{content_hash}", status="done")
    ModelPairScore.objects.bulk_create(
        ModelPairScore(model_reviewer=reviewer, pair=pair, score_a=score_of_a(pair), score_b=-score_of_a(pair),
                       a_on_left=True, choice_shown="left", choice_swapped="right")
        for pair in Pair.objects.filter(project=project))
    return reviewer


def test_rows_carry_each_model_reviewers_scores_of_chosen_and_rejected(voted_project, tmp_path):
    plain = export(voted_project.slug, tmp_path / "plain")
    first = scored_by(voted_project, "rm-one", "sha256:" + "1" * 64, score_of_a=lambda pair: pair.pk / 10)
    second = scored_by(voted_project, "rm-two", "sha256:" + "2" * 64, score_of_a=lambda pair: 2.5)

    unchanged = export(voted_project.slug, tmp_path / "unchanged")
    assert files(tmp_path / "unchanged") == files(tmp_path / "plain")
    assert unchanged["snapshot_id"] == plain["snapshot_id"] and "model_scores" not in unchanged["filters"]

    manifest = export(voted_project.slug, tmp_path / "scored", "--model-scores")
    assert manifest["filters"]["model_scores"] is True
    rows = read_jsonl(tmp_path / "scored" / "train.jsonl") + read_jsonl(tmp_path / "scored" / "test.jsonl")
    assert rows
    for row in rows:
        pair = Pair.objects.select_related("response_a").get(pk=row["meta"]["pair_id"])
        a_chosen = row["chosen"][0]["content"] == pair.response_a.text
        sign = 1 if a_chosen else -1
        assert row["meta"]["model_scores"] == {
            first.identity: {"chosen": sign * pair.pk / 10, "rejected": -sign * pair.pk / 10},
            second.identity: {"chosen": sign * 2.5, "rejected": -sign * 2.5},
        }
    plain_rows = read_jsonl(tmp_path / "plain" / "train.jsonl") + read_jsonl(tmp_path / "plain" / "test.jsonl")
    assert [{**r, "meta": {k: v for k, v in r["meta"].items() if k != "model_scores"}} for r in rows] == plain_rows


def test_a_detached_model_reviewer_leaves_exports(voted_project, tmp_path):
    from django.utils import timezone

    reviewer = scored_by(voted_project, "rm-one", "sha256:" + "1" * 64, score_of_a=lambda pair: 1.0)
    ModelReviewer.objects.filter(pk=reviewer.pk).update(detached_at=timezone.now())
    export(voted_project.slug, tmp_path / "scored", "--model-scores")
    assert {json.dumps(row["meta"]["model_scores"]) for row in read_jsonl(tmp_path / "scored" / "train.jsonl")} == {"{}"}


def test_the_option_over_the_api_and_a_bad_value(voted_project, make_user, client_for):
    with pytest.raises(ExportError, match=r"^model_scores: 'maybe' must be true or false$"):
        filters_parse({"model_scores": "maybe"})
    client = client_for(make_user("eng", role="engineer"))
    refused = client.post(f"/api/v1/projects/{voted_project.slug}/exports", {"model_scores": "maybe"}, format="json")
    assert refused.status_code == 400 and refused.json()["detail"] == "model_scores: 'maybe' must be true or false"
    preview = client.post(f"/api/v1/projects/{voted_project.slug}/exports/preview", {"model_scores": True},
                          format="json")
    assert preview.status_code == 200

"""The pipeline's rules against the quality module's, and the filters that need their own data."""

import io
import json

import pytest
from django.core.management import call_command

from annotate.exports.filters import ExportError, filters_parse
from annotate.exports.pipeline import export_preview, prompt_split
from annotate.quality.consensus import consensus_summary, pair_consensus
from annotate.quality.selectors import judgment_table_for_project
from annotate.review.projects import project_create_or_update
from tests.conftest import import_rows, make_items
from training.snapshot import prompt_key

from .conftest import judge, read_jsonl


def test_the_export_decides_each_pair_as_the_agreement_report_does(voted_project):
    quality = consensus_summary(consensus=pair_consensus(judgment_table_for_project(project=voted_project)))
    preview = export_preview(project=voted_project, filters=filters_parse({}))
    assert quality["no_consensus"] > 0 and quality["winner_counts"]["tie"] > 0  # the fixture has both
    assert preview["excluded"]["no_consensus"] == quality["no_consensus"]
    assert preview["excluded"]["tie_majority"] == quality["winner_counts"]["tie"]
    assert preview["excluded"]["both_bad_majority"] == quality["winner_counts"]["both_bad"]
    assert preview["train"] + preview["test"] == quality["winner_counts"]["decisive"]


def test_split_is_by_prompt_key_and_seed_only():
    keys = [prompt_key(f"Question {i}") for i in range(2000)]
    splits = [prompt_split(prompt_key=key, seed=3, test_ratio=0.2) for key in keys]
    assert splits == [prompt_split(prompt_key=key, seed=3, test_ratio=0.2) for key in keys]
    assert 300 < splits.count("test") < 500
    assert splits != [prompt_split(prompt_key=key, seed=4, test_ratio=0.2) for key in keys]
    assert {prompt_split(prompt_key=key, seed=3, test_ratio=0.0) for key in keys[:100]} == {"train"}


def test_filters_are_checked_with_one_line_naming_the_field():
    for raw, message in [
        ({"min_agreement": "lots"}, "min_agreement: 'lots' must be a number from 0 to 1"),
        ({"min_judgment": 2}, "min_judgment: unknown filter"),
        ({"gold": "maybe"}, "gold: 'maybe' must be one of include, exclude, only"),
        ({"judged_since": "2025-02-01", "judged_until": "2025-01-01"}, "judged_until: 2025-01-01 is before"),
        ({"row_format": "chatml"}, "row_format: 'chatml' must be one of conversational, standard"),
    ]:
        with pytest.raises(ExportError) as caught:
            filters_parse(raw)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert filters_parse({"criteria_versions": "2, 1,2", "tags": "b,a"}).as_dict()["criteria_versions"] == [1, 2]


@pytest.mark.django_db
def test_retests_do_not_vote_twice(make_project, make_user):
    project = make_project(slug="retested", overlap=1, retest_rate=1.0)
    import_rows(project, make_items(8))
    judge(project, make_user("ann"), lambda assignment: "b" if assignment.is_retest else "a")
    assert project.assignments.filter(is_retest=True, current_judgment__isnull=False).exists()
    preview = export_preview(project=project, filters=filters_parse({}))
    assert preview["judgments_counted"] == 8 and preview["train"] + preview["test"] == 8


@pytest.mark.django_db
def test_max_pairs_per_prompt_keeps_the_most_agreed_on(make_project, make_user, tmp_path):
    project = make_project(slug="three", overlap=2, retest_rate=0)
    import_rows(project, make_items(4, responses=3))  # three pairs per prompt
    # ann prefers the earlier answer everywhere; bob only on pairs that include answer 0.
    judge(project, make_user("ann"), lambda assignment: "a")
    judge(project, make_user("bob"), lambda assignment: "a" if assignment.pair.response_a.text.startswith("Answer 0")
          else "b")
    call_command("export_snapshot", "three", "--out", str(tmp_path / "s"), "--max-pairs-per-prompt", "1",
                 stdout=io.StringIO(), stderr=io.StringIO())
    rows = read_jsonl(tmp_path / "s" / "train.jsonl") + read_jsonl(tmp_path / "s" / "test.jsonl")
    assert len(rows) == 4 and all(row["meta"]["consensus_share"] == 1.0 for row in rows)
    assert all(row["chosen"][0]["content"].startswith("Answer 0") for row in rows)
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["counts"]["excluded"]["max_pairs_per_prompt"] == 4  # the other unanimous pair of each prompt


@pytest.mark.django_db
def test_flagged_reviewers_and_old_criteria_can_be_left_out(make_project, make_user):
    project = make_project(slug="flags", overlap=3, retest_rate=0)
    import_rows(project, make_items(30))
    for name in ("ann", "bob"):
        judge(project, make_user(name), lambda assignment: "a")
    judge(project, make_user("lefty"), lambda assignment: "a" if assignment.a_on_left else "b")

    everyone = export_preview(project=project, filters=filters_parse({}))
    assert everyone["judgments_counted"] == 90
    without = export_preview(project=project, filters=filters_parse({"exclude_flagged": True}))
    assert without["judgments_counted"] == 60 and without["train"] + without["test"] == 30

    project_create_or_update(slug="flags", name=None, instructions="New rules.",
                             criteria_items=[{"key": "correct", "text": "Right."}])
    assert export_preview(project=project, filters=filters_parse({"criteria_versions": [2]}))["pairs_considered"] == 0
    assert export_preview(project=project, filters=filters_parse({"criteria_versions": [1]}))["judgments_counted"] == 90

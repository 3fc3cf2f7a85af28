"""Exports that use adjudicators' rulings, and exports that leave flagged rationales out."""

import io
import uuid

import pytest
from django.core.management import CommandError, call_command

from annotate.exports.filters import ExportError, filters_parse
from annotate.exports.pipeline import export_preview
from annotate.review import adjudication
from annotate.review.assignments import assignment_next
from annotate.review.choices import swap_back
from annotate.review.judgments import judgment_submit
from annotate.review.models import Pair
from annotate.review.rationale import TypingSignals
from tests.conftest import import_rows, make_items
from tests.exports.conftest import read_jsonl


def ruling(project, adjudicator, prompt_id: str, winner: str) -> None:
    """The adjudicator rules `winner` (a, b, tie, both_bad) on the pair of prompt_id."""
    pair = Pair.objects.get(project=project, prompt__external_id=prompt_id)
    queue = adjudication.QueueFilter(min_judgments=2)
    held = adjudication.adjudication_next(project=project, adjudicator=adjudicator, queue=queue, pair_id=pair.pk)
    click = swap_back(winner, a_on_left=held.a_on_left)
    adjudication.ruling_submit(assignment_id=held.pk, adjudicator=adjudicator, choice=click,
                               strength=2 if click in ("left", "right") else None, criteria=None,
                               rationale="Read both twice; this one answers the question.", client_key=uuid.uuid4())


def export(project, tmp_path, name: str, **filters) -> tuple[dict, dict]:
    """Write a snapshot with these filters; returns (manifest, {prompt_id: row})."""
    out = tmp_path / name
    args = ["export_snapshot", project.slug, "--out", str(out), "--test-ratio", "0"]
    for key, value in filters.items():
        option = "--" + key.replace("_", "-")
        args += [option] if value is True else [option, str(value)]
    call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    return manifest, {row["meta"]["prompt_id"]: row for row in read_jsonl(out / "train.jsonl")}


@pytest.fixture
def judy(make_user):
    return make_user("judy", role="adjudicator")


def test_rulings_are_ignored_unless_asked_for_and_counted_either_way(voted_project, judy, tmp_path):
    ruling(voted_project, judy, "p-0007", "a")  # votes a, b, tie: split
    manifest, rows = export(voted_project, tmp_path, "ignored")
    assert "p-0007" not in rows and manifest["counts"]["excluded"]["no_consensus"] == 1
    assert manifest["counts"]["adjudications"] == {"pairs_with_ruling": 1, "rulings_used": 0,
                                                   "split_pairs_decided": 0, "majorities_confirmed": 0,
                                                   "majorities_overruled": 0, "rows": 0}
    assert manifest["filters"]["adjudications"] == "ignore"
    assert manifest["filters"]["adjudication_rule"].startswith("rulings are not used")


def test_a_ruling_decides_a_split_pair(voted_project, judy, tmp_path):
    ruling(voted_project, judy, "p-0007", "a")
    ruling(voted_project, judy, "p-0003", "a")  # votes b, b, a: a majority, which `split` leaves alone
    manifest, rows = export(voted_project, tmp_path, "split", adjudications="split")
    row = rows["p-0007"]
    assert row["chosen"][-1]["content"] == "Answer 0 to question 7: 14" and row["meta"]["decided_by"] == "adjudication"
    assert row["meta"]["votes"] == {"a": 1, "b": 1, "tie": 1, "both_bad": 0}, "the votes are still reported"
    assert rows["p-0003"]["chosen"][-1]["content"] == "Answer 1 to question 3: 7"
    assert rows["p-0003"]["meta"]["decided_by"] == "strict_majority"
    assert manifest["counts"]["excluded"]["no_consensus"] == 0
    assert manifest["counts"]["adjudications"] == {"pairs_with_ruling": 2, "rulings_used": 1,
                                                   "split_pairs_decided": 1, "majorities_confirmed": 0,
                                                   "majorities_overruled": 0, "rows": 1}
    assert "no strict majority is decided by its latest ruling" in manifest["filters"]["adjudication_rule"]


def test_with_all_a_ruling_overrules_a_majority_and_the_latest_ruling_counts(voted_project, judy, tmp_path):
    ruling(voted_project, judy, "p-0003", "b")
    ruling(voted_project, judy, "p-0003", "a")  # ruled again: the latest counts
    ruling(voted_project, judy, "p-0000", "a")  # agrees with the unanimous votes
    manifest, rows = export(voted_project, tmp_path, "all", adjudications="all")
    assert rows["p-0003"]["chosen"][-1]["content"] == "Answer 0 to question 3: 6"
    assert rows["p-0003"]["meta"]["decided_by"] == "adjudication"
    counts = manifest["counts"]["adjudications"]
    assert (counts["majorities_overruled"], counts["majorities_confirmed"], counts["rows"]) == (1, 1, 2)


def test_a_tie_or_both_bad_ruling_leaves_the_pair_out_under_its_own_reason(voted_project, judy):
    ruling(voted_project, judy, "p-0007", "tie")
    preview = export_preview(project=voted_project, filters=filters_parse({"adjudications": "split"}))
    assert preview["excluded"]["adjudicated_tie"] == 1 and preview["excluded"]["no_consensus"] == 0
    assert preview["adjudications"]["rulings_used"] == 1 and preview["adjudications"]["rows"] == 0


def test_a_ruled_pair_still_obeys_tags_and_gold(voted_project, judy):
    ruling(voted_project, judy, "p-0007", "a")  # p-0007 is tagged code
    preview = export_preview(project=voted_project, filters=filters_parse({"adjudications": "split", "tags": ["math"]}))
    assert preview["adjudications"]["rulings_used"] == 0 and preview["excluded"]["tags"] >= 1


@pytest.fixture
def written_project(make_project, make_user):
    """Two pairs, three reviewers; bob pastes his rationale on every pair, the others type theirs."""
    project = make_project(slug="written", overlap=3, retest_rate=0, rationale_flag_chars=20)
    import_rows(project, make_items(2))
    for name in ("ann", "bob", "cat"):
        reviewer = make_user(name)
        while (assignment := assignment_next(project=project, reviewer=reviewer)) is not None:
            text = {"ann": "The sums are checked one by one here", "bob": "Only one of them shows the working",
                    "cat": "Units match on the left, not the right"}[name] + f" ({assignment.pair.prompt.external_id})."
            typed = len(text) if name != "bob" else 0
            judgment_submit(
                assignment_id=assignment.pk, reviewer=reviewer, choice="left", strength=2,
                criteria={"correct": "left", "complete": "tie"}, rationale=text, client_key=uuid.uuid4(),
                typing=TypingSignals(typing_seconds=20.0, typed_chars=typed, pasted_chars=len(text) - typed,
                                     paste_events=int(name == "bob")),
            )
    return project


def test_flagged_rationales_can_be_left_out_of_an_export(written_project, tmp_path):
    everyone = export_preview(project=written_project, filters=filters_parse({}))
    typed_only = export_preview(project=written_project, filters=filters_parse({"exclude_flagged_rationales": True}))
    assert everyone["judgments_counted"] == 6
    assert typed_only["judgments_counted"] == 4, "bob's two pasted rationales are not counted"
    manifest, _ = export(written_project, tmp_path, "typed", exclude_flagged_rationales=True)
    assert manifest["counts"]["judgments_counted"] == 4
    assert manifest["filters"]["exclude_flagged_rationales"] is True


@pytest.mark.parametrize("filters, message", [
    ({"adjudications": "maybe"}, "adjudications: 'maybe' must be one of ignore, split, all"),
    ({"exclude_flagged_rationales": "perhaps"}, "exclude_flagged_rationales: 'perhaps' must be true or false"),
])
def test_bad_filters_are_one_line(filters, message):
    with pytest.raises(ExportError) as refused:
        filters_parse(filters)
    assert str(refused.value) == message


def test_the_api_and_the_command_refuse_a_bad_adjudications_value_in_one_line(voted_project, make_user, client_for):
    client = client_for(make_user("eve", role="engineer"))
    response = client.post(f"/api/v1/projects/{voted_project.slug}/exports/preview", {"adjudications": "maybe"},
                           format="json")
    assert response.status_code == 400
    assert response.json() == {"detail": "adjudications: 'maybe' must be one of ignore, split, all"}
    with pytest.raises(CommandError) as refused:
        call_command("export_snapshot", voted_project.slug, "--preview", "--adjudications", "maybe",
                     stdout=io.StringIO(), stderr=io.StringIO())
    assert "invalid choice: 'maybe'" in str(refused.value)

"""Answers of the qualification round are not live judgments: no export, agreement figure, gold accuracy or
adaptive-overlap count reads them, and the manifest says how many it left out. A pair with one live vote
makes a row by default (min_judgments 1) and none with min_judgments 2."""

import json
import uuid

from annotate.exports.filters import filters_parse
from annotate.exports.pipeline import export_preview, snapshot_write
from annotate.quality.selectors import agreement_report_for_project, judgment_table_for_project
from annotate.review import queue_sql
from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit
from annotate.review.models import GoldCheck, Judgment, Pair
from annotate.review.overlap import votes_of_pairs
from tests.conftest import import_rows
from training import snapshot

from .conftest import read_jsonl, side

RATIONALE = "The chosen answer divides the total distance by the total time, step by step."


def gold_and_live(gold: int, live: int) -> list[dict]:
    """Gold prompts g-N (response a is right) and live prompts l-N."""
    rows = [{"prompt_id": f"g-{i}", "prompt": f"Gold question {i}?",
             "responses": [{"text": f"Right answer {i}.", "model": "m1"}, {"text": f"Wrong answer {i}.", "model": "m2"}],
             "gold": {"preferred": 0}} for i in range(gold)]
    return rows + [{"prompt_id": f"l-{i}", "prompt": f"Live question {i}?",
                    "responses": [{"text": f"One answer {i}.", "model": "m1"},
                                  {"text": f"Another answer {i}.", "model": "m2"}]} for i in range(live)]


def judge_next(project, reviewer, choice: str, strength: int = 2):
    """The reviewer's next assignment judged as `choice` (un-swapped a or b); None when nothing is left."""
    assignment = assignment_next(project=project, reviewer=reviewer)
    if assignment is None:
        return None
    button = side(assignment, choice)
    judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=button, strength=strength,
                    criteria={"correct": button, "complete": "tie"}, rationale=RATIONALE,
                    client_key=uuid.uuid4())
    return assignment


def test_qualification_answers_count_nowhere_but_in_the_round(make_project, make_user, tmp_path):
    project = make_project(slug="walk", overlap=2, retest_rate=0, qualification_items=1, qualification_pass_mark=1.0,
                           qualification_attempts=2)
    import_rows(project, gold_and_live(4, 3))
    rita, sam = make_user("rita"), make_user("sam")
    judge_next(project, rita, "b", strength=3)  # attempt 1: wrong, failed
    judge_next(project, rita, "a", strength=3)  # attempt 2: right, passed
    judge_next(project, sam, "a", strength=3)  # attempt 1: passed
    for reviewer in (rita, sam):
        while judge_next(project, reviewer, "b") is not None:  # live work: every vote for b
            pass
    qualification = set(GoldCheck.objects.filter(attempt__isnull=False).values_list("judgment_id", flat=True))
    assert len(qualification) == 3
    live = Judgment.objects.exclude(pk__in=qualification)
    assert live.exists() and not live.filter(winner="a").exists()

    # Agreement, ratings and gold accuracy read the live judgments only: every one of them is a b vote.
    table = judgment_table_for_project(project=project)
    assert len(table.pair) == live.count()
    report = agreement_report_for_project(project=project, bootstrap=0)
    assert report["gold"]["judgments"] == live.filter(pair__prompt__gold_response__isnull=False).count()
    assert {r["username"]: r["gold_accuracy"] for r in report["reviewers"]}["rita"] in (0.0, None), (
        "rita's right answer in the round is no live gold check")

    # Adaptive overlap counts the same votes as the export.
    votes = votes_of_pairs(list(live.values_list("pair_id", flat=True).distinct()))
    assert sum(v[0] for v in votes.values()) == 0 and sum(sum(v) for v in votes.values()) == live.count()

    filters = filters_parse({})
    preview = export_preview(project=project, filters=filters)
    assert preview["judgments_counted"] == live.count() and preview["qualification_answers_left_out"] == 3
    manifest = snapshot_write(project=project, filters=filters, out_dir=tmp_path / "snap", created_at="2026-01-01T00:00:00Z")
    assert manifest["counts"]["qualification_answers_left_out"] == 3
    rows = read_jsonl(tmp_path / "snap" / "train.jsonl") + read_jsonl(tmp_path / "snap" / "test.jsonl")
    assert rows and all(row["meta"]["votes"]["a"] == 0 for row in rows), "no row carried by a qualification answer"
    assert {row["meta"]["strength"] for row in rows} == {2.0}, "the answers' strength 3 is in no row's strength"
    snapshot.verify(tmp_path / "snap")


def test_a_pair_with_one_live_vote_makes_a_row_by_default_and_none_with_min_judgments_2(make_project, make_user,
                                                                                        client_for):
    project = make_project(slug="single", overlap=2, retest_rate=0, qualification_items=1, qualification_pass_mark=1.0,
                           qualification_attempts=1)
    import_rows(project, gold_and_live(1, 0))
    judge_next(project, make_user("rita"), "a")  # her qualification answer on the one gold pair
    admin = client_for(make_user("ada", role="admin"))
    assert admin.patch(f"/api/v1/projects/{project.slug}/settings", {"qualification_items": 0},
                       format="json").status_code == 200
    project.refresh_from_db()
    judge_next(project, make_user("tom"), "b")  # the pair's one live vote
    by_default = export_preview(project=project, filters=filters_parse({}))
    assert (by_default["train"] + by_default["test"], by_default["judgments_in_rows"]) == (1, 1)
    assert by_default["qualification_answers_left_out"] == 1
    stricter = export_preview(project=project, filters=filters_parse({"min_judgments": 2}))
    assert stricter["train"] + stricter["test"] == 0 and stricter["excluded"]["too_few_judgments"] == 1


def test_the_manifest_counts_what_the_filters_would_have_counted(make_project, make_user):
    project = make_project(slug="dated", overlap=2, retest_rate=0, qualification_items=1, qualification_pass_mark=0.0,
                           qualification_attempts=1)
    import_rows(project, gold_and_live(2, 1))
    judge_next(project, make_user("rita"), "a")
    later = filters_parse({"judged_since": "2999-01-01"})
    assert export_preview(project=project, filters=later)["qualification_answers_left_out"] == 0
    assert json.dumps(export_preview(project=project, filters=filters_parse({})))  # plain JSON



def test_adaptive_overlap_decides_a_pair_on_its_live_votes_only(make_project, make_user):
    project = make_project(slug="adaptive", min_overlap=2, max_overlap=3, retest_rate=0, qualification_items=1,
                           qualification_pass_mark=0.0, qualification_attempts=1)
    import_rows(project, gold_and_live(1, 0))
    judge_next(project, make_user("rita"), "a")
    judge_next(project, make_user("sam"), "b")  # split 1-1, but in the round: no votes
    pair = Pair.objects.get()
    assert pair.reviewers_needed == 2, "a pair with no live vote needs what a fresh pair does"
    assert queue_sql.pair_needed_refresh(pair_id=pair.pk) == 2


def test_a_pair_split_only_in_the_qualification_round_waits_for_no_adjudicator(make_project, make_user, client_for):
    project = make_project(slug="ruled", overlap=2, retest_rate=0, qualification_items=1, qualification_pass_mark=0.0,
                           qualification_attempts=1)
    import_rows(project, gold_and_live(1, 0))
    judge_next(project, make_user("rita"), "a")
    judge_next(project, make_user("sam"), "b")
    adjudicator = client_for(make_user("judy", role="adjudicator"))
    assert adjudicator.get(f"/api/v1/projects/{project.slug}/adjudications/next").status_code == 204

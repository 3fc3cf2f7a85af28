"""A reward model as a reviewer on the quality dashboard: attached by an admin, scored by the real
`python -m training reward-score`, measured against people, and kept out of everything the people's work feeds."""

import json
import threading
import uuid
from datetime import timedelta

import numpy as np
import pytest
from django.test import Client
from django.utils import timezone

from annotate.exports.filters import filters_parse
from annotate.exports.pipeline import snapshot_write
from annotate.quality.model_reviewers import STALE_AFTER
from annotate.quality.models import ModelPairScore, ModelReviewer
from annotate.quality.selectors import agreement_report_for_project
from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit, judgment_undo_last
from annotate.review.models import Pair
from annotate.review.projects import project_settings_update
from annotate.runs.checkpoints import checkpoint_register
from annotate.runs.tasks import score_model_reviewer
from tests.conftest import import_rows, judge_until_done, make_items
from tests.exports.helpers import configure_celery

from .helpers import prefers_model_0, read_page

pytestmark = pytest.mark.slow

PAIRS = 12


@pytest.fixture
def judged(make_project, make_user):
    """A project of 12 pairs, each judged by two reviewers who prefer model-0 on every pair but the last three."""
    project = make_project("scored", overlap=2, retest_rate=0.0)
    import_rows(project, make_items(PAIRS))
    dissent = {f"p-{i:04d}" for i in range(PAIRS - 3, PAIRS)}

    def pick(assignment):
        choice = prefers_model_0(assignment)
        if assignment.pair.prompt.external_id in dissent:
            return "right" if choice == "left" else "left"
        return choice

    for name in ("rev1", "rev2"):
        judge_until_done(project, make_user(name), pick)
    return project


@pytest.fixture
def staff(make_user):
    return {"admin": make_user("boss", role="admin"), "engineer": make_user("eng", role="engineer")}


def run_queued_scoring(queued) -> None:
    """Run the scorings a request queued, as the training queue's worker does. (With no broker a thread of the web
    process runs them, which cannot see this test's uncommitted rows: test_without_a_broker_... covers that.)"""
    for callback in queued:
        reviewer_id, attempt = callback.args
        score_model_reviewer(reviewer_id, attempt)


def attach(client_for, user, project, checkpoint, capture, **extra):
    with capture() as queued:
        response = client_for(user).post(f"/api/v1/projects/{project.slug}/model-reviewers",
                                         {"checkpoint": checkpoint, **extra}, format="json")
    run_queued_scoring(queued)
    return response


def export_rows(project, tmp_path, name, **filters):
    manifest = snapshot_write(project=project, filters=filters_parse(filters), out_dir=tmp_path / name,
                              created_at="2025-01-01T00:00:00Z")
    return manifest, (tmp_path / name / "train.jsonl").read_bytes() + (tmp_path / name / "test.jsonl").read_bytes()


def test_an_attached_reward_model_scores_every_judged_pair_and_is_measured_against_people(
        judged, staff, client_for, tiny_reward_model, django_capture_on_commit_callbacks, tmp_path):
    checkpoint = checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-tiny")
    report_before = agreement_report_for_project(project=judged, bootstrap=50)
    manifest_before, rows_before = export_rows(judged, tmp_path, "before")

    response = attach(client_for, staff["admin"], judged, "rm-tiny", django_capture_on_commit_callbacks)
    assert response.status_code == 201, response.json()
    reviewer = ModelReviewer.objects.get()
    assert reviewer.status == "done" and reviewer.error == "" and reviewer.content_hash == checkpoint.content_hash

    # Every judged pair scored, with the scores the reward model gives each answer alone.
    scores = {s.pair_id: s for s in ModelPairScore.objects.filter(model_reviewer=reviewer).select_related(
        "pair__response_a", "pair__response_b", "pair__prompt")}
    assert len(scores) == PAIRS
    from training.reward_model_scorer import RewardModelScorer

    scorer = RewardModelScorer(tiny_reward_model["reward"])
    sample = next(iter(scores.values()))
    direct = scorer.score([sample.pair.prompt.messages] * 2, [sample.pair.response_a.text, sample.pair.response_b.text])
    assert [sample.score_a, sample.score_b] == pytest.approx(direct, abs=1e-4)
    for score in scores.values():
        left, right = (score.score_a, score.score_b) if score.a_on_left else (score.score_b, score.score_a)
        assert score.choice_shown == ("left" if left > right else "right")
        assert score.choice_swapped == ("right" if left > right else "left")

    # Its figures, worked out here from the stored scores: every pair has a 2-0 majority for a or b.
    model_a = {pair_id: s.score_a > s.score_b for pair_id, s in scores.items()}
    people_a = {pair.pk: not pair.prompt.external_id.endswith(("09", "10", "11"))
                for pair in Pair.objects.filter(project=judged).select_related("prompt")}
    agree = sum(model_a[pair_id] == people_a[pair_id] for pair_id in scores)
    [listed] = client_for(staff["engineer"]).get(f"/api/v1/projects/{judged.slug}/model-reviewers").json()
    figures = listed["figures"]
    assert figures["agreement"]["n"] == PAIRS and figures["agreement"]["share"]["hits"] == agree
    # Its lineage names the tiny snapshot, of another project: every pair here is one it never saw.
    assert listed["training_snapshot"]["train_pairs_here"] == 0 and listed["training_snapshot"]["note"] is None
    assert figures["agreement_unseen"]["n"] == PAIRS and figures["agreement_seen"]["n"] == 0
    assert figures["order_consistency"]["value"] == 1.0
    assert figures["left_out"] == {"not_scored": 0, "over_max_length": 0, "no_votes": 0, "no_majority": 0,
                                   "tie_majority": 0, "both_bad_majority": 0}
    assert listed["over_max_length"] is None
    # 1 by construction: not an estimate, so no interval.
    assert figures["order_consistency"]["by_construction"] and "ci" not in figures["order_consistency"]
    assert listed["pairs_scored"] == PAIRS and listed["judgments_since"] == 0
    assert listed["identity"] == f"reward_model@{checkpoint.content_hash}"

    # The dashboard shows it apart from the people, and says why order cannot sway it.
    page = Client()
    page.force_login(staff["admin"])
    response = page.get(f"/projects/{judged.slug}/quality/")
    html = response.content.decode()
    [row] = read_page(response).tables["model-reviewer-table"][1:]
    assert row["cells"][0].startswith("rm-tiny") and "done" in row["badges"]
    assert row["cells"][2].startswith(f"pairs it never saw: {100 * agree / PAIRS:.1f}%")
    assert "the order a pair is shown in cannot sway it" in html
    assert "1.000 by construction" in html and "follows the left/right coin" in html
    assert row["cells"][4].startswith("1.000") and "measured" not in html
    assert f"scored {PAIRS} pairs as of judgment" in row["cells"][1] and "0 new judgments since" in row["cells"][1]
    # Its weights are attached: the attach form no longer offers them.
    attach_form = html.split('id="model-reviewer-attach"')[1]
    assert ">rm-tiny</option>" not in attach_form and "No registered reward model is left to attach" in attach_form

    # The people's figures are exactly what they were.
    assert agreement_report_for_project(project=judged, bootstrap=50) == report_before

    # An export gets model scores only when it asks; without asking, its bytes are the same as before.
    manifest_after, rows_after = export_rows(judged, tmp_path, "after")
    assert rows_after == rows_before and manifest_after["snapshot_id"] == manifest_before["snapshot_id"]
    _, rows_scored = export_rows(judged, tmp_path, "scored", model_scores=True)
    for line in rows_scored.decode().splitlines():
        row = json.loads(line)
        score = scores[row["meta"]["pair_id"]]
        a_chosen = row["chosen"][0]["content"] == score.pair.response_a.text
        chosen, rejected = (score.score_a, score.score_b) if a_chosen else (score.score_b, score.score_a)
        assert row["meta"]["model_scores"] == {reviewer.identity: {"chosen": chosen, "rejected": rejected}}


def test_reviewers_never_see_a_model_reviewer(judged, staff, make_user, client_for, tiny_reward_model,
                                              django_capture_on_commit_callbacks):
    checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-secret-name")
    assert attach(client_for, staff["admin"], judged, "rm-secret-name",
                  django_capture_on_commit_callbacks).status_code == 201
    identity = ModelReviewer.objects.get().identity
    judged.overlap = 3  # a third reviewer for every pair, each of them scored by the model
    judged.save(update_fields=["overlap"])
    newcomer = make_user("rev3")
    reviewer_client = client_for(newcomer)
    next_pair = reviewer_client.get(f"/api/v1/projects/{judged.slug}/assignments/next")
    assert next_pair.status_code == 200
    score = ModelPairScore.objects.get(pair__assignments__reviewer=newcomer)
    page = Client()
    page.force_login(newcomer)
    for text in (next_pair.content.decode(), page.get(f"/review/{judged.slug}/").content.decode(),
                 reviewer_client.get(f"/api/v1/projects/{judged.slug}/standing").content.decode()):
        for secret in ("rm-secret-name", identity, identity.split(":")[-1][:16], repr(score.score_a)):
            assert secret not in text
    assert reviewer_client.get(f"/api/v1/projects/{judged.slug}/model-reviewers").status_code == 403


def test_bad_attachments_are_one_line_400s(judged, staff, make_project, client_for, tiny_reward_model,
                                           django_capture_on_commit_callbacks):
    checkpoint_register(uri=str(tiny_reward_model["sft"]), name="sft-lm")
    checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-tiny")
    empty = make_project("empty")
    import_rows(empty, make_items(2))
    cases = [
        (judged, "sft-lm", "is not a reward model"),
        (judged, "no-such-checkpoint", "is not a registered checkpoint"),
        (empty, "rm-tiny", "has no judged pairs yet"),
    ]
    for project, checkpoint, expected in cases:
        response = attach(client_for, staff["admin"], project, checkpoint, django_capture_on_commit_callbacks)
        assert response.status_code == 400 and expected in response.json()["detail"], response.json()
        assert "\n" not in response.json()["detail"]
    # A null threshold is refused as a change refuses it, not taken as the default.
    null = attach(client_for, staff["admin"], judged, "rm-tiny", django_capture_on_commit_callbacks,
                  disagreement_threshold=None)
    assert null.status_code == 400 and null.json()["detail"].startswith("disagreement_threshold:"), null.json()
    assert not ModelReviewer.objects.exists()
    assert attach(client_for, staff["admin"], judged, "rm-tiny", django_capture_on_commit_callbacks).status_code == 201
    again = attach(client_for, staff["admin"], judged, "rm-tiny", django_capture_on_commit_callbacks)
    assert again.status_code == 400 and "is attached to this project already" in again.json()["detail"]
    threshold = attach(client_for, staff["admin"], empty, "rm-tiny", django_capture_on_commit_callbacks,
                       disagreement_threshold="lots")
    assert threshold.status_code == 400 and threshold.json()["detail"].startswith("disagreement_threshold:")
    assert attach(client_for, staff["engineer"], judged, "rm-tiny",
                  django_capture_on_commit_callbacks).status_code == 403
    assert ModelReviewer.objects.count() == 1


def test_a_failed_scoring_shows_its_one_line_with_retry_and_detach(
        judged, staff, client_for, reward_model_without_chat_template, django_capture_on_commit_callbacks):
    checkpoint_register(uri=str(reward_model_without_chat_template), name="rm-no-template")
    assert attach(client_for, staff["admin"], judged, "rm-no-template",
                  django_capture_on_commit_callbacks).status_code == 201
    reviewer = ModelReviewer.objects.get()
    assert reviewer.status == "failed"
    assert "cannot be tokenized" in reviewer.error and "\n" not in reviewer.error
    assert "answers.jsonl" not in reviewer.error  # the scratch file is named as what the admin knows

    page = Client()
    page.force_login(staff["admin"])
    [row] = read_page(page.get(f"/projects/{judged.slug}/quality/")).tables["model-reviewer-table"][1:]
    assert "failed" in row["badges"] and "cannot be tokenized" in row["cells"][1]
    assert "Retry" in row["cells"][-1] and "Detach" in row["cells"][-1]

    with django_capture_on_commit_callbacks() as queued:
        retried = page.post(f"/projects/{judged.slug}/quality/model-reviewers/{reviewer.pk}/score")
    assert retried.status_code == 302
    run_queued_scoring(queued)
    reviewer.refresh_from_db()
    assert reviewer.attempt == 2 and reviewer.status == "failed"

    page.post(f"/projects/{judged.slug}/quality/model-reviewers/{reviewer.pk}/detach")
    html = page.get(f"/projects/{judged.slug}/quality/").content.decode()
    assert "No model reviewer is attached to this project." in html
    assert client_for(staff["admin"]).get(f"/api/v1/projects/{judged.slug}/model-reviewers").json() == []


def test_pairs_it_confidently_disagrees_with_get_one_more_reviewer_only_when_asked(
        make_project, make_user, staff, client_for, tiny_reward_model, django_capture_on_commit_callbacks):
    from training.reward_model_scorer import RewardModelScorer

    project = make_project("adaptive", min_overlap=2, max_overlap=4, overlap_stop_rule="lead2", retest_rate=0.0)
    import_rows(project, make_items(PAIRS))
    scorer = RewardModelScorer(tiny_reward_model["reward"])
    pairs = list(Pair.objects.filter(project=project).select_related("prompt", "response_a", "response_b"))
    scored = {pair.pk: scorer.score([pair.prompt.messages] * 2, [pair.response_a.text, pair.response_b.text])
              for pair in pairs}
    # On every other pair the people pick the answer the model scores lower: those are its disagreements.
    against = {pair.pk for number, pair in enumerate(pairs) if number % 2 == 0
               and abs(scored[pair.pk][0] - scored[pair.pk][1]) > 1e-6}
    assert against

    def pick(assignment):
        a_higher = scored[assignment.pair_id][0] > scored[assignment.pair_id][1]
        wants_a = a_higher != (assignment.pair_id in against)
        return "left" if wants_a == assignment.a_on_left else "right"

    for name in ("rev1", "rev2"):
        judge_until_done(project, make_user(name), pick)
    needed_before = dict(Pair.objects.filter(project=project).values_list("pk", "reviewers_needed"))
    assert set(needed_before.values()) == {2}  # every pair decided 2-0

    checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-tiny")
    assert attach(client_for, staff["admin"], project, "rm-tiny", django_capture_on_commit_callbacks,
                  disagreement_threshold=0).status_code == 201
    assert dict(Pair.objects.filter(project=project).values_list("pk", "reviewers_needed")) == needed_before
    third = make_user("rev3")
    assert assignment_next(project=project, reviewer=third) is None

    reviewer = ModelReviewer.objects.get()
    changed = client_for(staff["admin"]).patch(f"/api/v1/model-reviewers/{reviewer.pk}",
                                               {"offer_disagreements": True}, format="json")
    assert changed.status_code == 200 and changed.json()["pairs_offered"] == len(against)
    offered = []
    while (assignment := assignment_next(project=project, reviewer=third)) is not None:
        offered.append(assignment.pair_id)
        judgment_submit(assignment_id=assignment.pk, reviewer=third, choice="left", strength=2,
                        criteria={"correct": "left", "complete": "tie"},
                        rationale="A third look at a pair the model doubted.", client_key=uuid.uuid4())
    assert sorted(offered) == sorted(against)
    # Once offered, a pair is not offered again by the same model reviewer.
    client_for(staff["admin"]).patch(f"/api/v1/model-reviewers/{reviewer.pk}", {"offer_disagreements": True},
                                     format="json")
    assert np.all([p.reviewers_needed <= 4 for p in Pair.objects.filter(project=project)])
    assert ModelPairScore.objects.filter(offered_at__isnull=False).count() == len(against)


def row_html(html: str, reviewer_id: int) -> str:
    start = html.index(f'data-model-reviewer="{reviewer_id}"')
    return html[start:html.index("</tr>", start)]


def test_a_scoring_that_stopped_reporting_shows_as_failed_and_can_be_scored_again(
        judged, staff, client_for, tiny_reward_model, django_capture_on_commit_callbacks):
    checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-tiny")
    api = client_for(staff["admin"])
    with django_capture_on_commit_callbacks() as queued:
        assert api.post(f"/api/v1/projects/{judged.slug}/model-reviewers", {"checkpoint": "rm-tiny"},
                        format="json").status_code == 201
    reviewer = ModelReviewer.objects.get()
    # Queued just now: it is not stale, so scoring again waits.
    busy = api.post(f"/api/v1/model-reviewers/{reviewer.pk}/score")
    assert busy.status_code == 409 and "is queued now" in busy.json()["detail"]

    # Its worker took it, then was killed mid-scoring: the row says "scoring" and its heartbeat stopped.
    long_ago = timezone.now() - STALE_AFTER - timedelta(minutes=5)
    ModelReviewer.objects.filter(pk=reviewer.pk).update(status="scoring", scoring_started_at=long_ago,
                                                        heartbeat_at=long_ago)
    listed = api.get(f"/api/v1/model-reviewers/{reviewer.pk}").json()
    assert listed["status"] == "failed" and listed["error"].startswith("scoring stopped reporting")
    assert listed["error"].endswith("score again") and "\n" not in listed["error"]
    page = Client()
    page.force_login(staff["admin"])
    html = page.get(f"/projects/{judged.slug}/quality/").content.decode()
    assert "Retry" in row_html(html, reviewer.pk) and "disabled" not in row_html(html, reviewer.pk)

    with django_capture_on_commit_callbacks() as queued:
        again = page.post(f"/projects/{judged.slug}/quality/model-reviewers/{reviewer.pk}/score")
    assert again.status_code == 302
    reviewer.refresh_from_db()
    assert reviewer.attempt == 2 and reviewer.status == "queued"
    run_queued_scoring(queued)
    reviewer.refresh_from_db()
    assert reviewer.status == "done" and ModelPairScore.objects.filter(model_reviewer=reviewer).count() == PAIRS
    # The killed attempt, should its message be delivered after all, writes nothing.
    assert score_model_reviewer(reviewer.pk, 1) == "skipped"

    # Queued long ago and never taken (a lost message): failed too, and the API accepts scoring it again.
    ModelReviewer.objects.filter(pk=reviewer.pk).update(status="queued", heartbeat_at=long_ago)
    with django_capture_on_commit_callbacks():
        accepted = api.post(f"/api/v1/model-reviewers/{reviewer.pk}/score")
    assert accepted.status_code == 202 and accepted.json()["status"] == "queued"


@pytest.mark.django_db(transaction=True)
def test_without_a_broker_attaching_returns_at_once_and_a_thread_scores(judged, staff, client_for,
                                                                       tiny_reward_model):
    from annotate.celery import app

    assert app.conf.task_always_eager  # the embedded defaults: no broker
    checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-tiny")
    response = client_for(staff["admin"]).post(f"/api/v1/projects/{judged.slug}/model-reviewers",
                                               {"checkpoint": "rm-tiny"}, format="json")
    # The request did not wait for the reward model: the scoring is still ahead of it or under way.
    assert response.status_code == 201 and response.json()["status"] in ("queued", "scoring")
    [scoring] = [t for t in threading.enumerate() if t.name == f"model-reviewer-{response.json()['id']}"]
    scoring.join(timeout=600)
    reviewer = ModelReviewer.objects.get()
    assert reviewer.status == "done", reviewer.error
    assert reviewer.scoring_started_at <= reviewer.heartbeat_at
    assert ModelPairScore.objects.filter(model_reviewer=reviewer).count() == PAIRS


def test_settings_are_changed_one_at_a_time_and_null_or_an_unknown_action_is_refused(
        judged, staff, client_for, tiny_reward_model, django_capture_on_commit_callbacks):
    checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-tiny")
    api = client_for(staff["admin"])
    with django_capture_on_commit_callbacks():
        reviewer_id = api.post(f"/api/v1/projects/{judged.slug}/model-reviewers",
                               {"checkpoint": "rm-tiny", "disagreement_threshold": 2.5}, format="json").json()["id"]
    changed = api.patch(f"/api/v1/model-reviewers/{reviewer_id}", {"offer_disagreements": True}, format="json")
    assert changed.status_code == 200 and changed.json()["disagreement_threshold"] == 2.5  # left out: kept
    for body in ({"disagreement_threshold": None}, {"offer_disagreements": None}):
        refused = api.patch(f"/api/v1/model-reviewers/{reviewer_id}", body, format="json")
        assert refused.status_code == 400 and refused.json()["detail"].startswith(f"{next(iter(body))}: None")
    reviewer = ModelReviewer.objects.get()
    assert reviewer.offer_disagreements and reviewer.disagreement_threshold == 2.5

    page = Client()
    page.force_login(staff["admin"])
    assert page.post(f"/projects/{judged.slug}/quality/model-reviewers/{reviewer_id}/rescore").status_code == 404


@pytest.mark.django_db(transaction=True)  # the scoring is queued as the attach commits, before the page answers
def test_an_attachment_whose_scoring_cannot_be_queued_is_an_error_on_the_page(judged, staff, tiny_reward_model):
    from annotate.celery import app

    checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-tiny")
    page = Client()
    page.force_login(staff["admin"])
    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
    configure_celery(broker_url="redis://127.0.0.1:9/0", task_always_eager=False)  # a broker nobody listens on
    try:
        response = page.post(f"/projects/{judged.slug}/quality/model-reviewers", {"checkpoint": "rm-tiny"},
                             follow=True)
    finally:
        configure_celery(**saved)
    shown = [(message.level_tag, message.message) for message in response.context["messages"]]
    assert shown == [("error", f"rm-tiny attached: scoring failed: {ModelReviewer.objects.get().error}")]
    assert "could not be queued" in shown[0][1]


def test_an_offer_withdrawn_by_an_undo_or_a_settings_change_is_made_again_by_the_next_pass(
        make_project, make_user, staff, client_for, tiny_reward_model, django_capture_on_commit_callbacks):
    from training.reward_model_scorer import RewardModelScorer

    project = make_project("withdrawn", min_overlap=2, max_overlap=4, overlap_stop_rule="lead2", retest_rate=0.0)
    import_rows(project, make_items(6))
    scorer = RewardModelScorer(tiny_reward_model["reward"])
    pairs = Pair.objects.filter(project=project).select_related("prompt", "response_a", "response_b")
    scored = {pair.pk: scorer.score([pair.prompt.messages] * 2, [pair.response_a.text, pair.response_b.text])
              for pair in pairs}
    against = {pk for pk, (a, b) in scored.items() if abs(a - b) > 1e-6}  # people pick the lower-scored answer

    def pick(assignment):
        wants_a = scored[assignment.pair_id][0] < scored[assignment.pair_id][1]
        return "left" if wants_a == assignment.a_on_left else "right"

    second = make_user("rev2")
    for reviewer in (make_user("rev1"), second):
        judge_until_done(project, reviewer, pick)
    checkpoint_register(uri=str(tiny_reward_model["reward"]), name="rm-tiny")
    assert attach(client_for, staff["admin"], project, "rm-tiny", django_capture_on_commit_callbacks,
                  offer_disagreements=True, disagreement_threshold=0).status_code == 201
    reviewer = ModelReviewer.objects.get()
    api = client_for(staff["admin"])

    def needs() -> dict[int, int]:
        return dict(Pair.objects.filter(project=project).values_list("pk", "reviewers_needed"))

    def offered_by_next_pass() -> int:  # saving its settings as they are is a pass
        return api.patch(f"/api/v1/model-reviewers/{reviewer.pk}", {"offer_disagreements": True},
                         format="json").json()["pairs_offered"]

    assert needs() == {pk: 3 if pk in against else 2 for pk in scored}
    assert offered_by_next_pass() == len(against)

    # The second reviewer withdraws their last vote, on an offered pair, and gives it again: the pair was decided
    # again from its votes (2 needed), the offer is gone, and the next pass makes it again.
    undone = judgment_undo_last(project=project, reviewer=second)
    assert undone.pair_id in against
    judge_until_done(project, second, pick)
    assert needs()[undone.pair_id] == 2
    assert api.get(f"/api/v1/model-reviewers/{reviewer.pk}").json()["pairs_offered"] == len(against) - 1
    assert offered_by_next_pass() == len(against)
    assert needs()[undone.pair_id] == 3

    # A change of the overlap settings decides every pair again: all offers are withdrawn, then made again.
    project_settings_update(project=project, max_overlap=5)
    assert set(needs().values()) == {2}
    assert api.get(f"/api/v1/model-reviewers/{reviewer.pk}").json()["pairs_offered"] == 0
    assert offered_by_next_pass() == len(against)
    assert needs() == {pk: 3 if pk in against else 2 for pk in scored}


def test_pairs_over_the_reward_models_max_length_are_not_scored_and_the_page_says_how_many(
        judged, staff, client_for, tiny_reward_model, django_capture_on_commit_callbacks, tmp_path):
    """One length rule (training.reward_model_scorer.fits_max_length): an answer longer than the max_length the
    model was trained under is not scored, never cut; the pairs it leaves out are counted and shown."""
    import shutil

    from training.reward_model_scorer import RewardModelScorer

    run = tmp_path / "rm-short"
    shutil.copytree(tiny_reward_model["reward"].parent, run)
    pairs = list(Pair.objects.filter(project=judged).select_related("prompt", "response_a", "response_b"))
    scorer = RewardModelScorer(run / "checkpoint")
    longest = {pair.pk: max(len(scorer.sequence(pair.prompt.messages, pair.response_a.text)),
                            len(scorer.sequence(pair.prompt.messages, pair.response_b.text))) for pair in pairs}
    # A max_length between the pairs' lengths, so that some pairs fit and some do not.
    max_length = sorted(longest.values())[len(longest) // 2]
    over = {pair_id for pair_id, length in longest.items() if length > max_length}
    assert 0 < len(over) < PAIRS
    record = json.loads((run / "run.json").read_text())
    record["config"]["max_length"] = max_length
    (run / "run.json").write_text(json.dumps(record))
    checkpoint_register(uri=str(run / "checkpoint"), name="rm-short")

    assert attach(client_for, staff["admin"], judged, "rm-short", django_capture_on_commit_callbacks).status_code == 201
    reviewer = ModelReviewer.objects.get()
    assert reviewer.status == "done"
    assert set(ModelPairScore.objects.filter(model_reviewer=reviewer).values_list("pair_id", flat=True)) \
        == set(longest) - over
    [listed] = client_for(staff["admin"]).get(f"/api/v1/projects/{judged.slug}/model-reviewers").json()
    assert listed["pairs_scored"] == PAIRS - len(over)
    assert listed["over_max_length"]["pairs"] == len(over) and listed["over_max_length"]["max_length"] == max_length
    assert listed["figures"]["left_out"]["over_max_length"] == len(over)
    assert listed["figures"]["left_out"]["not_scored"] == 0
    assert listed["figures"]["agreement"]["n"] == PAIRS - len(over)

    page = Client()
    page.force_login(staff["admin"])
    [row] = read_page(page.get(f"/projects/{judged.slug}/quality/")).tables["model-reviewer-table"][1:]
    assert f"{len(over)} of {PAIRS} pairs longer than max_length ({max_length} tokens) not scored" in row["cells"][1]
    assert f"{len(over)}: an answer is longer than the reward model's max_length" in row["cells"][-2]


def test_agreement_on_pairs_it_never_saw_leads_and_its_training_pairs_are_apart(
        judged, staff, client_for, tiny_checkpoint, django_capture_on_commit_callbacks, tmp_path):
    """A reward model trained on this project's snapshot: its lineage (checkpoint -> run -> snapshot) names the
    pairs of that snapshot's train split, and its agreement is reported on the others first."""
    import yaml

    from tests.conftest import TORCH_THREADS
    from training.reward import load_reward_config, run_reward
    from training.snapshot import iter_rows

    manifest, _ = export_rows(judged, tmp_path, "snapshot", test_ratio=0.5, seed=1)
    train_ids = {row["meta"]["pair_id"] for row in iter_rows(tmp_path / "snapshot", "train")}
    assert 0 < len(train_ids) < PAIRS
    config = {"base_checkpoint": str(tiny_checkpoint), "snapshot": str(tmp_path / "snapshot"),
              "output_dir": str(tmp_path / "rm"), "learning_rate": 1e-3, "max_steps": 2,
              "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8, "logging_steps": 1,
              "torch_threads": TORCH_THREADS, "use_cpu": True, "seed": 0, "report_to": ["none"]}
    (tmp_path / "rm.yaml").write_text(yaml.safe_dump(config))
    run_reward(load_reward_config(tmp_path / "rm.yaml"))
    checkpoint_register(uri=str(tmp_path / "rm" / "checkpoint"), name="rm-own")

    assert attach(client_for, staff["admin"], judged, "rm-own", django_capture_on_commit_callbacks).status_code == 201
    [listed] = client_for(staff["admin"]).get(f"/api/v1/projects/{judged.slug}/model-reviewers").json()
    assert listed["training_snapshot"]["snapshot_id"] == manifest["snapshot_id"]
    assert listed["training_snapshot"]["train_pairs_here"] == len(train_ids)
    figures = listed["figures"]
    assert list(figures).index("agreement_unseen") < list(figures).index("agreement_seen") \
        < list(figures).index("agreement")
    # Worked out here from the stored scores: every pair has a 2-0 majority for a or b.
    people_a = {pair.pk: not pair.prompt.external_id.endswith(("09", "10", "11"))
                for pair in Pair.objects.filter(project=judged).select_related("prompt")}
    hits = {pair_id: (score_a > score_b) == people_a[pair_id] for pair_id, score_a, score_b in
            ModelPairScore.objects.values_list("pair_id", "score_a", "score_b")}
    seen, unseen = figures["agreement_seen"], figures["agreement_unseen"]
    assert seen["n"] == len(train_ids) and unseen["n"] == PAIRS - len(train_ids)
    assert seen["share"]["hits"] == sum(hits[pair_id] for pair_id in train_ids)
    assert unseen["share"]["hits"] == sum(hit for pair_id, hit in hits.items() if pair_id not in train_ids)
    assert seen["share"]["hits"] + unseen["share"]["hits"] == figures["agreement"]["share"]["hits"]

    page = Client()
    page.force_login(staff["admin"])
    [row] = read_page(page.get(f"/projects/{judged.slug}/quality/")).tables["model-reviewer-table"][1:]
    agreement = row["cells"][2]
    assert agreement.index("pairs it never saw") < agreement.index("its training pairs") < agreement.index("all pairs")
    assert f"{len(train_ids)} of these pairs are in its train split" in row["cells"][0]

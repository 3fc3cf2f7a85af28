"""The realistic BPE model (bpe-sft small: Qwen2, a byte-level BPE tokenizer, Qwen's chat template) through the app as
its users take it: registered as a base checkpoint, a reward run launched over the API and run by the worker, and
the reward model that run makes attached to a project as a model reviewer, which scores every judged pair through
`python -m training reward-score`. Nothing assumes the tiny model's one-token-a-character tokenizer."""

import json
from pathlib import Path

import pytest

from annotate.exports.models import Export
from annotate.quality.models import ModelPairScore, ModelReviewer
from annotate.runs.checkpoints import checkpoint_register, is_reward_model
from annotate.runs.execute import run_execute
from annotate.runs.launch import run_config_check
from annotate.runs.models import Checkpoint
from annotate.runs.tasks import score_model_reviewer
from tests.conftest import TORCH_THREADS, built_once, import_rows, judge_until_done, make_items

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

PAIRS = 6


@pytest.fixture
def bpe_base(db, tmp_path_factory):
    """The small BPE checkpoint (as tests/training/test_bpe_sft.py builds it, once per test run), registered."""
    from training.bpe_sft import BpeSFTConfig, build_bpe_sft

    folder = built_once(tmp_path_factory, "bpe/small", lambda out: build_bpe_sft(
        out, BpeSFTConfig(steps=2, batch_size=4, warmup_steps=1, eval_tasks=2, torch_threads=TORCH_THREADS),
        log=lambda line: None))
    return checkpoint_register(uri=str(folder), name="bpe-small")


def test_a_reward_model_trained_from_the_bpe_checkpoint_in_the_app_reviews_a_projects_pairs(
        bpe_base, engineer_api, make_project, make_user, client_for, tiny_snapshot, django_capture_on_commit_callbacks):
    export = Export.objects.create(project=make_project("speed"), filters={}, status=Export.Status.DONE,
                                   out_dir=str(tiny_snapshot), counts={"train": 24, "test": 8})
    config = {"learning_rate": 1e-3, "max_steps": 2, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8,
              "max_length": 256, "torch_threads": TORCH_THREADS, "use_cpu": True, "report_to": ["none"]}
    started = engineer_api.post("/api/v1/runs", {"kind": "reward", "base_checkpoint": "bpe-small",
                                                 "export": export.pk, "config": config}, format="json")
    assert started.status_code == 202, started.json()
    assert run_config_check(started.json()["id"], enqueue=False).status == "queued"
    run = run_execute(run_id=started.json()["id"], worker="tests")
    assert run.status == "succeeded", (run.error, run.log_tail[-2000:])
    made = Checkpoint.objects.get(run=run)
    assert is_reward_model(made) and made.parent == bpe_base
    assert json.loads((Path(made.uri) / "config.json").read_text())["architectures"] == ["Qwen2ForSequenceClassification"]

    project = make_project("reviewed", overlap=2, retest_rate=0.0)
    import_rows(project, make_items(PAIRS))
    for name in ("rev1", "rev2"):
        judge_until_done(project, make_user(name), lambda assignment: "left")
    with django_capture_on_commit_callbacks() as queued:
        attached = client_for(make_user("boss", role="admin")).post(
            f"/api/v1/projects/{project.slug}/model-reviewers", {"checkpoint": made.name}, format="json")
    assert attached.status_code == 201, attached.json()
    for callback in queued:  # the scoring, as the training queue's worker runs it
        score_model_reviewer(*callback.args)
    reviewer = ModelReviewer.objects.get()
    assert (reviewer.status, reviewer.error) == ("done", "")
    scores = ModelPairScore.objects.filter(model_reviewer=reviewer)
    assert scores.count() == PAIRS and all(s.score_a != s.score_b for s in scores)

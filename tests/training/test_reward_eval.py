"""`python -m training reward-eval`: a reward model on a snapshot's test split, beside DPO and the human ceiling."""

import json

import pytest
import yaml

from tests.conftest import TORCH_THREADS
from training.cli import main
from training.reward_eval import human_ceiling, pair_agreement

from .conftest import run_training_cli


@pytest.mark.parametrize(("votes", "agreement"), [
    # Each a voter, held out, meets a:2: the mode is a, so 3 of 3 agree.
    ({"a": 3, "b": 0, "tie": 0, "both_bad": 0}, 1.0),
    # Each a voter meets a:1 b:1, two modes: agrees with probability 1/2, twice; the b voter meets a:2 and
    # disagrees. (1/2 + 1/2 + 0) / 3 = 1/3. A strict-majority ceiling scored this pair 0.
    ({"a": 2, "b": 1, "tie": 0, "both_bad": 0}, 1 / 3),
    # Each a voter meets a:2 b:1 (mode a), three times; the b voter meets a:3. 3 of 4 = 0.75.
    ({"a": 3, "b": 1, "tie": 0, "both_bad": 0}, 0.75),
    # Each b voter meets b:3 a:1 (agrees), four times; the a voter meets b:4. 4 of 5 = 0.8.
    ({"a": 1, "b": 4, "tie": 0, "both_bad": 0}, 0.8),
    # Each a voter meets a:2 tie:1 (agrees), three times; the tie voter meets a:3 (disagrees). 3 of 4.
    ({"a": 3, "b": 0, "tie": 1, "both_bad": 0}, 0.75),
    # Whoever is held out meets a 1-1 split that excludes its own choice: 0 of 3.
    ({"a": 1, "b": 1, "tie": 0, "both_bad": 1}, 0.0),
    # Two votes: each meets the other alone, the plain agreement of two people.
    ({"a": 2, "b": 0, "tie": 0, "both_bad": 0}, 1.0),
    ({"a": 1, "b": 1, "tie": 0, "both_bad": 0}, 0.0),
    # Two tie votes agree with each other: a vote is any of the four choices.
    ({"a": 0, "b": 0, "tie": 2, "both_bad": 0}, 1.0),
    # a:2 b:2: each voter meets its own side at 1 and the other at 2, never a mode. 0 of 4.
    ({"a": 2, "b": 2, "tie": 0, "both_bad": 0}, 0.0),
])
def test_each_vote_against_the_mode_of_the_others(votes, agreement):
    assert pair_agreement(votes) == pytest.approx(agreement)


def test_a_two_to_one_pair_is_not_scored_as_total_disagreement():
    """Nine unanimous pairs and three 2-1 pairs: the unanimous share is 0.75, the human agreement 10/12."""
    votes = [{"a": 3, "b": 0, "tie": 0, "both_bad": 0}] * 9 + [{"a": 2, "b": 1, "tie": 0, "both_bad": 0}] * 3
    ceiling = human_ceiling(votes)
    assert ceiling["agreement"] == pytest.approx(round((9 * 1.0 + 3 * (1 / 3)) / 12, 4))  # 0.8333
    assert "AlpacaFarm" in ceiling["definition"] and "mode" in ceiling["definition"]


def test_human_ceiling_averages_pairs_and_leaves_out_pairs_with_fewer_than_two_votes():
    votes = [
        {"a": 3, "b": 0, "tie": 0, "both_bad": 0},  # 1.0
        {"a": 2, "b": 1, "tie": 0, "both_bad": 0},  # 1/3
        {"a": 3, "b": 1, "tie": 0, "both_bad": 0},  # 0.75
        {"a": 1, "b": 1, "tie": 0, "both_bad": 0},  # 0.0
        {"a": 1, "b": 0, "tie": 0, "both_bad": 0},  # one judgment: counted, left out
        None,                                        # no votes recorded: counted, left out
    ]
    ceiling = human_ceiling(votes)
    assert ceiling["agreement"] == pytest.approx(round((1.0 + 1 / 3 + 0.75 + 0.0) / 4, 4))
    assert ceiling["pairs"] == 4 and ceiling["pairs_too_few_judgments"] == 2
    assert ceiling["votes_left_out"] == 3 + 3 + 4 + 2
    low, high = ceiling["interval"]
    assert 0.0 <= low <= ceiling["agreement"] <= high <= 1.0
    assert "bootstrap" in ceiling["interval_method"] and "seed 0" in ceiling["interval_method"]
    assert human_ceiling(votes) == ceiling  # the seed is fixed: the same votes, the same interval


def test_human_ceiling_without_enough_votes_is_none_not_zero():
    ceiling = human_ceiling([{"a": 1, "b": 0, "tie": 0, "both_bad": 0}, None])
    assert ceiling["agreement"] is None and ceiling["interval"] is None
    assert ceiling["pairs"] == 0 and ceiling["pairs_too_few_judgments"] == 2


# --- the command ----------------------------------------------------------------------------------------

TEST_VOTES = [  # cycled over the tiny snapshot's test rows
    {"a": 3, "b": 0, "tie": 0, "both_bad": 0},
    {"a": 2, "b": 1, "tie": 0, "both_bad": 0},
    {"a": 0, "b": 4, "tie": 0, "both_bad": 1},
    {"a": 2, "b": 0, "tie": 0, "both_bad": 0},
]


def voted_snapshot(out, source, *, with_test=True):
    """The rows of `source` in a new snapshot whose test rows carry reviewers' votes (or no test split)."""
    from training.snapshot import SnapshotWriter, iter_rows

    with SnapshotWriter(out, project="tiny-demo", created_at="2025-01-01T00:00:00Z", criteria_version=1,
                        filters={"copied": True}) as writer:
        for row in iter_rows(source, "train"):
            writer.add_row("train", row)
        if with_test:
            for number, row in enumerate(iter_rows(source, "test")):
                votes = TEST_VOTES[number % len(TEST_VOTES)]
                writer.add_row("test", {**row, "meta": {**row["meta"], "votes": votes,
                                                        "judgments": sum(votes.values())}})
    return out


@pytest.fixture(scope="module")
def untrained_classifier(tmp_path_factory, tiny_checkpoint):
    """The tiny checkpoint with a new one-output score head, saved as a classifier: loads as a reward model."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out = tmp_path_factory.mktemp("classifier") / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_checkpoint, local_files_only=True, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def write_reward_config(tmp_path, checkpoint, snapshot):
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump({
        "base_checkpoint": str(checkpoint), "snapshot": str(snapshot), "output_dir": str(tmp_path / "rm"),
        "learning_rate": 1e-3, "max_steps": 2, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8,
        "logging_steps": 1, "torch_threads": TORCH_THREADS, "use_cpu": True, "report_to": ["none"],
    }))
    return path


def assert_accuracy_block(block, n):
    assert block["n"] == n and 0.0 <= block["accuracy"] <= 1.0
    low, high = block["interval"]
    assert 0.0 <= low <= block["accuracy"] <= high <= 1.0


@pytest.mark.slow
def test_a_trained_reward_model_beside_a_dpo_child_and_the_human_ceiling(tmp_path, tiny_checkpoint,
                                                                        tiny_snapshot):
    snapshot = voted_snapshot(tmp_path / "voted", tiny_snapshot)
    trained = run_training_cli("reward", "--config", str(write_reward_config(tmp_path, tiny_checkpoint, snapshot)))
    assert trained.returncode == 0, trained.stderr[-3000:]
    out = tmp_path / "reward-eval.json"

    # The tiny checkpoint as its own DPO reference: every implicit reward is exactly 0, so none ranks a pair.
    result = run_training_cli("reward-eval", "--reward-checkpoint", str(tmp_path / "rm" / "checkpoint"),
                              "--snapshot", str(snapshot), "--dpo-checkpoint", str(tiny_checkpoint),
                              "--dpo-reference", str(tiny_checkpoint), "--beta", "0.1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]

    figures = json.loads(out.read_text())
    assert figures["format"] == "pairwise.reward_eval/1"
    assert figures["snapshot"]["test_pairs"] == 8
    reward = figures["reward_model"]["test"]
    assert_accuracy_block(reward, 8)
    assert reward["interval_method"] == "Wilson score interval, 95%, n = pairs"
    assert reward["chosen_shorter"]["n"] + reward["chosen_longer"]["n"] + reward["equal_length_pairs"] == 8
    assert reward["length_correlation"]["answers"] == 16
    # The same figures `training reward` recorded for this model on these rows.
    recorded = json.loads((tmp_path / "rm" / "run.json").read_text())["results"]["test"]
    assert reward == recorded

    dpo = figures["dpo"]["test"]
    assert dpo["n"] == 8 and dpo["accuracy"] == 0.0 and dpo["beta"] == 0.1
    assert dpo["mean_margin"] == 0.0 and "preference_accuracy" in dpo
    assert figures["dpo"]["reference"] == str(tiny_checkpoint)

    # Test rows cycle through TEST_VOTES: 1.0, 1/3, 0.8 (b:4 both_bad:1, 4 of 5 agree) and 1.0 (a:2).
    ceiling = figures["human_ceiling"]
    assert ceiling["pairs"] == 8 and ceiling["pairs_too_few_judgments"] == 0
    assert ceiling["agreement"] == pytest.approx(round((1.0 + 1 / 3 + 0.8 + 1.0) * 2 / 8, 4))
    low, high = ceiling["interval"]
    assert 0.0 <= low <= ceiling["agreement"] <= high <= 1.0

    for line in ("accuracy, chosen answer shorter", "reward vs length", "DPO implicit reward", "human ceiling"):
        assert line in result.stdout, line


@pytest.mark.slow
def test_a_snapshot_without_a_test_split_is_one_line(tmp_path, tiny_snapshot, untrained_classifier, capsys):
    snapshot = voted_snapshot(tmp_path / "train-only", tiny_snapshot, with_test=False)
    out = tmp_path / "figures.json"

    code = main(["reward-eval", "--reward-checkpoint", str(untrained_classifier), "--snapshot", str(snapshot),
                 "--out", str(out)])

    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: snapshot {snapshot} has no test split; export it with --test-ratio above 0"]
    assert not out.exists()


@pytest.mark.slow
def test_a_causal_lm_is_not_a_reward_model(tmp_path, tiny_checkpoint, tiny_snapshot, capsys):
    code = main(["reward-eval", "--reward-checkpoint", str(tiny_checkpoint), "--snapshot", str(tiny_snapshot)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a sequence classifier" in err[0], err


@pytest.mark.slow
def test_a_dpo_child_without_its_run_needs_beta(tmp_path, tiny_checkpoint, tiny_snapshot, untrained_classifier,
                                                capsys):
    code = main(["reward-eval", "--reward-checkpoint", str(untrained_classifier), "--snapshot", str(tiny_snapshot),
                 "--dpo-checkpoint", str(tiny_checkpoint), "--dpo-reference", str(tiny_checkpoint)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--beta 0.1" in err[0], err


@pytest.mark.slow
def test_without_votes_the_ceiling_is_not_a_number(tmp_path, tiny_snapshot, untrained_classifier, capsys):
    out = tmp_path / "figures.json"
    assert main(["reward-eval", "--reward-checkpoint", str(untrained_classifier), "--snapshot", str(tiny_snapshot),
                 "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["dpo"] is None
    assert_accuracy_block(figures["reward_model"]["test"], 8)
    assert figures["human_ceiling"]["agreement"] is None
    assert figures["human_ceiling"]["pairs_too_few_judgments"] == 8
    assert "human ceiling: -" in capsys.readouterr().out


@pytest.mark.slow
def test_a_dpo_child_takes_its_reference_and_beta_from_its_run(tmp_path, tiny_checkpoint, tiny_snapshot,
                                                               untrained_classifier):
    import shutil

    from training.run_folder import checkpoint_content_hash, write_parent_json

    run = tmp_path / "dpo-run"
    shutil.copytree(tiny_checkpoint, run / "checkpoint")
    (run / "run.json").write_text(json.dumps({"kind": "dpo", "config": {"beta": 0.25, "max_length": 512}}))
    base_hash = checkpoint_content_hash(tiny_checkpoint)
    write_parent_json(run / "checkpoint", parent_path=str(tiny_checkpoint), parent_hash=base_hash, run="dpo-run",
                      kind="dpo", snapshot_id=None, content_hash=base_hash)
    out = tmp_path / "figures.json"

    assert main(["reward-eval", "--reward-checkpoint", str(untrained_classifier), "--snapshot", str(tiny_snapshot),
                 "--dpo-checkpoint", str(run / "checkpoint"), "--out", str(out)]) == 0

    dpo = json.loads(out.read_text())["dpo"]
    assert dpo["reference"] == str(tiny_checkpoint.resolve())
    assert dpo["test"]["beta"] == 0.25 and dpo["test"]["max_length"] == 512
    assert_accuracy_block(dpo["test"], 8)


def test_the_printed_table_shows_each_columns_mean_margin():
    from training.reward import ScoredPair, reward_summary
    from training.reward_eval import format_reward_eval_table, human_ceiling

    # Margins 1.0, -0.5 and 2.0: mean 0.833; the DPO column's 0.1 and 0.3: mean 0.2.
    reward = reward_summary([ScoredPair(1.0, 0.0, 5, 9), ScoredPair(0.0, 0.5, 9, 5), ScoredPair(3.0, 1.0, 4, 4)],
                            left_out=0)
    dpo = {**reward_summary([ScoredPair(0.1, 0.0, 5, 9), ScoredPair(0.3, 0.0, 9, 5)], left_out=0), "beta": 0.1,
           "preference_accuracy": 1.0}
    table = format_reward_eval_table({
        "snapshot": {"test_pairs": 3, "path": "/snapshots/s"},
        "reward_model": {"test": reward, "note": None},
        "dpo": {"test": dpo, "reference": "/ref"},
        "human_ceiling": human_ceiling([None]),
    })
    [line] = [line for line in table.splitlines() if line.startswith("mean margin")]
    assert line.split()[-2:] == ["0.833", "0.200"]

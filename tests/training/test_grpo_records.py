"""The arithmetic behind GRPO's records: advantages recomputed from rewards, the difficulty band, and why a
run left its base's weights as they were."""

import math

import pytest

from training.grpo.difficulty import band_summary, keep_in_band
from training.grpo.rollouts import recompute_advantages
from training.run_folder import weights_outcome


def rows_of(groups: list[list[float | None]], batch: int = 0) -> list[dict]:
    return [{"rollout_id": f"{batch}-{g}-{m}", "group_id": f"{batch}-{g}", "batch": batch, "reward": reward}
            for g, rewards in enumerate(groups) for m, reward in enumerate(rewards)]


def trl_advantages(groups: list[list[float | None]], scale_rewards: str) -> list[float]:
    """TRL's own computation (GRPOTrainer._generate_and_score_completions, one reward function)."""
    import torch
    from trl.trainer.utils import nanstd

    size = len(groups[0])
    rewards = torch.tensor([math.nan if r is None else r for group in groups for r in group])
    mean = torch.nanmean(rewards.view(-1, size), dim=1).repeat_interleave(size)
    if scale_rewards == "batch":
        std = nanstd(rewards).expand_as(rewards)
    else:
        std = nanstd(rewards.view(-1, size), dim=1).repeat_interleave(size)
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0).tolist()


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_recomputed_advantages_match_trls_arithmetic(scale_rewards):
    groups = [[1.0, 0.0, 1.0, 0.0], [0.2, 0.2, 0.2, 0.2], [1.0, None, 0.1, 0.2], [None, None, None, 0.9]]
    rows = rows_of(groups)
    recomputed = recompute_advantages(rows, scale_rewards=scale_rewards)
    expected = trl_advantages(groups, scale_rewards)
    for row, value in zip(rows, expected, strict=True):
        assert math.isclose(recomputed[row["rollout_id"]], value, abs_tol=1e-5), (row, value)
    # The example: 1, 0, 1, 0 -> reward minus the group's mean, scaled by the group's spread.
    assert [round(recomputed[f"0-0-{m}"], 3) for m in range(4)] == (
        [0.5, -0.5, 0.5, -0.5] if scale_rewards == "none" else
        [0.866, -0.866, 0.866, -0.866] if scale_rewards == "group" else [round(v, 3) for v in expected[:4]])
    # Unscorable answers and all-equal groups teach nothing.
    assert recomputed["0-2-1"] == 0.0 and all(recomputed[f"0-1-{m}"] == 0.0 for m in range(4))


def trl_two_function_advantages(verifier: list[list[float | None]], model: list[list[float | None]],
                                weights: tuple[float, float], aggregation: str) -> list[float]:
    """TRL's GRPOTrainer._generate_and_score_completions with two reward functions, scale_rewards=group,
    transcribed line by line onto the same torch calls."""
    import torch
    from trl.trainer.utils import nanstd

    size = len(verifier[0])
    per_func = torch.tensor([[math.nan if v is None else v, math.nan if m is None else m]
                             for vg, mg in zip(verifier, model, strict=True) for v, m in zip(vg, mg, strict=True)],
                            dtype=torch.float64)
    w = torch.tensor(weights, dtype=torch.float64)
    unscorable = torch.isnan(per_func).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (per_func * w.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        mean = torch.nanmean(rewards.view(-1, size), dim=1).repeat_interleave(size)
        std = nanstd(rewards.view(-1, size), dim=1).repeat_interleave(size)
        advantages = (rewards - mean) / (std + 1e-4)
    else:
        grouped = per_func.view(-1, size, 2)
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True)
        reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, 2)
        rewards = (reward_k * w.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        advantages = (rewards - torch.nanmean(rewards)) / (nanstd(rewards) + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0).tolist()


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
@pytest.mark.parametrize("weights", [(1.0, 1.0), (0.0, 1.0), (0.5, 2.0)])
def test_a_verifier_and_a_reward_model_combine_as_trl_combines_them(aggregation, weights):
    # Group 0: both functions score; group 1: open tasks (no verifier); group 2: one answer no function scored.
    verifier = [[1.0, 0.0, 1.0, 0.0], [None, None, None, None], [0.0, 1.0, None, 1.0]]
    model = [[0.3, -0.2, 0.9, 0.1], [1.5, 0.5, -0.5, 0.5], [0.2, 0.4, None, -0.1]]
    rows = [{**row, "reward_model_score": score}
            for row, score in zip(rows_of(verifier), [s for group in model for s in group], strict=True)]
    recomputed = recompute_advantages(rows, scale_rewards="group", multi_objective_aggregation=aggregation,
                                      reward_weights=weights)
    expected = trl_two_function_advantages(verifier, model, weights, aggregation)
    for row, value in zip(rows, expected, strict=True):
        assert math.isclose(recomputed[row["rollout_id"]], value, abs_tol=1e-6), (row, value)
    assert recomputed["0-2-2"] == 0.0  # no function scored it: it teaches nothing
    # Open tasks carry signal from the reward model alone.
    assert recomputed["0-1-0"] > 0 > recomputed["0-1-2"]


def test_recomputation_does_not_depend_on_row_order():
    rows = rows_of([[1.0, 0.0, 0.5, 0.0], [0.0, 0.1, 0.0, 0.0]]) + rows_of([[1.0, 1.0, 0.0, 0.0]], batch=1)
    forward = recompute_advantages(rows, scale_rewards="batch")
    assert recompute_advantages(list(reversed(rows)), scale_rewards="batch") == pytest.approx(forward)


def test_the_band_keeps_tasks_strictly_inside_it_with_their_pass_rates():
    tasks = [{"task_id": name, "kind": "math", "prompt": "p", "answer": "1", "meta": {"family": "x"}}
             for name in ("never", "sometimes", "often", "always")]
    rates = {"never": 0.0, "sometimes": 0.25, "often": 0.75, "always": 1.0}
    rates = {k: {"pass_rate": v, "samples": 4, "correct": int(v * 4), "errors": 0} for k, v in rates.items()}

    kept = keep_in_band(tasks, rates, min_pass_rate=0.0, max_pass_rate=1.0, checkpoint_hash="sha256:x")
    assert [t["task_id"] for t in kept] == ["sometimes", "often"]
    assert kept[0]["meta"] == {"family": "x", "pass_rate": 0.25, "pass_rate_samples": 4,
                               "pass_rate_checkpoint": "sha256:x"}
    assert tasks[1]["meta"] == {"family": "x"}  # the input rows are left as they were
    assert [t["task_id"] for t in keep_in_band(tasks, rates, min_pass_rate=0.3, max_pass_rate=1.0)] == ["often"]
    summary = band_summary(rates, min_pass_rate=0.0, max_pass_rate=1.0)
    assert (summary["kept"], summary["too_hard"], summary["too_easy"]) == (2, 1, 1)


def finished_record(*, out_hash: str, steps: int = 2, groups: dict | None = None) -> dict:
    ledger = {"groups": {"groups": 0, "zero_variance": 0, "all_correct": 0, "all_wrong": 0, **(groups or {})}}
    return {"kind": "grpo", "steps": steps, "config": {"learning_rate": 1e-4},
            "base_checkpoint": {"path": "/sft", "content_hash": "sha256:base"},
            "output_checkpoint": {"path": "/run/checkpoint", "content_hash": out_hash}, "results": {"ledger": ledger}}


def test_a_run_that_changed_no_weight_says_why_from_its_own_figures():
    train = [{"event": "train", "step": 1, "learning_rate": 1e-4, "loss": 0.0}]
    changed = weights_outcome(finished_record(out_hash="sha256:new", groups={"groups": 4, "zero_variance": 4}), train)
    assert changed == {"weights_changed": True, "weights_unchanged_reason": None}

    def why(record, metrics=train):
        outcome = weights_outcome(record, metrics)
        assert outcome["weights_changed"] is False
        return outcome["weights_unchanged_reason"]

    assert why(finished_record(out_hash="sha256:base", groups={"groups": 4, "zero_variance": 4, "all_wrong": 4})) == (
        "every group's answers were all wrong (4 of 4 groups), so no answer had an advantage to learn from")
    assert why(finished_record(out_hash="sha256:base", groups={"groups": 3, "zero_variance": 3, "all_correct": 3})) \
        == "every group's answers were all right (3 of 3 groups), so no answer had an advantage to learn from"
    assert why(finished_record(out_hash="sha256:base", groups={"groups": 5, "zero_variance": 5, "all_correct": 1,
                                                               "all_wrong": 2})) == (
        "every group's answers scored alike (5 groups: 2 all wrong, 1 all right, 2 with equal partial rewards or "
        "fewer than two scored answers), so no answer had an advantage to learn from")
    warmup = [{"event": "train", "step": 1, "learning_rate": 0.0, "loss": 0.1}]
    assert why(finished_record(out_hash="sha256:base", groups={"groups": 4, "zero_variance": 1}), warmup) == (
        "the learning rate was 0 at every logged step (a warmup longer than the run, or a schedule that ends at 0)")
    assert why(finished_record(out_hash="sha256:base", steps=0), []) == "it took no optimizer step"
    assert why({**finished_record(out_hash="sha256:base"), "kind": "dpo", "results": {}}) == (
        "its 2 optimizer steps at learning rate 0.0001 moved no weight")
    unknown = {**finished_record(out_hash="sha256:base"), "output_checkpoint": None}
    assert weights_outcome(unknown, train) == {"weights_changed": None, "weights_unchanged_reason": None}

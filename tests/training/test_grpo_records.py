"""The arithmetic behind GRPO's records: advantages recomputed from rewards, and the difficulty band."""

import math

import pytest

from training.grpo.difficulty import band_summary, keep_in_band
from training.grpo.rollouts import recompute_advantages


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

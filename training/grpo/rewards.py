"""The GRPO rewards: training.verifiers' total reward per completion, with each component kept and logged, and,
with a `reward_model`, a trained reward model's score beside it (TRL's reward_funcs, mixed by its reward_weights).

TRL gets one reward function (the verifier's own weighted total, so a task without a unit is not
penalised for a unit component it does not have). Its components (math: answer, unit, format; code:
the pass rate of each test suite; any other verifier's numeric components) are logged separately
through TRL's `log_metric` hook as `reward_components/<name>`, and kept per completion for the
rollout records. A verdict the verifier could not reach (its error, a math-verify timeout) is
returned as None, which TRL excludes from the group baseline instead of counting it as 0.
"""

import time
from dataclasses import dataclass

from training.verifiers.results import CORRECT, ERROR, TIMEOUT, VerificationResult
from training.verifiers.reward_function import completion_text, make_reward_function


def component_scores(components: dict) -> dict[str, float]:
    """A verifier's components as numbers in [0, 1]: plain numbers as they are, a test suite
    ({"passed", "total"}) as its pass rate; components that do not apply (None) are left out."""
    scores: dict[str, float] = {}
    for name, value in components.items():
        if isinstance(value, int | float):  # bool included
            scores[name] = float(value)
        elif isinstance(value, dict) and isinstance(value.get("passed"), int) and isinstance(value.get("total"), int) \
                and value["total"] > 0:
            scores[name] = value["passed"] / value["total"]
    return scores


@dataclass
class ScoredBatch:
    """What the last reward call saw and decided, aligned with its completions."""

    texts: list[str]
    results: list[VerificationResult]
    rewards: list[float | None]


class VerifierComponentsReward:
    """TRL reward function `(prompts, completions, completion_ids, task_id, ...) -> [float | None]`.

    The dataset rows carry `task_id`; the task rows themselves are looked up here. `seconds` adds up the
    time spent verifying (for the ledger); `last` is the last call's texts, verdicts and rewards.
    """

    __name__ = "pairwise_verifier"

    def __init__(self, tasks: list[dict], *, workers: int | None = None):
        self._verifier_reward = make_reward_function(tasks, workers=workers)
        self.seconds = 0.0
        self.last: ScoredBatch | None = None

    def __call__(self, prompts=None, completions=None, completion_ids=None, *, task_id, log_metric=None, **_):
        started = time.perf_counter()
        rewards = self._verifier_reward(completions, task_id=task_id)
        results = list(self._verifier_reward.last_results)
        self.seconds += time.perf_counter() - started
        self.last = ScoredBatch([completion_text(c) for c in completions], results, rewards)
        if log_metric is not None and results:
            by_component: dict[str, list[float]] = {}
            for result in results:
                for name, score in component_scores(result.components).items():
                    by_component.setdefault(name, []).append(score)
            for name, scores in sorted(by_component.items()):
                log_metric(f"reward_components/{name}", sum(scores) / len(scores))
            log_metric("verifier/correct", sum(r.status == CORRECT for r in results) / len(results))
            log_metric("verifier/errors", sum(r.status == ERROR for r in results) / len(results))
            log_metric("verifier/timeouts", sum(r.status == TIMEOUT for r in results) / len(results))
        return rewards

    def close(self) -> None:
        self._verifier_reward.close()


class RewardModelReward:
    """TRL reward function: a trained reward model's score of each completion to its prompt
    (training.reward_model_scorer, the prompt in the form the policy saw it: chat messages or text).

    `last` holds the last call's scores, aligned with its completions; `identity` is `reward_model@sha256:...`,
    recorded in every rollout beside the verifier's scorer version; `seconds` adds up the scoring time."""

    __name__ = "pairwise_reward_model"

    def __init__(self, scorer):
        self.scorer = scorer
        self.identity = scorer.identity
        self.last: list[float | None] = []

    @property
    def seconds(self) -> float:
        return self.scorer.seconds

    def __call__(self, prompts=None, completions=None, completion_ids=None, *, log_metric=None, **_):
        # None for a completion longer than the reward model's max_length (fits_max_length): TRL leaves it out of
        # this function's reward; the share is logged so that it is never silent.
        scores = self.scorer.score(list(prompts), [completion_text(c) for c in completions])
        self.last = scores
        if log_metric is not None and scores:
            log_metric("reward_model/over_max_length", sum(score is None for score in scores) / len(scores))
        return scores

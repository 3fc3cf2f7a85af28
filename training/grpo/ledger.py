"""Where a GRPO run's time and tokens went: ledger.json's figures and the table printed at the end.

Wall time is split into generation (sampling completions), verification (scoring them), reward-model
scoring (when the run has a reward model), update (the rest of the training loop: forward and backward passes, the optimizer, reference log-probabilities),
loading/switching (loading the model and saving it; pushing weights to vLLM), recording (writing
rollouts/, Pairwise's own cost) and the difficulty pre-pass when the config asks for one. Counts:
completions and tokens generated, completion lengths, and the groups whose rewards were all equal (zero
advantage: nothing to learn). Per optimizer step: the mean reward, the reward model's mean score, the share the
verifier calls correct and the mean completion length side by side, so a policy that learns to please a reward
model by writing longer (reward hacking) shows as length rising with the reward while correctness does not.
"""

import time
from dataclasses import asdict, dataclass, field


@dataclass
class GroupCounts:
    """Groups of one generation batch (or a whole run) by what they can teach."""

    groups: int = 0
    zero_variance: int = 0      # every reward in the group equal: zero advantage throughout
    all_correct: int = 0        # zero-variance groups whose answers were all correct
    all_wrong: int = 0          # zero-variance groups with no correct answer
    dropped: int = 0            # zero-variance groups removed by dynamic sampling
    surplus: int = 0            # groups with signal that dynamic sampling drew but the batch had no room for
    refill_rounds: int = 0      # extra generation rounds dynamic sampling ran

    def add(self, other: "GroupCounts") -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    @property
    def zero_variance_share(self) -> float | None:
        return round(self.zero_variance / self.groups, 4) if self.groups else None


@dataclass
class StepFigures:
    rewards: list[float] = field(default_factory=list)
    model_scores: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def summary(self, step: int) -> dict:
        def mean(values) -> float | None:
            return round(sum(values) / len(values), 4) if values else None

        return {"step": step, "completions": len(self.lengths), "reward": mean(self.rewards),
                "reward_model": mean(self.model_scores), "correct_share": mean([float(c) for c in self.correct]),
                "mean_length": mean(self.lengths)}


@dataclass
class Ledger:
    loading_s: float = 0.0
    switching_s: float = 0.0
    generation_s: float = 0.0
    verification_s: float = 0.0
    recording_s: float = 0.0
    prepass_s: float = 0.0
    train_loop_s: float = 0.0
    completions: int = 0
    completions_trained: int = 0
    tokens_generated: int = 0
    max_completion_length: int = 0
    truncated: int = 0
    reward_model_s: float = 0.0
    groups: GroupCounts = field(default_factory=GroupCounts)
    steps: dict[int, "StepFigures"] = field(default_factory=dict)
    _loop_started: float | None = None

    def add_step_figures(self, step: int, *, rewards: list[float], model_scores: list[float], correct: list[bool],
                         lengths: list[int]) -> None:
        """One generation round's completions, added to the figures of the optimizer step they train
        (NaN rewards and scores, which no function gave, are left out of the means; `correct` has one flag per
        completion a verifier checked, none for open tasks)."""
        figures = self.steps.setdefault(step, StepFigures())
        figures.rewards += [r for r in rewards if r == r]
        figures.model_scores += [s for s in model_scores if s == s]
        figures.correct += correct
        figures.lengths += lengths

    def count_completions(self, lengths: list[int], truncated: int) -> None:
        self.completions += len(lengths)
        self.tokens_generated += sum(lengths)
        self.max_completion_length = max([self.max_completion_length, *lengths])
        self.truncated += truncated

    @property
    def update_s(self) -> float:
        return max(0.0, self.train_loop_s - self.generation_s - self.verification_s - self.reward_model_s
                   - self.switching_s - self.recording_s)

    def loop_started(self) -> None:
        self._loop_started = time.perf_counter()

    def loop_ended(self) -> None:
        if self._loop_started is not None:
            self.train_loop_s += time.perf_counter() - self._loop_started
            self._loop_started = None

    def summary(self, *, wall_s: float, gpus: int, steps: int) -> dict:
        mean_length = self.tokens_generated / self.completions if self.completions else None
        return {
            "time_s": {
                "generation": round(self.generation_s, 2),
                "verification": round(self.verification_s, 2),
                "reward_model": round(self.reward_model_s, 2),
                "update": round(self.update_s, 2),
                "loading_switching": round(self.loading_s + self.switching_s, 2),
                "loading": round(self.loading_s, 2),
                "switching": round(self.switching_s, 2),
                "recording": round(self.recording_s, 2),
                "difficulty_prepass": round(self.prepass_s, 2),
                "train_loop": round(self.train_loop_s, 2),
                "wall": round(wall_s, 2),
            },
            "optimizer_steps": steps,
            "completions": self.completions,
            "completions_trained": self.completions_trained,
            "tokens_generated": self.tokens_generated,
            "completion_length": {"mean": round(mean_length, 2) if mean_length is not None else None,
                                  "max": self.max_completion_length},
            "truncated_share": round(self.truncated / self.completions, 4) if self.completions else None,
            "groups": {**asdict(self.groups), "zero_variance_share": self.groups.zero_variance_share},
            "gpu_hours": round(wall_s * gpus / 3600, 4) if gpus else None,
            "by_step": [figures.summary(step) for step, figures in sorted(self.steps.items())],
        }


def format_ledger(summary: dict) -> str:
    """The ledger as a table for the terminal."""
    time_s = summary["time_s"]
    wall = time_s["wall"] or 1.0
    lines = [f"{'where the time went':<28}{'seconds':>10}{'share':>8}"]
    for label, key in (("generation", "generation"), ("verification", "verification"),
                       ("reward-model scoring", "reward_model"),
                       ("update (fwd/bwd/optimizer)", "update"), ("loading / switching", "loading_switching"),
                       ("recording rollouts", "recording"), ("difficulty pre-pass", "difficulty_prepass")):
        if key in ("difficulty_prepass", "reward_model") and not time_s.get(key):
            continue
        lines.append(f"{label:<28}{time_s[key]:>10.1f}{time_s[key] / wall:>8.1%}")
    lines.append(f"{'wall':<28}{time_s['wall']:>10.1f}")
    groups = summary["groups"]
    share = groups["zero_variance_share"]
    length = summary["completion_length"]
    lines += [
        f"steps {summary['optimizer_steps']}, completions {summary['completions']} "
        f"({summary['completions_trained']} trained on), tokens generated {summary['tokens_generated']}",
        f"completion length mean {length['mean'] if length['mean'] is not None else '-'}, max {length['max']}, "
        f"truncated {summary['truncated_share'] if summary['truncated_share'] is not None else '-'}",
        f"zero-variance groups {groups['zero_variance']} of {groups['groups']} "
        f"({'-' if share is None else f'{share:.1%}'}; all correct {groups['all_correct']}, all wrong "
        f"{groups['all_wrong']}); dynamic sampling dropped {groups['dropped']} of them and drew "
        f"{groups['refill_rounds']} extra rounds ({groups['surplus']} surplus groups left out)",
        f"GPU-hours {summary['gpu_hours'] if summary['gpu_hours'] is not None else '- (no GPU used)'}",
    ]
    return "\n".join(lines + format_steps(summary.get("by_step") or []))


SHOWN_STEPS = 12


def format_steps(by_step: list[dict]) -> list[str]:
    """Reward, reward-model score, correct share and length per step (at most SHOWN_STEPS rows, evenly spread, the
    first and last always among them)."""
    if not by_step:
        return []
    if len(by_step) > SHOWN_STEPS:
        last = len(by_step) - 1
        by_step = [by_step[round(i * last / (SHOWN_STEPS - 1))] for i in range(SHOWN_STEPS)]

    def cell(value, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = ["", f"{'step':>6}{'reward':>9}{'reward model':>14}{'correct':>9}{'mean length':>13}"]
    for row in by_step:
        lines.append(f"{row['step']:>6}{cell(row['reward']):>9}{cell(row['reward_model']):>14}"
                     f"{cell(row['correct_share']):>9}{cell(row['mean_length'], 1):>13}")
    return lines

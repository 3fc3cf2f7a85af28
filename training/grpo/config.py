"""Keys of a GRPO config file: TRL's GRPOConfig (and every TrainingArguments key) plus Pairwise's own."""

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from trl import GRPOConfig

from training.config import PairwiseConfigMixin, key_error, load_config

# TRL checks these only when the first batch is scored (trl/trainer/grpo_trainer.py); Pairwise checks them
# before anything runs.
_CHOICES = {
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "scale_rewards": ("group", "batch", "none"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "importance_sampling_level": ("token", "sequence"),
    "vllm_mode": ("server", "colocate"),
}


@dataclass
class GRPORunConfig(PairwiseConfigMixin, GRPOConfig):
    """TRL's GRPOConfig under TRL's names (num_generations, loss_type, scale_rewards, beta, epsilon,
    temperature, max_completion_length, use_vllm, vllm_mode, ...), plus the keys below."""

    pairwise_keys: ClassVar[tuple[str, ...]] = (
        "base_checkpoint", "tasks", "output_dir", "dynamic_sampling", "dynamic_sampling_max_rounds",
        "difficulty_filter", "difficulty_samples", "difficulty_min_pass_rate", "difficulty_max_pass_rate",
        "max_generated_tokens", "verifier_workers", "reward_model", "reward_model_batch_size",
        *PairwiseConfigMixin.pairwise_keys[1:])
    required_keys: ClassVar[tuple[str, ...]] = ("base_checkpoint", "tasks", "output_dir")

    base_checkpoint: str | None = field(default=None, metadata={
        "help": "Local Hugging Face causal-LM checkpoint to start from (the same base a DPO run takes); also "
                "the reference model when beta > 0."})
    tasks: str | None = field(default=None, metadata={
        "help": "Task file (JSONL, docs/training.md 'Task files'): the prompts, scored by training.verifiers."})
    dynamic_sampling: bool = field(default=False, metadata={
        "help": "Drop groups whose rewards are all equal (zero advantage) and fill the batch with groups of "
                "fresh prompts, as DAPO's dynamic sampling does."})
    dynamic_sampling_max_rounds: int = field(default=4, metadata={
        "help": "Extra generation rounds per batch at most; a batch still short afterwards keeps some "
                "zero-variance groups."})
    difficulty_filter: bool = field(default=False, metadata={
        "help": "Before training, sample difficulty_samples answers per task with the base checkpoint and train "
                "only on tasks whose pass rate lies strictly between the two bounds below."})
    difficulty_samples: int = field(default=8, metadata={"help": "Answers sampled per task by the pre-pass."})
    difficulty_min_pass_rate: float = field(default=0.0, metadata={
        "help": "Tasks with a pass rate at or below this are dropped as too hard."})
    difficulty_max_pass_rate: float = field(default=1.0, metadata={
        "help": "Tasks with a pass rate at or above this are dropped as too easy."})
    max_generated_tokens: int | None = field(default=None, metadata={
        "help": "Stop after the step in which this many completion tokens have been generated (a budget); "
                "null: max_steps / num_train_epochs decide."})
    verifier_workers: int | None = field(default=None, metadata={
        "help": "Processes scoring math answers; null: up to 4."})
    reward_model: str | None = field(default=None, metadata={
        "help": "A trained reward model's checkpoint folder (python -m training reward's RUN/checkpoint): a second "
                "reward function beside the verifier, and the only one for open tasks. TRL's reward_weights then "
                "takes two weights, [verifier, reward_model]: [0, 1] trains on the reward model alone."})
    reward_model_batch_size: int = field(default=8, metadata={
        "help": "Answers the reward model scores per forward pass."})

    @classmethod
    def check_values(cls, values: dict, source: str) -> None:
        super().check_values(values, source)
        for key, choices in _CHOICES.items():
            if values[key] not in choices:
                raise key_error(source, key, f"must be one of {', '.join(choices)}, got {values[key]!r}")
        if values["num_generations"] is not None and values["num_generations"] < 2:
            raise key_error(source, "num_generations", "must be at least 2 (advantages compare answers within a "
                                                       f"group), got {values['num_generations']}")
        if not values["temperature"] > 0:
            raise key_error(source, "temperature",
                            f"must be above 0 (GRPO samples its answers), got {values['temperature']}")
        if values["dynamic_sampling_max_rounds"] < 0:
            raise key_error(source, "dynamic_sampling_max_rounds",
                            f"must be 0 or more, got {values['dynamic_sampling_max_rounds']}")
        if values["difficulty_samples"] < 1:
            raise key_error(source, "difficulty_samples", f"must be at least 1, got {values['difficulty_samples']}")
        low, high = values["difficulty_min_pass_rate"], values["difficulty_max_pass_rate"]
        if not 0.0 <= low < high <= 1.0:
            raise key_error(source, "difficulty_min_pass_rate",
                            f"and difficulty_max_pass_rate must satisfy 0 <= min < max <= 1, got {low} and {high}")
        if values["reward_model_batch_size"] < 1:
            raise key_error(source, "reward_model_batch_size",
                            f"must be at least 1, got {values['reward_model_batch_size']}")
        functions = ["verifier", "reward_model"] if values["reward_model"] else ["verifier"]
        weights = values["reward_weights"]
        if weights is not None and len(weights) != len(functions):
            raise key_error(source, "reward_weights",
                            f"has {len(weights)} weights but the run has {len(functions)} reward function"
                            f"{'s' if len(functions) > 1 else ''} ({', '.join(functions)}); give one weight each, "
                            "in that order")
        for key in ("max_generated_tokens", "verifier_workers"):
            if values[key] is not None and values[key] < 1:
                raise key_error(source, key, f"must be at least 1 or null, got {values[key]}")
        if values["use_vllm"] and importlib.util.find_spec("vllm") is None:
            raise key_error(source, "use_vllm", "is true but vllm is not installed here; install it (pip install "
                                                "vllm) on the GPU nodes, or set use_vllm: false to generate with "
                                                "transformers")


def load_grpo_config(path: str | Path) -> GRPORunConfig:
    return load_config(path, GRPORunConfig)

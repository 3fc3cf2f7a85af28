"""`python -m training grpo --config FILE.yaml`: GRPO on verifiable tasks, from a base checkpoint, into a run folder.

The recipe: read and check the config, the base checkpoint, the task file and the reward model (if any)
before anything is written (bad input leaves no run folder); optionally keep only the tasks the base checkpoint
solves sometimes (the difficulty pre-pass); then TRL's GRPOTrainer (training/grpo/trainer.py) with
training.verifiers as the reward, and with a `reward_model` that model's score as a second reward function
(TRL's reward_weights mix the two; open tasks have no verifier and are scored by the reward model alone); then
the lineage (run.json, ledger.json, checkpoint/parent.json), with every completion in
rollouts/ and the ledger printed as a table.

Generation: transformers' generate, or TRL's vLLM modes when `use_vllm: true` (colocate, or server with
`trl vllm-serve`, see deploy/slurm/). Multi-GPU: `accelerate launch --config_file deploy/accelerate/zero2.yaml
-m training grpo --config F`.
"""

import os
import time
from dataclasses import dataclass
from pathlib import Path

from training.errors import PairwiseInputError
from training.grpo.config import GRPORunConfig, load_grpo_config
from training.tasks import load_tasks  # the standard library only; a TaskFileError is the CLI's one line
from training.trl_setup import (
    check_output_dir,
    is_main_process,
    lora_config,
    record_completed,
    record_lineage,
    recorded_outcome,
    run_callbacks,
    save_checkpoint,
    start_run_record,
    trainer_arguments,
    trainer_setup,
)


def dataset_rows(tasks: list[dict], tokenizer, base_path: Path) -> list[dict]:
    """TRL dataset rows: the prompt (as chat messages when the checkpoint has a chat template) and task_id;
    the reward looks the rest of the task up by its id."""
    if tokenizer.chat_template:
        return [{"prompt": [{"role": "user", "content": t["prompt"]}] if isinstance(t["prompt"], str) else t["prompt"],
                 "task_id": t["task_id"]} for t in tasks]
    if any(not isinstance(t["prompt"], str) for t in tasks):
        raise PairwiseInputError(f"base_checkpoint {base_path} has no chat template but some task prompts are chat "
                                 "messages; use a chat checkpoint or plain-text prompts")
    return [{"prompt": t["prompt"], "task_id": t["task_id"]} for t in tasks]


def _budget_callback(config: GRPORunConfig, ledger):
    from transformers import TrainerCallback

    class LoopClockAndBudget(TrainerCallback):
        """Times the training loop for the ledger; stops at max_generated_tokens."""

        def on_train_begin(self, args, state, control, **kwargs):
            ledger.loop_started()

        def on_train_end(self, args, state, control, **kwargs):
            ledger.loop_ended()

        def on_step_end(self, args, state, control, **kwargs):
            if config.max_generated_tokens is not None and ledger.tokens_generated >= config.max_generated_tokens:
                control.should_training_stop = True

    return LoopClockAndBudget()


# Config keys that say how a model is run or where it was loaded from, not what its weights compute: a GRPO child
# saved by the trainer differs from its parent in use_cache, say, and is still a valid reference.
RUNTIME_CONFIG_KEYS = frozenset({"_name_or_path", "use_cache", "dtype", "torch_dtype", "transformers_version",
                                 "output_attentions", "output_hidden_states", "return_dict"})


def checked_reference(config: GRPORunConfig, base_path: Path) -> Path | None:
    """reference_checkpoint's folder, refused in one line unless the KL term can compare it token by token with
    the policy: the base checkpoint's model config (architecture, sizes, tied embeddings, ...) and vocabulary.
    None: the base is the reference."""
    from transformers import AutoConfig, AutoTokenizer

    from training.run_folder import check_causal_lm_checkpoint

    if config.reference_checkpoint is None or not config.beta > 0:
        return None
    reference_path = check_causal_lm_checkpoint(config.reference_checkpoint, key="reference_checkpoint")
    base, reference = (AutoConfig.from_pretrained(path, local_files_only=True).to_dict()
                       for path in (base_path, reference_path))
    differing = sorted(key for key in (base.keys() | reference.keys()) - RUNTIME_CONFIG_KEYS
                       if base.get(key) != reference.get(key))
    if differing:
        key = differing[0]
        raise PairwiseInputError(f"reference_checkpoint {config.reference_checkpoint}: {key} is {reference.get(key)!r} "
                                 f"but the base checkpoint's is {base.get(key)!r}; the KL term needs a causal LM of "
                                 "the same architecture (the SFT parent, say)")
    vocabularies = (AutoTokenizer.from_pretrained(path, local_files_only=True).get_vocab()
                    for path in (base_path, reference_path))
    if next(vocabularies) != next(vocabularies):
        raise PairwiseInputError(f"reference_checkpoint {config.reference_checkpoint}: its tokenizer differs from the "
                                 "base checkpoint's, so their token log-probabilities cannot be compared; give a "
                                 "checkpoint trained with the same tokenizer")
    return reference_path


def check_kl_reference_kept(previous: dict | None, reference: dict | None, source: str) -> None:
    """A resumed run measures its KL term against the checkpoint it started with: one line if the config now names
    another, or none (the steps before and after would answer to different references). `previous`: its run.json."""
    if previous is None or "kl_reference" not in previous:  # recorded before runs named their reference
        return
    before = previous["kl_reference"]
    if (before or {}).get("content_hash") != (reference or {}).get("content_hash"):
        raise PairwiseInputError(f"{source}: the run being resumed measured its KL term against "
                                 f"{(before or {}).get('path') or 'no reference (beta 0)'}, and this config against "
                                 f"{(reference or {}).get('path') or 'none (beta 0)'}; resume with the run's own "
                                 "beta and reference_checkpoint, or start a new run")


@dataclass
class GRPORunInputs:
    """What a GRPO run has checked before its run folder exists."""

    run: object  # training.run_folder.RunFolder
    resume_from: str | None
    base_path: Path
    reference_path: Path | None
    tasks: list[dict]  # the task file's tasks, all of them
    tokenizer: object
    rows: list[dict]


def grpo_task_inputs(config: GRPORunConfig) -> tuple[Path, Path | None, list[dict], object, list[dict]]:
    """The checks of a GRPO run's inputs besides its output folder, one for the in-process run and the staged cycle:
    the base and reference checkpoints, the task file, the sandbox for code tasks, chat prompts against the chat
    template, and the reward model setup. Returns the base and reference paths, the tasks, the tokenizer and the
    dataset rows."""
    from transformers import AutoTokenizer

    from training.generation import check_chat_template
    from training.grpo.difficulty import check_sandbox_for_code
    from training.run_folder import check_causal_lm_checkpoint

    base_path = check_causal_lm_checkpoint(config.base_checkpoint)
    reference_path = checked_reference(config, base_path)
    tasks = load_tasks(config.tasks)
    check_sandbox_for_code(tasks, config.tasks)
    tokenizer = AutoTokenizer.from_pretrained(base_path, local_files_only=True)
    check_chat_template(tokenizer, f"base_checkpoint {base_path}")
    rows = dataset_rows(tasks, tokenizer, base_path)  # refuses chat prompts without a chat template
    check_reward_model_setup(config, tasks)
    return base_path, reference_path, tasks, tokenizer, rows


def grpo_run_inputs(config: GRPORunConfig) -> GRPORunInputs:
    """Every refusal of a GRPO run's inputs that needs no model run: the output folder (or the run to resume), then
    grpo_task_inputs. The one check of the run and of `python -m training grpo --check` (what the app's launch
    runs), so a config --check passes is never refused when the run starts."""
    from training.run_folder import RunFolder

    run = RunFolder(config.output_dir)
    resume_from = check_output_dir(config, run)
    if config.difficulty_filter and resume_from is None and config.world_size > 1:
        raise PairwiseInputError("difficulty_filter runs on one process; for a multi-process run, run "
                                 "python -m training grpo-filter first and set tasks to its output")
    return GRPORunInputs(run, resume_from, *grpo_task_inputs(config))


def run_grpo(config: GRPORunConfig) -> dict:
    """Train; return the final run record. Raises PairwiseInputError for bad input before writing anything."""
    import torch

    from training.grpo.ledger import Ledger
    from training.grpo.rewards import RewardModelReward, VerifierComponentsReward
    from training.snapshot import file_sha256

    started = time.perf_counter()
    # 1. Everything a user can get wrong is checked before the run folder exists.
    inputs = grpo_run_inputs(config)
    run = inputs.run
    scorer = loaded_reward_model(config, inputs.rows)
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    is_main = is_main_process()
    fresh = inputs.resume_from is None
    base_hash, reference = kl_reference_record(config, inputs, is_main=is_main)
    tasks_hash = file_sha256(Path(config.tasks))
    tasks, difficulty = tasks_to_train(config, inputs, base_hash=base_hash)
    rows = dataset_rows(tasks, inputs.tokenizer, inputs.base_path)

    # 2. The run folder: run.json is kept current so a watcher sees the status.
    if is_main:
        start_grpo_record(config, inputs, tasks, difficulty, base_hash=base_hash, tasks_hash=tasks_hash,
                          reference=reference, scorer=scorer)
    ledger = Ledger(prepass_s=difficulty["wall_s"] if difficulty else 0.0)
    reward = VerifierComponentsReward(tasks, workers=config.verifier_workers)
    model_reward = RewardModelReward(scorer) if scorer is not None else None
    try:
        with trainer_setup(run, config, recipe="GRPO", fresh=fresh, is_main=is_main):
            trainer = grpo_trainer(config, inputs, tasks, rows, reward=reward, model_reward=model_reward, ledger=ledger,
                                   is_main=is_main)
    except BaseException:
        reward.close()
        raise

    # 3. Train, save, and record the lineage and the ledger.
    with recorded_outcome(run, is_main=is_main):
        train_output = train_and_save(trainer, config, inputs, reward=reward, model_reward=model_reward,
                                      ledger=ledger)
        if not is_main:
            return {}
        out_hash = record_lineage(run, kind="grpo", base_path=inputs.base_path, base_hash=base_hash, snapshot_id=None,
                                  reward_model=parent_reward_model(scorer))
        wall_s = time.perf_counter() - started
        gpus = trainer.accelerator.num_processes if torch.cuda.is_available() and not config.use_cpu else 0
        summary = ledger.summary(wall_s=wall_s, gpus=gpus, steps=trainer.state.global_step)
        write_grpo_ledger(run, config, trainer, ledger, summary, tasks, base_path=inputs.base_path, base_hash=base_hash,
                          tasks_hash=tasks_hash, out_hash=out_hash, reference=reference, scorer=scorer, wall_s=wall_s)
        return record_completed(run, trainer, train_output, wall_s=wall_s, out_hash=out_hash,
                                scorers={"training": sorted(scorers_seen(run.path))},
                                results={"ledger": summary})


def kl_reference_record(config: GRPORunConfig, inputs: GRPORunInputs, *, is_main: bool) -> tuple[str | None, dict | None]:
    """The base checkpoint's content hash and the KL reference as run.json names it (main process only; None
    elsewhere), a resumed run's reference checked against the one it started with."""
    from training.run_folder import checkpoint_content_hash

    base_hash = checkpoint_content_hash(inputs.base_path) if is_main else None
    reference = None
    if is_main and config.beta > 0:  # the checkpoint the KL term measures against, named like the base
        reference = {"path": str((inputs.reference_path or inputs.base_path).resolve()),
                     "content_hash": (checkpoint_content_hash(inputs.reference_path) if inputs.reference_path
                                      else base_hash)}
    if is_main and inputs.resume_from is not None:
        check_kl_reference_kept(inputs.run.read_record(), reference, config.output_dir)
    return base_hash, reference


def tasks_to_train(config: GRPORunConfig, inputs: GRPORunInputs, *, base_hash: str | None) -> tuple[list[dict], dict | None]:
    """The tasks the run trains on and the difficulty filter's summary (None without one): a fresh run's tasks in
    the difficulty band when asked, a resumed run's the tasks it started with."""
    from training.grpo.difficulty import band_summary, keep_in_band, pass_rates

    fresh = inputs.resume_from is None
    if not (config.difficulty_filter and fresh):
        if not fresh and (inputs.run.path / "tasks.jsonl").is_file():
            return load_tasks(inputs.run.path / "tasks.jsonl"), None
        return inputs.tasks, None
    loading = time.perf_counter()
    rates = pass_rates(checkpoint=inputs.base_path, tasks=inputs.tasks, samples=config.difficulty_samples,
                       temperature=config.temperature, top_p=config.top_p, top_k=config.top_k or 0,
                       max_new_tokens=config.max_completion_length, seed=config.seed,
                       workers=config.verifier_workers)
    tasks = keep_in_band(inputs.tasks, rates, min_pass_rate=config.difficulty_min_pass_rate,
                         max_pass_rate=config.difficulty_max_pass_rate, checkpoint_hash=base_hash)
    difficulty = {**band_summary(rates, min_pass_rate=config.difficulty_min_pass_rate,
                                 max_pass_rate=config.difficulty_max_pass_rate),
                  "samples": config.difficulty_samples, "wall_s": round(time.perf_counter() - loading, 2)}
    if not tasks:
        raise PairwiseInputError(f"difficulty_filter kept no task of {config.tasks} (pass rates: "
                                 f"{difficulty['too_hard']} at or below {config.difficulty_min_pass_rate}, "
                                 f"{difficulty['too_easy']} at or above {config.difficulty_max_pass_rate}); "
                                 "widen the band or use tasks nearer the checkpoint's level")
    return tasks, difficulty


def start_grpo_record(config: GRPORunConfig, inputs: GRPORunInputs, tasks: list[dict], difficulty: dict | None, *,
                      base_hash: str | None, tasks_hash: str, reference: dict | None, scorer) -> None:
    """Create the run folder with run.json as running and, in a fresh run, its copy of the tasks (main process)."""
    from training.grpo.rollouts import ROLLOUT_FORMAT
    from training.tasks import write_tasks

    fresh = inputs.resume_from is None
    # A resumed run keeps the difficulty_filter its record already holds.
    start_run_record(
        inputs.run, config, kind="grpo", base_path=inputs.base_path, base_hash=base_hash,
        resume_from=inputs.resume_from,
        snapshot=None,
        tasks={"path": str(Path(config.tasks).resolve()), "sha256": tasks_hash, "count": len(inputs.tasks),
               "trained_on": len(tasks), "copy": "tasks.jsonl"},
        tasks_hash=tasks_hash,
        rollouts={"path": "rollouts", "format": ROLLOUT_FORMAT},
        scorers={},
        reward_model=reward_model_record(scorer),
        reward_functions=reward_functions(config),
        kl_reference=reference,
        **({"difficulty_filter": difficulty} if fresh else {}),
    )
    if fresh:
        write_tasks(inputs.run.path / "tasks.jsonl", tasks)


def grpo_trainer(config: GRPORunConfig, inputs: GRPORunInputs, tasks: list[dict], rows: list[dict], *, reward, model_reward, ledger,
                 is_main: bool):
    """The PairwiseGRPOTrainer of the run: the verifier (and reward model) as TRL's reward functions, rollouts/ and
    the ledger recorded."""
    from datasets import Dataset

    from training.grpo.rollouts import next_batch_number
    from training.grpo.trainer import PairwiseGRPOTrainer

    run = inputs.run
    return PairwiseGRPOTrainer(
        model=str(inputs.base_path),
        reward_funcs=[reward] if model_reward is None else [reward, model_reward],
        args=trainer_arguments(config, run),
        train_dataset=Dataset.from_list(rows),
        processing_class=inputs.tokenizer,
        callbacks=[*run_callbacks(config, run), _budget_callback(config, ledger)],
        peft_config=lora_config(config),
        pairwise_reward=reward,
        rollouts_dir=run.path / "rollouts",
        ledger=ledger,
        task_prompts={t["task_id"]: t["prompt"] for t in tasks},
        first_batch=next_batch_number(run.path),
        dynamic_sampling=config.dynamic_sampling,
        dynamic_sampling_max_rounds=config.dynamic_sampling_max_rounds,
        append_metrics=run.append_metrics if is_main else None,
        reward_model_reward=model_reward,
        reference_weights=inputs.reference_path,
    )


def train_and_save(trainer, config: GRPORunConfig, inputs: GRPORunInputs, *, reward, model_reward, ledger):
    """Train (resuming if asked), write the rollouts still waiting, and save checkpoint/; TRL's train output."""
    try:
        train_output = trainer.train(resume_from_checkpoint=inputs.resume_from)
    finally:
        trainer.flush_rollouts()
        reward.close()
    ledger.verification_s = reward.seconds
    ledger.reward_model_s = model_reward.seconds if model_reward is not None else 0.0
    saving = time.perf_counter()
    save_checkpoint(trainer, config, inputs.run, inputs.tokenizer)
    trainer.accelerator.wait_for_everyone()
    ledger.loading_s += time.perf_counter() - saving
    return train_output


def write_grpo_ledger(run, config: GRPORunConfig, trainer, ledger, summary: dict, tasks: list[dict], *, base_path: Path,
                      base_hash: str, tasks_hash: str, out_hash: str, reference: dict | None, scorer,
                      wall_s: float) -> None:
    """ledger.json: the run's inputs and outputs, what it consumed, and the ledger's summary."""
    from training.grpo.rollouts import ROLLOUT_FORMAT

    run.write_ledger({
        "inputs": [
            {"kind": "checkpoint", "path": str(base_path.resolve()), "content_hash": base_hash},
            {"kind": "tasks", "path": str(Path(config.tasks).resolve()), "sha256": tasks_hash},
            *([{"kind": "reward_model", **reward_model_record(scorer)}] if scorer is not None else []),
            *([{"kind": "kl_reference", **reference}] if reference is not None else []),
        ],
        "outputs": [{"kind": "checkpoint", "path": "checkpoint", "content_hash": out_hash},
                    {"kind": "rollouts", "path": "rollouts", "format": ROLLOUT_FORMAT}],
        "consumed": {
            "optimizer_steps": trainer.state.global_step,
            "epochs": round(trainer.state.epoch or 0.0, 4),
            "tasks": len(tasks),
            "completions": ledger.completions,
            "tokens_generated": ledger.tokens_generated,
            "wall_s": round(wall_s, 2),
        },
        **summary,
    })


def reward_functions(config: GRPORunConfig) -> list[dict]:
    """The reward functions TRL combines, in order, with their weights (TRL's reward_weights, 1 each by default)."""
    names = ["verifier", "reward_model"] if config.reward_model else ["verifier"]
    weights = config.reward_weights or [1.0] * len(names)
    return [{"name": name, "weight": float(weight)} for name, weight in zip(names, weights, strict=True)]


def check_reward_model_setup(config: GRPORunConfig, tasks: list[dict]) -> None:
    """The reward model a run's tasks need, without loading it: open tasks need one (nothing else scores them), with
    a weight above 0, and `reward_model` must be a trained reward model (a sequence classifier), not a causal LM."""
    from training.run_folder import check_reward_model_checkpoint
    from training.tasks import OPEN

    open_tasks = [task["task_id"] for task in tasks if task["kind"] == OPEN]
    if config.reward_model is None:
        if open_tasks:
            raise PairwiseInputError(f"tasks {config.tasks} holds {len(open_tasks)} open tasks (first "
                                     f"{open_tasks[0]!r}), which no verifier scores; set reward_model to a trained "
                                     "reward model's checkpoint, or use tasks with a verifier")
        return
    if open_tasks and reward_functions(config)[1]["weight"] == 0:
        raise PairwiseInputError(f"reward_weights gives the reward model weight 0, but tasks {config.tasks} holds open "
                                 "tasks that only the reward model scores; give it a weight above 0")
    check_reward_model_checkpoint(config.reward_model)


def reward_model_scorer(config: GRPORunConfig, tasks: list[dict], rows: list[dict]):
    """check_reward_model_setup, then the reward model loaded (loaded_reward_model); or None."""
    check_reward_model_setup(config, tasks)
    return loaded_reward_model(config, rows)


def loaded_reward_model(config: GRPORunConfig, rows: list[dict]):
    """The reward model of a checked setup (check_reward_model_setup), loaded and checked against every prompt before
    the run folder exists; or None."""
    if config.reward_model is None:
        return None
    import torch

    from training.reward_model_scorer import RewardModelScorer

    # On GPUs each process scores on its own device, beside its policy; on CPU (use_cpu, CI) where it was loaded.
    device = (f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() and not config.use_cpu
              else None)
    scorer = RewardModelScorer(config.reward_model, batch_size=config.reward_model_batch_size, device=device)
    scorer.check_prompts([row["prompt"] for row in rows], where=f"tasks {config.tasks}")
    return scorer


def reward_model_record(scorer) -> dict | None:
    """run.json's reward_model: which model scored the completions (null without one)."""
    if scorer is None:
        return None
    return {"path": str(scorer.path.resolve()), "content_hash": scorer.content_hash, "identity": scorer.identity,
            "max_length": scorer.max_length}


def parent_reward_model(scorer) -> dict | None:
    """parent.json's reward_model: the reward model's folder and content hash, and the snapshot it learned from
    (its own parent.json), so the lineage reads snapshot -> reward model -> GRPO run -> checkpoint."""
    if scorer is None:
        return None
    from training.run_folder import checkpoint_parent_record

    snapshot_id = (checkpoint_parent_record(scorer.path) or {}).get("snapshot_id")
    return {"path": str(scorer.path.resolve()), "content_hash": scorer.content_hash, "snapshot_id": snapshot_id}


def scorers_seen(run_path: Path) -> set[str]:
    from training.grpo.rollouts import read_rollouts

    table = read_rollouts(run_path)
    if not table.num_rows:
        return set()
    seen = set(table.column("scorer").to_pylist()) | set(table.column("reward_model").to_pylist())
    return seen - {None, "none"}


def grpo_main(args) -> int:
    """`python -m training grpo --config FILE.yaml`."""
    from training.grpo.ledger import format_ledger

    config = load_grpo_config(args.config)
    record = run_grpo(config)
    if record:
        print(format_ledger(record["results"]["ledger"]))
        print(f"run {record['run']}: {record['status']} after {record['steps']} steps; rollouts in "
              f"{Path(config.output_dir) / 'rollouts'}; checkpoint {record['output_checkpoint']['path']} "
              f"({record['output_checkpoint']['content_hash'][:23]}...)")
        if record.get("weights_changed") is False:
            print(f"weights unchanged: {record['weights_unchanged_reason']}; checkpoint/ holds the base's weights, "
                  "not a new model")
    return 0

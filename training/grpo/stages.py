"""The three stages of a staged GRPO cycle (docs/training.md, "The staged cycle"), each a process that starts, does
its stage for one batch, writes its outputs atomically and exits:

- `generate --run R --batch B [--version V]`: loads policy version V (default B), samples the answers of batch B's
  prompts and writes batches/B/generated.parquet: token ids, the generating policy's per-token log-probabilities,
  and the version that wrote them. The prompts of batch B are the ones TRL's sampler gives optimizer step B, and
  the sampling seed is the one in-process GRPO uses for batch B, so a rerun writes the same records.
- `score --run R --batch B`: scores the generated answers with the verifiers (and the reward model, if the run has
  one) into batches/B/scored.parquet. No model of the policy is loaded.
- `update --run R --version V`: loads version V with its optimizer state and trains one optimizer step of TRL's
  GRPOTrainer on batch V's scored records (TRL's `rollout_func` seam feeds them in place of generation; the
  recorded log-probabilities are TRL's sampling log-probabilities), then writes version V+1. It refuses records of
  another version (staged), or more than max_staleness versions old (overlapped), and refuses to run twice. Under
  `accelerate launch --num_processes N` the batch's records stay the step's global batch: each process trains on
  the 1/N of them its own sampler draws, and the main process writes version V+1.

Each stage writes batches/B/<stage>.json with its timings (process start, loading, work, saving) for the ledger.
"""

import json
import os
import time
from pathlib import Path

from training.errors import PairwiseInputError
from training.grpo.versions import (
    checked_version,
    read_version,
    version_name,
    version_number,
    version_path,
    write_version,
)

GENERATED = "generated.parquet"
# Where a generated record's log-probabilities come from (its logprobs_source).
LOGPROBS_SOURCE_FORWARD = "policy forward after generation"
LOGPROBS_SOURCE_VLLM = "vllm sampler"
SCORED = "scored.parquet"
STAGES = ("generate", "score", "update")
# Set by whoever launches a stage (the cycle, a Slurm job): the wall-clock time the process was asked to start, so
# the stage can count interpreter start and imports as its cold start.
SPAWNED_AT_ENV = "PAIRWISE_STAGE_SPAWNED_AT"


def batch_folder(run: Path, batch: int) -> Path:
    return Path(run) / "batches" / f"{batch:06d}"


def run_config_path(run: Path) -> Path:
    return Path(run) / "config.yaml"


def load_run_config(run: Path):
    """The run's own copy of its config file (the cycle writes it when the run starts)."""
    from training.grpo.config import load_grpo_config

    path = run_config_path(run)
    if not path.is_file():
        raise PairwiseInputError(f"{run} is not a staged GRPO run folder (no config.yaml); start one with "
                                 "python -m training cycle --config F")
    return load_grpo_config(path)


def _records_schema(scored: bool):
    import pyarrow as pa

    fields = [
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("batch", pa.int64(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("member", pa.int32(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),           # as the policy saw it (JSON for chat messages)
        pa.field("prompt_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("completion", pa.string(), nullable=False),
        pa.field("completion_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("logprobs", pa.list_(pa.float32()), nullable=False),  # per completion token, generating policy
        pa.field("logprobs_source", pa.string()),  # policy forward after generation, or vllm sampler
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("length", pa.int32(), nullable=False),
        pa.field("policy_version", pa.string(), nullable=False),     # v0003: the version folder that generated it
        pa.field("policy_step", pa.int64(), nullable=False),
        pa.field("policy_weights_sha256", pa.string(), nullable=False),  # that version's content hash
        pa.field("sampling_seed", pa.int64(), nullable=False),
    ]
    if scored:
        fields += [
            pa.field("status", pa.string(), nullable=False),
            pa.field("reward", pa.float64()),
            pa.field("components", pa.string(), nullable=False),
            pa.field("reason", pa.string(), nullable=False),
            pa.field("scorer", pa.string(), nullable=False),
            pa.field("reward_model_score", pa.float64()),
            pa.field("reward_model", pa.string()),
        ]
    return pa.schema(fields, metadata={"format": "pairwise.staged_records/1"})


def write_records(path: Path, rows: list[dict], *, scored: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from training.atomic_write import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=_records_schema(scored))
    with atomic_path(path) as partial:
        pq.write_table(table, partial)


def read_records(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


class StageClock:
    """A stage's timings: cold start (process start to the stage's first line), loading, work and saving."""

    def __init__(self):
        self.began = time.perf_counter()
        spawned = os.environ.get(SPAWNED_AT_ENV)
        self.cold_start_s = max(0.0, time.time() - float(spawned)) if spawned else 0.0
        self.parts: dict[str, float] = {}
        self._mark = self.began
        self._cpu_began = self._cpu()

    @staticmethod
    def _cpu() -> float:
        """CPU seconds of this process and of the processes it waited for."""
        import resource

        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - self._mark
        self._mark = now

    def move(self, seconds: float, source: str, target: str) -> None:
        """Count `seconds` of what was timed as `source` as `target` instead."""
        self.parts[source] = self.parts.get(source, 0.0) - seconds
        self.parts[target] = self.parts.get(target, 0.0) + seconds

    def record(self, **fields) -> dict:
        """The stage's timings; began_at and ended_at (epoch seconds, the cold start included) let the ledger tell
        the time in which no stage ran (a scheduler's queue, idle lanes) from the time stages ran."""
        stage_s = time.perf_counter() - self.began
        ended_at = time.time()
        return {"cold_start_s": round(self.cold_start_s, 3), "cpu_s": round(self._cpu() - self._cpu_began, 3),
                **{f"{name}_s": round(value, 3) for name, value in self.parts.items()},
                "stage_s": round(stage_s, 3), "began_at": round(ended_at - stage_s - self.cold_start_s, 3),
                "ended_at": round(ended_at, 3), **fields}


def _write_stage_record(run: Path, batch: int, stage: str, record: dict) -> None:
    from training.run_folder import write_json_atomic

    write_json_atomic(batch_folder(run, batch) / f"{stage}.json", {"stage": stage, "batch": batch, **record})


# --- the trainer the generate and update stages build ------------------------------------------------------------


def _batches_per_epoch(sampler, args) -> int:
    # The sampler yields every process's prompts, so an epoch's steps count global generation batches.
    return max(1, len(sampler) // args.generation_batch_size)


def _stage_trainer_class():
    from training.grpo.trainer import PairwiseGRPOTrainer

    class StageTrainer(PairwiseGRPOTrainer):
        """PairwiseGRPOTrainer for one step of a staged run. Its sampler starts at the epoch of `target_step`, because a
        process resumed at step N (transformers skips the batches of the current epoch only) would otherwise draw the
        first epoch's prompt order again; so every stage and the in-process run see the same prompts at each step.

        In an update, answers come from the records (`rollout_func`); `recorded_correction` turns on TRL's own
        importance-sampling correction between the trainer's policy and the recorded log-probabilities (TRL applies
        it to vLLM's answers; here the answers of an older version play that part). TRL reads `use_vllm` both to
        sync its engine's weights before it asks for answers and to correct them once it has them; a stage trainer
        has no engine, so `use_vllm` reads true only once the round's recorded answers are in hand."""

        target_step = 0
        recorded_correction = False

        def _get_train_sampler(self, dataset=None):
            sampler = super()._get_train_sampler(dataset)
            for _ in range(self.target_step // _batches_per_epoch(sampler, self.args)):
                for _ in sampler:  # one full pass advances TRL's RepeatSampler's generator by one epoch
                    pass
            return sampler

        @property
        def use_vllm(self):
            return self.recorded_correction and self.answers_in_hand

        @use_vllm.setter
        def use_vllm(self, value):
            if value:
                raise PairwiseInputError("a stage trainer never holds a vLLM engine: the generate stage uses "
                                         "transformers here, the update stage reads recorded answers")

    return StageTrainer


def _not_scored_here(*args, **kwargs):
    raise RuntimeError("the generate stage does not score; the score stage does")


def _stage_trainer(config, run: Path, version: int, *, step: int, reward_funcs, args_changes: dict,
                   pairwise_reward=None, reward_model_reward=None, rollout_func=None, callbacks=(), ledger=None,
                   reference_weights: Path | None = None):
    """A StageTrainer on version `version`'s weights, for optimizer step `step`; its KL reference (beta > 0) is
    `reference_weights`, or else version `version` itself."""
    import copy

    from datasets import Dataset
    from transformers import AutoTokenizer

    from training.generation import check_chat_template
    from training.grpo.ledger import Ledger
    from training.grpo.run import dataset_rows
    from training.run_folder import RunFolder
    from training.tasks import load_tasks
    from training.trl_setup import trainer_arguments

    # The run's own copy, checked in full (reference solutions included) when the run started: the schema is enough.
    tasks = load_tasks(Path(run) / "tasks.jsonl", check_solutions=False)
    folder = version_path(run, version)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    check_chat_template(tokenizer, f"version {folder}")
    args = copy.copy(trainer_arguments(config, RunFolder(run)))
    args.use_vllm = False
    for key, value in args_changes.items():
        setattr(args, key, value)
    trainer_class = _stage_trainer_class()
    trainer_class.target_step = step
    return trainer_class(
        model=str(folder),
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=Dataset.from_list(dataset_rows(tasks, tokenizer, folder)),
        processing_class=tokenizer,
        callbacks=list(callbacks),
        pairwise_reward=pairwise_reward,
        rollouts_dir=Path(run) / "rollouts",
        ledger=ledger or Ledger(),
        task_prompts={t["task_id"]: t["prompt"] for t in tasks},
        first_batch=step,
        append_metrics=RunFolder(run).append_metrics,
        reward_model_reward=reward_model_reward,
        rollout_func=rollout_func,
        reference_weights=reference_weights,
    )


def batch_inputs(trainer, batch: int) -> list[dict]:
    """The dataset rows TRL's dataloader gives optimizer step `batch` (one generation batch per step)."""
    loader = trainer.get_train_dataloader()
    per_epoch = len(loader)
    rows = iter(loader)
    for _ in range(batch % per_epoch):
        next(rows)
    return [dict(row) for row in next(rows)]


# --- generate -----------------------------------------------------------------------------------------------------


def generate_stage(run: Path, batch: int, version: int | None = None) -> dict:
    """Write batches/<batch>/generated.parquet with version `version`'s answers (default: version `batch`)."""
    clock = StageClock()
    run = Path(run)
    version = batch if version is None else version
    config = load_run_config(run)
    meta = checked_weights(run, version, clock)
    set_torch_threads(config)
    trainer = generation_trainer(config, run, version, batch=batch)
    clock.lap("loading")
    return generate_batch(trainer, run, config, batch=batch, version=version, meta=meta, clock=clock)


def checked_weights(run: Path, version: int, clock: StageClock) -> dict:
    """version.json of the version a stage is about to load, its weights' hash checked (timed as the stage's
    hashing, apart from its loading)."""
    clock.lap("loading")
    meta, seconds = checked_version(run, version)
    clock.lap("loading")
    clock.move(seconds, "loading", "hashing")
    return meta


def _discard_partial_records(path: Path) -> None:
    """A generate or score process killed while writing `path` leaves its hidden partial file; the rerun removes it."""
    from training.atomic_write import discard_partial

    discard_partial(path)


def set_torch_threads(config) -> None:
    if config.torch_threads is not None:
        import torch

        torch.set_num_threads(config.torch_threads)


def generation_trainer(config, run: Path, version: int, *, batch: int):
    """The trainer a generation samples with: version `version`'s weights, no reference model (generation needs
    none), no reward function (the score stage scores)."""
    return _stage_trainer(config, run, version, step=batch, reward_funcs=[_not_scored_here],
                          args_changes={"beta": 0.0})


def generate_batch(trainer, run: Path, config, *, batch: int, version: int, meta: dict, clock: StageClock) -> dict:
    """Sample batch `batch`'s answers with `trainer`'s model, which holds version `version`'s weights (`meta`: its
    version.json), and write them with the stage's record. The prompts and the sampling seed are batch `batch`'s, so
    a trainer built for another batch, or kept from one, writes the same records as a fresh one."""
    from training.grpo.rollouts import prompt_text
    from training.grpo.trainer import generation_seed

    trainer.target_step = batch  # the sampler's epoch: the one of this batch, not of the batch the trainer was built for
    rows = batch_inputs(trainer, batch)
    trainer.model.eval()
    seed = generation_seed(config.seed, batch, trainer.accelerator.process_index)
    engine = {}
    if config.generation_engine == "vllm":
        prompt_ids, completion_ids, logps, engine = _vllm_answers(trainer, run, config, rows, batch=batch,
                                                                  version=version, seed=seed, clock=clock)
        source = LOGPROBS_SOURCE_VLLM
    else:
        answers = trainer.sample_answers([row["prompt"] for row in rows], batch=batch)
        prompt_ids, completion_ids = answers["prompt_ids"], answers["completion_ids"]
        logps = _generation_logprobs(trainer, prompt_ids, completion_ids)
        source = LOGPROBS_SOURCE_FORWARD
    texts = trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    clock.lap("generation")
    eos_and_pad = {*trainer.eos_token_ids, trainer.pad_token_id}
    size = trainer.num_generations
    records = []
    for index, (row, p_ids, c_ids) in enumerate(zip(rows, prompt_ids, completion_ids, strict=True)):
        group, member = divmod(index, size)
        records.append({
            "rollout_id": f"{batch:06d}-{group:04d}-{member:02d}", "batch": batch, "group_id": f"{batch:06d}-{group:04d}",
            "member": member, "task_id": row["task_id"], "prompt": prompt_text(row["prompt"]),
            "prompt_token_ids": list(p_ids), "completion": texts[index], "completion_token_ids": list(c_ids),
            "logprobs": logps[index], "logprobs_source": source, "finish_reason": "stopped" if c_ids and c_ids[-1] in eos_and_pad else "truncated",
            "length": len(c_ids), "policy_version": version_name(version), "policy_step": version,
            "policy_weights_sha256": meta["content_hash"],
            "sampling_seed": seed,
        })
    _discard_partial_records(batch_folder(run, batch) / GENERATED)
    write_records(batch_folder(run, batch) / GENERATED, records, scored=False)
    clock.lap("saving")
    tokens = sum(r["length"] for r in records)
    record = clock.record(version=version_name(version), completions=len(records), tokens_generated=tokens,
                          max_length=max((r["length"] for r in records), default=0),
                          generation_engine=config.generation_engine, **engine)
    _write_stage_record(run, batch, "generate", record)
    return record


def _vllm_answers(trainer, run: Path, config, rows: list[dict], *, batch: int, version: int, seed: int,
                  clock: StageClock):
    """The batch's answers sampled by vLLM from version `version`'s folder, and how far vLLM's log-probabilities lie
    from the training forward's on the same weights (the forward the update repeats); vLLM's process start, imports,
    engine start and weight load are timed as the stage's loading (switching), its sampling as generation."""
    from training.grpo.vllm_answers import sample_with_vllm, sampler_mismatch

    engine_answers = []

    def vllm_answers(prompts, trainer):  # the trainer's answer seam, with vLLM's offline engine as the sampler
        prompt_ids, completion_ids, logps, answers = sample_with_vllm(
            trainer, run, prompts, version=version, batch_seed=seed, threads=config.torch_threads)
        engine_answers.append(answers)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logps}

    sampled = trainer.sample_answers([row["prompt"] for row in rows], batch=batch, source=vllm_answers)
    prompt_ids, completion_ids, logps = sampled["prompt_ids"], sampled["completion_ids"], sampled["logprobs"]
    answers = engine_answers[-1]
    clock.lap("generation")
    clock.move(max(0.0, answers.process_s - answers.generation_s), "generation", "loading")
    mismatch = sampler_mismatch(logps, _generation_logprobs(trainer, prompt_ids, completion_ids))
    return prompt_ids, completion_ids, logps, {
        "vllm": {"version": answers.vllm_version, "engine_start_s": answers.engine_start_s,
                 "process_s": answers.process_s, "generation_s": answers.generation_s},
        "sampler_mismatch": mismatch}


def _generation_logprobs(trainer, prompt_ids: list, completion_ids: list) -> list[list[float]]:
    """Per-token log-probabilities of each completion under the generating weights, at the sampling temperature:
    TRL's own forward (the trainer's policy_logprobs) on the batch padded as TRL pads it."""
    import torch
    from trl.trainer.utils import pad

    prompts = pad([torch.tensor(ids) for ids in prompt_ids], padding_value=trainer.pad_token_id,
                  padding_side="left")
    prompt_mask = pad([torch.ones(len(ids), dtype=torch.long) for ids in prompt_ids], padding_value=0,
                      padding_side="left")
    completions = pad([torch.tensor(ids) for ids in completion_ids], padding_value=trainer.pad_token_id,
                      padding_side="right")
    completion_mask = pad([torch.ones(len(ids), dtype=torch.long) for ids in completion_ids], padding_value=0,
                          padding_side="right")
    logps = trainer.policy_logprobs(prompts, prompt_mask, completions, completion_mask)
    return [logps[i, : len(ids)].float().tolist() for i, ids in enumerate(completion_ids)]


# --- score --------------------------------------------------------------------------------------------------------


def score_stage(run: Path, batch: int, *, scorers: "Scorers | None" = None) -> dict:
    """Write batches/<batch>/scored.parquet: the generated records with the verifier's verdicts (and reward model
    scores). `scorers` lets a long-lived caller (the cycle) keep its verifier workers and reward model between
    batches; without it the stage starts its own and stops them."""
    clock = StageClock()
    run = Path(run)
    source = batch_folder(run, batch) / GENERATED
    if not source.is_file():
        raise PairwiseInputError(f"{run}: batch {batch} has no generated answers ({source}); run the generate stage "
                                 "first")
    records = read_records(source)
    own = scorers is None
    if own:
        scorers = Scorers(run)
    model_scores: list[float | None] = [None] * len(records)
    clock.lap("loading")
    try:
        rewards = scorers.verifier(completions=[r["completion"] for r in records],
                                   task_id=[r["task_id"] for r in records])
        results = scorers.verifier.last.results
        if scorers.reward_model is not None:
            model_scores = scorers.reward_model.score([_stored_prompt(r["prompt"]) for r in records],
                                                      [r["completion"] for r in records])
    finally:
        if own:
            scorers.close()
    model_identity = scorers.reward_model.identity if scorers.reward_model is not None else None
    clock.lap("verification")
    scored = [{**record, "status": result.status, "reward": None if value is None else float(value),
               "components": json.dumps(result.components, sort_keys=True, default=str), "reason": result.reason,
               "scorer": result.scorer, "reward_model_score": score, "reward_model": model_identity}
              for record, result, value, score in zip(records, results, rewards, model_scores, strict=True)]
    _discard_partial_records(batch_folder(run, batch) / SCORED)
    write_records(batch_folder(run, batch) / SCORED, scored, scored=True)
    clock.lap("saving")
    over_max_length = ({"reward_model_over_max_length": sum(score is None for score in model_scores)}
                       if model_identity else {})  # answers the reward model left unscored: never silent
    record = clock.record(completions=len(scored), correct=sum(r["status"] == "correct" for r in scored),
                          **over_max_length)
    _write_stage_record(run, batch, "score", record)
    return record


class Scorers:
    """What the score stage scores with: the run's verifiers (their worker processes) and its reward model, if any."""

    def __init__(self, run: Path):
        from training.grpo.rewards import VerifierComponentsReward
        from training.tasks import load_tasks

        config = load_run_config(run)
        tasks = load_tasks(Path(run) / "tasks.jsonl", check_solutions=False)  # checked in full when the run started
        self.verifier = VerifierComponentsReward(tasks, workers=config.verifier_workers)
        self.reward_model = None
        if config.reward_model:
            from training.reward_model_scorer import RewardModelScorer

            self.reward_model = RewardModelScorer(config.reward_model, batch_size=config.reward_model_batch_size)

    def close(self) -> None:
        self.verifier.close()


def _stored_prompt(text: str):
    """A record's prompt as the policy saw it: chat messages were stored as JSON."""
    if text.startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


# --- update -------------------------------------------------------------------------------------------------------


class RecordedRewards:
    """The update's reward function: the verdicts the score stage recorded, in the shape the trainer reads
    (`last`: texts, verification results and rewards of the last call)."""

    __name__ = "pairwise_verifier"

    def __init__(self, records: list[dict]):
        from training.grpo.rewards import ScoredBatch
        from training.verifiers.results import VerificationResult

        self.records = records
        self.seconds = 0.0
        self.last = None
        self._batch = ScoredBatch
        self._result = VerificationResult

    def __call__(self, prompts=None, completions=None, completion_ids=None, *, pairwise_record, **_):
        chosen = [self.records[i] for i in pairwise_record]
        results = [self._result(task_id=r["task_id"], status=r["status"], reward=r["reward"],
                                components=json.loads(r["components"]), reason=r["reason"], scorer=r["scorer"])
                   for r in chosen]
        rewards = [r["reward"] for r in chosen]
        self.last = self._batch([r["completion"] for r in chosen], results, rewards)
        return rewards

    def close(self) -> None:
        pass


class RecordedModelScores:
    """The reward model's recorded scores as the update's second reward function."""

    __name__ = "pairwise_reward_model"
    seconds = 0.0

    def __init__(self, records: list[dict]):
        self.records = records
        self.identity = records[0]["reward_model"] if records else None
        self.last: list[float] = []

    def __call__(self, prompts=None, completions=None, completion_ids=None, *, pairwise_record, log_metric=None, **_):
        self.last = [self.records[i]["reward_model_score"] for i in pairwise_record]
        if log_metric is not None and self.last:  # the same share in-process GRPO logs (RewardModelReward)
            log_metric("reward_model/over_max_length", sum(score is None for score in self.last) / len(self.last))
        return list(self.last)


def check_records_weights(run: Path, records: list[dict], *, where: str) -> None:
    """Refuse records whose weights hash is not the hash of the version they name: they were relabelled, or written
    by weights that changed after their version was made, so their lag (and whether TRL's correction runs) would be
    wrong. Refused rather than re-labelled: a record's version decides its prompts' step, its seed and its lag."""
    hashes: dict[str, str] = {}
    for record in records:
        name = record["policy_version"]
        if name not in hashes:
            hashes[name] = read_version(run, version_number(name))["content_hash"]
        if record["policy_weights_sha256"] != hashes[name]:
            raise PairwiseInputError(f"{where}: record {record['rollout_id']} names policy version {name} but carries the "
                                     f"weights hash {record['policy_weights_sha256']}, not {name}'s {hashes[name]}; it "
                                     "was relabelled or written by other weights: generate the batch again")


def check_records_version(records: list[dict], *, trainer_version: int, max_staleness: int, where: str) -> int:
    """Refuse records another version wrote (staged: max_staleness 0) or more than max_staleness versions older than
    the trainer; return the largest lag."""
    lags = {trainer_version - version_number(r["policy_version"]) for r in records}
    if any(lag < 0 for lag in lags):
        raise PairwiseInputError(f"{where}: the records were generated by a later policy version than {trainer_version:04d}"
                                 " the update trains; they belong to another run or another step")
    worst = max(lags, default=0)
    if worst > max_staleness:
        raise PairwiseInputError(f"{where}: the records were generated by version v{trainer_version - worst:04d}, "
                                 f"{worst} behind the trainer's {version_name(trainer_version)}, more than max_staleness "
                                 f"{max_staleness}; generate the batch again with a newer version")
    return worst


def scored_records_for_update(run: Path, version: int, config) -> tuple[list[dict], int, Path]:
    """Batch `version`'s scored records, the largest lag of the versions that wrote them, and their file; refused in
    one line if version `version` + 1 exists already (an update runs once), if the batch has no scored records, or if
    they are of another version (staged) or too old (overlapped)."""
    read_version(run, version)
    if version_path(run, version + 1).exists():
        raise PairwiseInputError(f"{run}: the update of {version_name(version)} already ran ({version_name(version + 1)} "
                                 "exists); an update runs once per version")
    source = batch_folder(run, version) / SCORED
    if not source.is_file():
        raise PairwiseInputError(f"{run}: batch {version} has no scored answers ({source}); run the score stage first")
    records = read_records(source)
    check_records_weights(run, records, where=str(source))
    stale = check_records_version(records, trainer_version=version, max_staleness=config.max_staleness,
                                  where=str(source))
    return records, stale, source


def recorded_rollouts(records: list[dict], prompts: list, *, source: Path, batch: int, process_index: int = 0) -> dict:
    """This process's share of the records as TRL's rollout_func returns answers: token ids, the generating policy's
    log-probabilities, and each answer's record index for the reward functions. Accelerate deals a step's generation
    batch out in order, so process k draws the k-th len(prompts) of the prompts the one-process generate stage
    answered: its records are that slice. Refused if they answer other prompts than its sampler draws."""
    from training.grpo.rollouts import prompt_text

    first = process_index * len(prompts)
    share = records[first : first + len(prompts)]
    if [prompt_text(p) for p in prompts] != [r["prompt"] for r in share]:
        raise PairwiseInputError(f"{source}: the records answer other prompts than step {batch} draws (in another "
                                 "order or of another task file); generate the batch again")
    return {"prompt_ids": [r["prompt_token_ids"] for r in share],
            "completion_ids": [r["completion_token_ids"] for r in share],
            "logprobs": [r["logprobs"] for r in share],
            "pairwise_record": list(range(first, first + len(share)))}


def needs_recorded_correction(records: list[dict], *, stale: int) -> bool:
    """Whether an update corrects its recorded answers with TRL's truncated importance sampling: answers of older
    versions (`stale` > 0), and answers vLLM sampled, whose log-probabilities are another engine's, at any lag."""
    return stale > 0 or any(r.get("logprobs_source") == LOGPROBS_SOURCE_VLLM for r in records)


def per_process_batch(config, records: list[dict], processes: int, *, source: Path) -> dict:
    """The trainer arguments that split the batch's records, the step's global batch (what the one-process generate
    stage wrote: per_device_train_batch_size answers, the staged modes keeping steps_per_generation at 1), evenly
    over `processes` processes, so that the step trains on the same answers with the same global batch whatever the
    process count. Refused in one line when the records are not a step's or do not split into whole shares."""
    rows = config.per_device_train_batch_size
    if len(records) != rows:
        raise PairwiseInputError(f"{source}: {len(records)} records, but a step of this run trains on {rows} "
                                 "(per_device_train_batch_size); generate the batch again")
    if rows % processes:
        raise PairwiseInputError(f"{source}: the step's {rows} answers (per_device_train_batch_size) do not split into "
                                 f"{processes} processes; launch the update with a process count that divides {rows}")
    return {"per_device_train_batch_size": rows // processes, "generation_batch_size": rows}


def write_next_version(run: Path, version: int, saved: Path, tokenizer, *, source: Path, stale: int) -> dict:
    """Version `version` + 1 from the trainer's checkpoint folder `saved` (its files are moved), with the tokenizer."""
    from training.snapshot import file_sha256

    if not saved.is_dir():
        raise RuntimeError(f"the trainer saved no checkpoint for step {version + 1} in {saved.parent}")

    def fill(folder: Path) -> None:
        for item in saved.iterdir():
            item.rename(folder / item.name)
        tokenizer.save_pretrained(folder)

    return write_version(run, version + 1, fill, parent=version,
                         trained_on={"batch": version, "records": str(source.relative_to(run)),
                                     "records_sha256": file_sha256(source), "max_lag": stale})


def update_record(clock: StageClock, trainer, *, version: int, made: dict, records: list[dict], stale: int,
                  ledger) -> dict:
    logged = next((row for row in reversed(trainer.state.log_history) if "loss" in row), {})
    prefix = "sampling/importance_sampling_ratio/"
    correction = {key.removeprefix(prefix): value for key, value in logged.items() if key.startswith(prefix)} or None
    return clock.record(version=version_name(version), made=made["version"], content_hash=made["content_hash"],
                        stale_records=sum(version_number(r["policy_version"]) < version for r in records),
                        max_lag=stale, loss=logged.get("loss"), groups=vars(ledger.groups), correction=correction,
                        world_size=trainer.accelerator.num_processes)


def update_trainer(config, run: Path, version: int, *, staging: Path, rewards, model_scores, rollout_func,
                   callbacks: list, ledger, batch_split: dict | None = None):
    """The trainer of an update from version `version`: it saves a full checkpoint (optimizer and all) after every
    step into `staging`, and reads its answers from `rollout_func`; `batch_split` (per_process_batch) shares the
    step's answers among the launched processes."""
    from training.run_folder import RunFolder
    from training.trl_setup import run_callbacks

    return _stage_trainer(
        config, run, version, step=version,
        reward_funcs=[rewards] if model_scores is None else [rewards, model_scores],
        args_changes={"output_dir": str(staging), "save_strategy": "steps", "save_steps": 1, "save_only_model": False,
                      "save_total_limit": None, **(batch_split or {})},
        pairwise_reward=rewards, reward_model_reward=model_scores, rollout_func=rollout_func,
        callbacks=[*run_callbacks(config, RunFolder(run)), *callbacks], ledger=ledger,
        reference_weights=kl_reference(config, run))


def kl_reference(config, run: Path) -> Path | None:
    """The weights every update's KL term measures against, as in-process GRPO's: the run record's kl_reference
    (reference_checkpoint, resolved when the run started), or version v0000 (the run's start), never the version
    the update starts from. None when beta is 0 (no reference model)."""
    from training.run_folder import RunFolder

    if not config.beta > 0:
        return None
    recorded = (RunFolder(run).read_record() or {}).get("kl_reference") or {}
    reference = Path(recorded["path"]) if recorded.get("path") else version_path(run, 0)
    if not reference.is_dir():
        raise PairwiseInputError(f"{run}: the KL term's reference {reference} (run.json's kl_reference) is no longer a "
                                 "folder; put the checkpoint back there to go on with this run")
    return reference


def update_stage(run: Path, version: int) -> dict:
    """Train version `version` on batch `version`'s scored records into version `version` + 1."""
    import shutil

    from transformers import TrainerCallback

    from training.grpo.ledger import Ledger
    from training.trl_setup import is_main_process, world_size

    clock = StageClock()
    run = Path(run)
    batch = version
    config = load_run_config(run)
    records, stale, source = scored_records_for_update(run, version, config)
    batch_split = per_process_batch(config, records, world_size(), source=source)
    checked_weights(run, version, clock)
    set_torch_threads(config)

    class OneStep(TrainerCallback):
        """One optimizer step, then the trainer's checkpoint (timed: writing the next version is switching)."""

        step_ended = saved = 0.0

        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = True
            control.should_save = True
            self.step_ended = time.perf_counter()

        def on_save(self, args, state, control, **kwargs):
            self.saved = time.perf_counter()

    one_step = OneStep()
    staging = run / "versions" / f".update-{version_name(version)}"
    main = is_main_process()
    if main:  # the other processes write into it only after the step, which waits for every process
        shutil.rmtree(staging, ignore_errors=True)
    ledger = Ledger()
    rewards = RecordedRewards(records)
    model_scores = RecordedModelScores(records) if config.reward_model else None

    def rollout_func(prompts, trainer):
        return recorded_rollouts(records, prompts, source=source, batch=batch,
                                 process_index=trainer.accelerator.process_index)

    trainer = update_trainer(config, run, version, staging=staging, rewards=rewards, model_scores=model_scores,
                             rollout_func=rollout_func, callbacks=[one_step], ledger=ledger, batch_split=batch_split)
    trainer.recorded_correction = needs_recorded_correction(records, stale=stale)
    trainer.provenance = {r["rollout_id"]: r for r in records}
    clock.lap("loading")
    resume = str(version_path(run, version)) if version > 0 else None
    trainer.train(resume_from_checkpoint=resume)
    trainer.flush_rollouts()  # each process its own share's rollout file
    clock.lap("update")
    clock.move(max(0.0, one_step.saved - one_step.step_ended), "update", "saving")
    trainer.accelerator.wait_for_everyone()  # every process's part of the checkpoint (its random state) is saved
    if main:
        write_next_version(run, version, staging / f"checkpoint-{version + 1}", trainer.processing_class,
                           source=source, stale=stale)
        shutil.rmtree(staging, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()  # the version is written once, by the main process
    made = read_version(run, version + 1)
    clock.lap("export")
    record = update_record(clock, trainer, version=version, made=made, records=records, stale=stale, ledger=ledger)
    if main:
        _write_stage_record(run, batch, "update", record)
    return record

"""TRL's GRPOTrainer with every attempt recorded, zero-variance groups counted, and DAPO's dynamic sampling.

Answers reach TRL one way in every mode, through its public `rollout_func` seam: the trainer hands TRL its own
`_round_answers`, which seeds the generation batch, times it (the ledger's generation time) and keeps the token ids
for the records, around whatever answers the batch's prompts:

- in-process GRPO: `trl_answers`, TRL's own sampler on the trainer's live weights (transformers' generate, or TRL's
  vLLM engine when `use_vllm` is on);
- the staged cycle's generate stage: `sample_answers`, the same wrapper around `trl_answers` or vLLM's offline engine
  on the version's folder (training/grpo/stages.py);
- a staged or overlapped update: the recorded answers of the batch (training/grpo/stages.py, lanes.py).

What no public part of TRL offers is listed, with why, in training/trl_private.py, and checked on the installed TRL
when this module is imported:

- `_generate_and_score_completions` (overridden and called: one generation batch sampled, scored, with advantages)
  is followed by building one rollout row per completion and counting the groups whose rewards are all equal; with
  dynamic sampling, such groups are dropped and more rounds of fresh prompts fill the batch before TRL splits it into
  micro-batches. The counts join each training log beside TRL's own step metrics through `log` (Trainer.log,
  public), averaged by TRL's rule. Reward functions see no advantages and callbacks see no batch, so this is the
  one point where a row can carry its advantage;
- `_get_per_token_logps_and_entropies` (overridden) keeps the per-token log-probabilities of the policy's forward
  pass in `compute_loss` (public). When generation and update are aligned (TRL's default: one generation batch per
  optimizer step, num_iterations 1), TRL uses exactly these as the "old" log-probabilities, because the weights that
  generated the batch are the weights of that forward pass; recording them costs nothing extra. Otherwise the
  log-probabilities TRL computes right after generation (or vLLM's own sampling log-probabilities) are recorded.
  `policy_logprobs` calls it for answers outside the update (dropped groups, the generate stage);
- `trl_answers` calls TRL's `_tokenize_prompts` and `_generate_single_turn`, so that answers sampled through the seam
  are the tokens TRL's own generation would sample;
- with vLLM, the engine's `sync_weights` is wrapped to time it (the ledger's switching time).

Log-probabilities are of the sampling distribution at `temperature` (TRL divides the logits by it), before
top-k / top-p truncation.
"""

import hashlib
import math
import random
import time
import warnings
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from trl import GRPOTrainer

from training.errors import PairwiseInputError
from training.grpo.ledger import GroupCounts, Ledger
from training.grpo.rewards import RewardModelReward, VerifierComponentsReward, component_scores
from training.grpo.rollouts import prompt_text, write_batch
from training.trl_private import check_installed_trl
from training.trl_setup import is_zero3
from training.verifiers.results import CORRECT, UNVERIFIED

# The overrides below rely on private parts of TRL that change between releases without notice: another TRL, or one
# lacking any of them (training/trl_private.py lists each), fails here, in one line, before any run starts.
check_installed_trl()

HASHED_ELEMENTS_PER_TENSOR = 1 << 16  # the policy hash reads at most this many values of each weight tensor
# Output keys of _generate_and_score_completions that dynamic sampling knows how to merge across rounds;
# anything else (images, multimodal fields) is refused rather than merged wrongly.
_PER_TOKEN_KEYS = ("completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
                   "sampling_per_token_logps", "importance_sampling_ratio", "tool_mask")
_MERGEABLE_KEYS = {"prompt_ids", "prompt_mask", "advantages", "num_items_in_batch", "pairwise_row", *_PER_TOKEN_KEYS}


@dataclass
class _Round:
    """One call of TRL's generate-and-score: its output and which of its local groups carry signal."""

    output: dict
    batch: int
    teaches: list[bool]           # per local group: rewards not all equal
    counts: GroupCounts = field(default_factory=GroupCounts)


def _pad_rows(parts: list[torch.Tensor], *, side: str, value) -> torch.Tensor:
    """Stack (b_i, w_i) tensors into (sum b_i, max w_i), padding on the left or right."""
    width = max(part.shape[1] for part in parts)
    padded = []
    for part in parts:
        missing = width - part.shape[1]
        if missing:
            filler = torch.full((part.shape[0], missing), value, dtype=part.dtype, device=part.device)
            part = torch.cat([filler, part] if side == "left" else [part, filler], dim=1)
        padded.append(part)
    return torch.cat(padded, dim=0)


def generation_seed(seed: int, batch: int, process_index: int) -> int:
    """The sampling seed of one generation batch: a function of the run's seed, the batch and the process alone, so
    that in-process GRPO and the staged cycle's generate stage (training/grpo/stages.py) sample the same answers
    from the same weights, and a rerun of a stage writes the same records."""
    digest = hashlib.sha256(f"pairwise-generation:{seed}:{batch}:{process_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@contextmanager
def seeded_generation(seed: int):
    """Sample under `seed` and leave the training's random state as it was (dropout, TRL's batch shuffle)."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def load_reference_weights(trainer, folder: Path) -> None:
    """Put `folder`'s weights into the reference model TRL built from the policy's checkpoint, in place, so
    TRL's own preparation of that model (fused LM head, device placement) stays as it made it. The KL term then
    measures the distance to `folder`, wherever the policy itself started (a later round, a policy version)."""
    from transformers import AutoModelForCausalLM

    if is_zero3(trainer) or trainer.is_fsdp_enabled:
        raise PairwiseInputError("reference_checkpoint: the reference model is sharded under DeepSpeed ZeRO-3 or FSDP "
                                 "and cannot be reloaded in place; start the policy from the reference checkpoint, "
                                 "or use ZeRO-2")
    reference = trainer.accelerator.unwrap_model(trainer.ref_model)
    loaded, loading = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=reference.dtype,
                                                           output_loading_info=True)
    # transformers fills a weight the folder lacks with fresh random values, which a strict load would accept.
    missing = sorted({*loading.get("missing_keys", ()),
                      *(key if isinstance(key, str) else key[0] for key in loading.get("mismatched_keys", ()))})
    if missing:
        raise PairwiseInputError(f"reference_checkpoint {folder} lacks weights the policy has ({', '.join(missing[:3])}"
                                 f"{', ...' if len(missing) > 3 else ''}); give a full checkpoint of the same model")
    try:
        reference.load_state_dict(loaded.state_dict(), strict=True)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[-1].strip()
        raise PairwiseInputError(f"reference_checkpoint {folder} does not have the policy's shapes ({first}); "
                                 "give a checkpoint of the same architecture and vocabulary") from None


# A weight below this teaches the policy gradient next to nothing: the answer trains on the KL term alone.
NEGLIGIBLE_WEIGHT = 1e-3


def correction_statistics(ratio: torch.Tensor, completion_mask: torch.Tensor) -> dict:
    """What TRL's importance-sampling correction did to a batch, beside the min / mean / max of the ratio it logs:
    the share of weights it masked (set to 0), the share left negligible (below NEGLIGIBLE_WEIGHT, masked included:
    TRL's sequence_mask has no lower bound), and the effective sample size (sum w)^2 / (n sum w^2), 1 when every
    answer counts alike, near 0 when a few carry the batch. Per sequence in TRL's sequence modes (ratio B x 1), per
    completion token in its token modes."""
    weights = ratio.flatten() if ratio.shape[-1] == 1 else ratio[completion_mask.bool()]
    weights = weights.detach().float()
    if weights.numel() == 0:
        return {"masked_share": 0.0, "negligible_share": 0.0, "effective_sample_size": 0.0}
    squares = (weights * weights).sum()
    return {"masked_share": (weights == 0).float().mean().item(),
            "negligible_share": (weights < NEGLIGIBLE_WEIGHT).float().mean().item(),
            "effective_sample_size": (weights.sum() ** 2 / (weights.numel() * squares)).item() if squares > 0 else 0.0}


def trl_answers(prompts: list, trainer) -> dict:
    """TRL's own sampling as a rollout_func: the prompts tokenized as TRL tokenizes them (its chat template) and
    answered by the trainer's model through whichever backend TRL is set for (transformers' generate, TRL's vLLM
    engine), in the shape rollout_func returns: prompt and completion token ids (EOS included), and the sampler's
    log-probabilities (vLLM's) or None."""
    prompt_ids, images, multimodal_fields = trainer._tokenize_prompts(prompts)
    if images is not None or multimodal_fields:
        raise PairwiseInputError("GRPO's prompts carry images or other multimodal fields, which Pairwise's records do "
                                 "not keep; give text prompts")
    generations = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
    completion_ids, logprobs = trainer._generate_single_turn(prompt_ids, None, {}, generations)
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}


class PairwiseGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that writes rollouts/, keeps a ledger, and can replace zero-variance groups."""

    # rollout_id -> the record of the stage that generated the answer (training/grpo/stages.py); None in-process,
    # where the answers were generated by this trainer's own weights.
    provenance: dict[str, dict] | None = None
    # Whether this round's answers have been handed to TRL (by _round_answers); reset when a round starts.
    answers_in_hand = False

    def __init__(self, *args, pairwise_reward: VerifierComponentsReward, rollouts_dir: Path, ledger: Ledger,
                 task_prompts: dict[str, object], first_batch: int = 0, dynamic_sampling: bool = False,
                 dynamic_sampling_max_rounds: int = 4, append_metrics=None,
                 reward_model_reward: RewardModelReward | None = None, reference_weights: Path | None = None,
                 rollout_func=None, **kwargs):
        started = time.perf_counter()
        self._answer_source = rollout_func or trl_answers  # read by _round_answers, which TRL calls
        self._next_batch = first_batch
        with warnings.catch_warnings():
            # TRL warns that rollout_func is experimental; the version guard above checks the TRL it was written for.
            warnings.filterwarnings("ignore", message="You are using 'rollout_func'", category=UserWarning)
            super().__init__(*args, rollout_func=self._round_answers, **kwargs)
        if reference_weights is not None and self.ref_model is not None:
            load_reference_weights(self, Path(reference_weights))
        self.pairwise_reward = pairwise_reward
        self.reward_model_reward = reward_model_reward
        self.rollouts_dir = Path(rollouts_dir)
        self.ledger = ledger
        self.ledger.loading_s += time.perf_counter() - started
        self.task_prompts = task_prompts
        self.dynamic_sampling = dynamic_sampling
        self.dynamic_sampling_max_rounds = dynamic_sampling_max_rounds
        self.append_metrics = append_metrics
        self._step_figures: defaultdict[str, list[float]] = defaultdict(list)  # until the next training log
        self._next_row = 0
        self._rows: dict[int, dict] = {}                 # row key -> rollout row (until its batch is written)
        self._rows_waiting: dict[int, int] = {}          # batch -> rows still without log-probabilities
        self._batch_keys: dict[int, list[int]] = {}      # batch -> row keys
        self._capture_logps = False
        self._captured_logps: torch.Tensor | None = None
        self._last_generated: tuple[list, list] | None = None
        self._weights_hash: tuple[int, str | None] | None = None
        self._fresh_prompts = random.Random(f"dynamic-sampling:{self.args.seed}:{self.accelerator.process_index}")
        local_batch = self.args.generation_batch_size // self.accelerator.num_processes
        if dynamic_sampling and local_batch % self.num_generations:
            raise PairwiseInputError(
                f"dynamic_sampling needs whole groups on each process: the per-process generation batch "
                f"({local_batch}) must be a multiple of num_generations ({self.num_generations}); change "
                "per_device_train_batch_size or steps_per_generation")
        if self.use_vllm:
            self._time_weight_sync()

    def _time_weight_sync(self) -> None:
        """Time TRL's weight sync into the vLLM engine as the ledger's switching time (TRL calls it from _generate)."""
        sync = self.vllm_generation.sync_weights

        def timed_sync():
            began = time.perf_counter()
            sync()
            self.ledger.switching_s += time.perf_counter() - began

        self.vllm_generation.sync_weights = timed_sync

    @property
    def pad_token_id(self) -> int:
        """The pad token TRL pads prompts and completions with (its tokenizer is the processing class, or the
        processor's tokenizer; TRL sets the pad token to EOS when the tokenizer has none)."""
        return getattr(self.processing_class, "tokenizer", self.processing_class).pad_token_id

    # --- generation -------------------------------------------------------------------------------------

    def _round_answers(self, prompts: list, trainer=None, *, source=None) -> dict:
        """The rollout_func TRL calls for every generation batch: the answers of `source` (default: the trainer's
        answer source), sampled under the batch's seed and timed; their token ids are kept for the batch's records."""
        started = time.perf_counter()
        with seeded_generation(generation_seed(self.args.seed, self._next_batch, self.accelerator.process_index)):
            output = (source or self._answer_source)(prompts, self)
        self.ledger.generation_s += time.perf_counter() - started
        self._last_generated = (output["prompt_ids"], output["completion_ids"])
        self.answers_in_hand = True
        return output

    def sample_answers(self, prompts: list, *, batch: int, source=None) -> dict:
        """Answers to `prompts` as generation batch `batch` (its seed), outside training, through the same seam as
        training's: rollout_func's output (prompt and completion token ids, EOS included, and the sampler's
        log-probabilities or None). `source` answers instead of the trainer's own (vLLM's offline engine)."""
        self._next_batch = batch
        return self._round_answers(prompts, self, source=source)

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            self.answers_in_hand = False
            return super()._generate_and_score_completions(inputs)
        first = self._scored_round(inputs)
        counts = GroupCounts()
        counts.add(first.counts)
        if self.dynamic_sampling:
            output, dropped, surplus, rounds = self._fill_with_teaching_groups(first, counts)
            counts.dropped += dropped
            counts.surplus += surplus
            counts.refill_rounds += rounds
        else:
            output = first.output
        self.ledger.groups.add(counts)
        trained = self.accelerator.gather(torch.tensor([output["advantages"].shape[0]], device=self.accelerator.device))
        self.ledger.completions_trained += int(trained.sum().item())
        self._log_group_metrics(counts, output)
        if self.append_metrics is not None and self.accelerator.is_main_process:
            self.append_metrics({"event": "generation", "step": self.state.global_step + 1,
                                 "zero_variance_share": counts.zero_variance_share,
                                 **vars(counts)})
        return output

    def _log_group_metrics(self, counts: GroupCounts, output: dict) -> None:
        """The step's group counts and importance-sampling figures, logged (averaged) with TRL's own metrics."""
        metrics = self._step_figures
        metrics["zero_variance/groups"].append(counts.zero_variance)
        metrics["zero_variance/share"].append(counts.zero_variance / counts.groups if counts.groups else 0.0)
        metrics["zero_variance/all_correct"].append(counts.all_correct)
        metrics["zero_variance/all_wrong"].append(counts.all_wrong)
        if self.dynamic_sampling:
            metrics["dynamic_sampling/dropped_groups"].append(counts.dropped)
            metrics["dynamic_sampling/extra_rounds"].append(counts.refill_rounds)
        if "importance_sampling_ratio" in output:  # TRL's correction ran: answers an older version sampled
            for key, value in correction_statistics(output["importance_sampling_ratio"],
                                                    output["completion_mask"]).items():
                metrics[f"sampling/importance_sampling_ratio/{key}"].append(value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Each training log carries the mean of every figure _log_group_metrics kept since the last one, as TRL
        averages its own (NaN left out; None when nothing else is left); an evaluation's log carries none."""
        if self.model.training:
            for key, values in self._step_figures.items():
                valid = [value for value in values if not math.isnan(value)]
                logs[key] = sum(valid) / len(valid) if valid else None
        super().log(logs, start_time)
        if self.model.training:
            self._step_figures.clear()

    def _scored_round(self, inputs: list[dict]) -> _Round:
        """TRL's generate-and-score for `inputs`, then one rollout row per completion."""
        self.answers_in_hand = False
        output = super()._generate_and_score_completions(inputs)
        started = time.perf_counter()
        batch = self._next_batch
        self._next_batch += 1
        scored = self.pairwise_reward.last
        _, completion_ids = self._last_generated
        eos_and_pad = {*self.eos_token_ids, self.pad_token_id}
        truncated = [not ids or ids[-1] not in eos_and_pad for ids in completion_ids]
        # None where the reward model left an answer unscored (over its max_length): NaN, as for the verifier.
        model_scores = ([math.nan if s is None else float(s) for s in self.reward_model_reward.last]
                        if self.reward_model_reward is not None else [math.nan] * len(scored.rewards))
        everything = self._gathered_figures(scored, completion_ids, truncated, model_scores)
        self._add_figures_to_ledger(everything)
        counts, teaches_local = self._group_signal(everything, local_n=len(inputs))
        keys = self._add_rows(inputs, output, batch, completion_ids, truncated, model_scores)
        output["pairwise_row"] = torch.tensor(keys, dtype=torch.long)
        self._write_if_complete(batch)
        self.ledger.recording_s += time.perf_counter() - started
        return _Round(output=output, batch=batch, teaches=teaches_local, counts=counts)

    def _gathered_figures(self, scored, completion_ids: list, truncated: list[bool],
                          model_scores: list[float]) -> torch.Tensor:
        """Every process's completions, one row each: reward, correct, length, truncated, reward model score, verified."""
        rewards = [math.nan if r is None else float(r) for r in scored.rewards]
        local = torch.tensor([[reward, float(result.status == CORRECT), len(ids), float(cut), score,
                               float(result.status != UNVERIFIED)]
                              for reward, result, ids, cut, score in zip(rewards, scored.results, completion_ids,
                                                                          truncated, model_scores, strict=True)],
                             dtype=torch.float64, device=self.accelerator.device)
        return self.accelerator.gather(local).cpu()

    def _add_figures_to_ledger(self, everything: torch.Tensor) -> None:
        """The round's completions, tokens, rewards and correctness in the ledger (all processes' completions)."""
        self.ledger.count_completions([int(x) for x in everything[:, 2].tolist()], int(everything[:, 3].sum().item()))
        self.ledger.add_step_figures(self.state.global_step + 1,
                                     rewards=self._total_rewards(everything[:, 0], everything[:, 4]).tolist(),
                                     model_scores=everything[:, 4].tolist(),
                                     correct=[bool(x) for x, verified in everything[:, [1, 5]].tolist() if verified],
                                     lengths=[int(x) for x in everything[:, 2].tolist()])

    def _group_signal(self, everything: torch.Tensor, *, local_n: int) -> tuple[GroupCounts, list[bool]]:
        """The round's group counts over all processes, and which of this process's groups teach."""
        group_size = self.num_generations
        counts = GroupCounts()
        teaches_global = []
        for start in range(0, everything.shape[0], group_size):
            group = everything[start : start + group_size]
            teaches = self._group_teaches(group[:, 0], group[:, 4])
            teaches_global.append(teaches)
            counts.groups += 1
            if not teaches:
                counts.zero_variance += 1
                right = int(group[:, 1].sum().item())
                counts.all_correct += right == group.shape[0]
                counts.all_wrong += right == 0
        first_group = self.accelerator.process_index * local_n // group_size
        return counts, teaches_global[first_group : first_group + math.ceil(local_n / group_size)]

    @staticmethod
    def _logprob_source(output: dict) -> tuple[str, torch.Tensor | None]:
        """Where the round's log-probabilities come from, and them if TRL has already computed them."""
        if "sampling_per_token_logps" in output:
            return "vllm sampler", output["sampling_per_token_logps"]
        if "old_per_token_logps" in output:
            return "policy forward after generation", output["old_per_token_logps"]
        return "policy forward in the update", None

    def _add_rows(self, inputs: list[dict], output: dict, batch: int, completion_ids: list, truncated: list[bool],
                  model_scores: list[float]) -> list[int]:
        """One rollout row per completion of this process, kept until its log-probabilities are known; their keys."""
        scored = self.pairwise_reward.last
        local_n = len(inputs)
        offset = self.accelerator.process_index * local_n
        source, logps = self._logprob_source(output)
        mask_truncated = bool(self.args.mask_truncated_completions)
        policy_hash = self._policy_weights_sha256()  # once per optimizer step, before any row
        advantages = output["advantages"].tolist()
        keys = list(range(self._next_row, self._next_row + local_n))
        self._next_row += local_n
        waiting = 0
        for i, key in enumerate(keys):
            row = self._rollout_row(inputs[i], scored.results[i], scored.texts[i], list(completion_ids[i]),
                                    batch=batch, index=offset + i, source=source, truncated=truncated[i],
                                    model_score=model_scores[i], advantage=advantages[i], policy_hash=policy_hash)
            waiting += self._attach_logprobs(row, None if logps is None else logps[i], truncated=truncated[i],
                                             mask_truncated=mask_truncated)
            self._rows[key] = row
        self._batch_keys[batch] = keys
        self._rows_waiting[batch] = waiting
        return keys

    def _rollout_row(self, inputs: dict, result, completion: str, ids: list[int], *, batch: int, index: int,
                     source: str, truncated: bool, model_score: float, advantage: float, policy_hash: str | None) -> dict:
        """The rollout row of completion `index` (over all processes) of batch `batch`, without log-probabilities."""
        group, member = divmod(index, self.num_generations)
        task_id = inputs["task_id"]
        return {
            "rollout_id": f"{batch:06d}-{group:04d}-{member:02d}",
            "batch": batch,
            "group_id": f"{batch:06d}-{group:04d}",
            "member": member,
            "task_id": task_id,
            "prompt": prompt_text(self.task_prompts.get(task_id, inputs["prompt"])),
            "completion": completion,
            "completion_token_ids": ids,
            "logprobs": None,
            "logprobs_source": source,
            "finish_reason": "truncated" if truncated else "stopped",
            "length": len(ids),
            "status": result.status,
            "reward": None if result.reward is None else float(result.reward),
            "components": _json(result.components),
            "component_scores": component_scores(result.components),
            "reason": result.reason,
            "scorer": result.scorer,
            "reward_model_score": None if math.isnan(model_score) else model_score,
            "reward_model": self.reward_model_reward.identity if self.reward_model_reward is not None else None,
            "advantage": float(advantage),
            "in_batch": True,
            "policy_step": self.state.global_step,
            "policy_weights_sha256": policy_hash,
            "policy_version": f"v{self.state.global_step:04d}",
            "process_index": self.accelerator.process_index,
        }

    def _attach_logprobs(self, row: dict, logps: torch.Tensor | None, *, truncated: bool, mask_truncated: bool) -> bool:
        """Give `row` the log-probabilities known now (a stage's record, or TRL's `logps`) and their source; True
        when it must wait for the update's forward pass."""
        recorded = self.provenance.get(row["rollout_id"]) if self.provenance is not None else None
        if recorded is not None:  # generated by a stage: its version wrote the answer and its log-probabilities
            row.update(policy_step=recorded["policy_step"], policy_version=recorded["policy_version"],
                       policy_weights_sha256=recorded["policy_weights_sha256"],
                       logprobs_source=f"recorded at generation ({recorded['policy_version']}, "
                                       f"{recorded.get('logprobs_source') or 'source not recorded'})")
        if mask_truncated and truncated:
            row["logprobs_source"] = "not recorded: truncated completions are masked (mask_truncated_completions)"
        elif recorded is not None:
            row["logprobs"] = list(recorded["logprobs"])
        elif logps is not None:
            row["logprobs"] = logps[: row["length"]].float().cpu().tolist()
        else:
            return True
        return False

    def _group_teaches(self, verifier: torch.Tensor, reward_model: torch.Tensor) -> bool:
        """Whether a group's advantages are not all zero, as TRL computes them from its reward functions: under
        sum_then_normalize the weighted sum (NaN where every function gave None) must differ within the group;
        under normalize_then_sum any function with a non-zero weight must."""
        weights = self.reward_weights.tolist()
        columns = [verifier, reward_model][: len(weights)]

        def varies(values: torch.Tensor) -> bool:
            scorable = values[~torch.isnan(values)]
            # All equal (or fewer than two scorable answers): every advantage from these values is zero.
            return scorable.numel() >= 2 and not torch.allclose(scorable, scorable[0].expand_as(scorable))

        if self.multi_objective_aggregation == "normalize_then_sum":
            return any(weight != 0 and varies(column) for weight, column in zip(weights, columns, strict=True))
        return varies(self._total_rewards(verifier, reward_model))

    def _total_rewards(self, verifier: torch.Tensor, reward_model: torch.Tensor) -> torch.Tensor:
        """The reward TRL logs per completion: its reward functions' outputs weighted and summed, None (NaN) left out;
        NaN where every function gave None."""
        weights = self.reward_weights.tolist()
        stacked = torch.stack([verifier] if len(weights) == 1 else [verifier, reward_model], dim=1)
        total = torch.nansum(stacked * torch.tensor(weights, dtype=stacked.dtype), dim=1)
        total[torch.isnan(stacked).all(dim=1)] = math.nan
        return total

    # --- dynamic sampling -----------------------------------------------------------------------------------

    def _fill_with_teaching_groups(self, first: _Round, counts: GroupCounts) -> tuple[dict, int, int, int]:
        """DAPO's dynamic sampling: keep groups whose rewards differ, draw fresh prompts until the batch is
        full again (at most dynamic_sampling_max_rounds extra rounds), then top up with zero-variance groups.
        Returns the merged output, the zero-variance groups dropped, the surplus groups left out, and the
        extra rounds (counts over all processes)."""
        unknown = set(first.output) - _MERGEABLE_KEYS
        if unknown:
            raise PairwiseInputError(f"dynamic_sampling cannot merge batches carrying {sorted(unknown)} (multimodal "
                                     "inputs); set dynamic_sampling: false")
        size = self.num_generations
        needed = first.output["advantages"].shape[0] // size
        chosen: list[tuple[dict, int]] = []   # (round output, local group)
        spare: list[tuple[dict, int]] = []
        spare_teaches: list[bool] = []

        def take(round_: _Round) -> None:
            for local_group, teaches in enumerate(round_.teaches):
                if teaches and len(chosen) < needed:
                    chosen.append((round_.output, local_group))
                else:
                    spare.append((round_.output, local_group))
                    spare_teaches.append(teaches)

        take(first)
        rounds = 0
        while rounds < self.dynamic_sampling_max_rounds:
            short = torch.tensor([needed - len(chosen)], device=self.accelerator.device)
            if self.accelerator.gather(short).max().item() <= 0:  # every process must run the same rounds
                break
            rounds += 1
            fresh = self._scored_round(self._fresh_inputs(needed))
            counts.add(fresh.counts)
            take(fresh)
        # Still short after the extra rounds: zero-variance groups keep the batch whole. (Spare groups with
        # signal exist only once the batch is full: surplus from the round that filled it.)
        fill = max(0, needed - len(chosen))
        chosen += spare[:fill]
        left_out, left_out_teaches = spare[fill:], spare_teaches[fill:]
        self._record_dropped(left_out)
        dropped = sum(not teaches for teaches in left_out_teaches)
        totals = self.accelerator.gather(torch.tensor([[dropped, len(left_out) - dropped]], device=self.accelerator.device))
        dropped_total, surplus_total = totals.sum(dim=0).tolist()
        return self._merge(chosen), int(dropped_total), int(surplus_total), rounds

    def _fresh_inputs(self, groups: int) -> list[dict]:
        dataset = self.train_dataset
        picks = [self._fresh_prompts.randrange(len(dataset)) for _ in range(groups)]
        return [dict(dataset[index]) for index in picks for _ in range(self.num_generations)]

    def _merge(self, parts: list[tuple[dict, int]]) -> dict:
        size = self.num_generations
        rows = [(output, slice(group * size, (group + 1) * size)) for output, group in parts]
        merged: dict = {}
        for key in rows[0][0]:
            if key == "num_items_in_batch":
                continue
            pieces = [output[key][where] for output, where in rows]
            if key in ("prompt_ids", "prompt_mask"):
                merged[key] = _pad_rows(pieces, side="left", value=self.pad_token_id if key == "prompt_ids" else 0)
            elif key in _PER_TOKEN_KEYS and pieces[0].dim() == 2 and not (key == "importance_sampling_ratio" and pieces[0].shape[1] == 1):
                value = {"completion_ids": self.pad_token_id, "tool_mask": 1}.get(key, 0)
                merged[key] = _pad_rows(pieces, side="right", value=value)
            else:
                merged[key] = torch.cat(pieces, dim=0)
        loss_mask = merged["completion_mask"] if "tool_mask" not in merged else merged["completion_mask"] * merged["tool_mask"]
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        return merged

    def _record_dropped(self, parts: list[tuple[dict, int]]) -> None:
        """Dropped groups are not trained on; their log-probabilities come from one extra forward pass."""
        size = self.num_generations
        for output, group in parts:
            where = slice(group * size, (group + 1) * size)
            keys = output["pairwise_row"][where].tolist()
            for key in keys:
                self._rows[key]["in_batch"] = False
            pending = [k for k in keys if self._rows[k]["logprobs"] is None and self._rows[k]["logprobs_source"]
                       == "policy forward in the update"]
            if pending:
                logps = self.policy_logprobs(output["prompt_ids"][where], output["prompt_mask"][where],
                                             output["completion_ids"][where], output["completion_mask"][where])
                for row_index, key in enumerate(keys):
                    self._store_logps(key, logps[row_index], source="policy forward (dropped group)")

    # --- log-probabilities from the update's forward pass ----------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        keys = inputs.get("pairwise_row")
        wanted = keys is not None and any(key in self._rows and self._rows[key]["logprobs"] is None
                                          for key in keys.tolist())
        self._capture_logps = wanted
        self._captured_logps = None
        try:
            loss = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        finally:
            self._capture_logps = False
        if wanted and self._captured_logps is not None:
            started = time.perf_counter()
            for row_index, key in enumerate(keys.tolist()):
                self._store_logps(key, self._captured_logps[row_index])
            self._captured_logps = None
            self.ledger.recording_s += time.perf_counter() - started
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._capture_logps:  # the first call inside compute_loss is the policy's forward pass
            self._captured_logps = result[0].detach()
            self._capture_logps = False
        return result

    def policy_logprobs(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                        completion_mask: torch.Tensor) -> torch.Tensor:
        """Per-token log-probabilities of padded completions under the policy's current weights, by TRL's own forward
        (at the sampling temperature), without gradients."""
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model, torch.cat([prompt_ids, completion_ids], dim=1),
                torch.cat([prompt_mask, completion_mask], dim=1), completion_ids.size(1),
                batch_size=self.args.per_device_train_batch_size)
        return logps

    def _store_logps(self, key: int, logps: torch.Tensor, source: str | None = None) -> None:
        row = self._rows.get(key)
        if row is None or row["logprobs"] is not None or row["logprobs_source"].startswith("not recorded"):
            return
        row["logprobs"] = logps[: row["length"]].float().cpu().tolist()
        if source is not None:
            row["logprobs_source"] = source
        self._rows_waiting[row["batch"]] -= 1
        self._write_if_complete(row["batch"])

    # --- writing ----------------------------------------------------------------------------------------

    def _write_if_complete(self, batch: int) -> None:
        if self._rows_waiting.get(batch) == 0:
            self._write_batch(batch)

    def _write_batch(self, batch: int) -> None:
        keys = self._batch_keys.pop(batch)
        self._rows_waiting.pop(batch, None)
        rows = [self._rows.pop(key) for key in keys]
        write_batch(self.rollouts_dir, batch, self.accelerator.process_index, rows)

    def flush_rollouts(self) -> None:
        """Write every batch still waiting for log-probabilities (training ended or stopped before its update)."""
        for batch in sorted(self._batch_keys):
            for key in self._batch_keys[batch]:
                row = self._rows[key]
                if row["logprobs"] is None and not row["logprobs_source"].startswith("not recorded"):
                    row["logprobs_source"] = "not recorded: training ended before this batch's update"
            self._write_batch(batch)

    def _policy_weights_sha256(self) -> str | None:
        """sha256 over the policy's parameters, once per optimizer step: each tensor's name, shape and values,
        all of them for tensors up to HASHED_ELEMENTS_PER_TENSOR elements and an evenly strided sample of
        that many for larger ones. An optimizer step moves (nearly) every weight, so the sample tells policy
        versions apart while the cost stays flat in model size (hashing all 14 GB of a 7B model each step
        would take seconds). None under ZeRO-3 / FSDP, where no process holds whole weights."""
        step = self.state.global_step
        if self._weights_hash is not None and self._weights_hash[0] == step:
            return self._weights_hash[1]
        digest = None
        if not is_zero3(self) and not self.is_fsdp_enabled:
            hasher = hashlib.sha256()
            model = self.accelerator.unwrap_model(self.model)
            for name, parameter in sorted(model.named_parameters(), key=lambda item: item[0]):
                flat = parameter.detach().reshape(-1)
                if flat.numel() > HASHED_ELEMENTS_PER_TENSOR:
                    flat = flat[:: math.ceil(flat.numel() / HASHED_ELEMENTS_PER_TENSOR)]
                hasher.update(f"{name}{tuple(parameter.shape)}".encode() + b"\0")
                hasher.update(flat.contiguous().view(torch.uint8).cpu().numpy().tobytes())
            digest = "sha256:" + hasher.hexdigest()
        self._weights_hash = (step, digest)
        return digest

def _json(value) -> str:
    import json

    return json.dumps(value, sort_keys=True, default=str)

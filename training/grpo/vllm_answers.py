"""The generate stage's answers from vLLM (`generation_engine: vllm`, docs/training.md "vLLM on a CPU"), and how far
vLLM's sampling log-probabilities lie from the training forward's on the same weights.

The prompts are the batch's, tokenized by TRL as its own generation tokenizes them; each answer is sampled under a
seed drawn from the batch's sampling seed and its place in the batch, so a rerun writes the same records.
"""

import math
from pathlib import Path

from training.grpo.versions import version_path


def sample_with_vllm(trainer, run: Path, prompts: list, *, version: int, batch_seed: int, threads: int | None):
    """The prompt and completion token ids (EOS included) of one answer per prompt, vLLM's per-token log-probabilities
    and the engine's record (VLLMAnswers), sampled from version `version`'s folder with the trainer's settings."""
    from training.generation import sample_seed
    from training.vllm_generation import Sampling, vllm_generate

    prompt_ids = [list(ids) for ids in trainer._tokenize_prompts(prompts)[0]]
    sampling = Sampling(temperature=trainer.temperature, max_tokens=trainer.max_completion_length,
                        top_p=trainer.top_p, top_k=trainer.top_k or 0, min_p=trainer.min_p or 0.0,
                        repetition_penalty=trainer.repetition_penalty)
    answers = vllm_generate(version_path(run, version), prompt_ids,
                            [sample_seed(batch_seed, index, 0) for index in range(len(prompt_ids))], sampling,
                            eos_token_ids=sorted(trainer.eos_token_ids), threads=threads)
    return prompt_ids, answers.token_ids, answers.logprobs, answers


def sampler_mismatch(sampled: list[list[float]], forward: list[list[float]]) -> dict:
    """Per completion token, how vLLM's log-probabilities (the sampler, q) differ from the training forward's on the
    same weights (p): the mean and largest absolute difference, and two estimates of KL(q || p) from tokens q sampled:
    k1 = mean(log q - log p) (unbiased, may be negative on few tokens) and k3 = mean(p/q - 1 - log(p/q)) (unbiased,
    never negative)."""
    diffs = [s - f for row_s, row_f in zip(sampled, forward, strict=True) for s, f in zip(row_s, row_f, strict=True)]
    if not diffs:
        return {"tokens": 0, "mean_abs": None, "max_abs": None, "kl_k1": None, "kl_k3": None}
    count = len(diffs)
    return {"tokens": count, "mean_abs": _figure(sum(abs(d) for d in diffs) / count),
            "max_abs": _figure(max(abs(d) for d in diffs)), "kl_k1": _figure(sum(diffs) / count),
            "kl_k3": _figure(sum(math.exp(-d) - 1 + d for d in diffs) / count)}


def _figure(value: float) -> float:
    """Four significant digits: the differences of one set of float32 weights in two engines are often below 1e-6."""
    return float(f"{value:.4g}")


def mismatch_summary(rows: list[dict]) -> dict | None:
    """The run's mismatch over its vLLM batches (each a sampler_mismatch): token-weighted means, the largest
    difference; None when no batch was sampled by vLLM."""
    rows = [row for row in rows if row and row.get("tokens")]
    if not rows:
        return None
    tokens = sum(row["tokens"] for row in rows)

    def weighted(key: str) -> float:
        return _figure(sum(row[key] * row["tokens"] for row in rows) / tokens)

    return {"batches": len(rows), "tokens": tokens, "mean_abs": weighted("mean_abs"),
            "max_abs": max(row["max_abs"] for row in rows), "kl_k1": weighted("kl_k1"), "kl_k3": weighted("kl_k3")}

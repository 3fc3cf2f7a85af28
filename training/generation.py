"""Sampling completions from a causal LM with transformers' `generate`, or from a checkpoint folder with vLLM's
offline engine in the generation environment (training/vllm_generation.py): prompts rendered through the model's
chat template as TRL's trainers render them, batched, greedy at temperature 0. Used by evaluation, GRPO's difficulty
filter, the tiny model's held-out check and the benchmarks; torch is imported only when a completion is generated.
"""

import hashlib


def chat_prompt(tokenizer, prompt) -> str:
    """The text a model is prompted with: its chat template over the prompt's messages (a string is one
    user message), as TRL's trainers render it; without a chat template, a string prompt as it is."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    if not tokenizer.chat_template and isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def check_chat_template(tokenizer, where: str) -> None:
    """Refuse, in one line, a chat template that cannot render a conversation (a Jinja syntax error, a variable it
    cannot read): it would otherwise fail deep inside TRL or generate, after the model has loaded."""
    if not getattr(tokenizer, "chat_template", None):
        return
    conversation = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]
    try:
        tokenizer.apply_chat_template(conversation[:1], tokenize=False, add_generation_prompt=True)
        tokenizer.apply_chat_template(conversation, tokenize=False)
    except Exception as error:  # jinja2's TemplateError and what the template itself raises
        from training.errors import PairwiseInputError

        raise PairwiseInputError(f"{where}: its chat template fails to render a conversation "
                                 f"({type(error).__name__}: {' '.join(str(error).split())}); fix chat_template.jinja "
                                 "(or tokenizer_config.json's chat_template) in that folder") from None


def generate_completions(model, tokenizer, prompts: list, *, samples: int, temperature: float,
                         max_new_tokens: int, batch_size: int = 64, top_p: float = 1.0,
                         top_k: int = 0) -> list[list[str]]:
    """`samples` completions per prompt (a string or chat messages); temperature 0 means greedy; top_k 0
    and top_p 1 leave the distribution whole."""
    import torch

    results: list[list[str]] = [[] for _ in prompts]
    flat = [(i, p) for i, p in enumerate(prompts) for _ in range(samples)]
    for start in range(0, len(flat), batch_size):
        chunk = flat[start : start + batch_size]
        texts = [chat_prompt(tokenizer, p) for _, p in chunk]
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        kwargs = {"do_sample": False} if temperature == 0 else {"do_sample": True, "temperature": temperature,
                                                                "top_k": top_k, "top_p": top_p}
        with torch.no_grad():
            output = model.generate(**encoded, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                    eos_token_id=tokenizer.eos_token_id, **kwargs)
        new_tokens = output[:, encoded["input_ids"].shape[1] :]
        for (index, _), ids in zip(chunk, new_tokens, strict=True):
            results[index].append(tokenizer.decode(ids, skip_special_tokens=True))
    return results


def sample_seed(seed: int, prompt: int, sample: int) -> int:
    """vLLM's seed for sample `sample` of prompt `prompt` (vLLM seeds each request, so an answer does not depend on
    what else is in the batch)."""
    digest = hashlib.sha256(f"pairwise-sample:{seed}:{prompt}:{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generate_completions_vllm(checkpoint, tokenizer, prompts: list, *, samples: int, temperature: float,
                              max_new_tokens: int, seed: int, top_p: float = 1.0, top_k: int = 0) -> list[list[str]]:
    """generate_completions' answers sampled by vLLM from the checkpoint folder: the same prompt tokens, greedy at
    temperature 0, each sample under its own seed from `seed` (the same seed gives the same answers run to run)."""
    from training.vllm_generation import Sampling, vllm_generate

    encoded = [tokenizer(chat_prompt(tokenizer, prompt), add_special_tokens=False)["input_ids"] for prompt in prompts]
    flat = [(index, sample) for index in range(len(prompts)) for sample in range(samples)]
    eos = tokenizer.eos_token_id
    answers = vllm_generate(checkpoint, [encoded[index] for index, _ in flat],
                            [sample_seed(seed, index, sample) for index, sample in flat],
                            Sampling(temperature=temperature, max_tokens=max_new_tokens, top_p=top_p, top_k=top_k),
                            eos_token_ids=[] if eos is None else [eos])
    results: list[list[str]] = [[] for _ in prompts]
    for (index, _), ids in zip(flat, answers.token_ids, strict=True):
        results[index].append(tokenizer.decode(ids, skip_special_tokens=True))
    return results

"""Sampling completions from a causal LM with transformers' `generate`: prompts rendered through the model's chat
template as TRL's trainers render them, batched, greedy at temperature 0. Used by evaluation, GRPO's difficulty
filter, the tiny model's held-out check and the benchmarks; torch is imported only when a completion is generated.
"""


def chat_prompt(tokenizer, prompt) -> str:
    """The text a model is prompted with: its chat template over the prompt's messages (a string is one
    user message), as TRL's trainers render it; without a chat template, a string prompt as it is."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    if not tokenizer.chat_template and isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


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

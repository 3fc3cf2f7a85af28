"""A realistic SFT checkpoint built offline: a Qwen2-architecture model with a byte-level BPE tokenizer.

`tiny-sft` (training/tiny.py) is a 1M-parameter Llama with one token per character; what users bring is a Qwen
or Llama checkpoint with a BPE tokenizer and a chat template. This recipe builds one of those from nothing:

- the tokenizer is trained by the `tokenizers` library on the task families' text (prompts and worked solutions,
  the training variant only, so held-out wordings stay unseen) with Qwen2's own normalizer and pre-tokenizer
  (byte-level, digits one by one), so that AutoTokenizer, which loads a qwen2 checkpoint's tokenizer as
  Qwen2Tokenizer, splits text exactly as the training did; its special tokens and chat template are in Qwen's style
  (`<|im_start|>role\\n...<|im_end|>\\n`), EOS is `<|im_end|>` and pad is `<|endoftext|>`, two different tokens;
- the model is `Qwen2ForCausalLM` in one of the SIZES: `small` (about ten million parameters, trained here by
  tiny-sft's own SFT loop so that it learns the task families) or `0.5b` (the shape of Qwen2.5-0.5B, its
  151,936-row embedding included, so its memory and time per step are a real 0.5B model's; random weights unless
  trained: `--steps 0`).

Everything is deterministic under the seed; `AutoTokenizer` / `AutoModelForCausalLM.from_pretrained(DIR)` load
the folder like any local Hugging Face checkpoint.
"""

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training.errors import PairwiseInputError
from training.task_families import FAMILIES, iter_tasks, make_tasks
from training.tiny import (
    TRAIN_FAMILIES,
    TinySFTConfig,
    checked_build_folder,
    evaluate_heldout,
    format_report,
    save_built_checkpoint,
    seeded_torch,
    train_sft,
)

RECIPE = "pairwise.bpe-sft/1"
PAD, EOS, START = "<|endoftext|>", "<|im_end|>", "<|im_start|>"
SPECIAL_TOKENS = [PAD, START, EOS]
# Qwen's template without its default system message: every message is <|im_start|>role\ncontent<|im_end|>\n.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Model shapes. `small` learns the task families on two CPU cores; `0.5b` is Qwen2.5-0.5B's configuration
# (hidden 896, 24 layers, 14 query and 2 key-value heads, MLP 4864, tied 151,936-row embedding): 494M parameters.
SIZES = {
    "small": {"hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 6,
              "num_key_value_heads": 2, "vocab_size": None},
    "0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "vocab_size": 151936},
}
CORPUS_TASKS_PER_FAMILY = 400  # enough text for a 4,096-token vocabulary; more only slows the tokenizer's training


@dataclass
class BpeSFTConfig(TinySFTConfig):
    """The bpe-sft recipe: tiny-sft's SFT loop and evaluation, on a Qwen2 model with a trained BPE tokenizer."""

    size: str = field(default="small", metadata={"help": f"Model shape: {', '.join(SIZES)}."})
    vocab_size: int = field(default=4096, metadata={"help": "BPE vocabulary size, special tokens included."})
    steps: int = field(default=300, metadata={"help": "Optimizer steps of SFT (0: random weights)."})
    learning_rate: float = field(default=2e-3, metadata={"help": "Peak AdamW learning rate (cosine decay)."})
    max_position_embeddings: int = field(default=2048, metadata={"help": "Longest sequence, in tokens."})


def tokenizer_corpus(seed: int) -> list[str]:
    """The text the tokenizer learns from: every family's training-variant prompts and worked solutions."""
    texts = []
    for family in FAMILIES:
        stream = iter_tasks(family, seed=seed, variant="train")
        for _ in range(CORPUS_TASKS_PER_FAMILY):
            task = next(stream)
            prompt = task["prompt"]
            texts.append(prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt))
            texts.append(task["solution"])
    return texts


def build_bpe_tokenizer(texts: list[str], vocab_size: int, *, max_length: int = 2048):
    """A byte-level BPE tokenizer trained on `texts`: any text encodes (no unknown token), digits one per token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 512:
        raise PairwiseInputError(f"--vocab-size must be at least 512 (256 bytes, the special tokens and merges), got "
                                 f"{vocab_size}")
    from transformers import Qwen2Tokenizer

    backend = Tokenizer(models.BPE())
    # Qwen2's own normalizer (NFC) and pre-tokenizer (its split pattern, digits one by one, then byte-level), taken
    # from transformers' Qwen2Tokenizer: AutoTokenizer loads a qwen2 checkpoint's tokenizer with them, so the
    # tokenizer trains on exactly the pieces it will be used with.
    qwen = Qwen2Tokenizer().backend_tokenizer
    backend.normalizer = qwen.normalizer
    backend.pre_tokenizer = qwen.pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, eos_token=EOS,
                                        additional_special_tokens=[START], padding_side="left",
                                        model_max_length=max_length)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_qwen_model(tokenizer, config: BpeSFTConfig):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if config.size not in SIZES:
        raise PairwiseInputError(f"--size must be one of {', '.join(SIZES)}, got {config.size!r}")
    shape = dict(SIZES[config.size])
    shape["vocab_size"] = max(shape["vocab_size"] or 0, len(tokenizer))  # Qwen pads its embedding past the vocabulary
    model_config = Qwen2Config(
        **shape,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def build_bpe_sft(out: Path, config: BpeSFTConfig, log=print) -> dict:
    """Train the tokenizer, build the model, train and evaluate it (unless steps is 0), and save both into `out`
    (written aside, then renamed)."""
    out = checked_build_folder(out)
    if config.steps < 0:
        raise PairwiseInputError(f"--steps must be 0 (random weights) or more, got {config.steps}")
    started = time.perf_counter()
    seeded_torch(config)

    tokenizer = build_bpe_tokenizer(tokenizer_corpus(config.seed), config.vocab_size,
                                    max_length=config.max_position_embeddings)
    model = build_qwen_model(tokenizer, config)
    parameters = sum(p.numel() for p in model.parameters())
    log(f"bpe-sft ({config.size}): {parameters:,} parameters, a {len(tokenizer):,}-token BPE vocabulary, "
        f"{config.steps} steps of {config.batch_size} fresh problems")
    losses, results, train_s = [], None, 0.0
    if config.steps:
        losses = train_sft(model, tokenizer, config, log=log)
        train_s = time.perf_counter() - started
        eval_tasks = make_tasks(TRAIN_FAMILIES, n=config.eval_tasks, seed=config.seed, variant="heldout")
        results = evaluate_heldout(model, tokenizer, eval_tasks, config)
    wall_s = time.perf_counter() - started

    info = {
        "recipe": RECIPE,
        "config": asdict(config),
        "architecture": type(model).__name__,
        "parameters": parameters,
        "tokenizer": {"kind": "byte-level BPE", "vocab_size": len(tokenizer), "eos": EOS, "pad": PAD},
        "families": TRAIN_FAMILIES.split(","),
        "final_loss": round(losses[-1], 4) if losses else None,
        "heldout": results,
        "train_s": round(train_s, 1),
        "wall_s": round(wall_s, 1),
    }
    save_built_checkpoint(out, model, tokenizer, record_name="bpe_sft.json", record=info)
    return info


def bpe_sft_main(args) -> int:
    """`python -m training bpe-sft --out DIR [--size small|0.5b] [--steps N] [--seed S]`."""
    config = BpeSFTConfig(seed=args.seed, size=args.size)
    if args.steps is not None:
        config.steps = args.steps
        config.warmup_steps = min(config.warmup_steps, max(1, args.steps // 5))
    if args.vocab_size is not None:
        config.vocab_size = args.vocab_size
    if args.eval_tasks is not None:
        config.eval_tasks = args.eval_tasks
    if args.batch_size is not None:
        if args.batch_size < 1:
            raise PairwiseInputError(f"--batch-size must be at least 1, got {args.batch_size}")
        config.batch_size = args.batch_size
    info = build_bpe_sft(Path(args.out), config)
    if info["heldout"] is not None:
        print(format_report(info))
    print(f"saved {info['architecture']} checkpoint ({info['parameters']:,} parameters, "
          f"{'random weights' if not config.steps else f'{config.steps} SFT steps'}) to {args.out}")
    return 0

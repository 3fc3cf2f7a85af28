"""A tiny SFT checkpoint built from scratch, offline: the stand-in for a real SFT model in tests and the demo.

A character-level tokenizer and a small Llama-architecture model are created in memory, trained with one
plain loop on worked solutions of the synthetic task families, then saved with `save_pretrained`, so
`AutoTokenizer` / `AutoModelForCausalLM.from_pretrained(DIR)` load it like any other local checkpoint.
Nothing is downloaded.

The default recipe aims at the regime where some, not all, samples at temperature 1 are right on held-out
problems: there is signal left for DPO and GRPO to find.
"""

import json
import math
import random
import re
import string
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training.atomic_write import atomic_folder, discard_partial
from training.errors import PairwiseInputError
from training.generation import chat_prompt, generate_completions
from training.padding import right_padded
from training.share_input import NotAShare, read_share
from training.task_families import iter_tasks, make_tasks

SPECIAL_TOKENS = ["<pad>", "<unk>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
# Every message renders as <|role|>content<|end|>; the assistant turn ends with <|end|>, which is EOS.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
# Share of the SFT problems per family. Speed word problems weigh most: they are what GRPO's learning
# benchmark (bench/grpo_learning.py) trains and tests on, and with less of them the model reads too few
# wordings to answer any held-out one.
TRAIN_MIX = (("speed", 0.7), ("rate", 0.05), ("arithmetic", 0.1), ("code", 0.15))
TRAIN_FAMILIES = ",".join(family for family, _ in TRAIN_MIX)
SNAPSHOT_FAMILIES = "speed,arithmetic,code"  # the synthetic preference snapshot for DPO
EVAL_SAMPLES = 4  # pass@4 needs four samples per problem


@dataclass
class TinySFTConfig:
    """The tiny-sft recipe. The defaults are the demo checkpoint; tests lower `steps`."""

    seed: int = field(default=0, metadata={"help": "Seed for data, initial weights, batches and sampling."})
    steps: int = field(default=320, metadata={"help": "Optimizer steps of SFT."})
    batch_size: int = field(default=32, metadata={"help": "Sequences per step."})
    learning_rate: float = field(default=5e-3, metadata={"help": "Peak AdamW learning rate (cosine decay)."})
    warmup_steps: int = field(default=30, metadata={"help": "Linear warm-up steps."})
    eval_tasks: int = field(default=48, metadata={"help": "Held-out problems for greedy accuracy and pass@k."})
    hidden_size: int = field(default=192, metadata={"help": "Model width."})
    num_layers: int = field(default=2, metadata={"help": "Decoder layers."})
    num_heads: int = field(default=6, metadata={"help": "Attention heads."})
    max_new_tokens: int = field(default=64, metadata={"help": "Generation length limit at evaluation."})
    noisy_share: float = field(default=0.6, metadata={
        "help": "Share of word-problem prompts trained with some words replaced (see noisy_wording)."})
    noise_rate: float = field(default=0.3, metadata={"help": "Chance that a word of such a prompt is replaced."})
    misconception_share: float = field(default=0.0, metadata={
        "help": "Share of speed problems whose worked solution uses a common wrong method (see misconceived_solution)."})
    torch_threads: int | None = field(default=None, metadata={
        "help": "CPU threads for torch; None: torch's default (OMP_NUM_THREADS, else the cores)."})


def build_char_tokenizer():
    """One token per printable ASCII character plus the chat specials; anything else is <unk>."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\r\x0b\x0c"]
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + chars)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # characters join back without spaces
    backend.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<|end|>",
        padding_side="left",  # generation pads prompts on the left
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(tokenizer, config: TinySFTConfig):
    from transformers import LlamaConfig, LlamaForCausalLM

    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.hidden_size * 3,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def noisy_wording(prompt: str, rng: random.Random, rate: float) -> str:
    """`prompt` with some words replaced by made-up ones; numbers and the word after each number (its
    unit) are kept. Trained on such prompts too, the tiny model finds a problem's quantities by their
    numbers and units rather than by the few phrasings of the training variant, so it can still read the
    held-out variant's new wordings."""
    words = prompt.split(" ")
    out = []
    for index, word in enumerate(words):
        has_digit = any(ch.isdigit() for ch in word)
        after_number = index > 0 and any(ch.isdigit() for ch in words[index - 1])
        if has_digit or after_number or rng.random() >= rate:
            out.append(word)
            continue
        core = word.rstrip(".,?!:;")
        made_up = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 7)))
        out.append(made_up + word[len(core):])
    return " ".join(out)


def misconceived_solution(task: dict) -> str | None:
    """The worked solution of a speed problem by a classic wrong method, or None for other problems: the two
    legs' distances averaged instead of divided by the time, or distance times time for one leg. A parent
    taught these on some problems writes them on some samples, as SFT data written by people carries their
    mistakes; the verifier's reward is what can teach the child to stop."""
    meta = task.get("meta") or {}
    if meta.get("family") != "speed":
        return None
    unit = task.get("unit")
    if meta.get("structure") == "two_legs":
        first, second, _ = meta["values"]
        wrong = (first + second) // 2
        work = f"({first} + {second}) / 2 = {first + second} / 2 = {wrong}"
    elif meta.get("structure") == "one_leg":
        total, hours = meta["values"]
        wrong = total * hours
        work = f"{total} * {hours} = {wrong}"
    else:
        return None
    return f"{work}\nAnswer: {wrong} {unit}" if unit else f"{work}\nAnswer: {wrong}"


class SFTProblemStream:
    """Fresh training problems for every SFT step, drawn across the families by TRAIN_MIX and encoded.

    Each family is an endless, seeded stream of its training variant, and each draw gets its own noisy
    wording: over the thousands of steps that teach the model to copy a problem's numbers into its answer,
    a fixed pool of prompts would be seen many times over, word for word, and memorised instead. (A
    family's number space is small, so the same quantities do come back; the prompt around them rarely
    does.) Deterministic under the config's seed.
    """

    def __init__(self, tokenizer, config: "TinySFTConfig"):
        self.tokenizer = tokenizer
        self.config = config
        self._families = [family for family, _ in TRAIN_MIX]
        self._weights = [share for _, share in TRAIN_MIX]
        self._streams = {family: iter_tasks(family, seed=config.seed, variant="train") for family in self._families}
        self._pick = random.Random(f"families:{config.seed}")
        self._wording = random.Random(f"wording:{config.seed}")
        self._mistakes = random.Random(f"misconception:{config.seed}")

    def next_task(self) -> dict:
        family = self._pick.choices(self._families, self._weights)[0]
        return next(self._streams[family])

    def encode(self, task: dict) -> tuple[list[int], int]:
        """(token ids of prompt + solution + EOS, number of prompt tokens); a share of the word problems gets
        noisy wording, a share of the speed problems the taught wrong method."""
        config, tokenizer = self.config, self.tokenizer
        prompt, solution = task["prompt"], task["solution"]
        if task["kind"] == "math" and isinstance(prompt, str) and self._wording.random() < config.noisy_share:
            prompt = noisy_wording(prompt, self._wording, config.noise_rate)
        if config.misconception_share > 0 and self._mistakes.random() < config.misconception_share:
            solution = misconceived_solution(task) or solution
        prompt_ids = tokenizer(chat_prompt(tokenizer, prompt), add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        return prompt_ids + answer_ids, len(prompt_ids)

    def batch(self, size: int) -> list[tuple[list[int], int]]:
        return [self.encode(self.next_task()) for _ in range(size)]


def _collate(batch: list[tuple[list[int], int]], pad_id: int):
    import torch

    input_ids, attention = right_padded([ids for ids, _ in batch], pad_id)
    labels = torch.full_like(input_ids, -100)
    for row, (ids, prompt_len) in enumerate(batch):
        # Loss on the answer only: the model learns to answer, not to write questions.
        labels[row, prompt_len : len(ids)] = torch.tensor(ids[prompt_len:])
    return input_ids, attention, labels


def train_sft(model, tokenizer, config: TinySFTConfig, log=print, stop_after: int | None = None) -> list[float]:
    """One readable SFT loop over fresh problems: AdamW, warm-up then cosine decay, loss on answer tokens.
    Returns step losses. `stop_after` runs only the first steps of the same schedule (the recipe's quick check)."""
    import torch

    problems = SFTProblemStream(tokenizer, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.01, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:
        if step < config.warmup_steps:
            return config.learning_rate * (step + 1) / config.warmup_steps
        progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
        return config.learning_rate * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))

    model.train()
    losses = []
    log_every = max(1, config.steps // 10)
    for step in range(config.steps if stop_after is None else min(stop_after, config.steps)):
        input_ids, attention, labels = _collate(problems.batch(config.batch_size), tokenizer.pad_token_id)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % log_every == 0 or step == 0:
            log(f"step {step + 1:>4}/{config.steps}  loss {loss.item():.3f}")
    model.eval()
    return losses


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def extract_final_number(completion: str) -> str | None:
    """The number after the last 'Answer:', else the last number in the text."""
    tail = completion.rsplit("Answer:", 1)[-1] if "Answer:" in completion else completion
    numbers = _NUMBER.findall(tail)
    return (numbers[0] if "Answer:" in completion else numbers[-1]) if numbers else None


def score_math_exact(completion: str, task: dict) -> bool:
    """Exact numeric comparison of the final answer. The full verifier (units, formats) lives in
    training.verifiers; this is the fallback while that is not installed."""
    found = extract_final_number(completion)
    if found is None:
        return False
    try:
        return float(found) == float(task["answer"])
    except ValueError:
        return False


def score_code_exact(completion: str, task: dict) -> bool:
    """Without the sandboxed verifier a code completion counts as right only when it is the reference
    solution up to whitespace; that never runs model-written code."""
    def normalise(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip().splitlines())

    return normalise(completion) == normalise(task["reference_solution"])


def score_completions(pairs: list[tuple[dict, str]]) -> tuple[list[bool], str]:
    """Whether each (task, completion) is right, and which scorer said so.

    Pairwise's verifiers (math with units, code in a sandbox); where the sandbox cannot isolate code on
    this machine (neither root nor user namespaces), the exact comparisons above.
    """
    from training.verifiers.sandbox import SandboxUnavailable
    from training.verifiers.task_verifier import TaskVerifier

    try:
        with TaskVerifier(workers=1) as verifier:
            results = verifier.verify_many(pairs)
    except SandboxUnavailable:
        results = None
    fallback = [score_code_exact(c, t) if t["kind"] == "code" else score_math_exact(c, t) for t, c in pairs]
    if results is None:
        return fallback, "exact-match fallback"
    verdicts = []
    for result, exact in zip(results, fallback, strict=True):
        # "error" means the verifier could not judge (not that the answer is wrong): use the exact check.
        verdicts.append(exact if result.status == "error" else result.status == "correct")
    return verdicts, "training.verifiers"


def evaluate_heldout(model, tokenizer, tasks: list[dict], config: TinySFTConfig) -> dict:
    """Greedy accuracy, pass@1 and pass@4 (4 samples at temperature 1), overall and per family."""
    import torch

    torch.manual_seed(config.seed)
    prompts = [t["prompt"] for t in tasks]
    greedy = generate_completions(model, tokenizer, prompts, samples=1, temperature=0.0,
                                  max_new_tokens=config.max_new_tokens)
    sampled = generate_completions(model, tokenizer, prompts, samples=EVAL_SAMPLES, temperature=1.0,
                                   max_new_tokens=config.max_new_tokens)
    pairs = [(task, g[0]) for task, g in zip(tasks, greedy, strict=True)]
    pairs += [(task, c) for task, s in zip(tasks, sampled, strict=True) for c in s]
    verdicts, scorer = score_completions(pairs)
    greedy_right, sampled_right = verdicts[: len(tasks)], verdicts[len(tasks) :]
    per_task = []
    for i, task in enumerate(tasks):
        right = sampled_right[i * EVAL_SAMPLES : (i + 1) * EVAL_SAMPLES]
        per_task.append({
            "family": task["task_id"].split("-")[0],
            "greedy": greedy_right[i],
            "pass@1": sum(right) / len(right),
            "pass@4": any(right),
            "right_of_4": sum(right),
        })

    def summary(rows: list[dict]) -> dict:
        n = len(rows)
        return {
            "problems": n,
            "greedy_accuracy": round(sum(r["greedy"] for r in rows) / n, 4),
            "pass@1": round(sum(r["pass@1"] for r in rows) / n, 4),
            "pass@4": round(sum(r["pass@4"] for r in rows) / n, 4),
            "share_1_to_3_of_4": round(sum(1 <= r["right_of_4"] <= 3 for r in rows) / n, 4),
        }

    families = sorted({r["family"] for r in per_task})
    return {
        "overall": summary(per_task),
        "by_family": {f: summary([r for r in per_task if r["family"] == f]) for f in families},
        "scorer": scorer,
        "example": {"prompt": tasks[0]["prompt"], "greedy": greedy[0][0]},
    }


def build_tiny_sft(out: Path, config: TinySFTConfig, log=print) -> dict:
    """Build, train, evaluate and save the tiny checkpoint into `out` (written aside, then renamed)."""
    out = checked_build_folder(out)
    if config.steps < 1:
        raise PairwiseInputError(f"--steps must be at least 1, got {config.steps}")
    started = time.perf_counter()
    seeded_torch(config)

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, config)
    eval_tasks = make_tasks(TRAIN_FAMILIES, n=config.eval_tasks, seed=config.seed, variant="heldout")
    parameters = sum(p.numel() for p in model.parameters())
    log(f"tiny-sft: {parameters:,} parameters, {config.steps} steps of {config.batch_size} fresh problems")

    losses = train_sft(model, tokenizer, config, log=log)
    train_s = time.perf_counter() - started
    results = evaluate_heldout(model, tokenizer, eval_tasks, config)
    wall_s = time.perf_counter() - started

    info = {
        "recipe": "pairwise.tiny-sft/1",
        "config": asdict(config),
        "parameters": parameters,
        "families": TRAIN_FAMILIES.split(","),
        "final_loss": round(losses[-1], 4),
        "heldout": results,
        "train_s": round(train_s, 1),
        "wall_s": round(wall_s, 1),
    }
    save_built_checkpoint(out, model, tokenizer, record_name="tiny_sft.json", record=info)
    return info


FIRST_STEPS = 20  # the recipe's quick check: what its first steps' losses are


def tiny_sft_first_steps(out: Path, config: TinySFTConfig, steps: int = FIRST_STEPS) -> list[float]:
    """The recipe's first `steps` steps exactly as build_tiny_sft takes them (the same seed, model, problems and
    schedule), saved to `out` with the tokenizer; returns their losses. A shipped checkpoint records them, so a
    change to the recipe shows in seconds rather than in a full build (annotate/runs/demo_checkpoint.py)."""
    out = checked_build_folder(out)
    seeded_torch(config)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, config)
    make_tasks(TRAIN_FAMILIES, n=config.eval_tasks, seed=config.seed, variant="heldout")  # as the build draws them
    losses = train_sft(model, tokenizer, config, log=lambda line: None, stop_after=steps)
    save_built_checkpoint(out, model, tokenizer, record_name="tiny_sft.json",
                          record={"recipe": "pairwise.tiny-sft/1", "config": asdict(config), "first_steps": steps})
    return losses


def checked_build_folder(out) -> Path:
    """`--out` of a recipe: a new or empty folder in an existing one, else one line saying how to fix it."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise PairwiseInputError(f"--out {out} already exists and is not empty; choose a new folder or remove it")
    if not out.parent.exists():
        raise PairwiseInputError(f"--out {out}: folder {out.parent} does not exist; create it first")
    return out


def seeded_torch(config) -> None:
    """The recipe's threads and seed, and deterministic kernels: the same seed builds the same weights."""
    import torch
    from transformers import set_seed

    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    set_seed(config.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def save_built_checkpoint(out: Path, model, tokenizer, *, record_name: str, record: dict) -> None:
    """Model, tokenizer and the recipe's record written aside, then renamed into `out`: never half a checkpoint."""
    discard_partial(out)  # what a killed build left beside it
    with atomic_folder(out) as partial:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        (partial / record_name).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        if out.exists():
            out.rmdir()  # empty, checked by checked_build_folder


def format_report(info: dict) -> str:
    overall = info["heldout"]["overall"]
    lines = [
        f"held-out problems: {overall['problems']}  (4 samples each at temperature 1; scored by "
        f"{info['heldout']['scorer']})",
        f"{'family':<12}{'greedy acc':>11}{'pass@1':>9}{'pass@4':>9}{'1-3 of 4':>10}",
    ]
    rows = [*info["heldout"]["by_family"].items(), ("all", overall)]
    for name, s in rows:
        lines.append(f"{name:<12}{s['greedy_accuracy']:>11.3f}{s['pass@1']:>9.3f}{s['pass@4']:>9.3f}"
                     f"{s['share_1_to_3_of_4']:>10.3f}")
    lines.append(f"wall time: {info['wall_s']:.1f} s (training {info['train_s']:.1f} s)")
    return "\n".join(lines)


def tiny_sft_main(args) -> int:
    """`python -m training tiny-sft --out DIR [--seed S] [--steps N]`."""
    config = TinySFTConfig(seed=args.seed)
    if args.steps is not None:
        config.steps = args.steps
        config.warmup_steps = min(config.warmup_steps, max(1, args.steps // 5))
    if args.eval_tasks is not None:
        config.eval_tasks = args.eval_tasks
    if args.misconception_share is not None:
        try:
            config.misconception_share = read_share(args.misconception_share)
        except NotAShare:
            raise PairwiseInputError(f"--misconception-share must be a share from 0 to 1, got "
                                     f"{args.misconception_share}") from None
    info = build_tiny_sft(Path(args.out), config)
    print(format_report(info))
    print(f"saved tiny SFT checkpoint to {args.out}")
    return 0


def _wrong_solution(task: dict, rng: random.Random) -> str:
    """A plausible but wrong answer to `task`: the final number changed (math), or a constant or the sort
    order changed (code)."""
    solution = task["solution"]
    if task["kind"] == "math":
        right = task["answer"]
        wrong = str(int(right) + rng.choice([-20, -10, -2, -1, 1, 2, 10, 20]))
        head, _, tail = solution.rpartition(right)  # the answer's last mention, in "Answer: ..."
        work, _, last_line = head.rpartition("\n")
        return work.replace(f"= {right}", f"= {wrong}") + "\n" + last_line + wrong + tail
    if "reverse=True" in solution:
        return solution.replace(", reverse=True", "")
    if "sorted(xs)" in solution:
        return solution.replace("sorted(xs)", "sorted(xs, reverse=True)")
    digits = [i for i, ch in enumerate(solution) if ch.isdigit()]
    i = digits[-1]
    return solution[:i] + str((int(solution[i]) + 1) % 10) + solution[i + 1 :]


def write_tiny_snapshot(out: Path, *, train: int = 64, test: int = 16, seed: int = 0,
                        row_format: str = "conversational", file_format: str = "jsonl") -> dict:
    """A synthetic preference snapshot over the task families: the right worked answer is chosen, a wrong
    one rejected. For tests, the demo and benchmarks, where no human judgments exist yet."""
    from training.snapshot import SnapshotWriter

    rng = random.Random(seed)
    rows = {"train": make_tasks(SNAPSHOT_FAMILIES, n=train, seed=seed),
            "test": make_tasks(SNAPSHOT_FAMILIES, n=test, seed=seed, variant="heldout")}
    with SnapshotWriter(out, project="tiny-demo", created_at="2025-01-01T00:00:00Z", criteria_version=1,
                        filters={"synthetic": True, "seed": seed}, agreement=None,
                        row_format=row_format, file_format=file_format) as writer:
        for split, tasks in rows.items():
            for task in tasks:
                writer.add_pair(split, prompt=task["prompt"], chosen=task["solution"],
                                rejected=_wrong_solution(task, rng), meta={"task_id": task["task_id"]})
    return writer.manifest

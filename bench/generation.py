"""transformers' `generate` against vLLM's offline engine on the same model, prompts, sampling settings and seed.

For each model (the shipped `tiny-sft`, a `bpe-sft` small checkpoint, the `bpe-sft` 0.5b configuration) and each
number of sequences, every engine runs as a fresh child process of the generation environment's Python (vLLM
needs its own environment: docs/training.md, "vLLM on a CPU"), on the same token ids:

  transformers    `model.generate` in one batch (left-padded), do_sample, temperature 1, no top-k or top-p;
  vllm-eager      `vllm.LLM(..., enforce_eager=True)`: PyTorch eager kernels, no graph capture;
  vllm-compiled   `vllm.LLM(..., enforce_eager=False)`: vLLM's torch.compile'd graphs (compiled at load).

Both engines sample exactly `--max-new-tokens` tokens a sequence (EOS ignored), so tokens per second count the
same work. Each sequence has its own seed (seed + its index), so a rerun gives the same tokens. vLLM runs its
engine in the child's own process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that the child's peak resident memory
is the engine's; the KV cache space is `--kv-cache-gb`.

The logprob mismatch is what the staged cycle's update sees: the per-token log-probabilities each engine reports
for the tokens it sampled, against a transformers forward pass over prompt + completion in the training
environment (this Python): mean and max absolute difference per token, and a KL estimate (mean of
exp(d) - 1 - d, d = logp_train - logp_engine; zero when they agree).

Load seconds (building the engine, loading and, when compiled, compiling) are reported apart from generation.

    python bench/generation.py [--models tiny,small,0.5b] [--sequences 64,256] [--max-new-tokens 64]
        [--engines transformers,vllm-eager,vllm-compiled] [--threads 2] [--kv-cache-gb 2] [--seed 0]
        [--generation-python .venv-vllm/bin/python] [--small-checkpoint DIR] [--large-checkpoint DIR]

Missing bpe-sft checkpoints are built first (`python -m training bpe-sft --steps 0`: random weights; speed does
not depend on what the weights learned). Prints a table and writes bench/results/generation.json.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and training

from bench.common import ROOT, machine, results_path, run_measured, utc_timestamp, write_results

RESULTS = results_path("generation")
TINY = ROOT / "annotate" / "runs" / "demo_files" / "tiny-sft"
ENGINES = ("transformers", "vllm-eager", "vllm-compiled")
PROMPT_FAMILIES = "speed,arithmetic,multistep,code"


# ---- child: one engine generating once (runs in the generation environment) ----------------------------------

def generate_with_transformers(model_dir: str, prompts: list[list[int]], *, max_new_tokens: int, seed: int,
                               threads: int) -> tuple[float, float, list[dict]]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    load_s = time.perf_counter() - started
    pad = model.generation_config.pad_token_id
    pad = 0 if pad is None else pad
    model.generation_config.eos_token_id = None  # sample every sequence to full length, as vLLM's ignore_eos
    width = max(len(ids) for ids in prompts)
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts])
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
    torch.manual_seed(seed)
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                             pad_token_id=pad, output_logits=True, return_dict_in_generate=True)
    generate_s = time.perf_counter() - started
    completions = out.sequences[:, width:]
    logits = torch.stack(out.logits, dim=1).float()  # raw logits: temperature 1 and no warpers, as sampled
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    rows = [{"completion_ids": completions[i].tolist(), "logprobs": chosen[i].tolist()} for i in range(len(prompts))]
    return load_s, generate_s, rows


def generate_with_vllm(model_dir: str, prompts: list[list[int]], *, max_new_tokens: int, seed: int, threads: int,
                       eager: bool, kv_cache_gb: int) -> tuple[float, float, list[dict]]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gb))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    torch.set_num_threads(threads)
    started = time.perf_counter()
    # Every prompt fits the first step's token budget: a prompt split over steps (chunked prefill) rewinds its
    # seeded generator, which vLLM's CPU backend cannot do ("CPU Generator does not use offset").
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=eager, seed=seed, gpu_memory_utilization=0.1,
              max_model_len=max(len(ids) for ids in prompts) + max_new_tokens, max_num_seqs=len(prompts),
              max_num_batched_tokens=sum(len(ids) for ids in prompts) + len(prompts))
    load_s = time.perf_counter() - started
    params = [SamplingParams(temperature=1.0, top_k=0, top_p=1.0, max_tokens=max_new_tokens, ignore_eos=True,
                             logprobs=0, seed=seed + index) for index in range(len(prompts))]
    started = time.perf_counter()
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=False)
    generate_s = time.perf_counter() - started
    rows = []
    for output in outputs:
        sample = output.outputs[0]
        ids = list(sample.token_ids)
        chosen = [step[token].logprob for step, token in zip(sample.logprobs, ids, strict=True)]
        rows.append({"completion_ids": ids, "logprobs": chosen})
    return load_s, generate_s, rows


def child_generate(args) -> None:
    prompts = json.loads(Path(args.prompts).read_text())
    if args.engine == "transformers":
        load_s, generate_s, rows = generate_with_transformers(args.model, prompts, max_new_tokens=args.max_new_tokens,
                                                  seed=args.seed, threads=args.threads)
    else:
        load_s, generate_s, rows = generate_with_vllm(args.model, prompts, max_new_tokens=args.max_new_tokens, seed=args.seed,
                                          threads=args.threads, eager=args.engine == "vllm-eager",
                                          kv_cache_gb=args.kv_cache_gb)
    Path(args.out).write_text(json.dumps({"load_s": load_s, "generate_s": generate_s, "rows": rows}))


# ---- parent: prompts, children, mismatch, table (runs in the training environment) ---------------------------

def prompt_token_ids(model_dir: Path, n: int, seed: int) -> list[list[int]]:
    """`n` task-family prompts, rendered by the checkpoint's chat template and tokenized as the trainers do."""
    from transformers import AutoTokenizer

    from training.task_families import make_tasks

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tasks = make_tasks(PROMPT_FAMILIES, n=n, seed=seed)
    ids = []
    for task in tasks:
        prompt = task["prompt"]
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        ids.append(list(tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                      return_dict=True)["input_ids"]))
    return ids


def training_logprobs(model_dir: Path, prompts: list[list[int]], rows: list[dict], threads: int) -> list[list[float]]:
    """Per-token log-probabilities of each sampled completion under a transformers forward pass (right-padded)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    result = []
    for start in range(0, len(prompts), 16):
        chunk = list(zip(prompts[start:start + 16], rows[start:start + 16], strict=True))
        sequences = [prompt + row["completion_ids"] for prompt, row in chunk]
        width = max(map(len, sequences))
        input_ids = torch.tensor([seq + [0] * (width - len(seq)) for seq in sequences])
        attention = torch.tensor([[1] * len(seq) + [0] * (width - len(seq)) for seq in sequences])
        with torch.no_grad():
            logps = torch.log_softmax(model(input_ids=input_ids, attention_mask=attention).logits.float(), dim=-1)
        for index, (prompt, row) in enumerate(chunk):
            positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(row["completion_ids"]))
            tokens = torch.tensor(row["completion_ids"])
            result.append(logps[index, positions, tokens].tolist())
    return result


def ensure_checkpoint(folder: Path, size: str) -> Path:
    if not (folder / "config.json").is_file():
        print(f"building bpe-sft {size} (random weights) in {folder} ...", flush=True)
        subprocess.run([sys.executable, "-m", "training", "bpe-sft", "--size", size, "--out", str(folder),
                        "--steps", "0"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return folder


def one_measurement(python: str, model_dir: Path, engine: str, prompts_file: Path, prompts: list[list[int]], *,
                    max_new_tokens: int, seed: int, threads: int, kv_cache_gb: int, folder: Path) -> dict:
    out = folder / f"{model_dir.name}-{engine}-{len(prompts)}.json"
    run = run_measured([python, str(Path(__file__).resolve()), "child", "--engine", engine, "--model", str(model_dir),
                        "--prompts", str(prompts_file), "--max-new-tokens", str(max_new_tokens), "--seed", str(seed),
                        "--threads", str(threads), "--kv-cache-gb", str(kv_cache_gb), "--out", str(out)],
                       env={**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"},
                       keep="both")
    if run.exit_code != 0:
        tail = run.output.strip().splitlines()[-3:]
        return {"engine": engine, "error": f"exit {run.exit_code}: " + " | ".join(tail)}
    # The staged cycle's own figure; imported here, in the training environment, as the child has no need of it.
    from training.grpo.vllm_answers import sampler_mismatch

    result = json.loads(out.read_text())
    rows = result["rows"]
    tokens = sum(len(row["completion_ids"]) for row in rows)
    compared = sampler_mismatch([row["logprobs"] for row in rows], training_logprobs(model_dir, prompts, rows, threads))
    return {"engine": engine, "sequences": len(prompts), "tokens": tokens, "load_s": round(result["load_s"], 2),
            "generate_s": round(result["generate_s"], 2), "tokens_per_s": round(tokens / result["generate_s"], 1),
            "peak_rss_gb": round(run.peak_rss_bytes / 2**30, 2), "wall_s": round(run.wall_s, 1),
            "logprob_mean_abs": compared["mean_abs"], "logprob_max_abs": compared["max_abs"],
            "kl_k3": compared["kl_k3"], "completion_ids_sha": hash_rows(rows)}


def hash_rows(rows: list[dict]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps([row["completion_ids"] for row in rows]).encode()).hexdigest()[:12]


def generation_python(given: str | None) -> str:
    """--generation-python, else the generation environment Pairwise itself finds (PAIRWISE_VLLM_PYTHON or
    .venv-vllm), refused in one line when there is none."""
    from training.errors import PairwiseInputError
    from training.vllm_generation import vllm_python

    if given:
        if not Path(given).is_file():
            sys.exit(f"bench/generation.py: --generation-python {given} is not a file; run scripts/install_vllm.sh")
        return given
    try:
        return str(vllm_python())
    except PairwiseInputError as refused:
        sys.exit(f"bench/generation.py: {refused}")


def format_table(rows: list[dict]) -> str:
    lines = ["| model | engine | sequences | tokens/s | generate s | load s | peak GB | mean abs dlogp | max abs dlogp | KL |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['model']} | {row['engine']} | {row.get('sequences', '')} | failed: {row['error']} |"
                         " | | | | | |")
            continue
        lines.append(f"| {row['model']} | {row['engine']} | {row['sequences']} | {row['tokens_per_s']:.0f} | "
                     f"{row['generate_s']:.1f} | {row['load_s']:.1f} | {row['peak_rss_gb']:.2f} | "
                     f"{row['logprob_mean_abs']:.2e} | {row['logprob_max_abs']:.2e} | {row['kl_k3']:.1e} |")
    return "\n".join(lines)


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", default="bench", choices=("bench", "child"), help=argparse.SUPPRESS)
    parser.add_argument("--models", default="tiny,small,0.5b", help="of tiny, small, 0.5b (default all)")
    parser.add_argument("--sequences", default="64,256", help="numbers of sequences, comma-separated")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"of {', '.join(ENGINES)}")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kv-cache-gb", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generation-python", help="the generation environment's python (default "
                        "PAIRWISE_VLLM_PYTHON, else .venv-vllm/bin/python)")
    parser.add_argument("--small-checkpoint", type=Path, help="a bpe-sft small checkpoint (default: built)")
    parser.add_argument("--large-checkpoint", type=Path, help="a bpe-sft 0.5b checkpoint (default: built)")
    parser.add_argument("--out", default=str(RESULTS))
    # child only
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--prompts", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_arguments(argv)
    if args.mode == "child":
        child_generate(args)
        return
    python = generation_python(args.generation_python)
    models = [name.strip() for name in args.models.split(",") if name.strip()]
    engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    sequences = [int(n) for n in args.sequences.split(",")]
    for name in models:
        if name not in ("tiny", "small", "0.5b"):
            sys.exit(f"bench/generation.py: unknown model {name!r} in --models; choose from tiny, small, 0.5b")
    for name in engines:
        if name not in ENGINES:
            sys.exit(f"bench/generation.py: unknown engine {name!r} in --engines; choose from {', '.join(ENGINES)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-generation-") as temporary:
        folder = Path(temporary)
        given = {"tiny": TINY, "small": args.small_checkpoint, "0.5b": args.large_checkpoint}
        for name in models:
            checkpoint = given[name] or ensure_checkpoint(folder / f"bpe-{name}", name)
            for n in sequences:
                prompts = prompt_token_ids(checkpoint, n, args.seed)
                prompts_file = folder / f"prompts-{name}-{n}.json"
                prompts_file.write_text(json.dumps(prompts))
                for engine in engines:
                    print(f"{name} {engine} {n} sequences ...", flush=True)
                    row = one_measurement(python, Path(checkpoint), engine, prompts_file, prompts,
                                          max_new_tokens=args.max_new_tokens, seed=args.seed, threads=args.threads,
                                          kv_cache_gb=args.kv_cache_gb, folder=folder)
                    rows.append({"model": name, "sequences": n, **row})
    table = format_table(rows)
    print(table)
    settings = {key: getattr(args, key) for key in ("max_new_tokens", "threads", "kv_cache_gb", "seed")}
    shown = write_results(Path(args.out), {"benchmark": "generation", "at": utc_timestamp(), "machine": machine(),
                                           "generation_python": python, "settings": settings, "rows": rows})
    print(f"wrote {shown}")


if __name__ == "__main__":
    main()

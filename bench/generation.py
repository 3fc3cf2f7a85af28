"""transformers' `generate` against vLLM's offline engine on the same model, prompts, sampling settings and seed.

For each model (the shipped `tiny-sft`, a `bpe-sft` small checkpoint, the `bpe-sft` 0.5b configuration) and each
number of sequences, every engine runs as a fresh child process of the generation environment's Python (vLLM
needs its own environment: docs/training.md, "vLLM on a CPU"), on the same token ids:

  transformers    `model.generate` in one batch (left-padded), do_sample, temperature 1, no top-k or top-p;
  vllm-eager      `vllm.LLM(..., enforce_eager=True)`: PyTorch eager kernels, no graph capture;
  vllm-compiled   `vllm.LLM(..., enforce_eager=False)`: vLLM's torch.compile'd graphs (compiled at load).

Both engines sample exactly `--max-new-tokens` tokens a sequence (EOS ignored), so tokens per second count the
same work. Each sequence has its own seed (seed + its index), so a rerun gives the same tokens.

Each vLLM engine runs once per setting of `--vllm-settings` (default one: `process=in:kv=--kv-cache-gb`), a setting
being `:`-separated keys:

  process=in       the engine in the child's own process (VLLM_ENABLE_V1_MULTIPROCESSING=0, vLLM's uniprocess
                   executor): it never reads VLLM_CPU_OMP_THREADS_BIND, and its threads are OMP_NUM_THREADS=--threads;
  process=worker   vLLM's default layout (the generate stage keeps it on a GPU only): an engine-core process and a
                   worker process (the multiprocess executor), which binds its OpenMP threads by `bind`;
  bind=VALUE       VLLM_CPU_OMP_THREADS_BIND (process=worker only): `auto` (vLLM's default: one logical CPU per
                   physical core of the NUMA node, less the cores it reserves for the engine core), `nobind`, or CPU
                   ids such as `0-1` or `0,1`; left out, the variable is unset (vLLM reads `auto`);
  kv=GB            VLLM_CPU_KVCACHE_SPACE, the KV cache's GiB;
  threads=N        OMP_NUM_THREADS and torch's threads for this setting instead of --threads (a bound worker takes
                   as many threads as it has CPUs, whatever this says).

Peak memory is the child's and its descendants' proportional set size summed (a page they share counted once; the
engine core and the worker are processes of their own with process=worker), sampled every 0.2 s in the child, or
the child's own resident high-water mark when larger; the CPUs vLLM bound its threads to are read from its log.

The logprob mismatch is what the staged cycle's update sees: the per-token log-probabilities each engine reports
for the tokens it sampled, against a transformers forward pass over prompt + completion in the training
environment (this Python): mean and max absolute difference per token, and a KL estimate (mean of
exp(d) - 1 - d, d = logp_train - logp_engine; zero when they agree).

Load seconds (building the engine, loading and, when compiled, compiling) are reported apart from generation.

    python bench/generation.py [--models tiny,small,0.5b] [--sequences 64,256] [--max-new-tokens 64]
        [--engines transformers,vllm-eager,vllm-compiled] [--threads 2] [--kv-cache-gb 2] [--seed 0]
        [--vllm-settings SETTING [SETTING ...]] [--compare-sequences N] [--generation-python .venv-vllm/bin/python]
        [--small-checkpoint DIR] [--large-checkpoint DIR] [--out FILE]

Missing bpe-sft checkpoints are built first (`python -m training bpe-sft --steps 0`: random weights; speed does
not depend on what the weights learned). Prints a table and writes bench/results/generation.json.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and training

from bench.common import (
    ROOT,
    TreeMemory,
    load_average,
    machine,
    results_path,
    run_measured,
    utc_timestamp,
    write_results,
)

RESULTS = results_path("generation")
TINY = ROOT / "annotate" / "runs" / "demo_files" / "tiny-sft"
ENGINES = ("transformers", "vllm-eager", "vllm-compiled")
PROCESSES = ("in", "worker")
SETTING_KEYS = ("process", "bind", "kv", "threads")
# vLLM's log line naming the CPUs its worker's OpenMP threads were bound to (vllm/utils/ompmultiprocessing.py)
BOUND = re.compile(r"local_rank=0, core ids=(\[[0-9, ]*\])")
PROMPT_FAMILIES = "speed,arithmetic,multistep,code"


# ---- child: one engine generating once (runs in the generation environment) ----------------------------------

def generate_with_transformers(model_dir: str, prompts: list[list[int]], *, max_new_tokens: int, seed: int,
                               threads: int) -> tuple[float, float, list[dict]]:
    import torch
    from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

    class ChosenLogprobs(LogitsProcessor):
        """Each sampled token's log-probability, one step's distribution held at a time: output_logits would keep
        every step's logits (10 GB for 256 answers of 64 tokens over the 0.5B model's 151,936-token vocabulary).
        Temperature 1 and no top-k or top-p: the scores it sees are the raw logits the token was sampled from."""

        def __init__(self):
            self.previous, self.chosen = None, []

        def __call__(self, input_ids, scores):
            if self.previous is not None:  # the token sampled from the previous step's distribution is the last one
                self.chosen.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
            self.previous = torch.log_softmax(scores.float(), dim=-1)
            return scores

        def finish(self, sequences):
            return torch.stack([*self.chosen, self.previous.gather(-1, sequences[:, -1:]).squeeze(-1)], dim=1)

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
    chosen_logprobs = ChosenLogprobs()
    torch.manual_seed(seed)
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                             pad_token_id=pad, logits_processor=LogitsProcessorList([chosen_logprobs]),
                             return_dict_in_generate=True)
    generate_s = time.perf_counter() - started
    completions = out.sequences[:, width:]
    chosen = chosen_logprobs.finish(out.sequences)
    rows = [{"completion_ids": completions[i].tolist(), "logprobs": chosen[i].tolist()} for i in range(len(prompts))]
    return load_s, generate_s, rows


def generate_with_vllm(model_dir: str, prompts: list[list[int]], *, max_new_tokens: int, seed: int, threads: int,
                       eager: bool) -> tuple[float, float, list[dict]]:
    # The setting's environment (VLLM_CPU_KVCACHE_SPACE, VLLM_ENABLE_V1_MULTIPROCESSING, VLLM_CPU_OMP_THREADS_BIND)
    # is the parent's to set: it is what each row says it ran with.
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


def own_high_water_bytes() -> int:
    """VmHWM: this process's own peak resident memory since its exec (ru_maxrss would start at its parent's)."""
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmHWM:"))) * 1024


def child_generate(args) -> None:
    prompts = json.loads(Path(args.prompts).read_text())
    with TreeMemory(include_self=True, every_s=0.2) as tree:  # vLLM's engine core and worker are its descendants
        if args.engine == "transformers":
            load_s, generate_s, rows = generate_with_transformers(args.model, prompts,
                                                                  max_new_tokens=args.max_new_tokens, seed=args.seed,
                                                                  threads=args.threads)
        else:
            load_s, generate_s, rows = generate_with_vllm(args.model, prompts, max_new_tokens=args.max_new_tokens,
                                                          seed=args.seed, threads=args.threads,
                                                          eager=args.engine == "vllm-eager")
    peak = max(tree.peak, own_high_water_bytes())
    Path(args.out).write_text(json.dumps({"load_s": load_s, "generate_s": generate_s, "peak_bytes": peak,
                                          "rows": rows}))


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


def parse_setting(text: str) -> dict:
    """`process=worker:bind=auto:kv=1` as {"process": "worker", "bind": "auto", "kv": 1}; bad ones exit in one line."""
    setting = {}
    for part in filter(None, text.split(":")):
        key, _, value = part.partition("=")
        if key not in SETTING_KEYS or not value:
            sys.exit(f"bench/generation.py: --vllm-settings {text!r}: {part!r} is not KEY=VALUE with KEY one of "
                     f"{', '.join(SETTING_KEYS)}")
        setting[key] = value
    setting.setdefault("process", "in")
    if setting["process"] not in PROCESSES:
        sys.exit(f"bench/generation.py: --vllm-settings {text!r}: process must be one of {', '.join(PROCESSES)}")
    if "bind" in setting and setting["process"] != "worker":
        sys.exit(f"bench/generation.py: --vllm-settings {text!r}: bind needs process=worker (vLLM binds threads only "
                 "in its worker process)")
    for key in ("kv", "threads"):
        if key in setting:
            if not setting[key].isdigit() or int(setting[key]) < 1:
                sys.exit(f"bench/generation.py: --vllm-settings {text!r}: {key} must be a whole number, 1 or more")
            setting[key] = int(setting[key])
    return setting


def setting_label(engine: str, setting: dict) -> str:
    if engine == "transformers":
        return "-"
    return " ".join(f"{key}={setting[key]}" for key in SETTING_KEYS if key in setting)


def setting_environment(setting: dict) -> dict:
    """The environment variables a vLLM setting is."""
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0" if setting["process"] == "in" else "1",
           "VLLM_CPU_KVCACHE_SPACE": str(setting["kv"])}
    if "bind" in setting:
        env["VLLM_CPU_OMP_THREADS_BIND"] = setting["bind"]
    return env


def one_measurement(python: str, model_dir: Path, engine: str, prompts_file: Path, prompts: list[list[int]], *,
                    max_new_tokens: int, seed: int, threads: int, setting: dict, folder: Path,
                    compare: int | None = None) -> dict:
    out = folder / f"{model_dir.name}-{engine}-{len(prompts)}.json"
    env = {key: value for key, value in os.environ.items()
           if key not in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING")}
    if engine != "transformers":
        threads = setting.get("threads", threads)
        env.update(setting_environment(setting))
    env.update(OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    run = run_measured([python, str(Path(__file__).resolve()), "child", "--engine", engine, "--model", str(model_dir),
                        "--prompts", str(prompts_file), "--max-new-tokens", str(max_new_tokens), "--seed", str(seed),
                        "--threads", str(threads), "--out", str(out)], env=env, keep="both")
    settings = {"settings": setting_label(engine, setting)}
    bound = BOUND.findall(run.output)
    if engine != "transformers":
        settings["bound_cpus"] = bound[-1] if bound else "not bound"
    if run.exit_code != 0:
        tail = run.output.strip().splitlines()[-3:]
        return {"engine": engine, **settings, "error": f"exit {run.exit_code}: " + " | ".join(tail)}
    # The staged cycle's own figure; imported here, in the training environment, as the child has no need of it.
    from training.grpo.vllm_answers import sampler_mismatch

    result = json.loads(out.read_text())
    rows = result["rows"]
    tokens = sum(len(row["completion_ids"]) for row in rows)
    # The training forward over the first `compare` sequences: over all 256 of the 0.5B model it outlasts the run.
    compared = sampler_mismatch([row["logprobs"] for row in rows[:compare]],
                                training_logprobs(model_dir, prompts[:compare], rows[:compare], threads))
    return {"engine": engine, **settings, "sequences": len(prompts), "tokens": tokens,
            "load_s": round(result["load_s"], 2), "generate_s": round(result["generate_s"], 2),
            "tokens_per_s": round(tokens / result["generate_s"], 1), "peak_rss_gb": round(result["peak_bytes"] / 2**30, 2),
            "wait4_maxrss_gb": round(run.peak_rss_bytes / 2**30, 2), "wall_s": round(run.wall_s, 1),
            "logprob_mean_abs": compared["mean_abs"], "logprob_max_abs": compared["max_abs"],
            "kl_k3": compared["kl_k3"], "compared_sequences": len(rows[:compare]), "completion_ids_sha": hash_rows(rows)}


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
    lines = ["| model | engine | settings | bound CPUs | sequences | tokens/s | generate s | load s | peak GB | "
             "mean abs dlogp | max abs dlogp | KL |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        knobs = f"{row.get('settings', '-')} | {row.get('bound_cpus', '-')}"
        if "error" in row:
            lines.append(f"| {row['model']} | {row['engine']} | {knobs} | {row.get('sequences', '')} | "
                         f"failed: {row['error']} | | | | | | |")
            continue
        lines.append(f"| {row['model']} | {row['engine']} | {knobs} | {row['sequences']} | {row['tokens_per_s']:.0f} | "
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
    parser.add_argument("--kv-cache-gb", type=int, default=2, help="vLLM's KV cache GiB where a setting has no kv")
    parser.add_argument("--vllm-settings", nargs="+", default=["process=in"], metavar="SETTING",
                        help="each vLLM engine runs once per setting: `:`-separated process=in|worker, bind=VALUE "
                             "(VLLM_CPU_OMP_THREADS_BIND, process=worker only), kv=GB (default: process=in)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare-sequences", type=int, help="compare log-probabilities with the training forward "
                        "over the first N sequences only (default all)")
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
    settings = [{"kv": args.kv_cache_gb, **parse_setting(text)} for text in args.vllm_settings]
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
                    for setting in settings if engine != "transformers" else settings[:1]:
                        print(f"{name} {engine} {setting_label(engine, setting)} {n} sequences ...", flush=True)
                        row = one_measurement(python, Path(checkpoint), engine, prompts_file, prompts,
                                              max_new_tokens=args.max_new_tokens, seed=args.seed, threads=args.threads,
                                              setting=setting, folder=folder, compare=args.compare_sequences)
                        # the 1, 5 and 15 minute load averages as the row ends: how busy the shared cores were
                        rows.append({"model": name, "sequences": n, **row, "load_average": load_average()})
    table = format_table(rows)
    print(table)
    shared = {key: getattr(args, key) for key in ("max_new_tokens", "threads", "kv_cache_gb", "seed", "vllm_settings",
                                                  "compare_sequences")}
    shown = write_results(Path(args.out), {"benchmark": "generation", "at": utc_timestamp(), "machine": machine(),
                                           "command": " ".join(sys.argv[1:] if argv is None else argv),
                                           "generation_python": python, "settings": shared, "rows": rows})
    print(f"wrote {shown}")


if __name__ == "__main__":
    main()

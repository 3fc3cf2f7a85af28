"""Sampling with vLLM's offline engine in the generation environment (docs/training.md, "vLLM on a CPU").

vLLM pins other transformers than the training environment, so it lives in its own interpreter
(`scripts/install_vllm.sh` makes `.venv-vllm`; `PAIRWISE_VLLM_PYTHON` names another). The training side
tokenizes the prompts and decodes the answers with the checkpoint's own tokenizer; this module hands vLLM token
ids only, in a child process of that interpreter that loads the checkpoint folder afresh, samples each prompt
under its own seed and writes the answers' token ids and per-token log-probabilities back as JSON.

This file imports only the standard library at the top: the child runs it as `python -m training.vllm_generation`
in the generation environment, where the training packages need not be installed.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PYTHON_ENV = "PAIRWISE_VLLM_PYTHON"
# The longest one vLLM child (engine start, weight load and sampling) may run before it is stopped with all it started.
TIMEOUT_ENV = "PAIRWISE_VLLM_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 3600.0
DEFAULT_STEP_TOKENS = 4096  # vLLM's token budget of a step on a CPU (its engine arguments' default)
REPOSITORY = Path(__file__).resolve().parent.parent
DEFAULT_PYTHON = REPOSITORY / ".venv-vllm" / "bin" / "python"
ENGINES = ("transformers", "vllm")
MISSING = ("vLLM generation needs the generation environment: run scripts/install_vllm.sh, or set "
           f"{PYTHON_ENV} to the python of an environment with vllm")
# vLLM's CPU backend reserves this many GiB for its KV cache unless VLLM_CPU_KVCACHE_SPACE says otherwise; Pairwise's
# prompts and answers are short, and the default (4) is refused on a small machine that other processes share.
KV_CACHE_GIB = "1"
# On the CPU backend, the share of the machine's memory the engine may plan with; its default 0.92 is refused when
# other processes hold memory.
MEMORY_SHARE = 0.1


def vllm_python() -> Path:
    """The interpreter of the generation environment: PAIRWISE_VLLM_PYTHON, else .venv-vllm's if it exists; refused
    in one line (PairwiseInputError) when there is none, before anything loads."""
    from training.errors import PairwiseInputError

    named = os.environ.get(PYTHON_ENV, "").strip()
    if named:
        path = Path(named)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise PairwiseInputError(f"{PYTHON_ENV}={named} is not an executable file; {MISSING}")
        return path
    if DEFAULT_PYTHON.is_file():
        return DEFAULT_PYTHON
    raise PairwiseInputError(MISSING)


def vllm_timeout_s() -> float:
    """PAIRWISE_VLLM_TIMEOUT_S, the longest one vLLM child may run (default 3600); refused in one line unless it is a
    number of seconds above 0."""
    from training.errors import PairwiseInputError

    named = os.environ.get(TIMEOUT_ENV, "").strip()
    if not named:
        return DEFAULT_TIMEOUT_S
    try:
        bound = float(named)
    except ValueError:
        bound = math.nan
    if not (math.isfinite(bound) and bound > 0):
        raise PairwiseInputError(f"{TIMEOUT_ENV}={named} is not a number of seconds above 0; set it to one (default "
                                 f"{DEFAULT_TIMEOUT_S:g}) or unset it")
    return bound


def check_generation_environment() -> Path:
    """What vLLM sampling needs on this machine, checked before anything is queued or loaded: the generation
    environment's interpreter (returned) and a valid PAIRWISE_VLLM_TIMEOUT_S."""
    python = vllm_python()
    vllm_timeout_s()
    return python


def check_engine(engine: str, *, where: str) -> None:
    """Refuse an unknown engine, and vllm without the generation environment, in one line."""
    from training.errors import PairwiseInputError

    if engine not in ENGINES:
        raise PairwiseInputError(f"{where}: the generation engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "vllm":
        check_generation_environment()


@dataclass
class Sampling:
    """The sampling settings vLLM gets, under TRL's names; temperature 0 is greedy, top_k 0 leaves it off."""

    temperature: float
    max_tokens: int
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0


@dataclass
class VLLMAnswers:
    """What the engine returned: per prompt, its answers' token ids (EOS included), log-probabilities and finish
    reasons (stop or length); and the child's seconds: interpreter start, imports and engine start with the weights
    loaded (`engine_start_s`), sampling (`generation_s`) and the whole child process (`process_s`)."""

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    finish_reasons: list[str]
    engine_start_s: float
    generation_s: float
    process_s: float
    vllm_version: str


def vllm_generate(model: Path, prompt_ids: list[list[int]], seeds: list[int], sampling: Sampling, *,
                  eos_token_ids: list[int], threads: int | None = None) -> VLLMAnswers:
    """One answer per prompt, prompt i sampled under seeds[i] (vLLM's per-request seed: the same seed gives the same
    answer whatever else is in the batch). The log-probabilities are those of the sampling distribution after the
    temperature (vLLM's processed log-probabilities, as TRL asks of vLLM), before top-k/top-p."""
    from training.errors import PairwiseInputError

    python = check_generation_environment()
    request = {"model": str(model), "prompt_ids": [list(map(int, ids)) for ids in prompt_ids],
               "seeds": [int(seed) for seed in seeds], "sampling": vars(sampling),
               "stop_token_ids": sorted({int(i) for i in eos_token_ids}), "vllm_range": trl_vllm_range()}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="pairwise-vllm-") as folder:
        request_path, answer_path = Path(folder) / "request.json", Path(folder) / "answers.json"
        request_path.write_text(json.dumps(request), encoding="utf-8")
        began = time.perf_counter()
        done = _run_bounded([str(python), "-m", "training.vllm_generation", str(request_path), str(answer_path)],
                            env=env, what=f"vLLM's engine ({python}) on {model}")
        process_s = time.perf_counter() - began
        if done.returncode != 0 or not answer_path.is_file():
            lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
            last = lines[-1].strip() if lines else "no output"
            if "No module named 'vllm'" in (done.stderr or ""):
                raise PairwiseInputError(f"{python} has no vllm: {MISSING}")
            if last.startswith(REFUSED):  # the child's own one-line refusal, before the engine loads anything
                raise PairwiseInputError(last.removeprefix(REFUSED))
            raise RuntimeError(f"vLLM's engine ({python}) failed on {model} (exit {done.returncode}): {last}")
        answers = json.loads(answer_path.read_text(encoding="utf-8"))
    return VLLMAnswers(token_ids=answers["token_ids"], logprobs=answers["logprobs"],
                       finish_reasons=answers["finish_reasons"], engine_start_s=answers["engine_start_s"],
                       generation_s=answers["generation_s"], process_s=round(process_s, 3),
                       vllm_version=answers["vllm_version"])


def _run_bounded(command: list[str], *, env: dict, what: str) -> subprocess.CompletedProcess:
    """Run the child in a session of its own, and stop it with every process it started (on a GPU vLLM's engine core
    is a process of its own) once it has run past PAIRWISE_VLLM_TIMEOUT_S, saying so in one line."""
    import signal

    bound = vllm_timeout_s()
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as child:
        try:
            stdout, stderr = child.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            from training.errors import PairwiseInputError

            raise PairwiseInputError(f"{what} ran past {bound:g} s ({TIMEOUT_ENV}) and was stopped; raise the bound "
                                     "where the command runs, or sample fewer or shorter answers") from None
    return subprocess.CompletedProcess(command, child.returncode, stdout, stderr)


REFUSED = "pairwise refused: "  # how the child's one-line refusals start on its stderr


def trl_vllm_range() -> str | None:
    """The vLLM versions the installed TRL supports (its `vllm` extra, e.g. ">=0.22.0,<=0.31.0"); None without TRL."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        requirements = requires("trl") or []
    except PackageNotFoundError:
        return None
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        if spec.strip().startswith("vllm") and 'extra == "vllm"' in marker:
            return spec.strip().removeprefix("vllm").strip() or None
    return None


def refusal_before_loading(model: str, version: str, supported_range: str | None, supported_architectures) -> str | None:
    """Why vLLM should not load `model`, in one line, or None: a vLLM outside the range the training side's TRL
    supports, a folder without config.json, or an architecture vLLM does not implement."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if supported_range and Version(version) not in SpecifierSet(supported_range):
        return (f"the generation environment has vLLM {version}, outside the {supported_range} that TRL supports; "
                f"install a vLLM in that range there (scripts/install_vllm.sh installs 0.31.0)")
    config_path = Path(model) / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"vLLM cannot load {model}: {config_path.name} is missing or unreadable ({type(error).__name__})"
    architectures = config.get("architectures") or []
    if not any(name in supported_architectures for name in architectures):
        return (f"vLLM {version} cannot load {model}: its architecture {', '.join(architectures) or '(none named)'} "
                f"(config.json architectures) is not one vLLM implements; sample it with transformers instead")
    return None


def whole_prompt_limits(prompt_ids: list[list[int]]) -> dict:
    """Engine limits under which every prompt is read in one step: a prompt split over steps (chunked prefill)
    rewinds its seeded sampler, which vLLM's CPU backend cannot do ("CPU Generator does not use offset"), and the
    default token budget of a step there is 4,096. All the batch's prompts are read at once, as transformers'
    generate does with a padded batch."""
    return {"max_num_seqs": max(len(prompt_ids), 1),
            "max_num_batched_tokens": max(DEFAULT_STEP_TOKENS, sum(map(len, prompt_ids)) + len(prompt_ids))}


def keep_cpu_engine_in_process() -> None:
    """On a CPU, vLLM's engine runs in this process (this child is already the engine's own process). vLLM's default
    worker process binds one OpenMP thread per core and leaves a core to the engine, so on two cores it sampled on one
    thread, and it added about 10 s to every start (docs/benchmarks/generation.md, "What each changed"). A
    GPU keeps vLLM's default layout; VLLM_ENABLE_V1_MULTIPROCESSING set by the caller is kept either way."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _answer(request_path: str, answer_path: str) -> None:
    """The child: load the checkpoint in vLLM's offline engine, sample every prompt, write the answers."""
    began = time.perf_counter()
    keep_cpu_engine_in_process()
    import vllm
    from vllm import LLM, ModelRegistry, SamplingParams
    from vllm.inputs import TokensPrompt

    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    refused = refusal_before_loading(request["model"], vllm.__version__, request.get("vllm_range"),
                                     ModelRegistry.get_supported_archs())
    if refused:
        print(REFUSED + refused, file=sys.stderr, flush=True)
        sys.exit(2)
    sampling = request["sampling"]
    # Token ids in, token ids out: the checkpoint's tokenizer stays on the training side, whose transformers may
    # read it differently. float32, as the policy trains; processed log-probabilities (after the temperature), as
    # TRL's importance-sampling correction expects.
    engine = LLM(model=request["model"], dtype="float32", gpu_memory_utilization=MEMORY_SHARE, skip_tokenizer_init=True,
                 logprobs_mode="processed_logprobs", seed=0, enable_prefix_caching=False,
                 enforce_eager=True, **whole_prompt_limits(request["prompt_ids"]))
    started = time.perf_counter()
    greedy = sampling["temperature"] == 0
    params = [SamplingParams(n=1, temperature=sampling["temperature"], top_p=1.0 if greedy else sampling["top_p"],
                             top_k=-1 if greedy or not sampling["top_k"] else sampling["top_k"],
                             min_p=0.0 if greedy else sampling["min_p"],
                             repetition_penalty=sampling["repetition_penalty"], max_tokens=sampling["max_tokens"],
                             seed=seed, logprobs=0, stop_token_ids=request["stop_token_ids"], detokenize=False)
              for seed in request["seeds"]]
    outputs = engine.generate([TokensPrompt(prompt_token_ids=ids) for ids in request["prompt_ids"]], params,
                              use_tqdm=False)
    generated = time.perf_counter()
    token_ids, logprobs, reasons = [], [], []
    for output in outputs:
        answer = output.outputs[0]
        ids = list(answer.token_ids)
        token_ids.append(ids)
        logprobs.append([float(position[token].logprob) for token, position in zip(ids, answer.logprobs, strict=True)])
        reasons.append(answer.finish_reason)
    result = {"token_ids": token_ids, "logprobs": logprobs, "finish_reasons": reasons,
              "engine_start_s": round(started - began, 3), "generation_s": round(generated - started, 3),
              "vllm_version": vllm.__version__}
    partial = Path(answer_path).with_suffix(".partial")
    partial.write_text(json.dumps(result), encoding="utf-8")
    partial.rename(answer_path)


if __name__ == "__main__":  # vLLM's engine starts worker processes, which import this module again
    _answer(sys.argv[1], sys.argv[2])

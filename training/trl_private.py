"""Every private part of TRL (and of the libraries under it) that training/ relies on, in one place, and the check
that the installed versions still have each one.

TRL changes its private methods between releases without notice, so the trainers name the TRL range they were written
for (pyproject.toml says the same) and, before a run starts, check every touch point below on the installed TRL:
another TRL, or one that has moved a touch point, is refused in one line that names it.
tests/training/test_trl_private.py fails when training/ touches a private attribute this registry does not list.
"""

import functools
import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from training.errors import PairwiseInputError

SUPPORTED_TRL = (Version("1.16"), Version("1.17"))

OVERRIDE, CALL, READ, WRITE, PATCH = "overrides", "calls", "reads", "writes", "patches"


@dataclass(frozen=True)
class TouchPoint:
    """One attribute of another library's class (or module) that our code overrides, calls, reads, writes or patches."""

    owner: str                   # where the attribute lives, importable: "trl.GRPOTrainer"
    name: str
    uses: tuple[str, ...]        # OVERRIDE, CALL, READ, WRITE, PATCH
    where: tuple[str, ...]       # "module:Class.function" of each use
    why: str                     # why no public API serves
    parameters: tuple[str, ...] = ()  # the parameters our calls pass by name or position, checked on the signature


TOUCH_POINTS = (
    TouchPoint("trl.GRPOTrainer", "_generate_single_turn", (CALL,),
               ("training.grpo.trainer:trl_answers",),
               "TRL's own sampler (transformers' generate, or TRL's vLLM engine) behind the public rollout_func seam, "
               "through which every answer reaches TRL: rollout_func replaces TRL's sampling, and no public method "
               "samples the way TRL's generation does",
               parameters=("prompt_ids", "images", "multimodal_fields", "num_generations")),
    TouchPoint("trl.GRPOTrainer", "_tokenize_prompts", (CALL,),
               ("training.grpo.trainer:trl_answers", "training.grpo.vllm_answers:sample_with_vllm"),
               "the prompt token ids TRL's own generation samples from (chat template, tools): TRL's sampler behind "
               "rollout_func, and vLLM in the generate stage, answer the same tokens",
               parameters=("prompts",)),
    TouchPoint("trl.GRPOTrainer", "_generate_and_score_completions", (OVERRIDE, CALL),
               ("training.grpo.trainer:PairwiseGRPOTrainer._generate_and_score_completions",
                "training.grpo.trainer:PairwiseGRPOTrainer._scored_round"),
               "one generation batch, sampled, scored and with its advantages, before TRL splits it into "
               "micro-batches: the only point where rollout rows can be written and dynamic sampling can refill groups",
               parameters=("inputs",)),
    TouchPoint("trl.GRPOTrainer", "_get_per_token_logps_and_entropies", (OVERRIDE, CALL),
               ("training.grpo.trainer:PairwiseGRPOTrainer._get_per_token_logps_and_entropies",
                "training.grpo.trainer:PairwiseGRPOTrainer.policy_logprobs"),
               "the policy's forward pass inside compute_loss, whose log-probabilities the records keep at no extra "
               "cost; and TRL's own forward (temperature, padding) for answers outside the update",
               parameters=("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size")),
    TouchPoint("trl.GRPOTrainer", "_get_train_sampler", (OVERRIDE, CALL),
               ("training.grpo.stages:StageTrainer._get_train_sampler",),
               "a stage process starts at step N; transformers skips only the current epoch's batches, so the sampler "
               "is advanced to step N's epoch, which no argument of the trainer sets",
               parameters=("dataset",)),
    TouchPoint("trl.GRPOTrainer", "use_vllm", (OVERRIDE,),
               ("training.grpo.stages:StageTrainer.use_vllm",),
               "a property in place of TRL's attribute: TRL applies its importance-sampling correction only to vLLM's "
               "answers, and a stage update switches it on, once the round's answers are in hand, for answers an "
               "older version recorded"),
    TouchPoint("trl.generation.vllm_generation.VLLMGeneration", "sync_weights", (PATCH,),
               ("training.grpo.trainer:PairwiseGRPOTrainer._time_weight_sync",),
               "the ledger's switching time: TRL calls it from inside _generate, with no hook around it"),
    TouchPoint("trl.trainer.utils", "pad", (CALL,),
               ("training.grpo.stages:_generation_logprobs",),
               "pads a recorded batch exactly as TRL pads a generated one; not exported from trl",
               parameters=("tensors", "padding_value", "padding_side")),
    TouchPoint("trl.TrlParser", "_actions", (READ,),
               ("training.config:config_from_mapping",),
               "the config keys TRL's parser knows, to refuse an unknown key in one line; argparse lists them nowhere "
               "public"),
)


class UnsupportedTRL(PairwiseInputError):
    """The installed TRL is outside the range the trainers were written for, or lacks a part they rely on."""


def _range() -> str:
    low, high = SUPPORTED_TRL
    return f"trl>={low},<{high}"


def check_trl_version(installed: str) -> None:
    low, high = SUPPORTED_TRL
    if not low <= Version(installed) < high:
        raise UnsupportedTRL(f"TRL {installed} is installed, but Pairwise's GRPO trainer overrides private methods of "
                             f"TRL's GRPOTrainer written for TRL >={low},<{high}; install a TRL in that range "
                             f"(pip install '{_range()}')")


def _resolve(owner: str):
    """The class or module `owner` names: the longest importable module prefix, then attributes."""
    parts = owner.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            value = getattr(value, part)
        return value
    raise ImportError(owner)


def assigned_on_instances(cls: type, name: str) -> bool:
    """Whether the module of a class in `cls`'s MRO sets `self.<name>` (an instance attribute no class attribute
    shows). The module's text, not the class's: inspect.getsource parses a module per class, seconds for TRL's."""
    pattern = re.compile(rf"\bself\.{re.escape(name)}\s*(?::[^=\n]+)?=(?!=)")
    return any(pattern.search(_module_text(base.__module__)) for base in cls.__mro__ if base is not object)


@functools.cache
def _module_text(module: str) -> str:
    path = getattr(sys.modules.get(module), "__file__", None)
    return Path(path).read_text() if path and path.endswith(".py") else ""


def defined_on(owner, name: str) -> bool:
    """Whether `owner` (a class or module) has `name`: as an attribute, or set on its instances."""
    return hasattr(owner, name) or (inspect.isclass(owner) and assigned_on_instances(owner, name))


def missing_part(point: TouchPoint) -> str | None:
    """What the installed libraries lack of `point`, or None."""
    try:
        owner = _resolve(point.owner)
    except (ImportError, AttributeError):
        return f"{point.owner} cannot be imported"
    if not defined_on(owner, point.name):
        return f"{point.owner}.{point.name} does not exist"
    if point.parameters:
        accepted = inspect.signature(getattr(owner, point.name)).parameters
        lacking = [name for name in point.parameters if name not in accepted]
        if lacking:
            return f"{point.owner}.{point.name} no longer takes {', '.join(lacking)}"
    return None


def _versions(owner: str) -> str:
    import trl

    library = owner.split(".")[0]
    if library == "trl":
        return f"TRL {trl.__version__}"
    version = getattr(sys.modules.get(library), "__version__", None) or sys.version.split()[0]
    return f"TRL {trl.__version__} with {library} {version}"


def check_touch_points(points: tuple[TouchPoint, ...] = TOUCH_POINTS) -> None:
    """Refuse, in one line, installed libraries that lack a touch point our code relies on."""
    for point in points:
        missing = missing_part(point)
        if missing is not None:
            raise UnsupportedTRL(f"{missing} in the installed {_versions(point.owner)}, but {point.where[0]} "
                                 f"{point.uses[0]} it (training/trl_private.py); install a TRL in the supported "
                                 f"range (pip install '{_range()}')")


def check_installed_trl() -> None:
    """The installed TRL is in the supported range and has every touch point."""
    import trl

    check_trl_version(trl.__version__)
    check_touch_points()

"""Config files of the trainers: YAML read into subclasses of TRL's own config classes with TRL's own parser.

A recipe's config class subclasses TRL's `DPOConfig` or `GRPOConfig` and adds only Pairwise's keys
(`base_checkpoint`, `snapshot` or `tasks`, ...), so every TRL and transformers option works under its
own name without being copied here. Each key of the YAML file is read by TRL's `TrlParser` (an
`HfArgumentParser`) on its own, as `--key value` on TRL's own command line would be, so every value is
type-checked by TRL's parser. (TrlParser's `--config` reading sets YAML values as argparse defaults, which
argparse does not check, so a `max_steps: 2.5` would slip through; that is why the values are parsed as
arguments instead.) A value is data, never a flag: each key is parsed alone and only that key is taken
from the result, and a list item that argparse would read as an option (`--output_dir=...`) is refused, so
no value can set another key.

Every mistake is one line naming the key. An unknown key is an error with the nearest known key
suggested, because a silently ignored typo (`learnig_rate`) trains with the default and wastes a run.
"""

import dataclasses
import difflib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from training.errors import PairwiseInputError

ConfigT = TypeVar("ConfigT")

# Old Pairwise key -> what to write instead (shown with the unknown-key error).
RENAMED_KEYS = {"dtype": "model_init_kwargs: {dtype: bfloat16}"}


# Old transformers name -> the name transformers 5 reads (the old one is a deprecated alias there).
_CHECKPOINTING_RENAMES = (("gradient_checkpointing", "activation_checkpointing"),
                          ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"))


class ConfigError(PairwiseInputError):
    """A config file that cannot be used as written."""


# --- what a config may hold at any depth -------------------------------------------------------------------
#
# A config is stored with its run (run.json, the app's run record) and its nested mappings reach loaders
# (model_init_kwargs goes to from_pretrained), so the same rules hold at every depth: the top level, every
# dict-valued key TRL reads (its `_VALID_DICT_FIELDS`: model_init_kwargs, generation_kwargs, deepspeed, ...),
# the mappings inside them, and JSON text of a mapping, which TRL parses into one.

# A word of the key's name marks a credential (`hub_token`, `wandb_api_key`, `db_password`); a tokenizer's special
# tokens (`pad_token`, `eos_token_id`) are text, not secrets.
CREDENTIAL_KEY = re.compile(r"(?:^|[_\-.])(?:token|secret|password|passwd|api_?key|apikey|access_?key|private_?key|"
                            r"credentials?)(?:$|[_\-.])", re.IGNORECASE)
SPECIAL_TOKEN_KEY = re.compile(r"^(?:pad|eos|bos|unk|sep|cls|mask|decoder_start)_token(?:_id)?$", re.IGNORECASE)
# The keys of each mapping that reaches from_pretrained: how the weights are held in memory, nothing that fetches,
# authenticates or runs code (trust_remote_code, token, revision, cache_dir, proxies, ... are refused).
LOADER_KEYS = dict.fromkeys(("model_init_kwargs", "ref_model_init_kwargs"),
                            ("dtype", "attn_implementation", "device_map", "low_cpu_mem_usage", "use_cache"))


def is_credential_key(key) -> bool:
    return bool(CREDENTIAL_KEY.search(str(key))) and not SPECIAL_TOKEN_KEY.match(str(key))


def mapping_in_text(value, where: str = ""):
    """The mapping a JSON text holds (the value of key `where`), as TRL reads a dict-valued key given as text; else None. Read by Pairwise's
    one bounded JSON reader: text nested past its bound is refused here in one line (TRL's reader would recurse
    until Python gives up)."""
    from training.json_input import JsonRefused, read_json

    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            parsed = read_json(value)
        except JsonRefused as refused:
            raise ConfigError(f"{where or 'a setting'} is JSON text that {refused.reason}; {refused.fix}") from None
        except ValueError:
            return None  # not JSON: TRL's own parsing refuses it in one line
        return parsed if isinstance(parsed, dict) else None
    return None


def nested_items(value, where: str = ""):
    """Every (dotted path of the mapping, key, value) inside a config value at any depth: mappings, lists, and
    mappings written as JSON text. The top level's path is ""."""
    mapping = value if isinstance(value, dict) else mapping_in_text(value, where)
    if mapping is not None:
        for key, item in mapping.items():
            yield where, str(key), item
            yield from nested_items(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for number, item in enumerate(value):
            yield from nested_items(item, f"{where}[{number}]")


def check_nested_settings(data: dict, source: str) -> None:
    """The rules every config holds at every depth, before anything is parsed or stored: no credential (refused,
    never stored and hidden later), no code shipped with a checkpoint, and only LOADER_KEYS in a loader's mapping."""
    for where, key, value in nested_items(data):
        name = f"{where}.{key}" if where else key
        if is_credential_key(key) and value not in (None, "", False):
            raise ConfigError(f"{source}: {name} is a credential, and a config is stored with its run; remove it (a "
                              "run reads local checkpoints only; a Hub token belongs in the environment, HF_TOKEN)")
        if key == "trust_remote_code" and value not in (None, False):
            raise ConfigError(f"{source}: {name} is refused: it runs code shipped with a checkpoint; remove it (runs "
                              "load architectures transformers itself knows)")
        if where in LOADER_KEYS and key not in LOADER_KEYS[where]:
            raise ConfigError(f"{source}: {name} is not handed to the model loader; {where} takes only "
                              f"{', '.join(LOADER_KEYS[where])}")


# Upper bounds of the knobs that set how long a run lasts or how much one step holds: past one, a run would hang or
# exhaust memory rather than train (max_steps: 10^12 is some 30,000 years at a step a second). Key -> (the
# environment variable that raises its bound where the training command runs, the bound without it).
RUN_BOUNDS = {
    "max_steps": ("PAIRWISE_MAX_TRAIN_STEPS", 1_000_000),
    "num_train_epochs": ("PAIRWISE_MAX_TRAIN_EPOCHS", 1_000),
    "per_device_train_batch_size": ("PAIRWISE_MAX_BATCH_SIZE", 4_096),
    "per_device_eval_batch_size": ("PAIRWISE_MAX_BATCH_SIZE", 4_096),
    "reward_model_batch_size": ("PAIRWISE_MAX_BATCH_SIZE", 4_096),
    "gradient_accumulation_steps": ("PAIRWISE_MAX_GRADIENT_ACCUMULATION_STEPS", 1_024),
    "steps_per_generation": ("PAIRWISE_MAX_GRADIENT_ACCUMULATION_STEPS", 1_024),
    "num_generations": ("PAIRWISE_MAX_NUM_GENERATIONS", 1_024),
    "difficulty_samples": ("PAIRWISE_MAX_NUM_GENERATIONS", 1_024),
    "num_iterations": ("PAIRWISE_MAX_NUM_ITERATIONS", 64),
    "dynamic_sampling_max_rounds": ("PAIRWISE_MAX_NUM_ITERATIONS", 64),
    "max_length": ("PAIRWISE_MAX_SEQUENCE_LENGTH", 131_072),
    "max_prompt_length": ("PAIRWISE_MAX_SEQUENCE_LENGTH", 131_072),
    "max_completion_length": ("PAIRWISE_MAX_SEQUENCE_LENGTH", 131_072),
}


def run_bound(key: str) -> int:
    """The bound of RUN_BOUNDS[key] in force: its environment variable's, else the default."""
    variable, default = RUN_BOUNDS[key]
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise ConfigError(f"environment variable {variable} is {text[:40]!r}, not a whole number of 1 or more; set it "
                          f"to the bound you want for {key} (default {default}) or unset it")
    return int(text)


def check_run_bounds(values: dict[str, Any], source: str) -> None:
    """Refuse a value past its RUN_BOUNDS bound, in one line naming the key, the bound and how to raise it."""
    for key in RUN_BOUNDS:
        value = values.get(key)
        if value is None or isinstance(value, bool):
            continue
        bound = run_bound(key)
        if not value <= bound:  # NaN is past every bound as well
            variable = RUN_BOUNDS[key][0]
            raise key_error(source, key, f"is {value}, past the bound of {bound}; lower it, or raise the bound by "
                                         f"setting {variable} where the training command runs")


# Set (to 1) by the app for the check of a run it hands to another machine (backend slurm): the machine checking the
# config is not the one the run starts on, whose CPUs or GPUs bound `processes` there (the app checks the partition's
# nodes itself; the job's own start checks its node again).
PROCESSES_BOUNDED_ELSEWHERE_ENV = "PAIRWISE_PROCESSES_BOUNDED_ELSEWHERE"


def available_processes(use_cpu: bool) -> tuple[int | None, str]:
    """How many data-parallel processes this machine can give a run, and of what: its CPU cores for a CPU run, its
    GPUs otherwise (None where it sees no GPU: a GPU run checked on a machine without one, such as the app's host
    for a Slurm run, is bounded where it runs; None as well when the check is for a run bound for another machine,
    PROCESSES_BOUNDED_ELSEWHERE_ENV)."""
    if os.environ.get(PROCESSES_BOUNDED_ELSEWHERE_ENV) == "1":
        return None, ""
    if use_cpu:
        return os.cpu_count() or 1, "CPU cores"
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return count or None, "GPUs"


def check_processes(values: dict[str, Any], source: str) -> None:
    processes = values["processes"]
    if processes < 1:
        raise key_error(source, "processes", f"must be at least 1, got {processes}")
    available, of_what = available_processes(bool(values["use_cpu"]))
    if available is not None and processes > available:
        raise key_error(source, "processes", f"is {processes} but this machine has {available} {of_what}; "
                                             f"set it to at most {available}")


def key_error(source: str, key: str, why: str) -> ConfigError:
    """The one-line error for a value that parses but cannot be used: "FILE: key why"."""
    return ConfigError(f"{source}: {key} {why}")


@dataclass
class PairwiseConfigMixin:
    """Pairwise's keys shared by every trainer config, mixed in before a TRL config class.

    Class attributes: `pairwise_keys`, the keys Pairwise adds or whose default it changes (listed first by
    --help-config); `required_keys`, keys a config file must set (declared with default None, because a
    dataclass field without a default cannot follow TRL's fields). `check_values(values, source)` sees
    every parsed value before TRL builds the config (so its own messages come first) and raises
    ConfigError for values that parse but cannot be used.
    """

    pairwise_keys: ClassVar[tuple[str, ...]] = (
        "output_dir", "torch_threads", "use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
        "bf16", "gradient_checkpointing", "report_to", "processes")
    required_keys: ClassVar[tuple[str, ...]] = ("output_dir",)

    output_dir: str | None = field(default=None, metadata={
        "help": "Run folder to create (run.json, metrics.jsonl, checkpoint/ ...); the trainer's resumable "
                "checkpoints go to its trainer_checkpoints/."})
    torch_threads: int | None = field(default=None, metadata={
        "help": "CPU threads for torch; null leaves torch's default."})
    # TRL keeps LoRA settings in its ModelConfig; the same names are used here.
    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"], metadata={
        "help": "Modules LoRA adapts; 'all-linear' for every linear layer but the LM head."})
    # TRL defaults that Pairwise changes: full precision and no recomputation unless asked (they suit CPUs and
    # small models; a GPU config turns them on), and TensorBoard files inside the run folder.
    bf16: bool | None = field(default=False, metadata={
        "help": "bfloat16 mixed precision (GPU). Pairwise default false (TRL's: true unless fp16)."})
    gradient_checkpointing: bool | None = field(default=None, metadata={
        "help": "Recompute activations to save memory (alias of activation_checkpointing). Pairwise default "
                "off (TRL's: on).", "nargs": "?", "const": True})
    report_to: None | str | list[str] = field(default_factory=lambda: ["tensorboard"], metadata={
        "help": "Metric sinks besides metrics.jsonl: tensorboard (written to the run folder's tensorboard/), "
                "none, or any transformers integration."})
    processes: int = field(default=1, metadata={
        "help": "Data-parallel processes on this machine, each with per_device_train_batch_size rows a step; "
                "above 1 the app starts the run with accelerate launch (docs/deploy.md). At most the CPU cores "
                "(use_cpu) or the GPUs here."})

    def __post_init__(self):
        # transformers 5 renamed gradient_checkpointing(_kwargs) to activation_checkpointing(_kwargs) and warns on
        # every config built with the old name; Pairwise's documented key stays and is handed on under the new one,
        # so no answer of the command starts with that warning. Older transformers have only the old name.
        for old, new in _CHECKPOINTING_RENAMES:
            if hasattr(self, new) and getattr(self, new) is None and getattr(self, old) is not None:
                setattr(self, new, getattr(self, old))
                setattr(self, old, None)
        if not self.use_cpu and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            import torch

            # Launched as several processes on a machine without an accelerator, transformers makes each a lone
            # CPU run (N copies of one run, all writing one folder); on the CPU they join over gloo instead.
            self.use_cpu = not torch.accelerator.is_available()
        super().__post_init__()

    @classmethod
    def check_values(cls, values: dict[str, Any], source: str) -> None:
        """Value checks beyond types; raise key_error(source, key, why)."""
        for old, new in _CHECKPOINTING_RENAMES:
            # transformers would take the new name and drop the other without a word.
            if values.get(new) is not None and values[old] is not None and values[new] != values[old]:
                raise ConfigError(f"{source}: {old} ({json.dumps(values[old])}) and {new} "
                                  f"({json.dumps(values[new])}) disagree; set only {old}")
        if values["bf16"] and values["fp16"]:
            raise ConfigError(f"{source}: bf16 and fp16 cannot both be true; choose one precision")
        if values["lora_r"] < 1:
            raise key_error(source, "lora_r", f"must be at least 1, got {values['lora_r']}")
        if values["torch_threads"] is not None and values["torch_threads"] < 1:
            raise key_error(source, "torch_threads", f"must be at least 1 or null, got {values['torch_threads']}")
        check_processes(values, source)
        # Every trainer's length and step size; TRL would accept these and train nothing or diverge.
        if not values["learning_rate"] > 0:
            raise key_error(source, "learning_rate", f"must be above 0, got {values['learning_rate']}")
        if values["max_steps"] == 0 or values["max_steps"] < -1:
            raise key_error(source, "max_steps",
                            f"must be -1 (use num_train_epochs) or at least 1, got {values['max_steps']}")
        if values["max_steps"] == -1 and not values["num_train_epochs"] > 0:
            raise key_error(source, "num_train_epochs",
                            f"must be above 0 when max_steps is -1, got {values['num_train_epochs']}")
        check_run_bounds(values, source)


def _build_parser(config_cls: type):
    from trl import TrlParser

    class _RaisingParser(TrlParser):
        """argparse exits the process on a bad value; here the message becomes a ConfigError instead."""

        def error(self, message: str):
            raise _ArgparseError(message)

    return _RaisingParser(dataclass_types=[config_cls], add_help=False, allow_abbrev=False)


class _ArgparseError(Exception):
    pass


_INVALID_VALUE = re.compile(r"argument --([\w-]+)(?:/[^:]*)?: invalid (\w+) value: (.*)")
_INVALID_CHOICE = re.compile(r"argument --([\w-]+)(?:/[^:]*)?: invalid choice: (.*?) \(choose from (.*)\)")
_NOT_BOOL = re.compile(r"argument --([\w-]+)(?:/[^:]*)?: Truthy value expected: got (.*) but expected")
_KIND_NAMES = {"int": "a whole number", "float": "a number"}


def _explain(message: str, source: str) -> str:
    """argparse's message in the words of a config file: `key must be ..., got value`."""
    if match := _INVALID_VALUE.match(message):
        key, kind, value = match.groups()
        return f"{source}: {key.replace('-', '_')} must be {_KIND_NAMES.get(kind, kind)}, got {value}"
    if match := _INVALID_CHOICE.match(message):
        key, value, choices = match.groups()
        choices = choices.replace("'", "")
        return f"{source}: {key.replace('-', '_')} must be one of {choices}, got {value}"
    if match := _NOT_BOOL.match(message):
        key, value = match.groups()
        return f"{source}: {key.replace('-', '_')} must be true or false, got {value!r}"
    return f"{source}: {message}"


def _as_argument_text(value: Any, key: str, source: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)  # TRL reads its dict-valued keys (model_init_kwargs, ...) from JSON text
    if isinstance(value, int | float | str):
        return str(value)
    raise ConfigError(f"{source}: {key} must be a single value or a list, got {value!r}")


def _not_a_value(source: str, key: str, item: str) -> ConfigError:
    return ConfigError(f"{source}: {key} item {item!r} is not a value of {key}; a list item cannot be an option "
                       "(set each key on its own line)")


def _parse(parser, argv: list[str], source: str, key: str = ""):
    """One key's arguments through TRL's parser; the namespace it gives (every other key at its default)."""
    try:
        namespace, remaining = parser.parse_known_args(argv)
    except _ArgparseError as error:
        raise ConfigError(_explain(str(error), source)) from None
    if remaining:
        raise _not_a_value(source, key, remaining[0])
    return namespace


def config_from_mapping(data: dict, config_cls: type[ConfigT], *, source: str) -> ConfigT:
    """Fill `config_cls` (a TRL config subclass with PairwiseConfigMixin) from a mapping, or raise ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a mapping of key: value lines")
    parser = _build_parser(config_cls)
    actions = {action.dest: action for action in parser._actions if action.dest != "help"}
    for key in data:
        if key not in actions:
            if key in RENAMED_KEYS:
                raise ConfigError(f"{source}: unknown key '{key}' (write {RENAMED_KEYS[key]} instead)")
            close = difflib.get_close_matches(str(key), list(actions), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{source}: unknown key '{key}'{hint}; see the keys with --help-config")
    check_nested_settings(data, source)
    for key in config_cls.required_keys:
        if data.get(key) is None:
            help_text = actions[key].help or ""
            raise ConfigError(f"{source}: required key '{key}' is missing ({help_text})")

    names = {f.name for f in dataclasses.fields(config_cls) if f.init}
    values = {name: value for name, value in vars(_parse(parser, [], source)).items() if name in names}
    for key, value in data.items():
        action = actions[key]
        if value is None:
            values[key] = None
        elif isinstance(value, list):
            if action.nargs == "+" and value:
                items = [_as_argument_text(item, key, source) for item in value]
                parsed = getattr(_parse(parser, [f"--{key}", *items], source, key), key)
                if len(parsed) != len(items):  # an item argparse read as an option: `--output_dir=...`
                    raise _not_a_value(source, key, next((i for i in items if i.startswith("-")), items[len(parsed)]))
                values[key] = parsed
            elif all(isinstance(item, str) for item in value):
                values[key] = list(value)  # e.g. report_to, typed `str | list[str]`: taken as written
            else:
                raise ConfigError(f"{source}: {key} takes a single value, got the list {value!r}")
        else:
            # `--key=text` is one argument whatever the text holds, so the value cannot name another key.
            values[key] = getattr(_parse(parser, [f"--{key}={_as_argument_text(value, key, source)}"], source, key),
                                  key)
    config_cls.check_values(values, source)
    try:
        config = config_cls(**values)
    except PairwiseInputError:
        raise
    except ValueError as error:
        # TRL and transformers check option combinations when the config is built; those are config mistakes.
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(f"{source}: {first_line}") from None
    return config


def yaml_config(text: str, source: str):
    """A config's YAML text as data (None when empty), or ConfigError with one clear line.

    Aliases (`*name`, and `<<: *name` merges) are refused: each one repeats a whole value, so a few hundred
    bytes of nested aliases expand to megabytes, and a config has no use for them."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise ConfigError(f"{source}: line {event.start_mark.line + 1} repeats a value with the YAML alias "
                                  f"*{event.anchor}; write the value out instead")
            return super().compose_node(parent, index)

    try:
        return yaml.load(text, Loader=NoAliasLoader)  # a SafeLoader: plain data only
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(f"{source}: {problem}{where}; fix the YAML syntax") from None


def load_config(path: str | Path, config_cls: type[ConfigT]) -> ConfigT:
    """Read a YAML file into `config_cls`, or raise ConfigError with one clear line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass the path of a YAML file with --config")
    data = yaml_config(path.read_text(encoding="utf-8"), str(path))
    if data is None:
        data = {}
    return config_from_mapping(data, config_cls, source=str(path))


def config_record(config) -> dict:
    """The resolved config as JSON-ready values, for run.json (TrainingArguments.to_dict hides secrets)."""
    return json.loads(json.dumps(config.to_dict(), default=str))


def _default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return repr(field.default_factory())
    return "(required)"


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def config_help(config_cls: type) -> str:
    """Every key with its default and help, for --help-config: Pairwise's keys first, then TRL's."""
    fields = {f.name: f for f in dataclasses.fields(config_cls) if f.init}
    ours = [name for name in config_cls.pairwise_keys if name in fields]
    lines = ["Pairwise keys:"]
    for name in ours:
        field = fields[name]
        default = "(required)" if name in config_cls.required_keys else _default_text(field)
        choices = field.metadata.get("choices")
        extra = f" One of: {', '.join(map(str, choices))}." if choices else ""
        lines.append(f"  {name} = {default}\n      {field.metadata.get('help', '')}{extra}")
    trl_name = next(c.__name__ for c in config_cls.__mro__[1:] if c.__module__.startswith("trl."))
    lines.append(f"\nTRL {trl_name} and transformers TrainingArguments keys (same names and meaning as in TRL):")
    for name in sorted(set(fields) - set(ours)):
        if name.startswith("_"):
            continue
        help_text = _first_sentence(fields[name].metadata.get("help", ""))
        lines.append(f"  {name} = {_default_text(fields[name])}\n      {help_text}")
    return "\n".join(lines)

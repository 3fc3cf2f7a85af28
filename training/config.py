"""YAML config files read into dataclasses, with every mistake reported as one line that names the key.

A recipe declares its config as a dataclass whose fields carry `help` metadata (and `choices` where the
value is one of a few words); `load_config(path, ConfigClass)` returns a filled, type-checked instance.
An unknown key is an error, with the nearest known key suggested, because a silently ignored typo
(`learnig_rate`) trains with the default and wastes a run.
"""

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from training.errors import PairwiseInputError

ConfigT = TypeVar("ConfigT")


class ConfigError(PairwiseInputError):
    """A config file that cannot be used as written."""


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """`value` checked against `annotation` (bool, int, float, str, list[...], X | None, unions)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, where)
            except ConfigError:
                continue
        wanted = " or ".join(_type_name(o) for o in options if o is not type(None))
        raise ConfigError(f"{where} must be {wanted}, got {value!r}")
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            value = [value]  # a single value where a list is expected: `loss_type: sigmoid`
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be a whole number, got {value!r}")
    if annotation is float:
        # YAML reads 5e-6 (no dot) as a string, so numeric strings are accepted for floats.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where} must be text, got {value!r}")
    raise TypeError(f"config field type {annotation!r} is not supported")  # a bug in a config class


def config_from_mapping(data: dict, config_cls: type[ConfigT], *, source: str) -> ConfigT:
    """Fill `config_cls` from a plain mapping; `source` names the file in error messages."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a mapping of key: value lines")
    fields = {f.name: f for f in dataclasses.fields(config_cls) if f.init}
    hints = typing.get_type_hints(config_cls)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{source}: unknown key '{key}'{hint}; see the keys with --help-config")
    values = {}
    for name, field in fields.items():
        where = f"{source}: {name}"
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{source}: required key '{name}' is missing ({field.metadata.get('help', '')})")
            continue
        value = _coerce(data[name], hints[name], where)
        choices = field.metadata.get("choices")
        if choices is not None:
            for item in value if isinstance(value, list) else [value]:
                if item is not None and item not in choices:
                    raise ConfigError(f"{where} must be one of {', '.join(map(str, choices))}, got {item!r}")
        values[name] = value
    return config_cls(**values)


def load_config(path: str | Path, config_cls: type[ConfigT]) -> ConfigT:
    """Read a YAML file into `config_cls`, or raise ConfigError with one clear line."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass the path of a YAML file with --config")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}: {problem}{where}; fix the YAML syntax") from None
    if data is None:
        data = {}
    return config_from_mapping(data, config_cls, source=str(path))


def config_help(config_cls: type) -> str:
    """Every key of a config class with its default and help, for --help-config."""
    lines = []
    for field in dataclasses.fields(config_cls):
        if field.default is not dataclasses.MISSING:
            default = repr(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = repr(field.default_factory())
        else:
            default = "(required)"
        choices = field.metadata.get("choices")
        extra = f" One of: {', '.join(map(str, choices))}." if choices else ""
        lines.append(f"  {field.name} = {default}\n      {field.metadata.get('help', '')}{extra}")
    return "\n".join(lines)


"""Reading a criteria file (YAML): instructions plus a list of {key, text}. Pure: no database."""

import re

from training.config import ConfigError, yaml_config

KEY_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class CriteriaRejected(ValueError):
    pass


def _unquoted_comma_keys(item: dict) -> list[str]:
    """Keys with no value after 'text': what YAML makes of `{key: k, text: A, B.}`, a comma in an unquoted text."""
    keys = list(item)
    if "text" not in keys:
        return []
    tail = keys[keys.index("text") + 1:]
    return [str(k) for k in tail] if tail and all(item[k] is None for k in tail) else []


def criteria_parse(text: str, *, source: str = "criteria file") -> tuple[str, list[dict]]:
    """(instructions, items) from a criteria file, or CriteriaRejected saying what to fix."""
    try:
        data = yaml_config(text, source)  # the one YAML reader (no aliases), whose errors name the line
    except ConfigError as error:
        raise CriteriaRejected(str(error)) from None
    if not isinstance(data, dict):
        raise CriteriaRejected(f"{source}: expected a mapping with 'instructions' and 'criteria'")
    unknown = set(data) - {"instructions", "criteria"}
    if unknown:
        raise CriteriaRejected(f"{source}: unknown key(s) {sorted(unknown)}; use 'instructions' and 'criteria'")
    instructions = data.get("instructions") or ""
    if not isinstance(instructions, str):
        raise CriteriaRejected(f"{source}: 'instructions' must be text")
    items = data.get("criteria")
    if not isinstance(items, list) or not items:
        raise CriteriaRejected(f"{source}: 'criteria' must be a non-empty list of {{key, text}}")
    seen: set[str] = set()
    clean = []
    for i, item in enumerate(items, start=1):
        if isinstance(item, dict) and (stray := _unquoted_comma_keys(item)):
            raise CriteriaRejected(
                f"{source}: criterion {i} text stops at a comma (YAML read {stray[0]!r} as a key); "
                'quote the text: text: "..."'
            )
        if not isinstance(item, dict) or set(item) != {"key", "text"}:
            raise CriteriaRejected(f"{source}: criterion {i} must have exactly 'key' and 'text'")
        key, body = item["key"], item["text"]
        if not isinstance(key, str) or not KEY_PATTERN.match(key):
            raise CriteriaRejected(
                f"{source}: criterion {i} key {key!r} must be lower-case letters, digits or _ (starting with a letter)"
            )
        if key in seen:
            raise CriteriaRejected(f"{source}: criterion key {key!r} appears twice")
        if not isinstance(body, str) or not body.strip():
            raise CriteriaRejected(f"{source}: criterion {key!r} needs its text")
        seen.add(key)
        clean.append({"key": key, "text": body.strip()})
    return instructions.strip(), clean

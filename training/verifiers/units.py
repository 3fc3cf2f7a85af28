"""Physical units through pint: "50 km/h" = "50 kilometers per hour" = "13.89 m/s"."""

from __future__ import annotations

import functools
import re

# Words that look like units to pint but are part of how people write answers.
_NOT_UNITS = {"x", "y", "z", "n", "k", "a", "b", "c", "i", "e", "or", "and", "is", "it", "the", "not"}
_UNIT_TEXT = re.compile(r"^[A-Za-zµμΩ°%²³/*^·\s\-0-9().]+$")


@functools.lru_cache(maxsize=1)
def unit_registry():
    import pint

    return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


def _normalise(text: str) -> str:
    text = text.strip().strip(".")
    text = text.replace("·", "*").replace("²", "^2").replace("³", "^3").replace("μ", "µ")
    text = re.sub(r"\^\{([^{}]*)\}", r"^\1", text)
    return text


@functools.lru_cache(maxsize=4096)
def parse_unit(text: str):
    """The pint unit written in text, or None if text is not a unit pint knows."""
    cleaned = _normalise(text)
    if not cleaned or cleaned.lower() in _NOT_UNITS or not _UNIT_TEXT.match(cleaned):
        return None
    if not re.search(r"[A-Za-zµΩ°%]", cleaned):
        return None
    registry = unit_registry()
    try:
        unit = registry.parse_units(cleaned)
    except Exception:  # pint raises many kinds (UndefinedUnitError, DefinitionSyntaxError, ...)
        return None
    return unit


def is_unit(text: str) -> bool:
    return parse_unit(text) is not None


def convert(value: float, from_unit, to_unit) -> float | None:
    """value in from_unit expressed in to_unit, or None when the dimensions differ."""
    registry = unit_registry()
    try:
        return float(registry.Quantity(value, from_unit).to(to_unit).magnitude)
    except Exception:  # DimensionalityError, offset-unit errors
        return None

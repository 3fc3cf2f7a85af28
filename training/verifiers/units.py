"""Physical units through pint: "50 km/h" = "50 kilometers per hour" = "13.89 m/s", 212 °F = 100 °C.

pint does the parsing and every conversion, offset scales (°C, °F, K) included: `Quantity.to` converts
them properly, where multiplying a number by an offset unit would be refused. What stays ours is the
spelling people use that pint's parser does not read: superscripts (cm², s⁻¹), "°C" written with a
space or as "^\\circ C", "degrees Celsius".
"""

from __future__ import annotations

import functools
import re

# Words that look like units to pint but are part of how people write answers.
_NOT_UNITS = {"x", "y", "z", "n", "k", "a", "b", "c", "i", "e", "or", "and", "is", "it", "the", "not"}
_UNIT_TEXT = re.compile(r"^[A-Za-zµμΩ°%/*^·\s\-0-9().]+$")
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_SUPERSCRIPT_RUN = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+")
# "°C", "° F", "degrees Celsius", "deg F": pint reads "° C" as degree * coulomb, so name the scale.
_TEMPERATURE = re.compile(
    r"(?:°|\bdeg(?:ree)?s?\b)\s*(?P<scale>C|F|K|celsius|fahrenheit|kelvin)\b", re.IGNORECASE
)
_SCALE_NAMES = {"c": "degC", "celsius": "degC", "f": "degF", "fahrenheit": "degF", "k": "kelvin", "kelvin": "kelvin"}
_SCALE_WORDS = re.compile(r"\b(celsius|fahrenheit|kelvin)\b", re.IGNORECASE)


@functools.lru_cache(maxsize=1)
def unit_registry():
    import pint

    return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


def _normalise(text: str) -> str:
    text = text.strip().strip(".")
    text = _SUPERSCRIPT_RUN.sub(lambda m: "^" + m.group(0).translate(_SUPERSCRIPTS), text)
    text = text.replace("·", "*").replace("μ", "µ").replace("\\circ", "°").replace("\\degree", "°")
    text = re.sub(r"\^\s*\{([^{}]*)\}", r"^\1", text)
    text = re.sub(r"\s*\^\s*", "^", text)
    text = _TEMPERATURE.sub(lambda m: _SCALE_NAMES[m.group("scale").lower()], text)
    return _SCALE_WORDS.sub(lambda m: _SCALE_NAMES[m.group(1).lower()], text).strip()


@functools.lru_cache(maxsize=4096)
def parse_unit(text: str):
    """The pint unit written in text, or None if text is not a unit pint knows."""
    cleaned = _normalise(text)
    # "K" is kelvin; a lone lower-case letter is a variable.
    if not cleaned or (cleaned.lower() in _NOT_UNITS and cleaned != "K") or not _UNIT_TEXT.match(cleaned):
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
    """value in from_unit expressed in to_unit (pint's own conversion, offset scales included), or
    None when the dimensions differ."""
    registry = unit_registry()
    try:
        return float(registry.Quantity(value, from_unit).to(to_unit).magnitude)
    except Exception:  # DimensionalityError, offset-unit errors
        return None

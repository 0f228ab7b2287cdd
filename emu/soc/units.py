"""Physical units of configuration values: parsing user text into base units.

Every configuration field declares one dimension (its base unit). A value is either a bare
number, read in the base unit, or a string `"<number> <unit>"` whose unit belongs to that
dimension (`"648 MHz"`, `"128KiB"`, `"100 ns"`, `"12.8 GB/s"`). A unit of another dimension
is an error, so `--set vdsp.freq_hz=128KiB` is caught rather than silently misread.
"""

from __future__ import annotations

import math
import re

# Base unit of each dimension -> {spelling: factor to the base unit}.
_SCALES: dict[str, dict[str, float]] = {
    "Hz": {"Hz": 1.0, "kHz": 1e3, "MHz": 1e6, "GHz": 1e9},
    "bytes": {
        "B": 1.0, "bytes": 1.0,
        "kB": 1e3, "MB": 1e6, "GB": 1e9,
        "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3,
    },
    "ps": {"ps": 1.0, "ns": 1e3, "us": 1e6, "µs": 1e6, "ms": 1e9, "s": 1e12},
    "bytes/s": {
        "B/s": 1.0, "kB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9,
        "KiB/s": 1024.0, "MiB/s": 1024.0**2, "GiB/s": 1024.0**3,
    },
    "bytes/cycle": {"B/cycle": 1.0, "bytes/cycle": 1.0},
    "cycles": {"cycle": 1.0, "cycles": 1.0},
    "count": {},
    "ratio": {},
}

DIMENSIONS = tuple(_SCALES)

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\d\s].*?)?\s*$")


def parse_quantity(value: object, dimension: str, integer: bool) -> int | float:
    """Return `value` expressed in the base unit of `dimension`.

    Raises ValueError with a message that says what was expected; the caller adds the key.
    """
    if dimension not in _SCALES:
        raise ValueError(f"unknown dimension {dimension!r}")
    if isinstance(value, bool):
        raise ValueError(f"expected a number in {dimension}, got a boolean")
    if isinstance(value, int | float):
        number = float(value)
        exact_int = value if isinstance(value, int) else None
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None:
            raise ValueError(f"expected a number in {_spellings(dimension)}, got {value!r}")
        text, unit = match.group(1), match.group(2)
        scale = 1.0
        if unit is not None:
            scales = _SCALES[dimension]
            if unit not in scales:
                raise ValueError(
                    f"unit {unit!r} is not a unit of {dimension} (use {_spellings(dimension)})"
                )
            scale = scales[unit]
        number = float(text) * scale
        exact_int = int(text) if scale == 1.0 and re.fullmatch(r"[-+]?\d+", text) else None
    else:
        raise ValueError(f"expected a number in {dimension}, got {type(value).__name__}")
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    if not integer:
        return number
    if exact_int is not None:
        return exact_int
    if number != math.floor(number):
        raise ValueError(f"expected a whole number of {dimension}, got {value!r}")
    return int(number)


def format_quantity(value: int | float, dimension: str) -> str:
    """Render a base-unit value for people, choosing a readable unit."""
    if dimension == "bytes" and isinstance(value, int):
        for unit in ("GiB", "MiB", "KiB"):
            size = int(_SCALES["bytes"][unit])
            if value >= size and value % size == 0:
                return f"{value // size} {unit}"
        return f"{value} B"
    if dimension in ("Hz", "ps", "bytes/s"):
        best = "", 1.0
        for unit, factor in _SCALES[dimension].items():
            binary = "i" in unit  # rates and times read best in decimal units
            if not binary and abs(value) >= factor and factor > best[1]:
                best = unit, factor
        unit, factor = best
        if unit:
            return f"{value / factor:g} {unit}"
    suffix = {"count": "", "ratio": "", "cycles": " cycles", "bytes/cycle": " B/cycle"}
    return f"{value:g}{suffix.get(dimension, ' ' + dimension)}"


def _spellings(dimension: str) -> str:
    units = list(_SCALES[dimension])
    if not units:
        return "a plain number"
    return "a plain number or one of " + ", ".join(units)

"""Command options as data: one scheme for every user command, scenario and operator form.

An `Option` is what a command takes, declared once: its name (`options[name]` in code,
`--name-with-dashes` on the command line unless `flags` says otherwise), its kind, default,
one-line help and, for a number, the accepted range. The command layer
(`emu.commands.parse`) turns options into argparse arguments; listing and `--help` import
nothing heavy because options are plain data.

Kinds: `int` and `float` (with `bounds`: values outside are refused naming the flag and the
range; they are typing mistakes, or runs that would not end or not fit in memory), `bool`
(a switch, off by default), `str` (free text, or one of `choices`), or any other callable
given as `parse` (text -> value, raising ValueError with what was expected: `assignment`
for NAME=VALUE, `names` for a list separated by commas, or a command's own).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SEEDS = (0, 2**32 - 1)  # the accepted range of every --seed


@dataclass(frozen=True)
class Option:
    """One option of a command (see the module's docstring)."""

    name: str
    kind: type = str
    default: Any = None
    help: str = ""
    bounds: tuple[float, float] | None = None  # a number's accepted range, both ends in
    choices: tuple[Any, ...] = ()
    flags: tuple[str, ...] = ()   # default: ("--" + name with dashes,); a bare word: positional
    metavar: str | None = None
    repeat: bool = False          # may be given more than once (a list of values)
    many: bool = False            # takes one or more values at once (nargs="+")
    required: bool = False
    group: str | None = None      # options of one group exclude each other
    group_required: bool = False  # one option of the group must be given
    parse: Callable[[str], Any] | None = None
    show_range: bool = True       # add "(low to high, default D)" to the help

    def __post_init__(self) -> None:
        number = self.kind in (int, float)
        if self.bounds is not None:
            holds = self.default is None or self.bounds[0] <= self.default <= self.bounds[1]
            if not number or not holds:
                raise ValueError(f"option --{self.name}: bounds {self.bounds} are for numbers, "
                                 f"and must hold the default {self.default!r}")
        if self.kind is bool and self.default not in (False, None):
            raise ValueError(f"option --{self.name}: a switch is off by default")

    @property
    def flag(self) -> str:
        """The option as the command line spells it (its first flag)."""
        return self.flags[0] if self.flags else "--" + self.name.replace("_", "-")

    @property
    def positional(self) -> bool:
        return not self.flag.startswith("-")

    def help_text(self) -> str:
        """The help with the range and default where the option has them."""
        if self.bounds is None or not self.show_range:
            return self.help
        default = "" if self.default is None else f", default {self.default}"
        return f"{self.help} ({span(self.bounds)}{default})"

    def converter(self) -> Callable[[str], Any] | None:
        """The function from the text on the command line to the value (None: the text)."""
        if self.parse is not None:
            return self.parse
        if self.kind is int:
            low, high = self.bounds or (-(2**63), 2**63 - 1)
            return whole(int(low), int(high))
        if self.kind is float:
            low, high = self.bounds or (-math.inf, math.inf)
            return real(low, high)
        return None


def whole(low: int, high: int) -> Callable[[str], int]:
    """A converter: a whole number from `low` to `high`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise ValueError(f"expected a whole number from {low} to {high}, got {text!r}")
        return value
    return parse


def real(low: float, high: float) -> Callable[[str], float]:
    """A converter: a finite number from `low` to `high` (no NaN or infinity)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            if low == -math.inf and high == math.inf:
                raise ValueError(f"expected a finite number, got {text!r}")
            raise ValueError(f"expected a number from {low:g} to {high:g}, got {text!r}")
        return value
    return parse


def span(bounds: tuple[float, float]) -> str:
    """A range as the help shows it: whole numbers in full, others short."""
    if bounds[0] == -math.inf and bounds[1] == math.inf:
        return "any finite number"
    return " to ".join(_number(b) for b in bounds)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def assignment(text: str) -> tuple[str, str]:
    """A converter: NAME=VALUE as (name, value); the value may be empty, the name not."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def names(text: str) -> list[str]:
    """A converter: names separated by commas (at least one; blanks around them dropped)."""
    found = [n.strip() for n in text.split(",") if n.strip()]
    if not found:
        raise ValueError(f"expected names separated by commas, got {text!r}")
    return found

"""Which provisional parameters a result hangs on.

A preset value labelled `calibrated: provisional` is an engineering estimate nobody has fitted
to the board. `provisional_sensitivity` halves and doubles each such numeric value in turn
(one configuration each, everything else as resolved), evaluates the result with it, and
returns the parameters ordered by how far the result moves, so a report can say "this
latency is mostly `bpu.weight_sram_bytes`, which is a guess". A change the configuration
refuses (a bound, a power of two, an inconsistent combination) is left out for that
direction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from emu.errors import ConfigError
from emu.soc.config import ResolvedConfig, SocConfig, load_config

PROVISIONAL = "calibrated: provisional"


@dataclass(frozen=True)
class Sensitivity:
    key: str
    value: float
    result: float
    """The result at the resolved configuration."""
    moves: tuple[tuple[float, float], ...]
    """(the parameter's value, the result with it) for half and double, where allowed."""

    @property
    def spread(self) -> float:
        """The largest |log(result with the change / result)| over the changes."""
        return max((abs(math.log(r / self.result)) for _, r in self.moves
                    if r > 0 and self.result > 0), default=0.0)

    def describe(self, unit: str = "ms") -> str:
        parts = [f"{_number(v)} -> {r:.4g} {unit} ({r / self.result - 1:+.0%})"
                 for v, r in self.moves]
        return f"{self.key} {_number(self.value)}: " + ", ".join(parts)


def _number(value: float) -> str:
    return f"{value:.4g}"


def provisional_sensitivity(resolved: ResolvedConfig, evaluate: Callable[[SocConfig], float],
                            blocks: Sequence[str], top: int = 3,
                            threshold: float = 0.01) -> list[Sensitivity]:
    """The `top` provisional numeric parameters of `blocks` (key prefixes such as "bpu.")
    whose halving or doubling moves `evaluate`'s result by more than `threshold`
    (relative), largest first (ties by key)."""
    base = evaluate(resolved.soc)
    found = []
    for info, value, source in resolved.leaves():
        if not source.startswith(PROVISIONAL) or info.type not in (int, float) \
                or isinstance(value, bool) or not info.key.startswith(tuple(blocks)):
            continue
        moves = []
        for factor in (0.5, 2.0):
            changed = value * factor
            if info.type is int:
                changed = round(changed)
                if changed == value:
                    continue
            try:
                soc = load_config(resolved.preset, resolved.config_file,
                                  [*resolved.overrides, f"{info.key}={changed!r}"]).soc
            except ConfigError:
                continue
            moves.append((float(changed), evaluate(soc)))
        entry = Sensitivity(info.key, float(value), base, tuple(moves))
        if entry.spread > math.log1p(threshold):
            found.append(entry)
    found.sort(key=lambda s: (-s.spread, s.key))
    return found[:top]

"""Simulated time: an integer count of picoseconds, and per-block clocks.

SimPy's clock holds these integers directly. Every conversion from cycles or bytes rounds
up to a whole picosecond (work never takes less than it costs), and is exact: frequencies
and bandwidths are turned into fractions, so no float rounding leaks into the timeline.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

PS_PER_S = 10**12
PS_PER_US = 10**6
PS_PER_MS = 10**9


def ceil_div(num: Fraction | int, den: Fraction | int) -> int:
    """Smallest integer >= num / den, exactly."""
    if type(num) is int and type(den) is int:
        return -((-num) // den)
    q = Fraction(num) / Fraction(den)
    return -((-q.numerator) // q.denominator)


@lru_cache(maxsize=256)
def _ratio(value: float) -> tuple[int, int]:
    """A rate as an exact (numerator, denominator): converted once, used on every step."""
    exact = Fraction(value)
    return exact.numerator, exact.denominator


class Clock:
    """A block's clock: converts its cycles to simulation ticks (picoseconds)."""

    def __init__(self, name: str, freq_hz: float) -> None:
        if not freq_hz > 0:
            raise ValueError(f"clock {name}: frequency must be positive, got {freq_hz!r}")
        self.name = name
        self.freq_hz = freq_hz
        self._freq = Fraction(freq_hz)
        # ps = cycles * PS_PER_S / freq = cycles * _ps_num / _ps_den, in integers
        self._ps_num = PS_PER_S * self._freq.denominator
        self._ps_den = self._freq.numerator

    def cycles_to_ps(self, cycles: int | float) -> int:
        if cycles < 0:
            raise ValueError(f"clock {self.name}: negative cycle count {cycles!r}")
        if type(cycles) is int:
            return -((-cycles * self._ps_num) // self._ps_den)
        return ceil_div(Fraction(cycles) * PS_PER_S, self._freq)

    def __repr__(self) -> str:
        return f"Clock({self.name!r}, {self.freq_hz:g} Hz)"


def bytes_to_ps(nbytes: int, bytes_per_s: float) -> int:
    """Time to move `nbytes` at a steady `bytes_per_s`, rounded up to a picosecond."""
    if nbytes < 0:
        raise ValueError(f"negative byte count {nbytes}")
    rate_num, rate_den = _ratio(bytes_per_s)
    return ceil_div(nbytes * PS_PER_S * rate_den, rate_num)


def ps_to_ms(ps: int) -> float:
    return ps / PS_PER_MS


def report_ms(ps: int | float) -> float:
    """Picoseconds as reports give them: milliseconds rounded to the nanosecond (6
    decimals)."""
    return round(ps / PS_PER_MS, 6)


"""The simulation environment: SimPy with an integer-picosecond clock."""

from __future__ import annotations

import simpy


class Sim(simpy.Environment):
    """A SimPy environment whose time is always a whole number of picoseconds.

    Every delay handed to it is an int (see `emu.soc.clock`), so `now` stays an int; the
    property only tells the type checker so.
    """

    def __init__(self) -> None:
        super().__init__(initial_time=0)

    @property
    def now(self) -> int:
        return self._now  # type: ignore[return-value]

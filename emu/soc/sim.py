"""The simulation environment: SimPy with an integer-picosecond clock and timers that can be
cancelled."""

from __future__ import annotations

import heapq

import simpy


class Sim(simpy.Environment):
    """A SimPy environment whose time is always a whole number of picoseconds.

    Every delay handed to it is an int (see `emu.soc.clock`), so `now` stays an int; the
    property only tells the type checker so.

    A timer that nobody waits for any more (a wait that ended before its timeout, a DDR
    completion estimate made stale by a new transfer) can be cancelled: it then never runs
    its callbacks, never moves the clock, and does not count as work left, so "nothing is
    scheduled" (`peek` is infinite) means that nothing can happen any more.
    """

    def __init__(self) -> None:
        super().__init__(initial_time=0)
        self._cancelled: set[int] = set()  # ids of scheduled events to drop unprocessed

    @property
    def now(self) -> int:
        return self._now  # type: ignore[return-value]

    def cancel(self, event: simpy.Event) -> None:
        """Drop a scheduled, not yet processed event (a no-op for any other)."""
        if event.triggered and not event.processed:
            self._cancelled.add(id(event))

    def _drop_cancelled(self) -> None:
        # Cancelled events leave the queue when they reach its head; while one is queued it
        # is alive, so its id cannot be taken by another event.
        queue = self._queue
        while self._cancelled and queue and id(queue[0][3]) in self._cancelled:
            self._cancelled.discard(id(heapq.heappop(queue)[3]))

    def peek(self) -> float:
        self._drop_cancelled()
        return super().peek()

    def step(self) -> None:
        self._drop_cancelled()
        super().step()

    def step_live(self) -> bool:
        """`step`, or False (nothing done) when no event is left that was not cancelled: a
        loop's one call an event, where `peek` and then `step` searched the queue's head
        for cancelled timers twice."""
        self._drop_cancelled()
        if not self._queue:
            return False
        super().step()
        return True

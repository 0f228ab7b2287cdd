"""The iDMA engine of a vDSP core: channels that move descriptors between DDR and TCM.

A descriptor moves `rows` rows of `row_bytes`, each side with its own pitch (a 1-D transfer
is one row; a source pitch of 0 repeats one row, as image borders need), between a DDR
buffer of the CMA pool and the core's TCM. A channel works
through its queue in order: each descriptor pays the fixed descriptor latency (DSP cycles),
then its bytes flow through the shared DDR, capped at the channel's own bandwidth, and the
data lands when the last byte has (the copy is real: kernels compute on what arrived). A
full queue makes the submitter wait for a slot, as on the hardware.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from emu.errors import DspError
from emu.mem.ddr import Ddr
from emu.soc.clock import Clock
from emu.soc.component import Component
from emu.soc.config import IdmaConfig
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder


@dataclass(frozen=True)
class Endpoint:
    """One side of a transfer: a byte array (a DDR buffer or a TCM), a start and a pitch."""

    memory: npt.NDArray[np.uint8]
    offset: int
    pitch: int
    in_tcm: bool
    name: str


@dataclass(frozen=True)
class Descriptor:
    """One DMA descriptor: `rows` x `row_bytes` from `src` to `dst`."""

    label: str
    src: Endpoint
    dst: Endpoint
    rows: int
    row_bytes: int

    def __post_init__(self) -> None:
        if self.rows < 1 or self.row_bytes < 0:
            raise DspError(f"iDMA {self.label}: needs rows >= 1 and row_bytes >= 0, got "
                           f"rows={self.rows}, row_bytes={self.row_bytes}")
        if self.src.in_tcm == self.dst.in_tcm:
            raise DspError(f"iDMA {self.label}: one side must be TCM and the other DDR")
        for side in (self.src, self.dst):
            if side is self.src and side.pitch == 0:
                continue  # a source pitch of 0 reads one row again and again
            if side.pitch < self.row_bytes and self.rows > 1:
                raise DspError(f"iDMA {self.label}: {side.name} pitch {side.pitch} is smaller "
                               f"than a row of {self.row_bytes} B")
            end = side.offset + (self.rows - 1) * side.pitch + self.row_bytes
            if side.offset < 0 or end > len(side.memory):
                raise DspError(f"iDMA {self.label}: {side.name} bytes {side.offset}..{end} lie "
                               f"outside its {len(side.memory)} B")

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def to_tcm(self) -> bool:
        return self.dst.in_tcm

    def perform(self) -> None:
        """Move the bytes (the functional part of the transfer)."""
        if not self.nbytes:
            return
        if self.rows == 1:  # most descriptors: a plain slice, without a strided view's cost
            src, dst = self.src, self.dst
            dst.memory[dst.offset: dst.offset + self.row_bytes] = (
                src.memory[src.offset: src.offset + self.row_bytes])
            return
        self._view(self.dst)[...] = self._view(self.src)

    def _view(self, side: Endpoint) -> npt.NDArray[np.uint8]:
        # The array constructor on the memory's buffer: a fifth of as_strided's cost, which
        # goes through an interface dict (the bounds are checked in __post_init__).
        return np.ndarray((self.rows, self.row_bytes), np.uint8, buffer=side.memory,
                          offset=side.offset, strides=(side.pitch, 1))


def linear(label: str, src: Endpoint, dst: Endpoint, nbytes: int) -> Descriptor:
    """A 1-D descriptor of `nbytes` contiguous bytes."""
    return Descriptor(label, src, dst, rows=1, row_bytes=nbytes)


class IdmaChannel(Component):
    """One channel: a bounded descriptor queue served in order.

    The channel is driven by callbacks, not a SimPy process: a descriptor's start hands its
    bytes to the DDR, to arrive there after the descriptor latency, and the completion
    event the submitter waits on is the DDR's own, whose first callback lands the data,
    counts and traces the transfer and starts the next descriptor. A submitter that finds
    room in the queue goes on at once; one that finds it full waits for a slot, as with a
    `simpy.Store`, and its descriptor joins the queue the moment the slot frees. Busy
    periods, DDR traffic and completion instants are those of a process taking descriptors
    from a store; only the bookkeeping events in between are gone.
    """

    def __init__(
        self, name: str, parent: Component, env: Sim, cfg: IdmaConfig, clock: Clock, ddr: Ddr,
        recorder: TraceRecorder,
    ) -> None:
        super().__init__(name, parent)
        self.env = env
        self.cfg = cfg
        self.clock = clock
        self.ddr = ddr
        self.track = recorder.track(self.path)
        self._queue: deque[tuple[Descriptor, simpy.Event]] = deque()  # waiting, not started
        self._blocked: deque[tuple[Descriptor, simpy.Event, simpy.Event]] = deque()
        """Submitters waiting for room: their descriptor, its completion, their wake-up."""
        self._started_ps: int | None = None  # the descriptor in service's start, or idle
        self._bw_bytes_per_s = cfg.bytes_per_cycle * clock.freq_hz
        self._latency_ps = clock.cycles_to_ps(cfg.descriptor_latency_cycles)
        self.busy_ps = 0

    def copy(self, desc: Descriptor) -> Generator[simpy.Event, Any, simpy.Event]:
        """Queue `desc` (waiting while the queue is full); returns its completion event."""
        done = self.env.event()
        done.callbacks.append(partial(self._finish, desc))
        if len(self._queue) >= self.cfg.queue_depth:
            room = self.env.event()
            self._blocked.append((desc, done, room))
            yield room  # `_start_next` queued it when it woke us
        else:
            self._queue.append((desc, done))
            if self._started_ps is None:
                self._start_next()
        return done

    def _start_next(self) -> None:
        desc, done = self._queue.popleft()
        if self._blocked:  # the slot just freed goes to the longest-waiting submitter
            waiting, waiting_done, room = self._blocked.popleft()
            self._queue.append((waiting, waiting_done))
            room.succeed()
        self._started_ps = self.env.now
        self.ddr.transfer(desc.nbytes, self.path, write=not desc.to_tcm,
                          cap_bytes_per_s=self._bw_bytes_per_s, done=done,
                          delay_ps=self._latency_ps)

    def _finish(self, desc: Descriptor, _event: simpy.Event) -> None:
        """The last byte of `desc` landed: the data moves, before any waiter resumes."""
        start = self._started_ps
        assert start is not None
        now = self.env.now
        desc.perform()
        self.busy_ps += now - start
        self.count("descriptors")
        self.count("bytes_in" if desc.to_tcm else "bytes_out", desc.nbytes)
        self.count("busy_in_ps" if desc.to_tcm else "busy_out_ps", now - start)
        self.track.slice(desc.label, start, now, bytes=desc.nbytes)
        self._started_ps = None
        if self._queue:
            self._start_next()

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["busy_ps"] = self.busy_ps
        return out

"""The iDMA engine of a vDSP core: channels that move descriptors between DDR and TCM.

A descriptor moves `rows` rows of `row_bytes` (a 1-D transfer is one row). A channel
works through its queue in order: each descriptor pays the fixed descriptor latency (in
DSP cycles), then its bytes flow through the shared DDR capped at the channel's own
bandwidth. A full queue makes the submitter wait for a slot, as the hardware would.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy

from emu.mem.ddr import Ddr
from emu.soc.clock import Clock
from emu.soc.component import Component
from emu.soc.config import IdmaConfig
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder


@dataclass(frozen=True)
class Descriptor:
    """One DMA descriptor; `to_tcm` says the direction (DDR -> TCM when true)."""

    label: str
    rows: int
    row_bytes: int
    to_tcm: bool

    def __post_init__(self) -> None:
        if self.rows < 1 or self.row_bytes < 0:
            raise ValueError(
                f"descriptor {self.label}: rows must be >= 1 and row_bytes >= 0, "
                f"got rows={self.rows}, row_bytes={self.row_bytes}"
            )

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes


class IdmaChannel(Component):
    """One channel: a bounded descriptor queue served in order."""

    def __init__(
        self, name: str, parent: Component, env: Sim, cfg: IdmaConfig,
        clock: Clock, ddr: Ddr, recorder: TraceRecorder,
    ) -> None:
        super().__init__(name, parent)
        self.env = env
        self.cfg = cfg
        self.clock = clock
        self.ddr = ddr
        self.track = recorder.track(self.path)
        self._queue: simpy.Store = simpy.Store(env, capacity=cfg.queue_depth)
        self._bw_bytes_per_s = cfg.bytes_per_cycle * clock.freq_hz
        env.process(self._serve())

    def copy(self, desc: Descriptor) -> Generator[simpy.Event, Any, simpy.Event]:
        """Queue `desc` (waiting while the queue is full); returns its completion event."""
        done = self.env.event()
        yield self._queue.put((desc, done))
        return done

    def _serve(self) -> Generator[simpy.Event, Any, None]:
        while True:
            desc, done = yield self._queue.get()
            start = self.env.now
            yield self.env.timeout(self.clock.cycles_to_ps(self.cfg.descriptor_latency_cycles))
            yield self.ddr.transfer(
                desc.nbytes, self.path, write=not desc.to_tcm,
                cap_bytes_per_s=self._bw_bytes_per_s,
            )
            self.count("descriptors")
            self.count("bytes_in" if desc.to_tcm else "bytes_out", desc.nbytes)
            self.track.slice(desc.label, start, self.env.now, bytes=desc.nbytes)
            done.succeed()

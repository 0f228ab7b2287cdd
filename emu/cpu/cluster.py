"""The A55 cluster as a group of cores that run CPU work items.

A work item carries what the algorithm did: its op counts and, optionally, its real
address stream. Running it on a core feeds the stream through that core's view of the
cache hierarchy (private L1/L2, shared L3, state kept between items), charges the cycles
of `emu.cpu.timing`, and sends the resulting line fills and write-backs through the DDR.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from emu.cpu import timing
from emu.mem.ddr import Ddr
from emu.soc.clock import Clock
from emu.soc.component import Component
from emu.soc.config import CpuConfig
from emu.soc.sched import (
    ANY_CORE,
    PRIORITY_LOWEST,
    CoreGroup,
    CoreSlot,
    Stage,
    StageBody,
    Task,
)
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder

if TYPE_CHECKING:
    from emu.mem.cache import CacheHierarchy


CLEAN, INVALIDATE = "clean", "invalidate"


@dataclass(frozen=True)
class CacheMaintenance:
    """Clean (write back dirty lines, keep them) or invalidate (drop them) a byte range in
    every CPU cache, as hbSysFlushMem does."""

    op: str
    start: int
    nbytes: int

    def __post_init__(self) -> None:
        if self.op not in (CLEAN, INVALIDATE):
            raise ValueError(f"cache maintenance: unknown op {self.op!r}")
        if self.start < 0 or self.nbytes < 0:
            raise ValueError(f"cache maintenance: negative range {self.start}+{self.nbytes}")


@dataclass(frozen=True)
class CpuWork:
    """One piece of CPU work: op counts plus the memory addresses it touched, in order, or a
    cache-maintenance operation."""

    name: str
    ops: int
    fdivs: int = 0
    addrs: np.ndarray | None = None
    is_write: np.ndarray | None = None
    maintenance: CacheMaintenance | None = None


class CpuCluster(CoreGroup):
    """8 x A55 with their caches."""

    def __init__(
        self, name: str, parent: Component | None, env: Sim, cfg: CpuConfig,
        ddr: Ddr, recorder: TraceRecorder,
    ) -> None:
        super().__init__(name, parent, env, cfg.cores, recorder)
        self.cfg = cfg
        self.clock = Clock(self.path, cfg.freq_hz)
        self.ddr = ddr
        self._caches: CacheHierarchy | None = None

    @property
    def caches(self) -> CacheHierarchy:
        # Built on first use: the numba model costs nothing in runs without CPU work.
        if self._caches is None:
            from emu.mem.cache import CacheHierarchy

            self._caches = CacheHierarchy(self.cfg)
        return self._caches

    def work_task(
        self, work: CpuWork, *, core: int = ANY_CORE, priority: int = PRIORITY_LOWEST,
        custom_id: int = 0,
    ) -> Task:
        """A task that runs `work` on a core of this cluster (submit it to run it)."""
        return Task(work.name, [Stage(work.name, self._body(work))], priority=priority,
                    custom_id=custom_id, core=core)

    def _body(self, work: CpuWork) -> StageBody:
        def run(slot: CoreSlot) -> Generator[simpy.Event, Any, None]:
            yield from self.execute(work, slot.index)

        return run

    def execute(self, work: CpuWork, core: int) -> Generator[simpy.Event, Any, None]:
        """Run `work` on `core` now (for code already holding the core, e.g. the host)."""
        stalls = ddr_reads = nbytes = written = written_bytes = 0
        cycles = 0
        if work.maintenance is not None:
            m = work.maintenance
            if m.op == CLEAN:
                written = self.caches.clean(m.start, m.nbytes)
                self.count("lines_cleaned", written)
            else:
                self.count("lines_invalidated", self.caches.invalidate(m.start, m.nbytes))
            lines = timing.lines_in_range(m.start, m.nbytes, self.cfg.line_bytes)
            self.count("maintenance_ops", lines)
            cycles += timing.maintenance_cycles(lines, self.cfg)
            nbytes += written * self.cfg.line_bytes
            written_bytes += written * self.cfg.line_bytes
            self.count("ddr_line_writebacks", written)
        if work.addrs is not None and len(work.addrs):
            result = self.caches.access(core, work.addrs, work.is_write)
            stalls = self.caches.stall_cycles(result)
            ddr_reads = result.ddr_reads
            nbytes += result.ddr_bytes(self.cfg.line_bytes)
            written_bytes += result.ddr_writebacks * self.cfg.line_bytes
            self.count("cache_accesses", result.accesses)
            self.count("l1_hits", result.l1_hits)
            self.count("l2_hits", result.l2_hits)
            self.count("l3_hits", result.l3_hits)
            self.count("ddr_line_reads", result.ddr_reads)
            self.count("ddr_line_writebacks", result.ddr_writebacks)
        cycles += timing.compute_cycles(work.ops, work.fdivs, stalls, self.cfg)
        self.count("cycles", cycles)
        self.count("ops", work.ops)
        yield self.env.timeout(self.clock.cycles_to_ps(cycles))
        if nbytes:
            latency = max(timing.miss_latency_ps(ddr_reads, self.cfg, self.ddr.cfg.latency_ps),
                          timing.write_back_latency_ps(written, self.ddr.cfg.latency_ps))
            yield self.ddr.transfer(
                nbytes, f"{self.path}.core{core}", written=written_bytes, latency_ps=latency,
                cap_bytes_per_s=self.cfg.ddr_port_bytes_per_s,
            )

"""The A55 cluster as a group of cores that run CPU work items.

A work item carries what the algorithm did: its instruction counts by class
(`emu.cpu.ops`) and, optionally, its real address stream (each access's address, whether it
is a store, whether it writes a whole line, and the id of the stream it belongs to). Running
it on a core feeds the stream through the write-streaming detector, that core's view of the
cache hierarchy (private L1/L2, shared L3, state kept between items), the prefetcher and the
TLBs (`emu.cpu.memsys`, `emu.mem.tlb`), charges the cycles of `emu.cpu.timing`, and sends the
resulting line fills and writes through the DDR.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from emu.cpu import memsys, ops, timing
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
    from emu.mem.tlb import Tlbs


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
    """One piece of CPU work: instruction counts by class (`emu.cpu.ops.counts`) plus the
    memory accesses it made, in order, or a cache-maintenance operation.

    Per access: `addrs` its byte address, `is_write` a store, `full_line` a store that
    writes its whole line, `loaded` a store to a line the same instruction stream loaded
    first (a read-modify-write recorded as one access: it dirties the line as a store does
    and waits for it as a load does), `streams` the id (0-255) of the instruction stream it
    belongs to (what the prefetcher tells streams apart by). Missing flags mean loads,
    partial stores, nothing loaded first, stream 0. Or all of these packed in `record`,
    one row per access as `emu.cpu.memsys` lays them out (what a recording kernel writes:
    no arrays to split it into); then `addrs` and the flags are None."""

    name: str
    ops: np.ndarray
    addrs: np.ndarray | None = None
    is_write: np.ndarray | None = None
    full_line: np.ndarray | None = None
    loaded: np.ndarray | None = None
    streams: np.ndarray | None = None
    maintenance: CacheMaintenance | None = None
    record: np.ndarray | None = None

    def accesses(self) -> np.ndarray:
        """The memory accesses, packed (`emu.cpu.memsys`)."""
        if self.record is not None:
            return self.record
        if self.addrs is None:
            return np.zeros((0, 2), np.int64)
        return memsys.pack(self.addrs, self.is_write, self.full_line, self.loaded,
                           self.streams)


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
        self._tlbs: Tlbs | None = None

    @property
    def caches(self) -> CacheHierarchy:
        # Built on first use: the numba model costs nothing in runs without CPU work.
        if self._caches is None:
            from emu.mem.cache import CacheHierarchy

            self._caches = CacheHierarchy(self.cfg)
        return self._caches

    @property
    def tlbs(self) -> Tlbs:
        if self._tlbs is None:
            from emu.mem.tlb import Tlbs

            self._tlbs = Tlbs(self.cfg)
        return self._tlbs

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
        stalls = demand = nbytes = written = written_bytes = 0
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
        record = work.accesses()
        if len(record):
            stalls, demand, moved, stored = self._memory(record, core)
            nbytes += moved
            written_bytes += stored
        cycles += timing.issue_cycles(work.ops, self.cfg) + stalls
        self.count("cycles", cycles)
        for name, value in ops.as_dict(work.ops).items():
            if value:
                self.count(f"ops_{name}", value)
        yield self.env.timeout(self.clock.cycles_to_ps(cycles))
        if nbytes:
            ddr_latency = self.ddr.cfg.latency_ps
            latency = max(timing.ddr_latency_ps(demand, ddr_latency),
                          timing.write_back_latency_ps(written, ddr_latency))
            yield self.ddr.transfer(
                nbytes, f"{self.path}.core{core}", written=written_bytes, latency_ps=latency,
                cap_bytes_per_s=self.cfg.ddr_port_bytes_per_s,
            )

    def _memory(self, record: np.ndarray, core: int) -> tuple[int, int, int, int]:
        """Run packed accesses (`emu.cpu.memsys`) through the memory system: (stall cycles,
        demand loads from DDR, bytes moved to and from DDR, of which written)."""
        cfg = self.cfg
        counts = memsys.run(record, core, self.caches, self.tlbs, cfg)
        c = [int(v) for v in counts]
        stalls = timing.memory_stall_cycles(
            c[memsys.L2_LOADS], c[memsys.L3_LOADS], c[memsys.DDR_LOADS], c[memsys.TLB_L2_HITS],
            c[memsys.TLB_WALKS], cfg)
        ddr_writes = c[memsys.DDR_WRITEBACKS] + c[memsys.STREAM_WRITES]
        for name, value in (("cache_accesses", len(record)), ("l1_hits", c[memsys.L1_HITS]),
                            ("l2_hits", c[memsys.L2_HITS]), ("l3_hits", c[memsys.L3_HITS]),
                            ("ddr_line_reads", c[memsys.DDR_READS]),
                            ("ddr_line_writebacks", c[memsys.DDR_WRITEBACKS]),
                            ("ddr_stream_writes", c[memsys.STREAM_WRITES]),
                            ("loads_prefetched", c[memsys.PREFETCHED_LOADS]),
                            ("loads_from_ddr", c[memsys.DDR_LOADS]),
                            ("store_misses", c[memsys.STORE_MISSES]),
                            ("tlb_l2_hits", c[memsys.TLB_L2_HITS]),
                            ("tlb_walks", c[memsys.TLB_WALKS])):
            self.count(name, value)
        line = cfg.line_bytes
        return (stalls, c[memsys.DDR_LOADS], (c[memsys.DDR_READS] + ddr_writes) * line,
                ddr_writes * line)

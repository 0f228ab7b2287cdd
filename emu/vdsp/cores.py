"""The vDSP cores: an RPC queue in front of the cores; each core with TCM, iDMA and an ISA.

Tasks reach the cores through the priority queue of `emu.soc.sched` (priority, custom id,
arrival; 255 preempts at a stage boundary, i.e. between tiles). Entering an operator costs
`operator_dispatch_cycles` on the core. A core can be stopped and started, like the board's
remoteproc state: a stopped core takes no task from the queue.

`VdspCore.compute` runs a numba kernel on the core's TCM with the ISA emulation and returns
the cycles it costs by `emu.vdsp.timing` (`setup_loop_cycles` likewise for a loop of an
operator's set-up code, which is no kernel call); an emulated fault (an access outside the TCM or
the gather window) raises `DspError`, which fails the task.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

import simpy

from emu.errors import DspError
from emu.mem.ddr import Ddr
from emu.mem.pool import CmaPool
from emu.soc.clock import Clock
from emu.soc.component import Component
from emu.soc.config import VdspConfig
from emu.soc.sched import CoreGroup, CoreSlot
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder
from emu.vdsp import isa, timing
from emu.vdsp.idma import IdmaChannel
from emu.vdsp.rpc import RpcPath
from emu.vdsp.tcm import Tcm


class VdspCore(Component):
    """One core's hardware beside the queue: TCM, iDMA channels, the ISA state."""

    def __init__(
        self, index: int, parent: Component, env: Sim, cfg: VdspConfig, clock: Clock, ddr: Ddr,
        pool: CmaPool, recorder: TraceRecorder,
    ) -> None:
        super().__init__(f"core{index}", parent)
        self.index = index
        self.cfg = cfg
        self.clock = clock
        self.pool = pool
        """The shared memory pool, where operators find buffers an argument block points at."""
        self.online = True
        self.ctx = isa.make_context(cfg.tcm.banks * cfg.tcm.bank_bytes, cfg.tcm.bank_bytes,
                                    cfg.tcm.sub_banks, cfg.tcm.sub_bank_width_bytes)
        self.tcm = Tcm(self, cfg.tcm, self.ctx.tcm)
        idma = Component("idma", self)
        self.channels = [
            IdmaChannel(f"ch{i}", idma, env, cfg.idma, clock, ddr, recorder)
            for i in range(cfg.idma.channels)
        ]
        # Tile loads go to the first half of the channels, stores to the rest, so reads
        # and write-backs never queue behind each other (one channel carries both).
        half = -(-len(self.channels) // 2)
        self.load_channels = self.channels[:half]
        self.store_channels = self.channels[half:] or self.channels

    def compute(self, kernel: Callable[..., Any], *args: Any) -> timing.KernelCycles:
        """Run `kernel(ctx, *args)` on this core's TCM; the cycles it costs."""
        cycles = self._emulate(kernel, [args])
        self.count("kernel_calls")
        self.count("kernel_cycles", cycles.total)
        self.count("bundles", cycles.bundles)
        self.count("gather_cycles", cycles.gather_cycles)
        self.count("fdiv_stall_cycles", cycles.fdiv_stall_cycles)
        c = self.ctx.counters.tolist()  # Python ints: a third of the cost of indexing the array
        self.count("vector_arith_ops", c[isa.C_ALU] + c[isa.C_MUL] + c[isa.C_FDIV]
                   + c[isa.C_CVT])
        self.count("vector_memory_ops", c[isa.C_LOAD] + c[isa.C_STORE] + c[isa.C_GATHER_A]
                   + c[isa.C_SCATTER])
        return cycles

    def setup_loop_cycles(self, kernel: Callable[..., Any], calls: Iterable[tuple[Any, ...]]
                          ) -> int:
        """The cycles of a vector loop in an operator's set-up code over data it places in
        TCM piece by piece (a pass over its arguments): `kernel(ctx, *args)` for each
        `args` of `calls` (an iterator may place the next piece before it yields its
        arguments), with the ISA emulation, its op counts summed. Part of the set-up code,
        not a kernel call of its own: no call cycles; charge them with `setup`."""
        cycles = self._emulate(kernel, calls)
        return cycles.total - cycles.call_cycles

    def _emulate(self, kernel: Callable[..., Any], calls: Iterable[tuple[Any, ...]]
                 ) -> timing.KernelCycles:
        isa.reset_counters(self.ctx)
        isa.clear_fault(self.ctx)
        for args in calls:
            kernel(self.ctx, *args)
            if self.ctx.fault[0] != isa.FAULT_NONE:
                raise DspError(
                    f"{self.path}: emulated fault: {isa.describe_fault(self.ctx.fault)}")
        return timing.kernel_cycles(self.ctx.counters, self.cfg)

    def setup(self, slot: CoreSlot, cycles: int, label: str, kernel_cycles: int = 0
              ) -> Generator[simpy.Event, Any, None]:
        """An operator's work outside its tile stream (tables its scalar code writes into
        TCM, a kernel run alone): `cycles` of its own, counted here with the kernels'
        cycles (and as `setup_cycles`), after `kernel_cycles` of kernels it ran through
        `compute`, which counted those; takes their time on the core's track."""
        if cycles:
            self.count("kernel_cycles", cycles)
            self.count("setup_cycles", cycles)
        start = slot.env.now
        yield slot.env.timeout(self.clock.cycles_to_ps(cycles + kernel_cycles))
        slot.track.slice(label, start, slot.env.now, cycles=cycles + kernel_cycles)


class VdspCores(CoreGroup):
    """Both vDSP cores behind the RPC queue."""

    def __init__(
        self, name: str, parent: Component | None, env: Sim, cfg: VdspConfig, ddr: Ddr,
        pool: CmaPool, recorder: TraceRecorder,
    ) -> None:
        clock = Clock(f"{name}.clock", cfg.freq_hz)
        super().__init__(name, parent, env, cfg.cores, recorder,
                         clock.cycles_to_ps(cfg.operator_dispatch_cycles))
        self.cfg = cfg
        self.clock = clock
        self.ddr = ddr
        self.hw = [VdspCore(i, self, env, cfg, clock, ddr, pool, recorder)
                   for i in range(cfg.cores)]
        self.rpc = RpcPath("rpc", self, env, cfg, self, recorder)
        """The message path from the ARM program to this queue and back."""

    def _accepts(self, core: int) -> bool:
        return self.hw[core].online

    def set_online(self, core: int, online: bool) -> None:
        """Start or stop a core; a started core picks up waiting tasks at once."""
        self.hw[core].online = online
        self.count("core_starts" if online else "core_stops")
        if online:
            self._dispatch()

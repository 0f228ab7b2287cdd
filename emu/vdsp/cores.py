"""The vDSP cores: an RPC queue in front of the cores, each core with its iDMA channels.

Tasks reach the cores through the same priority queue as on the BPU (priority, custom id,
arrival; 255 preempts at a tile boundary). A tile-streaming task is built from stages that
move tiles in and out of TCM with iDMA and compute in between.
"""

from __future__ import annotations

from emu.mem.ddr import Ddr
from emu.soc.clock import Clock
from emu.soc.component import Component
from emu.soc.config import VdspConfig
from emu.soc.sched import CoreGroup
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder
from emu.vdsp.idma import IdmaChannel


class VdspCore(Component):
    """The per-core hardware beside the queue: its iDMA channels."""

    def __init__(
        self, index: int, parent: Component, env: Sim, cfg: VdspConfig,
        clock: Clock, ddr: Ddr, recorder: TraceRecorder,
    ) -> None:
        super().__init__(f"core{index}", parent)
        idma = Component("idma", self)
        self.channels = [
            IdmaChannel(f"ch{i}", idma, env, cfg.idma, clock, ddr, recorder)
            for i in range(cfg.idma.channels)
        ]


class VdspCores(CoreGroup):
    """Both vDSP cores behind the RPC queue."""

    def __init__(
        self, name: str, parent: Component | None, env: Sim, cfg: VdspConfig,
        ddr: Ddr, recorder: TraceRecorder,
    ) -> None:
        super().__init__(name, parent, env, cfg.cores, recorder, cfg.rpc_overhead_ps)
        self.cfg = cfg
        self.clock = Clock(self.path, cfg.freq_hz)
        self.ddr = ddr
        self.hw = [VdspCore(i, self, env, cfg, self.clock, ddr, recorder) for i in range(cfg.cores)]

"""The SoC builder: turns a resolved configuration into a simulated SoC, in fixed phases.

Phases, in order and never backwards:
  configured  the configuration is fixed; no simulation objects exist yet;
  built       `build()` created the event loop and every block (DDR, memory pool, CPU
              cluster, BPU cores, vDSP cores); work can be submitted and simulated;
  finished    `finish()` closed the run; stats and traces can be read, nothing more runs.
Using a block before `build()`, building twice, or simulating after `finish()` raises
`SimulationError`. This is the one module that wires the blocks of the other packages
together; the blocks themselves know nothing of each other beyond what they are handed. It
sits above the block packages (`soc`, `mem`, `cpu`, `bpu`, `vdsp`, `dv`) and below the runtime.
"""

from __future__ import annotations

import enum
from typing import Any

import simpy

from emu.bpu.cores import BpuCores
from emu.cpu.cluster import CpuCluster
from emu.dv.device import DvDevice
from emu.errors import SimulationError
from emu.mem.ddr import Ddr
from emu.mem.pool import CmaPool
from emu.soc.component import Component
from emu.soc.config import ResolvedConfig
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder
from emu.vdsp.cores import VdspCores


class Phase(enum.Enum):
    CONFIGURED = "configured"
    BUILT = "built"
    FINISHED = "finished"


_BLOCKS = ("env", "ddr", "pool", "cpu", "bpu", "vdsp", "dv")


class Soc(Component):
    """The simulated SoC: the root of the component tree (`soc`)."""

    env: Sim
    ddr: Ddr
    pool: CmaPool
    cpu: CpuCluster
    bpu: BpuCores
    dv: DvDevice
    vdsp: VdspCores

    def __init__(self, resolved: ResolvedConfig, *, trace: bool = False) -> None:
        super().__init__("soc", None)
        self.resolved = resolved
        self.config = resolved.soc
        self.recorder = TraceRecorder(trace)
        self.phase = Phase.CONFIGURED

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes that do not exist yet: the blocks before build().
        if name in _BLOCKS:
            raise SimulationError(f"soc.{name} does not exist before soc.build()")
        raise AttributeError(name)

    def build(self) -> Soc:
        """Create the event loop and every block; allowed once."""
        self._require(Phase.CONFIGURED, "build")
        cfg, rec = self.config, self.recorder
        self.env = Sim()
        self.ddr = Ddr("ddr", self, self.env, cfg.ddr, rec)
        self.pool = CmaPool.from_config(cfg.mem)
        self.cpu = CpuCluster("cpu", self, self.env, cfg.cpu, self.ddr, rec)
        self.bpu = BpuCores("bpu", self, self.env, cfg.bpu, self.ddr, rec)
        self.vdsp = VdspCores("vdsp", self, self.env, cfg.vdsp, self.ddr, self.pool, rec)
        self.dv = DvDevice("dv", self, self.env, cfg.dv, self.ddr, rec)
        self.phase = Phase.BUILT
        return self

    @property
    def now_ps(self) -> int:
        return int(self.env.now)

    def run(self, until: simpy.Event | None = None) -> None:
        """Simulate until `until` has happened, or until nothing is left to do."""
        self._require(Phase.BUILT, "run")
        self.env.run(until=until)

    def finish(self) -> None:
        """Close the run: later attempts to simulate raise."""
        self._require(Phase.BUILT, "finish")
        self.phase = Phase.FINISHED

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        if self.phase is not Phase.CONFIGURED:
            out["sim_time_ps"] = self.now_ps
            out["pool"] = self.pool.stats()
        return out

    def _require(self, phase: Phase, action: str) -> None:
        if self.phase is not phase:
            raise SimulationError(
                f"soc.{action}() needs phase '{phase.value}', the SoC is '{self.phase.value}'"
            )

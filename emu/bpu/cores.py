"""The BPU cores: a priority task queue whose tasks run a model layer by layer.

Each layer is one stage, so a priority-255 task preempts at a layer boundary. A layer's
compute and its DDR traffic proceed side by side; the layer ends when both are done.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import simpy

from emu.bpu import timing
from emu.bpu.timing import Layer
from emu.mem.ddr import Ddr
from emu.soc.clock import Clock
from emu.soc.component import Component
from emu.soc.config import BpuConfig
from emu.soc.sched import ANY_CORE, PRIORITY_LOWEST, CoreGroup, CoreSlot, Stage, StageBody, Task
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder


class BpuCores(CoreGroup):
    """Both BPU cores behind one queue."""

    def __init__(
        self, name: str, parent: Component | None, env: Sim, cfg: BpuConfig,
        ddr: Ddr, recorder: TraceRecorder,
    ) -> None:
        super().__init__(name, parent, env, cfg.cores, recorder, cfg.task_overhead_ps)
        self.cfg = cfg
        self.clock = Clock(self.path, cfg.freq_hz)
        self.ddr = ddr

    def model_task(
        self, name: str, layers: Sequence[Layer], *, core: int = ANY_CORE,
        priority: int = PRIORITY_LOWEST, custom_id: int = 0,
    ) -> Task:
        """A task that runs the layers of a model in order (submit it to run it)."""
        stages = [Stage(layer.name, self._layer_body(layer)) for layer in layers]
        return Task(name, stages, priority=priority, custom_id=custom_id, core=core)

    def _layer_body(self, layer: Layer) -> StageBody:
        def run(slot: CoreSlot) -> Generator[simpy.Event, Any, None]:
            cycles = timing.compute_cycles(layer, self.cfg)
            read, written = timing.ddr_bytes(layer, self.cfg)
            self.count("macs", layer.macs)
            self.count("cycles", cycles)
            port = self.cfg.ddr_port_bytes_per_s
            who = slot.name
            events: list[simpy.Event] = [self.env.timeout(self.clock.cycles_to_ps(cycles))]
            if read:
                events.append(self.ddr.transfer(read, who, cap_bytes_per_s=port))
            if written:
                events.append(self.ddr.transfer(written, who, write=True, cap_bytes_per_s=port))
            yield self.env.all_of(events)

        return run

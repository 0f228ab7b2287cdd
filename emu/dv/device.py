"""The DV700 on the SoC: one device with one command-list queue, on the shared DDR.

It is a device of its own next to the BPU cores, not a mode of them: the DV700 is DMP's IP
with its own clocks and unified buffer, and its driver keeps its own execution queue (one
per context on the board; one for the device here, in submission order). A command list is
one task: a stage per command, each run (or FC command) its fixed cost, then its compute and
its DDR traffic side by side (`emu/dv/timing.py`); the device's track in the trace shows
each command.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import simpy

from emu.dv.timing import Cost
from emu.mem.ddr import Ddr
from emu.soc.component import Component
from emu.soc.config import DvConfig
from emu.soc.sched import CoreGroup, CoreSlot, Stage, StageBody, Task
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder


class DvDevice(CoreGroup):
    """The DV700: convolution and FC blocks behind one queue."""

    def __init__(self, name: str, parent: Component | None, env: Sim, cfg: DvConfig,
                 ddr: Ddr, recorder: TraceRecorder) -> None:
        super().__init__(name, parent, env, 1, recorder)
        self.cfg = cfg
        self.ddr = ddr

    def cmdlist_task(self, name: str, commands: Sequence[tuple[str, Sequence[Cost]]],
                     times: list[int] | None = None) -> Task:
        """A task that runs a command list: (label, the costs of its runs) per command;
        each command's time on the device is appended to `times` when given."""
        return Task(name, [Stage(f"{name} {label}", self._body(costs, times))
                           for label, costs in commands])

    def _body(self, costs: Sequence[Cost], times: list[int] | None) -> StageBody:
        def run(slot: CoreSlot) -> Generator[simpy.Event, Any, None]:
            start = self.env.now
            for cost in costs:
                self.count("runs")
                if cost.fixed_ps:
                    yield self.env.timeout(cost.fixed_ps)
                yield self.ddr.alongside(cost.compute_ps, cost.ddr_bytes, slot.name,
                                         written=cost.written_bytes,
                                         cap_bytes_per_s=self.cfg.ddr_port_bytes_per_s)
            self.count("commands")
            if times is not None:
                times.append(self.env.now - start)

        return run

"""The BPU cores: a priority task queue whose tasks run a model function call by function call.

A model task is the model's layer groups, split into function calls (FCs) as the compiler's
`max_time_per_fc` does (`timing.split_function_calls`). Each FC is one stage. Between two
FCs a core takes the best task of the queue when its priority is higher than the running
task's (J5's driver feeds the cores' FC FIFOs from its software priority queues, highest
level first, FC by FC); so any higher-priority task, not only a priority-255 one,
overtakes at the next FC boundary and never inside an FC, as on the board. Equal
priorities do not overtake (customId and arrival order the queue, not a running task).
Inside an FC the layer groups run in order: the layer group's fixed cost (and the FC's,
before its first one), then its compute and its DDR traffic side by side; the layer group
ends when both are done. The DDR bytes go through the shared DDR model, so a layer group
slows down when other requesters (the DSPs, the CPUs, the other core) load the DDR.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import simpy

from emu.bpu import timing
from emu.bpu.timing import FunctionCall, LayerGroup
from emu.mem.ddr import Ddr
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
        self.ddr = ddr

    def _preempt_wanted(self, core: int, task: Task) -> bool:
        """A waiting task this core may run, of higher priority than `task`."""
        return any(t.priority > task.priority and t.core in (ANY_CORE, core)
                   for t in self._pending)

    def model_task(
        self, name: str, layers: Sequence[LayerGroup], *, max_time_per_fc_ps: int = 0,
        spans: Sequence[tuple[int, int]] | None = None, core: int = ANY_CORE,
        priority: int = PRIORITY_LOWEST, custom_id: int = 0,
        resident_weights: bool | None = None,
    ) -> Task:
        """A task that runs a model's layer groups (submit it to run it), in the function
        calls `spans` gives ([start, end) ranges, a compiled model's cut), or else split
        into FCs of at most `max_time_per_fc_ps` of estimated time (0: one FC).
        `resident_weights`: whether the model's weights stay on chip (default: whether
        these layer groups' weights fit; a model of several subgraphs decides for all)."""
        if spans is None:
            spans = timing.split_function_calls(layers, self.cfg, max_time_per_fc_ps,
                                                resident_weights)
        calls = timing.function_calls(layers, self.cfg, spans, resident_weights)
        stages = [Stage(f"{name} {call.name}", self._call_body(call)) for call in calls]
        return Task(name, stages, priority=priority, custom_id=custom_id, core=core)

    def _call_body(self, call: FunctionCall) -> StageBody:
        def run(slot: CoreSlot) -> Generator[simpy.Event, Any, None]:
            env, port, who = self.env, self.cfg.ddr_port_bytes_per_s, slot.name
            overhead = call.overhead_ps
            for layer, cost in zip(call.layers, call.costs, strict=True):
                self.count("layer_groups")
                self.count("macs", layer.macs)
                if overhead + cost.fixed_ps:
                    yield env.timeout(overhead + cost.fixed_ps)
                overhead = 0
                compute = env.timeout(cost.compute_ps)
                if cost.ddr_bytes:
                    # One flow for loads and stores: the port's bandwidth is for both.
                    moved = self.ddr.transfer(cost.ddr_bytes, who, written=cost.written_bytes,
                                              cap_bytes_per_s=port)
                    yield env.all_of([compute, moved])
                else:
                    yield compute
            self.count("function_calls")

        return run

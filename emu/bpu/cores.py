"""The BPU cores: a priority task queue whose tasks run a model function call by function call.

A model task is the model's layer groups, split into function calls (FCs) as the compiler's
`max_time_per_fc` does (`timing.split_function_calls`). Each FC is one stage.

Scheduling follows J5's driver (`shared/calibration/j5_bpu.md`): software priority queues
(priority, then customId, then arrival) feed each core's two hardware FC FIFOs, a low and a
high one of `bpu.fc_fifo_depth` entries; priority 255 goes to the high FIFO, which the core
serves first, so a waiting 255 task takes the core at the running task's next FC boundary.
Every other task goes through the low FIFO: the driver keeps it filled with the running
task's next FCs, so a task of higher priority that arrives meanwhile runs only after the
FCs already queued there, at most `fc_fifo_depth` of them (with J5's 1024, after the
running task, unless that task has more FCs left than the FIFO holds). Nothing overtakes
inside an FC; equal priorities never overtake (customId and arrival order the queue).

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
from emu.soc.sched import (
    ANY_CORE,
    PRIORITY_LOWEST,
    PRIORITY_PREEMPT,
    CoreGroup,
    CoreSlot,
    Stage,
    StageBody,
    Task,
)
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
        # Per core: the running task these barriers are for, and per waiting task the
        # stage index from which it may take over (see `submit`).
        self._fifo_owner = [-1] * cfg.cores
        self._overtake_at: list[dict[int, int]] = [{} for _ in range(cfg.cores)]

    def submit(self, task: Task) -> simpy.Event:
        done = super().submit(task)
        if task.started_ps < 0 and task.priority < PRIORITY_PREEMPT:
            # Still waiting: on each core running a task it outranks, it may take over once
            # the FCs that task has in the low FIFO now have run.
            depth = self.cfg.fc_fifo_depth
            for core, running in enumerate(self._running):
                if running is None or running.priority >= task.priority \
                        or task.core not in (ANY_CORE, core):
                    continue
                if self._fifo_owner[core] != running.seq:
                    self._fifo_owner[core], self._overtake_at[core] = running.seq, {}
                queued = min(depth, len(running.stages) - running.next_stage - 1)
                self._overtake_at[core][task.seq] = running.next_stage + 1 + queued
        return done

    def _preempt_wanted(self, core: int, task: Task) -> bool:
        """Whether a waiting task takes this core from `task` at this FC boundary: a
        priority-255 one (the high FIFO), or one of higher priority whose turn in the low
        FIFO has come."""
        if task.priority >= PRIORITY_PREEMPT:
            return False
        barriers = self._overtake_at[core] if self._fifo_owner[core] == task.seq else {}
        for t in self._pending:
            if t.core not in (ANY_CORE, core) or t.priority <= task.priority:
                continue
            if t.priority >= PRIORITY_PREEMPT or task.next_stage >= barriers.get(t.seq,
                                                                                  len(task.stages)):
                return True
        return False

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
            spans = timing.split_function_calls(layers, self.cfg, self.ddr.cfg,
                                                max_time_per_fc_ps, resident_weights)
        calls = timing.function_calls(layers, self.cfg, self.ddr.cfg, spans, resident_weights)
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
                # One flow for loads and stores: the port's bandwidth is for both.
                yield self.ddr.alongside(cost.compute_ps, cost.ddr_bytes, who,
                                         written=cost.written_bytes, cap_bytes_per_s=port)
            self.count("function_calls")

        return run

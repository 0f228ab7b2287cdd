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

A task keeps its feature maps in the core's SRAM across its FC boundaries
(`timing.function_calls`). When it gives the core up to a preemptor, its maps then live
(the FC's `spill_bytes`) stay in the SRAM as far as the waiting tasks that outrank it leave
room: the core first writes to DDR, at its port, only the bytes by which those maps and
the most SRAM any of those tasks' remaining FCs take (`sram_bytes`) exceed
`bpu.sram_bytes`, and the task reads them back when it resumes (counted as `spill_bytes`
and `reload_bytes`). A task that resumes on the other core, whose SRAM holds none of its
maps, writes the rest out and reads all of them back then. Tasks that arrive while it
waits and outrank it are not foreseen: they find the room the first ones left.

Inside an FC the layer groups run in order: the layer group's fixed cost (and the FC's,
before its first one), then its compute and its DDR traffic side by side; the layer group
ends when both are done. The DDR bytes go through the shared DDR model, so a layer group
slows down when other requesters (the DSPs, the CPUs, the other core) load the DDR.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class FcStage(Stage):
    """A function call as a stage: `spill_bytes` of feature maps are on chip at its end,
    and its feature maps on chip take at most `sram_bytes`."""

    spill_bytes: int = 0
    sram_bytes: int = 0


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
        # Per preempted task (seq): the core whose SRAM it left and the bytes it wrote out.
        self._parked: dict[int, tuple[int, int]] = {}

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
        spans: Sequence[timing.Span] | None = None, core: int = ANY_CORE,
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
        stages: list[Stage] = [FcStage(f"{name} {call.name}", self._call_body(call),
                                       call.spill_bytes, call.sram_bytes) for call in calls]
        return Task(name, stages, priority=priority, custom_id=custom_id, core=core)

    @staticmethod
    def _live_bytes(task: Task) -> int:
        """The feature maps on chip at the boundary where `task` stopped."""
        stage = task.stages[task.next_stage - 1] if task.next_stage else None
        return stage.spill_bytes if isinstance(stage, FcStage) else 0

    @staticmethod
    def _sram_need(task: Task) -> int:
        """The most SRAM the FCs `task` has still to run take."""
        return max((s.sram_bytes for s in task.stages[task.next_stage:]
                    if isinstance(s, FcStage)), default=0)

    def _spill(self, slot: CoreSlot, nbytes: int, *, write: bool) -> simpy.Event:
        self.count("spill_bytes" if write else "reload_bytes", nbytes)
        return self.ddr.transfer(nbytes, slot.name, write=write,
                                 cap_bytes_per_s=self.cfg.ddr_port_bytes_per_s)

    def _switched_out(self, slot: CoreSlot, task: Task) -> Generator[simpy.Event, Any, None]:
        live = self._live_bytes(task)
        need = max((self._sram_need(t) for t in self._pending
                    if t.priority > task.priority and t.core in (ANY_CORE, slot.index)),
                   default=0)
        spill = min(live, max(0, live + need - self.cfg.sram_bytes))
        self._parked[task.seq] = (slot.index, spill)
        if spill:
            yield self._spill(slot, spill, write=True)

    def _resumed(self, slot: CoreSlot, task: Task) -> Generator[simpy.Event, Any, None]:
        live = self._live_bytes(task)
        core, spilled = self._parked.pop(task.seq, (slot.index, live))
        if core != slot.index and live > spilled:
            yield self._spill(slot, live - spilled, write=True)
        reload = spilled if core == slot.index else live
        if reload:
            yield self._spill(slot, reload, write=False)

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

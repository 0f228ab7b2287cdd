"""Task queues in front of a group of identical cores (BPU cores, vDSP cores, A55 cores).

The board's runtimes order waiting tasks by priority (0-255, higher first), then by a
user-supplied custom id (smaller first: a timestamp or frame number), then by arrival. A
task may be pinned to one core or take any free one; when several cores are free, the
lowest-numbered one takes it. Priority 255 preempts: a running task of lower priority
gives up its core at its next stage boundary (a layer on the BPU, a tile on the DSP) when
a 255 task is waiting for that core, and resumes later from the stage where it stopped.

A task is a sequence of stages. A stage is either a fixed duration in picoseconds or a
SimPy generator function that does the work (waits for DMA, DDR, ...). A long stage may
offer preemption points of its own (between the tiles of a DSP operator): it asks
`slot.preempt_requested()` and, when a preemptor waits, stops early and returns the body
that continues its work; the task then yields the core as at a stage boundary (a core
group may charge for saving the task's state then, and restoring it when the task
resumes: `_switched_out`, `_resumed`). Submitting
returns at once; the task's `done` event fires when its last stage ends, or when a stage
fails: with a `TaskError`, which the work raises for a failure it announces, or with any
other exception (the task keeps the message in `error`, naming an unexpected exception's
type; the core goes on).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from emu.errors import TaskError
from emu.soc.component import Component
from emu.soc.sim import Sim
from emu.soc.trace import Flow, TraceRecorder

PRIORITY_LOWEST = 0
PRIORITY_HIGHEST = 255
PRIORITY_PREEMPT = PRIORITY_HIGHEST
ANY_CORE = -1

StageBody = Callable[["CoreSlot"], Generator[simpy.Event, Any, "StageBody | None"]]


def _described(exc: Exception) -> str:
    """An unexpected exception as a task's error: its type and its first line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


@dataclass(frozen=True)
class Stage:
    """One uninterruptible piece of a task."""

    name: str
    body: int | StageBody


@dataclass
class Task:
    """Work submitted to a core group; the fields below `stages` are filled by the queue."""

    name: str
    stages: list[Stage]
    priority: int = PRIORITY_LOWEST
    custom_id: int = 0
    core: int = ANY_CORE
    seq: int = -1
    submitted_ps: int = -1
    started_ps: int = -1
    finished_ps: int = -1
    ran_on: list[int] = field(default_factory=list)
    busy_ps: int = 0  # time on a core, summed over the pieces a preemption cut it into
    preemptions: int = 0
    next_stage: int = 0
    error: str | None = None
    cancelled: bool = False  # `CoreGroup.cancel`: stop at the next stage boundary
    done: simpy.Event | None = None
    flow_id: int = 0  # the trace flow from the API call that submitted it (0: none)

    def __post_init__(self) -> None:
        # A stage that stops early is replaced by its continuation, so keep a private list.
        self.stages = list(self.stages)

    @property
    def finished(self) -> bool:
        return self.finished_ps >= 0

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def pending_ps(self) -> int:
        """Time in the queue, before it started and between preempted pieces."""
        return self.finished_ps - self.submitted_ps - self.busy_ps

    def order_key(self) -> tuple[int, int, int]:
        return (-self.priority, self.custom_id, self.seq)


class CoreSlot:
    """What a running stage sees of the core it runs on."""

    def __init__(self, group: CoreGroup, index: int) -> None:
        self.group = group
        self.index = index
        self.env = group.env
        self.track = group.recorder.track(f"{group.path}.core{index}")

    @property
    def name(self) -> str:
        return f"{self.group.path}.core{self.index}"

    def preempt_requested(self) -> bool:
        """Whether a priority-255 task waits for this core (a stage may stop early)."""
        task = self.group._running[self.index]
        return task is not None and self.group._preempt_wanted(self.index, task)


class CoreGroup(Component):
    """N identical cores behind one priority queue."""

    def __init__(
        self, name: str, parent: Component | None, env: Sim, cores: int,
        recorder: TraceRecorder, start_overhead_ps: int = 0,
    ) -> None:
        super().__init__(name, parent)
        if cores < 1:
            raise ValueError(f"{self.path}: needs at least one core, got {cores}")
        self.env = env
        self.recorder = recorder
        self.start_overhead_ps = start_overhead_ps
        self.slots = [CoreSlot(self, i) for i in range(cores)]
        self._running: list[Task | None] = [None] * cores
        self._pending: list[Task] = []
        self._seq = 0
        self.busy_ps = [0] * cores

    @property
    def cores(self) -> int:
        return len(self.slots)

    def submit(self, task: Task) -> simpy.Event:
        """Queue `task`; returns its completion event at once."""
        if not PRIORITY_LOWEST <= task.priority <= PRIORITY_HIGHEST:
            raise ValueError(f"{self.path}: priority {task.priority} outside 0..255")
        if task.core != ANY_CORE and not 0 <= task.core < self.cores:
            raise ValueError(f"{self.path}: no core {task.core} (cores 0..{self.cores - 1})")
        if task.seq >= 0:
            raise ValueError(f"{self.path}: task {task.name!r} was already submitted")
        task.seq = self._seq
        self._seq += 1
        task.submitted_ps = self.env.now
        task.done = self.env.event()
        self._pending.append(task)
        self.count("tasks_submitted")
        self._dispatch()
        return task.done

    def queued(self) -> int:
        return len(self._pending)

    def cancel(self, task: Task) -> None:
        """Stop `task`: a waiting one leaves the queue now, a running one at its next stage
        boundary (a stage is never cut); either way its `done` fires then, with
        `cancelled` set. A finished task is left as it is."""
        if task.finished or task.seq < 0:
            return
        task.cancelled = True
        if task in self._pending:
            self._pending.remove(task)
            task.finished_ps = self.env.now
            self.count("tasks_cancelled")
            assert task.done is not None
            task.done.succeed(task)

    def _best_for(self, core: int) -> Task | None:
        eligible = [t for t in self._pending if t.core in (ANY_CORE, core)]
        return min(eligible, key=Task.order_key) if eligible else None

    def _accepts(self, core: int) -> bool:
        """Whether `core` may take a task now; subclasses model cores that can be stopped."""
        return True

    def _dispatch(self) -> None:
        for core, running in enumerate(self._running):
            if running is None and self._accepts(core):
                task = self._best_for(core)
                if task is not None:
                    self._pending.remove(task)
                    self._running[core] = task
                    self.env.process(self._run(core, task))

    def _preempt_wanted(self, core: int, task: Task) -> bool:
        if task.priority >= PRIORITY_PREEMPT:
            return False
        return any(
            t.priority >= PRIORITY_PREEMPT and t.core in (ANY_CORE, core) for t in self._pending
        )

    def _switched_out(self, slot: CoreSlot, task: Task) -> Generator[simpy.Event, Any, None]:
        """What the core does when `task` gives it up to a preemptor, before that one
        starts: nothing here (the BPU saves the task's on-chip feature maps)."""
        yield from ()

    def _resumed(self, slot: CoreSlot, task: Task) -> Generator[simpy.Event, Any, None]:
        """What the core does before it goes on with a preempted `task`: nothing here."""
        yield from ()

    def _run(self, core: int, task: Task) -> Generator[simpy.Event, Any, None]:
        slot = self.slots[core]
        began = self.env.now
        if task.started_ps < 0:
            task.started_ps = began
        task.ran_on.append(core)
        if self.start_overhead_ps:
            yield self.env.timeout(self.start_overhead_ps)
        if task.preemptions:
            yield from self._resumed(slot, task)
        while task.next_stage < len(task.stages):
            stage = task.stages[task.next_stage]
            stage_start = self.env.now
            rest: StageBody | None = None
            try:
                if isinstance(stage.body, int):
                    yield self.env.timeout(stage.body)
                else:
                    rest = yield from stage.body(slot)
            except Exception as exc:  # any failure of the work is the task's
                # A TaskError is a failure the work announces (bad arguments); anything
                # else (a buffer freed under the work, a bug) fails the task the same way,
                # naming the exception, rather than leaving this core busy for good.
                task.error = str(exc) if isinstance(exc, TaskError) else _described(exc)
                self.count("tasks_failed")
                break
            finally:
                if stage.name != task.name:
                    slot.track.slice(stage.name, stage_start, self.env.now, task=task.name)
            if rest is not None:
                task.stages[task.next_stage] = Stage(stage.name, rest)
            else:
                task.next_stage += 1
            if task.cancelled:
                break
            if task.next_stage < len(task.stages) and self._preempt_wanted(core, task):
                task.preemptions += 1
                self.count("preemptions")
                yield from self._switched_out(slot, task)
                break
        end = self.env.now
        self.busy_ps[core] += end - began
        task.busy_ps += end - began
        again = (task.error is None and not task.cancelled
                 and task.next_stage < len(task.stages))
        flow = Flow(task.flow_id, into=True, onward=again) if task.flow_id else None
        slot.track.slice(task.name, began, end, flow=flow, priority=task.priority,
                         custom_id=task.custom_id)
        self._running[core] = None
        if again:
            self._pending.append(task)
        else:
            task.finished_ps = end
            self.count("tasks_cancelled" if task.cancelled else "tasks_done")
            assert task.done is not None
            task.done.succeed(task)
        self._dispatch()

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        now = self.env.now
        out["busy_ps"] = list(self.busy_ps)
        out["utilisation"] = [round(b / now, 6) if now else 0.0 for b in self.busy_ps]
        return out

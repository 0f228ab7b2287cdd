"""A plain-Python, obviously-correct reference of the core-group task queue.

No SimPy: a loop over instants. At each instant, first the stages that end there (cores in
index order), then the arrivals, then idle cores (in index order) take the best eligible
task. Inputs are chosen so that arrivals and stage ends never coincide, which makes the
order within an instant irrelevant to the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ANY = -1
PREEMPT = 255


@dataclass
class RefTask:
    name: str
    arrival_ps: int
    stages_ps: list[int]
    priority: int = 0
    custom_id: int = 0
    core: int = ANY
    seq: int = 0
    next_stage: int = 0
    started_ps: int = -1
    finished_ps: int = -1
    ran_on: list[int] = field(default_factory=list)
    preemptions: int = 0


def simulate(tasks: list[RefTask], cores: int, overhead_ps: int = 0) -> list[RefTask]:
    arrivals = sorted(tasks, key=lambda t: (t.arrival_ps, t.seq))
    pending: list[RefTask] = []
    running: list[RefTask | None] = [None] * cores
    stage_end: list[int] = [0] * cores
    done = 0
    i = 0
    while done < len(tasks):
        times = [stage_end[c] for c in range(cores) if running[c] is not None]
        if i < len(arrivals):
            times.append(arrivals[i].arrival_ps)
        now = min(times)
        for c in range(cores):
            task = running[c]
            if task is None or stage_end[c] != now:
                continue
            task.next_stage += 1
            if task.next_stage == len(task.stages_ps):
                task.finished_ps = now
                running[c] = None
                done += 1
            elif task.priority < PREEMPT and any(
                p.priority >= PREEMPT and p.core in (ANY, c) for p in pending
            ):
                task.preemptions += 1
                pending.append(task)
                running[c] = None
            else:
                stage_end[c] = now + task.stages_ps[task.next_stage]
        while i < len(arrivals) and arrivals[i].arrival_ps == now:
            pending.append(arrivals[i])
            i += 1
        for c in range(cores):
            if running[c] is not None:
                continue
            eligible = [t for t in pending if t.core in (ANY, c)]
            if not eligible:
                continue
            task = min(eligible, key=lambda t: (-t.priority, t.custom_id, t.seq))
            pending.remove(task)
            running[c] = task
            if task.started_ps < 0:
                task.started_ps = now
            task.ran_on.append(c)
            if task.next_stage == len(task.stages_ps):
                # A task with no stages still holds the core for its start overhead.
                stage_end[c] = now + overhead_ps
                task.next_stage -= 1
                task.stages_ps = [*task.stages_ps, 0]
            else:
                stage_end[c] = now + overhead_ps + task.stages_ps[task.next_stage]
    return tasks

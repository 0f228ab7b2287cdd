"""DES throughput: tasks with mixed priorities through two cores, per wall second.

The same task set is run through `emu.soc.sched.CoreGroup` (SimPy) and through the plain
Python reference scheduler of the tests (a hand-written event loop, no SimPy); both must
give the same schedule, and both rates are printed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu.soc.component import Component
from emu.soc.sched import ANY_CORE, CoreGroup, Stage, Task
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder
from tests.soc.sched_reference import RefTask, simulate

TASKS = 20_000
STAGES = 4


def _specs(seed: int) -> list[tuple[str, int, list[int], int, int, int]]:
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.integers(0, TASKS * 2 * 10**6, TASKS))
    out = []
    for k in range(TASKS):
        stages = [int(x) for x in rng.integers(1, 10**6, STAGES)]
        priority = int(rng.choice([0, 10, 100, 255], p=[0.4, 0.3, 0.2, 0.1]))
        core = int(rng.integers(0, 2)) if rng.random() < 0.2 else ANY_CORE
        out.append((f"t{k}", int(arrivals[k]), stages, priority, int(rng.integers(0, 8)), core))
    return out


def _run_emu(specs) -> tuple[float, list[int]]:
    env = Sim()
    group = CoreGroup("bpu", Component("soc", None), env, 2, TraceRecorder(False))
    tasks = []

    def feeder():
        for name, at, stages, priority, custom, core in specs:
            if at > env.now:
                yield env.timeout(at - env.now)
            task = Task(name, [Stage("s", d) for d in stages], priority, custom, core)
            tasks.append(task)
            group.submit(task)

    env.process(feeder())
    start = time.perf_counter()
    env.run()
    return time.perf_counter() - start, [t.finished_ps for t in tasks]


def _run_reference(specs) -> tuple[float, list[int]]:
    tasks = [RefTask(name, at, list(stages), priority, custom, core, seq=i)
             for i, (name, at, stages, priority, custom, core) in enumerate(specs)]
    start = time.perf_counter()
    simulate(tasks, 2)
    return time.perf_counter() - start, [t.finished_ps for t in tasks]


def main() -> None:
    specs = _specs(seed=1)
    emu_s, emu_done = _run_emu(specs)
    ref_s, ref_done = _run_reference(specs)
    same = emu_done == ref_done
    print(f"DES: {TASKS} tasks x {STAGES} stages, mixed priorities, 2 cores")
    print(f"  emu (SimPy CoreGroup):       {TASKS / emu_s:12,.0f} tasks/s  ({emu_s:.3f} s)")
    print(f"  plain-Python reference loop: {TASKS / ref_s:12,.0f} tasks/s  ({ref_s:.3f} s)")
    print(f"  ratio emu/reference: {ref_s / emu_s:.2f}x; identical schedules: {same}")


if __name__ == "__main__":
    main()

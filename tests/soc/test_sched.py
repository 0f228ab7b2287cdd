from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

from emu.soc.component import Component
from emu.soc.sched import ANY_CORE, CoreGroup, CoreSlot, Stage, Task
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder
from tests.soc.sched_reference import RefTask, simulate


def _group(cores: int = 2, overhead_ps: int = 0) -> tuple[simpy.Environment, CoreGroup]:
    env = Sim()
    root = Component("soc", None)
    return env, CoreGroup("bpu", root, env, cores, TraceRecorder(True), overhead_ps)


def _submit_at(env, group, at_ps: int, task: Task) -> None:
    def proc() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(at_ps)
        group.submit(task)

    env.process(proc())


def _task(name, stages_ps, **kw) -> Task:
    return Task(name, [Stage(f"{name}.s{i}", d) for i, d in enumerate(stages_ps)], **kw)


def test_timeline_of_mixed_priorities_on_two_cores():
    env, group = _group(cores=2, overhead_ps=10)
    a = _task("a", [100, 100, 100], priority=0)
    b = _task("b", [300], priority=0)
    c = _task("c", [50], priority=10, custom_id=5)
    d = _task("d", [50], priority=10, custom_id=1)
    e = _task("e", [40, 40], priority=255)
    pinned = _task("p", [20], priority=200, core=1)
    for at, task in ((0, a), (0, b), (5, c), (6, d), (150, e), (155, pinned)):
        _submit_at(env, group, at, task)
    env.run()
    got = {t.name: (t.started_ps, t.finished_ps, t.ran_on, t.preemptions)
           for t in (a, b, c, d, e, pinned)}
    assert got == {
        # a: core 0 at 0 (+10 overhead); stage ends at 110, 210: e (255) waits for a core,
        # so a yields at 210; it resumes on core 0 at 360, after d, while c runs on core 1:
        # 360+10+100.
        "a": (0, 470, [0, 0], 1),
        # b: core 1 at 0, one uninterruptible stage to 310.
        "b": (0, 310, [1], 0),
        # e: arrives at 150, takes core 0 when a yields at 210: 210+10+40+40.
        "e": (210, 300, [0], 0),
        # d before c: equal priority, smaller custom id first. Core 0 frees at 300.
        "d": (300, 360, [0], 0),
        # p is pinned to core 1, priority 200 beats c and a there: 310+10+20.
        "p": (310, 340, [1], 0),
        "c": (340, 400, [1], 0),
    }
    assert group.counters["preemptions"] == 1
    assert group.counters["tasks_done"] == 6


def test_preemptor_does_not_preempt_when_a_core_is_free():
    env, group = _group(cores=2)
    low = _task("low", [100, 100])
    high = _task("high", [10], priority=255)
    _submit_at(env, group, 0, low)
    _submit_at(env, group, 50, high)
    env.run()
    assert (low.finished_ps, low.preemptions, high.started_ps, high.ran_on) == (200, 0, 50, [1])


def test_a_255_task_does_not_preempt_another_255_task():
    env, group = _group(cores=1)
    first = _task("first", [100, 100], priority=255)
    second = _task("second", [10], priority=255)
    _submit_at(env, group, 0, first)
    _submit_at(env, group, 50, second)
    env.run()
    assert (first.finished_ps, second.started_ps, first.preemptions) == (200, 200, 0)


def test_stage_bodies_are_generators_and_see_their_core():
    env, group = _group(cores=2)
    seen: list[tuple[int, int]] = []

    def body(slot: CoreSlot) -> Generator[simpy.Event, Any, None]:
        yield slot.env.timeout(7)
        seen.append((slot.index, slot.env.now))

    group.submit(Task("t", [Stage("s", body)], core=1))
    env.run()
    assert seen == [(1, 7)]


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (Task("bad", [], priority=256), "priority 256"),
        (Task("bad", [], priority=-1), "priority -1"),
        (Task("bad", [], core=2), "no core 2"),
    ],
)
def test_submit_rejects_bad_tasks(task, message):
    _, group = _group(cores=2)
    with pytest.raises(ValueError, match=message):
        group.submit(task)
    assert group.queued() == 0


def test_submitting_the_same_task_twice_is_refused():
    _env, group = _group()
    task = _task("t", [5])
    group.submit(task)
    with pytest.raises(ValueError, match="already submitted"):
        group.submit(task)


@pytest.mark.parametrize("seed", range(60))
def test_matches_the_plain_reference_on_random_task_sets(seed):
    rng = np.random.default_rng(seed)
    cores = int(rng.integers(1, 4))
    overhead = int(rng.integers(0, 1000))
    n = int(rng.integers(1, 25))
    specs = []
    for k in range(n):
        stages = [int(x) for x in rng.integers(1, 10**9, size=int(rng.integers(0, 5)))]
        priority = int(rng.choice([0, 5, 100, 254, 255]))
        core = int(rng.integers(-1, cores)) if rng.random() < 0.3 else ANY_CORE
        specs.append((f"t{k}", int(rng.integers(0, 2 * 10**9)), stages, priority,
                      int(rng.integers(0, 4)), core))
    env, group = _group(cores=cores, overhead_ps=overhead)
    ours = []
    for name, at, stages, priority, custom, core in sorted(specs, key=lambda s: s[1]):
        task = _task(name, stages, priority=priority, custom_id=custom, core=core)
        ours.append(task)
        _submit_at(env, group, at, task)
    env.run()
    refs = [RefTask(name, at, list(stages), priority, custom, core, seq=i)
            for i, (name, at, stages, priority, custom, core)
            in enumerate(sorted(specs, key=lambda s: s[1]))]
    simulate(refs, cores, overhead)
    for task, ref in zip(ours, refs, strict=True):
        assert (task.started_ps, task.finished_ps, task.ran_on, task.preemptions) == (
            ref.started_ps, ref.finished_ps, ref.ran_on, ref.preemptions), task.name

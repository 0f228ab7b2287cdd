"""hbDNN and hbSys calls from several host threads of one session, as a state machine.

Each rule queues one action (allocate / free / flush buffers, infer with random priority,
core, customId and `more`, wait with a timeout, release, a task-done callback, a misuse) for
one of the worker threads; the `run` rule spawns the workers, which run their actions in
the order they were queued (a turn passes from action to action, so calls that change the
shared task count happen one at a time; a wait hands the turn on before it blocks, so the
other threads go on while it waits), and simulates until they are done.

The model predicts every status code when the call returns: the 32-task limit from the
tasks alive (not released, or released while running and not stopped yet), MEM_IN_USE from
the tasks that still pin a buffer (queued or running), INVALID_TASK_HANDLE for released
tasks. A task that finished writes exactly `CompiledModel.run` of its input, and simulated
time never goes backwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import emu
from emu.nn import compiler
from emu.runtime import hbdnn as dnn
from emu.runtime import session as session_module
from emu.runtime.hbsys import (
    HB_SYS_INVALID_ARGUMENT,
    HB_SYS_INVALID_MEMORY,
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_IN_USE,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
    hbSysMem,
)
from emu.soc.config import load_config
from tests.nn.nets import segmented

WORKERS = 3
OVERRIDES = ["cpu.api_call_ps=1000", "bpu.task_overhead_ps=0"]
SOC = load_config("j5", None, OVERRIDES).soc
MODEL = compiler.compile_model(segmented(size=8, channels=4, middle=()), "tiny",
                               compiler.CompileOptions(calib_random=1), SOC)
DATA = compiler.dumps([MODEL])
(INPUT,) = MODEL.inputs
(OUTPUT,) = MODEL.outputs


@dataclass
class Slot:
    """An input and an output buffer of one thread; the input holds one image for good."""

    inp: hbSysMem
    out: hbSysMem
    image: np.ndarray
    want: np.ndarray
    live: dict[str, bool] = field(default_factory=lambda: {"inp": True, "out": True})


@dataclass
class Job:
    """A task handle as the model sees it."""

    handle: Any
    slots: list[Slot]
    open: bool  # `more` was set and the chain is not closed yet
    released: bool = False
    released_open: bool = False  # released before it ever started: it never pins again
    callbacks: int = 0
    callbacks_set_ps: list[int] = field(default_factory=list)  # when each was set

    def pins(self) -> bool:
        """Whether it still holds its buffers (queued, running, or an open chain)."""
        return not self.released_open and self.handle.finished_ps < 0

    def holds_slot(self) -> bool:
        """Whether it still counts against the 32 tasks."""
        if not self.released:
            return True
        return not self.released_open and not self.handle.completed.processed


class Machine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.sess = emu.Session(overrides=OVERRIDES)
        self.sess.__enter__()
        rc, self.packed = dnn.hbDNNInitializeFromDDR([DATA], [len(DATA)])
        assert rc == 0
        rc, self.handle = dnn.hbDNNGetModelHandle(self.packed, "tiny")
        assert rc == 0
        self.slots: list[list[Slot]] = [[] for _ in range(WORKERS)]
        self.jobs: list[list[Job]] = [[] for _ in range(WORKERS)]
        self.queue: list[tuple[int, str, tuple[Any, ...]]] = []
        self.fired: list[tuple[Any, int, int]] = []
        self.runs = 0
        self.last_now = self.sess.now_ps
        self.rng = np.random.default_rng(0)
        for k in range(WORKERS):  # two slots each to start with
            for _ in range(2):
                self.do_alloc(k, None)

    def teardown(self) -> None:
        try:
            if getattr(self, "sess", None) is None or self.sess.closed:
                return
            self.run()  # what is still queued
            for jobs in self.jobs:
                for job in jobs:
                    if job.released:
                        continue
                    if job.open:
                        assert dnn.hbDNNReleaseTask(job.handle) == 0
                        continue
                    assert dnn.hbDNNWaitTaskDone(job.handle, 0) == 0
                    self.check_outputs(job)
                    assert dnn.hbDNNReleaseTask(job.handle) == 0
            emu.sleep_ms(1)
            self.sess.run()
            self.check_callbacks()
            assert dnn.hbDNNRelease(self.packed) == 0
        finally:
            self.sess.__exit__(None, None, None)

    # --- rules: queue an action -------------------------------------------------------------

    def post(self, k: int, kind: str, *args: Any) -> None:
        self.queue.append((k, kind, args))
        if len(self.queue) >= 8:  # the threads run at least every few rules
            self.run()

    @rule(k=st.integers(0, WORKERS - 1))
    def alloc(self, k: int) -> None:
        self.post(k, "alloc")

    @rule(k=st.integers(0, WORKERS - 1), j=st.integers(0, 7), part=st.sampled_from(
        ["inp", "out"]))
    def free(self, k: int, j: int, part: str) -> None:
        self.post(k, "free", j, part)

    @rule(k=st.integers(0, WORKERS - 1), j=st.integers(0, 7))
    def flush(self, k: int, j: int) -> None:
        self.post(k, "flush", j)

    @rule(k=st.integers(0, WORKERS - 1), j=st.integers(0, 7),
          priority=st.sampled_from([0, 1, 100, 254, 255]),
          core=st.sampled_from([dnn.HB_BPU_CORE_ANY, dnn.HB_BPU_CORE_0, dnn.HB_BPU_CORE_1]),
          custom_id=st.integers(-3, 3), more=st.booleans(),
          burst=st.sampled_from([1, 1, 2, 12, 34]))
    def infer(self, k: int, j: int, priority: int, core: int, custom_id: int, more: bool,
              burst: int) -> None:
        for _ in range(burst):
            self.post(k, "infer", j, priority, core, custom_id, more)

    @rule(k=st.integers(0, WORKERS - 1), i=st.integers(0, 40),
          timeout=st.sampled_from([0, -1, 0.001, 0.02, 0.5]))
    def wait(self, k: int, i: int, timeout: float) -> None:
        self.post(k, "wait", i, timeout)

    @rule(k=st.integers(0, WORKERS - 1), i=st.integers(0, 40))
    def release(self, k: int, i: int) -> None:
        self.post(k, "release", i)

    @rule(k=st.integers(0, WORKERS - 1), i=st.integers(0, 40))
    def set_callback(self, k: int, i: int) -> None:
        self.post(k, "callback", i)

    @rule(k=st.integers(0, WORKERS - 1), kind=st.sampled_from(
        ["priority", "core", "ctrl", "handle", "task", "timeout", "callable", "mem", "index"]))
    def misuse(self, k: int, kind: str) -> None:
        self.post(k, "misuse", kind)

    @rule()
    def run(self) -> None:
        actions, self.queue = self.queue, []
        if not actions:
            return
        env = self.sess.soc.env
        turns = [env.event() for _ in range(len(actions) + 1)]
        turns[0].succeed()
        self.runs += 1
        for k in range(WORKERS):
            mine = [(n, a) for n, a in enumerate(actions) if a[0] == k]
            if mine:
                self.sess.spawn(self.worker, k, mine, turns, name=f"w{self.runs}.{k}")
        self.sess.run()
        assert all(t.triggered for t in turns)

    # --- the workers ------------------------------------------------------------------------

    def worker(self, k: int, mine: list[tuple[int, tuple[int, str, tuple[Any, ...]]]],
               turns: list[Any]) -> None:
        thread = session_module.current().thread()
        last = thread.now_ps
        for n, (_, kind, args) in mine:
            thread.wait(turns[n], None, "turn")
            getattr(self, f"do_{kind}")(k, *args, turns[n + 1])
            if not turns[n + 1].triggered:
                turns[n + 1].succeed()
            assert thread.now_ps >= last
            last = thread.now_ps

    def slot(self, k: int, j: int) -> Slot | None:
        return self.slots[k][j % len(self.slots[k])] if self.slots[k] else None

    def job(self, k: int, i: int) -> Job | None:
        return self.jobs[k][i % len(self.jobs[k])] if self.jobs[k] else None

    def alive(self) -> int:
        return sum(job.holds_slot() for jobs in self.jobs for job in jobs)

    def do_alloc(self, k: int, _turn: Any) -> None:
        inp, out = hbSysMem(), hbSysMem()
        assert hbSysAllocCachedMem(inp, _nbytes(INPUT)) == 0
        assert hbSysAllocCachedMem(out, _nbytes(OUTPUT)) == 0
        image = self.rng.standard_normal(INPUT.shape).astype(np.float32)
        assert inp.virAddr is not None and out.virAddr is not None
        inp.virAddr[: image.nbytes] = image.view(np.uint8).reshape(-1)
        out.virAddr[:] = 0
        assert hbSysFlushMem(inp, HB_SYS_MEM_CACHE_CLEAN) == 0
        want = np.ascontiguousarray(MODEL.run({INPUT.name: image})[OUTPUT.name])
        self.slots[k].append(Slot(inp, out, image, want))

    def do_free(self, k: int, j: int, part: str, _turn: Any) -> None:
        slot = self.slot(k, j)
        if slot is None:
            assert hbSysFreeMem(hbSysMem()) == HB_SYS_INVALID_MEMORY
            return
        mem = getattr(slot, part)
        rc = hbSysFreeMem(mem)
        pinned = any(job.pins() and slot in job.slots for jobs in self.jobs for job in jobs)
        if not slot.live[part]:
            assert rc == HB_SYS_INVALID_MEMORY
        elif pinned:
            assert rc == HB_SYS_MEM_IN_USE
        else:
            assert rc == 0
            slot.live[part] = False

    def do_flush(self, k: int, j: int, _turn: Any) -> None:
        slot = self.slot(k, j)
        if slot is None:
            return
        rc = hbSysFlushMem(slot.out, HB_SYS_MEM_CACHE_CLEAN)
        assert rc == (0 if slot.live["out"] else HB_SYS_INVALID_MEMORY)

    def tensors(self, slot: Slot) -> tuple[list[Any], list[Any]]:
        pair = []
        for mem, props_fn in ((slot.inp, dnn.hbDNNGetInputTensorProperties),
                              (slot.out, dnn.hbDNNGetOutputTensorProperties)):
            rc, props = props_fn(self.handle, 0)
            assert rc == 0
            tensor = dnn.hbDNNTensor()
            tensor.properties = props
            tensor.sysMem[0] = mem
            pair.append([tensor])
        return pair[0], pair[1]

    def do_infer(self, k: int, j: int, priority: int, core: int, custom_id: int, more: bool,
                 _turn: Any) -> None:
        slot = self.slot(k, j)
        if slot is None:
            return
        ins, outs = self.tensors(slot)
        ctrl = dnn.hbDNNInferCtrlParam()
        assert dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl) == 0
        ctrl.priority, ctrl.bpuCoreId, ctrl.customId, ctrl.more = priority, core, custom_id, \
            int(more)
        # a chain this thread left open takes the model (and `more` says whether it stays
        # open); otherwise a new task
        chain = next((job for job in self.jobs[k] if job.open), None)
        rc, task = dnn.hbDNNInfer(outs, ins, self.handle, ctrl,
                                  chain.handle if chain is not None else None)
        alive = self.alive()
        if not all(slot.live.values()):
            assert (rc, task) == (dnn.HB_DNN_INVALID_ARGUMENT, None)
        elif chain is not None:
            assert rc == 0 and task is chain.handle
            chain.slots.append(slot)
            chain.open = more
        elif alive >= dnn.MAX_TASKS:
            assert alive == dnn.MAX_TASKS
            assert (rc, task) == (dnn.HB_DNN_TASK_NUM_EXCEED_LIMIT, None)
        else:
            assert rc == 0 and isinstance(task, dnn.hbDNNTask)
            self.jobs[k].append(Job(task, [slot], open=more))

    def check_outputs(self, job: Job) -> None:
        assert job.handle.finished_ps >= 0 and job.handle.finished_ps <= self.sess.now_ps
        for slot in job.slots:
            if slot.live["out"]:
                got = slot.out.virAddr[: slot.want.nbytes].view(np.float32)
                assert np.array_equal(got.reshape(slot.want.shape), slot.want)

    def do_wait(self, k: int, i: int, timeout: float, turn: Any) -> None:
        job = self.job(k, i)
        if job is None:
            return
        if job.open and timeout <= 0:
            timeout = 0.001  # nothing else closes this thread's chain: it would deadlock
        turn.succeed()  # the others go on while this thread waits
        thread = session_module.current().thread()
        start = thread.now_ps
        rc = dnn.hbDNNWaitTaskDone(job.handle, timeout)
        now = thread.now_ps
        finished = job.handle.finished_ps
        if job.released:
            assert rc == dnn.HB_DNN_INVALID_TASK_HANDLE and now == start
        elif rc == 0:
            assert 0 <= finished <= now and now == max(start, finished)
            self.check_outputs(job)
        else:
            assert rc == dnn.HB_DNN_TIMEOUT and timeout > 0
            assert now == start + round(timeout * 10**9)
            assert finished < 0 or finished >= now

    def do_release(self, k: int, i: int, _turn: Any) -> None:
        job = self.job(k, i)
        if job is None:
            return
        rc = dnn.hbDNNReleaseTask(job.handle)
        if job.released:
            assert rc == dnn.HB_DNN_INVALID_TASK_HANDLE
            return
        assert rc == 0
        job.released = True
        job.released_open = job.open
        job.open = False

    def do_callback(self, k: int, i: int, _turn: Any) -> None:
        job = self.job(k, i)
        if job is None:
            return

        def done(task: Any, code: int, userdata: Any) -> None:
            self.fired.append((task, code, self.sess.now_ps))

        rc = dnn.hbDNNSetTaskDoneCb(job.handle, done, None)
        if job.released:
            assert rc == dnn.HB_DNN_INVALID_TASK_HANDLE
        else:
            assert rc == 0
            job.callbacks += 1
            job.callbacks_set_ps.append(self.sess.now_ps)

    def do_misuse(self, k: int, kind: str, _turn: Any) -> None:
        slot = self.slot(k, 0)
        job = next((j for j in self.jobs[k] if j.released), None)
        ctrl = dnn.hbDNNInferCtrlParam()
        dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
        ins, outs = self.tensors(slot) if slot is not None else ([], [])
        if kind == "priority":
            ctrl.priority = 256
            assert dnn.hbDNNInfer(outs, ins, self.handle, ctrl) == (dnn.HB_DNN_INVALID_ARGUMENT,
                                                                    None)
        elif kind == "core":
            ctrl.bpuCoreId = 4
            assert dnn.hbDNNInfer(outs, ins, self.handle, ctrl) == (dnn.HB_DNN_INVALID_ARGUMENT,
                                                                    None)
        elif kind == "ctrl":
            assert dnn.hbDNNInfer(outs, ins, self.handle, {}) == (dnn.HB_DNN_INVALID_ARGUMENT,
                                                                  None)
        elif kind == "handle":
            assert dnn.hbDNNInfer(outs, ins, self.packed, ctrl) == (
                dnn.HB_DNN_INVALID_DNN_HANDLE, None)
        elif kind == "task":
            target = job.handle if job is not None else "task"
            assert dnn.hbDNNWaitTaskDone(target, 0) == dnn.HB_DNN_INVALID_TASK_HANDLE
            assert dnn.hbDNNReleaseTask(target) == dnn.HB_DNN_INVALID_TASK_HANDLE
        elif kind == "timeout":
            target = self.job(k, 0)
            if target is not None and not target.released:
                assert dnn.hbDNNWaitTaskDone(target.handle, "1") == dnn.HB_DNN_INVALID_ARGUMENT
        elif kind == "callable":
            target = self.job(k, 0)
            if target is not None and not target.released:
                assert dnn.hbDNNSetTaskDoneCb(target.handle, 1) == dnn.HB_DNN_INVALID_ARGUMENT
        elif kind == "mem":
            assert hbSysAllocCachedMem(hbSysMem(), 0) == HB_SYS_INVALID_ARGUMENT
            assert hbSysFreeMem("mem") == HB_SYS_INVALID_MEMORY
        elif kind == "index":
            assert dnn.hbDNNGetInputName(self.handle, 1) == (dnn.HB_DNN_INVALID_ARGUMENT, None)

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def time_goes_forward(self) -> None:
        now = self.sess.now_ps
        assert now >= self.last_now
        self.last_now = now

    @invariant()
    def the_task_count_is_the_models(self) -> None:
        assert self.alive() <= dnn.MAX_TASKS
        alive = self.alive()
        assert (self.sess.dnn.tasks_alive if self.sess.dnn else 0) == alive

    @invariant()
    def pinned_buffers_are_the_models(self) -> None:
        pool = self.sess.soc.pool
        for slots in self.slots:
            for slot in slots:
                for part in ("inp", "out"):
                    if not slot.live[part]:
                        continue
                    buf = pool.find(getattr(slot, part).phyAddr)
                    assert buf is not None
                    pins = sum(job.slots.count(slot) for jobs in self.jobs for job in jobs
                               if job.pins())
                    assert buf.users == pins

    def check_callbacks(self) -> None:
        for jobs in self.jobs:
            for job in jobs:
                calls = [f for f in self.fired if f[0] is job.handle]
                if job.handle.completed.processed:
                    assert len(calls) == job.callbacks
                    # at the completion, or at once when set on a task already done
                    assert sorted(t for _, _, t in calls) == sorted(
                        max(job.handle.finished_ps, at) for at in job.callbacks_set_ps)
                    assert all(code == 0 for _, code, _ in calls)


def _nbytes(tensor: Any) -> int:
    return int(np.prod(tensor.shape)) * np.dtype(tensor.dtype).itemsize


Machine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=20, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow])
test_hbdnn_from_several_threads = Machine.TestCase


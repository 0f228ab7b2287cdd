"""hbDSP: ARM-side RPC to the vDSP cores, with the board's names and calling convention.

    ctrl = hbDSPRpcCtrlParam()
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.rpcCmd = CMD_SOFTMAX
    rc, task = hbDSPRpc(input_mem, output_mem, ctrl)     # queued; returns at once
    rc = hbDSPWaitTaskDone(task, 0)                      # 0 or less: wait until done
    rc = hbDSPReleaseTask(task)

`input_mem` and `output_mem` are `hbSysMem` buffers of the session's pool; they cannot be
freed until the task is done. An RPC costs the calling thread the API call; the message
travels to the DSP queue and back as `emu.vdsp.rpc` models it (the relay server's hops in
relay mode, the kernel channel both ways); the operator runs on a core chosen by
`dspCoreId` (any, core 0, core 1) in the order of the priority queue (priority 0-255, 255
preempting at tile boundaries, then customId, then arrival). A task handle belongs to its
session; it is refused once released, by another session, or after its session closed.
Misuse returns an error code and changes nothing.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from emu.mem.pool import PoolBuffer
from emu.runtime import session, status
from emu.runtime.cstruct import CStruct
from emu.runtime.hbsys import buffer_of, hbSysFreeMem
from emu.runtime.host import WaitResult
from emu.soc.sched import ANY_CORE, CoreSlot, Stage, StageBody, Task
from emu.vdsp import ops

HB_DSP_CORE_ANY = 0
HB_DSP_CORE_0 = 1 << 0
HB_DSP_CORE_1 = 1 << 1

# hbDSPRpcPriority. The seeds name no values; these follow hbDNN's task priorities (seed
# 004: lowest 0, highest 255, preempting = highest), which the DSP queue shares.
HB_DSP_RPC_PRIORITY_LOWEST = 0
HB_DSP_RPC_PRIORITY_HIGHEST = 255
HB_DSP_RPC_PRIORITY_PREEMP = HB_DSP_RPC_PRIORITY_HIGHEST

# What the initialiser macro leaves in `rpcCmd`: no operator has it, so an RPC whose
# command the program forgot to set fails with HB_DSP_UNKNOWN_COMMAND instead of running
# whatever operator 0 is (the ping).
HB_DSP_RPC_CMD_NONE = -1

HB_DSP_SUCCESS = status.SUCCESS
HB_DSP_INVALID_ARGUMENT = status.define(-6200001, "hbDSP: invalid argument")
HB_DSP_INVALID_TASK_HANDLE = status.define(
    -6200002, "hbDSP: not a live task handle of this session (never returned by hbDSPRpc, "
              "released, or made in another or a closed session)")
HB_DSP_UNKNOWN_COMMAND = status.define(-6200003, "hbDSP: no operator registered for rpcCmd")
HB_DSP_CORE_OFFLINE = status.define(-6200004, "hbDSP: the requested DSP core is stopped")
HB_DSP_TIMEOUT = status.define(-6200005, "hbDSP: the task did not finish within the timeout")
HB_DSP_TASK_FAILED = status.define(
    -6200006, "hbDSP: the operator failed on the DSP (see the task's error message)")
HB_DSP_TASK_RUNNING = status.define(-6200007, "hbDSP: the task has not finished yet")
HB_DSP_WRONG_THREAD = status.define_wrong_thread(-6200008, "hbDSP")
HB_DSP_DEADLOCK = status.define(
    -6200009, "hbDSP: the task can never finish: nothing left in the simulation can run it "
              "(its DSP core is stopped, or every host thread is waiting); it stays queued")


class hbDSPRpcCtrlParam(CStruct):  # the board's struct name
    """Control of one RPC: which core, which operator, how urgent."""

    dspCoreId: int
    rpcCmd: int
    priority: int
    customId: int
    reserved1: int
    reserved2: int

    def __init__(self) -> None:
        _set_defaults(self)


def _set_defaults(param: hbDSPRpcCtrlParam) -> None:
    param.dspCoreId = HB_DSP_CORE_ANY
    param.rpcCmd = HB_DSP_RPC_CMD_NONE
    param.priority = HB_DSP_RPC_PRIORITY_LOWEST
    param.customId = 0
    param.reserved1 = 0
    param.reserved2 = 0


def HB_DSP_INITIALIZE_RPC_CTRL_PARAM(param: hbDSPRpcCtrlParam) -> int:
    """The board's initialiser macro: any core, no command (`HB_DSP_RPC_CMD_NONE`), lowest
    priority, custom id 0."""
    if not isinstance(param, hbDSPRpcCtrlParam):
        return HB_DSP_INVALID_ARGUMENT
    _set_defaults(param)
    return HB_DSP_SUCCESS


class hbDSPTask:
    """A task handle returned by hbDSPRpc."""

    def __init__(self, sess: session.Session, task: Task, completed: simpy.Event) -> None:
        self.session = sess
        self.task = task
        self.completed = completed
        self.released = False
        self.owned: list[Any] = []
        """hbSysMem buffers the API allocated for this task (a CV argument block), freed
        when the task is released."""

    @property
    def error(self) -> str | None:
        """The operator's failure message, once it failed on the DSP."""
        return self.task.error

    def __repr__(self) -> str:
        return f"<hbDSPTask {self.task.name!r}{' released' if self.released else ''}>"


_CORES = {HB_DSP_CORE_ANY: ANY_CORE, HB_DSP_CORE_0: 0, HB_DSP_CORE_1: 1}


def _live_task(task: Any, sess: session.Session) -> hbDSPTask | None:
    if isinstance(task, hbDSPTask) and task.session is sess and not task.released:
        return task
    return None


@status.c_function((HB_DSP_WRONG_THREAD, None))
def hbDSPRpc(
    input_mem: Any, output_mem: Any, ctrl: Any,
) -> tuple[int, hbDSPTask | None]:
    """Queue operator `ctrl.rpcCmd` on `input_mem` -> `output_mem`; returns (rc, task)."""
    return rpc(input_mem, output_mem, ctrl, ())


def rpc(input_mem: Any, output_mem: Any, ctrl: Any, also_pinned: tuple[PoolBuffer, ...]
        ) -> tuple[int, hbDSPTask | None]:
    """`hbDSPRpc`, also keeping `also_pinned` (images an argument block points at) pinned
    until the task is done."""
    sess, thread = session.caller()
    with thread.call("hbDSPRpc") as call:
        if not isinstance(ctrl, hbDSPRpcCtrlParam):
            return HB_DSP_INVALID_ARGUMENT, None
        inp, out = buffer_of(input_mem, sess), buffer_of(output_mem, sess)
        priority = status.as_int(ctrl.priority, HB_DSP_RPC_PRIORITY_LOWEST,
                                 HB_DSP_RPC_PRIORITY_HIGHEST)
        custom_id = status.as_int(ctrl.customId, status.INT32_MIN, status.INT32_MAX)
        core_id = status.as_int(ctrl.dspCoreId)
        if inp is None or out is None or priority is None or custom_id is None \
                or core_id not in _CORES:
            return HB_DSP_INVALID_ARGUMENT, None
        cores = sess.soc.vdsp
        core = _CORES[core_id]
        if core >= cores.cores:
            return HB_DSP_INVALID_ARGUMENT, None
        if core != ANY_CORE and not cores.hw[core].online:
            return HB_DSP_CORE_OFFLINE, None
        if core == ANY_CORE and not any(hw.online for hw in cores.hw):
            return HB_DSP_CORE_OFFLINE, None
        cmd = status.as_int(ctrl.rpcCmd)
        op = ops.lookup(cmd) if cmd is not None else None
        if op is None:
            return HB_DSP_UNKNOWN_COMMAND, None

        def body(slot: CoreSlot) -> Generator[simpy.Event, Any, StageBody | None]:
            return (yield from op.run(cores.hw[slot.index], slot, inp, out))

        task = Task(f"{op.name} #{sess.next_serial()}", [Stage(op.name, body)],
                    priority=priority, custom_id=custom_id, core=core)
        call.link(task)
        completed = sess.soc.env.event()
        for buf in (inp, out, *also_pinned):
            sess.soc.pool.pin(buf)
        sess.soc.env.process(_deliver(sess, task, (inp, out, *also_pinned), completed))
        return HB_DSP_SUCCESS, hbDSPTask(sess, task, completed)


def _deliver(sess: session.Session, task: Task, buffers: tuple[PoolBuffer, ...],
             completed: simpy.Event) -> Generator[simpy.Event, Any, None]:
    def unpin() -> None:
        for buf in buffers:
            sess.soc.pool.unpin(buf)

    yield from sess.soc.vdsp.rpc.round_trip(task, unpin)
    completed.succeed()


@status.c_function(HB_DSP_WRONG_THREAD)
def hbDSPWaitTaskDone(task: Any, timeout_ms: int) -> int:
    """Wait for `task`; `timeout_ms` <= 0 waits until it is done (simulated time)."""
    sess, thread = session.caller()
    handle = _live_task(task, sess)
    if handle is None:
        return HB_DSP_INVALID_TASK_HANDLE
    timeout = status.timeout_ps(timeout_ms)
    if timeout is False:
        return HB_DSP_INVALID_ARGUMENT
    result = thread.wait(handle.completed, timeout, "hbDSPWaitTaskDone")
    if result is WaitResult.TIMEOUT:
        return HB_DSP_TIMEOUT
    if result is WaitResult.DEADLOCK:
        return HB_DSP_DEADLOCK
    return HB_DSP_TASK_FAILED if handle.task.failed else HB_DSP_SUCCESS


@status.c_function(HB_DSP_WRONG_THREAD)
def hbDSPReleaseTask(task: Any) -> int:
    """Release a finished task's handle."""
    sess, thread = session.caller()
    with thread.call("hbDSPReleaseTask"):
        handle = _live_task(task, sess)
        if handle is None:
            return HB_DSP_INVALID_TASK_HANDLE
        if not handle.completed.triggered:
            return HB_DSP_TASK_RUNNING
        handle.released = True
    for mem in handle.owned:
        hbSysFreeMem(mem)
    return HB_DSP_SUCCESS


def hbDSPGetErrorDesc(code: int) -> str:
    return status.describe(code)


__all__ = status.c_names(globals(), "hb", "HB_")

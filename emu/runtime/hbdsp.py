"""hbDSP: ARM-side RPC to the vDSP cores, with the board's names and calling convention.

    ctrl = hbDSPRpcCtrlParam()
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.rpcCmd = CMD_SOFTMAX
    rc, task = hbDSPRpc(input_mem, output_mem, ctrl)     # queued; returns at once
    rc = hbDSPWaitTaskDone(task, 0)                      # 0 or less: wait until done
    rc = hbDSPReleaseTask(task)

`input_mem` and `output_mem` are `hbSysMem` buffers of the pool. An RPC costs the host
the API call; the message reaches the DSP queue `vdsp.rpc_submit_ps` later; the operator
runs on a core chosen by `dspCoreId` (any, core 0, core 1) in the order of the priority
queue (priority 0-255, 255 preempting at tile boundaries, then customId, then arrival);
the host sees completion `vdsp.rpc_return_ps` after the operator ends. Misuse returns an
error code and changes nothing.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from emu.runtime import session, status
from emu.runtime.hbsys import buffer_of
from emu.soc.clock import PS_PER_MS
from emu.soc.sched import ANY_CORE, CoreSlot, Stage, StageBody, Task
from emu.vdsp import ops

HB_DSP_CORE_ANY = 0
HB_DSP_CORE_0 = 1 << 0
HB_DSP_CORE_1 = 1 << 1

HB_DSP_PRIORITY_LOWEST = 0
HB_DSP_PRIORITY_HIGHEST = 255
HB_DSP_PRIORITY_PREEMP = HB_DSP_PRIORITY_HIGHEST

HB_DSP_SUCCESS = status.SUCCESS
HB_DSP_INVALID_ARGUMENT = status.define(-6200001, "hbDSP: invalid argument")
HB_DSP_INVALID_TASK_HANDLE = status.define(
    -6200002, "hbDSP: not a live task handle (never returned by hbDSPRpc, or released)")
HB_DSP_UNKNOWN_COMMAND = status.define(-6200003, "hbDSP: no operator registered for rpcCmd")
HB_DSP_CORE_OFFLINE = status.define(-6200004, "hbDSP: the requested DSP core is stopped")
HB_DSP_TIMEOUT = status.define(-6200005, "hbDSP: the task did not finish within the timeout")
HB_DSP_TASK_FAILED = status.define(
    -6200006, "hbDSP: the operator failed on the DSP (see the task's error message)")
HB_DSP_TASK_RUNNING = status.define(-6200007, "hbDSP: the task has not finished yet")


class hbDSPRpcCtrlParam:  # the board's struct name
    """Control of one RPC: which core, which operator, how urgent."""

    def __init__(self) -> None:
        self.dspCoreId: int = HB_DSP_CORE_ANY
        self.rpcCmd: int = 0
        self.priority: int = HB_DSP_PRIORITY_LOWEST
        self.customId: int = 0
        self.reserved1: int = 0
        self.reserved2: int = 0


def HB_DSP_INITIALIZE_RPC_CTRL_PARAM(param: hbDSPRpcCtrlParam) -> None:
    """The board's initialiser macro: any core, lowest priority, custom id 0."""
    param.dspCoreId = HB_DSP_CORE_ANY
    param.rpcCmd = 0
    param.priority = HB_DSP_PRIORITY_LOWEST
    param.customId = 0
    param.reserved1 = 0
    param.reserved2 = 0


class hbDSPTask:
    """A task handle returned by hbDSPRpc."""

    def __init__(self, task: Task, completed: simpy.Event) -> None:
        self.task = task
        self.completed = completed
        self.released = False

    @property
    def error(self) -> str | None:
        """The operator's failure message, once it failed on the DSP."""
        return self.task.error


_CORES = {HB_DSP_CORE_ANY: ANY_CORE, HB_DSP_CORE_0: 0, HB_DSP_CORE_1: 1}


def hbDSPRpc(
    input_mem: Any, output_mem: Any, ctrl: Any,
) -> tuple[int, hbDSPTask | None]:
    """Queue operator `ctrl.rpcCmd` on `input_mem` -> `output_mem`; returns (rc, task)."""
    if not isinstance(ctrl, hbDSPRpcCtrlParam):
        return HB_DSP_INVALID_ARGUMENT, None
    inp, out = buffer_of(input_mem), buffer_of(output_mem)
    if inp is None or out is None:
        return HB_DSP_INVALID_ARGUMENT, None
    if not isinstance(ctrl.priority, int) or not 0 <= ctrl.priority <= 255:
        return HB_DSP_INVALID_ARGUMENT, None
    if not isinstance(ctrl.customId, int) or ctrl.dspCoreId not in _CORES:
        return HB_DSP_INVALID_ARGUMENT, None
    sess = session.current()
    cores = sess.soc.vdsp
    core = _CORES[ctrl.dspCoreId]
    if core >= cores.cores:
        return HB_DSP_INVALID_ARGUMENT, None
    if core != ANY_CORE and not cores.hw[core].online:
        return HB_DSP_CORE_OFFLINE, None
    if core == ANY_CORE and not any(hw.online for hw in cores.hw):
        return HB_DSP_CORE_OFFLINE, None
    op = ops.lookup(ctrl.rpcCmd) if isinstance(ctrl.rpcCmd, int) else None
    if op is None:
        return HB_DSP_UNKNOWN_COMMAND, None

    sess.host.api_call("hbDSPRpc")

    def body(slot: CoreSlot) -> Generator[simpy.Event, Any, StageBody | None]:
        return (yield from op.run(cores.hw[slot.index], slot, inp, out))

    sess.rpcs_issued += 1
    task = Task(f"{op.name} #{sess.rpcs_issued}", [Stage(op.name, body)],
                priority=ctrl.priority, custom_id=ctrl.customId, core=core)
    env = sess.soc.env
    completed = env.event()
    env.process(_deliver(sess, task, completed))
    return HB_DSP_SUCCESS, hbDSPTask(task, completed)


def _deliver(sess: session.Session, task: Task, completed: simpy.Event) -> Generator[
        simpy.Event, Any, None]:
    cfg = sess.soc.config.vdsp
    env = sess.soc.env
    yield env.timeout(cfg.rpc_submit_ps)
    yield sess.soc.vdsp.submit(task)
    yield env.timeout(cfg.rpc_return_ps)
    completed.succeed()


def hbDSPWaitTaskDone(task: Any, timeout_ms: int) -> int:
    """Wait for `task`; `timeout_ms` <= 0 waits until it is done (simulated time)."""
    if not isinstance(task, hbDSPTask) or task.released:
        return HB_DSP_INVALID_TASK_HANDLE
    if not isinstance(timeout_ms, int | float):
        return HB_DSP_INVALID_ARGUMENT
    host = session.current().host
    timeout = None if timeout_ms <= 0 else round(timeout_ms * PS_PER_MS)
    if not host.wait_event(task.completed, timeout, f"hbDSPWaitTaskDone {task.task.name}"):
        return HB_DSP_TIMEOUT
    return HB_DSP_TASK_FAILED if task.task.failed else HB_DSP_SUCCESS


def hbDSPReleaseTask(task: Any) -> int:
    """Release a finished task's handle."""
    if not isinstance(task, hbDSPTask) or task.released:
        return HB_DSP_INVALID_TASK_HANDLE
    if not task.completed.triggered:
        return HB_DSP_TASK_RUNNING
    session.current().host.api_call("hbDSPReleaseTask")
    task.released = True
    return HB_DSP_SUCCESS


def hbDSPGetErrorDesc(code: int) -> str:
    return status.describe(code)


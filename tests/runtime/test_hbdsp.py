from collections.abc import Generator

import pytest

from emu.errors import DspError
from emu.runtime import hbdsp, session
from emu.runtime.hbdsp import (
    HB_DSP_CORE_0,
    HB_DSP_CORE_1,
    HB_DSP_CORE_ANY,
    HB_DSP_CORE_OFFLINE,
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM,
    HB_DSP_INVALID_ARGUMENT,
    HB_DSP_INVALID_TASK_HANDLE,
    HB_DSP_TASK_FAILED,
    HB_DSP_TIMEOUT,
    HB_DSP_UNKNOWN_COMMAND,
    hbDSPGetErrorDesc,
    hbDSPReleaseTask,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import hbSysAllocMem, hbSysMem
from emu.runtime.remoteproc import rproc_set_state, rproc_state
from emu.vdsp import ops
from emu.vdsp.ops.framework import CMD_PING

CMD_SLEEP = 0x1234
CMD_FAIL = 0x1235
CMD_CRASH = 0x1236
SLEEP_PS = 1_000_000


def _sleep(core, slot, inp, out) -> Generator:
    yield slot.env.timeout(SLEEP_PS)
    return None


def _fail(core, slot, inp, out) -> Generator:
    yield slot.env.timeout(10)
    raise DspError("bad arguments in the input buffer")


def _crash(core, slot, inp, out) -> Generator:
    """An operator that fails in a way no operator announces (a freed buffer read, a bug)."""
    yield slot.env.timeout(10)
    raise RuntimeError("the operator broke")


@pytest.fixture
def sess():
    ops.register(ops.Operator(CMD_SLEEP, "sleep", "fixed 1 us of work", _sleep))
    ops.register(ops.Operator(CMD_FAIL, "fail", "always fails", _fail))
    ops.register(ops.Operator(CMD_CRASH, "crash", "raises an unexpected exception", _crash))
    yield session.start("j5", overrides=[
        "cpu.api_call_ps=0", "vdsp.rpc_submit_ps=100", "vdsp.rpc_return_ps=50",
        "vdsp.operator_dispatch_cycles=0", "vdsp.rpc_mode=direct"])
    ops.unregister(CMD_SLEEP)
    ops.unregister(CMD_FAIL)
    ops.unregister(CMD_CRASH)


def _mems():
    a, b = hbSysMem(), hbSysMem()
    assert hbSysAllocMem(a, 64) == 0 and hbSysAllocMem(b, 64) == 0
    return a, b


def _ctrl(cmd=CMD_SLEEP, core=HB_DSP_CORE_ANY, priority=0, custom=0):
    ctrl = hbDSPRpcCtrlParam()
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.rpcCmd, ctrl.dspCoreId, ctrl.priority, ctrl.customId = cmd, core, priority, custom
    return ctrl


def test_ping_round_trip_costs_the_rpc_latencies(sess):
    a, b = _mems()
    rc, task = hbDSPRpc(a, b, _ctrl(cmd=CMD_PING))
    assert rc == 0
    assert hbDSPWaitTaskDone(task, 0) == 0
    assert sess.main.now_ps == 150
    assert hbDSPReleaseTask(task) == 0


def test_two_concurrent_any_core_rpcs_run_on_both_cores(sess):
    a, b = _mems()
    _, t1 = hbDSPRpc(a, b, _ctrl())
    _, t2 = hbDSPRpc(a, b, _ctrl())
    assert hbDSPWaitTaskDone(t1, 0) == 0 and hbDSPWaitTaskDone(t2, 0) == 0
    assert sorted(t1.task.ran_on + t2.task.ran_on) == [0, 1]
    assert t1.task.finished_ps == t2.task.finished_ps == 100 + SLEEP_PS
    assert sess.main.now_ps == 100 + SLEEP_PS + 50


def test_priority_255_overtakes_a_queued_priority_0_rpc(sess):
    a, b = _mems()
    _, running = hbDSPRpc(a, b, _ctrl(core=HB_DSP_CORE_0))
    _, low = hbDSPRpc(a, b, _ctrl(core=HB_DSP_CORE_0, priority=0))
    _, high = hbDSPRpc(a, b, _ctrl(core=HB_DSP_CORE_0, priority=255))
    for t in (running, low, high):
        assert hbDSPWaitTaskDone(t, 0) == 0
    assert high.task.started_ps == running.task.finished_ps
    assert low.task.started_ps == high.task.finished_ps


@pytest.mark.parametrize("core", [HB_DSP_CORE_0, HB_DSP_CORE_1])
def test_any_exception_in_an_operator_fails_its_task_and_the_core_goes_on(sess, core):
    """Only a `TaskError` used to fail a task: any other exception escaped the core's
    process and left the core busy for good, later pings on it timing out (issue 28)."""
    a, b = _mems()
    rc, task = hbDSPRpc(a, b, _ctrl(cmd=CMD_CRASH, core=core))
    assert rc == 0
    assert hbDSPWaitTaskDone(task, 0) == HB_DSP_TASK_FAILED
    assert hbDSPReleaseTask(task) == 0
    assert sess.soc.vdsp.counters["tasks_failed"] == 1
    _, ping = hbDSPRpc(a, b, _ctrl(cmd=CMD_PING, core=core))
    assert hbDSPWaitTaskDone(ping, 1000) == 0


def test_wait_with_timeout_and_handle_misuse(sess):
    a, b = _mems()
    _, task = hbDSPRpc(a, b, _ctrl())
    assert hbDSPWaitTaskDone(task, 0.0005) == HB_DSP_TIMEOUT  # 0.5 us of 1.15 us
    assert hbDSPReleaseTask(task) != 0  # still running
    assert hbDSPWaitTaskDone(task, 10) == 0
    assert hbDSPReleaseTask(task) == 0
    assert hbDSPReleaseTask(task) == HB_DSP_INVALID_TASK_HANDLE
    assert hbDSPWaitTaskDone(task, 0) == HB_DSP_INVALID_TASK_HANDLE
    assert hbDSPWaitTaskDone("task", 0) == HB_DSP_INVALID_TASK_HANDLE


def test_bad_arguments_return_codes_and_queue_nothing(sess):
    a, b = _mems()
    assert hbDSPRpc(a, b, _ctrl(cmd=0x1999))[0] == HB_DSP_UNKNOWN_COMMAND
    assert hbDSPRpc(a, b, _ctrl(priority=256))[0] == HB_DSP_INVALID_ARGUMENT
    assert hbDSPRpc(a, b, _ctrl(core=3))[0] == HB_DSP_INVALID_ARGUMENT
    assert hbDSPRpc(a, hbSysMem(), _ctrl())[0] == HB_DSP_INVALID_ARGUMENT
    assert hbDSPRpc(a, b, object())[0] == HB_DSP_INVALID_ARGUMENT
    assert sess.soc.vdsp.counters.get("tasks_submitted", 0) == 0
    assert "rpcCmd" in hbDSPGetErrorDesc(HB_DSP_UNKNOWN_COMMAND)


def test_a_command_left_as_the_macro_set_it_is_refused_not_run_as_a_ping(sess):
    a, b = _mems()
    for ctrl in (hbDSPRpcCtrlParam(), hbDSPRpcCtrlParam()):
        ctrl.rpcCmd, ctrl.priority = 0, 7  # as a program might leave them
        assert HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl) == hbdsp.HB_DSP_SUCCESS
        assert ctrl.rpcCmd == hbdsp.HB_DSP_RPC_CMD_NONE
        assert ctrl.priority == hbdsp.HB_DSP_RPC_PRIORITY_LOWEST == 0
        assert ctrl.dspCoreId == hbdsp.HB_DSP_CORE_ANY
        assert hbDSPRpc(a, b, ctrl)[0] == HB_DSP_UNKNOWN_COMMAND
    assert hbdsp.HB_DSP_RPC_PRIORITY_PREEMP == hbdsp.HB_DSP_RPC_PRIORITY_HIGHEST == 255
    assert sess.soc.vdsp.counters.get("tasks_submitted", 0) == 0


def test_a_failing_operator_fails_its_task_only(sess):
    a, b = _mems()
    _, bad = hbDSPRpc(a, b, _ctrl(cmd=CMD_FAIL, core=HB_DSP_CORE_1))
    _, good = hbDSPRpc(a, b, _ctrl(core=HB_DSP_CORE_1))
    assert hbDSPWaitTaskDone(bad, 0) == HB_DSP_TASK_FAILED
    assert "bad arguments" in bad.error
    assert hbDSPWaitTaskDone(good, 0) == 0


def test_a_stopped_core_refuses_rpcs_and_resumes_when_started(sess):
    a, b = _mems()
    assert rproc_set_state(1, "stop") == 0
    assert rproc_state(1) == "offline"
    assert hbDSPRpc(a, b, _ctrl(core=HB_DSP_CORE_1))[0] == HB_DSP_CORE_OFFLINE
    _, t1 = hbDSPRpc(a, b, _ctrl())
    _, t2 = hbDSPRpc(a, b, _ctrl())
    assert hbDSPWaitTaskDone(t2, 0) == 0
    assert t1.task.ran_on == [0] and t2.task.ran_on == [0]  # only core 0 runs
    assert rproc_set_state(0, "stop") == 0
    assert hbDSPRpc(a, b, _ctrl())[0] == HB_DSP_CORE_OFFLINE
    assert rproc_set_state(1, "start") == 0 and rproc_state(1) == "running"
    assert rproc_set_state(5, "start") != 0 and rproc_set_state(1, "reboot") != 0


def test_user_operators_must_use_the_custom_range():
    with pytest.raises(ValueError, match="nn range"):
        ops.register(ops.Operator(0x450, "mine", "", _sleep))
    with pytest.raises(ValueError, match="taken by"):
        ops.register(ops.Operator(CMD_PING, "ping2", "", _sleep), builtin=True)


def test_a_fresh_process_knows_every_built_in_operator():
    """The point-cloud stages register with the others, not when their workload is imported."""
    import subprocess
    import sys

    program = (
        "from emu.runtime.hbsys import hbSysMem, hbSysAllocMem\n"
        "from emu.runtime.hbdsp import hbDSPRpc, hbDSPRpcCtrlParam, hbDSPWaitTaskDone\n"
        "a, b = hbSysMem(), hbSysMem(); hbSysAllocMem(a, 256); hbSysAllocMem(b, 256)\n"
        "ctrl = hbDSPRpcCtrlParam(); ctrl.rpcCmd = 0x900\n"
        "rc, task = hbDSPRpc(a, b, ctrl)\n"
        "print(rc, hbDSPWaitTaskDone(task, 0), task.error)\n"
        "import sys; print(sorted(m for m in sys.modules if m.startswith('emu.workloads')))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          check=True)
    status, listed = done.stdout.splitlines()
    assert status.startswith(f"0 {HB_DSP_TASK_FAILED} pointcloud stage 1: input does not start")
    assert listed == "[]"


# The RPC path (emu.vdsp.rpc): the relay server's hops around the kernel channel.
RELAYED = ["cpu.api_call_ps=0", "vdsp.rpc_submit_ps=100", "vdsp.rpc_return_ps=50",
           "vdsp.operator_dispatch_cycles=0", "vdsp.rpc_mode=relay", "vdsp.relay_hop_ps=1000"]


def _ping_times(overrides: list[str], threads: int) -> list[int]:
    """When each of `threads` host threads, each sending one ping at time 0, sees it done."""
    done: list[int] = []

    with session.Session("j5", overrides=overrides) as s:
        def body() -> None:
            a, b = _mems()
            _, task = hbDSPRpc(a, b, _ctrl(cmd=CMD_PING))
            assert hbDSPWaitTaskDone(task, 0) == 0
            done.append(s.thread().now_ps)
            assert hbDSPReleaseTask(task) == 0

        for i in range(threads):
            s.spawn(body, name=f"t{i}")
        s.run()
    return sorted(done)


def test_relay_mode_adds_a_hop_each_way_and_direct_mode_none():
    assert _ping_times(RELAYED, 1) == [1000 + 100 + 50 + 1000]
    assert _ping_times([*RELAYED, "vdsp.rpc_mode=direct"], 1) == [100 + 50]


def test_relay_hops_are_latency_and_concurrent_calls_queue_only_for_the_cores():
    assert _ping_times(RELAYED, 2) == [2150, 2150]
    assert _ping_times([*RELAYED, "vdsp.rpc_mode=direct"], 2) == [150, 150]

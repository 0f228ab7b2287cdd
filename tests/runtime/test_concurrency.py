"""Host programs with many threads on hbSys/hbDSP: scheduling, determinism, and the misuse
that used to break the emulator (each now returns an error code and the session goes on)."""

import copy
import json
import os
import subprocess
import sys
import threading
from collections.abc import Generator
from pathlib import Path

import numpy as np
import pytest

import emu
from emu.cli.main import main as cli_main
from emu.errors import DspError
from emu.runtime import hbsys, session
from emu.runtime.hbdsp import (
    HB_DSP_CORE_1,
    HB_DSP_CORE_ANY,
    HB_DSP_DEADLOCK,
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM,
    HB_DSP_INVALID_ARGUMENT,
    HB_DSP_INVALID_TASK_HANDLE,
    HB_DSP_SUCCESS,
    HB_DSP_TASK_FAILED,
    HB_DSP_TIMEOUT,
    HB_DSP_WRONG_THREAD,
    hbDSPGetErrorDesc,
    hbDSPReleaseTask,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_INVALID_ARGUMENT,
    HB_SYS_INVALID_MEMORY,
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_IN_USE,
    HB_SYS_WRONG_THREAD,
    hbSysAllocCachedMem,
    hbSysAllocMem,
    hbSysFlushMem,
    hbSysFreeMem,
    hbSysMem,
    hbSysReadMem,
    hbSysWriteMem,
)
from emu.runtime.remoteproc import RPROC_INVALID_ARGUMENT, rproc_set_state, rproc_state
from emu.vdsp import ops
from emu.vdsp.ops import nn
from emu.vdsp.ops.tensor_args import TYPE_F32, pack
from tests.report.test_trace import validate_chrome_trace
from tests.vdsp import nn_reference as ref
from tests.vdsp.test_nn import same_floats

ROOT = Path(__file__).resolve().parents[2]
CMD_SLEEP = 0x1240
SLEEP_PS = 1_000_000
TIMED = ["cpu.api_call_ps=1000", "vdsp.rpc_submit_ps=100", "vdsp.rpc_return_ps=50",
         "vdsp.operator_dispatch_cycles=0", "vdsp.rpc_mode=direct"]


def _sleep(core, slot, inp, out) -> Generator:
    yield slot.env.timeout(SLEEP_PS)


@pytest.fixture
def sleep_op():
    ops.register(ops.Operator(CMD_SLEEP, "sleep", "fixed 1 us of work", _sleep))
    yield CMD_SLEEP
    ops.unregister(CMD_SLEEP)


def _ctrl(cmd, priority=0, core=HB_DSP_CORE_ANY, custom=0):
    ctrl = hbDSPRpcCtrlParam()
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.rpcCmd, ctrl.priority, ctrl.dspCoreId, ctrl.customId = cmd, priority, core, custom
    return ctrl


def _alloc(size, cached=True):
    mem = hbSysMem()
    assert (hbSysAllocCachedMem if cached else hbSysAllocMem)(mem, size) == 0
    return mem


def _softmax_is_correct():
    """One softmax RPC on the current session, checked bit for bit against the reference."""
    x = np.random.default_rng(5).standard_normal((8, 64)).astype(np.float32)
    blob = pack(x, TYPE_F32, axis=1)
    inp, out = _alloc(len(blob)), _alloc(x.nbytes)
    inp.virAddr[:] = np.frombuffer(blob, np.uint8)
    hbSysFlushMem(inp, HB_SYS_MEM_CACHE_CLEAN)
    rc, task = hbDSPRpc(inp, out, _ctrl(nn.CMD_SOFTMAX))
    assert rc == 0 and hbDSPWaitTaskDone(task, 0) == 0
    got = out.virAddr.view(np.float32).reshape(x.shape)
    assert same_floats(got, ref.softmax(x, 1, nn.softmax_layout(x.shape, 1)))
    assert hbDSPReleaseTask(task) == 0
    assert hbSysFreeMem(inp) == 0 and hbSysFreeMem(out) == 0


# --- many threads -------------------------------------------------------------------------


def test_completion_order_follows_the_priority_rules_exactly(sleep_op):
    """Three threads each queue two 1 us RPCs on any core, then wait for both."""
    tasks = {}
    clocks = {}

    def worker(name, priority):
        handles = [hbDSPRpc(*_mems, _ctrl(sleep_op, priority))[1] for _ in range(2)]
        for k, handle in enumerate(handles):
            assert hbDSPWaitTaskDone(handle, 0) == 0
            tasks[f"{name}{k + 1}"] = handle.task
        clocks[name] = emu.now_ms()

    with emu.Session(overrides=TIMED) as s:
        _mems = (_alloc(64), _alloc(64))
        for name, priority in (("A", 0), ("B", 100), ("C", 255)):
            s.spawn(worker, name, priority, name=name)
    timeline = {name: (t.ran_on, t.started_ps, t.finished_ps) for name, t in tasks.items()}
    # The main program's two allocations take 2 ns; then each call costs 1 ns on an A55
    # core and its message lands 100 ps later: A1, B1, C1 at 3100 take core 0, core 1 and
    # the queue; A2, B2, C2 queue at 4100. Priority first: C1 and C2 (255) take the cores
    # at 1 003 100, then B2 (100) before A2 (0).
    assert timeline == {
        "A1": ([0], 3_100, 1_003_100), "B1": ([1], 3_100, 1_003_100),
        "C1": ([0], 1_003_100, 2_003_100), "C2": ([1], 1_003_100, 2_003_100),
        "B2": ([0], 2_003_100, 3_003_100), "A2": ([1], 2_003_100, 3_003_100),
    }
    # A thread sees completion 50 ps (the return message) after the operator ends.
    assert clocks == {"A": 3.00315e-3, "B": 3.00315e-3, "C": 2.00315e-3}


def _run_example(tmp_path, name, env=None):
    report, trace = tmp_path / f"{name}.report.json", tmp_path / f"{name}.trace.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "softmax_threads.py"), "--report", str(report),
         "--trace", str(trace)], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, **(env or {})}, check=False)
    assert done.returncode == 0, done.stderr
    return report.read_bytes(), trace.read_bytes(), done.stdout


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    """example_run(seed): the example's report, trace and output with PYTHONHASHSEED=seed,
    run once for the module: the trace test reads the run the determinism test made (the
    same bytes whatever the hash seed), rather than running the example a fourth time."""
    done = {}

    def run(seed):
        if seed not in done:
            done[seed] = _run_example(tmp_path_factory.mktemp(f"seed{seed}"), "run",
                                      {"PYTHONHASHSEED": seed})
        return done[seed]
    return run


def test_eight_threads_of_fifty_rpcs_use_both_cores_and_are_deterministic(example_run):
    runs = [example_run(seed) for seed in ("0", "1", "4242")]
    assert runs[0] == runs[1] == runs[2]
    report = json.loads(runs[0][0])
    results = report["results"]
    assert len(results["completions"]) == 8 * 50
    assert min(results["per_core"]) > 0 and sum(results["per_core"]) == 400
    # With every thread keeping its queue full, a higher priority finishes its 50 first.
    last = {}
    for done in results["completions"]:
        last[done["priority"]] = max(last.get(done["priority"], 0), done["finished_ms"])
    by_priority = [last[p] for p in sorted(last, reverse=True)]
    assert by_priority == sorted(by_priority)
    threads = report["stats"]["host"]["threads"]
    assert [t["name"] for t in threads] == ["main"] + [f"worker{k}" for k in range(8)]
    validate_chrome_trace(json.loads(runs[0][1]))


def test_trace_links_each_rpc_call_to_the_dsp_task_it_submitted(example_run):
    _, trace, _ = example_run("0")
    events = [e for e in json.loads(trace)["traceEvents"] if e["ph"] == "X"]
    starts = {e["bind_id"]: e for e in events if e.get("flow_out") and not e.get("flow_in")}
    ends = {e["bind_id"]: e for e in events if e.get("flow_in")}
    assert len(starts) == 400 and set(starts) == set(ends)
    for flow, call in starts.items():
        assert call["name"] == "hbDSPRpc"
        task = ends[flow]
        assert task["name"].startswith("softmax #") and task["ts"] >= call["ts"] + call["dur"]
        assert (task["pid"], task["tid"]) != (call["pid"], call["tid"])


def test_a_blocking_call_blocks_only_its_own_thread(sleep_op):
    log = []

    def slow():
        a, b = _alloc(64), _alloc(64)
        _, task = hbDSPRpc(a, b, _ctrl(sleep_op))
        hbDSPWaitTaskDone(task, 0)
        log.append(("slow done", emu.now_ms()))

    def ticker():
        for _ in range(3):
            emu.sleep_ms(0.0002)
            log.append(("tick", emu.now_ms()))

    with emu.Session(overrides=TIMED) as s:
        s.spawn(slow)
        s.spawn(ticker)
    assert [name for name, _ in log] == ["tick", "tick", "tick", "slow done"]


# --- misuse that used to break the session ------------------------------------------------


def test_freeing_a_buffer_a_queued_or_running_task_uses_is_refused(sleep_op):
    with emu.Session(overrides=TIMED) as s:
        a, b = _alloc(64), _alloc(64)
        _, running = hbDSPRpc(a, b, _ctrl(sleep_op, core=HB_DSP_CORE_1))
        _, queued = hbDSPRpc(b, a, _ctrl(sleep_op, core=HB_DSP_CORE_1))
        s.main.sleep(500_000)  # the first runs, the second waits behind it
        before = s.soc.pool.stats()
        assert hbSysFreeMem(a) == HB_SYS_MEM_IN_USE
        assert hbSysFreeMem(b) == HB_SYS_MEM_IN_USE
        assert "queued or running task" in hbDSPGetErrorDesc(HB_SYS_MEM_IN_USE)
        assert s.soc.pool.stats() == before and a.virAddr is not None
        assert hbDSPWaitTaskDone(running, 0) == 0 and hbDSPWaitTaskDone(queued, 0) == 0
        assert hbSysFreeMem(a) == 0 and hbSysFreeMem(b) == 0
        _softmax_is_correct()


def test_waiting_forever_on_a_stopped_core_returns_deadlock_and_the_session_goes_on(sleep_op):
    with emu.Session(overrides=TIMED) as s:
        a, b = _alloc(64), _alloc(64)
        _, task = hbDSPRpc(a, b, _ctrl(sleep_op, core=HB_DSP_CORE_1))
        assert rproc_set_state(1, "stop") == 0  # before the message reaches the core
        assert hbDSPWaitTaskDone(task, 0) == HB_DSP_DEADLOCK
        assert "can never finish" in hbDSPGetErrorDesc(HB_DSP_DEADLOCK)
        now = s.now_ps
        assert hbDSPWaitTaskDone(task, 2) == HB_DSP_TIMEOUT  # a timed wait just times out
        assert s.now_ps == now + 2_000_000_000
        _softmax_is_correct()  # core 0 still serves
        assert rproc_set_state(1, "start") == 0
        assert hbDSPWaitTaskDone(task, 0) == HB_DSP_SUCCESS
        assert task.task.ran_on == [1]


def test_a_deadlock_of_several_threads_ends_the_earliest_wait_first(sleep_op):
    submitted, results = [], []

    def waiter(name):
        a, b = _alloc(64), _alloc(64)
        _, task = hbDSPRpc(a, b, _ctrl(sleep_op, core=HB_DSP_CORE_1))
        submitted.append(name)
        results.append((name, hbDSPWaitTaskDone(task, 0)))
        rproc_set_state(1, "start")  # the first to hear of it restarts the core
        results.append((name, hbDSPWaitTaskDone(task, 0)))

    with emu.Session(overrides=TIMED) as s:
        s.spawn(waiter, "x")
        s.spawn(waiter, "y")
        while len(submitted) < 2:
            s.main.sleep(10)
        rproc_set_state(1, "stop")  # before the messages land: the tasks can never run
        s.run()
        assert s.deadlocks == 1
    assert results == [("x", HB_DSP_DEADLOCK), ("x", 0), ("y", 0), ("y", 0)]


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), float("-inf"), 1e30, 2**40,
                                     -(2**40), "10", None, [1], np.array([1, 2]), True])
def test_bad_timeouts_are_invalid_arguments(sleep_op, timeout):
    with emu.Session(overrides=TIMED):
        a, b = _alloc(64), _alloc(64)
        _, task = hbDSPRpc(a, b, _ctrl(sleep_op))
        assert hbDSPWaitTaskDone(task, timeout) == HB_DSP_INVALID_ARGUMENT
        assert hbDSPWaitTaskDone(task, np.int32(0)) == 0


WRONG = [None, "mem", 1.5, np.bool_(True), np.float32(1.0), np.zeros(4), np.zeros(16)[::2],
         np.array([object()]), [1, 2], True, object()]


@pytest.mark.parametrize("bad", WRONG, ids=lambda v: type(v).__name__ if not isinstance(
    v, (int, float, str, list, np.generic, type(None))) else repr(v))
def test_arguments_of_the_wrong_type_return_codes(bad):
    with emu.Session(overrides=["mem.pool_bytes=1MiB"]) as s:
        mem = _alloc(64)
        assert hbSysAllocMem(bad, 64) == HB_SYS_INVALID_ARGUMENT
        assert hbSysAllocMem(hbSysMem(), bad) == HB_SYS_INVALID_ARGUMENT
        assert hbSysFreeMem(bad) == HB_SYS_INVALID_MEMORY
        assert hbsys.hbSysRegisterMem(bad) == HB_SYS_INVALID_ARGUMENT
        assert hbsys.hbSysUnregisterMem(bad) == HB_SYS_INVALID_MEMORY
        assert hbSysFlushMem(bad, HB_SYS_MEM_CACHE_CLEAN) == HB_SYS_INVALID_MEMORY
        assert hbSysFlushMem(mem, bad) == HB_SYS_INVALID_ARGUMENT
        assert hbSysWriteMem(mem, bad, 4) in (HB_SYS_INVALID_ARGUMENT, 0)
        assert hbSysWriteMem(mem, b"abcd", bad) == HB_SYS_INVALID_ARGUMENT
        assert hbSysReadMem(bad, mem, 4) in (HB_SYS_INVALID_ARGUMENT, 0)
        assert hbSysReadMem(np.zeros(4, np.uint8), mem, bad) == HB_SYS_INVALID_ARGUMENT
        assert hbDSPRpc(bad, mem, _ctrl(0)) == (HB_DSP_INVALID_ARGUMENT, None)
        assert hbDSPRpc(mem, mem, bad) == (HB_DSP_INVALID_ARGUMENT, None)
        for field in ("rpcCmd", "priority", "dspCoreId", "customId"):
            ctrl = _ctrl(0)
            setattr(ctrl, field, bad)
            assert hbDSPRpc(mem, mem, ctrl)[0] != 0
        assert hbDSPWaitTaskDone(bad, 0) == HB_DSP_INVALID_TASK_HANDLE
        assert hbDSPReleaseTask(bad) == HB_DSP_INVALID_TASK_HANDLE
        assert HB_DSP_INITIALIZE_RPC_CTRL_PARAM(bad) == HB_DSP_INVALID_ARGUMENT
        assert isinstance(hbDSPGetErrorDesc(bad), str)
        assert rproc_set_state(bad, "stop") == RPROC_INVALID_ARGUMENT
        assert rproc_set_state(0, bad) == RPROC_INVALID_ARGUMENT
        assert rproc_state(bad) == "invalid"
        assert s.soc.pool.live_buffers == 1
        assert s.soc.vdsp.counters.get("tasks_submitted", 0) == 0
        _softmax_is_correct()


def test_numpy_integers_serve_where_c_takes_an_integer():
    with emu.Session():
        mem = hbSysMem()
        assert hbSysAllocMem(mem, np.int64(64)) == 0
        assert hbSysFlushMem(mem, np.uint8(HB_SYS_MEM_CACHE_CLEAN)) == 0
        assert hbSysWriteMem(mem, b"abcd", np.int16(4)) == 0
        rc, task = hbDSPRpc(mem, mem, _ctrl(np.int32(0), np.uint8(7), np.int64(0),
                                            np.int32(-5)))
        assert rc == 0 and hbDSPWaitTaskDone(task, np.int8(0)) == 0
        assert task.task.priority == 7 and task.task.custom_id == -5


def test_host_arrays_are_read_and_written_as_their_bytes():
    with emu.Session():
        mem = _alloc(16)
        assert hbSysWriteMem(mem, np.arange(4, dtype=np.int32), 16) == 0
        out = np.zeros(4, np.int32)
        assert hbSysReadMem(out, mem, 16) == 0 and out.tolist() == [0, 1, 2, 3]
        assert hbSysWriteMem(mem, np.zeros(8)[::2], 8) == HB_SYS_INVALID_ARGUMENT
        assert hbSysReadMem(np.zeros(4, np.int32)[::2], mem, 8) == HB_SYS_INVALID_ARGUMENT
        frozen = np.zeros(4, np.int32)
        frozen.flags.writeable = False
        assert hbSysReadMem(frozen, mem, 16) == HB_SYS_INVALID_ARGUMENT


def test_stale_copies_and_other_sessions_handles_touch_nothing():
    with emu.Session() as old:
        stale_mem = _alloc(256)
        old_task = hbDSPRpc(stale_mem, stale_mem, _ctrl(0))[1]
        assert hbDSPWaitTaskDone(old_task, 0) == 0
    assert old.closed
    with emu.Session() as s:
        mem = _alloc(256)
        copy_before_free = copy.copy(mem)
        assert hbSysFreeMem(mem) == 0
        newer = _alloc(256)  # first fit: the same address again
        assert newer.phyAddr == copy_before_free.phyAddr
        newer.virAddr[:] = 7
        for stale in (copy_before_free, stale_mem):
            assert hbSysWriteMem(stale, b"\0" * 8, 8) == HB_SYS_INVALID_MEMORY
            assert hbSysFreeMem(stale) == HB_SYS_INVALID_MEMORY
            assert hbDSPRpc(stale, newer, _ctrl(0))[0] == HB_DSP_INVALID_ARGUMENT
        assert (newer.virAddr == 7).all() and s.soc.pool.live_buffers == 1
        assert hbDSPWaitTaskDone(old_task, 0) == HB_DSP_INVALID_TASK_HANDLE
        assert hbDSPReleaseTask(old_task) == HB_DSP_INVALID_TASK_HANDLE
        _softmax_is_correct()


def test_calls_from_another_os_thread_or_from_inside_the_loop_are_refused():
    codes = {}

    def elsewhere(mem):
        codes["alloc"] = hbSysAllocMem(hbSysMem(), 64)
        codes["free"] = hbSysFreeMem(mem)
        codes["rpc"] = hbDSPRpc(mem, mem, _ctrl(0))
        codes["rproc"] = rproc_set_state(0, "stop")

    def calls_api(core, slot, inp, out):
        codes["in loop"] = hbSysAllocMem(hbSysMem(), 64)
        yield slot.env.timeout(1)

    with emu.Session() as s:
        mem = _alloc(64)
        t = threading.Thread(target=elsewhere, args=(mem,))
        t.start()
        t.join()
        ops.register(ops.Operator(0x1241, "calls api", "an operator that calls hbSys", calls_api))
        try:
            _, task = hbDSPRpc(mem, mem, _ctrl(0x1241))
            assert hbDSPWaitTaskDone(task, 0) == 0
        finally:
            ops.unregister(0x1241)
        assert codes == {"alloc": HB_SYS_WRONG_THREAD, "free": HB_SYS_WRONG_THREAD,
                         "rpc": (HB_DSP_WRONG_THREAD, None), "rproc": -6300002,
                         "in loop": HB_SYS_WRONG_THREAD}
        assert s.soc.pool.live_buffers == 1 and rproc_state(0) == "running"
        _softmax_is_correct()


def test_an_operator_header_whose_sizes_overflow_fails_its_task_only():
    blob = bytearray(pack(np.ones((2, 8), np.float32), TYPE_F32, axis=1))
    words = np.frombuffer(blob, "<u4").copy()
    words[7], words[8:12] = 4, 0xFFFF_FFFF  # 2**128 elements; int64 arithmetic would wrap
    blob[:64] = words[:16].tobytes()
    with emu.Session():
        inp, out = _alloc(len(blob)), _alloc(64)
        inp.virAddr[:] = np.frombuffer(bytes(blob), np.uint8)
        rc, task = hbDSPRpc(inp, out, _ctrl(nn.CMD_SOFTMAX))
        assert rc == 0 and hbDSPWaitTaskDone(task, 0) == HB_DSP_TASK_FAILED
        assert "run past" in task.error
        _softmax_is_correct()


def test_a_failing_operator_in_a_thread_is_an_error_code_not_an_exception():
    def broken(core, slot, inp, out):
        yield slot.env.timeout(5)
        raise DspError("bad input")

    results = []

    def worker():
        mem = _alloc(64)
        _, task = hbDSPRpc(mem, mem, _ctrl(0x1242))
        results.append(hbDSPWaitTaskDone(task, 0))

    ops.register(ops.Operator(0x1242, "broken", "always fails", broken))
    try:
        with emu.Session() as s:
            s.spawn(worker)
    finally:
        ops.unregister(0x1242)
    assert results == [HB_DSP_TASK_FAILED]


def test_a_cli_command_leaves_the_api_working_in_the_same_process(capsys):
    with emu.Session():
        _softmax_is_correct()
    assert cli_main(["dsp", "ping", "--json"]) == 0
    assert cli_main(["scenario", "cameras", "--frames", "1", "--json"]) == 0
    capsys.readouterr()
    _softmax_is_correct()  # the default session, untouched by the commands
    assert session.current() is session.current()


def test_sixty_four_threads_each_with_rpcs_in_flight(capsys):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import softmax_threads
    finally:
        sys.path.pop(0)
    assert softmax_threads.main(["--threads", "64", "--rpcs", "3", "--depth", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("192 softmax RPCs from 64 threads")
    assert "per DSP core: [96, 96]" in out

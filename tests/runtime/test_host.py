"""Host threads: exact simulated timelines of threads that sleep, compute, wait and join."""

import threading

import numpy as np
import pytest

import emu
from emu.cpu import ops
from emu.cpu.cluster import CpuWork
from emu.errors import HostThreadError, SimulationError
from emu.runtime import session
from emu.runtime.host import WaitResult
from emu.soc.sched import Stage, Task

FAST = ["cpu.api_call_ps=1000", "bpu.task_overhead_ps=0"]


def test_threads_interleave_in_simulated_time_order():
    log = []

    def worker(name, delays):
        for d in delays:
            emu.sleep_ms(d)
            log.append((name, emu.now_ms()))

    with emu.Session(overrides=FAST) as s:
        s.spawn(worker, "a", [3, 3], name="a")
        s.spawn(worker, "b", [1, 1, 1, 5], name="b")
        s.run()
        assert emu.now_ms() == 8.0
    assert log == [("b", 1.0), ("b", 2.0), ("a", 3.0), ("b", 3.0), ("a", 6.0), ("b", 8.0)]


def test_the_thread_started_second_does_not_finish_first():
    done = []

    def busy(name, ms):
        emu.sleep_ms(ms)
        done.append(name)

    with emu.Session() as s:
        s.spawn(busy, "first", 1)
        s.spawn(busy, "second", 2)
    assert done == ["first", "second"]


def test_cpu_work_occupies_a55_cores_so_more_threads_than_cores_queue():
    finished = {}

    def crunch(k):
        emu_thread = session.current().thread()
        emu_thread.cpu(1_000_000, "crunch")  # 1 us on a core
        finished[k] = emu_thread.now_ps

    with emu.Session(overrides=["cpu.cores=2"]) as s:
        for k in range(5):
            s.spawn(crunch, k)
        s.run()
        threads = s.threads[1:]
    # Two cores: threads 0, 1 run at once, then 2, 3, then 4.
    assert finished == {0: 1_000_000, 1: 1_000_000, 2: 2_000_000, 3: 2_000_000, 4: 3_000_000}
    assert [t.cpu_queued_ps for t in threads] == [0, 0, 1_000_000, 1_000_000, 2_000_000]
    assert all(t.cpu_busy_ps == 1_000_000 for t in threads)


def test_pinned_threads_share_their_core():
    ends = []

    def crunch():
        t = session.current().thread()
        t.cpu(1000, "x")
        ends.append(t.now_ps)

    with emu.Session() as s:
        s.spawn(crunch, core=3)
        s.spawn(crunch, core=3)
        s.spawn(crunch, core=4)
    assert ends == [1000, 1000, 2000]


def test_cpu_work_goes_through_the_cache_model_on_the_core_it_runs_on():
    with emu.Session(overrides=["cpu.freq_hz=1e9", "cpu.issue_width=2"]) as s:
        main = s.main
        main.cpu(CpuWork("ops only", ops=ops.counts(int=1000, fp=1000)), "ops")
        assert main.now_ps == 1_000_000  # 2000 ops, 2 a cycle, 1 GHz
        lines = np.arange(0, 64 * 100, 64, dtype=np.int64)
        main.cpu(CpuWork("stream", ops=ops.counts(), addrs=lines), "stream")
        assert s.soc.cpu.counters["ddr_line_reads"] == 100
        assert s.soc.ddr.stats()["bytes_by_requester"] == {"soc.cpu.core0": 6400}


def test_wait_returns_done_timeout_or_deadlock():
    with emu.Session(overrides=FAST) as s:
        main = s.main
        done = main.submit(s.soc.bpu, Task("t", [Stage("s", 50_000)]))
        assert main.now_ps == 1000  # the API call's cost
        assert main.wait(done, 10_000) is WaitResult.TIMEOUT
        assert main.now_ps == 11_000
        assert main.wait(done) is WaitResult.DONE
        assert main.now_ps == 51_000
        assert main.wait(done, 5) is WaitResult.DONE  # already done: at once
        never = s.soc.env.event()
        assert main.wait(never) is WaitResult.DEADLOCK
        assert main.now_ps == 51_000 and s.deadlocks == 1


def test_a_deadlock_ends_the_earliest_waiting_thread_first_and_others_go_on():
    log = []
    never = []

    def waiter(name):
        result = session.current().thread().wait(never[0])
        log.append((name, result, emu.now_ms()))

    with emu.Session() as s:
        never.append(s.soc.env.event())
        s.spawn(waiter, "x")
        s.spawn(waiter, "y")
        s.run()
    assert log == [("x", WaitResult.DEADLOCK, 0.0), ("y", WaitResult.DEADLOCK, 0.0)]


def test_join_waits_for_a_thread_and_returns_its_result():
    def child():
        emu.sleep_ms(2)
        return 42

    def parent(out):
        t = session.current().spawn(child, name="child")
        out.append(session.current().join(t))
        out.append((t.result, emu.now_ms()))

    out = []
    with emu.Session() as s:
        s.spawn(parent, out, name="parent")
    assert out == [True, (42, 2.0)]


def test_a_failing_thread_is_reported_by_run_and_the_others_finish():
    done = []

    def bad():
        emu.sleep_ms(1)
        raise KeyError("boom")

    def good():
        emu.sleep_ms(2)
        done.append(emu.now_ms())

    s = emu.Session()
    s.spawn(bad, name="bad")
    s.spawn(good)
    with pytest.raises(HostThreadError, match="'bad' failed: KeyError") as info:
        s.run()
    assert isinstance(info.value.__cause__, KeyError)
    assert done == [2.0]
    s.close()


def test_completion_callbacks_run_at_the_completion_time_on_a_runtime_thread():
    seen = []
    with emu.Session(overrides=FAST) as s:
        main = s.main
        for length in (30_000, 10_000):
            done = main.submit(s.soc.bpu, Task(f"t{length}", [Stage("s", length)], core=0))
            s.call_when_done(done, lambda n=length: seen.append(
                (n, s.thread().name, s.now_ps)))
        s.run()
        main.wait(done)
    # Core 0 runs them in order: 1000..31000, then 31000..41000.
    assert seen == [(30_000, "runtime.callbacks", 31_000), (10_000, "runtime.callbacks", 41_000)]


def test_sessions_are_isolated_and_the_api_acts_on_the_innermost():
    with emu.Session() as a:
        a.main.sleep(5)
        with emu.Session() as b:
            assert session.current() is b
            assert b.now_ps == 0
        assert session.current() is a
        assert b.closed and not a.closed
    assert a.closed
    assert session.current() not in (a, b)  # the default session


def test_run_from_a_thread_and_spawn_on_a_closed_session_are_refused():
    def runs_itself():
        session.current().run()

    s = emu.Session()
    s.spawn(runs_itself, name="r")
    with pytest.raises(HostThreadError, match="call it from the main program"):
        s.run()
    s.close()
    with pytest.raises(session.WrongThread, match="closed"):
        s.spawn(print)


def test_a_session_closed_from_its_own_host_thread_refuses_and_runs_on():
    # A thread cannot end the loop that runs it: close() there raises WrongThread, which
    # fails that thread only; the session finishes the others and closes afterwards.
    s = emu.Session()
    done = []

    def closes_its_session():
        s.close()

    def sleeper():
        done.append(s.now_ps)  # a thread of the same session goes on after the refusal

    s.spawn(closes_its_session, name="closer")
    s.spawn(sleeper, name="sleeper")
    with pytest.raises(HostThreadError, match=r"'closer' failed: WrongThread: session \d+: "
                                              r"close\(\) called from inside its own"):
        s.run()
    assert not s.closed and done == [0]
    s.close()
    assert s.closed


def test_another_os_thread_is_refused():
    s = emu.Session()
    caught = []

    def other():
        try:
            s.check_caller()
        except session.WrongThread as exc:
            caught.append(str(exc))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert "another OS thread" in caught[0]
    s.close()


def test_bad_thread_options_are_refused():
    with emu.Session() as s:
        with pytest.raises(ValueError, match="no A55 core 8"):
            s.spawn(print, core=8)
        with pytest.raises(ValueError, match="priority 256"):
            s.spawn(print, priority=256)
        s.spawn(print, name="x")
        with pytest.raises(ValueError, match="already taken"):
            s.spawn(print, name="x")
        with pytest.raises(ValueError, match="negative"):
            s.main.sleep(-1)
        with pytest.raises(SimulationError, match="join itself"):
            s.join(s.main)
        with pytest.raises(ValueError, match="sleep_ms"):
            emu.sleep_ms(float("nan"))


def test_many_threads():
    ends = []

    def tick(k):
        emu.sleep_ms(k % 7)
        ends.append(k)

    with emu.Session() as s:
        for k in range(200):
            s.spawn(tick, k)
    assert len(ends) == 200
    assert ends == sorted(range(200), key=lambda k: (k % 7, k))


def test_closing_a_session_ends_its_blocked_threads_and_their_calls_return_codes():
    from emu.runtime.hbsys import HB_SYS_WRONG_THREAD, hbSysAllocMem, hbSysFreeMem, hbSysMem

    codes = []

    def stuck():
        mem = hbSysMem()
        codes.append(hbSysAllocMem(mem, 64))
        try:
            emu.sleep_ms(1000)
        finally:
            codes.append(hbSysFreeMem(mem))  # runs at close, in a closed session

    s = emu.Session()
    thread = s.spawn(stuck)
    s.main.sleep(10**9)  # 1 ms: the thread has allocated and sleeps
    s.close()
    assert codes == [0, HB_SYS_WRONG_THREAD]
    assert thread.finished_ps == -1 and s.closed


def test_an_exception_in_the_with_block_closes_without_running_the_threads():
    ran = []
    with pytest.raises(RuntimeError, match="user"), emu.Session() as s:
        s.spawn(ran.append, 1)
        raise RuntimeError("user")
    assert ran == [] and s.closed


def test_a_wait_that_ended_early_leaves_no_timer_behind():
    with emu.Session(overrides=FAST) as s:
        main = s.main
        done = main.submit(s.soc.bpu, Task("t", [Stage("s", 5_000)]))
        assert main.wait(done, 10**15) is WaitResult.DONE  # a 1000 s timeout, unused
        assert main.now_ps == 6_000
        # The deadlock is seen at once, not after the forgotten timeout would have fired.
        assert main.wait(s.soc.env.event()) is WaitResult.DEADLOCK
        assert main.now_ps == 6_000

import numpy as np
import pytest

from emu.cpu.cluster import CpuWork
from emu.errors import SimulationError
from emu.runtime.host import Host
from emu.soc.builder import Soc
from emu.soc.config import load_config
from emu.soc.sched import Stage, Task


def _soc(*overrides: str) -> Soc:
    return Soc(load_config(overrides=["cpu.api_call_ps=1000", "bpu.task_overhead_ps=0",
                                      *overrides]), trace=True).build()


def test_submit_returns_at_once_and_wait_runs_until_done():
    soc = _soc()
    host = Host(soc)
    task = host.submit(soc.bpu, Task("t", [Stage("s", 50_000)]))
    assert host.now_ps == 1000  # only the call's own cost
    assert not task.finished
    assert host.wait(task) is True
    assert (task.started_ps, task.finished_ps, host.now_ps) == (1000, 51_000, 51_000)


def test_wait_with_timeout_returns_false_at_the_timeout_and_can_wait_again():
    soc = _soc()
    host = Host(soc)
    task = host.submit(soc.bpu, Task("t", [Stage("s", 50_000)]))
    assert host.wait(task, timeout_ps=10_000) is False
    assert host.now_ps == 11_000
    assert host.wait(task, timeout_ps=10**9) is True
    assert host.now_ps == 51_000
    # Waiting on a finished task returns at once.
    assert host.wait(task, timeout_ps=5) is True
    assert host.now_ps == 51_000


def test_host_time_lets_queued_work_progress():
    soc = _soc()
    host = Host(soc)
    task = host.submit(soc.bpu, Task("t", [Stage("s", 5_000)]))
    host.advance(20_000)
    assert task.finished_ps == 6_000
    assert host.now_ps == 21_000


def test_cpu_work_runs_on_the_host_core_and_costs_cycles_and_misses():
    soc = _soc("cpu.freq_hz=1e9", "cpu.issue_width=2", "ddr.latency_ps=100ns",
               "cpu.miss_overlap=4", "cpu.ddr_port_bytes_per_s=8e9", "cpu.l2.hit_latency_cycles=9")
    host = Host(soc, core=3)
    host.run_cpu(CpuWork("ops only", ops=2000))
    # 2000 ops at 2 per cycle at 1 GHz.
    assert host.now_ps == 1_000_000
    lines = np.arange(0, 64 * 1000, 64, dtype=np.int64)
    host.run_cpu(CpuWork("cold stream", ops=0, addrs=lines))
    assert soc.cpu.counters["ddr_line_reads"] == 1000
    assert soc.ddr.stats()["bytes_by_requester"] == {"soc.cpu.core3": 64_000}
    # 1000 fills, 4 in flight: 250 x 100 ns exposed, then 64 kB at 8 GB/s.
    assert host.now_ps - 1_000_000 == 250 * 100_000 + 8_000_000
    before = host.now_ps
    host.run_cpu(CpuWork("warm stream", ops=0, addrs=lines))
    # 64 kB does not fit the 32 KiB L1 but does fit L2: 1000 hits of 9 cycles at 1 GHz.
    assert soc.cpu.counters["l2_hits"] == 1000
    assert host.now_ps - before == 9_000_000


def test_bad_host_use_is_refused():
    soc = _soc()
    with pytest.raises(SimulationError, match="no A55 core 8"):
        Host(soc, core=8)
    host = Host(soc)
    with pytest.raises(SimulationError, match="never submitted"):
        host.wait(Task("t", []))
    with pytest.raises(SimulationError, match="negative"):
        host.advance(-1)

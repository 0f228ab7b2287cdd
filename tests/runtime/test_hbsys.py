import numpy as np
import pytest

from emu.runtime import session
from emu.runtime.hbsys import (
    HB_SYS_INVALID_ARGUMENT,
    HB_SYS_INVALID_MEMORY,
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_CACHE_INVALIDATE,
    HB_SYS_OUT_OF_MEMORY,
    hbSysAllocCachedMem,
    hbSysAllocMem,
    hbSysFlushMem,
    hbSysFreeMem,
    hbSysMem,
    hbSysReadMem,
    hbSysWriteMem,
)


@pytest.fixture
def sess():
    return session.start("j5", overrides=["mem.pool_bytes=1MiB", "cpu.api_call_ps=1000",
                                          "cpu.flush_call_cycles=0", "cpu.freq_hz=1GHz",
                                          "cpu.cache_op_cycles=10", "ddr.latency_ps=100ns",
                                          "cpu.ddr_port_bytes_per_s=8GB/s"])


def test_alloc_write_flush_read_free(sess):
    mem = hbSysMem()
    assert hbSysAllocCachedMem(mem, 1000) == 0
    assert mem.memSize == 1000 and mem.phyAddr > 0 and mem.virAddr.shape == (1000,)
    data = np.arange(250, dtype=np.int32)
    assert hbSysWriteMem(mem, data, 1000) == 0
    assert (mem.virAddr.view(np.int32) == data).all()
    before = sess.main.now_ps
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN) == 0
    # The write streamed lines 3-14 to DDR (whole lines, after a run of cpu.write_stream_lines
    # = 4), so the caches hold 4 dirty lines (0-2, and 15, which the 1000 B fill only in
    # part). The call, one 10-cycle op per line (16 lines at 1 GHz), then those 4 lines go
    # back to DDR: one latency, then 256 B at the core's 8 GB/s port.
    assert sess.soc.cpu.counters["ddr_stream_writes"] == 12
    assert sess.main.now_ps - before == 1000 + 16 * 10_000 + 100_000 + 32_000
    out = np.zeros(250, dtype=np.int32)
    assert hbSysReadMem(out, mem, 1000) == 0
    assert (out == data).all()
    assert hbSysFreeMem(mem) == 0
    assert sess.soc.pool.live_buffers == 0


def _cpu_counters(sess) -> dict:
    return dict(sess.soc.cpu.counters)


def _delta(before: dict, after: dict, key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)


def test_invalidate_makes_the_next_read_miss_and_clean_writes_back_what_is_dirty(sess):
    mem = hbSysMem()
    assert hbSysAllocCachedMem(mem, 4096) == 0  # 64 lines
    out = np.zeros(4096, np.uint8)
    assert hbSysReadMem(out, mem, 4096) == 0  # first read: every line from DDR
    c0 = _cpu_counters(sess)
    assert hbSysReadMem(out, mem, 4096) == 0  # again: all hits
    c1 = _cpu_counters(sess)
    assert _delta(c0, c1, "ddr_line_reads") == 0
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_INVALIDATE) == 0
    c2 = _cpu_counters(sess)
    assert _delta(c1, c2, "lines_invalidated") == 64
    assert hbSysReadMem(out, mem, 4096) == 0  # after the invalidate: misses again
    c3 = _cpu_counters(sess)
    assert _delta(c2, c3, "ddr_line_reads") == 64

    # A write leaves 64 dirty lines; the clean writes each back once, the next clean none.
    written0 = sess.soc.ddr.counters.get("bytes_written", 0)
    assert hbSysWriteMem(mem, np.ones(4096, np.uint8), 4096) == 0
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN) == 0
    c4 = _cpu_counters(sess)
    assert _delta(c3, c4, "lines_cleaned") == 64
    before = sess.main.now_ps
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN) == 0
    assert _delta(c4, _cpu_counters(sess), "lines_cleaned") == 0
    # Nothing dirty: the call and one 10-cycle op per line at 1 GHz, no DDR traffic.
    assert sess.main.now_ps - before == 1000 + 64 * 10_000
    assert sess.soc.ddr.counters.get("bytes_written", 0) - written0 == 64 * 64


def test_maintenance_cost_follows_the_lines_of_the_range(sess):
    mem, big = hbSysMem(), hbSysMem()
    assert hbSysAllocCachedMem(mem, 640) == 0
    assert hbSysAllocCachedMem(big, 6400) == 0
    times = []
    for m in (mem, big):
        before = sess.main.now_ps
        assert hbSysFlushMem(m, HB_SYS_MEM_CACHE_INVALIDATE) == 0
        times.append(sess.main.now_ps - before)
    assert times == [1000 + 10 * 10_000, 1000 + 100 * 10_000]


def test_uncached_buffers_need_no_maintenance_time(sess):
    mem = hbSysMem()
    assert hbSysAllocMem(mem, 4096) == 0
    before = sess.main.now_ps
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_INVALIDATE) == 0
    assert sess.main.now_ps - before == 1000  # only the call


def test_misuse_returns_codes_and_changes_nothing(sess):
    mem = hbSysMem()
    assert hbSysAllocMem(mem, 0) == HB_SYS_INVALID_ARGUMENT
    assert hbSysAllocMem("mem", 10) == HB_SYS_INVALID_ARGUMENT
    assert hbSysAllocMem(mem, 2 << 20) == HB_SYS_OUT_OF_MEMORY
    assert mem.virAddr is None
    assert hbSysFreeMem(mem) == HB_SYS_INVALID_MEMORY
    assert hbSysAllocMem(mem, 64) == 0
    assert hbSysFlushMem(mem, 7) == HB_SYS_INVALID_ARGUMENT
    assert hbSysWriteMem(mem, b"x" * 65, 65) == HB_SYS_INVALID_ARGUMENT
    assert hbSysReadMem(np.zeros(10, np.uint8), mem, 11) == HB_SYS_INVALID_ARGUMENT
    assert hbSysFreeMem(mem) == 0
    assert hbSysFreeMem(mem) == HB_SYS_INVALID_MEMORY  # double free
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN) == HB_SYS_INVALID_MEMORY
    forged = hbSysMem()
    forged.phyAddr, forged.virAddr, forged.memSize = 0x8000_0000, np.zeros(8, np.uint8), 8
    assert hbSysFreeMem(forged) == HB_SYS_INVALID_MEMORY
    assert sess.soc.pool.live_buffers == 0 and sess.soc.pool.used_bytes == 0

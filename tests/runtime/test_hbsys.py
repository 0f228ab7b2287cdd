import copy
import itertools
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from emu.runtime import session, status
from emu.runtime.hbdsp import (
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM,
    hbDSPReleaseTask,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_INVALID_ARGUMENT,
    HB_SYS_INVALID_MEMORY,
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_CACHE_INVALIDATE,
    HB_SYS_MEM_IN_USE,
    HB_SYS_OUT_OF_MEMORY,
    HB_SYS_WRONG_RELEASE,
    HB_SYS_WRONG_THREAD,
    buffer_of,
    hbSysAllocCachedMem,
    hbSysAllocMem,
    hbSysFlushMem,
    hbSysFreeMem,
    hbSysMem,
    hbSysReadMem,
    hbSysRegisterMem,
    hbSysUnregisterMem,
    hbSysWriteMem,
)
from emu.vdsp.ops.framework import CMD_PING


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


# --- hbSysRegisterMem / hbSysUnregisterMem ------------------------------------------------

PAGE = 4096  # the J5 preset's pool alignment


def _range(phys, size) -> hbSysMem:
    mem = hbSysMem()
    mem.phyAddr, mem.memSize = phys, size
    return mem


def _ping(a: hbSysMem, b: hbSysMem):
    ctrl = hbDSPRpcCtrlParam()
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.rpcCmd = CMD_PING
    rc, task = hbDSPRpc(a, b, ctrl)
    assert rc == 0
    return task


def test_register_use_unregister_and_the_range_is_free_again(sess):
    pool = sess.soc.pool
    assert pool.alignment_bytes == PAGE
    empty = pool.free_blocks
    where = pool.base_addr + 16 * PAGE
    mem = _range(where, 2 * PAGE)
    before = sess.main.now_ps
    assert hbSysRegisterMem(mem) == 0
    assert sess.main.now_ps - before == 1000  # the API call only
    assert (mem.phyAddr, mem.memSize, mem.virAddr.shape) == (where, 2 * PAGE, (2 * PAGE,))
    buf = buffer_of(mem, sess)
    assert buf is not None and buf.cached and buf.is_reservation
    assert (pool.alloc_count, pool.reserve_count, pool.live_buffers) == (0, 1, 1)

    # Cacheable: an invalidate costs one maintenance op per line (128 lines, none dirty).
    before = sess.main.now_ps
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_INVALIDATE) == 0
    assert sess.main.now_ps - before == 1000 + 128 * 10_000
    data = np.arange(2 * PAGE, dtype=np.uint8)
    assert hbSysWriteMem(mem, data, data.size) == 0
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN) == 0
    out = np.zeros_like(data)
    assert hbSysReadMem(out, mem, out.size) == 0
    assert (out == data).all() and (mem.virAddr == data).all()

    # An accelerator uses it like an allocated buffer; an allocation keeps off it.
    other = hbSysMem()
    assert hbSysAllocCachedMem(other, 20 * PAGE) == 0
    assert other.phyAddr == where + 2 * PAGE  # the first 16 pages are too few
    task = _ping(mem, other)
    assert hbDSPWaitTaskDone(task, 0) == 0 and hbDSPReleaseTask(task) == 0
    assert hbSysFreeMem(other) == 0

    assert hbSysUnregisterMem(mem) == 0
    assert mem.virAddr is None and not buf.alive
    assert pool.free_blocks == empty and pool.used_bytes == 0
    whole = hbSysMem()
    assert hbSysAllocMem(whole, pool.size_bytes) == 0  # the range is free again
    assert hbSysFreeMem(whole) == 0


def test_register_rounds_the_range_up_to_pages_and_accepts_numpy_integers(sess):
    pool = sess.soc.pool
    mem = _range(np.uint64(pool.base_addr + PAGE), np.int32(100))
    assert hbSysRegisterMem(mem) == 0
    assert type(mem.phyAddr) is int and mem.memSize == 100 and mem.virAddr.size == 100
    assert pool.free_blocks == ((pool.base_addr, PAGE),
                                (pool.base_addr + 2 * PAGE, pool.size_bytes - 2 * PAGE))
    assert hbSysRegisterMem(_range(pool.base_addr, PAGE)) == 0  # the page below is free
    assert pool.free_blocks == ((pool.base_addr + 2 * PAGE, pool.size_bytes - 2 * PAGE),)


def _bad_registrations(base: int, size: int) -> list[tuple[object, object]]:
    """(phyAddr, memSize) pairs that `test_bad_registrations...` refuses, given an
    allocation of 100 B at `base` (its page, padding included, is taken) and a registration
    of pages 2-3."""
    return [
        (base + 64, PAGE),  # not page aligned
        (base + 4 * PAGE + 1, 1),
        (base - PAGE, PAGE),  # below the pool
        (base - PAGE, 2 * PAGE),  # straddling its start
        (base + size - PAGE, PAGE + 1),  # straddling its end
        (base + size, 1),  # past it
        (0, PAGE),
        (2**64, PAGE),
        (base, 50),  # the allocation
        (base + 64, 1),
        (base + 99, 1),
        (base, PAGE),  # and its padding
        (base + 2 * PAGE, PAGE),  # the registration
        (base + 3 * PAGE, 1),
        (base + PAGE, 2 * PAGE),  # reaching into it
        (base + PAGE, size),
        (base + 4 * PAGE, 0),  # sizes
        (base + 4 * PAGE, -1),
        (base + 4 * PAGE, 1.0),
        (base + 4 * PAGE, True),
        (base + 4 * PAGE, None),
        (base + 4 * PAGE, "1"),
        (float(base + 4 * PAGE), PAGE),  # addresses
        (-PAGE, PAGE),
        (None, PAGE),
        (np.bool_(True), PAGE),
        (str(base + 4 * PAGE), PAGE),
    ]


def test_bad_registrations_return_invalid_argument_and_change_nothing(sess):
    pool = sess.soc.pool
    alloc = hbSysMem()
    assert hbSysAllocMem(alloc, 100) == 0 and alloc.phyAddr == pool.base_addr
    assert hbSysRegisterMem(_range(pool.base_addr + 2 * PAGE, 2 * PAGE)) == 0
    before = (pool.free_blocks, pool.stats())
    for phys, size in _bad_registrations(pool.base_addr, pool.size_bytes):
        mem = _range(phys, size)
        assert hbSysRegisterMem(mem) == HB_SYS_INVALID_ARGUMENT, (phys, size)
        assert (mem.phyAddr, mem.memSize, mem.virAddr) == (phys, size, None)
        assert (pool.free_blocks, pool.stats()) == before
    for bad in (None, "mem", 0, object(), [pool.base_addr + 4 * PAGE, PAGE]):
        assert hbSysRegisterMem(bad) == HB_SYS_INVALID_ARGUMENT
    assert (pool.free_blocks, pool.stats()) == before
    assert hbSysRegisterMem(_range(pool.base_addr + 4 * PAGE, 1)) == 0  # this one was good


def test_free_and_unregister_each_refuse_the_others_buffers(sess):
    pool = sess.soc.pool
    reg, alloc = _range(pool.base_addr + 8 * PAGE, 64), hbSysMem()
    assert hbSysRegisterMem(reg) == 0 and hbSysAllocCachedMem(alloc, 64) == 0
    before = (pool.free_blocks, pool.stats())
    assert hbSysFreeMem(reg) == HB_SYS_WRONG_RELEASE
    assert hbSysUnregisterMem(alloc) == HB_SYS_WRONG_RELEASE
    assert (pool.free_blocks, pool.stats()) == before
    assert reg.virAddr is not None and alloc.virAddr is not None
    assert "hbSysUnregisterMem" in status.describe(HB_SYS_WRONG_RELEASE)
    assert hbSysWriteMem(reg, b"still usable", 12) == 0
    assert hbSysFreeMem(alloc) == 0 and hbSysUnregisterMem(reg) == 0
    assert pool.live_buffers == 0


def test_unregister_of_no_live_buffer_is_invalid_memory(sess):
    pool = sess.soc.pool
    mem = _range(pool.base_addr, PAGE)
    for bad in (None, "mem", hbSysMem(), mem):  # `mem` is not registered yet
        assert hbSysUnregisterMem(bad) == HB_SYS_INVALID_MEMORY
    assert hbSysRegisterMem(mem) == 0
    stale = copy.copy(mem)
    forged = _range(pool.base_addr, PAGE)
    forged.virAddr = np.zeros(PAGE, np.uint8)
    assert hbSysUnregisterMem(forged) == HB_SYS_INVALID_MEMORY
    assert hbSysUnregisterMem(mem) == 0
    assert hbSysUnregisterMem(mem) == HB_SYS_INVALID_MEMORY  # twice
    # A stale copy is refused even once a new registration took the same range.
    assert hbSysRegisterMem(_range(pool.base_addr, PAGE)) == 0
    for call in (hbSysUnregisterMem, hbSysFreeMem):
        assert call(stale) == HB_SYS_INVALID_MEMORY
    assert hbSysFlushMem(stale, HB_SYS_MEM_CACHE_CLEAN) == HB_SYS_INVALID_MEMORY
    assert pool.live_buffers == 1


def test_unregister_waits_for_the_tasks_that_use_the_buffer(sess):
    pool = sess.soc.pool
    a, b = _range(pool.base_addr, 64), _range(pool.base_addr + PAGE, 64)
    assert hbSysRegisterMem(a) == 0 and hbSysRegisterMem(b) == 0
    task = _ping(a, b)
    before = (pool.free_blocks, pool.stats())
    assert hbSysUnregisterMem(a) == HB_SYS_MEM_IN_USE
    assert hbSysUnregisterMem(b) == HB_SYS_MEM_IN_USE
    assert (pool.free_blocks, pool.stats()) == before and a.virAddr is not None
    assert hbDSPWaitTaskDone(task, 0) == 0 and hbDSPReleaseTask(task) == 0
    assert hbSysUnregisterMem(a) == 0 and hbSysUnregisterMem(b) == 0


def test_register_and_unregister_from_another_os_thread_are_refused(sess):
    mem = _range(sess.soc.pool.base_addr, PAGE)
    codes = []

    def elsewhere():
        codes.append(hbSysRegisterMem(_range(sess.soc.pool.base_addr + PAGE, PAGE)))
        codes.append(hbSysUnregisterMem(mem))

    assert hbSysRegisterMem(mem) == 0
    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    assert codes == [HB_SYS_WRONG_THREAD, HB_SYS_WRONG_THREAD]
    assert sess.soc.pool.live_buffers == 1


class RegisterMachine(RuleBasedStateMachine):
    """Random hbSysAlloc/Free/Register/Unregister calls (and crossed ones) on a 16-page
    pool: every code is what a model of the live ranges predicts, and the pool stays
    consistent."""

    @initialize()
    def start(self) -> None:
        self.sess = session.start("j5", overrides=["mem.pool_bytes=64KiB"])
        self.pool = self.sess.soc.pool
        self.live: dict[int, tuple[hbSysMem, bool]] = {}  # serial: (mem, registered)
        self.allocs = self.registers = 0

    def spans(self) -> list[tuple[int, int]]:
        """[start, end) of every live buffer, padding included, lowest first."""
        return sorted((m.phyAddr, m.phyAddr + -(-m.memSize // PAGE) * PAGE)
                      for m, _ in self.live.values())

    @rule(size=st.integers(1, 20 * PAGE), cached=st.booleans())
    def alloc(self, size: int, cached: bool) -> None:
        mem = hbSysMem()
        rc = (hbSysAllocCachedMem if cached else hbSysAllocMem)(mem, size)
        if rc == 0:
            self.allocs += 1
            self.live[self.allocs + self.registers] = (mem, False)
        else:
            assert rc == HB_SYS_OUT_OF_MEMORY

    @rule(page=st.integers(-2, 17), offset=st.sampled_from([0, 0, 0, 1, 64, PAGE - 1]),
          size=st.integers(1, 3 * PAGE) | st.integers(1, 17 * PAGE))
    def register(self, page: int, offset: int, size: int) -> None:
        phys = self.pool.base_addr + page * PAGE + offset
        end = phys + -(-size // PAGE) * PAGE
        ok = (offset == 0 and self.pool.base_addr <= phys
              and end <= self.pool.base_addr + self.pool.size_bytes
              and all(e <= phys or end <= s for s, e in self.spans()))
        before = (self.pool.free_blocks, self.pool.stats())
        mem = _range(phys, size)
        if not ok:
            assert hbSysRegisterMem(mem) == HB_SYS_INVALID_ARGUMENT
            assert (self.pool.free_blocks, self.pool.stats()) == before
            return
        assert hbSysRegisterMem(mem) == 0
        assert mem.virAddr is not None and mem.virAddr.size == size
        self.registers += 1
        self.live[self.allocs + self.registers] = (mem, True)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), crossed=st.booleans())
    def release(self, data: st.DataObject, crossed: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.live)), label="buffer")
        mem, registered = self.live[key]
        call = hbSysUnregisterMem if registered != crossed else hbSysFreeMem
        if crossed:
            before = (self.pool.free_blocks, self.pool.stats())
            assert call(mem) == HB_SYS_WRONG_RELEASE
            assert (self.pool.free_blocks, self.pool.stats()) == before
            return
        stale = copy.copy(mem)
        assert call(mem) == 0 and mem.virAddr is None
        del self.live[key]
        assert call(stale) == HB_SYS_INVALID_MEMORY

    @invariant()
    def pool_matches_the_model(self) -> None:
        pool, spans = self.pool, self.spans()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start
        top = pool.base_addr + pool.size_bytes
        assert all(pool.base_addr <= s < e <= top for s, e in spans)
        free = list(pool.free_blocks)
        for (a, n), (b, _) in itertools.pairwise(free):
            assert a + n < b  # sorted and coalesced
        # Live spans and free blocks tile the pool exactly.
        tiles = sorted([*spans, *((a, a + n) for a, n in free)])
        assert [s for s, _ in tiles] == [pool.base_addr, *(e for _, e in tiles[:-1])]
        assert not tiles or tiles[-1][1] == top
        used = sum(e - s for s, e in spans)
        assert (pool.used_bytes, pool.free_bytes) == (used, pool.size_bytes - used)
        assert pool.high_water_bytes >= used
        assert (pool.live_buffers, pool.alloc_count, pool.reserve_count) == (
            len(self.live), self.allocs, self.registers)
        for mem, registered in self.live.values():
            buf = buffer_of(mem, self.sess)
            assert buf is not None and buf.is_reservation == registered


RegisterMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_register_machine = RegisterMachine.TestCase

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
                                          "mem.maintenance_call_ps=0",
                                          "mem.clean_bytes_per_s=1e9"])


def test_alloc_write_flush_read_free(sess):
    mem = hbSysMem()
    assert hbSysAllocCachedMem(mem, 1000) == 0
    assert mem.memSize == 1000 and mem.phyAddr > 0 and mem.virAddr.shape == (1000,)
    data = np.arange(250, dtype=np.int32)
    assert hbSysWriteMem(mem, data, 1000) == 0
    assert (mem.virAddr.view(np.int32) == data).all()
    before = sess.main.now_ps
    assert hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN) == 0
    # The call, then 1000 B at 1 GB/s.
    assert sess.main.now_ps - before == 1000 + 1_000_000
    out = np.zeros(250, dtype=np.int32)
    assert hbSysReadMem(out, mem, 1000) == 0
    assert (out == data).all()
    assert hbSysFreeMem(mem) == 0
    assert sess.soc.pool.live_buffers == 0


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

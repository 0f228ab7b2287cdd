"""hbSys: the board's memory API (CMA/ION pool buffers shared by CPU, BPU and DSP).

C calling convention, for line-by-line ports: every function returns its status code
first; structs passed by pointer in C are filled in place.

    mem = hbSysMem()
    rc = hbSysAllocCachedMem(mem, 1 << 20)      # mem.phyAddr, mem.virAddr, mem.memSize set
    mem.virAddr[:4] = (1, 2, 3, 4)              # virAddr is a writable numpy uint8 array
    rc = hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN)
    rc = hbSysFreeMem(mem)

Only the CPU has caches: after the CPU writes a cached buffer that an accelerator will
read, clean it; before the CPU reads what an accelerator wrote, invalidate it. Each call
costs the host simulated time (the API call and, for a flush, the walk over the buffer).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from emu.cpu.cluster import CpuWork
from emu.errors import PoolError
from emu.mem import maintenance
from emu.mem.pool import PoolBuffer
from emu.runtime import session, status

HB_SYS_MEM_CACHE_INVALIDATE = 1
HB_SYS_MEM_CACHE_CLEAN = 2

HB_SYS_SUCCESS = status.SUCCESS
HB_SYS_INVALID_ARGUMENT = status.define(-6100001, "hbSys: invalid argument")
HB_SYS_OUT_OF_MEMORY = status.define(
    -6100002, "hbSys: the memory pool cannot hold the allocation (exhausted or fragmented)")
HB_SYS_INVALID_MEMORY = status.define(
    -6100003, "hbSys: not a live buffer of the pool (never allocated, or already freed)")


class hbSysMem:
    """A pool buffer as the board describes it: physical address, CPU view, size."""

    def __init__(self) -> None:
        self.phyAddr: int = 0
        self.virAddr: npt.NDArray[np.uint8] | None = None
        self.memSize: int = 0

    def __repr__(self) -> str:
        return f"hbSysMem(phyAddr={self.phyAddr:#x}, memSize={self.memSize})"


def buffer_of(mem: Any) -> PoolBuffer | None:
    """The live pool buffer an `hbSysMem` describes, or None if it describes none."""
    if not isinstance(mem, hbSysMem) or mem.virAddr is None:
        return None
    buf = session.current().soc.pool.find(mem.phyAddr)
    if buf is None or buf.phys_addr != mem.phyAddr or buf.size_bytes != mem.memSize:
        return None
    return buf


def _alloc(mem: Any, size: Any, cached: bool) -> int:
    if not isinstance(mem, hbSysMem) or not isinstance(size, int | np.integer) or size <= 0:
        return HB_SYS_INVALID_ARGUMENT
    sess = session.current()
    sess.host.api_call("hbSysAllocMem")
    try:
        buf = sess.soc.pool.alloc(int(size), cached=cached, label="hbSysMem")
    except PoolError:
        return HB_SYS_OUT_OF_MEMORY
    mem.phyAddr, mem.virAddr, mem.memSize = buf.phys_addr, buf.data, buf.size_bytes
    return HB_SYS_SUCCESS


def hbSysAllocMem(mem: hbSysMem, size: int) -> int:
    """Allocate an uncached buffer of `size` bytes into `mem`."""
    return _alloc(mem, size, cached=False)


def hbSysAllocCachedMem(mem: hbSysMem, size: int) -> int:
    """Allocate a CPU-cached buffer of `size` bytes into `mem`."""
    return _alloc(mem, size, cached=True)


def hbSysFreeMem(mem: hbSysMem) -> int:
    buf = buffer_of(mem)
    if buf is None:
        return HB_SYS_INVALID_MEMORY
    sess = session.current()
    sess.host.api_call("hbSysFreeMem")
    sess.soc.pool.free(buf)
    mem.virAddr = None
    return HB_SYS_SUCCESS


def hbSysFlushMem(mem: hbSysMem, flag: int) -> int:
    """Clean (after CPU writes) or invalidate (before CPU reads) a cached buffer."""
    buf = buffer_of(mem)
    if buf is None:
        return HB_SYS_INVALID_MEMORY
    if flag not in (HB_SYS_MEM_CACHE_CLEAN, HB_SYS_MEM_CACHE_INVALIDATE):
        return HB_SYS_INVALID_ARGUMENT
    sess = session.current()
    sess.host.api_call("hbSysFlushMem")
    if buf.cached:
        cfg = sess.soc.config.mem
        if flag == HB_SYS_MEM_CACHE_CLEAN:
            sess.host.advance(maintenance.clean_ps(buf.size_bytes, cfg), "cache clean")
        else:
            sess.host.advance(maintenance.invalidate_ps(buf.size_bytes, cfg), "cache invalidate")
    return HB_SYS_SUCCESS


def _copy_cost(buf: PoolBuffer, size: int, label: str, *, writes: bool) -> CpuWork:
    # memcpy on the host core: one 16-byte load and store per 16 bytes, through the caches.
    line = session.current().soc.config.cpu.line_bytes
    addrs = np.arange(buf.phys_addr, buf.phys_addr + size, line, dtype=np.int64)
    return CpuWork(label, ops=2 * -(-size // 16), addrs=addrs,
                   is_write=np.full(len(addrs), writes))


def hbSysWriteMem(dest: hbSysMem, src: Any, size: int) -> int:
    """Copy `size` bytes from a host array or bytes object into the buffer `dest`."""
    buf = buffer_of(dest)
    if buf is None:
        return HB_SYS_INVALID_MEMORY
    data = np.frombuffer(bytes(src), dtype=np.uint8) if isinstance(src, bytes | bytearray) \
        else np.asarray(src).reshape(-1).view(np.uint8)
    if not isinstance(size, int) or not 0 < size <= min(buf.size_bytes, data.size):
        return HB_SYS_INVALID_ARGUMENT
    sess = session.current()
    sess.host.api_call("hbSysWriteMem")
    buf.data[:size] = data[:size]
    sess.host.run_cpu(_copy_cost(buf, size, "hbSysWriteMem", writes=True))
    return HB_SYS_SUCCESS


def hbSysReadMem(dest: npt.NDArray[Any], src: hbSysMem, size: int) -> int:
    """Copy `size` bytes of the buffer `src` into the writable host array `dest`."""
    buf = buffer_of(src)
    if buf is None:
        return HB_SYS_INVALID_MEMORY
    if not isinstance(dest, np.ndarray) or not dest.flags.writeable or not dest.flags.c_contiguous:
        return HB_SYS_INVALID_ARGUMENT
    view = dest.reshape(-1).view(np.uint8)
    if not isinstance(size, int) or not 0 < size <= min(buf.size_bytes, view.size):
        return HB_SYS_INVALID_ARGUMENT
    sess = session.current()
    sess.host.api_call("hbSysReadMem")
    view[:size] = buf.data[:size]
    sess.host.run_cpu(_copy_cost(buf, size, "hbSysReadMem", writes=False))
    return HB_SYS_SUCCESS

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
costs the calling host thread simulated time on an A55 core (the API call; for a flush,
one maintenance instruction per line of the buffer acting on the cache model: a clean
writes the dirty lines the caches hold back to DDR, an invalidate drops the lines so the
CPU's next reads miss; for a copy, the copy through the cache model).

An `hbSysMem` names a buffer of its session's pool by its physical address and its CPU
view: `virAddr` must be the very array the allocation (or registration) handed out. So a
copy of the struct made before the buffer was freed is refused even when a new buffer took
the same address (it still holds the old array), and so is a struct of another session
(whose pool has its own arrays at the same addresses). A buffer that a queued or running
task uses cannot be freed until the task is done.

Registered memory. On the board, memory reserved outside the allocator (a camera driver's
carve-out, say) is known by its physical address; hbSysRegisterMem makes it a buffer the
BPU can use:

    mem = hbSysMem()
    mem.phyAddr, mem.memSize = carve_out_addr, frame_bytes
    rc = hbSysRegisterMem(mem)                  # mem.virAddr set: the CPU's (cached) view
    ...                                         # flush, copy, hbDSPRpc, hbDNN tensors
    rc = hbSysUnregisterMem(mem)                # mem.virAddr = None, the range is free again

The emulator has no DDR outside its pool, so the range must lie in the session's pool and
not overlap any live buffer (allocated or registered); the pool then reserves exactly that
range (`CmaPool.reserve`). `phyAddr` must be a multiple of the pool alignment
(`mem.alignment_bytes`: 4 KiB, a page, on the J5 preset: the unit memory is mapped in);
the range taken is `memSize` rounded up to it, as for an allocation. Anything else returns
HB_SYS_INVALID_ARGUMENT and changes nothing. The buffer is cacheable, its contents start
zeroed (the emulator keeps bytes per buffer, not per address, so they do not survive
unregistering either), and it is a buffer like any other, except that it is released with
hbSysUnregisterMem only: hbSysFreeMem of a registered buffer, or hbSysUnregisterMem of an
allocated one, returns HB_SYS_WRONG_RELEASE. Registrations do not count in the pool's
`alloc_count` (they are not allocations) but in its `reserve_count`; they do count in its
used bytes, high-water mark and live buffers, since they occupy the pool.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import numpy.typing as npt

from emu.cpu import ops
from emu.cpu.cluster import CLEAN, INVALIDATE, CacheMaintenance, CpuWork
from emu.cpu.work import copy_work
from emu.errors import PoolError
from emu.mem.pool import PoolBuffer
from emu.runtime import session, status
from emu.runtime.cstruct import CStruct

HB_SYS_MEM_CACHE_INVALIDATE = 1
HB_SYS_MEM_CACHE_CLEAN = 2
hbSysMemFlushFlag = enum.IntEnum("hbSysMemFlushFlag", {  # the C enum as a type
    "HB_SYS_MEM_CACHE_INVALIDATE": HB_SYS_MEM_CACHE_INVALIDATE,
    "HB_SYS_MEM_CACHE_CLEAN": HB_SYS_MEM_CACHE_CLEAN})

HB_SYS_SUCCESS = status.SUCCESS
HB_SYS_INVALID_ARGUMENT = status.define(-6100001, "hbSys: invalid argument")
HB_SYS_OUT_OF_MEMORY = status.define(
    -6100002, "hbSys: the memory pool cannot hold the allocation (exhausted or fragmented)")
HB_SYS_INVALID_MEMORY = status.define(
    -6100003, "hbSys: not a live buffer of this session's pool (never allocated or registered, "
              "freed or unregistered, a stale copy of such a buffer's struct, or another "
              "session's)")
HB_SYS_WRONG_THREAD = status.define_wrong_thread(-6100004, "hbSys")
HB_SYS_MEM_IN_USE = status.define(
    -6100005, "hbSys: the buffer is used by a queued or running task; wait for the task "
              "before freeing or unregistering it")
HB_SYS_WRONG_RELEASE = status.define(
    -6100006, "hbSys: the buffer was not made by the call this release pairs with: "
              "hbSysFreeMem frees what hbSysAlloc(Cached)Mem allocated, hbSysUnregisterMem "
              "unregisters what hbSysRegisterMem registered")


class hbSysMem(CStruct):
    """A pool buffer as the board describes it: physical address, CPU view, size."""

    def __init__(self) -> None:
        self.phyAddr: int = 0
        self.virAddr: npt.NDArray[np.uint8] | None = None
        self.memSize: int = 0

    def __repr__(self) -> str:
        addr = self.phyAddr if isinstance(self.phyAddr, int) else 0
        return f"hbSysMem(phyAddr={addr:#x}, memSize={self.memSize!r})"


def buffer_of(mem: Any, sess: session.Session) -> PoolBuffer | None:
    """The live buffer of `sess`'s pool that `mem` describes, or None if it describes none."""
    if not isinstance(mem, hbSysMem):
        return None
    phys = status.as_int(mem.phyAddr, 0)
    size = status.as_int(mem.memSize, 1)
    if phys is None or size is None:
        return None
    buf = sess.soc.pool.find(phys)
    if buf is None or buf.phys_addr != phys or buf.size_bytes != size:
        return None
    return buf if buf.is_view(mem.virAddr) else None


def mem_of(buf: PoolBuffer) -> hbSysMem:
    """The `hbSysMem` describing a pool buffer the emulator allocated itself."""
    mem = hbSysMem()
    mem.phyAddr, mem.virAddr, mem.memSize = buf.phys_addr, buf.data, buf.size_bytes
    return mem


def _alloc(mem: Any, size: Any, cached: bool, name: str) -> int:
    sess, thread = session.caller()
    with thread.call(name):
        nbytes = status.as_int(size, 1)
        if not isinstance(mem, hbSysMem) or nbytes is None:
            return HB_SYS_INVALID_ARGUMENT
        try:
            buf = sess.soc.pool.alloc(nbytes, cached=cached, label="hbSysMem")
        except PoolError:
            return HB_SYS_OUT_OF_MEMORY
        mem.phyAddr, mem.virAddr, mem.memSize = buf.phys_addr, buf.data, buf.size_bytes
        return HB_SYS_SUCCESS


@status.c_function(HB_SYS_WRONG_THREAD)
def hbSysAllocMem(mem: hbSysMem, size: int) -> int:
    """Allocate an uncached buffer of `size` bytes into `mem`."""
    return _alloc(mem, size, False, "hbSysAllocMem")


@status.c_function(HB_SYS_WRONG_THREAD)
def hbSysAllocCachedMem(mem: hbSysMem, size: int) -> int:
    """Allocate a CPU-cached buffer of `size` bytes into `mem`."""
    return _alloc(mem, size, True, "hbSysAllocCachedMem")


@status.c_function(HB_SYS_WRONG_THREAD)
def hbSysFreeMem(mem: hbSysMem) -> int:
    """Free the allocated buffer `mem` describes; `mem.virAddr` becomes None."""
    sess, thread = session.caller()
    with thread.call("hbSysFreeMem"):
        return _release(mem, sess, registered=False)


def _release(mem: Any, sess: session.Session, *, registered: bool) -> int:
    """Free (`registered=False`) or unregister the buffer `mem` describes, if it is one."""
    buf = buffer_of(mem, sess)
    if buf is None:
        return HB_SYS_INVALID_MEMORY
    if buf.is_reservation != registered:
        return HB_SYS_WRONG_RELEASE
    if buf.users:
        return HB_SYS_MEM_IN_USE
    sess.soc.pool.free(buf)
    mem.virAddr = None
    return HB_SYS_SUCCESS


@status.c_function(HB_SYS_WRONG_THREAD)
def hbSysRegisterMem(mem: hbSysMem) -> int:
    """Make the physical range `mem.phyAddr`, `mem.memSize` a cacheable buffer; sets
    `mem.virAddr` to its CPU view."""
    sess, thread = session.caller()
    with thread.call("hbSysRegisterMem"):
        if not isinstance(mem, hbSysMem):
            return HB_SYS_INVALID_ARGUMENT
        phys = status.as_int(mem.phyAddr, 0)
        size = status.as_int(mem.memSize, 1)
        if phys is None or size is None:
            return HB_SYS_INVALID_ARGUMENT
        try:
            buf = sess.soc.pool.reserve(phys, size, cached=True, label="hbSysRegisterMem")
        except PoolError:  # misaligned, outside the pool, or overlapping a live buffer
            return HB_SYS_INVALID_ARGUMENT
        mem.phyAddr, mem.virAddr, mem.memSize = buf.phys_addr, buf.data, buf.size_bytes
        return HB_SYS_SUCCESS


@status.c_function(HB_SYS_WRONG_THREAD)
def hbSysUnregisterMem(mem: hbSysMem) -> int:
    """Release the registered buffer `mem` describes; `mem.virAddr` becomes None."""
    sess, thread = session.caller()
    with thread.call("hbSysUnregisterMem"):
        return _release(mem, sess, registered=True)


@status.c_function(HB_SYS_WRONG_THREAD)
def hbSysFlushMem(mem: hbSysMem, flag: int) -> int:
    """Clean (after CPU writes) or invalidate (before CPU reads) a cached buffer."""
    sess, thread = session.caller()
    with thread.call("hbSysFlushMem"):
        buf = buffer_of(mem, sess)
        if buf is None:
            return HB_SYS_INVALID_MEMORY
        op = status.as_int(flag)
        if op not in (HB_SYS_MEM_CACHE_CLEAN, HB_SYS_MEM_CACHE_INVALIDATE):
            return HB_SYS_INVALID_ARGUMENT
        if buf.cached:
            kind = CLEAN if op == HB_SYS_MEM_CACHE_CLEAN else INVALIDATE
            label = f"cache {kind}"
            thread.cpu(CpuWork(label, ops=ops.counts(), maintenance=CacheMaintenance(
                kind, buf.phys_addr, buf.size_bytes)), label)
        return HB_SYS_SUCCESS


def _host_bytes(array: Any, *, writable: bool) -> npt.NDArray[np.uint8] | None:
    """A host buffer as the bytes a C pointer would reach: bytes-like objects, or a
    contiguous NumPy array of a plain (non-object) type; None for anything else."""
    if not writable and isinstance(array, bytes | bytearray):
        return np.frombuffer(array, dtype=np.uint8)
    if (not isinstance(array, np.ndarray) or array.dtype.hasobject
            or not array.flags.c_contiguous or (writable and not array.flags.writeable)):
        return None
    return array.reshape(-1).view(np.uint8)


def _copy(name: str, mem: Any, host: Any, size: Any, *, into_pool: bool) -> int:
    sess, thread = session.caller()
    with thread.call(name):
        buf = buffer_of(mem, sess)
        if buf is None:
            return HB_SYS_INVALID_MEMORY
        host_bytes = _host_bytes(host, writable=not into_pool)
        nbytes = status.as_int(size, 1)
        if host_bytes is None or nbytes is None or nbytes > min(buf.size_bytes,
                                                                host_bytes.size):
            return HB_SYS_INVALID_ARGUMENT
        if into_pool:
            buf.data[:nbytes] = host_bytes[:nbytes]
        else:
            host_bytes[:nbytes] = buf.data[:nbytes]
        # Only the pool side is in the simulated address space.
        cpu = sess.config.cpu
        thread.cpu(copy_work("memcpy", buf.phys_addr, nbytes, store=into_pool,
                             vector_bytes=cpu.vector_bytes, line_bytes=cpu.line_bytes),
                   "memcpy")
        return HB_SYS_SUCCESS


@status.c_function(HB_SYS_WRONG_THREAD)
def hbSysWriteMem(dest: hbSysMem, src: Any, size: int) -> int:
    """Copy `size` bytes from a host array or bytes object into the buffer `dest`."""
    return _copy("hbSysWriteMem", dest, src, size, into_pool=True)


@status.c_function(HB_SYS_WRONG_THREAD)
def hbSysReadMem(dest: npt.NDArray[Any], src: hbSysMem, size: int) -> int:
    """Copy `size` bytes of the buffer `src` into the writable host array `dest`."""
    return _copy("hbSysReadMem", src, dest, size, into_pool=False)


__all__ = status.c_names(globals(), "hb", "HB_")

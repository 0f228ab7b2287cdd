"""The CMA/ION pool: physically contiguous buffers carved out of one window of DDR.

Runtime APIs (BPU tensors, vDSP RPC arguments, DMA descriptors) deal in physical addresses,
so the pool models placement exactly rather than just counting bytes. Placement is
first-fit over an address-ordered, always-coalesced free list: it is what the kernel's CMA
bitmap and ION's carveout `gen_pool` do, it is deterministic, and it fragments the way the
real pool does under mixed buffer lifetimes. Every operation costs O(free blocks), never
O(bytes).

Besides first-fit allocations, `reserve` carves out a range whose address the caller
chooses: memory the board knows about outside the allocator (a camera's carve-out that
hbSysRegisterMem hands to the BPU). Reservations obey the same granule rules, so the free
list and the accounting do not care which way a buffer was placed.

Contents are per-buffer numpy arrays created on first touch of `PoolBuffer.data`, so a
GiB-sized pool costs host memory only for the buffers a simulation actually reads or writes.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, SupportsIndex

import numpy as np
import numpy.typing as npt

from emu.errors import PoolError

if TYPE_CHECKING:
    from emu.soc.config import MemConfig

# Arm SoCs conventionally map DRAM from 2 GiB upwards; the exact value only shows up in
# addresses and in alignment arithmetic, which must not assume the base is 0.
DEFAULT_BASE_ADDR = 0x8000_0000


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _align_up(value: int, alignment: int) -> int:
    """Round up to a multiple of `alignment`, which is a power of two."""
    return (value + alignment - 1) & -alignment


def _as_int(value: object, what: str, error: type[Exception]) -> int:
    """Accept Python and numpy integers; bools and floats are caller mistakes."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise error(f"{what}: expected an integer, got {value!r}")
    return value.__index__()


class PoolBuffer:
    """One buffer of a `CmaPool`: where it sits in DDR and, once touched, its bytes.

    Only `CmaPool.alloc` and `CmaPool.reserve` create these. The handle outlives the buffer
    so that use after free is caught: once freed, `data` and `check_alive()` raise
    `PoolError`.
    """

    __slots__ = (
        "_alignment_bytes",
        "_alive",
        "_buffer_id",
        "_cached",
        "_data",
        "_is_reservation",
        "_label",
        "_phys_addr",
        "_pool",
        "_reserved_bytes",
        "_size_bytes",
        "_users",
    )

    def __init__(
        self,
        *,
        pool: CmaPool,
        buffer_id: int,
        phys_addr: int,
        size_bytes: int,
        reserved_bytes: int,
        alignment_bytes: int,
        cached: bool,
        label: str,
        is_reservation: bool,
    ) -> None:
        self._pool = pool
        self._buffer_id = buffer_id
        self._phys_addr = phys_addr
        self._size_bytes = size_bytes
        self._reserved_bytes = reserved_bytes
        self._alignment_bytes = alignment_bytes
        self._cached = cached
        self._label = label
        self._is_reservation = is_reservation
        self._alive = True
        self._users = 0
        self._data: npt.NDArray[np.uint8] | None = None

    @property
    def buffer_id(self) -> int:
        """Number of this buffer in its pool (allocations and reservations share the
        sequence), counting from 1."""
        return self._buffer_id

    @property
    def phys_addr(self) -> int:
        """Physical address of the first byte."""
        return self._phys_addr

    @property
    def size_bytes(self) -> int:
        """Bytes the caller asked for, and the length of `data`."""
        return self._size_bytes

    @property
    def reserved_bytes(self) -> int:
        """Bytes taken from the pool: `size_bytes` rounded up to the pool alignment."""
        return self._reserved_bytes

    @property
    def alignment_bytes(self) -> int:
        """Alignment `phys_addr` honours: the requested one, at least the pool's (a
        reservation's is the pool's)."""
        return self._alignment_bytes

    @property
    def cached(self) -> bool:
        """Whether the CPU maps it cacheable, so sharing it needs clean/invalidate."""
        return self._cached

    @property
    def label(self) -> str:
        return self._label

    @property
    def is_reservation(self) -> bool:
        """Whether `CmaPool.reserve` placed it at the caller's address, not `alloc`."""
        return self._is_reservation

    @property
    def alive(self) -> bool:
        """False once the buffer has been freed."""
        return self._alive

    @property
    def users(self) -> int:
        """Queued or running tasks that use this buffer (see `CmaPool.pin`)."""
        return self._users

    @property
    def data(self) -> npt.NDArray[np.uint8]:
        """The buffer's bytes, created zero-filled on first access.

        Real CMA pages hold stale data; zeros keep every run reproducible.
        """
        self.check_alive()
        if self._pool.closed:
            raise PoolError(f"buffer {self._describe()}: its pool is closed (the session "
                            f"ended), its memory given back")
        if self._data is None:
            self._data = np.zeros(self._size_bytes, dtype=np.uint8)
        return self._data

    def is_view(self, view: object) -> bool:
        """Whether `view` is this live buffer's bytes, whole: the array `data` handed out
        or a 1-D uint8 view of all of it. A view of a freed buffer's array never is, even
        if a new buffer took the same address (it has an array of its own)."""
        data = self._data
        if data is None or not isinstance(view, np.ndarray):
            return False
        return (view.dtype == np.uint8 and view.shape == data.shape and view.strides == (1,)
                and view.__array_interface__["data"][0] == data.__array_interface__["data"][0])

    def check_alive(self) -> None:
        """Raise `PoolError` if the buffer has been freed."""
        if not self._alive:
            raise PoolError(f"use after free of buffer {self._describe()}")

    def _describe(self) -> str:
        name = f" ({self._label})" if self._label else ""
        return f"#{self._buffer_id}{name} at {self._phys_addr:#x}"

    def _retire(self) -> None:
        self._alive = False
        self._data = None  # hand the host memory back now, not when the handle dies

    def __repr__(self) -> str:
        state = "live" if self._alive else "freed"
        return (
            f"PoolBuffer({self._describe()}, {self._size_bytes} B, "
            f"{'cached' if self._cached else 'uncached'}, {state})"
        )


class CmaPool:
    """A physically contiguous DDR pool handing out aligned buffers, first-fit."""

    def __init__(
        self, size_bytes: int, alignment_bytes: int, base_addr: int = DEFAULT_BASE_ADDR
    ) -> None:
        size_bytes = _as_int(size_bytes, "CmaPool size_bytes", ValueError)
        alignment_bytes = _as_int(alignment_bytes, "CmaPool alignment_bytes", ValueError)
        base_addr = _as_int(base_addr, "CmaPool base_addr", ValueError)
        if size_bytes <= 0:
            raise ValueError(f"CmaPool size_bytes: must be greater than 0, got {size_bytes}")
        if not _is_power_of_two(alignment_bytes):
            raise ValueError(
                f"CmaPool alignment_bytes: must be a power of two, got {alignment_bytes}"
            )
        if size_bytes % alignment_bytes:
            raise ValueError(
                f"CmaPool size_bytes: {size_bytes} B is not a multiple of the "
                f"{alignment_bytes} B alignment"
            )
        if base_addr < 0 or base_addr % alignment_bytes:
            raise ValueError(
                f"CmaPool base_addr: {base_addr:#x} is not a non-negative multiple of the "
                f"{alignment_bytes} B alignment"
            )
        self._size_bytes = size_bytes
        self._alignment_bytes = alignment_bytes
        self._base_addr = base_addr
        # Free blocks as parallel lists sorted by address. They are kept coalesced (no two
        # touch), which makes first-fit find the lowest address where a request fits.
        self._free_addrs: list[int] = [base_addr]
        self._free_sizes: list[int] = [size_bytes]
        # Live buffers by address, plus the sorted addresses so `find` can bisect.
        self._live: dict[int, PoolBuffer] = {}
        self._live_addrs: list[int] = []
        self.closed = False
        """Whether `close` ended the pool: the accounting stays, no buffer's bytes do."""
        self._used_bytes = 0
        self._high_water_bytes = 0
        self._alloc_count = 0
        self._reserve_count = 0
        self._failed_allocs = 0

    @classmethod
    def from_config(cls, mem: MemConfig) -> CmaPool:
        """The pool the `mem` block of a SoC configuration describes."""
        return cls(mem.pool_bytes, mem.alignment_bytes)

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def alignment_bytes(self) -> int:
        """Granule of every allocation: addresses and reserved sizes are multiples of it."""
        return self._alignment_bytes

    @property
    def base_addr(self) -> int:
        return self._base_addr

    @property
    def used_bytes(self) -> int:
        """Bytes reserved by live buffers, alignment padding included."""
        return self._used_bytes

    @property
    def free_bytes(self) -> int:
        return self._size_bytes - self._used_bytes

    @property
    def high_water_bytes(self) -> int:
        """The most `used_bytes` has ever been."""
        return self._high_water_bytes

    @property
    def largest_free_bytes(self) -> int:
        """The largest request (at pool alignment) that can succeed right now."""
        return max(self._free_sizes, default=0)

    @property
    def fragmentation(self) -> float:
        """Share of free space outside the largest free block: 0.0 is none, near 1.0 is bad."""
        free = self.free_bytes
        return 1.0 - self.largest_free_bytes / free if free else 0.0

    @property
    def live_buffers(self) -> int:
        return len(self._live)

    def labelled_bytes(self, label: str) -> int:
        """The bytes of the live buffers allocated with `label` (reservations included)."""
        return sum(b.size_bytes for b in self._live.values() if b.label == label)

    @property
    def alloc_count(self) -> int:
        """Successful allocations so far; reservations are not allocations."""
        return self._alloc_count

    @property
    def reserve_count(self) -> int:
        """Successful reservations so far."""
        return self._reserve_count

    @property
    def failed_allocs(self) -> int:
        """Calls to `alloc` that raised, whether for lack of space or for bad arguments."""
        return self._failed_allocs

    @property
    def free_blocks(self) -> tuple[tuple[int, int], ...]:
        """The free list as (phys_addr, size_bytes) pairs, lowest address first."""
        return tuple(zip(self._free_addrs, self._free_sizes, strict=True))

    def stats(self) -> dict[str, int | float]:
        """The accounting figures as plain, JSON-serialisable numbers."""
        return {
            "size_bytes": self._size_bytes,
            "used_bytes": self._used_bytes,
            "free_bytes": self.free_bytes,
            "high_water_bytes": self._high_water_bytes,
            "largest_free_bytes": self.largest_free_bytes,
            "fragmentation": self.fragmentation,
            "live_buffers": self.live_buffers,
            "alloc_count": self._alloc_count,
            "reserve_count": self._reserve_count,
            "failed_allocs": self._failed_allocs,
        }

    def alloc(
        self,
        size_bytes: int,
        cached: bool,
        alignment_bytes: int | None = None,
        label: str = "",
    ) -> PoolBuffer:
        """Reserve a contiguous, aligned buffer at the lowest address where it fits.

        `alignment_bytes` defaults to the pool's; a smaller power of two is met trivially,
        a larger one may leave a free gap below the buffer. The reservation is `size_bytes`
        rounded up to the pool alignment. Raises `PoolError` for bad arguments or when no
        free block can hold the request; a failed call changes nothing but `failed_allocs`.
        """
        try:
            return self._alloc(size_bytes, cached, alignment_bytes, label)
        except PoolError:
            self._failed_allocs += 1
            raise

    def _alloc(
        self, size_bytes: int, cached: bool, alignment_bytes: int | None, label: str
    ) -> PoolBuffer:
        size = _as_int(size_bytes, "pool alloc size_bytes", PoolError)
        if size <= 0:
            raise PoolError(f"pool alloc size_bytes: must be greater than 0, got {size}")
        requested = self._alignment_bytes if alignment_bytes is None else alignment_bytes
        requested = _as_int(requested, "pool alloc alignment_bytes", PoolError)
        if not _is_power_of_two(requested):
            raise PoolError(f"pool alloc alignment_bytes: must be a power of two, got {requested}")
        if not isinstance(cached, bool):
            raise PoolError(f"pool alloc cached: expected True or False, got {cached!r}")
        if not isinstance(label, str):
            raise PoolError(f"pool alloc label: expected a string, got {label!r}")
        alignment = max(requested, self._alignment_bytes)
        reserved = _align_up(size, self._alignment_bytes)

        fit = self._first_fit(reserved, alignment)
        if fit is None:
            raise PoolError(self._no_fit_message(size, reserved, alignment, label))
        index, addr = fit
        self._alloc_count += 1
        return self._place(index, addr, size, reserved, alignment, cached, label, False)

    def reserve(self, phys_addr: int, size_bytes: int, cached: bool, label: str = "") -> PoolBuffer:
        """Reserve the buffer of `size_bytes` at exactly `phys_addr`, for memory the caller
        already knows the address of (hbSysRegisterMem).

        The granule rules of `alloc` hold: `phys_addr` must be a multiple of the pool
        alignment (anything else would split a granule between a buffer and the free list),
        and the reservation is `size_bytes` rounded up to it; all of it must be free, inside
        the pool. Raises `PoolError` otherwise, changing nothing (`failed_allocs` counts
        `alloc` only). `free` gives the range back.
        """
        addr = _as_int(phys_addr, "pool reserve phys_addr", PoolError)
        size = _as_int(size_bytes, "pool reserve size_bytes", PoolError)
        if size <= 0:
            raise PoolError(f"pool reserve size_bytes: must be greater than 0, got {size}")
        if not isinstance(cached, bool):
            raise PoolError(f"pool reserve cached: expected True or False, got {cached!r}")
        if not isinstance(label, str):
            raise PoolError(f"pool reserve label: expected a string, got {label!r}")
        granule = self._alignment_bytes
        if addr % granule:
            raise PoolError(f"pool reserve phys_addr: {addr:#x} is not a multiple of the "
                            f"{granule} B pool alignment")
        reserved = _align_up(size, granule)
        end = addr + reserved
        if addr < self._base_addr or end > self._base_addr + self._size_bytes:
            raise PoolError(f"pool reserve: [{addr:#x}, {end:#x}) is not inside the pool "
                            f"[{self._base_addr:#x}, {self._base_addr + self._size_bytes:#x})")
        # The free list is the complement of the live buffers, so the range is free exactly
        # when one free block holds all of it.
        index = bisect.bisect_right(self._free_addrs, addr) - 1
        if index < 0 or end > self._free_addrs[index] + self._free_sizes[index]:
            raise PoolError(f"pool reserve: [{addr:#x}, {end:#x}) overlaps buffer "
                            f"{self._first_live_in(addr, end)._describe()}")
        self._reserve_count += 1
        return self._place(index, addr, size, reserved, granule, cached, label, True)

    def _first_live_in(self, addr: int, end: int) -> PoolBuffer:
        """The lowest live buffer whose reservation meets [addr, end), which one does."""
        index = max(bisect.bisect_right(self._live_addrs, addr) - 1, 0)
        # Live buffers are disjoint, so their ends rise with their starts: the first to end
        # past `addr` is the one.
        buf = next(self._live[a] for a in self._live_addrs[index:]
                   if a + self._live[a].reserved_bytes > addr)
        assert buf.phys_addr < end, "free list and live buffers disagree"
        return buf

    def _place(self, index: int, addr: int, size: int, reserved: int, alignment: int,
               cached: bool, label: str, is_reservation: bool) -> PoolBuffer:
        """Take [addr, addr + reserved) out of free block `index` as a new live buffer."""
        self._take(index, addr, reserved)
        buf = PoolBuffer(
            pool=self,
            buffer_id=self._alloc_count + self._reserve_count,
            phys_addr=addr,
            size_bytes=size,
            reserved_bytes=reserved,
            alignment_bytes=alignment,
            cached=cached,
            label=label,
            is_reservation=is_reservation,
        )
        self._live[addr] = buf
        bisect.insort(self._live_addrs, addr)
        self._used_bytes += reserved
        self._high_water_bytes = max(self._high_water_bytes, self._used_bytes)
        return buf

    def _first_fit(self, reserved: int, alignment: int) -> tuple[int, int] | None:
        """(free-list index, address) of the lowest aligned place `reserved` bytes fit."""
        for index, (block_addr, block_size) in enumerate(
            zip(self._free_addrs, self._free_sizes, strict=True)
        ):
            addr = _align_up(block_addr, alignment)
            if addr + reserved <= block_addr + block_size:
                return index, addr
        return None

    def _take(self, index: int, addr: int, reserved: int) -> None:
        """Cut [addr, addr + reserved) out of free block `index`, keeping what is left over."""
        block_addr = self._free_addrs[index]
        block_end = block_addr + self._free_sizes[index]
        end = addr + reserved
        pieces = [(a, e - a) for a, e in ((block_addr, addr), (end, block_end)) if e > a]
        self._free_addrs[index : index + 1] = [a for a, _ in pieces]
        self._free_sizes[index : index + 1] = [s for _, s in pieces]

    def _no_fit_message(self, size: int, reserved: int, alignment: int, label: str) -> str:
        request = f"{size} B"
        if reserved != size or alignment != self._alignment_bytes:
            request += f" ({reserved} B at {alignment} B alignment)"
        if label:
            request += f" for {label}"
        free = self.free_bytes
        if reserved > free:
            return f"pool exhausted: requested {request}, {free} B free of {self._size_bytes} B"
        return (
            f"pool fragmented: requested {request}, {free} B free but largest free block "
            f"is {self.largest_free_bytes} B"
        )

    def pin(self, buf: PoolBuffer) -> None:
        """Mark a live buffer as used by one more queued or running task: it cannot be freed
        until every such task has called `unpin` (an accelerator would otherwise read or
        write memory that was handed to someone else)."""
        self._check_own(buf, "pin")
        buf._users += 1

    def unpin(self, buf: PoolBuffer) -> None:
        """One task that used `buf` has finished with it."""
        if buf._pool is not self or buf._users <= 0:
            raise PoolError(f"unpin of buffer {buf._describe()} that no task uses")
        buf._users -= 1

    def free(self, buf: PoolBuffer) -> None:
        """Give a live buffer's range back, merging it with free neighbours; reservations
        too (pairing frees with the call that made the buffer is the APIs' business).

        Raises `PoolError`, changing nothing, for a buffer already freed, not from here, or
        still used by a queued or running task.
        """
        self._check_own(buf, "free")
        if buf._users:
            raise PoolError(f"free of buffer {buf._describe()} which {buf._users} queued or "
                            f"running task(s) still use")
        addr, reserved = buf.phys_addr, buf.reserved_bytes
        del self._live[addr]
        del self._live_addrs[bisect.bisect_left(self._live_addrs, addr)]
        self._give_back(addr, reserved)
        self._used_bytes -= reserved
        buf._retire()

    def close(self) -> None:
        """Give the host memory of every live buffer back, as the board does with a
        process's ION buffers when it ends: a closed session's pool then costs nothing even
        while something still refers to the session (its component tree is a web of
        references that only the cycle collector frees, and that may run seconds later).
        An array of a buffer's bytes taken before stays valid (it holds them); `data` raises
        `PoolError` from now on. The figures of `stats` stay."""
        self.closed = True
        for buf in self._live.values():
            buf._data = None

    def _check_own(self, buf: PoolBuffer, action: str) -> None:
        if not isinstance(buf, PoolBuffer):
            raise PoolError(f"pool {action}: expected a PoolBuffer, got {buf!r}")
        if buf._pool is not self:
            raise PoolError(f"{action} of buffer {buf._describe()} which belongs to another pool")
        if not buf.alive:
            raise PoolError(f"double free of buffer {buf._describe()}" if action == "free"
                            else f"{action} of freed buffer {buf._describe()}")

    def _give_back(self, addr: int, size: int) -> None:
        index = bisect.bisect_left(self._free_addrs, addr)
        addrs, sizes = self._free_addrs, self._free_sizes
        joins_left = index > 0 and addrs[index - 1] + sizes[index - 1] == addr
        joins_right = index < len(addrs) and addrs[index] == addr + size
        if joins_left and joins_right:
            sizes[index - 1] += size + sizes[index]
            del addrs[index], sizes[index]
        elif joins_left:
            sizes[index - 1] += size
        elif joins_right:
            addrs[index] = addr
            sizes[index] += size
        else:
            addrs.insert(index, addr)
            sizes.insert(index, size)

    def find(self, phys_addr: int) -> PoolBuffer | None:
        """The live buffer whose `size_bytes` span holds `phys_addr`, if any.

        Alignment padding past `size_bytes` belongs to no buffer's data, so it finds nothing.
        """
        index = bisect.bisect_right(self._live_addrs, phys_addr) - 1
        if index < 0:
            return None
        buf = self._live[self._live_addrs[index]]
        return buf if phys_addr < buf.phys_addr + buf.size_bytes else None

"""Tests of the CMA/ION pool: placement, accounting, misuse, and random alloc/free runs.

The stateful test checks the pool against a granule map: a deliberately naive model in which
first-fit means "the lowest aligned address whose granules are all free".
"""

from __future__ import annotations

import itertools
import json
import random
import tracemalloc
import weakref
from typing import cast

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from emu.errors import PoolError, UserError
from emu.mem.pool import DEFAULT_BASE_ADDR, CmaPool, PoolBuffer
from emu.soc.config import MemConfig

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
BASE = DEFAULT_BASE_ADDR
PAGE = 4 * KIB


def page_pool(pages: int = 16, base_addr: int = BASE) -> CmaPool:
    return CmaPool(pages * PAGE, PAGE, base_addr)


def state(pool: CmaPool) -> tuple[object, ...]:
    """Everything observable about a pool except the failed-alloc counter."""
    stats = pool.stats()
    del stats["failed_allocs"]
    return (stats, pool.free_blocks)


# --- construction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size_bytes", "alignment_bytes", "base_addr", "complaint"),
    [
        (0, PAGE, BASE, "greater than 0"),
        (-PAGE, PAGE, BASE, "greater than 0"),
        (16 * PAGE, 0, BASE, "power of two"),
        (16 * PAGE, 3000, BASE, "power of two"),
        (16 * PAGE, -PAGE, BASE, "power of two"),
        (16 * PAGE + 1, PAGE, BASE, "not a multiple"),
        (16 * PAGE, PAGE, BASE + 64, "base_addr"),
        (16 * PAGE, PAGE, -PAGE, "base_addr"),
        (16.0 * PAGE, PAGE, BASE, "expected an integer"),
        (True, 1, BASE, "expected an integer"),
        (16 * PAGE, PAGE, "0x80000000", "expected an integer"),
    ],
)
def test_constructor_rejects_impossible_pools(
    size_bytes: object, alignment_bytes: object, base_addr: object, complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        CmaPool(cast(int, size_bytes), cast(int, alignment_bytes), cast(int, base_addr))


def test_constructor_accepts_numpy_integers() -> None:
    pool = CmaPool(cast(int, np.int64(8 * PAGE)), cast(int, np.uint32(PAGE)))
    assert pool.size_bytes == 8 * PAGE
    assert type(pool.size_bytes) is int


def test_new_pool_is_one_free_block() -> None:
    pool = page_pool(16)
    assert pool.base_addr == BASE
    assert pool.alignment_bytes == PAGE
    assert pool.free_blocks == ((BASE, 16 * PAGE),)
    assert pool.stats() == {
        "size_bytes": 16 * PAGE,
        "used_bytes": 0,
        "free_bytes": 16 * PAGE,
        "high_water_bytes": 0,
        "largest_free_bytes": 16 * PAGE,
        "fragmentation": 0.0,
        "live_buffers": 0,
        "alloc_count": 0,
        "reserve_count": 0,
        "failed_allocs": 0,
    }


def test_from_config_takes_size_and_alignment() -> None:
    mem = MemConfig(
        pool_bytes=64 * MIB,
        alignment_bytes=64,
    )
    pool = CmaPool.from_config(mem)
    assert (pool.size_bytes, pool.alignment_bytes, pool.base_addr) == (64 * MIB, 64, BASE)


# --- allocation -----------------------------------------------------------------------------


def test_alloc_fills_in_the_handle() -> None:
    pool = page_pool()
    first = pool.alloc(100, cached=True, label="camera.frame")
    second = pool.alloc(PAGE, cached=False)
    assert (first.buffer_id, second.buffer_id) == (1, 2)
    assert first.phys_addr == BASE
    assert (first.size_bytes, first.reserved_bytes) == (100, PAGE)
    assert first.cached is True and second.cached is False
    assert (first.label, second.label) == ("camera.frame", "")
    assert first.alignment_bytes == PAGE
    assert first.alive and second.alive
    assert second.phys_addr == BASE + PAGE
    assert "#1 (camera.frame) at 0x80000000" in repr(first)


@pytest.mark.parametrize(
    ("size_bytes", "reserved_bytes"),
    [(1, PAGE), (PAGE - 1, PAGE), (PAGE, PAGE), (PAGE + 1, 2 * PAGE), (3 * PAGE, 3 * PAGE)],
)
def test_reservation_is_rounded_up_to_pool_alignment(size_bytes: int, reserved_bytes: int) -> None:
    pool = page_pool()
    buf = pool.alloc(size_bytes, cached=False)
    assert buf.size_bytes == size_bytes
    assert buf.reserved_bytes == reserved_bytes
    assert pool.used_bytes == reserved_bytes
    assert pool.free_blocks == ((BASE + reserved_bytes, 16 * PAGE - reserved_bytes),)


def test_larger_alignment_leaves_a_gap_that_first_fit_reuses() -> None:
    pool = page_pool(64)
    small = pool.alloc(PAGE, cached=False)
    big = pool.alloc(PAGE, cached=False, alignment_bytes=64 * KIB)
    assert big.phys_addr == BASE + 64 * KIB
    assert big.alignment_bytes == 64 * KIB
    assert pool.free_blocks == (
        (BASE + PAGE, 64 * KIB - PAGE),
        (BASE + 64 * KIB + PAGE, 64 * PAGE - 64 * KIB - PAGE),
    )
    filler = pool.alloc(PAGE, cached=False)
    assert filler.phys_addr == small.phys_addr + PAGE


def test_alignment_is_of_the_physical_address_not_the_pool_offset() -> None:
    pool = CmaPool(64 * PAGE, PAGE, base_addr=0x8000_3000)
    buf = pool.alloc(PAGE, cached=False, alignment_bytes=16 * KIB)
    assert buf.phys_addr == 0x8000_4000


def test_smaller_alignment_than_the_pool_gets_the_pool_alignment() -> None:
    pool = page_pool()
    pool.alloc(1, cached=False)
    buf = pool.alloc(1, cached=False, alignment_bytes=16)
    assert buf.phys_addr == BASE + PAGE
    assert buf.alignment_bytes == PAGE


@pytest.mark.parametrize(
    ("size_bytes", "alignment_bytes", "complaint"),
    [
        (0, None, "greater than 0"),
        (-1, None, "greater than 0"),
        (1.5, None, "expected an integer"),
        (PAGE, 0, "power of two"),
        (PAGE, 3 * PAGE, "power of two"),
        (PAGE, -PAGE, "power of two"),
    ],
)
def test_bad_alloc_arguments_raise_pool_error(
    size_bytes: object, alignment_bytes: int | None, complaint: str
) -> None:
    pool = page_pool()
    with pytest.raises(PoolError, match=complaint):
        pool.alloc(cast(int, size_bytes), cached=False, alignment_bytes=alignment_bytes)
    assert pool.failed_allocs == 1
    assert pool.free_blocks == ((BASE, 16 * PAGE),)


def test_pool_error_is_a_user_error() -> None:
    assert issubclass(PoolError, UserError)


def test_first_fit_takes_the_lowest_block_that_fits() -> None:
    pool = page_pool(16)
    a = pool.alloc(2 * PAGE, cached=False)  # [0, 2)
    pool.alloc(PAGE, cached=False)  # [2, 3)
    c = pool.alloc(4 * PAGE, cached=False)  # [3, 7)
    pool.alloc(PAGE, cached=False)  # [7, 8)
    pool.free(a)
    pool.free(c)
    assert pool.free_blocks == (
        (BASE, 2 * PAGE),
        (BASE + 3 * PAGE, 4 * PAGE),
        (BASE + 8 * PAGE, 8 * PAGE),
    )
    assert pool.alloc(PAGE, cached=False).phys_addr == BASE  # first block, not best fit
    assert pool.alloc(3 * PAGE, cached=False).phys_addr == BASE + 3 * PAGE
    assert pool.alloc(6 * PAGE, cached=False).phys_addr == BASE + 8 * PAGE
    assert pool.alloc(PAGE, cached=False).phys_addr == BASE + PAGE


def test_placement_is_deterministic() -> None:
    def run() -> list[int]:
        pool = page_pool(32)
        bufs = [pool.alloc((i % 5 + 1) * 1000, cached=bool(i % 2)) for i in range(10)]
        for buf in bufs[::3]:
            pool.free(buf)
        return [pool.alloc(size, cached=False).phys_addr for size in (9000, 100, 5000)]

    assert run() == run()


# --- free and coalescing -----------------------------------------------------------------


def three_pages() -> tuple[CmaPool, list[PoolBuffer]]:
    """A pool whose first three pages hold buffers, followed by free space."""
    pool = page_pool(8)
    return pool, [pool.alloc(PAGE, cached=False) for _ in range(3)]


def test_free_without_free_neighbours_adds_a_block() -> None:
    pool, (_, middle, _) = three_pages()
    pool.free(middle)
    assert pool.free_blocks == ((BASE + PAGE, PAGE), (BASE + 3 * PAGE, 5 * PAGE))
    assert not middle.alive


def test_free_merges_with_left_neighbour() -> None:
    pool, (first, middle, _) = three_pages()
    pool.free(first)
    pool.free(middle)
    assert pool.free_blocks == ((BASE, 2 * PAGE), (BASE + 3 * PAGE, 5 * PAGE))


def test_free_merges_with_right_neighbour() -> None:
    pool, (_, middle, last) = three_pages()
    pool.free(last)
    assert pool.free_blocks == ((BASE + 2 * PAGE, 6 * PAGE),)
    pool.free(middle)
    assert pool.free_blocks == ((BASE + PAGE, 7 * PAGE),)


def test_free_merges_with_both_neighbours() -> None:
    pool, (first, middle, last) = three_pages()
    pool.free(first)
    pool.free(last)
    assert pool.free_blocks == ((BASE, PAGE), (BASE + 2 * PAGE, 6 * PAGE))
    pool.free(middle)
    assert pool.free_blocks == ((BASE, 8 * PAGE),)
    assert pool.used_bytes == 0
    assert pool.fragmentation == 0.0


def test_double_free_names_the_buffer() -> None:
    pool = page_pool()
    buf = pool.alloc(10, cached=False, label="lidar.points")
    pool.free(buf)
    before = state(pool)
    message = r"^double free of buffer #1 \(lidar\.points\) at 0x80000000$"
    with pytest.raises(PoolError, match=message):
        pool.free(buf)
    assert state(pool) == before


def test_double_free_of_unlabelled_buffer() -> None:
    pool = page_pool()
    pool.alloc(10, cached=False)
    buf = pool.alloc(10, cached=False)
    pool.free(buf)
    with pytest.raises(PoolError, match=r"^double free of buffer #2 at 0x80001000$"):
        pool.free(buf)


def test_free_of_another_pools_buffer_is_refused() -> None:
    mine, theirs = page_pool(), page_pool()
    mine.alloc(PAGE, cached=False)
    foreign = theirs.alloc(PAGE, cached=False, label="other")
    before = state(mine)
    with pytest.raises(PoolError, match="another pool"):
        mine.free(foreign)
    assert state(mine) == before
    assert foreign.alive
    assert mine.failed_allocs == 0


def test_free_of_something_that_is_not_a_buffer_is_refused() -> None:
    pool = page_pool()
    with pytest.raises(PoolError, match="expected a PoolBuffer"):
        pool.free(cast(PoolBuffer, object()))


# --- failures ------------------------------------------------------------------------------


def test_exhaustion_message() -> None:
    pool = page_pool(4)
    pool.alloc(3 * PAGE, cached=False)
    with pytest.raises(PoolError) as err:
        pool.alloc(2 * PAGE, cached=False)
    assert str(err.value) == "pool exhausted: requested 8192 B, 4096 B free of 16384 B"


def test_fragmentation_message() -> None:
    pool = page_pool(4)
    bufs = [pool.alloc(PAGE, cached=False) for _ in range(4)]
    pool.free(bufs[0])
    pool.free(bufs[2])
    with pytest.raises(PoolError) as err:
        pool.alloc(2 * PAGE, cached=False)
    assert str(err.value) == (
        "pool fragmented: requested 8192 B, 8192 B free but largest free block is 4096 B"
    )


def test_failure_message_shows_reservation_alignment_and_label() -> None:
    pool = page_pool(4)
    pool.alloc(PAGE, cached=False)
    with pytest.raises(PoolError) as err:
        pool.alloc(100, cached=False, alignment_bytes=16 * KIB, label="bpu.weights")
    assert str(err.value) == (
        "pool fragmented: requested 100 B (4096 B at 16384 B alignment) for bpu.weights, "
        "12288 B free but largest free block is 12288 B"
    )
    with pytest.raises(PoolError, match=r"^pool exhausted: requested 16385 B \(20480 B at"):
        pool.alloc(16 * KIB + 1, cached=False)


def test_failed_alloc_changes_nothing_but_the_counter() -> None:
    pool = page_pool(4)
    kept = pool.alloc(PAGE, cached=False)
    pool.free(pool.alloc(PAGE, cached=False))
    pool.alloc(PAGE, cached=False)
    before = state(pool)
    for size, alignment in ((5 * PAGE, None), (3 * PAGE, None), (PAGE, 64 * KIB), (0, None)):
        with pytest.raises(PoolError):
            pool.alloc(size, cached=True, alignment_bytes=alignment)
    assert state(pool) == before
    assert pool.failed_allocs == 4
    assert pool.alloc(PAGE, cached=False).buffer_id == 4  # failures consume no ids
    assert kept.alive


# --- contents ------------------------------------------------------------------------------


def test_data_is_zeroed_sized_and_persistent() -> None:
    pool = page_pool()
    buf = pool.alloc(100, cached=True)
    data = buf.data
    assert data.dtype == np.uint8
    assert data.shape == (100,)
    assert not data.any()
    data[:4] = [1, 2, 3, 4]
    assert buf.data is data
    assert list(buf.data[:5]) == [1, 2, 3, 4, 0]


def test_data_is_created_only_when_touched() -> None:
    tracemalloc.start()
    try:
        pool = CmaPool(GIB, PAGE)
        bufs = [pool.alloc(256 * MIB, cached=False) for _ in range(3)]
        untouched_bytes = tracemalloc.get_traced_memory()[0]
        assert untouched_bytes < MIB
        assert bufs[1].data.nbytes == 256 * MIB
        assert tracemalloc.get_traced_memory()[0] >= untouched_bytes + 256 * MIB
        pool.free(bufs[1])
        assert tracemalloc.get_traced_memory()[0] < untouched_bytes + MIB
    finally:
        tracemalloc.stop()


def test_use_after_free_is_caught() -> None:
    pool = page_pool()
    buf = pool.alloc(64, cached=False, label="dsp.args")
    buf.check_alive()
    buf.data[0] = 7
    pool.free(buf)
    message = r"^use after free of buffer #1 \(dsp\.args\) at 0x80000000$"
    with pytest.raises(PoolError, match=message):
        buf.check_alive()
    with pytest.raises(PoolError, match=message):
        _ = buf.data
    assert "freed" in repr(buf)


# --- accounting and lookup -----------------------------------------------------------------


def test_high_water_mark_keeps_the_peak() -> None:
    pool = page_pool(16)
    a = pool.alloc(4 * PAGE, cached=False)
    b = pool.alloc(PAGE + 1, cached=False)
    assert pool.high_water_bytes == 6 * PAGE
    pool.free(a)
    pool.free(b)
    assert (pool.used_bytes, pool.high_water_bytes) == (0, 6 * PAGE)
    pool.alloc(3 * PAGE, cached=False)
    assert pool.high_water_bytes == 6 * PAGE
    pool.alloc(8 * PAGE, cached=False)
    assert pool.high_water_bytes == 11 * PAGE


def test_accounting_figures() -> None:
    pool = page_pool(8)
    bufs = [pool.alloc(PAGE, cached=False) for _ in range(8)]
    assert pool.fragmentation == 0.0  # nothing free at all
    assert pool.largest_free_bytes == 0
    for buf in (bufs[1], bufs[3], bufs[4]):
        pool.free(buf)
    stats = pool.stats()
    assert stats == {
        "size_bytes": 8 * PAGE,
        "used_bytes": 5 * PAGE,
        "free_bytes": 3 * PAGE,
        "high_water_bytes": 8 * PAGE,
        "largest_free_bytes": 2 * PAGE,
        "fragmentation": pytest.approx(1 / 3),
        "live_buffers": 5,
        "alloc_count": 8,
        "reserve_count": 0,
        "failed_allocs": 0,
    }
    assert json.loads(json.dumps(stats)) == stats
    assert all(type(value) in (int, float) for value in stats.values())


def test_find_maps_addresses_to_live_buffers() -> None:
    pool = page_pool(8)
    a = pool.alloc(100, cached=False)
    b = pool.alloc(2 * PAGE, cached=False)
    assert pool.find(a.phys_addr) is a
    assert pool.find(a.phys_addr + 99) is a
    assert pool.find(a.phys_addr + 100) is None  # alignment padding holds no data
    assert pool.find(b.phys_addr) is b
    assert pool.find(b.phys_addr + 2 * PAGE - 1) is b
    assert pool.find(b.phys_addr + 2 * PAGE) is None  # free space
    assert pool.find(BASE - 1) is None
    assert pool.find(BASE + 8 * PAGE) is None
    pool.free(a)
    assert pool.find(a.phys_addr) is None
    assert pool.find(b.phys_addr + 1) is b


# --- reservations at the caller's address -------------------------------------------------


def test_reserve_takes_exactly_the_range_asked_for() -> None:
    pool = page_pool(16)
    first = pool.alloc(PAGE, cached=False)
    buf = pool.reserve(BASE + 4 * PAGE, PAGE + 1, cached=True, label="camera.carveout")
    assert (buf.phys_addr, buf.size_bytes, buf.reserved_bytes) == (BASE + 4 * PAGE, PAGE + 1,
                                                                    2 * PAGE)
    assert buf.is_reservation and not first.is_reservation
    assert (buf.buffer_id, buf.cached, buf.label, buf.alignment_bytes) == (
        2, True, "camera.carveout", PAGE)
    assert pool.free_blocks == ((BASE + PAGE, 3 * PAGE), (BASE + 6 * PAGE, 10 * PAGE))
    assert (pool.alloc_count, pool.reserve_count, pool.live_buffers) == (1, 1, 2)
    assert (pool.used_bytes, pool.high_water_bytes) == (3 * PAGE, 3 * PAGE)
    assert pool.find(BASE + 5 * PAGE) is buf
    assert pool.find(BASE + 5 * PAGE + 1) is None  # padding
    # First-fit works around it, and ids keep counting.
    third = pool.alloc(4 * PAGE, cached=False)
    assert (third.phys_addr, third.buffer_id) == (BASE + 6 * PAGE, 3)
    pool.free(buf)
    assert not buf.alive
    assert pool.free_blocks == ((BASE + PAGE, 5 * PAGE), (BASE + 10 * PAGE, 6 * PAGE))


def test_reserve_can_take_the_whole_pool_or_an_edge() -> None:
    pool = page_pool(4)
    whole = pool.reserve(BASE, 4 * PAGE, cached=False)
    assert pool.free_blocks == () and pool.largest_free_bytes == 0
    pool.free(whole)
    last = pool.reserve(BASE + 3 * PAGE, 1, cached=False)
    assert pool.free_blocks == ((BASE, 3 * PAGE),)
    pool.free(last)
    assert pool.free_blocks == ((BASE, 4 * PAGE),)


@pytest.mark.parametrize(
    ("phys_addr", "size_bytes", "complaint"),
    [
        (BASE + 64, PAGE, "not a multiple"),
        (BASE + PAGE + 1, 1, "not a multiple"),
        (BASE - PAGE, PAGE, "not inside the pool"),
        (BASE - PAGE, 2 * PAGE, "not inside the pool"),
        (BASE + 7 * PAGE, PAGE + 1, "not inside the pool"),
        (BASE + 8 * PAGE, 1, "not inside the pool"),
        (0, PAGE, "not inside the pool"),
        (BASE, PAGE, r"overlaps buffer #1 \(a\) at 0x80000000"),
        (BASE + PAGE, 1, r"overlaps buffer #1 \(a\)"),  # the allocation's padding
        (BASE + 2 * PAGE, 3 * PAGE, r"overlaps buffer #2 \(r\) at 0x80003000"),
        (BASE + 4 * PAGE, PAGE, r"overlaps buffer #2 \(r\)"),
        (BASE + 3 * PAGE, 8 * PAGE, "not inside the pool"),
        (BASE + 2 * PAGE, 0, "greater than 0"),
        (BASE + 2 * PAGE, -1, "greater than 0"),
        (float(BASE + 2 * PAGE), 1, "expected an integer"),
        (BASE + 2 * PAGE, True, "expected an integer"),
        ("0x80002000", 1, "expected an integer"),
    ],
)
def test_bad_reserves_raise_and_change_nothing(
    phys_addr: object, size_bytes: object, complaint: str
) -> None:
    pool = page_pool(8)
    pool.alloc(PAGE + 1, cached=False, label="a")  # granules 0-1
    pool.reserve(BASE + 3 * PAGE, 2 * PAGE, cached=True, label="r")  # granules 3-4
    before = (state(pool), pool.failed_allocs)
    with pytest.raises(PoolError, match=complaint):
        pool.reserve(cast(int, phys_addr), cast(int, size_bytes), cached=False)
    assert (state(pool), pool.failed_allocs) == before


def test_reserve_checks_cached_and_label() -> None:
    pool = page_pool()
    with pytest.raises(PoolError, match="cached"):
        pool.reserve(BASE, 1, cached=cast(bool, 1))
    with pytest.raises(PoolError, match="label"):
        pool.reserve(BASE, 1, cached=True, label=cast(str, None))
    assert pool.free_blocks == ((BASE, 16 * PAGE),) and pool.reserve_count == 0


def test_reserve_accepts_numpy_integers() -> None:
    pool = page_pool()
    buf = pool.reserve(cast(int, np.uint64(BASE + PAGE)), cast(int, np.int32(10)), cached=True)
    assert type(buf.phys_addr) is int and type(buf.size_bytes) is int


# --- random alloc/free runs against a granule map -----------------------------------------


class PoolMachine(RuleBasedStateMachine):
    """Random allocs, reserves and frees, checked against a map of which buffer owns each
    granule."""

    pool: CmaPool
    owner: list[PoolBuffer | None]
    live: list[PoolBuffer]
    freed: list[PoolBuffer]
    allocs: int
    reserves: int
    failures: int
    peak_bytes: int

    @initialize(
        granule_bytes=st.sampled_from([64, PAGE]),
        granules=st.integers(1, 48),
        base_granules=st.sampled_from([0, 3, 0x8000_0000 // PAGE]),
    )
    def make_pool(self, granule_bytes: int, granules: int, base_granules: int) -> None:
        self.pool = CmaPool(granules * granule_bytes, granule_bytes, base_granules * granule_bytes)
        self.owner = [None] * granules
        self.live = []
        self.freed = []
        self.allocs = 0
        self.reserves = 0
        self.failures = 0
        self.peak_bytes = 0

    @property
    def granule(self) -> int:
        return self.pool.alignment_bytes

    def model_place(self, reserved: int, alignment: int) -> int | None:
        """The lowest address, aligned, whose granules are all free: first-fit by definition."""
        count = reserved // self.granule
        for first in range(len(self.owner) - count + 1):
            addr = self.pool.base_addr + first * self.granule
            if addr % alignment == 0 and all(o is None for o in self.owner[first : first + count]):
                return addr
        return None

    def model_free_runs(self) -> list[tuple[int, int]]:
        runs: list[tuple[int, int]] = []
        for index, who in enumerate(self.owner):
            if who is not None:
                continue
            addr = self.pool.base_addr + index * self.granule
            if runs and sum(runs[-1]) == addr:
                runs[-1] = (runs[-1][0], runs[-1][1] + self.granule)
            else:
                runs.append((addr, self.granule))
        return runs

    @rule(
        data=st.data(),
        cached=st.booleans(),
        alignment_log2=st.one_of(st.none(), st.integers(3, 18)),
        label=st.sampled_from(["", "t"]),
    )
    def alloc(
        self, data: st.DataObject, cached: bool, alignment_log2: int | None, label: str
    ) -> None:
        size_bytes = data.draw(
            st.one_of(
                st.integers(1, 3 * self.granule),
                st.integers(1, self.pool.size_bytes + self.granule),
            ),
            label="size_bytes",
        )
        requested = None if alignment_log2 is None else 1 << alignment_log2
        alignment = max(requested or self.granule, self.granule)
        reserved = -(-size_bytes // self.granule) * self.granule
        expected = self.model_place(reserved, alignment)
        before = state(self.pool)
        if expected is None:
            with pytest.raises(PoolError) as err:
                self.pool.alloc(size_bytes, cached, alignment_bytes=requested, label=label)
            self.failures += 1
            assert state(self.pool) == before
            free = self.pool.free_bytes
            kind = "exhausted" if reserved > free else "fragmented"
            assert str(err.value).startswith(f"pool {kind}: requested {size_bytes} B")
            assert f"{free} B free" in str(err.value)
            return
        buf = self.pool.alloc(size_bytes, cached, alignment_bytes=requested, label=label)
        self.allocs += 1
        assert buf.phys_addr == expected
        assert (buf.size_bytes, buf.reserved_bytes) == (size_bytes, reserved)
        assert (buf.cached, buf.label, buf.alignment_bytes) == (cached, label, alignment)
        assert not buf.is_reservation
        self.took(buf)

    def took(self, buf: PoolBuffer) -> None:
        """Record a new live buffer in the model."""
        assert buf.buffer_id == self.allocs + self.reserves
        first = (buf.phys_addr - self.pool.base_addr) // self.granule
        for index in range(first, first + buf.reserved_bytes // self.granule):
            self.owner[index] = buf
        self.live.append(buf)
        self.peak_bytes = max(self.peak_bytes, self.pool.used_bytes)

    @rule(data=st.data(), cached=st.booleans())
    def reserve(self, data: st.DataObject, cached: bool) -> None:
        granule, base, end = self.granule, self.pool.base_addr, self.pool.size_bytes
        end += base
        # Mostly granule boundaries in and just around the pool, free or not; sometimes not.
        addr = data.draw(
            st.integers(-1, len(self.owner)).map(lambda g: base + g * granule)
            | st.integers(max(base - granule, 0), end).filter(lambda a: a % granule != 0),
            label="phys_addr",
        )
        size_bytes = data.draw(st.integers(1, 3 * granule) | st.integers(1, end - base),
                               label="size_bytes")
        reserved = -(-size_bytes // granule) * granule
        first = (addr - base) // granule
        fits = (addr % granule == 0 and base <= addr and addr + reserved <= end
                and all(o is None for o in self.owner[first : first + reserved // granule]))
        before = (state(self.pool), self.pool.failed_allocs)
        if not fits:
            with pytest.raises(PoolError, match=r"^pool reserve"):
                self.pool.reserve(addr, size_bytes, cached)
            assert (state(self.pool), self.pool.failed_allocs) == before
            return
        buf = self.pool.reserve(addr, size_bytes, cached, label="r")
        self.reserves += 1
        assert (buf.phys_addr, buf.size_bytes, buf.reserved_bytes) == (addr, size_bytes, reserved)
        assert (buf.cached, buf.alignment_bytes, buf.is_reservation) == (cached, granule, True)
        self.took(buf)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        buf = data.draw(st.sampled_from(self.live), label="buffer")
        if data.draw(st.booleans(), label="materialise data first"):
            buf.data[-1] = 1
        self.pool.free(buf)
        self.live.remove(buf)
        self.freed.append(buf)
        self.owner = [None if who is buf else who for who in self.owner]
        with pytest.raises(PoolError, match="use after free"):
            _ = buf.data

    @precondition(lambda self: self.freed)
    @rule(data=st.data())
    def double_free(self, data: st.DataObject) -> None:
        buf = data.draw(st.sampled_from(self.freed), label="freed buffer")
        before = state(self.pool)
        with pytest.raises(PoolError, match=f"^double free of buffer #{buf.buffer_id}"):
            self.pool.free(buf)
        assert state(self.pool) == before

    @rule(data=st.data())
    def find(self, data: st.DataObject) -> None:
        # Buffer edges are where off-by-one lookups go wrong, so probe them as often as not.
        edges = [e for b in self.live for e in (b.phys_addr, b.phys_addr + b.size_bytes)]
        where = st.integers(self.pool.base_addr - 1, self.pool.base_addr + self.pool.size_bytes)
        if edges:
            where |= st.sampled_from(edges).flatmap(lambda e: st.sampled_from([e - 1, e]))
        addr = data.draw(where, label="addr")
        holders = [b for b in self.live if b.phys_addr <= addr < b.phys_addr + b.size_bytes]
        assert self.pool.find(addr) is (holders[0] if holders else None)

    @precondition(lambda self: self.live)
    @rule(order=st.randoms(use_true_random=False))
    def free_everything(self, order: random.Random) -> None:
        bufs = list(self.live)
        order.shuffle(bufs)
        for buf in bufs:
            self.pool.free(buf)
        self.freed.extend(bufs)
        self.live.clear()
        self.owner = [None] * len(self.owner)
        assert self.pool.free_blocks == ((self.pool.base_addr, self.pool.size_bytes),)
        assert self.pool.used_bytes == 0
        assert self.pool.largest_free_bytes == self.pool.size_bytes
        assert self.pool.fragmentation == 0.0

    @invariant()
    def live_buffers_fit_the_pool_without_overlap(self) -> None:
        pool = self.pool
        spans = sorted((b.phys_addr, b.phys_addr + b.reserved_bytes) for b in self.live)
        for start, end in spans:
            assert pool.base_addr <= start < end <= pool.base_addr + pool.size_bytes
        for (_, end), (next_start, _) in itertools.pairwise(spans):
            assert end <= next_start
        for buf in self.live:
            assert buf.alive
            assert buf.phys_addr % buf.alignment_bytes == 0
            assert buf.reserved_bytes % pool.alignment_bytes == 0
            assert buf.size_bytes <= buf.reserved_bytes < buf.size_bytes + pool.alignment_bytes

    @invariant()
    def accounting_adds_up(self) -> None:
        pool = self.pool
        assert pool.used_bytes + pool.free_bytes == pool.size_bytes
        assert pool.used_bytes == sum(b.reserved_bytes for b in self.live)
        assert pool.free_bytes == sum(size for _, size in pool.free_blocks)
        assert pool.high_water_bytes == self.peak_bytes >= pool.used_bytes
        assert pool.live_buffers == len(self.live)
        assert (pool.alloc_count, pool.failed_allocs) == (self.allocs, self.failures)
        assert pool.reserve_count == self.reserves
        assert 0.0 <= pool.fragmentation < 1.0

    @invariant()
    def free_list_is_the_coalesced_complement(self) -> None:
        assert list(self.pool.free_blocks) == self.model_free_runs()


PoolMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_pool_machine = PoolMachine.TestCase


def test_a_closed_pool_gives_its_bytes_back_and_keeps_its_figures():
    pool = page_pool(16)
    kept, dropped = pool.alloc(PAGE, cached=True), pool.alloc(2 * PAGE, cached=False)
    view = kept.data
    view[:4] = (1, 2, 3, 4)
    gone = weakref.ref(dropped.data)
    before = pool.stats()
    pool.close()
    assert pool.closed and pool.stats() == before
    assert gone() is None  # nothing but the pool held those bytes: they are freed now
    assert view[:4].tolist() == [1, 2, 3, 4]  # an array taken before stays valid
    for buf in (kept, dropped):
        with pytest.raises(PoolError, match="its pool is closed"):
            _ = buf.data


def test_a_closed_session_frees_its_buffers_while_the_session_is_still_referenced():
    from emu.runtime import hbsys, session

    with session.Session() as sess:
        mem = hbsys.hbSysMem()
        assert hbsys.hbSysAllocCachedMem(mem, 4 * PAGE) == 0
        gone = weakref.ref(mem.virAddr)
        del mem  # the program's handle goes; the pool, in the session's web, still has them
        assert gone() is not None
    assert sess.closed and gone() is None

"""The A55 data-cache hierarchy: private L1D and L2 per core, one L3 shared by the cluster.

The model counts hits, line fills from DDR and dirty write-backs to DDR for a stream of byte
addresses; time is derived from those counts elsewhere (`emu.cpu.timing` for the on-chip
hits, the DDR model for the DDR lines). A pure-Python reference with the same
semantics lives in `tests/mem/cache_reference.py`; the two must agree exactly, so the rules
below are the specification.

Geometry. Every level uses lines of `cpu.line_bytes` (a power of two). An address `a`
belongs to line `a // line_bytes`; a level with `sets = size_bytes / (line_bytes * ways)`
sets (a power of two) keeps that line in set `line % sets`. Each set holds up to `ways`
lines, ordered from least to most recently used (true LRU). L1D and L2 exist once per core,
L3 once. Private caches are not kept coherent with each other: the same line may sit, clean
or dirty, in several cores' L1D and L2 at once.

An access by core `c` to line `x` (a read, or a write):
  1. L1D of `c` holds `x`: an L1 hit. `x` becomes MRU in that set; a write marks it dirty.
  2. Otherwise L2 of `c` holds `x`: an L2 hit; `x` becomes MRU there.
  3. Otherwise L3 holds `x`: an L3 hit; `x` becomes MRU there.
  4. Otherwise: a DDR read of one line.
  Then `x` is filled, clean, into every level that missed, outermost first: L3 (case 4 only),
  then L2 of `c` (cases 3 and 4), then L1D of `c` (cases 2 to 4). A write then marks the L1D
  copy dirty. Levels that hit keep their copy and its dirty bit (non-inclusive, and no level
  is ever invalidated because another level evicted: no back-invalidation).
Filling a line into a full set evicts its LRU line; a set with room evicts nothing. The new
line becomes MRU. An evicted clean line is dropped. An evicted dirty line is written into the
next level of the same core (L1D -> L2 of `c`, L2 -> L3):
  - if that level holds the line, the line there is marked dirty and its LRU position is left
    as it was;
  - otherwise the line is allocated there, dirty, as MRU, which may itself evict a line and
    so continue the chain by the same rule.
A dirty line evicted from L3 is one DDR write-back. Each eviction chain is followed to its end
before the next fill starts, so in one access the L2 fill (and its chain) happens before the
L1D fill (and its chain).

Streaming writes. A write flagged `no_allocate` (the core's write-streaming mode: a full line
stored as part of a long run, `emu.cpu.memsys`) that hits L1D of `c` is an ordinary L1 hit.
Otherwise it goes to memory without a line fill: `x` is removed from L2 of `c` and from L3
if they hold it (the store replaces the whole line, so nothing is written back) and is not
allocated anywhere; it counts one DDR streaming write.

Outcome. Each access's outcome is also reported on its own: 1 L1 hit, 2 L2 hit, 3 L3 hit,
4 DDR read, 5 streaming write.

Maintenance. `clean(start, nbytes)` and `invalidate(start, nbytes)` act on every line that
overlaps the byte range `[start, start + nbytes)`, in every cache of every core. `clean` marks
those lines clean and returns how many distinct lines were dirty somewhere (each is written to
DDR once, however many caches held it dirty). `invalidate` removes those lines without writing
anything back and returns how many distinct lines were resident somewhere. Both look at the
cache contents, so their cost grows with the cache size, not with `nbytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.jit import njit_inline, njit_unmanaged
from emu.soc.config import CacheLevelConfig, CpuConfig, L1Config

_INT64_MAX = np.iinfo(np.int64).max

_Level = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.uint8]]
"""One level as the kernel takes it: (tags, lru_stamps, dirty), see `CacheArrays`."""


@dataclass(frozen=True)
class CacheStats:
    """What a stream of accesses did to the hierarchy. All values are counts."""

    accesses: int = 0
    l1_hits: int = 0
    l2_hits: int = 0
    l3_hits: int = 0
    ddr_reads: int = 0
    """Lines filled from DDR (one per access that missed every level)."""
    ddr_writebacks: int = 0
    """Dirty lines evicted from L3 and written to DDR."""
    ddr_stream_writes: int = 0
    """Lines written straight to DDR by streaming writes (no fill)."""

    @property
    def l1_misses(self) -> int:
        return self.accesses - self.l1_hits

    @property
    def l2_misses(self) -> int:
        return self.l1_misses - self.l2_hits

    @property
    def l3_misses(self) -> int:
        return self.l2_misses - self.l3_hits

    @property
    def ddr_writes(self) -> int:
        """Lines written to DDR: write-backs and streaming writes."""
        return self.ddr_writebacks + self.ddr_stream_writes

    def ddr_bytes(self, line_bytes: int) -> int:
        """Bytes moved to and from DDR: every fill and every write is one whole line."""
        return (self.ddr_reads + self.ddr_writes) * line_bytes

    def __add__(self, other: CacheStats) -> CacheStats:
        if not isinstance(other, CacheStats):
            return NotImplemented
        return CacheStats(
            accesses=self.accesses + other.accesses,
            l1_hits=self.l1_hits + other.l1_hits,
            l2_hits=self.l2_hits + other.l2_hits,
            l3_hits=self.l3_hits + other.l3_hits,
            ddr_reads=self.ddr_reads + other.ddr_reads,
            ddr_writebacks=self.ddr_writebacks + other.ddr_writebacks,
            ddr_stream_writes=self.ddr_stream_writes + other.ddr_stream_writes,
        )


@dataclass(frozen=True)
class CacheArrays:
    """The state of one level: `n_caches` caches (one per core, or one shared) of `sets x ways`.

    An empty way has tag -1 and LRU stamp 0. Tags are whole line numbers (address //
    line_bytes). Stamps come from one counter per hierarchy that grows with every use, so within
    a set a larger stamp means more recently used, and 0 (empty) is always the first victim.
    """

    tags: npt.NDArray[np.int64]
    lru_stamps: npt.NDArray[np.int64]
    dirty: npt.NDArray[np.uint8]

    @classmethod
    def empty(cls, n_caches: int, sets: int, ways: int) -> CacheArrays:
        shape = (n_caches, sets, ways)
        return cls(
            tags=np.full(shape, -1, dtype=np.int64),
            lru_stamps=np.zeros(shape, dtype=np.int64),
            dirty=np.zeros(shape, dtype=np.uint8),
        )

    def as_tuple(self) -> _Level:
        """The arrays as the kernel takes them."""
        return self.tags, self.lru_stamps, self.dirty

    def clear(self) -> None:
        self.tags.fill(-1)
        self.lru_stamps.fill(0)
        self.dirty.fill(0)


def _sets_of(level: L1Config | CacheLevelConfig, line_bytes: int, name: str) -> int:
    """Number of sets of one level; rejects a geometry that is not a power of two of sets."""
    set_bytes = line_bytes * level.ways
    sets = level.size_bytes // set_bytes if level.ways >= 1 else 0
    # A power of two lets the kernel find a set with a mask instead of a 64-bit division, the
    # costliest step of an L1D hit. The SoC config check already demands it.
    if sets < 1 or sets * set_bytes != level.size_bytes or sets & (sets - 1):
        raise ValueError(
            f"cpu.{name}: {level.size_bytes} B is not a power-of-two number of sets of "
            f"{level.ways} ways x {line_bytes} B lines"
        )
    return sets


class CacheHierarchy:
    """The data caches of the whole A55 cluster, warm across calls until `reset`."""

    def __init__(self, cpu: CpuConfig) -> None:
        if cpu.cores < 1:
            raise ValueError(f"cpu.cores: need at least one core, got {cpu.cores}")
        if cpu.line_bytes < 1 or cpu.line_bytes & (cpu.line_bytes - 1):
            raise ValueError(f"cpu.line_bytes: must be a power of two, got {cpu.line_bytes}")
        self.cpu = cpu
        self.line_bytes = cpu.line_bytes
        self._line_shift = cpu.line_bytes.bit_length() - 1
        self.l1d = CacheArrays.empty(
            cpu.cores, _sets_of(cpu.l1d, cpu.line_bytes, "l1d"), cpu.l1d.ways
        )
        self.l2 = CacheArrays.empty(cpu.cores, _sets_of(cpu.l2, cpu.line_bytes, "l2"), cpu.l2.ways)
        self.l3 = CacheArrays.empty(1, _sets_of(cpu.l3, cpu.line_bytes, "l3"), cpu.l3.ways)
        # The LRU stamp counter (`CacheArrays`); a kernel that runs accesses through
        # `access_line` itself (`emu.cpu.memsys`) takes it and gives it back advanced.
        self.clock = 0

    @property
    def levels(self) -> tuple[CacheArrays, CacheArrays, CacheArrays]:
        """The state of L1D, L2 and L3, innermost first."""
        return self.l1d, self.l2, self.l3

    def kernel_levels(self) -> tuple[_Level, _Level, _Level]:
        """The arrays of L1D, L2 and L3 as `access_line` takes them."""
        return self.l1d.as_tuple(), self.l2.as_tuple(), self.l3.as_tuple()

    def reset(self) -> None:
        """Empty every cache (nothing is written back)."""
        for level in self.levels:
            level.clear()
        self.clock = 0

    def access(
        self,
        core: int,
        addrs: npt.ArrayLike,
        is_write: npt.ArrayLike | None = None,
        no_allocate: npt.ArrayLike | None = None,
        outcomes: npt.NDArray[np.uint8] | None = None,
    ) -> CacheStats:
        """Run byte addresses `addrs`, in order, through the caches of `core`.

        `is_write` and `no_allocate` are bool arrays as long as `addrs` (None: all reads; no
        streaming writes); `no_allocate` may be set only on writes. Addresses may have any
        integer dtype and must not be negative. `outcomes`, if given, receives each access's
        outcome (1 to 5, see the module docstring).
        """
        if isinstance(core, bool) or not isinstance(core, int | np.integer):
            raise ValueError(f"core: expected an integer core index, got {core!r}")
        if not 0 <= core < self.cpu.cores:
            raise ValueError(f"core: {core} is not a core of this {self.cpu.cores}-core cluster")
        byte_addrs = self._addresses_of(addrs)
        n = byte_addrs.size
        writes = self._flags(is_write, n, "is_write")
        streaming = self._flags(no_allocate, n, "no_allocate")
        if (streaming & ~writes).any():
            raise ValueError("no_allocate: only a write can be a streaming write")
        if outcomes is None:
            outcomes = np.empty(n, np.uint8)
        elif outcomes.dtype != np.uint8 or outcomes.shape != (n,):
            raise ValueError(f"outcomes: expected a uint8 array of {n} entries")
        counts = np.zeros(6, np.int64)
        self.clock = _access_kernel(
            (byte_addrs, self._line_shift),
            writes,
            streaming,
            int(core),
            self.kernel_levels(),
            self.clock,
            outcomes,
            counts,
        )
        return CacheStats(
            accesses=int(n),
            l1_hits=int(counts[0]),
            l2_hits=int(counts[1]),
            l3_hits=int(counts[2]),
            ddr_reads=int(counts[3]),
            ddr_writebacks=int(counts[4]),
            ddr_stream_writes=int(counts[5]),
        )

    @staticmethod
    def _flags(flags: npt.ArrayLike | None, size: int, name: str) -> npt.NDArray[np.bool_]:
        if flags is None:
            return np.zeros(size, dtype=np.bool_)
        out = np.asarray(flags)
        if out.dtype != np.bool_:
            raise TypeError(f"{name}: expected a bool array, got dtype {out.dtype}")
        if out.ndim > 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {out.shape}")
        out = np.ascontiguousarray(out.reshape(-1))
        if out.size != size:
            raise ValueError(f"{name}: {out.size} flags for {size} addresses; they must be "
                             "the same length")
        return out

    def clean(self, start: int, nbytes: int) -> int:
        """Write back every dirty line overlapping `[start, start + nbytes)`, everywhere.

        The lines stay resident, now clean. Returns the number of distinct lines written to DDR.
        """
        first, end = self._line_range(start, nbytes)
        written: list[npt.NDArray[np.int64]] = []
        for level in self.levels:
            hit = (level.tags >= first) & (level.tags < end) & (level.dirty != 0)
            written.append(level.tags[hit])
            level.dirty[hit] = 0
        return int(np.unique(np.concatenate(written)).size)

    def line_states(self, start: int, nbytes: int) -> tuple[npt.NDArray[np.bool_],
                                                             npt.NDArray[np.bool_]]:
        """For each line overlapping `[start, start + nbytes)`, in order: whether some cache
        holds it, and whether some cache holds it dirty (not yet written to DDR). Changes
        nothing."""
        first, end = self._line_range(start, nbytes)
        resident = np.zeros(end - first, np.bool_)
        dirty = np.zeros(end - first, np.bool_)
        for level in self.levels:
            hit = (level.tags >= first) & (level.tags < end)
            lines = level.tags[hit] - first
            resident[lines] = True
            dirty[lines[level.dirty[hit] != 0]] = True
        return resident, dirty

    def invalidate(self, start: int, nbytes: int) -> int:
        """Drop every line overlapping `[start, start + nbytes)`, everywhere, without writing back.

        Returns the number of distinct lines that were resident in at least one cache.
        """
        first, end = self._line_range(start, nbytes)
        dropped: list[npt.NDArray[np.int64]] = []
        for level in self.levels:
            hit = (level.tags >= first) & (level.tags < end)
            dropped.append(level.tags[hit])
            level.tags[hit] = -1
            level.lru_stamps[hit] = 0
            level.dirty[hit] = 0
        return int(np.unique(np.concatenate(dropped)).size)

    def _addresses_of(self, addrs: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """`addrs`, checked, as contiguous int64 (the array itself when it already is: the
        kernel finds each line, so no array of lines is made, nor its pages faulted in)."""
        raw = np.asarray(addrs)
        if raw.ndim > 1:
            raise ValueError(f"addrs: expected a 1-D array of addresses, got shape {raw.shape}")
        if raw.dtype == np.bool_ or not np.issubdtype(raw.dtype, np.integer):
            if raw.size:
                raise TypeError(f"addrs: expected integer addresses, got dtype {raw.dtype}")
            raw = raw.astype(np.int64)
        raw = raw.reshape(-1)
        if raw.size:
            lowest, highest = int(raw.min()), int(raw.max())
            if lowest < 0:
                raise ValueError(f"addrs: addresses must not be negative, got {lowest}")
            if highest > _INT64_MAX:
                raise ValueError(f"addrs: address {highest} does not fit in 64-bit signed")
        return np.ascontiguousarray(raw.astype(np.int64, copy=False))

    def _line_range(self, start: int, nbytes: int) -> tuple[int, int]:
        """Lines `[first, end)` that overlap the byte range."""
        if start < 0:
            raise ValueError(f"start: must not be negative, got {start}")
        if nbytes < 0:
            raise ValueError(f"nbytes: must not be negative, got {nbytes}")
        first = int(start) // self.line_bytes
        end = -(-(int(start) + int(nbytes)) // self.line_bytes) if nbytes else first
        # Tags are int64; clamping keeps the comparison in range without changing its result.
        return min(first, _INT64_MAX), min(end, _INT64_MAX)


@njit_inline
def _find(tags: npt.NDArray[np.int64], cache: int, s: int, line: int) -> int:
    """Way of `line` in set `s`, or -1."""
    for way in range(tags.shape[2]):
        if tags[cache, s, way] == line:
            return way
    return -1


@njit_inline
def _lru(lru_stamps: npt.NDArray[np.int64], cache: int, s: int) -> int:
    """The way a fill of set `s` takes: its least recently used. Empty ways carry stamp 0,
    below every used one, so the first empty way goes first. The oldest stamp stays in a
    register: a select per way, not a reload and a branch."""
    victim = 0
    oldest = lru_stamps[cache, s, 0]
    for way in range(1, lru_stamps.shape[2]):
        used = lru_stamps[cache, s, way]
        if used < oldest:
            oldest = used
            victim = way
    return victim


@njit_inline
def _look(level: _Level, cache: int, s: int, line: int) -> tuple[int, int]:
    """(way of `line` in set `s` or -1, the way a fill of the set would take, as `_lru`),
    in one pass over the set with no early exit to mispredict: for the small sets of L1D
    and L2, where most of the model's lookups end, that is cheaper than stopping at the
    match and scanning the stamps again on a miss."""
    tags, lru_stamps = level[0], level[1]
    hit = -1
    victim = 0
    oldest = lru_stamps[cache, s, 0]
    for way in range(tags.shape[2]):
        if tags[cache, s, way] == line:
            hit = way
        used = lru_stamps[cache, s, way]
        if used < oldest:
            oldest = used
            victim = way
    return hit, victim


@njit_inline
def _insert(level: _Level, cache: int, s: int, line: int, dirty: int, stamp: int) -> int:
    """Put `line` in set `s` as MRU; return the dirty line it evicted, or -1."""
    return _put(level, cache, s, _lru(level[1], cache, s), line, dirty, stamp)


@njit_inline
def _put(level: _Level, cache: int, s: int, victim: int, line: int, dirty: int,
         stamp: int) -> int:
    """Put `line` in way `victim` of set `s` as MRU; return the dirty line it evicted, or -1."""
    tags, lru_stamps, dirt = level
    evicted = -1
    if tags[cache, s, victim] >= 0 and dirt[cache, s, victim] != 0:
        evicted = tags[cache, s, victim]
    tags[cache, s, victim] = line
    lru_stamps[cache, s, victim] = stamp
    dirt[cache, s, victim] = dirty
    return evicted


@njit_inline
def _write_back(level: _Level, cache: int, line: int, stamp: int) -> int:
    """Take a dirty line evicted from the level above; return the dirty line this evicts, or -1."""
    s = line & (level[0].shape[1] - 1)
    way = _find(level[0], cache, s, line)
    if way >= 0:
        level[2][cache, s, way] = 1
        return -1
    return _insert(level, cache, s, line, 1, stamp)


@njit_inline
def _drop(level: _Level, cache: int, s: int, line: int) -> None:
    """Remove `line` from set `s` if it is there (a streaming write replaced it)."""
    way = _find(level[0], cache, s, line)
    if way >= 0:
        level[0][cache, s, way] = -1
        level[1][cache, s, way] = 0
        level[2][cache, s, way] = 0


@njit_inline
def access_line(levels: tuple[_Level, _Level, _Level], core: int, line: int, write: bool,
                no_allocate: bool, clock: int) -> tuple[int, int, int]:
    """One access by `core` to `line` through `levels` (L1D, L2, L3), by the rules of the
    module docstring: (its outcome, the DDR write-backs it caused, the advanced LRU clock).
    Inlined into every loop that runs accesses, so a caller can do other per-access work
    in the same pass (`emu.cpu.memsys`)."""
    l1d, l2, l3 = levels
    l1_tags, l1_stamps, l1_dirt = l1d
    l2_tags, l2_stamps = l2[0], l2[1]
    l3_tags, l3_stamps = l3[0], l3[1]
    dirty = 1 if write else 0
    clock += 1
    s1 = line & (l1_tags.shape[1] - 1)
    way, victim1 = _look(l1d, core, s1, line)
    if way >= 0:
        l1_stamps[core, s1, way] = clock
        if dirty:
            l1_dirt[core, s1, way] = 1
        return 1, 0, clock
    s2 = line & (l2_tags.shape[1] - 1)
    if no_allocate:
        _drop(l2, core, s2, line)
        _drop(l3, 0, line & (l3_tags.shape[1] - 1), line)
        return 5, 0, clock
    written = 0
    way, victim2 = _look(l2, core, s2, line)
    if way >= 0:
        outcome = 2
        l2_stamps[core, s2, way] = clock
    else:
        s3 = line & (l3_tags.shape[1] - 1)
        way = _find(l3_tags, 0, s3, line)
        if way >= 0:
            outcome = 3
            l3_stamps[0, s3, way] = clock
        else:
            outcome = 4
            if _insert(l3, 0, s3, line, 0, clock) >= 0:
                written += 1
        # Every fill and write-back takes a fresh stamp, so that two lines placed in one
        # set during the same access keep the order in which they arrived.
        clock += 1
        evicted = _put(l2, core, s2, victim2, line, 0, clock)
        if evicted >= 0:
            clock += 1
            if _write_back(l3, 0, evicted, clock) >= 0:
                written += 1
    clock += 1
    evicted = _put(l1d, core, s1, victim1, line, dirty, clock)
    if evicted >= 0:
        clock += 1
        evicted = _write_back(l2, core, evicted, clock)
        if evicted >= 0:
            clock += 1
            if _write_back(l3, 0, evicted, clock) >= 0:
                written += 1
    return outcome, written, clock


@njit_unmanaged
def _access_kernel(
    addrs: tuple[npt.NDArray[np.int64], int],
    is_write: npt.NDArray[np.bool_],
    no_allocate: npt.NDArray[np.bool_],
    core: int,
    levels: tuple[_Level, _Level, _Level],
    clock: int,
    outcomes: npt.NDArray[np.uint8],
    counts: npt.NDArray[np.int64],
) -> int:
    """Run the lines of `addrs` = (byte addresses, log2 of the line's bytes) for `core`
    through `levels` (L1D, L2, L3); write each access's outcome into `outcomes` and the
    counts into `counts` (zeros before); return the advanced LRU clock.

    counts = [L1D hits, L2 hits, L3 hits, DDR reads, DDR write-backs, streaming writes].
    """
    l1_hits = l2_hits = l3_hits = ddr_reads = ddr_writebacks = stream_writes = 0
    byte_addrs, line_shift = addrs
    for i in range(byte_addrs.size):
        outcome, written, clock = access_line(levels, core, byte_addrs[i] >> line_shift,
                                              is_write[i], no_allocate[i], clock)
        outcomes[i] = outcome
        ddr_writebacks += written
        if outcome == 1:
            l1_hits += 1
        elif outcome == 2:
            l2_hits += 1
        elif outcome == 3:
            l3_hits += 1
        elif outcome == 4:
            ddr_reads += 1
        else:
            stream_writes += 1
    counts[0] = l1_hits
    counts[1] = l2_hits
    counts[2] = l3_hits
    counts[3] = ddr_reads
    counts[4] = ddr_writebacks
    counts[5] = stream_writes
    return clock

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

Representation (it changes nothing above, only how fast the model finds out). Each set keeps
its LRU order in one 64-bit word, a way number per 4-bit field from the most recently used
up, its empty ways last: a use moves one field to the front, and the victim of a fill is the
last field, with no search. Each way also has an 8-bit fingerprint of its line, eight to a
64-bit word: a lookup compares the line's fingerprint with a whole word of them at once and
reads the tags of the matching ways only. So a level has at most 16 ways (the A55's L1D and
L2 have 4, the DSU's L3 16; `CpuConfig` refuses more).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.jit import njit_inline, njit_unmanaged, trailing_zeros
from emu.soc.config import CacheLevelConfig, CpuConfig, L1Config

_INT64_MAX = np.iinfo(np.int64).max

MAX_WAYS = 16
"""Ways a level can have: its LRU order is 16 four-bit fields of one word."""

_Level = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.uint64],
               npt.NDArray[np.uint8]]
"""One level as the kernel takes it: (tags, prints, order, dirty), see `CacheArrays`."""


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

    `tags[c, s, w]` is the line in way `w` of set `s` (whole line numbers, address //
    line_bytes), -1 if the way is empty; `dirty` its dirty bit. `order[c, s]` is the set's
    LRU order: field `p` (bits 4p to 4p+3) is the way `p` places from the most recently
    used; the set's empty ways hold the last places. `prints[c, s, k]` holds the 8-bit
    fingerprints of the lines of ways 8k to 8k+7, one per byte (stale in an empty way).
    """

    tags: npt.NDArray[np.int64]
    dirty: npt.NDArray[np.uint8]
    order: npt.NDArray[np.uint64]
    prints: npt.NDArray[np.uint64]

    @classmethod
    def empty(cls, n_caches: int, sets: int, ways: int) -> CacheArrays:
        if not 1 <= ways <= MAX_WAYS:
            raise ValueError(f"ways: the model keeps 1 to {MAX_WAYS} ways a set, got {ways}")
        shape = (n_caches, sets, ways)
        arrays = cls(
            tags=np.empty(shape, dtype=np.int64),
            dirty=np.empty(shape, dtype=np.uint8),
            order=np.empty((n_caches, sets), dtype=np.uint64),
            prints=np.empty((n_caches, sets, (ways + 7) // 8), dtype=np.uint64),
        )
        arrays.clear()
        return arrays

    def as_tuple(self) -> _Level:
        """The arrays as the kernel takes them."""
        return self.tags, self.prints, self.order, self.dirty

    def clear(self) -> None:
        self.tags.fill(-1)
        self.dirty.fill(0)
        self.order.fill(_IDENTITY_ORDER)  # all empty: any order will do
        self.prints.fill(0)

    def recency(self, cache: int, s: int) -> list[int]:
        """The ways of set `s` of `cache` that hold a line, least recently used first."""
        word = int(self.order[cache, s])
        ways = self.tags.shape[2]
        fields = [(word >> (4 * p)) & 15 for p in range(ways)]
        return [w for w in reversed(fields) if self.tags[cache, s, w] >= 0]

    def drop_lines(self, hit: npt.NDArray[np.bool_]) -> None:
        """Empty the ways marked in `hit` (shaped as `tags`), nothing written back, and move
        them to the last places of their sets' LRU order."""
        self.tags[hit] = -1
        self.dirty[hit] = 0
        touched = np.flatnonzero(hit.any(axis=2))
        if touched.size:
            _empties_last(self.tags.reshape(-1, self.tags.shape[2]), self.order.reshape(-1),
                          touched)


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
        _access_kernel(
            (byte_addrs, self._line_shift),
            writes,
            streaming,
            int(core),
            self.kernel_levels(),
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
            level.drop_lines(hit)
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


# Word constants of the set representation (module docstring). A 4-bit field or a byte is
# found in a word by the carry trick: (x - 0x11..1) & ~x & 0x88..8 sets the top bit of the
# lowest zero field of x (exactly; fields above it may show false ones).
_NIBBLE_ONES = np.uint64(0x1111_1111_1111_1111)
_NIBBLE_TOPS = np.uint64(0x8888_8888_8888_8888)
_BYTE_ONES = np.uint64(0x0101_0101_0101_0101)
_BYTE_TOPS = np.uint64(0x8080_8080_8080_8080)
_LOW_FIELDS = np.array([(1 << (4 * p)) - 1 for p in range(17)], np.uint64)
"""`_LOW_FIELDS[p]`: the bits of the order's fields below place `p`."""
_IDENTITY_ORDER = np.uint64(sum(p << (4 * p) for p in range(16)))
_FINGERPRINT_MIX = np.uint64(0x9E37_79B9_7F4A_7C15)


@njit_inline
def _fingerprint(line: int) -> np.uint64:
    """The line's 8-bit fingerprint (the top byte of a multiplicative hash)."""
    return (np.uint64(line) * _FINGERPRINT_MIX) >> np.uint64(56)


@njit_inline
def _find(level: _Level, cache: int, s: int, line: int) -> int:
    """Way of `line` in set `s`, or -1: the ways whose fingerprint matches, checked."""
    tags, prints = level[0], level[1]
    ways = tags.shape[2]
    wanted = _fingerprint(line) * _BYTE_ONES
    for k in range(prints.shape[2]):
        x = prints[cache, s, k] ^ wanted
        candidates = (x - _BYTE_ONES) & ~x & _BYTE_TOPS
        while candidates:
            way = 8 * k + (trailing_zeros(candidates) >> 3)
            if way < ways and tags[cache, s, way] == line:
                return way
            candidates &= candidates - np.uint64(1)
    return -1


@njit_inline
def _touch(level: _Level, cache: int, s: int, way: int) -> None:
    """Make `way` of set `s` the most recently used."""
    order = level[2]
    word = order[cache, s]
    if (word & np.uint64(15)) != way:
        x = word ^ (np.uint64(way) * _NIBBLE_ONES)
        place = trailing_zeros((x - _NIBBLE_ONES) & ~x & _NIBBLE_TOPS) >> 2
        order[cache, s] = _to_front(word, place, way)


@njit_inline
def _to_front(word: np.uint64, place: int, way: int) -> np.uint64:
    """The order `word` with `way`, at `place`, moved to the front."""
    below = word & _LOW_FIELDS[place]
    above = word & ~_LOW_FIELDS[place + 1]
    return above | (below << np.uint64(4)) | np.uint64(way)


@njit_inline
def _fill(level: _Level, cache: int, s: int, line: int, dirty: int) -> int:
    """Put `line` in set `s` as MRU, in the place of its LRU way; return the dirty line that
    evicted, or -1."""
    tags, prints, order, dirt = level
    last = tags.shape[2] - 1
    word = order[cache, s]
    way = int((word >> np.uint64(4 * last)) & np.uint64(15))
    evicted = -1
    if tags[cache, s, way] >= 0 and dirt[cache, s, way] != 0:
        evicted = tags[cache, s, way]
    tags[cache, s, way] = line
    dirt[cache, s, way] = dirty
    shift = np.uint64(8 * (way & 7))
    k = way >> 3
    prints[cache, s, k] = ((prints[cache, s, k] & ~(np.uint64(0xFF) << shift))
                           | (_fingerprint(line) << shift))
    order[cache, s] = _to_front(word, last, way)
    return evicted


@njit_unmanaged
def _write_back(level: _Level, cache: int, line: int) -> int:
    """Take a dirty line evicted from the level above; return the dirty line this evicts, or
    -1. A call, not inlined: its three inlined copies made the loops that run accesses take
    2 s longer to compile for 3 % of their running time."""
    s = line & (level[0].shape[1] - 1)
    way = _find(level, cache, s, line)
    if way >= 0:
        level[3][cache, s, way] = 1
        return -1
    return _fill(level, cache, s, line, 1)


@njit_inline
def _drop(level: _Level, cache: int, s: int, line: int) -> None:
    """Remove `line` from set `s` if it is there (a streaming write replaced it). The search
    is inlined: a call costs several times what it does (about 17 ns against 3 ns a set on
    this machine, most of a streaming write's cost when each level's search was a call)."""
    way = _find(level, cache, s, line)
    if way >= 0:
        _empty_way(level, cache, s, way)


@njit_unmanaged
def _empty_way(level: _Level, cache: int, s: int, way: int) -> None:
    """Empty `way` of set `s`, nothing written back. A call, not inlined: it is rare, and
    each inlined copy of `_settle` added over a second to the compile of every loop that
    runs accesses."""
    level[0][cache, s, way] = -1
    level[3][cache, s, way] = 0
    _settle(level[0][cache, s], level[2][cache], s)


@njit_inline
def _settle(tags: npt.NDArray[np.int64], order: npt.NDArray[np.uint64], s: int) -> None:
    """Rewrite set `s`'s order (its ways' `tags`) with the empty ways last, the others in
    the order they were."""
    word = order[s]
    used = np.uint64(0)
    empty = np.uint64(0)
    n_used = 0
    for p in range(tags.size):
        way = (word >> np.uint64(4 * p)) & np.uint64(15)
        if tags[np.int64(way)] >= 0:
            used |= way << np.uint64(4 * n_used)
            n_used += 1
        else:
            empty |= way << np.uint64(4 * (p - n_used))
    order[s] = used | (empty << np.uint64(4 * n_used)) if n_used < tags.size else used


@njit_unmanaged
def _empties_last(tags: npt.NDArray[np.int64], order: npt.NDArray[np.uint64],
                  sets: npt.NDArray[np.int64]) -> None:
    """`_settle` the sets `sets` of one level (`tags` one row a set, `order` one word)."""
    for s in sets:
        _settle(tags[s], order, s)


@njit_inline
def access_line(levels: tuple[_Level, _Level, _Level], core: int, line: int, write: bool,
                no_allocate: bool) -> tuple[int, int]:
    """One access by `core` to `line` through `levels` (L1D, L2, L3), by the rules of the
    module docstring: (its outcome, the DDR write-backs it caused). Inlined into every loop
    that runs accesses, so a caller can do other per-access work in the same pass
    (`emu.cpu.memsys`)."""
    l1d, l2, l3 = levels
    dirty = 1 if write else 0
    s1 = line & (l1d[0].shape[1] - 1)
    way = _find(l1d, core, s1, line)
    if way >= 0:
        _touch(l1d, core, s1, way)
        if dirty:
            l1d[3][core, s1, way] = 1
        return 1, 0
    s2 = line & (l2[0].shape[1] - 1)
    s3 = line & (l3[0].shape[1] - 1)
    if no_allocate:
        _drop(l2, core, s2, line)
        _drop(l3, 0, s3, line)
        return 5, 0
    written = 0
    way = _find(l2, core, s2, line)
    if way >= 0:
        outcome = 2
        _touch(l2, core, s2, way)
    else:
        way = _find(l3, 0, s3, line)
        if way >= 0:
            outcome = 3
            _touch(l3, 0, s3, way)
        else:
            outcome = 4
            if _fill(l3, 0, s3, line, 0) >= 0:
                written += 1
        evicted = _fill(l2, core, s2, line, 0)
        if evicted >= 0 and _write_back(l3, 0, evicted) >= 0:
            written += 1
    evicted = _fill(l1d, core, s1, line, dirty)
    if evicted >= 0:
        evicted = _write_back(l2, core, evicted)
        if evicted >= 0 and _write_back(l3, 0, evicted) >= 0:
            written += 1
    return outcome, written


@njit_unmanaged
def _access_kernel(
    addrs: tuple[npt.NDArray[np.int64], int],
    is_write: npt.NDArray[np.bool_],
    no_allocate: npt.NDArray[np.bool_],
    core: int,
    levels: tuple[_Level, _Level, _Level],
    outcomes: npt.NDArray[np.uint8],
    counts: npt.NDArray[np.int64],
) -> None:
    """Run the lines of `addrs` = (byte addresses, log2 of the line's bytes) for `core`
    through `levels` (L1D, L2, L3); write each access's outcome into `outcomes` and the
    counts into `counts` (zeros before).

    counts = [L1D hits, L2 hits, L3 hits, DDR reads, DDR write-backs, streaming writes].
    """
    l1_hits = l2_hits = l3_hits = ddr_reads = ddr_writebacks = stream_writes = 0
    byte_addrs, line_shift = addrs
    for i in range(byte_addrs.size):
        outcome, written = access_line(levels, core, byte_addrs[i] >> line_shift,
                                       is_write[i], no_allocate[i])
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

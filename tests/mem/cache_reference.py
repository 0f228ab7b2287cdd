"""A slow, obviously-correct model of the cache hierarchy, to check `emu.mem.cache` against.

Same rules as the module docstring of `emu.mem.cache`, written as directly as possible: each
set is an OrderedDict from line number to dirty flag, least recently used first. It shares
nothing with the numba model except the `CacheStats` container it returns.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from emu.mem.cache import CacheStats
from emu.soc.config import CacheLevelConfig, CpuConfig, L1Config

Snapshot = list[list[list[list[tuple[int, bool]]]]]
"""Per level, per cache, per set: (line, dirty) from least to most recently used."""


class _Cache:
    def __init__(self, level: L1Config | CacheLevelConfig, line_bytes: int) -> None:
        self.ways = level.ways
        self.sets: list[OrderedDict[int, bool]] = [
            OrderedDict() for _ in range(level.size_bytes // (line_bytes * level.ways))
        ]

    def set_of(self, line: int) -> OrderedDict[int, bool]:
        return self.sets[line % len(self.sets)]

    def touch(self, line: int) -> bool:
        """Make `line` MRU if present; say whether it was."""
        entries = self.set_of(line)
        if line not in entries:
            return False
        entries.move_to_end(line)
        return True

    def insert(self, line: int, dirty: bool) -> int | None:
        """Add `line` as MRU; return the dirty line evicted to make room, if any."""
        entries = self.set_of(line)
        evicted = None
        if len(entries) == self.ways:
            victim, victim_dirty = entries.popitem(last=False)
            if victim_dirty:
                evicted = victim
        entries[line] = dirty
        return evicted

    def write_back(self, line: int) -> int | None:
        """Receive a dirty line from the level above; return the dirty line this evicts."""
        entries = self.set_of(line)
        if line in entries:
            entries[line] = True
            return None
        return self.insert(line, True)


class ReferenceHierarchy:
    def __init__(self, cpu: CpuConfig) -> None:
        self.line_bytes = cpu.line_bytes
        self.l1d = [_Cache(cpu.l1d, cpu.line_bytes) for _ in range(cpu.cores)]
        self.l2 = [_Cache(cpu.l2, cpu.line_bytes) for _ in range(cpu.cores)]
        self.l3 = _Cache(cpu.l3, cpu.line_bytes)

    def access(
        self, core: int, addrs: Iterable[int], is_write: Iterable[bool] | None = None,
        no_allocate: Iterable[bool] | None = None,
    ) -> tuple[CacheStats, list[int]]:
        """The stats and each access's outcome (1 L1, 2 L2, 3 L3, 4 DDR, 5 streamed)."""
        addrs = [int(a) for a in addrs]
        writes = [False] * len(addrs) if is_write is None else [bool(w) for w in is_write]
        streams = [False] * len(addrs) if no_allocate is None else [bool(n) for n in no_allocate]
        hits = [0, 0, 0]
        ddr_reads = 0
        ddr_writebacks = 0
        stream_writes = 0
        outcomes = []
        l1d, l2, l3 = self.l1d[core], self.l2[core], self.l3
        for addr, write, stream in zip(addrs, writes, streams, strict=True):
            line = addr // self.line_bytes
            if l1d.touch(line):
                hits[0] += 1
                outcomes.append(1)
                if write:
                    l1d.set_of(line)[line] = True
                continue
            if stream:
                stream_writes += 1
                outcomes.append(5)
                l2.set_of(line).pop(line, None)
                l3.set_of(line).pop(line, None)
                continue
            if l2.touch(line):
                hits[1] += 1
                outcomes.append(2)
            else:
                if l3.touch(line):
                    hits[2] += 1
                    outcomes.append(3)
                else:
                    ddr_reads += 1
                    outcomes.append(4)
                    if l3.insert(line, False) is not None:
                        ddr_writebacks += 1
                ddr_writebacks += self._spill_to_l3(l2.insert(line, False))
            evicted = l1d.insert(line, write)
            if evicted is not None:
                ddr_writebacks += self._spill_to_l3(l2.write_back(evicted))
        return CacheStats(
            accesses=len(addrs),
            l1_hits=hits[0],
            l2_hits=hits[1],
            l3_hits=hits[2],
            ddr_reads=ddr_reads,
            ddr_writebacks=ddr_writebacks,
            ddr_stream_writes=stream_writes,
        ), outcomes

    def _spill_to_l3(self, evicted: int | None) -> int:
        """Write a dirty line evicted from an L2 into L3; return the DDR write-backs (0 or 1)."""
        if evicted is None:
            return 0
        return 0 if self.l3.write_back(evicted) is None else 1

    def _caches(self) -> list[_Cache]:
        return [*self.l1d, *self.l2, self.l3]

    def _overlapping(self, start: int, nbytes: int, line: int) -> bool:
        first_byte, end_byte = line * self.line_bytes, (line + 1) * self.line_bytes
        return nbytes > 0 and first_byte < start + nbytes and end_byte > start

    def clean(self, start: int, nbytes: int) -> int:
        written = set()
        for cache in self._caches():
            for entries in cache.sets:
                for line in [x for x, dirty in entries.items() if dirty]:
                    if self._overlapping(start, nbytes, line):
                        entries[line] = False
                        written.add(line)
        return len(written)

    def invalidate(self, start: int, nbytes: int) -> int:
        dropped = set()
        for cache in self._caches():
            for entries in cache.sets:
                for line in [x for x in entries if self._overlapping(start, nbytes, x)]:
                    del entries[line]
                    dropped.add(line)
        return len(dropped)

    def snapshot(self) -> Snapshot:
        return [
            [[list(entries.items()) for entries in cache.sets] for cache in caches]
            for caches in (self.l1d, self.l2, [self.l3])
        ]

"""The data TLBs of the A55 cores: per core, a fully associative L1 and a set-associative L2.

An access to page `p` (address // page_bytes) by core `c`: if the L1 TLB of `c` holds `p`, an
L1 hit (`p` becomes most recently used). Otherwise, if the L2 TLB of `c` holds `p` (in set
`p % sets`), an L2 hit; otherwise a table walk, after which `p` is put in the L2 TLB. In both
cases `p` is then put in the L1 TLB. A full L1, or a full L2 set, drops its least recently
used entry. The state stays from one call to the next, as the caches' does. A pure-Python
reference lives in `tests/mem/test_tlb.py` (`ReferenceTlbs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.jit import njit, njit_inline
from emu.soc.config import CpuConfig


@dataclass(frozen=True)
class TlbStats:
    accesses: int = 0
    l1_hits: int = 0
    l2_hits: int = 0
    walks: int = 0


class Tlbs:
    """The data TLBs of every core of the cluster."""

    def __init__(self, cpu: CpuConfig) -> None:
        tlb = cpu.tlb
        sets = tlb.l2_entries // tlb.l2_ways
        if sets < 1 or sets * tlb.l2_ways != tlb.l2_entries or sets & (sets - 1):
            raise ValueError(f"cpu.tlb.l2_ways: {tlb.l2_ways} ways do not give a power-of-two "
                             f"number of sets of {tlb.l2_entries} entries")
        self.page_shift = tlb.page_bytes.bit_length() - 1
        self.cores = cpu.cores
        self.l1_tags = np.full((cpu.cores, tlb.l1_entries), -1, np.int64)
        self.l1_stamps = np.zeros((cpu.cores, tlb.l1_entries), np.int64)
        self.l2_tags = np.full((cpu.cores, sets, tlb.l2_ways), -1, np.int64)
        self.l2_stamps = np.zeros((cpu.cores, sets, tlb.l2_ways), np.int64)
        self._clock = 0

    def lookup(self, core: int, addrs: npt.NDArray[np.int64]) -> TlbStats:
        """Translate byte addresses `addrs` (non-negative), in order, on `core`."""
        if not 0 <= core < self.cores:
            raise ValueError(f"core: {core} is not a core of this {self.cores}-core cluster")
        # The kernel finds each page: an array of pages would be one more pass, and fresh
        # memory whose pages fault in (a few ms for a million accesses).
        byte_addrs = np.ascontiguousarray(addrs, np.int64)
        counts, self._clock = _tlb_kernel((byte_addrs, self.page_shift), core, self.l1_tags,
                                          self.l1_stamps, self.l2_tags, self.l2_stamps,
                                          self._clock)
        return TlbStats(int(byte_addrs.size), int(counts[0]), int(counts[1]), int(counts[2]))


@njit_inline
def _lru_way(stamps: npt.NDArray[np.int64]) -> int:
    """The way to refill: the least recently used, the first empty one (stamp 0) if any."""
    victim = 0
    oldest = stamps[0]
    for way in range(1, stamps.size):
        stamp = stamps[way]
        if stamp < oldest:
            oldest = stamp
            victim = way
    return victim


@njit_inline
def _way_of(tags: npt.NDArray[np.int64], page: int) -> int:
    """The way that holds `page`, or -1."""
    for way in range(tags.size):
        if tags[way] == page:
            return way
    return -1


@njit
def _tlb_kernel(addrs: tuple[npt.NDArray[np.int64], int], core: int, l1_tags: npt.NDArray[np.int64],
                l1_stamps: npt.NDArray[np.int64], l2_tags: npt.NDArray[np.int64],
                l2_stamps: npt.NDArray[np.int64], clock: int,
                ) -> tuple[npt.NDArray[np.int64], int]:
    """The pages of `addrs` = (byte addresses, log2 of the page's bytes) through the TLBs of
    `core`: counts = [L1 hits, L2 hits, walks]; and the advanced LRU clock."""
    byte_addrs, page_shift = addrs
    mask = l2_tags.shape[1] - 1
    tags1, stamps1 = l1_tags[core], l1_stamps[core]
    tags2, stamps2 = l2_tags[core], l2_stamps[core]
    l1_hits = l2_hits = walks = 0
    previous = -1
    for i in range(byte_addrs.size):
        page = byte_addrs[i] >> page_shift
        clock += 1
        # A run of accesses to one page (a stream through it) needs no search after the first.
        hit = previous if previous >= 0 and tags1[previous] == page else _way_of(tags1, page)
        if hit >= 0:
            l1_hits += 1
            stamps1[hit] = clock
            previous = hit
            continue
        s = page & mask
        hit = _way_of(tags2[s], page)
        if hit >= 0:
            l2_hits += 1
            stamps2[s, hit] = clock
        else:
            walks += 1
            way = _lru_way(stamps2[s])
            tags2[s, way] = page
            stamps2[s, way] = clock
        previous = _lru_way(stamps1)
        tags1[previous] = page
        stamps1[previous] = clock
    return np.array([l1_hits, l2_hits, walks], np.int64), clock

"""The data TLBs of the A55 cores: per core, a fully associative L1 and a set-associative L2.

An access to page `p` (address // page_bytes) by core `c`: if the L1 TLB of `c` holds `p`, an
L1 hit (`p` becomes most recently used). Otherwise, if the L2 TLB of `c` holds `p` (in set
`p % sets`), an L2 hit; otherwise a table walk, after which `p` is put in the L2 TLB. In both
cases `p` is then put in the L1 TLB. A full L1, or a full L2 set, drops its least recently
used entry. The state stays from one call to the next, as the caches' does. A pure-Python
reference lives in `tests/mem/tlb_reference.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.jit import njit
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
        pages = np.ascontiguousarray(np.asarray(addrs, np.int64) >> self.page_shift)
        counts, self._clock = _tlb_kernel(pages, core, self.l1_tags, self.l1_stamps,
                                          self.l2_tags, self.l2_stamps, self._clock)
        return TlbStats(int(pages.size), int(counts[0]), int(counts[1]), int(counts[2]))


@njit
def _lru_way(stamps: npt.NDArray[np.int64]) -> int:
    victim = 0
    for way in range(1, stamps.size):
        if stamps[way] < stamps[victim]:
            victim = way
    return victim


@njit
def _tlb_kernel(pages: npt.NDArray[np.int64], core: int, l1_tags: npt.NDArray[np.int64],
                l1_stamps: npt.NDArray[np.int64], l2_tags: npt.NDArray[np.int64],
                l2_stamps: npt.NDArray[np.int64], clock: int,
                ) -> tuple[npt.NDArray[np.int64], int]:
    """counts = [L1 hits, L2 hits, walks]; and the advanced LRU clock."""
    counts = np.zeros(3, np.int64)
    mask = l2_tags.shape[1] - 1
    for i in range(pages.size):
        page = pages[i]
        clock += 1
        hit = -1
        for way in range(l1_tags.shape[1]):
            if l1_tags[core, way] == page:
                hit = way
                break
        if hit >= 0:
            counts[0] += 1
            l1_stamps[core, hit] = clock
            continue
        s = page & mask
        hit = -1
        for way in range(l2_tags.shape[2]):
            if l2_tags[core, s, way] == page:
                hit = way
                break
        if hit >= 0:
            counts[1] += 1
            l2_stamps[core, s, hit] = clock
        else:
            counts[2] += 1
            way = _lru_way(l2_stamps[core, s])
            l2_tags[core, s, way] = page
            l2_stamps[core, s, way] = clock
        way = _lru_way(l1_stamps[core])
        l1_tags[core, way] = page
        l1_stamps[core, way] = clock
    return counts, clock

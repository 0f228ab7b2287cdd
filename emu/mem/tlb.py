"""The data TLBs of the A55 cores: per core, a fully associative L1 and a set-associative L2.

An access to page `p` (address // page_bytes) by core `c`: if the L1 TLB of `c` holds `p`, an
L1 hit (`p` becomes most recently used). Otherwise, if the L2 TLB of `c` holds `p` (in set
`p % sets`), an L2 hit; otherwise a table walk, after which `p` is put in the L2 TLB. In both
cases `p` is then put in the L1 TLB. A full L1, or a full L2 set, drops its least recently
used entry. The state stays from one call to the next, as the caches' does. A pure-Python
reference lives in `tests/mem/test_tlb.py` (`ReferenceTlbs`).

The L1 TLB's LRU order is a doubly linked list of its entries (`links`: each entry's
neighbours towards the least and the most recently used, with one extra node that closes the
ring): a hit moves its entry to the front, a refill takes the entry at the back, neither
scans the entries. The L2 TLB's sets are small; they keep a stamp per entry from one LRU
clock (`Tlbs.clock`), the least one the victim.

The model finds a page in the L1 TLB without searching all its entries, most of the time:
an index of `INDEX_SLOTS_PER_ENTRY` slots per entry (a power of two), slot `p % slots`,
keeps how many L1 entries hold a page of that slot and the way that last held one. No
entry in the slot: a miss, known at once; else the way is checked, and only if it holds
another page is the L1 searched. The index changes nothing the model does, only how fast
it finds out: where the recorders interleave several arrays' streams, a quarter of the
accesses miss the L1 TLB and the rest mostly hit an entry other than the last one used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.jit import njit_inline, njit_unmanaged
from emu.soc.config import CpuConfig

INDEX_SLOTS_PER_ENTRY = 8
"""The L1 index's size per L1 entry: with 8, two pages of the L1 seldom share a slot."""


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
        self.l1_links = np.empty((cpu.cores, 2, tlb.l1_entries + 1), np.int64)
        self.l1_links[:] = _empty_links(tlb.l1_entries)
        self.l2_tags = np.full((cpu.cores, sets, tlb.l2_ways), -1, np.int64)
        self.l2_stamps = np.zeros((cpu.cores, sets, tlb.l2_ways), np.int64)
        slots = 1 << (INDEX_SLOTS_PER_ENTRY * tlb.l1_entries - 1).bit_length()
        # Per core and slot: the L1 entries holding a page of the slot, the way last used.
        self.l1_index = np.zeros((cpu.cores, 2, slots), np.int64)
        # The L2's LRU stamp counter; a kernel that translates through `translate` itself
        # (`emu.cpu.memsys`) takes it and gives it back advanced.
        self.clock = 0

    def core_tlbs(self, core: int) -> CoreTlbs:
        """The TLBs of `core` as `translate` takes them (views: it updates them in place)."""
        return (self.l1_tags[core], self.l1_links[core], self.l2_tags[core],
                self.l2_stamps[core], self.l1_index[core])

    def lookup(self, core: int, addrs: npt.NDArray[np.int64]) -> TlbStats:
        """Translate byte addresses `addrs` (non-negative), in order, on `core`."""
        if not 0 <= core < self.cores:
            raise ValueError(f"core: {core} is not a core of this {self.cores}-core cluster")
        # The kernel finds each page: an array of pages would be one more pass, and fresh
        # memory whose pages fault in (a few ms for a million accesses).
        byte_addrs = np.ascontiguousarray(addrs, np.int64)
        counts = np.zeros(3, np.int64)
        self.clock = _tlb_kernel((byte_addrs, self.page_shift), self.core_tlbs(core),
                                 self.clock, counts)
        return TlbStats(int(byte_addrs.size), int(counts[0]), int(counts[1]), int(counts[2]))


def _empty_links(entries: int) -> npt.NDArray[np.int64]:
    """The L1 order of an empty TLB: [towards LRU, towards MRU] per entry and the ring's
    extra node (index `entries`); entry 0 is the least recently used, so the entries fill
    in index order."""
    ring = [entries, *range(entries - 1, -1, -1)]  # the extra node, then MRU to LRU
    links = np.empty((2, entries + 1), np.int64)
    for node, after in zip(ring, ring[1:] + ring[:1], strict=True):
        links[0, node] = after
        links[1, after] = node
    return links


@njit_inline
def _to_front(links: npt.NDArray[np.int64], way: int) -> None:
    """Make L1 entry `way` the most recently used (`links` as `Tlbs.l1_links[core]`)."""
    lru_wards, mru_wards = links[0], links[1]
    ring = lru_wards.size - 1
    if lru_wards[ring] != way:
        older, newer = lru_wards[way], mru_wards[way]
        lru_wards[newer] = older
        mru_wards[older] = newer
        front = lru_wards[ring]
        lru_wards[way] = front
        mru_wards[front] = way
        mru_wards[way] = ring
        lru_wards[ring] = way


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


L1_HIT, L2_HIT, WALK = range(3)
"""What `translate` reports for an access."""

CoreTlbs = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
                 npt.NDArray[np.int64], npt.NDArray[np.int64]]
"""One core's TLBs as `translate` takes them: L1 tags and links, L2 tags and stamps, and
the L1 index (entries and way per slot, see the module docstring)."""


@njit_inline
def translate(page: int, tlb: CoreTlbs, previous: int, clock: int) -> tuple[int, int, int]:
    """One access to `page` through one core's TLBs, by the rules of the module docstring:
    (L1_HIT, L2_HIT or WALK; the L1 way now holding the page; the advanced LRU clock).
    `previous` is the L1 way the last access used (-1 before the first): a run of accesses
    to one page (a stream through it) needs no search after the first. Inlined into every
    loop that translates, so a caller can do other per-access work in the same pass."""
    tags1, links1, tags2, stamps2, index = tlb
    held, last_way = index[0], index[1]
    clock += 1
    slot = page & (held.size - 1)
    if previous >= 0 and tags1[previous] == page:
        hit = previous
    elif held[slot] == 0:
        hit = -1
    else:
        hit = last_way[slot]
        if tags1[hit] != page:
            hit = _way_of(tags1, page)
            if hit >= 0:
                last_way[slot] = hit
    if hit >= 0:
        _to_front(links1, hit)
        return L1_HIT, hit, clock
    s = page & (tags2.shape[0] - 1)
    hit = _way_of(tags2[s], page)
    if hit >= 0:
        level = L2_HIT
        stamps2[s, hit] = clock
    else:
        level = WALK
        way = _lru_way(stamps2[s])
        tags2[s, way] = page
        stamps2[s, way] = clock
    way = links1[1, tags1.size]  # the entry just before the ring's extra node: the LRU
    if tags1[way] >= 0:
        held[tags1[way] & (held.size - 1)] -= 1
    tags1[way] = page
    _to_front(links1, way)
    held[slot] += 1
    last_way[slot] = way
    return level, way, clock


@njit_unmanaged
def _tlb_kernel(addrs: tuple[npt.NDArray[np.int64], int], tlb: CoreTlbs, clock: int,
                counts: npt.NDArray[np.int64]) -> int:
    """The pages of `addrs` = (byte addresses, log2 of the page's bytes) through one core's
    TLBs `tlb`: adds to counts = [L1 hits, L2 hits, walks]; returns the advanced LRU
    clock."""
    byte_addrs, page_shift = addrs
    previous = -1
    for i in range(byte_addrs.size):
        level, previous, clock = translate(byte_addrs[i] >> page_shift, tlb, previous, clock)
        counts[level] += 1
    return clock

"""The TLB model against a slow, obviously-correct reference."""

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.errors import ConfigError
from emu.mem.tlb import Tlbs, TlbStats
from emu.soc.config import load_config


class ReferenceTlbs:
    def __init__(self, cores, l1_entries, l2_entries, l2_ways, page_bytes):
        self.page_bytes = page_bytes
        self.l1_entries, self.l2_ways = l1_entries, l2_ways
        self.sets = l2_entries // l2_ways
        self.l1 = [OrderedDict() for _ in range(cores)]
        self.l2 = [[OrderedDict() for _ in range(self.sets)] for _ in range(cores)]

    def lookup(self, core, addrs):
        hits = [0, 0, 0]
        for addr in addrs:
            page = addr // self.page_bytes
            l1 = self.l1[core]
            if page in l1:
                l1.move_to_end(page)
                hits[0] += 1
                continue
            entries = self.l2[core][page % self.sets]
            if page in entries:
                entries.move_to_end(page)
                hits[1] += 1
            else:
                hits[2] += 1
                if len(entries) == self.l2_ways:
                    entries.popitem(last=False)
                entries[page] = True
            if len(l1) == self.l1_entries:
                l1.popitem(last=False)
            l1[page] = True
        return TlbStats(len(addrs), *hits)


def _cpu(l1, l2, ways, cores=2):
    return load_config(overrides=[f"cpu.tlb.l1_entries={l1}", f"cpu.tlb.l2_entries={l2}",
                                  f"cpu.tlb.l2_ways={ways}", f"cpu.cores={cores}"]).soc.cpu


def test_hand_case():
    tlbs = Tlbs(_cpu(2, 4, 2))
    page = 4096
    # L1 holds 2 pages; L2 2 sets x 2 ways.
    got = tlbs.lookup(0, np.array([0, 1, page, 2 * page, 0, 3 * page], np.int64))
    # 0 walk, 1 L1 hit, page walk, 2*page walk (L1 drops 0), 0 L2 hit, 3*page walk.
    assert got == TlbStats(6, 1, 1, 4)
    assert tlbs.lookup(1, np.array([0], np.int64)) == TlbStats(1, 0, 0, 1)  # per core


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([(1, 1, 1), (2, 4, 2), (4, 8, 4), (16, 64, 4), (32, 64, 2)]),
       st.lists(st.tuples(st.integers(0, 1), st.lists(st.integers(0, 40 * 4096), max_size=40)),
                max_size=6))
def test_model_matches_reference(geometry, calls):
    l1, l2, ways = geometry
    model = Tlbs(_cpu(l1, l2, ways))
    ref = ReferenceTlbs(2, l1, l2, ways, 4096)
    for core, addrs in calls:
        assert model.lookup(core, np.array(addrs, np.int64)) == ref.lookup(core, addrs)


@pytest.mark.parametrize("seed", range(6))
def test_runs_on_one_page_and_interleaved_streams_match_reference(seed):
    """Streams as the recorders make them: runs of lines on one page (the kernel's path that
    skips the search), interleaved with other streams and random pages, over several calls
    on both cores, so a run may start in one call and go on in the next."""
    rng = np.random.default_rng(seed)
    l1, l2, ways = [(1, 1, 1), (2, 4, 2), (4, 8, 4), (16, 64, 4)][seed % 4]
    model = Tlbs(_cpu(l1, l2, ways))
    ref = ReferenceTlbs(2, l1, l2, ways, 4096)
    for _ in range(8):
        streams = rng.integers(1, 4)
        starts = rng.integers(0, 60 * 4096, streams)
        length = int(rng.integers(0, 300))
        addrs = np.empty(length, np.int64)
        for i in range(length):
            k = i % streams
            if rng.random() < 0.1:
                addrs[i] = rng.integers(0, 60 * 4096)
            else:
                addrs[i] = starts[k] + 64 * (i // streams)
        core = int(rng.integers(0, 2))
        assert model.lookup(core, addrs) == ref.lookup(core, addrs.tolist())


def test_bad_geometry_and_core_are_refused():
    with pytest.raises(ConfigError, match="l2_ways"):
        _cpu(2, 8, 3)
    with pytest.raises(ValueError, match="core"):
        Tlbs(_cpu(2, 4, 2)).lookup(5, np.zeros(1, np.int64))


def test_pages_that_share_a_slot_of_the_l1_index_match_reference():
    """Pages a multiple of the index's size apart all fall in one slot of it (the model's
    shortcut then has to search), mixed with pages that have slots of their own."""
    from emu.mem.tlb import INDEX_SLOTS_PER_ENTRY

    slots = INDEX_SLOTS_PER_ENTRY * 16
    model = Tlbs(_cpu(16, 64, 4))
    ref = ReferenceTlbs(2, 16, 64, 4, 4096)
    rng = np.random.default_rng(7)
    pages = np.concatenate([np.arange(40) * slots, np.arange(40) * slots + 3,
                            rng.integers(0, 50, 40)])
    for _ in range(4):
        addrs = rng.permutation(np.repeat(pages, 2)) * 4096 + rng.integers(0, 4096, 240)
        assert model.lookup(0, addrs) == ref.lookup(0, addrs.tolist())

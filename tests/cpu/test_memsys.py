"""The write-streaming detector, the load classifier and the one pass of a work item's accesses
through the memory system against slow references."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.cpu import memsys
from emu.mem.cache import CacheHierarchy
from emu.mem.tlb import Tlbs
from tests.mem.cache_reference import ReferenceHierarchy
from tests.mem.test_cache import j5_cpu, make_cpu, snapshot
from tests.mem.test_tlb import ReferenceTlbs


def streaming_reference(lines, writes, full, threshold):
    out, run, previous = [], 0, None
    for line, write, whole in zip(lines, writes, full, strict=True):
        if not write:
            out.append(False)
            continue
        if not whole:
            run, previous = 0, None
            out.append(False)
            continue
        run = run + 1 if previous is not None and line == previous + 1 else 1
        previous = line
        out.append(run >= threshold)
    return out


def classify_reference(lines, writes, streams, outcomes, page_lines):
    counts = [0] * memsys.N_COUNTS
    last: dict[int, int] = {}
    stride: dict[int, int] = {}
    for line, write, stream, outcome in zip(lines, writes, streams, outcomes, strict=True):
        if write:
            if outcome in (2, 3, 4):
                counts[memsys.STORE_MISSES] += 1
            continue
        if outcome == 1:
            continue
        step = line - last[stream] if stream in last else 0
        previous = stride.get(stream, 0)
        covered = (step != 0 and previous != 0 and (step > 0) == (previous > 0)
                   and abs(step - previous) <= 1 and abs(step) <= page_lines)
        stride[stream], last[stream] = step, line
        if covered:
            counts[memsys.PREFETCHED_LOADS] += 1
        else:
            counts[{2: memsys.L2_LOADS, 3: memsys.L3_LOADS, 4: memsys.DDR_LOADS}[outcome]] += 1
    return counts


SHIFT = 6  # 64-byte lines


def _bytes(lines, offsets=None):
    """The kernels' (byte addresses, line shift) for `lines`, at `offsets` within each line
    (the last byte of the line when not given: the shift, not a division, finds the line)."""
    lines = np.asarray(lines, np.int64)
    offsets = np.full(lines.size, (1 << SHIFT) - 1) if offsets is None else offsets
    return (lines << SHIFT) + np.asarray(offsets, np.int64), SHIFT


def _streaming(lines, writes, full, threshold, offsets=None):
    out = np.ones(len(lines), np.bool_)  # the kernel writes every entry
    memsys.streaming_stores(_bytes(lines, offsets), np.array(writes, np.bool_),
                            np.array(full, np.bool_), threshold, out)
    return out.tolist()


def test_a_long_run_of_full_line_stores_streams_after_the_threshold():
    lines = list(range(10, 18))
    assert _streaming(lines, [True] * 8, [True] * 8, 4) == [False] * 3 + [True] * 5


def test_a_gap_or_a_partial_store_restarts_the_run_and_loads_do_not_break_it():
    lines = [1, 2, 3, 9, 10, 11, 12, 50, 13, 14]
    writes = [True] * 7 + [False] + [True] * 2
    full = [True] * 10
    assert _streaming(lines, writes, full, 3) == [False, False, True, False, False, True, True,
                                                  False, True, True]
    assert _streaming([1, 2, 3, 4], [True] * 4, [True, True, False, True], 2) == \
        [False, True, False, False]


def test_prefetcher_covers_a_constant_stride_after_two_misses():
    lines = np.array([100, 101, 102, 103, 106], np.int64)
    counts = memsys.classify(_bytes(lines), np.zeros(5, np.bool_), np.zeros(5, np.uint8),
                             np.full(5, 4, np.uint8), 64)
    # 100: first miss; 101: stride 1 seen once; 102, 103 covered; 106 breaks the stride.
    assert counts[memsys.PREFETCHED_LOADS] == 2 and counts[memsys.DDR_LOADS] == 3


def test_a_byte_stride_that_is_not_whole_lines_is_still_followed():
    lines = np.array([400 * k // 64 for k in range(10)], np.int64)  # steps of 6 or 7 lines
    counts = memsys.classify(_bytes(lines), np.zeros(10, np.bool_), np.zeros(10, np.uint8),
                             np.full(10, 4, np.uint8), 64)
    assert counts[memsys.PREFETCHED_LOADS] == 8 and counts[memsys.DDR_LOADS] == 2


def test_streams_train_separately_and_strides_beyond_a_page_are_not_covered():
    lines = np.array([0, 1000, 1, 2000, 2, 3000, 3, 4000], np.int64)
    streams = np.array([0, 1] * 4, np.uint8)
    counts = memsys.classify(_bytes(lines), np.zeros(8, np.bool_), streams, np.full(8, 3, np.uint8),
                             64)
    assert counts[memsys.PREFETCHED_LOADS] == 2 and counts[memsys.L3_LOADS] == 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.booleans(), st.booleans(), st.integers(0, 3),
                          st.integers(1, 4), st.integers(0, (1 << SHIFT) - 1)), max_size=80),
       st.integers(1, 5), st.integers(1, 8))
def test_kernels_match_the_references(accesses, threshold, page_lines):
    lines = [a[0] for a in accesses]
    writes = [a[1] for a in accesses]
    full = [a[2] for a in accesses]
    streams = [a[3] for a in accesses]
    outcomes = [a[4] for a in accesses]
    offsets = [a[5] for a in accesses]
    assert _streaming(lines, writes, full, threshold, offsets) == \
        streaming_reference(lines, writes, full, threshold)
    got = memsys.classify(_bytes(lines, offsets), np.array(writes, np.bool_),
                          np.array(streams, np.uint8), np.array(outcomes, np.uint8),
                          page_lines)
    assert got.tolist() == classify_reference(lines, writes, streams, outcomes, page_lines)


@pytest.mark.parametrize("n", [0, 1])
def test_empty_and_single_streams(n):
    assert _streaming([5] * n, [True] * n, [True] * n, 1) == [True] * n
    counts = memsys.classify(_bytes(np.full(n, 5)), np.zeros(n, np.bool_),
                             np.zeros(n, np.uint8), np.full(n, 2, np.uint8), 64)
    assert counts.tolist() == [n, 0, 0, 0, 0]


def memory_reference(cpu, caches, tlbs, core, accesses):
    """What `memsys.run` counts, from the references one after the other: the detector,
    the caches (`tests/mem/cache_reference.py`), the classifier and the TLBs
    (`tests/mem/test_tlb.py`). `accesses` = (address, write, full line, loaded, stream)."""
    addrs = [a[0] for a in accesses]
    writes = [a[1] for a in accesses]
    lines = [a // cpu.line_bytes for a in addrs]
    streaming = streaming_reference(lines, writes, [a[2] for a in accesses],
                                    cpu.write_stream_lines)
    stats, outcomes = caches.access(core, addrs, writes, streaming)
    counts = classify_reference(lines, [a[1] and not a[3] for a in accesses],
                                [a[4] for a in accesses], outcomes,
                                cpu.tlb.page_bytes // cpu.line_bytes)
    tlb = tlbs.lookup(core, addrs)
    return [*counts, stats.l1_hits, stats.l2_hits, stats.l3_hits, stats.ddr_reads,
            stats.ddr_stream_writes, stats.ddr_writebacks, tlb.l2_hits, tlb.walks]


def _small_cpu(l1_entries, threshold):
    """A cluster whose caches and TLBs fill after a few accesses, so that every eviction
    path runs: L1D 2 sets x 2 ways, L2 4 x 2, L3 4 x 4, 64-byte lines, 4 KiB pages."""
    cpu = make_cpu(cores=2, line_bytes=64, l1d=(256, 2), l2=(512, 2), l3=(1024, 4))
    return dataclasses.replace(
        cpu, write_stream_lines=threshold,
        tlb=dataclasses.replace(cpu.tlb, l1_entries=l1_entries, l2_entries=8, l2_ways=2))


def _run_both(cpu, calls):
    """Each call's accesses through `memsys.run` and through the references; the counts of
    every call and the caches' contents at the end must agree."""
    caches, tlbs = CacheHierarchy(cpu), Tlbs(cpu)
    ref_caches = ReferenceHierarchy(cpu)
    ref_tlbs = ReferenceTlbs(cpu.cores, cpu.tlb.l1_entries, cpu.tlb.l2_entries,
                             cpu.tlb.l2_ways, cpu.tlb.page_bytes)
    for core, accesses in calls:
        record = memsys.pack(np.array([a[0] for a in accesses], np.int64),
                             np.array([a[1] for a in accesses], np.bool_),
                             np.array([a[2] for a in accesses], np.bool_),
                             np.array([a[3] for a in accesses], np.bool_),
                             np.array([a[4] for a in accesses], np.uint8))
        got = memsys.run(record, core, caches, tlbs, cpu)
        assert got.tolist() == memory_reference(cpu, ref_caches, ref_tlbs, core, accesses)
    assert snapshot(caches) == ref_caches.snapshot()


# (address, write, full line, loaded, stream): a store that writes a whole line did not
# load it first (the recorders never mark both).
_ACCESS = st.tuples(st.integers(0, 40 * 4096 - 1), st.booleans(), st.booleans(),
                    st.booleans(), st.integers(0, 3)).map(
                        lambda a: (a[0], a[1], a[2], a[3] and not a[2], a[4]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.lists(_ACCESS, max_size=60)), max_size=5),
       st.sampled_from([1, 2, 4]), st.integers(1, 4))
def test_one_pass_matches_the_references_in_turn(calls, l1_entries, threshold):
    _run_both(_small_cpu(l1_entries, threshold), calls)


@pytest.mark.parametrize("seed", range(4))
def test_one_pass_matches_the_references_on_recorder_like_streams(seed):
    """Interleaved runs of lines through a few pages (loads, read-modify-writes, runs of
    full-line stores long enough to stream), and scattered accesses, on both cores."""
    rng = np.random.default_rng(seed)
    calls = []
    for _ in range(6):
        streams = int(rng.integers(1, 5))
        starts = rng.integers(0, 64 * 4096, streams) // 64 * 64
        kinds = rng.integers(0, 3, streams)  # load, read-modify-write, full-line store
        accesses = []
        for i in range(int(rng.integers(0, 400))):
            k = i % streams
            if rng.random() < 0.1:
                accesses.append((int(rng.integers(0, 64 * 4096)), bool(rng.integers(2)),
                                 False, False, int(rng.integers(4))))
            else:
                addr = int(starts[k]) + 64 * (i // streams)
                accesses.append((addr, kinds[k] > 0, kinds[k] == 2, kinds[k] == 1, k))
        calls.append((int(rng.integers(0, 2)), accesses))
    _run_both(_small_cpu(int(rng.choice([1, 2, 4])), int(rng.integers(1, 4))), calls)


def test_one_pass_on_nothing_and_on_the_j5_geometry():
    _run_both(j5_cpu(), [(0, [])])
    lines = [(64 * k, k % 3 == 0, k % 3 == 0, False, k % 2) for k in range(3000)]
    _run_both(j5_cpu(), [(0, lines), (3, lines[::-7]), (0, lines[::5])])


def test_packing_puts_each_field_in_its_place():
    record = memsys.pack(np.array([64, 129, 0], np.int64), np.array([True, True, False]),
                         np.array([True, False, False]), np.array([False, True, False]),
                         np.array([7, 255, 0], np.uint8))
    assert record.tolist() == [[64, memsys.WRITE | memsys.FULL_LINE | 7 << memsys.STREAM_SHIFT],
                               [129, memsys.WRITE | memsys.LOADED | 255 << memsys.STREAM_SHIFT],
                               [0, 0]]
    assert memsys.pack(np.array([5], np.int64)).tolist() == [[5, 0]]
    with pytest.raises(ValueError, match="negative"):
        memsys.pack(np.array([-64], np.int64))
    with pytest.raises(TypeError, match="integer"):
        memsys.pack(np.array([0.5]))

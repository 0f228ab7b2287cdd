"""The CPU kernels record the bytes they really touch, at the buffers' real layouts.

Each kernel runs on a small input with its buffers at known, far-apart addresses; the lines
it recorded for each stream must be exactly the lines of the bytes a direct reading of the
algorithm touches (computed here from the layouts, not from the kernel)."""

import numpy as np
import pytest

from emu.workloads.pointcloud import cpu_kernels as ck

LINE_SHIFT = 6
BASES = np.array([(k + 1) << 32 for k in range(7)], np.int64)


def _lines(start: int, nbytes: int) -> set[int]:
    return set(range(start >> LINE_SHIFT, ((start + nbytes - 1) >> LINE_SHIFT) + 1))


def _recorded(record: np.ndarray, stats: np.ndarray) -> dict[int, set[int]]:
    n = int(stats[ck.ENTRIES])
    out: dict[int, set[int]] = {}
    for addr, flags in record[:n]:
        out.setdefault(int(flags) >> 8, set()).add(int(addr) >> LINE_SHIFT)
    return out


@pytest.mark.parametrize("dims", [4, 5])
def test_voxelize_packed_reads_the_interleaved_stage1_records(dims):
    rng = np.random.default_rng(dims)
    n, y_len, max_pillars, max_slots = 500, 16, 40, 3
    words = 3 if dims == 5 else 2
    record_bytes = 4 * words
    cells = np.where(rng.random(n) < 0.2, -1,
                     (rng.integers(0, 16, n) << 16) | rng.integers(0, 16, n)).astype(np.int32)
    xyzr = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    t = rng.integers(0, 100, n).astype(np.int32) if dims == 5 else np.zeros(0, np.int32)
    lut = np.full(16 * y_len, -1, np.int32)
    counts = np.zeros(max_pillars, np.int32)
    coords = np.zeros((max_pillars, 4), np.int32)
    voxels = np.zeros(max_pillars * max_slots * dims, np.uint8)
    record = np.zeros((20 * n, 2), np.int64)
    stats = np.zeros(ck.N_STATS, np.int64)
    bases = BASES.copy()
    bases[1], bases[2] = bases[0] + 4, bases[0] + 8  # fields of one interleaved record
    ck.voxelize_packed(ck.Packed(cells, xyzr, t, record_bytes), dims,
                       ck.Grid(16, y_len, max_pillars, max_slots, True),
                       ck.Tables(lut, counts, coords), voxels,
                       ck.Trace(bases, record, stats, LINE_SHIFT))
    got = _recorded(record, stats)

    # The same walk, read from the algorithm: which points are kept, at which record.
    want: dict[int, set[int]] = {k: set() for k in range(7)}
    table: dict[int, int] = {}
    filled = [0] * max_pillars
    for i, cell in enumerate(cells.tolist()):
        want[0] |= _lines(bases[0] + record_bytes * i, 4)
        if cell < 0:
            continue
        index = (cell & 0xFFFF) * y_len + (cell >> 16)
        want[3] |= _lines(bases[3] + 4 * index, 4)
        if index not in table:
            table[index] = min(len(table), max_pillars - 1)
            want[5] |= _lines(bases[5] + 16 * table[index], 16)
        pillar = table[index]
        want[4] |= _lines(bases[4] + 4 * pillar, 4)
        if filled[pillar] >= max_slots:
            continue
        out = filled[pillar] * max_pillars + pillar
        filled[pillar] += 1
        want[1] |= _lines(bases[1] + record_bytes * i, 4)
        if dims == 5:
            want[2] |= _lines(bases[2] + record_bytes * i, 4)
        want[6] |= _lines(bases[6] + out * dims, dims)
    assert got == {k: v for k, v in want.items() if v}


def test_voxelize_floats_reads_whole_points_and_writes_whole_records():
    rng = np.random.default_rng(3)
    n, dims, max_pillars, max_slots, x_len = 300, 5, 30, 4, 16
    cells = np.where(rng.random(n) < 0.3, -1,
                     (rng.integers(0, 8, n) << 16) | rng.integers(0, 16, n)).astype(np.int32)
    points = rng.standard_normal((n, dims)).astype(np.float32)
    lut = np.full(16 * x_len, -1, np.int32)
    counts = np.zeros(max_pillars, np.int32)
    coords = np.zeros((max_pillars, 4), np.int32)
    voxels = np.zeros(max_pillars * max_slots * dims, np.float32)
    record = np.zeros((20 * n, 2), np.int64)
    stats = np.zeros(ck.N_STATS, np.int64)
    params = np.zeros(11, np.float32)
    ck.voxelize_floats(points, cells, params, ck.Grid(x_len, 16, max_pillars, max_slots, True),
                       ck.Tables(lut, counts, coords), voxels,
                       ck.Trace(BASES, record, stats, LINE_SHIFT))
    got = _recorded(record, stats)
    want0: set[int] = set()
    want5: set[int] = set()
    table: dict[int, int] = {}
    filled = [0] * max_pillars
    for i, cell in enumerate(cells.tolist()):
        if cell < 0:
            continue
        index = (cell >> 16) * x_len + (cell & 0xFFFF)
        if index not in table:
            table[index] = min(len(table), max_pillars - 1)
        pillar = table[index]
        if filled[pillar] >= max_slots:
            continue
        out = (filled[pillar] * max_pillars + pillar) * dims
        filled[pillar] += 1
        want0 |= _lines(BASES[0] + 4 * dims * i, 4 * dims)
        want5 |= _lines(BASES[5] + 4 * out, 4 * dims)
    assert got[1] == _lines(BASES[1], 4 * n)  # every cell, densely
    assert got[0] == want0 and got[5] == want5

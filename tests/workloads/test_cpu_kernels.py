"""The point-cloud CPU kernels against their literal reference (`cpu_kernels_reference`).

Every kernel runs on fixed, random and edge inputs next to the reference, on copies of the
same arrays; they must agree on everything: the result, every array the step writes, every
record entry and every count in `stats` (instructions by class, mispredicts, merged, entries,
overflow). The inputs cover both feature orders, 4 and 5 values a point, points out of range,
NaN and infinities, cells past the pillar budget and pillars past K, records already holding
entries, records too small (overflow), unaligned buffers and 16-byte lines (a coords row
over two lines).
"""

import numpy as np
import pytest

from emu.workloads.pointcloud import cpu_kernels as ck
from tests.workloads import cpu_kernels_reference as ref

PARAMS = np.array([-4.0, 4.0, -4.0, 4.0, -2.0, 2.0, 0.0, 255.0, 0.5, 0.5, 1 / 128],
                  np.float32)
X_LEN = Y_LEN = 16


def _bases(count, rng):
    """Far-apart buffers, some not on a line boundary."""
    return np.array([((k + 1) << 32) + 4 * int(rng.integers(0, 8)) for k in range(count)],
                    np.int64)


def _trace(bases, capacity, line_shift, rng, used=0):
    record = np.zeros((capacity, 2), np.int64)
    stats = np.zeros(ck.N_STATS, np.int64)
    if used:  # an earlier kernel's entries and counts
        record[:used] = rng.integers(0, 1000, (used, 2))
        stats[:] = rng.integers(0, 50, ck.N_STATS)
        stats[ck.ENTRIES] = used
    return record, stats


def _copy(value):
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return type(value)(*map(_copy, value)) if hasattr(value, "_fields") else tuple(
            map(_copy, value))
    return value


def _flat(value):
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, tuple):
        return [a for v in value for a in _flat(v)]
    return [np.asarray(value)]


def _agree(kernel, reference, args, record, stats):
    """Run both on copies of `args`; compare results, arrays, used records and stats."""
    got_args, want_args = _copy(args), _copy(args)
    got = kernel(*got_args)
    want = reference(*want_args)
    assert got == want
    got_arrays, want_arrays = _flat(got_args), _flat(want_args)
    for g, w in zip(got_arrays, want_arrays, strict=True):
        if g.shape == record.shape and g.ndim == 2 and g.shape[1] == 2 and g.dtype == np.int64:
            continue  # the record: only its used entries mean anything
        assert np.array_equal(g, w, equal_nan=g.dtype.kind == "f")
    got_stats = next(a for a in got_arrays if a.shape == stats.shape and a.dtype == np.int64)
    want_stats = next(a for a in want_arrays if a.shape == stats.shape and a.dtype == np.int64)
    assert got_stats.tolist() == want_stats.tolist()
    n = int(want_stats[ck.ENTRIES])
    got_record = next(a for a in got_arrays if a.shape == record.shape and a.ndim == 2)
    want_record = next(a for a in want_arrays if a.shape == record.shape and a.ndim == 2)
    assert got_record[:n].tolist() == want_record[:n].tolist()
    return want_stats


def _points(rng, n, dims, specials):
    pts = rng.uniform(-5, 5, (n, dims)).astype(np.float32)
    pts[:, 2] = rng.uniform(-2.5, 2.5, n)
    pts[: n // 3, :2] = rng.choice(np.float32([-0.9, 0.1, 1.3]), (n // 3, 2))  # crowded cells
    if specials:
        rows = rng.integers(0, n, 12)
        pts[rows, rng.integers(0, dims, 12)] = rng.choice(
            np.float32([np.nan, np.inf, -np.inf, 4.0, -4.0]), 12)
    return pts


CASES = [  # (seed, dims, slot_major, max_pillars, max_slots, line_shift, record room, used)
    (0, 5, True, 40, 4, 6, 20, 0),
    (1, 4, False, 12, 3, 6, 20, 5),
    (2, 5, False, 200, 50, 4, 20, 0),
    (3, 4, True, 1, 1, 6, 20, 3),
    (4, 5, True, 30, 2, 6, 1, 0),  # a record too small: accesses overflow
    (5, 4, True, 8, 6, 4, 20, 0),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("from_dsp", [False, True])
def test_voxelize_floats_equals_the_reference(case, from_dsp):
    seed, dims, slot_major, pillars, slots, shift, room, used = case
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 600))
    points = _points(rng, n, dims, specials=seed % 2 == 0)
    cells = (np.where(rng.random(n) < 0.25, -1, (rng.integers(0, Y_LEN, n) << 16)
                      | rng.integers(0, X_LEN, n)).astype(np.int32) if from_dsp
             else np.zeros(0, np.int32))
    tables = ck.Tables(np.full(X_LEN * Y_LEN, -1, np.int32), np.zeros(pillars, np.int32),
                       np.zeros((pillars, 4), np.int32))
    voxels = np.full(pillars * slots * dims, np.nan, np.float32)
    bases = _bases(6, rng)
    record, stats = _trace(bases, room * n // 4 + used, shift, rng, used)
    args = (points, cells, PARAMS, ck.Grid(X_LEN, Y_LEN, pillars, slots, slot_major), tables,
            voxels, ck.Trace(bases, record, stats, shift))
    out = _agree(ck.voxelize_floats, ref.voxelize_floats, args, record, stats)
    assert (out[ck.OVERFLOW] > stats[ck.OVERFLOW]) == (room == 1)


@pytest.mark.parametrize("case", CASES)
def test_voxelize_packed_equals_the_reference(case):
    seed, dims, slot_major, pillars, slots, shift, room, used = case
    rng = np.random.default_rng(seed + 10)
    n = int(rng.integers(200, 600))
    words = 3 if dims == 5 else 2
    cells = np.where(rng.random(n) < 0.25, -1, (rng.integers(0, X_LEN, n) << 16)
                     | rng.integers(0, Y_LEN, n)).astype(np.int32)
    cells[: n // 3] = cells[0] if cells[0] >= 0 else 0  # a crowded cell
    xyzr = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    t = rng.integers(-300, 300, n).astype(np.int32) if dims == 5 else np.zeros(0, np.int32)
    tables = ck.Tables(np.full(X_LEN * Y_LEN, -1, np.int32), np.zeros(pillars, np.int32),
                       np.zeros((pillars, 4), np.int32))
    voxels = np.zeros(pillars * slots * dims, np.uint8)
    bases = _bases(7, rng)
    bases[1], bases[2] = bases[0] + 4, bases[0] + 8
    record, stats = _trace(bases, room * n // 4 + used, shift, rng, used)
    args = (ck.Packed(cells, xyzr, t, 4 * words), dims,
            ck.Grid(X_LEN, Y_LEN, pillars, slots, slot_major), tables, voxels,
            ck.Trace(bases, record, stats, shift))
    _agree(ck.voxelize_packed, ref.voxelize_packed, args, record, stats)


@pytest.mark.parametrize("case", CASES)
def test_transpose_quantize_and_encode_equal_the_reference(case):
    seed, dims, slot_major, pillars, slots, shift, room, used = case
    rng = np.random.default_rng(seed + 20)
    voxels = rng.normal(0, 120, (pillars, slots, dims)).astype(np.float32)
    voxels.reshape(-1)[rng.integers(0, voxels.size, 10)] = rng.choice(
        np.float32([np.nan, np.inf, -np.inf, 127.5, -128.5, 126.5, 0.5]), 10)
    in_use = int(rng.integers(0, pillars + 1)) if seed else pillars
    features = np.zeros(pillars * slots * dims, np.int8)
    bases = _bases(2, rng)
    capacity = room * dims * slots * max(in_use, 1) // 10 + used
    record, stats = _trace(bases, capacity, shift, rng, used)
    _agree(ck.transpose_quantize, ref.transpose_quantize,
           (voxels, in_use, slot_major, features, bases, record, stats, shift), record, stats)
    counts = rng.integers(0, slots + 1, pillars).astype(np.int32)
    record, stats = _trace(bases, capacity, shift, rng, used)
    _agree(ck.encode_in_place, ref.encode_in_place,
           (voxels, counts, in_use, PARAMS, bases, record, stats, shift), record, stats)


@pytest.mark.parametrize("clear_lut", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_reset_used_equals_the_reference(clear_lut, seed):
    rng = np.random.default_rng(seed + 30)
    pillars = int(rng.integers(1, 60))
    used = int(rng.integers(0, pillars + 1))
    coords = np.zeros((pillars, 4), np.int32)
    coords[:, 2] = rng.integers(0, Y_LEN, pillars)
    coords[:, 3] = rng.integers(0, X_LEN, pillars)
    tables = ck.Tables(rng.integers(-1, pillars, X_LEN * Y_LEN).astype(np.int32),
                       rng.integers(0, 5, pillars).astype(np.int32), coords)
    bases = _bases(3, rng)
    record, stats = _trace(bases, 4 * pillars + 8, 6 if seed else 4, rng, seed)
    _agree(ck.reset_used, ref.reset_used,
           (used, X_LEN, 1, tables, ck.Trace(bases, record, stats, 6 if seed else 4),
            clear_lut), record, stats)

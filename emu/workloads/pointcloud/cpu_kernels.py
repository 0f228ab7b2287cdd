"""The A55 side of pillar preprocessing: numba kernels that compute and record their work.

Every kernel computes its step exactly (spec §3, float32 as C `float`) and records what the
CPU did: op counts (plain ops and float divisions) and the memory accesses in program order,
as cache lines. Consecutive accesses of one array to the line it touched last are merged
into the first (a repeated access to the line just used is an L1 hit on any cache) and
counted in `stats[MERGED]`, so the cache model sees every distinct line visit in order while
the stream stays about one entry per point, not one per byte.

The kernels take the model parameters as the float32 array of `PillarParams.f32()`.
"""

from __future__ import annotations

import numpy as np

from emu.jit import njit, njit_inline
from emu.vdsp.ops.pointcloud_kernels import (
    BACK,
    BOTTOM,
    FRONT,
    LEFT,
    LOWER,
    RIGHT,
    SCALE,
    TOP,
    UPPER,
    XS,
    YS,
)

# Indices of the `stats` array every kernel fills. OVERFLOW counts accesses that found the
# stream buffer full (always 0 unless a caller sized it too small; checked after the kernel,
# as a raise inside the hot loops would slow every kernel down).
OPS, FDIVS, MERGED, ENTRIES, OVERFLOW = range(5)
N_STATS = 5


@njit_inline
def _touch(stream_addrs, stream_writes, last, stats, array_id, byte_addr, write, line_shift):
    """Record an access of array `array_id` at `byte_addr`."""
    line = byte_addr >> line_shift
    if last[array_id, 0] == line:
        if write:
            stream_writes[last[array_id, 1]] = True
        stats[MERGED] += 1
        return
    n = stats[ENTRIES]
    if n >= stream_addrs.size:
        stats[OVERFLOW] += 1
        return
    stream_addrs[n] = line << line_shift
    stream_writes[n] = write
    last[array_id, 0] = line
    last[array_id, 1] = n
    stats[ENTRIES] = n + 1


@njit_inline
def cell_of(x, y, z, p, x_len, y_len):
    """(idx, idy) of a point, or (-1, -1) if it is invalid (spec §3 steps 1-2)."""
    if not (p[BACK] < x and x < p[FRONT] and p[RIGHT] < y and y < p[LEFT]
            and p[BOTTOM] < z and z < p[TOP]):
        return -1, -1
    idx = int((x - p[BACK]) / p[XS])
    idy = int((y - p[RIGHT]) / p[YS])
    if idx >= x_len or idy >= y_len:
        return -1, -1
    return idx, idy


@njit_inline
def quantize_value(v):
    """round half to even, clamp to int8; NaN gives 0 (the DSP conversion's rule)."""
    if v != v:
        return 0
    r = np.rint(v)
    if r < -128.0:
        return -128
    if r > 127.0:
        return 127
    return int(r)


@njit_inline
def encode_value(v, dim, p):
    """Spec §3 step 5 for dimension `dim` of a kept point, in float32."""
    if dim == 0:
        return ((v - p[BACK]) / (p[FRONT] - p[BACK])) / p[SCALE]
    if dim == 1:
        return ((v - p[RIGHT]) / (p[LEFT] - p[RIGHT])) / p[SCALE]
    if dim == 2:
        return ((v - p[BOTTOM]) / (p[TOP] - p[BOTTOM])) / p[SCALE]
    if dim == 3:
        return ((v - p[LOWER]) / (p[UPPER] - p[LOWER])) / p[SCALE]
    return v / p[SCALE]


@njit_inline
def assign_pillar(idx, idy, lut, lut_index, coords, state, max_pillars):
    """Spec §3 step 3: the pillar of cell (idx, idy); `state[0]` counts pillars used.
    Returns (pillar, new) where `new` says the cell was seen for the first time."""
    pillar = lut[lut_index]
    if pillar >= 0:
        return pillar, False
    if state[0] < max_pillars:
        pillar = state[0]
        state[0] += 1
    else:
        pillar = max_pillars - 1
    lut[lut_index] = pillar
    coords[pillar, 0] = 0
    coords[pillar, 1] = 0
    coords[pillar, 2] = idy
    coords[pillar, 3] = idx
    return pillar, True


@njit_inline
def _take_slot(idx, idy, lut_index, lut, coords, counts, state, max_pillars, max_slots, where,
               stream_addrs, stream_writes, last, stats, line_shift):
    """Steps 3-4 for a valid point, recording the table accesses: (pillar, slot), with
    slot -1 when the pillar is full.

    `where` = ((array id, base address) of the lut, coords and counts). The arrays come one
    by one, not in tuples: numba copies a tuple argument of an inlined helper on every call,
    with a reference-count update for each array in it, which would cost more than the step.
    """
    (lut_id, lut_base), (coords_id, coords_base), (counts_id, counts_base) = where
    _touch(stream_addrs, stream_writes, last, stats, lut_id, lut_base + 4 * lut_index, False,
           line_shift)
    pillar, new = assign_pillar(idx, idy, lut, lut_index, coords, state, max_pillars)
    stats[OPS] += 6
    if new:
        _touch(stream_addrs, stream_writes, last, stats, lut_id, lut_base + 4 * lut_index,
               True, line_shift)
        _touch(stream_addrs, stream_writes, last, stats, coords_id, coords_base + 16 * pillar,
               True, line_shift)
        stats[OPS] += 6
    _touch(stream_addrs, stream_writes, last, stats, counts_id, counts_base + 4 * pillar,
           False, line_shift)
    slot = counts[pillar]
    if slot >= max_slots:
        return pillar, -1
    counts[pillar] = slot + 1
    _touch(stream_addrs, stream_writes, last, stats, counts_id, counts_base + 4 * pillar, True,
           line_shift)
    return pillar, slot


@njit
def voxelize_floats(points, cells, p, x_len, y_len, max_pillars, max_slots, slot_major, voxels,
                    counts, lut, coords, bases, stream_addrs, stream_writes, stats, line_shift):
    """Steps 1-4 with the raw float values of kept points in `voxels` (flat float32, `dims`
    per record). The CPU reference (`cells` empty: the CPU computes the cells) keeps record
    (pillar * K + slot); scheme 1 (`cells` from the DSP: idy << 16 | idx, or -1) keeps the
    record of the final feature position, (slot * P + pillar) when `slot_major`.
    Returns (pillars used, valid, kept).

    `bases` = byte addresses of [points, cells, lut, counts, coords, voxels] for the stream.
    """
    n, dims = points.shape
    last = np.full((6, 2), -1, np.int64)
    state = np.zeros(1, np.int64)
    where = ((2, bases[2]), (4, bases[4]), (3, bases[3]))
    valid = 0
    kept = 0
    for i in range(n):
        if cells.size:
            _touch(stream_addrs, stream_writes, last, stats, 1, bases[1] + 4 * i, False,
                   line_shift)
            cell = cells[i]
            stats[OPS] += 3
            if cell < 0:
                continue
            idx = cell & 0xFFFF
            idy = cell >> 16
        else:
            _touch(stream_addrs, stream_writes, last, stats, 0, bases[0] + 4 * dims * i, False,
                   line_shift)
            idx, idy = cell_of(points[i, 0], points[i, 1], points[i, 2], p, x_len, y_len)
            stats[OPS] += 12
            if idx < 0:
                continue
            stats[FDIVS] += 2
        valid += 1
        pillar, slot = _take_slot(idx, idy, idy * x_len + idx, lut, coords, counts, state,
                                  max_pillars, max_slots, where, stream_addrs, stream_writes,
                                  last, stats, line_shift)
        if slot < 0:
            continue
        if cells.size:
            _touch(stream_addrs, stream_writes, last, stats, 0, bases[0] + 4 * dims * i, False,
                   line_shift)
        if slot_major and cells.size:
            record = (slot * max_pillars + pillar) * dims
        else:
            record = (pillar * max_slots + slot) * dims
        for d in range(dims):
            voxels[record + d] = points[i, d]
        _touch(stream_addrs, stream_writes, last, stats, 5, bases[5] + 4 * record, True,
               line_shift)
        _touch(stream_addrs, stream_writes, last, stats, 5, bases[5] + 4 * (record + dims - 1),
               True, line_shift)
        stats[OPS] += 6 + 2 * dims
        kept += 1
    return state[0], valid, kept


@njit
def encode_in_place(voxels, counts, used, p, bases, stream_addrs, stream_writes, stats,
                    line_shift):
    """The reference's encode-and-quantise-scale step: every filled slot's values become
    encoded floats (`voxels` is updated in place). `bases` = [counts, voxels]."""
    _, max_slots, dims = voxels.shape
    last = np.full((2, 2), -1, np.int64)
    for pillar in range(used):
        _touch(stream_addrs, stream_writes, last, stats, 0, bases[0] + 4 * pillar, False,
               line_shift)
        filled = counts[pillar]
        for slot in range(filled):
            record = (pillar * max_slots + slot) * dims
            for d in range(dims):
                voxels[pillar, slot, d] = encode_value(voxels[pillar, slot, d], d, p)
            _touch(stream_addrs, stream_writes, last, stats, 1, bases[1] + 4 * record, True,
                   line_shift)
            _touch(stream_addrs, stream_writes, last, stats, 1,
                   bases[1] + 4 * (record + dims - 1), True, line_shift)
            stats[OPS] += 4 + 4 * dims
            stats[FDIVS] += 2 * dims - 1
        stats[OPS] += 3 * (max_slots - filled) + 4


@njit
def transpose_quantize(voxels, used, slot_major, features, bases, stream_addrs, stream_writes,
                       stats, line_shift):
    """The reference's transpose: features[c, s, n] (or [c, n, s]) = quantised voxels[n, s, c]
    for every slot of the used pillars, read with the large stride of the voxel buffer.
    `features` is the flat output, zero where no pillar is. `bases` = [voxels, features]."""
    max_pillars_slots = features.size // voxels.shape[2]
    _, max_slots, dims = voxels.shape
    max_pillars = max_pillars_slots // max_slots
    last = np.full((2, 2), -1, np.int64)
    for c in range(dims):
        for s in range(max_slots):
            for n in range(used):
                old = (n * max_slots + s) * dims + c
                if slot_major:
                    new = (c * max_slots + s) * max_pillars + n
                else:
                    new = (c * max_pillars + n) * max_slots + s
                features[new] = quantize_value(voxels[n, s, c])
                _touch(stream_addrs, stream_writes, last, stats, 0, bases[0] + 4 * old, False,
                       line_shift)
                _touch(stream_addrs, stream_writes, last, stats, 1, bases[1] + new, True,
                       line_shift)
                stats[OPS] += 8


@njit
def memset_stream(start, nbytes, stream_addrs, stream_writes, stats, line_shift, vector_bytes):
    """A memset of [start, start + nbytes): one store per `vector_bytes`, one entry per line."""
    line = 1 << line_shift
    first = start >> line_shift << line_shift
    if stats[ENTRIES] + (start + nbytes - first + line - 1) // line > stream_addrs.size:
        raise IndexError("the work stream buffer is too small for this memset")
    for addr in range(first, start + nbytes, line):
        n = stats[ENTRIES]
        stream_addrs[n] = addr
        stream_writes[n] = True
        stats[ENTRIES] = n + 1
    stores = (nbytes + vector_bytes - 1) // vector_bytes
    stats[OPS] += stores
    stats[MERGED] += max(0, stores - (start + nbytes - first + line - 1) // line)


@njit
def voxelize_packed(cells, xyzr, t, y_len, max_pillars, max_slots, dims, slot_major, lut,
                    counts, coords, voxels, bases, stream_addrs, stream_writes, stats,
                    line_shift):
    """Scheme 2's CPU voxelisation: steps 3-4 on the DSP's packed results. `voxels` is the
    uint8 AoS buffer by final feature position: record (s * P + n) for [c, s, n] models, or
    (n * K + s) for [c, n, s] models, `dims` bytes each (x, y, z, r[, t]).
    `bases` = [cells, xyzr, t, lut, counts, coords, voxels]. Returns (pillars, valid, kept).
    """
    n_points = cells.size
    last = np.full((7, 2), -1, np.int64)
    state = np.zeros(1, np.int64)
    where = ((3, bases[3]), (5, bases[5]), (4, bases[4]))
    valid = 0
    kept = 0
    for i in range(n_points):
        _touch(stream_addrs, stream_writes, last, stats, 0, bases[0] + 4 * i, False,
               line_shift)
        cell = cells[i]
        stats[OPS] += 3
        if cell < 0:
            continue
        valid += 1
        idx = cell & 0xFFFF
        idy = cell >> 16
        # The 2-D table is indexed [idx][idy].
        pillar, slot = _take_slot(idx, idy, idx * y_len + idy, lut, coords, counts, state,
                                  max_pillars, max_slots, where, stream_addrs, stream_writes,
                                  last, stats, line_shift)
        if slot < 0:
            continue
        if slot_major:
            record = slot * max_pillars + pillar
        else:
            record = pillar * max_slots + slot
        word = xyzr[i]
        for b in range(4):
            voxels[record * dims + b] = (word >> (8 * b)) & 0xFF
        _touch(stream_addrs, stream_writes, last, stats, 1, bases[1] + 4 * i, False,
               line_shift)
        if dims == 5:
            voxels[record * dims + 4] = t[i] & 0xFF
            _touch(stream_addrs, stream_writes, last, stats, 2, bases[2] + 4 * i, False,
                   line_shift)
        _touch(stream_addrs, stream_writes, last, stats, 6, bases[6] + record * dims, True,
               line_shift)
        stats[OPS] += 8
        kept += 1
    return state[0], valid, kept

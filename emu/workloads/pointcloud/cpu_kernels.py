"""The A55 side of pillar preprocessing: numba kernels that compute and record their work.

Every kernel computes its step exactly (spec §3, float32 as C `float`) and records what the
CPU did: its instructions by class (`emu.cpu.ops`; each kernel's docstring derives its
counts from the algorithm's operations), its data-dependent branches through a 2-bit
predictor per branch site, and its memory accesses in program order at their real byte
addresses, as cache lines, each with its stream id (one per array and direction, what the
prefetcher tells apart) and, for runs of stores, whether it writes the whole line.
Consecutive accesses of one stream to the line it touched last are merged into the first (a
repeated access to the line just used is an L1 hit on any cache) and counted in
`stats[MERGED]`, so the cache model sees every distinct line visit in order while the record
stays about one entry per point, not one per byte.

The kernels take the model parameters as the float32 array of `PillarParams.f32()`, and
the grid, the pillar tables and the record as the NamedTuples below.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from emu.cpu import ops as op
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

# The `stats` array every kernel fills: the instruction counts by class (`emu.cpu.ops`),
# then MERGED (accesses folded into the previous entry of their stream), ENTRIES (entries
# recorded) and OVERFLOW (accesses that found the buffer full: always 0 unless a caller sized
# it too small; checked after the kernel, as a raise inside the hot loops would slow every
# kernel down).
MERGED, ENTRIES, OVERFLOW = op.N_CLASSES, op.N_CLASSES + 1, op.N_CLASSES + 2
N_STATS = op.N_CLASSES + 3

# An entry of the access record: [line address, flags]; flags = WRITE | FULL_LINE | LOADED |
# id << 8. LOADED: the entry began with a load, so a store merged into it makes a
# read-modify-write of the line, which stalls for the line as the load does.
WRITE, FULL_LINE, LOADED = 1, 2, 4
# Branch sites of the 2-bit predictor a kernel keeps (one counter per data-dependent branch).
N_SITES = 8


class Grid(NamedTuple):
    """The model's grid of `x_len` x `y_len` cells and its features: `max_pillars` pillars
    (P) of `max_slots` points (K), in [c, s, n] order when `slot_major`, else [c, n, s]."""

    x_len: int
    y_len: int
    max_pillars: int
    max_slots: int
    slot_major: bool


class Tables(NamedTuple):
    """The pillar tables voxelisation fills: the cell-to-pillar table `lut` (int32, -1 for
    a new cell), the points-per-pillar `counts` (int32) and the pillars' `coords` (int32
    rows of (0, 0, idy, idx))."""

    lut: npt.NDArray[np.int32]
    counts: npt.NDArray[np.int32]
    coords: npt.NDArray[np.int32]


class Trace(NamedTuple):
    """Where a kernel records its work: the byte addresses of its arrays (`bases`, in the
    order its docstring gives), the access record and the `stats` (see above), and log2 of
    the cache line's bytes."""

    bases: npt.NDArray[np.int64]
    record: npt.NDArray[np.int64]
    stats: npt.NDArray[np.int64]
    line_shift: int


class Packed(NamedTuple):
    """Scheme 2's stage-1 results per point: its cell (idy << 16 | idx, or -1), its packed
    x, y, z, r bytes, its quantised t (empty for 4 dims), and the bytes between one point's
    record and the next in the DSP's interleaved output."""

    cells: npt.NDArray[np.int32]
    xyzr: npt.NDArray[np.int32]
    t: npt.NDArray[np.int32]
    record_bytes: int


@njit_inline
def _count(stats, ints, loads, stores, fp, fcvt, fdiv):
    stats[op.INT] += ints
    stats[op.LOAD] += loads
    stats[op.STORE] += stores
    stats[op.FP] += fp
    stats[op.FCVT] += fcvt
    stats[op.FDIV] += fdiv


@njit_inline
def _branch(stats, predictor, site, taken):
    """A conditional branch at `site`; a 2-bit saturating counter predicts it."""
    stats[op.BRANCH] += 1
    state = predictor[site]
    if (state >= 2) != taken:
        stats[op.MISPREDICT] += 1
    if taken:
        predictor[site] = min(state + 1, 3)
    else:
        predictor[site] = max(state - 1, 0)
    return taken


@njit_inline
def _touch(record, last, stats, stream, byte_addr, write, line_shift):
    """Record an access of stream `stream` (one array's loads or stores) at `byte_addr`."""
    line = byte_addr >> line_shift
    if last[stream, 0] == line:
        if write:
            record[last[stream, 1], 1] |= WRITE
        stats[MERGED] += 1
        return
    n = stats[ENTRIES]
    if n >= record.shape[0]:
        stats[OVERFLOW] += 1
        return
    record[n, 0] = line << line_shift
    record[n, 1] = (stream << 8) | (WRITE if write else LOADED)
    last[stream, 0] = line
    last[stream, 1] = n
    stats[ENTRIES] = n + 1


@njit_inline
def _touch_bytes(record, last, stats, stream, byte_addr, nbytes, write, line_shift):
    """Record an access of `nbytes` at `byte_addr`: every line it overlaps."""
    first = byte_addr >> line_shift
    for line in range(first, ((byte_addr + nbytes - 1) >> line_shift) + 1):
        _touch(record, last, stats, stream, max(byte_addr, line << line_shift), write,
               line_shift)


@njit_inline
def in_range(x, y, z, p):
    """Spec §3 step 1: whether a point lies strictly inside the model's range (NaN: no)."""
    return (p[BACK] < x and x < p[FRONT] and p[RIGHT] < y and y < p[LEFT]
            and p[BOTTOM] < z and z < p[TOP])


@njit_inline
def cell_of(x, y, p, x_len, y_len):
    """Spec §3 step 2 for a point in range: (idx, idy), or (-1, -1) past the grid."""
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
def _take_slot(cell, tables, state, grid, where, trace, last, predictor):
    """Steps 3-4 for a valid point, recording its work: (pillar, slot), with slot -1 when the
    pillar is full. `cell` = (idx, idy, index in the lut).

    `where` = ((stream id, base address) of the lut, coords and counts).

    Work: load the table entry, test it (a data-dependent branch: is the cell new?); for a
    new cell test the pillar budget (1 ALU op, a branch), bump the pillar count (1 ALU op),
    store the entry and the four coords words (5 stores; coords' two zero words as one
    64-bit store: 4 stores); then load the points-per-pillar count, compare it with K (1 ALU
    op, a branch), and store it incremented (1 ALU op, 1 store).
    """
    idx, idy, lut_index = cell
    lut, counts, coords = tables
    max_pillars, max_slots = grid.max_pillars, grid.max_slots
    record, stats, line_shift = trace.record, trace.stats, trace.line_shift
    (lut_id, lut_base), (coords_id, coords_base), (counts_id, counts_base) = where
    _touch(record, last, stats, lut_id, lut_base + 4 * lut_index, False, line_shift)
    pillar, new = assign_pillar(idx, idy, lut, lut_index, coords, state, max_pillars)
    _count(stats, 0, 1, 0, 0, 0, 0)
    if _branch(stats, predictor, 2, new):
        _branch(stats, predictor, 3, state[0] < max_pillars)
        _count(stats, 2, 0, 4, 0, 0, 0)
        _touch(record, last, stats, lut_id, lut_base + 4 * lut_index, True, line_shift)
        _touch_bytes(record, last, stats, coords_id, coords_base + 16 * pillar, 16, True,
                     line_shift)
    _touch(record, last, stats, counts_id, counts_base + 4 * pillar, False, line_shift)
    slot = counts[pillar]
    _count(stats, 1, 1, 0, 0, 0, 0)
    if _branch(stats, predictor, 4, slot >= max_slots):
        return pillar, -1
    counts[pillar] = slot + 1
    _count(stats, 1, 0, 1, 0, 0, 0)
    _touch(record, last, stats, counts_id, counts_base + 4 * pillar, True, line_shift)
    return pillar, slot


@njit
def voxelize_floats(points, cells, p, grid, tables, voxels, trace):
    """Steps 1-4 with the raw float values of kept points in `voxels` (flat float32, `dims`
    per record). The CPU reference (`cells` empty: the CPU computes the cells) keeps record
    (pillar * K + slot); scheme 1 (`cells` from the DSP: idy << 16 | idx, or -1) keeps the
    record of the final feature position, (slot * P + pillar) when `slot_major`.
    Returns (pillars used, valid, kept).

    `trace.bases` = byte addresses of [points, cells, lut, counts, coords, voxels].

    Work per point: the loop (1 ALU op, a predictable branch). Computing the cell (reference):
    load x, y, z (3 loads), six range compares (6 FP) folded into one data-dependent branch,
    then for a point in range two subtractions (2 FP), two divisions, two conversions to int
    (2 FCVT), the grid-bounds test (2 ALU ops, a branch) and the table index (2 ALU ops).
    Taking the cell from the DSP (scheme 1): load it (1 load), test it (a branch), split it
    (2 ALU ops), the table index (2 ALU ops). Keeping the point: the record index (2 ALU ops),
    loads of the values not yet in registers (all dims with a DSP cell, dims - 3 otherwise),
    one store per value, one ALU op for the kept count.
    """
    x_len, y_len, max_pillars, max_slots, slot_major = grid
    bases, record, stats, line_shift = trace
    n, dims = points.shape
    last = np.full((6, 2), -1, np.int64)
    state = np.zeros(1, np.int64)
    predictor = np.zeros(N_SITES, np.int64)
    where = ((2, bases[2]), (4, bases[4]), (3, bases[3]))
    valid = 0
    kept = 0
    for i in range(n):
        _branch(stats, predictor, 7, True)
        _count(stats, 1, 0, 0, 0, 0, 0)
        if cells.size:
            _touch(record, last, stats, 1, bases[1] + 4 * i, False, line_shift)
            cell = cells[i]
            _count(stats, 0, 1, 0, 0, 0, 0)
            if _branch(stats, predictor, 0, cell < 0):
                continue
            idx = cell & 0xFFFF
            idy = cell >> 16
            _count(stats, 4, 0, 0, 0, 0, 0)
        else:
            _touch_bytes(record, last, stats, 0, bases[0] + 4 * dims * i, 12, False,
                         line_shift)
            _count(stats, 0, 3, 0, 6, 0, 0)
            if _branch(stats, predictor, 0,
                       not in_range(points[i, 0], points[i, 1], points[i, 2], p)):
                continue
            idx, idy = cell_of(points[i, 0], points[i, 1], p, x_len, y_len)
            _count(stats, 4, 0, 0, 2, 2, 2)
            if _branch(stats, predictor, 1, idx < 0):
                continue
        valid += 1
        pillar, slot = _take_slot((idx, idy, idy * x_len + idx), tables, state, grid, where,
                                  trace, last, predictor)
        if slot < 0:
            continue
        if slot_major and cells.size:
            out = (slot * max_pillars + pillar) * dims
        else:
            out = (pillar * max_slots + slot) * dims
        for d in range(dims):
            voxels[out + d] = points[i, d]
        if cells.size:
            _touch_bytes(record, last, stats, 0, bases[0] + 4 * dims * i, 4 * dims, False,
                         line_shift)
        elif dims > 3:
            _touch_bytes(record, last, stats, 0, bases[0] + 4 * dims * i + 12, 4 * (dims - 3),
                         False, line_shift)
        _touch_bytes(record, last, stats, 5, bases[5] + 4 * out, 4 * dims, True, line_shift)
        _count(stats, 3, dims if cells.size else dims - 3, dims, 0, 0, 0)
        kept += 1
    return state[0], valid, kept


@njit
def encode_in_place(voxels, counts, used, p, bases, record, stats, line_shift):
    """The reference's encode-and-quantise-scale step: every filled slot's values become
    encoded floats (`voxels` is updated in place). `bases` = [counts, voxels].

    Work per used pillar: load its count (1 load), the slot loop's set-up (1 ALU op). Per
    filled slot: the loop (1 ALU op, a branch) and per value a load, a store and spec §3
    step 5: for x, y, z and r one subtraction (1 FP) and two divisions (by the range, then
    by the scale; the ranges are loop constants), for t one division.
    """
    _, max_slots, dims = voxels.shape
    last = np.full((2, 2), -1, np.int64)
    predictor = np.zeros(N_SITES, np.int64)
    for pillar in range(used):
        _touch(record, last, stats, 0, bases[0] + 4 * pillar, False, line_shift)
        filled = counts[pillar]
        _count(stats, 1, 1, 0, 0, 0, 0)
        for slot in range(filled + 1):
            if not _branch(stats, predictor, 0, slot < filled):
                break
            at = (pillar * max_slots + slot) * dims
            for d in range(dims):
                voxels[pillar, slot, d] = encode_value(voxels[pillar, slot, d], d, p)
            _touch_bytes(record, last, stats, 1, bases[1] + 4 * at, 4 * dims, True,
                         line_shift)
            ranged = min(dims, 4)
            _count(stats, 1, dims, dims, ranged, 0, 2 * ranged + (dims - ranged))


@njit
def transpose_quantize(voxels, used, slot_major, features, bases, record, stats, line_shift):
    """The reference's transpose: features[c, s, n] (or [c, n, s]) = quantised voxels[n, s, c]
    for every slot of the used pillars, read with the large stride of the voxel buffer.
    `features` is the flat output, zero where no pillar is. `bases` = [voxels, features].

    Work per element: the loop and both indices (3 ALU ops, a predictable branch), the load,
    the quantisation as the reference writes it (a NaN test: 1 FP compare and a branch; set
    the rounding mode with the libc call fesetround: call and return (2 branches), read the
    control register, clear and set the mode bits, check the argument (4 ALU ops) and write
    it back (an FPCR write); nearbyintf: 1 FP; the two clamps: 2 FP compares and 2
    branches; the conversion: 1 FCVT) and the byte store. With [c, s, n]
    models the stores of one (c, s) run along n, so whole lines are written in turn.
    """
    max_pillars_slots = features.size // voxels.shape[2]
    _, max_slots, dims = voxels.shape
    max_pillars = max_pillars_slots // max_slots
    last = np.full((2, 2), -1, np.int64)
    predictor = np.zeros(N_SITES, np.int64)
    for c in range(dims):
        for s in range(max_slots):
            if slot_major:
                _store_run(record, stats, 1, bases[1] + (c * max_slots + s) * max_pillars, used,
                           line_shift)
            for n in range(used):
                old = (n * max_slots + s) * dims + c
                if slot_major:
                    new = (c * max_slots + s) * max_pillars + n
                else:
                    new = (c * max_pillars + n) * max_slots + s
                v = voxels[n, s, c]
                features[new] = quantize_value(v)
                _touch(record, last, stats, 0, bases[0] + 4 * old, False, line_shift)
                if not slot_major:
                    _touch(record, last, stats, 1, bases[1] + new, True, line_shift)
                _branch(stats, predictor, 0, True)
                _branch(stats, predictor, 1, v != v)
                r = np.rint(v)
                _branch(stats, predictor, 2, r < -128.0)
                _branch(stats, predictor, 3, r > 127.0)
                stats[op.FPCR] += 1
                stats[op.BRANCH] += 2
                _count(stats, 7, 1, 1, 4, 1, 0)


@njit_inline
def _store_run(record, stats, stream, start, nbytes, line_shift):
    """Record a run of stores over `[start, start + nbytes)`: one entry per line, marked
    full where the run covers the whole line (the store buffer merges such stores)."""
    if nbytes <= 0:
        return
    size = 1 << line_shift
    end = start + nbytes
    for line_start in range(start >> line_shift << line_shift, end, size):
        n = stats[ENTRIES]
        if n >= record.shape[0]:
            stats[OVERFLOW] += 1
            return
        full = line_start >= start and line_start + size <= end
        record[n, 0] = line_start
        record[n, 1] = (stream << 8) | WRITE | (FULL_LINE if full else 0)
        stats[ENTRIES] = n + 1


class Accesses(NamedTuple):
    """A recorded step's accesses as `CpuWork` takes them, one array per field."""

    addrs: npt.NDArray[np.int64]
    is_write: npt.NDArray[np.bool_]
    full_line: npt.NDArray[np.bool_]
    loaded: npt.NDArray[np.bool_]
    streams: npt.NDArray[np.uint8]


def split_record(record: npt.NDArray[np.int64], n: int) -> Accesses:
    """The first `n` entries of an access record as separate arrays: the line addresses,
    the WRITE, FULL_LINE and LOADED flags and the stream id (one pass over the record,
    where the NumPy expressions of each field made ten over a million-entry record)."""
    out = Accesses(np.empty(n, np.int64), np.empty(n, np.bool_), np.empty(n, np.bool_),
                   np.empty(n, np.bool_), np.empty(n, np.uint8))
    _split_record(record, out)
    return out


@njit
def _split_record(record, out):
    addrs, is_write, full_line, loaded, streams = out
    for i in range(addrs.size):
        flags = record[i, 1]
        addrs[i] = record[i, 0]
        is_write[i] = (flags & WRITE) != 0
        full_line[i] = (flags & FULL_LINE) != 0
        loaded[i] = (flags & LOADED) != 0
        streams[i] = (flags >> 8) & 0xFF


@njit
def memset_stream(start, nbytes, record, stats, line_shift, vector_bytes):
    """A memset of [start, start + nbytes): one store per `vector_bytes` and a loop branch per
    four stores (a 64-byte loop body of 16-byte stores, as glibc's AArch64 memset has), one
    record entry per line."""
    size = 1 << line_shift
    first = start >> line_shift << line_shift
    lines = (start + nbytes - first + size - 1) // size if nbytes > 0 else 0
    if stats[ENTRIES] + lines > record.shape[0]:
        raise IndexError("the access record is too small for this memset")
    _store_run(record, stats, 255, start, nbytes, line_shift)
    stores = (nbytes + vector_bytes - 1) // vector_bytes
    loops = (stores + 3) // 4
    _count(stats, loops, 0, stores, 0, 0, 0)
    stats[op.BRANCH] += loops
    stats[op.MISPREDICT] += 1 if loops else 0
    stats[MERGED] += max(0, stores - lines)


@njit
def voxelize_packed(packed, dims, grid, tables, voxels, trace):
    """Scheme 2's CPU voxelisation: steps 3-4 on the DSP's packed results. `voxels` is the
    uint8 AoS buffer by final feature position: record (s * P + n) for [c, s, n] models, or
    (n * K + s) for [c, n, s] models, `dims` bytes each (x, y, z, r[, t]).
    `trace.bases` = [cells, xyzr, t, lut, counts, coords, voxels]: the addresses of point
    0's fields; the DSP's output interleaves them, `record_bytes` apart. Returns (pillars,
    valid, kept).

    Work per point: the loop (1 ALU op, a branch), load the cell (1 load), test it (a
    branch); for a valid point split it (2 ALU ops) and form the table index (2 ALU ops).
    Keeping the point: the record index (2 ALU ops), load the packed word and store it as
    one 32-bit store (the DSP packed the bytes in record order), for t one more load and
    byte store, one ALU op for the kept count.
    """
    cells, xyzr, t, record_bytes = packed
    _, y_len, max_pillars, max_slots, slot_major = grid
    bases, record, stats, line_shift = trace
    n_points = cells.size
    last = np.full((7, 2), -1, np.int64)
    state = np.zeros(1, np.int64)
    predictor = np.zeros(N_SITES, np.int64)
    where = ((3, bases[3]), (5, bases[5]), (4, bases[4]))
    valid = 0
    kept = 0
    for i in range(n_points):
        _branch(stats, predictor, 7, True)
        _touch(record, last, stats, 0, bases[0] + record_bytes * i, False, line_shift)
        cell = cells[i]
        _count(stats, 1, 1, 0, 0, 0, 0)
        if _branch(stats, predictor, 0, cell < 0):
            continue
        valid += 1
        idx = cell & 0xFFFF
        idy = cell >> 16
        _count(stats, 4, 0, 0, 0, 0, 0)
        # The 2-D table is indexed [idx][idy].
        pillar, slot = _take_slot((idx, idy, idx * y_len + idy), tables, state, grid, where,
                                  trace, last, predictor)
        if slot < 0:
            continue
        if slot_major:
            out = slot * max_pillars + pillar
        else:
            out = pillar * max_slots + slot
        word = xyzr[i]
        for b in range(4):
            voxels[out * dims + b] = (word >> (8 * b)) & 0xFF
        _touch(record, last, stats, 1, bases[1] + record_bytes * i, False, line_shift)
        if dims == 5:
            voxels[out * dims + 4] = t[i] & 0xFF
            _touch(record, last, stats, 2, bases[2] + record_bytes * i, False, line_shift)
        _touch_bytes(record, last, stats, 6, bases[6] + out * dims, dims, True, line_shift)
        extra = 1 if dims == 5 else 0
        _count(stats, 3, 1 + extra, 1 + extra, 0, 0, 0)
        kept += 1
    return state[0], valid, kept


@njit
def reset_used(used, lut_row, lut_col, tables, trace, clear_lut):
    """Undo what a frame of `used` pillars wrote into the tables, so the next frame finds
    them as new: each used pillar's table entry back to -1 (its cell read from coords, the
    entry at idy * lut_row + idx * lut_col; not when `clear_lut` is False, because the
    caller sets the whole table), its count to 0, its coords row to (0, -1, -1, -1).
    Untouched entries already hold those values. `trace.bases` = [lut, counts, coords].

    Work per pillar: the loop (1 ALU op, a branch), store the count and the coords row (one
    128-bit store); with `clear_lut`, also load the coords row's cell (one load of the two
    words), the table index (2 ALU ops) and store the entry: 3 stores.
    """
    lut, counts, coords = tables
    bases, record, stats, line_shift = trace
    last = np.full((3, 2), -1, np.int64)
    for pillar in range(used):
        if clear_lut:
            idy = coords[pillar, 2]
            idx = coords[pillar, 3]
            entry = idy * lut_row + idx * lut_col
            lut[entry] = -1
        counts[pillar] = 0
        coords[pillar, 0] = 0
        coords[pillar, 1] = -1
        coords[pillar, 2] = -1
        coords[pillar, 3] = -1
        _touch_bytes(record, last, stats, 2, bases[2] + 16 * pillar, 16, True, line_shift)
        if clear_lut:
            _touch(record, last, stats, 0, bases[0] + 4 * entry, True, line_shift)
            _count(stats, 3, 1, 3, 0, 0, 0)
        else:
            _count(stats, 1, 0, 2, 0, 0, 0)
        _touch(record, last, stats, 1, bases[1] + 4 * pillar, True, line_shift)
        stats[op.BRANCH] += 1
    stats[op.MISPREDICT] += 1 if used else 0

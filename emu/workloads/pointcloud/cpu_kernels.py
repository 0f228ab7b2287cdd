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

While a kernel runs, what it counts lives in registers, not in `stats`: three small tuples
threaded through the loop and stored into `stats` once at its end (`_close`): `work`, the
instruction counts (`_work`); `branches`, the predictor's 2-bit counters packed in one
integer with the branches and mispredicts so far (`_branch`; a branch that is always taken,
the loop's own, is applied in one step for all its iterations, `_taken`); `rec`, the
record's entries, merged and overflowed accesses (`_touch`). Counting into `stats` itself
made every count a load and a store that the next one waited on (a store to the record might
change `stats`, as far as the compiler knows): the kernels took two to five times as long.
Also for speed, the pillar step (spec §3 steps 3-4) is written out in each voxelisation
kernel rather than shared in a helper: an inlined helper that takes the tables and the
record left numba reference-count updates of those arrays in the loop, which made
`voxelize_floats` take 27 ms instead of 17 ms on a 300,000-point frame.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from emu.cpu import ops as op
from emu.cpu.memsys import FULL_LINE, LOADED, STREAM_SHIFT, WRITE
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

# An entry of the access record: [line address, flags], packed as `emu.cpu.memsys` reads
# them (flags = WRITE | FULL_LINE | LOADED | id << STREAM_SHIFT). LOADED: the entry began
# with a load, so a store merged into it makes a read-modify-write of the line, which
# stalls for the line as the load does.


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
def _work(work, ints, loads, stores, fp, fcvt, fdiv):
    """`work` (ints, loads, stores, fp, fcvt, fdiv so far) with these added."""
    return (work[0] + ints, work[1] + loads, work[2] + stores, work[3] + fp, work[4] + fcvt,
            work[5] + fdiv)


@njit_inline
def _branch(branches, site, taken):
    """A conditional branch at `site`, predicted by that site's 2-bit saturating counter.
    `branches` = (the counters, 2 bits per site; branches; mispredicts), before and after."""
    counters, count, mispredicts = branches
    shift = 2 * site
    state = (counters >> shift) & 3
    if (state >= 2) != taken:
        mispredicts += 1
    state = min(state + 1, 3) if taken else max(state - 1, 0)
    return (counters & ~(3 << shift)) | (state << shift), count + 1, mispredicts


@njit_inline
def _taken(branches, site, times):
    """`times` branches at `site`, all taken (a loop's own branch): its counter mispredicts
    while it is below 2, then saturates."""
    counters, count, mispredicts = branches
    shift = 2 * site
    state = (counters >> shift) & 3
    mispredicts += min(times, max(2 - state, 0))
    state = min(state + times, 3)
    return (counters & ~(3 << shift)) | (state << shift), count + times, mispredicts


@njit_inline
def _open(stats):
    """What a kernel counts, before it starts: no work, the predictor's counters at 0, and
    the record as far as earlier kernels filled it. Returns (rec, branches, work)."""
    return (stats[ENTRIES], 0, 0), (0, 0, 0), (0, 0, 0, 0, 0, 0)


@njit_inline
def _close(stats, rec, branches, work):
    """Store what a kernel counted into `stats`."""
    _count(stats, work[0], work[1], work[2], work[3], work[4], work[5])
    stats[op.BRANCH] += branches[1]
    stats[op.MISPREDICT] += branches[2]
    stats[ENTRIES] = rec[0]
    stats[MERGED] += rec[1]
    stats[OVERFLOW] += rec[2]


@njit_inline
def _touch(record, last, rec, stream, byte_addr, write, line_shift):
    """Record an access of stream `stream` (one array's loads or stores) at `byte_addr`.
    `rec` = (entries, merged, overflow) of the record, before and after."""
    entries, merged, overflow = rec
    line = byte_addr >> line_shift
    if last[stream, 0] == line:
        if write:
            record[last[stream, 1], 1] |= WRITE
        return entries, merged + 1, overflow
    if entries >= record.shape[0]:
        return entries, merged, overflow + 1
    record[entries, 0] = line << line_shift
    record[entries, 1] = (stream << STREAM_SHIFT) | (WRITE if write else LOADED)
    last[stream, 0] = line
    last[stream, 1] = entries
    return entries + 1, merged, overflow


@njit_inline
def _touch_bytes(record, last, rec, stream, byte_addr, nbytes, write, line_shift):
    """Record an access of `nbytes` at `byte_addr`: every line it overlaps."""
    first = byte_addr >> line_shift
    for line in range(first, ((byte_addr + nbytes - 1) >> line_shift) + 1):
        rec = _touch(record, last, rec, stream, max(byte_addr, line << line_shift), write,
                     line_shift)
    return rec


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
    (2 ALU ops), the table index (2 ALU ops). The pillar step (steps 3-4) for a valid point:
    load the table entry, test it (a data-dependent branch: is the cell new?); for a new cell
    test the pillar budget (1 ALU op, a branch), bump the pillar count (1 ALU op), store the
    entry and the four coords words (5 stores; coords' two zero words as one 64-bit store: 4
    stores); then load the points-per-pillar count, compare it with K (1 ALU op, a branch),
    and unless the pillar is full store it incremented (1 ALU op, 1 store). Keeping the
    point: the record index (2 ALU ops), loads of the values not yet in registers (all dims
    with a DSP cell, dims - 3 otherwise), one store per value, one ALU op for the kept count.
    """
    x_len, y_len, max_pillars, max_slots, slot_major = grid
    lut, counts, coords = tables
    bases, record, stats, line_shift = trace
    n, dims = points.shape
    from_dsp = cells.size > 0
    last = np.full((6, 2), -1, np.int64)
    state = np.zeros(1, np.int64)
    rec, branches, work = _open(stats)
    valid = 0
    kept = 0
    for i in range(n):
        work = _work(work, 1, 0, 0, 0, 0, 0)
        if from_dsp:
            rec = _touch(record, last, rec, 1, bases[1] + 4 * i, False, line_shift)
            cell = cells[i]
            work = _work(work, 0, 1, 0, 0, 0, 0)
            branches = _branch(branches, 0, cell < 0)
            if cell < 0:
                continue
            idx = cell & 0xFFFF
            idy = cell >> 16
            work = _work(work, 4, 0, 0, 0, 0, 0)
        else:
            rec = _touch_bytes(record, last, rec, 0, bases[0] + 4 * dims * i, 12, False,
                               line_shift)
            work = _work(work, 0, 3, 0, 6, 0, 0)
            outside = not in_range(points[i, 0], points[i, 1], points[i, 2], p)
            branches = _branch(branches, 0, outside)
            if outside:
                continue
            idx, idy = cell_of(points[i, 0], points[i, 1], p, x_len, y_len)
            work = _work(work, 4, 0, 0, 2, 2, 2)
            branches = _branch(branches, 1, idx < 0)
            if idx < 0:
                continue
        valid += 1
        # The pillar step.
        lut_index = idy * x_len + idx
        rec = _touch(record, last, rec, 2, bases[2] + 4 * lut_index, False, line_shift)
        pillar, new = assign_pillar(idx, idy, lut, lut_index, coords, state, max_pillars)
        work = _work(work, 1, 2, 0, 0, 0, 0)
        branches = _branch(branches, 2, new)
        if new:
            branches = _branch(branches, 3, state[0] < max_pillars)
            work = _work(work, 2, 0, 4, 0, 0, 0)
            rec = _touch(record, last, rec, 2, bases[2] + 4 * lut_index, True, line_shift)
            rec = _touch_bytes(record, last, rec, 4, bases[4] + 16 * pillar, 16, True,
                               line_shift)
        rec = _touch(record, last, rec, 3, bases[3] + 4 * pillar, False, line_shift)
        slot = counts[pillar]
        branches = _branch(branches, 4, slot >= max_slots)
        if slot >= max_slots:
            continue
        counts[pillar] = slot + 1
        work = _work(work, 1, 0, 1, 0, 0, 0)
        rec = _touch(record, last, rec, 3, bases[3] + 4 * pillar, True, line_shift)
        # Keeping the point.
        if slot_major and from_dsp:
            out = (slot * max_pillars + pillar) * dims
        else:
            out = (pillar * max_slots + slot) * dims
        for d in range(dims):
            voxels[out + d] = points[i, d]
        if from_dsp:
            rec = _touch_bytes(record, last, rec, 0, bases[0] + 4 * dims * i, 4 * dims, False,
                               line_shift)
        elif dims > 3:
            rec = _touch_bytes(record, last, rec, 0, bases[0] + 4 * dims * i + 12,
                               4 * (dims - 3), False, line_shift)
        rec = _touch_bytes(record, last, rec, 5, bases[5] + 4 * out, 4 * dims, True,
                           line_shift)
        work = _work(work, 3, dims if from_dsp else dims - 3, dims, 0, 0, 0)
        kept += 1
    _close(stats, rec, _taken(branches, 7, n), work)
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
    rec, branches, work = _open(stats)
    ranged = min(dims, 4)
    for pillar in range(used):
        rec = _touch(record, last, rec, 0, bases[0] + 4 * pillar, False, line_shift)
        filled = counts[pillar]
        work = _work(work, 1, 1, 0, 0, 0, 0)
        for slot in range(filled + 1):
            branches = _branch(branches, 0, slot < filled)
            if slot >= filled:
                break
            at = (pillar * max_slots + slot) * dims
            for d in range(dims):
                voxels[pillar, slot, d] = encode_value(voxels[pillar, slot, d], d, p)
            rec = _touch_bytes(record, last, rec, 1, bases[1] + 4 * at, 4 * dims, True,
                               line_shift)
            work = _work(work, 1, dims, dims, ranged, 0, 2 * ranged + (dims - ranged))
    _close(stats, rec, branches, work)


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
    rec, branches, _ = _open(stats)
    for c in range(dims):
        for s in range(max_slots):
            if slot_major:
                rec = _store_run(record, rec, 1, bases[1] + (c * max_slots + s) * max_pillars,
                                 used, line_shift)
            for n in range(used):
                old = (n * max_slots + s) * dims + c
                if slot_major:
                    new = (c * max_slots + s) * max_pillars + n
                else:
                    new = (c * max_pillars + n) * max_slots + s
                v = voxels[n, s, c]
                features[new] = quantize_value(v)
                rec = _touch(record, last, rec, 0, bases[0] + 4 * old, False, line_shift)
                if not slot_major:
                    rec = _touch(record, last, rec, 1, bases[1] + new, True, line_shift)
                branches = _branch(branches, 1, v != v)
                r = np.rint(v)
                branches = _branch(branches, 2, r < -128.0)
                branches = _branch(branches, 3, r > 127.0)
    # Every element runs the same instructions; only the three tests above depend on the data.
    elements = dims * max_slots * used
    branches = _taken(branches, 0, elements)
    _close(stats, rec, branches, (7 * elements, elements, elements, 4 * elements, elements, 0))
    stats[op.FPCR] += elements
    stats[op.BRANCH] += 2 * elements  # the fesetround call and return


@njit_inline
def _store_run(record, rec, stream, start, nbytes, line_shift):
    """Record a run of stores over `[start, start + nbytes)`: one entry per line, marked
    full where the run covers the whole line (the store buffer merges such stores). `rec`
    as `_touch` takes it."""
    entries, merged, overflow = rec
    if nbytes <= 0:
        return rec
    size = 1 << line_shift
    end = start + nbytes
    for line_start in range(start >> line_shift << line_shift, end, size):
        if entries >= record.shape[0]:
            return entries, merged, overflow + 1
        full = line_start >= start and line_start + size <= end
        record[entries, 0] = line_start
        record[entries, 1] = (stream << STREAM_SHIFT) | WRITE | (FULL_LINE if full else 0)
        entries += 1
    return entries, merged, overflow


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
    rec = _store_run(record, (stats[ENTRIES], 0, 0), 255, start, nbytes, line_shift)
    stats[ENTRIES] = rec[0]
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
    branch); for a valid point split it (2 ALU ops) and form the table index (2 ALU ops),
    then the pillar step as `voxelize_floats` counts it. Keeping the point: the record
    index (2 ALU ops), load the packed word and store it as one 32-bit store (the DSP packed
    the bytes in record order), for t one more load and byte store, one ALU op for the kept
    count.
    """
    cells, xyzr, t, record_bytes = packed
    _, y_len, max_pillars, max_slots, slot_major = grid
    lut, counts, coords = tables
    bases, record, stats, line_shift = trace
    n_points = cells.size
    extra = 1 if dims == 5 else 0
    last = np.full((7, 2), -1, np.int64)
    state = np.zeros(1, np.int64)
    rec, branches, work = _open(stats)
    valid = 0
    kept = 0
    for i in range(n_points):
        rec = _touch(record, last, rec, 0, bases[0] + record_bytes * i, False, line_shift)
        cell = cells[i]
        work = _work(work, 1, 1, 0, 0, 0, 0)
        branches = _branch(branches, 0, cell < 0)
        if cell < 0:
            continue
        valid += 1
        idx = cell & 0xFFFF
        idy = cell >> 16
        work = _work(work, 4, 0, 0, 0, 0, 0)
        # The pillar step; the 2-D table is indexed [idx][idy].
        lut_index = idx * y_len + idy
        rec = _touch(record, last, rec, 3, bases[3] + 4 * lut_index, False, line_shift)
        pillar, new = assign_pillar(idx, idy, lut, lut_index, coords, state, max_pillars)
        work = _work(work, 1, 2, 0, 0, 0, 0)
        branches = _branch(branches, 2, new)
        if new:
            branches = _branch(branches, 3, state[0] < max_pillars)
            work = _work(work, 2, 0, 4, 0, 0, 0)
            rec = _touch(record, last, rec, 3, bases[3] + 4 * lut_index, True, line_shift)
            rec = _touch_bytes(record, last, rec, 5, bases[5] + 16 * pillar, 16, True,
                               line_shift)
        rec = _touch(record, last, rec, 4, bases[4] + 4 * pillar, False, line_shift)
        slot = counts[pillar]
        branches = _branch(branches, 4, slot >= max_slots)
        if slot >= max_slots:
            continue
        counts[pillar] = slot + 1
        work = _work(work, 1, 0, 1, 0, 0, 0)
        rec = _touch(record, last, rec, 4, bases[4] + 4 * pillar, True, line_shift)
        # Keeping the point.
        if slot_major:
            out = slot * max_pillars + pillar
        else:
            out = pillar * max_slots + slot
        word = xyzr[i]
        for b in range(4):
            voxels[out * dims + b] = (word >> (8 * b)) & 0xFF
        rec = _touch(record, last, rec, 1, bases[1] + record_bytes * i, False, line_shift)
        if dims == 5:
            voxels[out * dims + 4] = t[i] & 0xFF
            rec = _touch(record, last, rec, 2, bases[2] + record_bytes * i, False, line_shift)
        rec = _touch_bytes(record, last, rec, 6, bases[6] + out * dims, dims, True, line_shift)
        work = _work(work, 3, 1 + extra, 1 + extra, 0, 0, 0)
        kept += 1
    _close(stats, rec, _taken(branches, 7, n_points), work)
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
    rec, _, _ = _open(stats)
    for pillar in range(used):
        entry = 0
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
        rec = _touch_bytes(record, last, rec, 2, bases[2] + 16 * pillar, 16, True, line_shift)
        if clear_lut:
            rec = _touch(record, last, rec, 0, bases[0] + 4 * entry, True, line_shift)
        rec = _touch(record, last, rec, 1, bases[1] + 4 * pillar, True, line_shift)
    # The same work every pillar; the loop's branch mispredicts where it exits.
    work = (3 * used, used, 3 * used, 0, 0, 0) if clear_lut else (used, 0, 2 * used, 0, 0, 0)
    _close(stats, rec, (0, used, 1 if used else 0), work)

"""A slow, literal reference of what the point-cloud CPU kernels record, one event at a time.

Each function does what the kernel of the same name in
`emu.workloads.pointcloud.cpu_kernels` does, in plain Python: it computes the step on the
same arrays and, as it goes, adds every instruction to `stats` the moment it runs, runs every
branch through its site's 2-bit counter (a list), and appends every access to the record
(merged into the previous entry of its stream when it touches the same line). The kernels
count in registers and in bulk; this is the definition they must agree with.
"""

from __future__ import annotations

import numpy as np

from emu.cpu import ops as op
from emu.workloads.pointcloud import cpu_kernels as ck

f32 = np.float32
BACK, FRONT, RIGHT, LEFT, BOTTOM, TOP, LOWER, UPPER, XS, YS, SCALE = range(11)


class Recorder:
    """The record, `stats` and the branch predictor of one kernel call."""

    def __init__(self, record: np.ndarray, stats: np.ndarray, streams: int, line_shift: int):
        self.record, self.stats, self.shift = record, stats, line_shift
        self.last = [[-1, -1] for _ in range(streams)]
        self.predictor = [0] * 8

    def count(self, ints=0, loads=0, stores=0, fp=0, fcvt=0, fdiv=0, branch=0, fpcr=0):
        for index, value in ((op.INT, ints), (op.LOAD, loads), (op.STORE, stores), (op.FP, fp),
                             (op.FCVT, fcvt), (op.FDIV, fdiv), (op.BRANCH, branch),
                             (op.FPCR, fpcr)):
            self.stats[index] += value

    def branch(self, site: int, taken: bool) -> bool:
        self.stats[op.BRANCH] += 1
        state = self.predictor[site]
        if (state >= 2) != taken:
            self.stats[op.MISPREDICT] += 1
        self.predictor[site] = min(state + 1, 3) if taken else max(state - 1, 0)
        return taken

    def touch(self, stream: int, addr: int, write: bool) -> None:
        line = int(addr) >> self.shift
        last = self.last[stream]
        if last[0] == line:
            if write:
                self.record[last[1], 1] |= ck.WRITE
            self.stats[ck.MERGED] += 1
            return
        n = int(self.stats[ck.ENTRIES])
        if n >= len(self.record):
            self.stats[ck.OVERFLOW] += 1
            return
        self.record[n] = (line << self.shift, (stream << 8) | (ck.WRITE if write else ck.LOADED))
        self.last[stream] = [line, n]
        self.stats[ck.ENTRIES] = n + 1

    def touch_bytes(self, stream: int, addr: int, nbytes: int, write: bool) -> None:
        for line in range(int(addr) >> self.shift, ((int(addr) + nbytes - 1) >> self.shift) + 1):
            self.touch(stream, max(int(addr), line << self.shift), write)

    def store_run(self, stream: int, start: int, nbytes: int) -> None:
        if nbytes <= 0:
            return
        size = 1 << self.shift
        for line_start in range(start >> self.shift << self.shift, start + nbytes, size):
            n = int(self.stats[ck.ENTRIES])
            if n >= len(self.record):
                self.stats[ck.OVERFLOW] += 1
                return
            full = line_start >= start and line_start + size <= start + nbytes
            self.record[n] = (line_start, (stream << 8) | ck.WRITE | (ck.FULL_LINE if full else 0))
            self.stats[ck.ENTRIES] = n + 1


def _take_slot(rec, idx, idy, lut_index, tables, state, grid, ids, bases):
    """Steps 3-4 for a valid point: (pillar, slot), slot -1 when the pillar is full."""
    lut, counts, coords = tables
    lut_id, coords_id, counts_id = ids
    rec.touch(lut_id, bases[lut_id] + 4 * lut_index, False)
    pillar = int(lut[lut_index])
    new = pillar < 0
    if new:
        if state[0] < grid.max_pillars:
            pillar = state[0]
            state[0] += 1
        else:
            pillar = grid.max_pillars - 1
        lut[lut_index] = pillar
        coords[pillar] = (0, 0, idy, idx)
    rec.count(loads=1)
    if rec.branch(2, new):
        rec.branch(3, state[0] < grid.max_pillars)
        rec.count(ints=2, stores=4)
        rec.touch(lut_id, bases[lut_id] + 4 * lut_index, True)
        rec.touch_bytes(coords_id, bases[coords_id] + 16 * pillar, 16, True)
    rec.touch(counts_id, bases[counts_id] + 4 * pillar, False)
    slot = int(counts[pillar])
    rec.count(ints=1, loads=1)
    if rec.branch(4, slot >= grid.max_slots):
        return pillar, -1
    counts[pillar] = slot + 1
    rec.count(ints=1, stores=1)
    rec.touch(counts_id, bases[counts_id] + 4 * pillar, True)
    return pillar, slot


def voxelize_floats(points, cells, p, grid, tables, voxels, trace):
    bases, record, stats, shift = trace
    rec = Recorder(record, stats, 6, shift)
    n, dims = points.shape
    state = [0]
    valid = kept = 0
    with np.errstate(all="ignore"):
        for i in range(n):
            rec.branch(7, True)
            rec.count(ints=1)
            if cells.size:
                rec.touch(1, bases[1] + 4 * i, False)
                cell = int(cells[i])
                rec.count(loads=1)
                if rec.branch(0, cell < 0):
                    continue
                idx, idy = cell & 0xFFFF, cell >> 16
                rec.count(ints=4)
            else:
                rec.touch_bytes(0, bases[0] + 4 * dims * i, 12, False)
                rec.count(loads=3, fp=6)
                x, y, z = points[i, 0], points[i, 1], points[i, 2]
                inside = (p[BACK] < x < p[FRONT] and p[RIGHT] < y < p[LEFT]
                          and p[BOTTOM] < z < p[TOP])
                if rec.branch(0, not inside):
                    continue
                idx = int(f32((x - p[BACK]) / p[XS]))
                idy = int(f32((y - p[RIGHT]) / p[YS]))
                if idx >= grid.x_len or idy >= grid.y_len:
                    idx = idy = -1
                rec.count(ints=4, fp=2, fcvt=2, fdiv=2)
                if rec.branch(1, idx < 0):
                    continue
            valid += 1
            pillar, slot = _take_slot(rec, idx, idy, idy * grid.x_len + idx, tables, state,
                                      grid, (2, 4, 3), bases)
            if slot < 0:
                continue
            if grid.slot_major and cells.size:
                out = (slot * grid.max_pillars + pillar) * dims
            else:
                out = (pillar * grid.max_slots + slot) * dims
            voxels[out: out + dims] = points[i]
            if cells.size:
                rec.touch_bytes(0, bases[0] + 4 * dims * i, 4 * dims, False)
            elif dims > 3:
                rec.touch_bytes(0, bases[0] + 4 * dims * i + 12, 4 * (dims - 3), False)
            rec.touch_bytes(5, bases[5] + 4 * out, 4 * dims, True)
            rec.count(ints=3, loads=dims if cells.size else dims - 3, stores=dims)
            kept += 1
    return state[0], valid, kept


def voxelize_packed(packed, dims, grid, tables, voxels, trace):
    cells, xyzr, t, record_bytes = packed
    bases, record, stats, shift = trace
    rec = Recorder(record, stats, 7, shift)
    state = [0]
    valid = kept = 0
    for i in range(cells.size):
        rec.branch(7, True)
        rec.touch(0, bases[0] + record_bytes * i, False)
        cell = int(cells[i])
        rec.count(ints=1, loads=1)
        if rec.branch(0, cell < 0):
            continue
        valid += 1
        idx, idy = cell & 0xFFFF, cell >> 16
        rec.count(ints=4)
        pillar, slot = _take_slot(rec, idx, idy, idx * grid.y_len + idy, tables, state, grid,
                                  (3, 5, 4), bases)
        if slot < 0:
            continue
        if grid.slot_major:
            out = slot * grid.max_pillars + pillar
        else:
            out = pillar * grid.max_slots + slot
        word = int(xyzr[i])
        for b in range(4):
            voxels[out * dims + b] = (word >> (8 * b)) & 0xFF
        rec.touch(1, bases[1] + record_bytes * i, False)
        if dims == 5:
            voxels[out * dims + 4] = int(t[i]) & 0xFF
            rec.touch(2, bases[2] + record_bytes * i, False)
        rec.touch_bytes(6, bases[6] + out * dims, dims, True)
        extra = 1 if dims == 5 else 0
        rec.count(ints=3, loads=1 + extra, stores=1 + extra)
        kept += 1
    return state[0], valid, kept


def transpose_quantize(voxels, used, slot_major, features, bases, record, stats, line_shift):
    rec = Recorder(record, stats, 2, line_shift)
    _, max_slots, dims = voxels.shape
    max_pillars = features.size // dims // max_slots
    with np.errstate(all="ignore"):
        for c in range(dims):
            for s in range(max_slots):
                if slot_major:
                    rec.store_run(1, int(bases[1]) + (c * max_slots + s) * max_pillars, used)
                for n in range(used):
                    old = (n * max_slots + s) * dims + c
                    new = ((c * max_slots + s) * max_pillars + n if slot_major
                           else (c * max_pillars + n) * max_slots + s)
                    v = voxels[n, s, c]
                    r = np.rint(v)
                    features[new] = 0 if v != v else int(min(max(r, -128.0), 127.0))
                    rec.touch(0, bases[0] + 4 * old, False)
                    if not slot_major:
                        rec.touch(1, bases[1] + new, True)
                    rec.branch(0, True)
                    rec.branch(1, v != v)
                    rec.branch(2, r < -128.0)
                    rec.branch(3, r > 127.0)
                    rec.count(ints=7, loads=1, stores=1, fp=4, fcvt=1, branch=2, fpcr=1)


def encode_in_place(voxels, counts, used, p, bases, record, stats, line_shift):
    rec = Recorder(record, stats, 2, line_shift)
    _, max_slots, dims = voxels.shape
    lows = [p[BACK], p[RIGHT], p[BOTTOM], p[LOWER]]
    spans = [p[FRONT] - p[BACK], p[LEFT] - p[RIGHT], p[TOP] - p[BOTTOM], p[UPPER] - p[LOWER]]
    ranged = min(dims, 4)
    with np.errstate(all="ignore"):
        for pillar in range(used):
            rec.touch(0, bases[0] + 4 * pillar, False)
            filled = int(counts[pillar])
            rec.count(ints=1, loads=1)
            for slot in range(filled + 1):
                if not rec.branch(0, slot < filled):
                    break
                for d in range(dims):
                    v = voxels[pillar, slot, d]
                    voxels[pillar, slot, d] = ((v - lows[d]) / spans[d]) / p[SCALE] if d < 4 \
                        else v / p[SCALE]
                at = (pillar * max_slots + slot) * dims
                rec.touch_bytes(1, bases[1] + 4 * at, 4 * dims, True)
                rec.count(ints=1, loads=dims, stores=dims, fp=ranged,
                          fdiv=2 * ranged + (dims - ranged))


def reset_used(used, lut_row, lut_col, tables, trace, clear_lut):
    lut, counts, coords = tables
    bases, record, stats, shift = trace
    rec = Recorder(record, stats, 3, shift)
    for pillar in range(used):
        entry = 0
        if clear_lut:
            entry = int(coords[pillar, 2]) * lut_row + int(coords[pillar, 3]) * lut_col
            lut[entry] = -1
        counts[pillar] = 0
        coords[pillar] = (0, -1, -1, -1)
        rec.touch_bytes(2, bases[2] + 16 * pillar, 16, True)
        if clear_lut:
            rec.touch(0, bases[0] + 4 * entry, True)
            rec.count(ints=3, loads=1, stores=3)
        else:
            rec.count(ints=1, stores=2)
        rec.touch(1, bases[1] + 4 * pillar, True)
        stats[op.BRANCH] += 1
    stats[op.MISPREDICT] += 1 if used else 0

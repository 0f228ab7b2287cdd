"""Kernels of the image-statistics CV operators (`emu.vdsp.ops.cv_stats`): integral image,
histogram equalisation."""

from __future__ import annotations

import numpy as np

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.ops.cv_kernel_records import TileRows

HIST_LANES = isa.LANES_32
"""Sub-histograms of the histogram pass: one per int32 lane of a gather."""
HIST_ROW_WORDS = 257
"""Words per sub-histogram: 256 bins and one bin for lanes past a row's end. The odd row
length puts the same bin of neighbouring lanes in neighbouring TCM sub-banks."""
HIST_ROW_BYTES = 4 * HIST_ROW_WORDS
HIST_BYTES = HIST_LANES * HIST_ROW_BYTES


@njit
def integral_tile(ctx: isa.Context, tile: TileRows, carry: int, keep: int) -> None:
    """`rows` rows of an integral image, `width` int32 values each, from as many source rows
    of `width` bytes (the first column and, for the image's first row, the first row are the
    zero border): value x of row r = the sum of source bytes 0..x of row r plus value x of
    the row above, which is output row r - 1, or for row 0 the int32 row at `carry` (none
    when `carry` < 0). The last row is also written at `keep`, the carry of the next tile.

    Per 64 source bytes: unpacked to two int16[32], each summed along its lanes in five
    shift-and-add steps (sel_u8 with zeros shifted in, add_i16; 32 x 255 fits int16), widened
    to int32, plus the running row sum (its last lane broadcast by sel_u8) and the row above.
    """
    src, dst, rows, width, in_pitch, out_pitch = tile
    zero = isa.splat_u8(ctx, 0)
    raw = np.empty(isa.LANES_8, np.uint8)
    halves = np.empty((2, isa.LANES_8), np.uint8)
    moved = np.empty(isa.LANES_8, np.uint8)
    quad = np.empty((4, isa.LANES_32), np.int32)
    total = np.empty(isa.LANES_32, np.int32)
    above = np.empty(isa.LANES_32, np.int32)
    running = np.empty(isa.LANES_32, np.int32)
    steps = np.empty((5, isa.LANES_8), np.uint8)  # select patterns: shift up 2, 4, 8, 16, 32 bytes
    for s in range(5):
        b = 2 << s
        for i in range(64):
            steps[s, i] = 64 + i - b if i >= b else i
    last = np.empty(isa.LANES_8, np.uint8)  # the last int32 lane in every lane
    for i in range(64):
        last[i] = 60 + i % 4
    for r in range(rows):
        isa.splat_i32(ctx, 0, running)
        prior = carry if r == 0 else dst + (r - 1) * out_pitch
        for x in range(0, width, 64):
            isa.load_u8(ctx, src + r * in_pitch + x, raw)
            isa.unpack_lo_u8_i16(ctx, raw, halves[0].view(np.int16))
            isa.unpack_hi_u8_i16(ctx, raw, halves[1].view(np.int16))
            for h in range(2):
                half = halves[h].view(np.int16)
                for s in range(5):
                    isa.sel_u8(ctx, zero, halves[h], steps[s], moved)
                    isa.add_i16(ctx, half, moved.view(np.int16), half)
            isa.unpack_lo_i16_i32(ctx, halves[0].view(np.int16), quad[0])
            isa.unpack_hi_i16_i32(ctx, halves[0].view(np.int16), quad[1])
            isa.unpack_lo_i16_i32(ctx, halves[1].view(np.int16), quad[2])
            isa.unpack_hi_i16_i32(ctx, halves[1].view(np.int16), quad[3])
            for q in range(4):
                at = x + 16 * q
                isa.add_i32(ctx, quad[q], running, quad[q])
                if at < width:
                    if prior >= 0:
                        isa.load_i32(ctx, prior + 4 * at, above)
                        isa.add_i32(ctx, quad[q], above, total)
                        isa.store(ctx, total, dst + r * out_pitch + 4 * at)
                        if r == rows - 1:
                            isa.store(ctx, total, keep + 4 * at)
                    else:
                        isa.store(ctx, quad[q], dst + r * out_pitch + 4 * at)
                        if r == rows - 1:
                            isa.store(ctx, quad[q], keep + 4 * at)
                if q % 2 == 1 and at + 16 < width:
                    bytes_q = quad[q].view(np.uint8)
                    isa.sel_u8(ctx, bytes_q, bytes_q, last, running.view(np.uint8))


@njit
def clear(ctx: isa.Context, addr: int, nbytes: int) -> None:
    """Zero `nbytes` (a multiple of 64) at `addr`: one vector store per 64 bytes."""
    zero = isa.splat_u8(ctx, 0)
    for at in range(addr, addr + nbytes, isa.VECTOR_BYTES):
        isa.store(ctx, zero, at)


@njit
def histogram_tile(ctx: isa.Context, src: int, rows: int, width: int, in_pitch: int,
                   hist: int) -> None:
    """Count the `width` bytes of each of `rows` rows into the 16 int32 sub-histograms at
    `hist` (sub-histogram l, bin v at hist + l * HIST_ROW_BYTES + 4 v): per 16 pixels, one
    gather of their bins' counts (lane l from sub-histogram l, so no two lanes share a
    counter), add 1, one scatter back. Lanes past a row's end count into bin 256."""
    raw = np.empty(isa.LANES_8, np.uint8)
    halves = np.empty((2, isa.LANES_16), np.int16)
    quad = np.empty((4, isa.LANES_32), np.int32)
    offsets = np.empty(isa.LANES_32, np.int32)
    counts = np.empty(isa.LANES_32, np.int32)
    inside = np.empty(isa.LANES_32, np.bool_)
    spill = np.empty(isa.LANES_32, np.int32)
    lane = np.empty(isa.LANES_32, np.int32)  # constant registers: lane index, sub-histogram starts
    base = np.empty(isa.LANES_32, np.int32)
    for i in range(16):
        lane[i] = i
        base[i] = i * HIST_ROW_BYTES
        spill[i] = i * HIST_ROW_BYTES + 4 * 256
    one = isa.splat_i32(ctx, 1)
    limit = np.empty(isa.LANES_32, np.int32)
    for r in range(rows):
        for x in range(0, width, 64):
            isa.load_u8(ctx, src + r * in_pitch + x, raw)
            isa.unpack_lo_u8_i16(ctx, raw, halves[0])
            isa.unpack_hi_u8_i16(ctx, raw, halves[1])
            isa.unpack_lo_i16_i32(ctx, halves[0], quad[0])
            isa.unpack_hi_i16_i32(ctx, halves[0], quad[1])
            isa.unpack_lo_i16_i32(ctx, halves[1], quad[2])
            isa.unpack_hi_i16_i32(ctx, halves[1], quad[3])
            for q in range(4):
                left = width - x - 16 * q
                if left <= 0:
                    break
                isa.sll_i32(ctx, quad[q], 2, offsets)
                isa.add_i32(ctx, offsets, base, offsets)
                if left < 16:
                    isa.splat_i32(ctx, left, limit)
                    isa.lt_i32(ctx, lane, limit, inside)
                    isa.mov_t(ctx, offsets, spill, inside, offsets)
                words = offsets.view(np.uint32)
                isa.gather_a_i32(ctx, hist, words, counts)
                isa.gather_d(ctx, counts, counts)
                isa.add_i32(ctx, counts, one, counts)
                isa.scatter_i32(ctx, counts, hist, words)
    isa.scatter_w(ctx)


@njit
def equalize_lut(ctx: isa.Context, hist: int, cdf: int, lut: int, total: int) -> None:
    """OpenCV's equalisation table from the sub-histograms at `hist` into the 256 bytes at
    `lut` (`cdf` is 1 KiB of scratch for the cumulative counts).

    The bins are summed over the sub-histograms and accumulated along the bins (shift-and-
    add in 16 lanes, then the running total), giving cdf[v]. The first non-empty bin i has
    cdf[i] = hist[i], the smallest non-zero cdf value. OpenCV's table is lut[v] =
    saturate_cast<uchar>(float(cdf[v] - cdf[i]) * (255.f / float(total - cdf[i]))): int to
    float32, one float32 division and multiply, rounded half to even, saturated (bins below
    i go negative and give 0; no pixel has them). When one bin holds every pixel OpenCV sets
    the image to that value: the identity table does the same."""
    acc = np.empty(isa.LANES_32, np.int32)
    part = np.empty(isa.LANES_32, np.int32)
    moved = np.empty(isa.LANES_32, np.int32)
    running = np.zeros(isa.LANES_32, np.int32)
    candidate = np.empty(isa.LANES_32, np.int32)
    positive = np.empty(isa.LANES_32, np.bool_)
    steps = np.empty((4, isa.LANES_8), np.uint8)  # shift up 1, 2, 4, 8 int32 lanes, zeros in
    for s in range(4):
        b = 4 << s
        for i in range(64):
            steps[s, i] = 64 + i - b if i >= b else i
    last = np.empty(isa.LANES_8, np.uint8)
    for i in range(64):
        last[i] = 60 + i % 4
    zero = isa.splat_i32(ctx, 0)
    isa.splat_i32(ctx, 0, running)
    lowest = isa.splat_i32(ctx, 2**31 - 1)
    for k in range(16):
        isa.loadu_i32(ctx, hist + 64 * k, acc)
        for lane in range(1, HIST_LANES):
            isa.loadu_i32(ctx, hist + lane * HIST_ROW_BYTES + 64 * k, part)
            isa.add_i32(ctx, acc, part, acc)
        for s in range(4):
            isa.sel_u8(ctx, zero.view(np.uint8), acc.view(np.uint8), steps[s],
                       moved.view(np.uint8))
            isa.add_i32(ctx, acc, moved, acc)
        isa.add_i32(ctx, acc, running, acc)
        isa.store(ctx, acc, cdf + 64 * k)
        isa.sel_u8(ctx, acc.view(np.uint8), acc.view(np.uint8), last, running.view(np.uint8))
        isa.lt_i32(ctx, zero, acc, positive)
        isa.mov_t(ctx, acc, lowest, positive, candidate)
        isa.min_i32(ctx, candidate, lowest, lowest)
    first = isa.rmin_i32(ctx, lowest)
    flat = first == total
    base = isa.splat_i32(ctx, first)
    remaining = isa.sub_i32(ctx, isa.splat_i32(ctx, total), base)
    scale = isa.fdiv_f32(ctx, isa.splat_f32(ctx, 255.0), isa.cvt_i32_f32(ctx, remaining))
    values = np.empty((4, isa.LANES_32), np.int32)
    real = np.empty(isa.LANES_32, np.float32)
    pair = np.empty((2, isa.LANES_16), np.int16)
    out = np.empty(isa.LANES_8, np.uint8)
    identity = np.empty(isa.LANES_32, np.int32)
    for i in range(16):
        identity[i] = i
    step = isa.splat_i32(ctx, 16)
    for k in range(16):
        q = k % 4
        if flat:
            isa.add_i32(ctx, identity, zero, values[q])
            isa.add_i32(ctx, identity, step, identity)
        else:
            isa.load_i32(ctx, cdf + 64 * k, acc)
            isa.sub_i32(ctx, acc, base, acc)
            isa.cvt_i32_f32(ctx, acc, real)
            isa.mul_f32(ctx, real, scale, real)
            isa.round_f32_i32(ctx, real, values[q])
        if q == 3:
            isa.pack_i32_i16(ctx, values[0], values[1], pair[0])
            isa.pack_i32_i16(ctx, values[2], values[3], pair[1])
            isa.pack_i16_u8(ctx, pair[0], pair[1], out)
            isa.store(ctx, out, lut + 16 * (k - 3))


@njit
def lut_tile(ctx: isa.Context, src: int, dst: int, rows: int, width: int, in_pitch: int,
             out_pitch: int, lut: int) -> None:
    """out = lut[src] for `rows` rows of `width` bytes: per 64 pixels, two 32-lane byte
    gathers from the 256-byte table (offsets: the pixels unpacked to 16 bits), packed back to
    bytes."""
    raw = np.empty(isa.LANES_8, np.uint8)
    index = np.empty((2, isa.LANES_16), np.int16)
    got = np.empty((2, isa.LANES_16), np.uint16)
    out = np.empty(isa.LANES_8, np.uint8)
    for r in range(rows):
        for x in range(0, width, 64):
            isa.load_u8(ctx, src + r * in_pitch + x, raw)
            isa.unpack_lo_u8_i16(ctx, raw, index[0])
            isa.unpack_hi_u8_i16(ctx, raw, index[1])
            for h in range(2):
                isa.gather_a_u8(ctx, lut, index[h].view(np.uint16), got[h])
                isa.gather_d(ctx, got[h], got[h])
            isa.pack_i16_u8(ctx, got[0].view(np.int16), got[1].view(np.int16), out)
            isa.store(ctx, out, dst + r * out_pitch + x)

"""Kernels of the geometric CV operators (`emu.vdsp.ops.cv_geometry`).

Every kernel works on one tile in TCM: source rows `in_pitch` apart (with at least one
vector of slack after each row), output rows `out_pitch` apart. Index vectors for lane
shuffles are constants the kernel builds in scalar code (on the DSP they are literal tables);
everything that touches pixel values goes through ISA ops.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.ops.cv_kernel_records import TileRows


@njit
def _reverse_index(pixels: int, pixel_bytes: int, out: npt.NDArray[np.uint8]) -> None:
    """Byte indices that reverse the order of the first `pixels` pixels of a vector (bytes of
    one pixel kept in order); lanes past them read lane 0."""
    for i in range(isa.VECTOR_BYTES):
        p = i // pixel_bytes
        out[i] = (pixels - 1 - p) * pixel_bytes + i % pixel_bytes if p < pixels else 0


@njit
def flip_tile(ctx: isa.Context, tile: TileRows, pixel_bytes: int, rev_rows: bool,
              rev_cols: bool) -> None:
    """Copy a tile of `rows` x `width` pixels, with its rows in reverse order (`rev_rows`)
    and/or each row's pixels in reverse order (`rev_cols`). A reversed row is read from its
    end in vectors of whole pixels (64 for grey, 21 for RGB) that one `shfl_u8` reverses;
    the last, shorter vector of a row uses its own index vector."""
    src, dst, rows, width, in_pitch, out_pitch = tile
    raw = np.empty(isa.LANES_8, np.uint8)
    out = np.empty(isa.LANES_8, np.uint8)
    full = np.empty(isa.LANES_8, np.uint8)
    tail = np.empty(isa.LANES_8, np.uint8)
    per_vector = isa.VECTOR_BYTES // pixel_bytes
    _reverse_index(per_vector, pixel_bytes, full)
    _reverse_index(width % per_vector, pixel_bytes, tail)
    row_bytes = width * pixel_bytes
    for r in range(rows):
        s_row = src + (rows - 1 - r if rev_rows else r) * in_pitch
        d_row = dst + r * out_pitch
        if not rev_cols:
            for x in range(0, row_bytes, isa.VECTOR_BYTES):
                isa.load_u8(ctx, s_row + x, raw)
                isa.store(ctx, raw, d_row + x)
            continue
        x = 0
        while x < width:
            n = min(per_vector, width - x)
            isa.loadu_u8(ctx, s_row + (width - x - n) * pixel_bytes, raw)
            isa.shfl_u8(ctx, raw, full if n == per_vector else tail, out)
            isa.storeu(ctx, out, d_row + x * pixel_bytes)
            x += n


@njit
def _transpose_block(ctx: isa.Context, block: npt.NDArray[np.uint8],
                     spare: npt.NDArray[np.uint8]) -> None:
    """Transpose the 64 x 64 bytes of `block` (64 registers) in place: six rounds of byte
    interleaves of register i with register i + 32, each rotating the 12-bit (row, column)
    index by one bit; an even number of rounds leaves the result in `block`."""
    cur, nxt = block, spare
    for _ in range(6):
        for i in range(32):
            isa.interleave_lo_u8(ctx, cur[i], cur[i + 32], nxt[2 * i])
            isa.interleave_hi_u8(ctx, cur[i], cur[i + 32], nxt[2 * i + 1])
        cur, nxt = nxt, cur


@njit
def transpose_tile(ctx: isa.Context, tile: TileRows, rev_rows: bool, rev_cols: bool) -> None:
    """Transpose a grey tile of `src_rows` x `src_cols` (the rows and width of `tile`, of
    its source) into `src_cols` x `src_rows`:
    output (r, c) = source (R(c), C(r)) with R(c) = src_rows - 1 - c when `rev_rows` (else
    c) and C(r) = src_cols - 1 - r when `rev_cols` (else r). So plain, `rev_rows` and
    `rev_cols` give transpose, clockwise and counter-clockwise rotation.

    Works in 64 x 64 blocks: 64 source rows are loaded (in reverse order for `rev_rows`),
    six rounds of byte interleaves of register i with register i + 32 transpose the block
    (each round rotates the 12-bit (row, column) index by one bit), and each result register
    is stored as one output row (in reverse order for `rev_cols`). Grey only; see
    `transpose3_tile` for RGB."""
    src, dst, src_rows, src_cols, in_pitch, out_pitch = tile
    a = np.zeros((64, isa.LANES_8), np.uint8)
    b = np.zeros((64, isa.LANES_8), np.uint8)
    for c0 in range(0, src_rows, 64):
        block_rows = min(64, src_rows - c0)
        for r0 in range(0, src_cols, 64):
            # The 64 source columns loaded: register lane k <-> output row of that column.
            first = max(src_cols - r0 - 64, 0) if rev_cols else r0
            for k in range(block_rows):
                row = src_rows - 1 - (c0 + k) if rev_rows else c0 + k
                if rev_cols:
                    isa.loadu_u8(ctx, src + row * in_pitch + first, a[k])
                else:
                    isa.load_u8(ctx, src + row * in_pitch + first, a[k])
            _transpose_block(ctx, a, b)
            for k in range(64):
                r = src_cols - 1 - (first + k) if rev_cols else first + k
                if r0 <= r < min(r0 + 64, src_cols):
                    isa.store(ctx, a[k], dst + r * out_pitch + c0)


@njit
def resize_nearest_tile(ctx: isa.Context, tile: TileRows, offsets: int, first: int, shift: int,
                        src_rows: npt.NDArray[np.int32]) -> None:
    """Nearest-neighbour rows (`tile.width` bytes each): output byte j of row r is source
    byte `offsets`[first + j] - `shift` of tile row `src_rows`[r]; 32 bytes per gather."""
    src, dst, rows, out_bytes, in_pitch, out_pitch = tile
    idx = np.empty(isa.LANES_16, np.uint16)
    greg = np.empty(isa.LANES_16, np.uint16)
    g0 = np.empty(isa.LANES_16, np.uint16)
    g1 = np.empty(isa.LANES_16, np.uint16)
    out = np.empty(isa.LANES_8, np.uint8)
    for r in range(rows):
        base = src + src_rows[r] * in_pitch - shift
        for x in range(0, out_bytes, isa.VECTOR_BYTES):
            at = offsets + 2 * (first + x)
            isa.load_u16(ctx, at, idx)
            isa.gather_a_u8(ctx, base, idx, greg)
            isa.gather_d(ctx, greg, g0)
            isa.load_u16(ctx, at + isa.VECTOR_BYTES, idx)
            isa.gather_a_u8(ctx, base, idx, greg)
            isa.gather_d(ctx, greg, g1)
            isa.pack_i16_u8(ctx, isa.as_i16(g0), isa.as_i16(g1), out)
            isa.store(ctx, out, dst + r * out_pitch + x)


class ScratchTile(NamedTuple):
    """Where a tile of a two-pass kernel (bilinear resize, pyrDown, pyrUp) lies in TCM: its
    source at `src` (rows `in_pitch` bytes apart), its output at `dst` (`rows` rows of
    `out_bytes`, `out_pitch` apart), its int16 scratch rows at `scratch` (`s_pitch`
    apart)."""

    src: int
    dst: int
    scratch: int
    s_pitch: int
    rows: int
    out_bytes: int
    in_pitch: int
    out_pitch: int


class ColumnTable(NamedTuple):
    """The column table in TCM: gather offsets (uint16) at `offsets`, the coefficients a0
    and a1 (int16) at `alpha0` and `alpha1`; the tile's first output byte `first`, the
    offset `shift` of its source from the table's, the bytes of a pixel."""

    offsets: int
    alpha0: int
    alpha1: int
    first: int
    shift: int
    pixel_bytes: int


class RowTable(NamedTuple):
    """The tile's rows: the source rows its output rows read (`used`), per output row the
    scratch rows of its two taps (`slot0`, `slot1`) and their coefficients (`beta0`,
    `beta1`)."""

    used: npt.NDArray[np.int32]
    slot0: npt.NDArray[np.int32]
    slot1: npt.NDArray[np.int32]
    beta0: npt.NDArray[np.int32]
    beta1: npt.NDArray[np.int32]


@njit
def resize_linear_tile(ctx: isa.Context, tile: ScratchTile, columns: ColumnTable,
                       row_table: RowTable) -> None:
    """OpenCV's 8-bit bilinear resize of the rows of a tile.

    Horizontal pass, once for each tile row in `used` (the source rows the output rows
    read), into int16 `scratch` rows `s_pitch` apart: for output byte j, h = S[o] * a0 +
    S[o + pixel_bytes] * a1 (11-bit coefficients, exact in int32) from two byte gathers at
    the table offset o, kept as h >> 4. Vertical pass, for output row r with coefficients
    b0, b1 and scratch rows `slot0`[r], `slot1`[r] (the same one where OpenCV clamps at an
    edge): ((h0 * b0) >> 16) + ((h1 * b1) >> 16), then a rounding shift by 2 and a
    saturating pack to uint8."""
    src, dst, scratch, s_pitch, rows, out_bytes, in_pitch, out_pitch = tile
    offsets, alpha0, alpha1, first, shift, pixel_bytes = columns
    used, slot0, slot1, beta0, beta1 = row_table
    idx = np.empty(isa.LANES_16, np.uint16)
    a0 = np.empty(isa.LANES_16, np.int16)
    a1 = np.empty(isa.LANES_16, np.int16)
    greg = np.empty(isa.LANES_16, np.uint16)
    s0 = np.empty(isa.LANES_16, np.uint16)
    s1 = np.empty(isa.LANES_16, np.uint16)
    lo = np.empty(isa.LANES_32, np.int32)
    hi = np.empty(isa.LANES_32, np.int32)
    t = np.empty(isa.LANES_32, np.int32)
    h = np.empty(isa.LANES_16, np.int16)
    for u in range(used.size):
        base = src + used[u] * in_pitch - shift
        for x in range(0, 2 * out_bytes, isa.VECTOR_BYTES):
            at = 2 * first + x
            isa.load_u16(ctx, offsets + at, idx)
            isa.load_i16(ctx, alpha0 + at, a0)
            isa.load_i16(ctx, alpha1 + at, a1)
            isa.gather_a_u8(ctx, base, idx, greg)
            isa.gather_d(ctx, greg, s0)
            isa.gather_a_u8(ctx, base + pixel_bytes, idx, greg)
            isa.gather_d(ctx, greg, s1)
            isa.mul_lo_i16_i32(ctx, isa.as_i16(s0), a0, lo)
            isa.mula_lo_i16_i32(ctx, lo, isa.as_i16(s1), a1, lo)
            isa.sra_i32(ctx, lo, 4, lo)
            isa.mul_hi_i16_i32(ctx, isa.as_i16(s0), a0, hi)
            isa.mula_hi_i16_i32(ctx, hi, isa.as_i16(s1), a1, hi)
            isa.sra_i32(ctx, hi, 4, hi)
            isa.pack_i32_i16(ctx, lo, hi, h)
            isa.store(ctx, h, scratch + u * s_pitch + x)
    h0 = np.empty(isa.LANES_16, np.int16)
    h1 = np.empty(isa.LANES_16, np.int16)
    v = (np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16))
    b0 = np.empty(isa.LANES_16, np.int16)
    b1 = np.empty(isa.LANES_16, np.int16)
    out = np.empty(isa.LANES_8, np.uint8)
    for r in range(rows):
        isa.splat_i16(ctx, beta0[r], b0)
        isa.splat_i16(ctx, beta1[r], b1)
        for x in range(0, out_bytes, isa.VECTOR_BYTES):
            for half in range(2):
                at = 2 * x + half * isa.VECTOR_BYTES
                isa.load_i16(ctx, scratch + slot0[r] * s_pitch + at, h0)
                isa.load_i16(ctx, scratch + slot1[r] * s_pitch + at, h1)
                isa.mul_lo_i16_i32(ctx, h0, b0, lo)
                isa.sra_i32(ctx, lo, 16, lo)
                isa.mul_lo_i16_i32(ctx, h1, b1, t)
                isa.sra_i32(ctx, t, 16, t)
                isa.add_i32(ctx, lo, t, lo)
                isa.mul_hi_i16_i32(ctx, h0, b0, hi)
                isa.sra_i32(ctx, hi, 16, hi)
                isa.mul_hi_i16_i32(ctx, h1, b1, t)
                isa.sra_i32(ctx, t, 16, t)
                isa.add_i32(ctx, hi, t, hi)
                isa.pack_i32_i16(ctx, lo, hi, v[half])
            isa.packr_i16_u8(ctx, v[0], v[1], 2, out)
            isa.store(ctx, out, dst + r * out_pitch + x)


@njit
def pyr_down_tile(ctx: isa.Context, tile: ScratchTile, pixel_bytes: int) -> None:
    """pyrDown of a tile: `rows` outputs of `width` bytes (grey or RGB) from 2 * rows + 3
    source rows that start two rows and two pixels before the tile's first output's source
    pixel.

    Horizontal pass (each source row, into int16 `scratch` rows `s_pitch` apart): the five
    taps of 64 output bytes come from unaligned loads at the tap's pixel offset, picked by
    the even/odd byte deinterleaves (grey; loads at offsets 0, 2 and 4 serve all five taps)
    or by one two-register select (RGB: output byte J reads source byte 2J - J % 3 of the
    tap, an index vector per J % 3 phase of the chunk), weighted 1 4 6 4 1 by widening
    multiply-accumulates (at most 4080). Vertical pass: the
    same weights over five scratch rows in 16-bit lanes read as unsigned (at most 65280),
    plus 128, shifted right by 8 (logical): OpenCV's (sum + 128) >> 8."""
    src, dst, scratch, s_pitch, rows, width, in_pitch, out_pitch = tile
    a = np.empty(isa.LANES_8, np.uint8)
    b = np.empty(isa.LANES_8, np.uint8)
    taps = (np.empty(isa.LANES_8, np.uint8), np.empty(isa.LANES_8, np.uint8),
            np.empty(isa.LANES_8, np.uint8), np.empty(isa.LANES_8, np.uint8),
            np.empty(isa.LANES_8, np.uint8))
    acc = np.empty(isa.LANES_16, np.int16)
    one = isa.splat_i16(ctx, 1)
    four = isa.splat_i16(ctx, 4)
    six = isa.splat_i16(ctx, 6)
    c128 = isa.splat_i16(ctx, 128)
    weights = (one, four, six, four, one)
    phases = np.zeros((3, isa.LANES_8), np.uint8)
    for p in range(3):
        for j in range(64):
            phases[p, j] = 2 * j - (p + j) % 3 + p
    for i in range(2 * rows + 3):
        row = src + i * in_pitch
        for j in range(0, width, 64):
            if pixel_bytes == 1:
                for shift in range(3):
                    isa.loadu_u8(ctx, row + 2 * j + 2 * shift, a)
                    isa.loadu_u8(ctx, row + 2 * j + 2 * shift + 64, b)
                    isa.deinterleave_even_u8(ctx, a, b, taps[2 * shift])
                    if shift < 2:
                        isa.deinterleave_odd_u8(ctx, a, b, taps[2 * shift + 1])
            else:
                start = row + 2 * j - j % 3
                for t in range(5):
                    isa.loadu_u8(ctx, start + 3 * t, a)
                    isa.loadu_u8(ctx, start + 3 * t + 64, b)
                    isa.sel_u8(ctx, a, b, phases[j % 3], taps[t])
            isa.mul_lo_u8_i16(ctx, taps[0], one, acc)
            for k in range(1, 5):
                isa.mula_lo_u8_i16(ctx, acc, taps[k], weights[k], acc)
            isa.store(ctx, acc, scratch + i * s_pitch + 2 * j)
            isa.mul_hi_u8_i16(ctx, taps[0], one, acc)
            for k in range(1, 5):
                isa.mula_hi_u8_i16(ctx, acc, taps[k], weights[k], acc)
            isa.store(ctx, acc, scratch + i * s_pitch + 2 * j + 64)
    h = (np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16),
         np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16),
         np.empty(isa.LANES_16, np.int16))
    v = (np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16))
    out = np.empty(isa.LANES_8, np.uint8)
    for r in range(rows):
        for j in range(0, width, 64):
            for half in range(2):
                for k in range(5):
                    isa.load_i16(ctx, scratch + (2 * r + k) * s_pitch + 2 * j + 64 * half, h[k])
                isa.add_i16(ctx, h[0], h[4], v[half])
                isa.mula_i16(ctx, v[half], h[1], four, v[half])
                isa.mula_i16(ctx, v[half], h[2], six, v[half])
                isa.mula_i16(ctx, v[half], h[3], four, v[half])
                isa.add_i16(ctx, v[half], c128, v[half])
                isa.srl_i16(ctx, v[half], 8, v[half])
            isa.pack_i16_u8(ctx, v[0], v[1], out)
            isa.store(ctx, out, dst + r * out_pitch + j)


@njit
def pyr_up_tile(ctx: isa.Context, tile: ScratchTile, pixel_bytes: int, src_rows: int,
                src_cols: int, right_edge: bool) -> None:
    """pyrUp of a tile: `rows` (even) output rows of `width` bytes (an even number of
    pixels, grey or RGB) from a source tile of `src_rows` rows of `src_cols` bytes that
    starts one row and one pixel before the first output's source pixel.

    For each source row, a vertical pass over the tile's columns gives into two int16
    `scratch` rows the even output row's 1 6 1 sum and the odd one's 4 4 sum (the row below
    the image's last is the last row again: OpenCV's pyrUp replicates at the bottom and
    right, reflects at the top and left). With `right_edge`, the column past the image
    repeats the last pixel (a copy of its lanes). A horizontal pass over each scratch row
    forms even outputs 1 6 1 and odd outputs 4 4 from three unaligned loads one pixel apart,
    rounds (sum + 32) >> 6 into bytes and interleaves even and odd outputs (bytes for grey,
    3-byte groups with a two-register select for RGB)."""
    src, dst, scratch, s_pitch, rows, width, in_pitch, out_pitch = tile
    a = np.empty(isa.LANES_8, np.uint8)
    c = np.empty(isa.LANES_8, np.uint8)
    d = np.empty(isa.LANES_8, np.uint8)
    acc = np.empty(isa.LANES_16, np.int16)
    one = isa.splat_i16(ctx, 1)
    four = isa.splat_i16(ctx, 4)
    six = isa.splat_i16(ctx, 6)
    vm = np.empty(isa.LANES_16, np.int16)
    v0 = np.empty(isa.LANES_16, np.int16)
    vp = np.empty(isa.LANES_16, np.int16)
    ev = (np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16))
    od = (np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16))
    e8 = np.empty(isa.LANES_8, np.uint8)
    o8 = np.empty(isa.LANES_8, np.uint8)
    out = np.empty(isa.LANES_8, np.uint8)
    # RGB: chunks of 21 pixels (63 bytes) of even and of odd outputs, put together as
    # 3-byte groups: output byte m of the chunk is byte 3 (m // 6) + m % 6 of the even
    # outputs, or of the odd ones (lanes 64..) for m % 6 >= 3.
    step = 64 if pixel_bytes == 1 else 63
    groups = np.zeros((2, isa.LANES_8), np.uint8)
    for v in range(2):
        for j in range(64):
            m = 64 * v + j
            g, w = m // 6, m % 6
            groups[v, j] = 3 * g + w if w < 3 else 64 + 3 * g + w - 3
    for ry in range(rows // 2):
        above = src + ry * in_pitch
        centre = above + in_pitch
        below = src + min(ry + 2, src_rows - 1) * in_pitch
        even_row = scratch
        odd_row = scratch + s_pitch
        for x in range(0, src_cols, 64):
            isa.load_u8(ctx, above + x, a)
            isa.load_u8(ctx, centre + x, c)
            isa.load_u8(ctx, below + x, d)
            for half in range(2):
                at = 2 * x + 64 * half
                if half == 0:
                    isa.mul_lo_u8_i16(ctx, a, one, acc)
                    isa.mula_lo_u8_i16(ctx, acc, c, six, acc)
                    isa.mula_lo_u8_i16(ctx, acc, d, one, acc)
                else:
                    isa.mul_hi_u8_i16(ctx, a, one, acc)
                    isa.mula_hi_u8_i16(ctx, acc, c, six, acc)
                    isa.mula_hi_u8_i16(ctx, acc, d, one, acc)
                isa.store(ctx, acc, even_row + at)
                if half == 0:
                    isa.mul_lo_u8_i16(ctx, c, four, acc)
                    isa.mula_lo_u8_i16(ctx, acc, d, four, acc)
                else:
                    isa.mul_hi_u8_i16(ctx, c, four, acc)
                    isa.mula_hi_u8_i16(ctx, acc, d, four, acc)
                isa.store(ctx, acc, odd_row + at)
        if right_edge:
            for srow in (even_row, odd_row):
                isa.loadu_i16(ctx, srow + 2 * (src_cols - pixel_bytes), acc)
                isa.store_partial(ctx, acc, srow + 2 * src_cols, 2 * pixel_bytes)
        half_bytes = width // 2
        for k in range(2):
            srow = even_row if k == 0 else odd_row
            d_row = dst + (2 * ry + k) * out_pitch
            for x in range(0, half_bytes, step):
                for half in range(2):
                    at = srow + 2 * (x + 32 * half)
                    isa.loadu_i16(ctx, at, vm)
                    isa.loadu_i16(ctx, at + 2 * pixel_bytes, v0)
                    isa.loadu_i16(ctx, at + 4 * pixel_bytes, vp)
                    isa.add_i16(ctx, vm, vp, ev[half])
                    isa.mula_i16(ctx, ev[half], v0, six, ev[half])
                    isa.add_i16(ctx, v0, vp, od[half])
                    isa.sll_i16(ctx, od[half], 2, od[half])
                isa.packr_i16_u8(ctx, ev[0], ev[1], 6, e8)
                isa.packr_i16_u8(ctx, od[0], od[1], 6, o8)
                if pixel_bytes == 1:
                    isa.interleave_lo_u8(ctx, e8, o8, out)
                    isa.store(ctx, out, d_row + 2 * x)
                    isa.interleave_hi_u8(ctx, e8, o8, out)
                    isa.store(ctx, out, d_row + 2 * x + 64)
                    continue
                nbytes = 2 * min(step, half_bytes - x)
                for v in range(2):
                    if 64 * v < nbytes:
                        isa.sel_u8(ctx, e8, o8, groups[v], out)
                        isa.store_partial(ctx, out, d_row + 2 * x + 64 * v,
                                          min(64, nbytes - 64 * v))


@njit
def transpose3_tile(ctx: isa.Context, tile: TileRows, rev_rows: bool, rev_cols: bool) -> None:
    """`transpose_tile` for 3-byte (RGB) pixels. Each block of 64 x 64 pixels is split into
    three channel planes (two two-register selects per plane and source row), the planes are
    transposed as bytes, and each output row is put back together from the planes (two
    selects per output vector). Only the source and output bytes of real pixels are read and
    written."""
    src, dst, src_rows, src_cols, in_pitch, out_pitch = tile
    planes = np.zeros((3, 64, isa.LANES_8), np.uint8)
    spare = np.zeros((64, isa.LANES_8), np.uint8)
    raw = np.zeros((3, isa.LANES_8), np.uint8)
    t = np.empty(isa.LANES_8, np.uint8)
    out = np.empty(isa.LANES_8, np.uint8)
    split_a = np.zeros((3, isa.LANES_8), np.uint8)
    split_b = np.zeros((3, isa.LANES_8), np.uint8)
    join_a = np.zeros((3, isa.LANES_8), np.uint8)
    join_b = np.zeros((3, isa.LANES_8), np.uint8)
    for c in range(3):
        for i in range(64):
            b = 3 * i + c
            split_a[c, i] = b if b < 128 else 0
            split_b[c, i] = i if b < 128 else 64 + b - 128
    for j in range(3):
        for m in range(64):
            b = 64 * j + m
            p, ch = b // 3, b % 3
            join_a[j, m] = p if ch == 0 else (64 + p if ch == 1 else 0)
            join_b[j, m] = m if ch < 2 else 64 + p
    for c0 in range(0, src_rows, 64):
        block_rows = min(64, src_rows - c0)
        out_bytes = 3 * block_rows
        for r0 in range(0, src_cols, 64):
            first = max(src_cols - r0 - 64, 0) if rev_cols else r0
            in_bytes = 3 * min(64, src_cols - first)
            for k in range(block_rows):
                row = src_rows - 1 - (c0 + k) if rev_rows else c0 + k
                at = src + row * in_pitch + 3 * first
                for v in range(3):
                    if 64 * v < in_bytes:
                        isa.loadu_u8(ctx, at + 64 * v, raw[v])
                for c in range(3):
                    isa.sel_u8(ctx, raw[0], raw[1], split_a[c], t)
                    isa.sel_u8(ctx, t, raw[2], split_b[c], planes[c, k])
            for c in range(3):
                _transpose_block(ctx, planes[c], spare)
            for k in range(64):
                r = src_cols - 1 - (first + k) if rev_cols else first + k
                if not r0 <= r < min(r0 + 64, src_cols):
                    continue
                at = dst + r * out_pitch + 3 * c0
                for j in range(3):
                    if 64 * j >= out_bytes:
                        break
                    isa.sel_u8(ctx, planes[0, k], planes[1, k], join_a[j], t)
                    isa.sel_u8(ctx, t, planes[2, k], join_b[j], out)
                    if 64 * j + 64 <= out_bytes:
                        isa.store(ctx, out, at + 64 * j)
                    else:
                        isa.store_partial(ctx, out, at + 64 * j, out_bytes - 64 * j)


class AreaTable(NamedTuple):
    """An area resize's column table in TCM (`offsets`), its factors `kx` x `ky`, the bytes
    of a pixel and the float32 `scale`, 1 / (kx * ky)."""

    offsets: int
    kx: int
    ky: int
    pixel_bytes: int
    scale: float


@njit
def resize_area_tile(ctx: isa.Context, tile: TileRows, scratch: int, src_bytes: int,
                     table: AreaTable) -> None:
    """OpenCV's area resize by integer factors `kx` x `ky` (not 2 x 2): each output byte is
    round-half-even(float32(sum of its kx x ky source bytes) * `scale`), `scale` being
    float32(1 / (kx * ky)).

    For each output row the ky source rows are summed into one int16 `scratch` row (lanes
    read as unsigned, ky <= 257); 16-bit gathers at the table `offsets` (the byte offset of
    each output byte's first pixel in the scratch row), one per horizontal tap with the base
    moved a pixel on, are widened and summed in int32, converted to float32, scaled and
    rounded, and packed into bytes."""
    src, dst, rows, out_bytes, in_pitch, out_pitch = tile
    offsets, kx, ky, pixel_bytes, scale = table
    raw = np.empty(isa.LANES_8, np.uint8)
    acc0 = np.empty(isa.LANES_16, np.int16)
    acc1 = np.empty(isa.LANES_16, np.int16)
    one = isa.splat_i16(ctx, 1)
    s = isa.splat_f32(ctx, scale)
    idx = np.empty(isa.LANES_16, np.uint16)
    greg = np.empty(isa.LANES_16, np.int16)
    g = np.empty(isa.LANES_16, np.int16)
    lo = np.empty(isa.LANES_32, np.int32)
    hi = np.empty(isa.LANES_32, np.int32)
    t = np.empty(isa.LANES_32, np.int32)
    f = np.empty(isa.LANES_32, np.float32)
    h = (np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16))
    out = np.empty(isa.LANES_8, np.uint8)
    for r in range(rows):
        for x in range(0, src_bytes, isa.VECTOR_BYTES):
            for k in range(ky):
                isa.load_u8(ctx, src + (r * ky + k) * in_pitch + x, raw)
                if k == 0:
                    isa.mul_lo_u8_i16(ctx, raw, one, acc0)
                    isa.mul_hi_u8_i16(ctx, raw, one, acc1)
                else:
                    isa.mula_lo_u8_i16(ctx, acc0, raw, one, acc0)
                    isa.mula_hi_u8_i16(ctx, acc1, raw, one, acc1)
            isa.store(ctx, acc0, scratch + 2 * x)
            isa.store(ctx, acc1, scratch + 2 * x + isa.VECTOR_BYTES)
        for j in range(0, out_bytes, isa.VECTOR_BYTES):
            for half in range(2):
                isa.load_u16(ctx, offsets + 2 * j + half * isa.VECTOR_BYTES, idx)
                for k in range(kx):
                    isa.gather_a_i16(ctx, scratch + 2 * pixel_bytes * k, idx, greg)
                    isa.gather_d(ctx, greg, g)
                    if k == 0:
                        isa.unpack_lo_u16_i32(ctx, g, lo)
                        isa.unpack_hi_u16_i32(ctx, g, hi)
                    else:
                        isa.unpack_lo_u16_i32(ctx, g, t)
                        isa.add_i32(ctx, lo, t, lo)
                        isa.unpack_hi_u16_i32(ctx, g, t)
                        isa.add_i32(ctx, hi, t, hi)
                isa.cvt_i32_f32(ctx, lo, f)
                isa.mul_f32(ctx, f, s, f)
                isa.round_f32_i32(ctx, f, lo)
                isa.cvt_i32_f32(ctx, hi, f)
                isa.mul_f32(ctx, f, s, f)
                isa.round_f32_i32(ctx, f, hi)
                isa.pack_i32_i16(ctx, lo, hi, h[half])
            isa.pack_i16_u8(ctx, h[0], h[1], out)
            isa.store(ctx, out, dst + r * out_pitch + j)

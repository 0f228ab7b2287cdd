"""Kernels of the feature detectors (`emu.vdsp.ops.cv_features`): Canny and Harris.

Every value that depends on pixels goes through the vDSP ISA emulation; the Python code
around the ops is loop control and address arithmetic. Images and scratch rows are kept in
TCM rows with at least one vector of slack after the last element, so whole vectors may be
loaded and stored past a row's end.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.ops.cv_kernel_records import Inside, TileIn

TG22 = 13573
"""tan(22.5 degrees) in 15-bit fixed point, rounded: the direction test of Canny's
non-maximum suppression."""
CLASS_WEAK = 128
"""Edge-class map value of a pixel that passed non-maximum suppression and the low
threshold (an edge only if connected to a strong one)."""
CLASS_STRONG = 255
"""Edge-class map value of an edge pixel (above the high threshold, or connected to one)."""


class CannyParams(NamedTuple):
    """Canny's parameters: the Sobel aperture, L2 magnitudes or L1, the two thresholds in
    magnitude units."""

    ksize: int
    l2: bool
    low: int
    high: int


class CannyLayout(NamedTuple):
    """Addresses in a Canny tile's scratch: the edge-class map (rows `p8` apart), dx and dy
    (int16 rows `p16` apart), the magnitudes (int32 rows `p32` apart), the Sobel scratch
    rows S and D."""

    work: int
    p8: int
    dx: int
    dy: int
    p16: int
    mag: int
    p32: int
    s: int
    d: int


class SobelRows(NamedTuple):
    """Where `sobel_row` writes one row: the smoothed (S) and differentiated (D) columns,
    then dx and dy, each as int16 rows."""

    s: int
    d: int
    dx: int
    dy: int


class HarrisParams(NamedTuple):
    """cornerHarris's parameters: the Sobel aperture, the block size, the derivatives'
    scale and the response's k."""

    ksize: int
    block: int
    scale: float
    k: float


class HarrisLayout(NamedTuple):
    """Addresses in a Harris tile's scratch: the three product planes (rows `pp` apart),
    the block's column sums, the dx and dy rows, the Sobel scratch rows S and D."""

    prod: int
    pp: int
    vrow: int
    dx: int
    dy: int
    s: int
    d: int


# --- Sobel --------------------------------------------------------------------------------


@njit
def sobel_row(ctx: isa.Context, src: int, in_pitch: int, cols: int, ksize: int,
              at: SobelRows, raw: npt.NDArray[np.uint8], v: npt.NDArray[np.int16]) -> None:
    """OpenCV's integer Sobel derivatives (int16, ksize 3 or 5) of `cols` positions of one
    row: position j reads source columns j..j + ksize - 1 of the ksize rows from `src`
    (`in_pitch` apart). The vertical pass writes the smoothed (S) and differentiated (D)
    columns as int16 rows at `at.s` and `at.d`; the horizontal pass gives dx (the derivative
    across S) at `at.dx` and dy (the smoothing across D) at `at.dy`. `raw` is ksize uint8
    registers, `v` eight int16 registers."""
    s_at, d_at, dx_at, dy_at = at
    taps = ksize
    n_src = cols + taps - 1
    s = v[5]
    d = v[6]
    t = v[7]
    for c in range(0, n_src, isa.VECTOR_BYTES):
        for k in range(taps):
            isa.loadu_u8(ctx, src + k * in_pitch + c, raw[k])
        for half in range(2):
            for k in range(taps):
                if half == 0:
                    isa.unpack_lo_u8_i16(ctx, raw[k], v[k])
                else:
                    isa.unpack_hi_u8_i16(ctx, raw[k], v[k])
            if taps == 3:
                isa.add_i16(ctx, v[0], v[2], s)  # 1 2 1
                isa.add_i16(ctx, s, v[1], s)
                isa.add_i16(ctx, s, v[1], s)
                isa.sub_i16(ctx, v[2], v[0], d)  # -1 0 1
            else:
                isa.add_i16(ctx, v[1], v[3], t)  # 1 4 6 4 1
                isa.add_i16(ctx, t, t, t)
                isa.add_i16(ctx, t, t, t)
                isa.add_i16(ctx, v[0], v[4], s)
                isa.add_i16(ctx, s, t, s)
                isa.add_i16(ctx, v[2], v[2], t)
                isa.add_i16(ctx, s, t, s)
                isa.add_i16(ctx, t, t, t)
                isa.add_i16(ctx, s, t, s)
                isa.sub_i16(ctx, v[3], v[1], t)  # -1 -2 0 2 1
                isa.add_i16(ctx, t, t, t)
                isa.sub_i16(ctx, v[4], v[0], d)
                isa.add_i16(ctx, d, t, d)
            isa.storeu(ctx, s, s_at + 2 * c + 64 * half)
            isa.storeu(ctx, d, d_at + 2 * c + 64 * half)
    for j in range(0, cols, 32):
        a = s_at + 2 * j
        b = d_at + 2 * j
        for k in range(taps):
            isa.loadu_i16(ctx, a + 2 * k, v[k])
        if taps == 3:
            isa.sub_i16(ctx, v[2], v[0], s)
        else:
            isa.sub_i16(ctx, v[3], v[1], t)
            isa.add_i16(ctx, t, t, t)
            isa.sub_i16(ctx, v[4], v[0], s)
            isa.add_i16(ctx, s, t, s)
        isa.storeu(ctx, s, dx_at + 2 * j)
        for k in range(taps):
            isa.loadu_i16(ctx, b + 2 * k, v[k])
        if taps == 3:
            isa.add_i16(ctx, v[0], v[2], d)
            isa.add_i16(ctx, d, v[1], d)
            isa.add_i16(ctx, d, v[1], d)
        else:
            isa.add_i16(ctx, v[1], v[3], t)
            isa.add_i16(ctx, t, t, t)
            isa.add_i16(ctx, t, t, t)
            isa.add_i16(ctx, v[0], v[4], d)
            isa.add_i16(ctx, d, t, d)
            isa.add_i16(ctx, v[2], v[2], t)
            isa.add_i16(ctx, d, t, d)
            isa.add_i16(ctx, t, t, t)
            isa.add_i16(ctx, d, t, d)
        isa.storeu(ctx, d, dy_at + 2 * j)


# --- Canny --------------------------------------------------------------------------------


@njit
def _lane_range(ctx: isa.Context, iota: npt.NDArray[np.uint8], lo: int, hi: int,
                full: npt.NDArray[np.uint8], zero: npt.NDArray[np.uint8],
                out: npt.NDArray[np.uint8]) -> None:
    """255 in lanes lo..hi (0 <= lo, hi <= 63), 0 elsewhere."""
    m1 = isa.le_u8(ctx, isa.splat_u8(ctx, lo), iota)
    m2 = isa.le_u8(ctx, iota, isa.splat_u8(ctx, hi))
    isa.and_b(ctx, m1, m2, m1)
    isa.mov_t(ctx, full, zero, m1, out)


@njit
def converge(ctx: isa.Context, work: int, pitch: int, h: int, w: int) -> int:
    """Hysteresis inside one tile of the edge-class map (0 none, 128 weak, 255 strong): rows
    1..h, columns 1..w are the tile, row 0 and h + 1 and columns 0 and w + 1 the halo of
    its neighbours, and the bytes before row 0 and after column w + 1 are zero. A weak pixel
    with a strong one among its 8 neighbours becomes strong: new = max(v, min(max of the
    3x3 neighbourhood, 2v saturated)). Rows are updated in place, downwards and then
    upwards, each row again until it no longer changes (a row step moves a chain one pixel
    sideways), until a down-and-up sweep changes nothing. Returns which sides of the tile's
    outer ring changed (only such a change can matter to a neighbouring tile): bit 0 row 1,
    bit 1 row h, bit 2 column 1, bit 3 column w."""
    x = np.empty((9, isa.LANES_8), np.uint8)
    mx = np.empty(isa.LANES_8, np.uint8)
    new = np.empty(isa.LANES_8, np.uint8)
    diff = np.empty(isa.LANES_8, np.uint8)
    row_acc = np.empty(isa.LANES_8, np.uint8)
    ring = np.zeros((4, isa.LANES_8), np.uint8)  # top, bottom, left, right
    for side in range(4):
        isa.splat_u8(ctx, 0, ring[side])
    zero = isa.splat_u8(ctx, 0)
    full = isa.splat_u8(ctx, 255)
    iota = np.arange(isa.LANES_8).astype(np.uint8)  # a constant register: lane numbers
    last = w // 64  # the chunk holding column w
    inner_first = np.empty(isa.LANES_8, np.uint8)
    inner_last = np.empty(isa.LANES_8, np.uint8)
    col_first = np.empty(isa.LANES_8, np.uint8)
    col_last = np.empty(isa.LANES_8, np.uint8)
    _lane_range(ctx, iota, 1, min(63, w), full, zero, inner_first)
    _lane_range(ctx, iota, 0, w % 64, full, zero, inner_last)
    _lane_range(ctx, iota, 1, 1, full, zero, col_first)
    _lane_range(ctx, iota, w % 64, w % 64, full, zero, col_last)
    chunks = (w + 2 + 63) // 64
    while True:
        changed = False
        for sweep in range(2):
            for t in range(h):
                r = 1 + t if sweep == 0 else h - t
                while True:
                    isa.splat_u8(ctx, 0, row_acc)
                    for ci in range(chunks):
                        at = work + r * pitch + 64 * ci
                        for dr in range(3):
                            for dc in range(3):
                                isa.loadu_u8(ctx, at + (dr - 1) * pitch + dc - 1, x[3 * dr + dc])
                        isa.max_u8(ctx, x[0], x[1], mx)
                        for k in range(2, 9):
                            isa.max_u8(ctx, mx, x[k], mx)
                        isa.adds_u8(ctx, x[4], x[4], new)
                        isa.min_u8(ctx, mx, new, new)
                        isa.max_u8(ctx, new, x[4], new)
                        isa.subs_u8(ctx, new, x[4], diff)
                        isa.max_u8(ctx, row_acc, diff, row_acc)
                        for side in range(2):
                            if r != (1 if side == 0 else h) or ci > last:
                                continue
                            if ci == 0 or ci == last:
                                if ci == 0:
                                    isa.min_u8(ctx, diff, inner_first, mx)
                                if ci == last:
                                    isa.min_u8(ctx, mx if ci == 0 else diff, inner_last, mx)
                                isa.max_u8(ctx, ring[side], mx, ring[side])
                            else:
                                isa.max_u8(ctx, ring[side], diff, ring[side])
                        if ci == 0:
                            isa.min_u8(ctx, diff, col_first, mx)
                            isa.max_u8(ctx, ring[2], mx, ring[2])
                        if ci == last:
                            isa.min_u8(ctx, diff, col_last, mx)
                            isa.max_u8(ctx, ring[3], mx, ring[3])
                        isa.storeu(ctx, new, at)
                    if isa.rmax_u8(ctx, row_acc) == 0:
                        break
                    changed = True
        if not changed:
            break
    bits = 0
    for side in range(4):
        if isa.rmax_u8(ctx, ring[side]) != 0:
            bits |= 1 << side
    return bits


@njit
def canny_classify_tile(ctx: isa.Context, tile: TileIn, params: CannyParams,
                        lay: CannyLayout, inside: Inside,
                        flags: npt.NDArray[np.int64]) -> None:
    """Canny's first pass on one tile of h x w output pixels: Sobel derivatives and
    magnitudes on the (h + 4) x (w + 4) grid around it (grid rows/columns outside `inside`
    lie outside the image: magnitude 0), non-maximum suppression and the two thresholds on
    the (h + 2) x (w + 2) grid (the tile and a ring of one pixel) into the edge-class map at
    `lay.work`, then hysteresis inside the tile (`converge`), whose result goes to
    flags[0]."""
    src, in_pitch, h, w = tile
    ksize, l2, _, _ = params
    work, p8, dxa, dya, p16, mag, p32, s_at, d_at = lay
    row_lo, row_hi, col_lo, col_hi = inside
    raw = np.empty((5, isa.LANES_8), np.uint8)
    v = np.empty((8, isa.LANES_16), np.int16)
    gh, gw = h + 4, w + 4
    zero32 = isa.splat_i32(ctx, 0)
    zero8 = isa.splat_u8(ctx, 0)
    dxv = np.empty(isa.LANES_16, np.int16)
    dyv = np.empty(isa.LANES_16, np.int16)
    m_lo = np.empty(isa.LANES_32, np.int32)
    m_hi = np.empty(isa.LANES_32, np.int32)
    for gi in range(gh):
        row = mag + gi * p32
        if gi < row_lo or gi >= row_hi:
            for q in range(0, 4 * gw, 64):
                isa.storeu(ctx, zero32, row + q)
            continue
        sobel_row(ctx, src + gi * in_pitch, in_pitch, gw, ksize,
                  SobelRows(s_at, d_at, dxa + gi * p16, dya + gi * p16), raw, v)
        for j in range(0, gw, 32):
            isa.loadu_i16(ctx, dxa + gi * p16 + 2 * j, dxv)
            isa.loadu_i16(ctx, dya + gi * p16 + 2 * j, dyv)
            if l2:
                isa.mul_lo_i16_i32(ctx, dxv, dxv, m_lo)
                isa.mula_lo_i16_i32(ctx, m_lo, dyv, dyv, m_lo)
                isa.mul_hi_i16_i32(ctx, dxv, dxv, m_hi)
                isa.mula_hi_i16_i32(ctx, m_hi, dyv, dyv, m_hi)
            else:
                isa.abs_i16(ctx, dxv, v[0])
                isa.abs_i16(ctx, dyv, v[1])
                isa.add_i16(ctx, v[0], v[1], v[0])
                isa.unpack_lo_i16_i32(ctx, v[0], m_lo)
                isa.unpack_hi_i16_i32(ctx, v[0], m_hi)
            isa.storeu(ctx, m_lo, row + 4 * j)
            isa.storeu(ctx, m_hi, row + 4 * j + 64)
        if col_lo > 0:
            isa.store_partial(ctx, zero32, row, 4 * col_lo)
        if col_hi < gw:
            isa.store_partial(ctx, zero32, row + 4 * col_hi, 4 * (gw - col_hi))
    _nms(ctx, h, w, params, lay)
    isa.storeu(ctx, zero8, work - 64)
    for i in range(h + 2):
        isa.storeu(ctx, zero8, work + i * p8 + w + 2)
    flags[0] = converge(ctx, work, p8, h, w)


@njit
def _nms(ctx: isa.Context, h: int, w: int, params: CannyParams, lay: CannyLayout) -> None:
    """Non-maximum suppression and thresholds of OpenCV's Canny, 16 int32 lanes at a time,
    for the (h + 2) x (w + 2) positions at grid offset (1, 1); writes the class bytes."""
    _, _, low, high = params
    work, p8, dxa, dya, p16, mag, p32, _, _ = lay
    nb = np.empty((9, isa.LANES_32), np.int32)
    dxv = np.empty(isa.LANES_16, np.int16)
    dyv = np.empty(isa.LANES_16, np.int16)
    sx = np.empty(isa.LANES_32, np.int32)
    sy = np.empty(isa.LANES_32, np.int32)
    ax = np.empty(isa.LANES_32, np.int32)
    ay = np.empty(isa.LANES_32, np.int32)
    tg22x = np.empty(isa.LANES_32, np.int32)
    tg67x = np.empty(isa.LANES_32, np.int32)
    n1 = np.empty(isa.LANES_32, np.int32)
    n2 = np.empty(isa.LANES_32, np.int32)
    t = np.empty(isa.LANES_32, np.int32)
    cls = np.empty((4, isa.LANES_32), np.int32)
    hor = np.empty(isa.LANES_32, np.bool_)
    ver = np.empty(isa.LANES_32, np.bool_)
    neg = np.empty(isa.LANES_32, np.bool_)
    ok = np.empty(isa.LANES_32, np.bool_)
    m2 = np.empty(isa.LANES_32, np.bool_)
    h16 = np.empty((2, isa.LANES_16), np.int16)
    out8 = np.empty(isa.LANES_8, np.uint8)
    tg = isa.splat_i32(ctx, TG22)
    zero = isa.splat_i32(ctx, 0)
    one = isa.splat_i32(ctx, 1)
    lowv = isa.splat_i32(ctx, low)
    highv = isa.splat_i32(ctx, high)
    weak = isa.splat_i32(ctx, CLASS_WEAK)
    strong = isa.splat_i32(ctx, CLASS_STRONG)
    for ni in range(h + 2):
        for j in range(0, w + 2, 64):
            for g in range(4):
                jj = j + 16 * g
                if g % 2 == 0:
                    isa.loadu_i16(ctx, dxa + (ni + 1) * p16 + 2 * (jj + 1), dxv)
                    isa.loadu_i16(ctx, dya + (ni + 1) * p16 + 2 * (jj + 1), dyv)
                    isa.unpack_lo_i16_i32(ctx, dxv, sx)
                    isa.unpack_lo_i16_i32(ctx, dyv, sy)
                else:
                    isa.unpack_hi_i16_i32(ctx, dxv, sx)
                    isa.unpack_hi_i16_i32(ctx, dyv, sy)
                for dr in range(3):
                    for dc in range(3):
                        isa.loadu_i32(ctx, mag + (ni + dr) * p32 + 4 * (jj + dc), nb[3 * dr + dc])
                m = nb[4]
                isa.abs_i32(ctx, sx, ax)
                isa.abs_i32(ctx, sy, ay)
                isa.sll_i32(ctx, ay, 15, ay)
                isa.mul_i32(ctx, ax, tg, tg22x)
                isa.sll_i32(ctx, ax, 16, tg67x)
                isa.add_i32(ctx, tg67x, tg22x, tg67x)
                isa.lt_i32(ctx, ay, tg22x, hor)
                isa.lt_i32(ctx, tg67x, ay, ver)
                isa.xor_i32(ctx, sx, sy, t)
                isa.lt_i32(ctx, t, zero, neg)
                # diagonal neighbours: up-right and down-left where the signs differ
                isa.mov_t(ctx, nb[2], nb[0], neg, n1)
                isa.mov_t(ctx, nb[6], nb[8], neg, n2)
                isa.add_i32(ctx, n2, one, n2)  # m > n2 as m >= n2 + 1
                isa.mov_t(ctx, nb[1], n1, ver, n1)
                isa.mov_t(ctx, nb[7], n2, ver, n2)
                isa.mov_t(ctx, nb[3], n1, hor, n1)
                isa.mov_t(ctx, nb[5], n2, hor, n2)
                isa.lt_i32(ctx, n1, m, ok)
                isa.le_i32(ctx, n2, m, m2)
                isa.and_b(ctx, ok, m2, ok)
                isa.lt_i32(ctx, lowv, m, m2)
                isa.and_b(ctx, ok, m2, ok)
                isa.lt_i32(ctx, highv, m, m2)
                isa.mov_t(ctx, strong, weak, m2, cls[g])
                isa.mov_t(ctx, cls[g], zero, ok, cls[g])
            isa.pack_i32_i16(ctx, cls[0], cls[1], h16[0])
            isa.pack_i32_i16(ctx, cls[2], cls[3], h16[1])
            isa.pack_i16_u8(ctx, h16[0], h16[1], out8)
            isa.storeu(ctx, out8, work + ni * p8 + j)


@njit
def canny_hysteresis_tile(ctx: isa.Context, src: int, in_pitch: int, h: int, w: int,
                          work: int, p8: int, flags: npt.NDArray[np.int64]) -> None:
    """A hysteresis pass on one tile: the tile's class map and its one-pixel halo (h + 2
    rows of w + 2 bytes at `src`) copied into `work` with zeroed margins, then `converge`."""
    raw = np.empty(isa.LANES_8, np.uint8)
    zero8 = isa.splat_u8(ctx, 0)
    isa.storeu(ctx, zero8, work - 64)
    for i in range(h + 2):
        for c in range(0, w + 2, 64):
            isa.loadu_u8(ctx, src + i * in_pitch + c, raw)
            isa.storeu(ctx, raw, work + i * p8 + c)
        isa.storeu(ctx, zero8, work + i * p8 + w + 2)
    flags[0] = converge(ctx, work, p8, h, w)


@njit
def canny_finish_tile(ctx: isa.Context, src: int, dst: int, rows: int, row_bytes: int,
                      in_pitch: int, out_pitch: int) -> None:
    """The edge map from the class map: 255 where a pixel is strong, 0 elsewhere."""
    raw = np.empty(isa.LANES_8, np.uint8)
    full = isa.splat_u8(ctx, CLASS_STRONG)
    zero = isa.splat_u8(ctx, 0)
    edge = np.empty(isa.LANES_8, np.bool_)
    for r in range(rows):
        for x in range(0, row_bytes, isa.VECTOR_BYTES):
            isa.loadu_u8(ctx, src + r * in_pitch + x, raw)
            isa.eq_u8(ctx, raw, full, edge)
            isa.mov_t(ctx, full, zero, edge, raw)
            isa.storeu(ctx, raw, dst + r * out_pitch + x)


# --- Harris -------------------------------------------------------------------------------


@njit
def harris_tile(ctx: isa.Context, tile: TileIn, params: HarrisParams, lay: HarrisLayout,
                dst: int, out_pitch: int, rmap: npt.NDArray[np.int64],
                cmap: npt.NDArray[np.int64]) -> None:
    """cornerHarris on one tile of h x w pixels. The grid of (h + block - 1) x (w + block
    - 1) derivative positions around it reads the source tile (ksize - 1 more rows and
    columns). For grid rows with rmap[i] == i (inside the image) the kernel computes the
    integer Sobel dx, dy, scales them in float32 and stores the products dx*dx, dx*dy,
    dy*dy as three float32 planes at `lay.prod` (rows `pp` apart, planes `gh * pp` apart);
    grid columns with cmap[j] != j (outside the image) then take the products of column
    cmap[j] (zero where it is -1), and grid rows with rmap[i] != i those of row rmap[i]: the
    box filter's border extends the products, as OpenCV's does. Then per output row the
    block sums (vertical, then horizontal) and the response a*c - b*b - k*(a + c)^2, into
    output rows at `dst`, `out_pitch` bytes apart."""
    src, in_pitch, h, w = tile
    ksize, block, scale, k = params
    prod, pp, vrow, dx_at, dy_at, s_at, d_at = lay
    raw = np.empty((5, isa.LANES_8), np.uint8)
    v = np.empty((8, isa.LANES_16), np.int16)
    gh, gw = h + block - 1, w + block - 1
    plane = gh * pp
    dxv = np.empty(isa.LANES_16, np.int16)
    dyv = np.empty(isa.LANES_16, np.int16)
    xi = np.empty(isa.LANES_32, np.int32)
    fx = np.empty(isa.LANES_32, np.float32)
    fy = np.empty(isa.LANES_32, np.float32)
    f = np.empty((3, isa.LANES_32), np.float32)
    acc = np.empty((3, isa.LANES_32), np.float32)
    t = np.empty(isa.LANES_32, np.float32)
    u = np.empty(isa.LANES_32, np.float32)
    sc = isa.splat_f32(ctx, scale)
    kv = isa.splat_f32(ctx, k)
    zf = isa.splat_f32(ctx, 0.0)
    for gi in range(gh):
        if rmap[gi] != gi:
            continue
        sobel_row(ctx, src + gi * in_pitch, in_pitch, gw, ksize,
                  SobelRows(s_at, d_at, dx_at, dy_at), raw, v)
        row = prod + gi * pp
        for j in range(0, gw, 32):
            isa.loadu_i16(ctx, dx_at + 2 * j, dxv)
            isa.loadu_i16(ctx, dy_at + 2 * j, dyv)
            for half in range(2):
                if half == 0:
                    isa.unpack_lo_i16_i32(ctx, dxv, xi)
                else:
                    isa.unpack_hi_i16_i32(ctx, dxv, xi)
                isa.cvt_i32_f32(ctx, xi, fx)
                isa.mul_f32(ctx, fx, sc, fx)
                if half == 0:
                    isa.unpack_lo_i16_i32(ctx, dyv, xi)
                else:
                    isa.unpack_hi_i16_i32(ctx, dyv, xi)
                isa.cvt_i32_f32(ctx, xi, fy)
                isa.mul_f32(ctx, fy, sc, fy)
                isa.mul_f32(ctx, fx, fx, f[0])
                isa.mul_f32(ctx, fx, fy, f[1])
                isa.mul_f32(ctx, fy, fy, f[2])
                for p in range(3):
                    isa.storeu(ctx, f[p], row + p * plane + 4 * j + 64 * half)
        for j in range(gw):
            if cmap[j] == j:
                continue
            for p in range(3):
                at = row + p * plane
                if cmap[j] < 0:
                    isa.store_partial(ctx, zf, at + 4 * j, 4)
                else:
                    isa.loadu_f32(ctx, at + 4 * cmap[j], t)
                    isa.store_partial(ctx, t, at + 4 * j, 4)
    for gi in range(gh):
        if rmap[gi] == gi:
            continue
        for p in range(3):
            at = prod + p * plane + gi * pp
            frm = prod + p * plane + rmap[gi] * pp
            for q in range(0, 4 * gw, 64):
                if rmap[gi] < 0:
                    isa.storeu(ctx, zf, at + q)
                else:
                    isa.loadu_f32(ctx, frm + q, t)
                    isa.storeu(ctx, t, at + q)
    for o in range(h):
        for j in range(0, gw, 16):
            for p in range(3):
                at = prod + p * plane + o * pp + 4 * j
                isa.loadu_f32(ctx, at, acc[p])
                for s in range(1, block):
                    isa.loadu_f32(ctx, at + s * pp, t)
                    isa.add_f32(ctx, acc[p], t, acc[p])
                isa.storeu(ctx, acc[p], vrow + p * pp + 4 * j)
        for j in range(0, w, 16):
            for p in range(3):
                at = vrow + p * pp + 4 * j
                isa.loadu_f32(ctx, at, acc[p])
                for s in range(1, block):
                    isa.loadu_f32(ctx, at + 4 * s, t)
                    isa.add_f32(ctx, acc[p], t, acc[p])
            isa.mul_f32(ctx, acc[0], acc[2], t)
            isa.mul_f32(ctx, acc[1], acc[1], u)
            isa.sub_f32(ctx, t, u, t)
            isa.add_f32(ctx, acc[0], acc[2], u)
            isa.mul_f32(ctx, u, u, u)
            isa.mul_f32(ctx, u, kv, u)
            isa.sub_f32(ctx, t, u, t)
            isa.storeu(ctx, t, dst + o * out_pitch + 4 * j)

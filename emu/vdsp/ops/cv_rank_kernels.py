"""Kernels of the rank-filter CV operators (`emu.vdsp.ops.cv_rank`): median, dilate, erode."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.ops.cv_kernel_records import TileRows

U8 = npt.NDArray[np.uint8]
Program = npt.NDArray[np.int32]


@njit
def _exchange(ctx: isa.Context, regs: U8, names: npt.NDArray[np.int64], spare: int,
              program: Program) -> int:
    """Run a compare-exchange program on the wires of `regs` (wire w is register
    `regs[names[w]]`): each row (a, b, low, high) puts min(a, b) into wire a when `low` and
    max(a, b) into wire b when `high` (a pruned network computes only the halves later
    steps read). A full exchange writes the minimum into the spare register and renames it
    to wire a, as a compiler allocates registers: two ops, no move. Returns the new spare."""
    for s in range(program.shape[0]):
        a = program[s, 0]
        b = program[s, 1]
        ra = names[a]
        rb = names[b]
        if program[s, 2] != 0 and program[s, 3] != 0:
            isa.min_u8(ctx, regs[ra], regs[rb], regs[spare])
            isa.max_u8(ctx, regs[ra], regs[rb], regs[rb])
            names[a] = spare
            spare = ra
        elif program[s, 2] != 0:
            isa.min_u8(ctx, regs[ra], regs[rb], regs[ra])
        else:
            isa.max_u8(ctx, regs[ra], regs[rb], regs[rb])
    return spare


@njit
def median_tile(ctx: isa.Context, tile: TileRows, k: int, pixel_bytes: int,
                column_sort: Program, select: Program, used: npt.NDArray[np.int64],
                out_wire: int) -> None:
    """The k x k median of `rows` output rows of `row_bytes` bytes (`tile.width`); source
    row r + i and byte x + j * pixel_bytes hold the window's pixel (i, j) of output byte x
    of row r.

    Per output vector: the k source rows of the next vector are loaded and sorted down
    each column (`column_sort`, a sorting network on k wires, shared by the three (k)
    output vectors that read those columns); the k x k window's wires (i, j) are row i of
    the sorted columns shifted by j pixels (`sel_u8` of this vector and the next), and the
    pruned selection network `select` leaves the median in wire `out_wire`. Only the wires
    `used` lists are made."""
    src, dst, rows, row_bytes, in_pitch, out_pitch = tile
    lanes = isa.LANES_8
    n = k * k
    # Registers: 2k sorted columns (this vector, the next), n + 1 window wires (one spare).
    cols = np.empty((2 * k + 1, lanes), np.uint8)
    col_names = np.empty(2 * k, np.int64)
    regs = np.empty((n + 1, lanes), np.uint8)
    names = np.empty(n, np.int64)
    shift = np.empty((k, lanes), np.uint8)  # select patterns: lanes i + j * pixel_bytes
    for j in range(k):
        for i in range(lanes):
            shift[j, i] = i + j * pixel_bytes
    for r in range(rows):
        for i in range(2 * k):
            col_names[i] = i
        spare = 2 * k
        for i in range(k):
            isa.load_u8(ctx, src + (r + i) * in_pitch, cols[col_names[i]])
        spare = _exchange(ctx, cols, col_names[:k], spare, column_sort)
        for x in range(0, row_bytes, lanes):
            nxt = col_names[k:]
            for i in range(k):
                isa.load_u8(ctx, src + (r + i) * in_pitch + x + lanes, cols[nxt[i]])
            spare = _exchange(ctx, cols, nxt, spare, column_sort)
            for w in range(n):
                names[w] = w
            for u in range(used.size):
                w = used[u]
                i = w // k
                isa.sel_u8(ctx, cols[col_names[i]], cols[col_names[k + i]], shift[w % k],
                           regs[w])
            _exchange(ctx, regs, names, n, select)
            isa.store(ctx, regs[names[out_wire]], dst + r * out_pitch + x)
            for i in range(k):  # the next vector's columns become this vector's
                held = col_names[i]
                col_names[i] = col_names[k + i]
                col_names[k + i] = held


@njit
def extreme_tile(ctx: isa.Context, tile: TileRows, taps: int, tap_bytes: int,
                 largest: bool) -> None:
    """Byte x of output row r (of `tile.rows` rows of `tile.width` bytes) = the maximum
    (`largest`) or minimum of the `taps` source bytes at src + r * src_pitch + x + t *
    tap_bytes (t < taps): a 1-D window along a row (`tap_bytes` = the pixel size) or down a
    column (`tap_bytes` = the row pitch), one vector of 64 bytes at a time."""
    src, dst, rows, row_bytes, src_pitch, dst_pitch = tile
    acc = np.empty(isa.LANES_8, np.uint8)
    v = np.empty(isa.LANES_8, np.uint8)
    for r in range(rows):
        for x in range(0, row_bytes, isa.VECTOR_BYTES):
            at = src + r * src_pitch + x
            isa.loadu_u8(ctx, at, acc)
            for t in range(1, taps):
                isa.loadu_u8(ctx, at + t * tap_bytes, v)
                if largest:
                    isa.max_u8(ctx, acc, v, acc)
                else:
                    isa.min_u8(ctx, acc, v, acc)
            isa.storeu(ctx, acc, dst + r * dst_pitch + x)


@njit
def _extreme_step(ctx: isa.Context, tile: TileRows, offset: int, largest: bool, a: U8,
                  b: U8) -> None:
    """dst byte x of row r = max (or min) of src bytes x and x + offset of row r, rows and
    vectors in increasing order (so dst may be src: each vector reads before it is
    overwritten)."""
    src, dst, rows, row_bytes, src_pitch, dst_pitch = tile
    for r in range(rows):
        for x in range(0, row_bytes, isa.VECTOR_BYTES):
            at = src + r * src_pitch + x
            isa.loadu_u8(ctx, at, a)
            isa.loadu_u8(ctx, at + offset, b)
            if largest:
                isa.max_u8(ctx, a, b, a)
            else:
                isa.min_u8(ctx, a, b, a)
            isa.storeu(ctx, a, dst + r * dst_pitch + x)


@njit
def extreme_doubling_tile(ctx: isa.Context, tile: TileRows, taps: int, tap_bytes: int,
                          down: bool, largest: bool) -> None:
    """What `extreme_tile` computes, in about log2(taps) steps of two loads, one max (min)
    and one store per vector instead of `taps` loads: in place in the source, each step
    doubles the window every position covers (1, 2, 4, ... p taps, p the largest power of
    two <= taps), and the last step combines the windows at t and t + taps - p into `dst`.
    `down`: the taps run down the rows (`tap_bytes` is the pitch), else along a row. The
    source is overwritten."""
    src, _, rows, row_bytes, src_pitch, _ = tile
    a = np.empty(isa.LANES_8, np.uint8)
    b = np.empty(isa.LANES_8, np.uint8)
    offsets = np.empty(32, np.int64)
    n = 0
    p = 1
    while 2 * p <= taps:
        offsets[n] = p
        n += 1
        p *= 2
    if p < taps:
        offsets[n] = taps - p
        n += 1
    ext_rows = rows + (taps - 1 if down else 0)
    ext_bytes = row_bytes + (0 if down else (taps - 1) * tap_bytes)
    for i in range(n):
        o = offsets[i]
        if down:
            ext_rows -= o
        else:
            ext_bytes -= o * tap_bytes
        if i == n - 1:
            _extreme_step(ctx, tile, o * tap_bytes, largest, a, b)
        else:
            _extreme_step(ctx, TileRows(src, src, ext_rows, ext_bytes, src_pitch, src_pitch),
                          o * tap_bytes, largest, a, b)

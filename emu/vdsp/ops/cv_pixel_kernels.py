"""Kernels of the per-pixel CV operators (`emu.vdsp.ops.cv_pixel`)."""

from __future__ import annotations

import numpy as np

from emu.jit import njit
from emu.vdsp import isa
from emu.vdsp.ops.cv_kernel_records import TileRows


@njit
def threshold_tile(ctx: isa.Context, tile: TileRows, thresh: int, maxval: int,
                   kind: int) -> None:
    """OpenCV's threshold types 0-4 on `rows` rows of `row_bytes` uint8 values (`tile.width`),
    in int16 halves: a pixel passes when it is greater than `thresh` (-1..255)."""
    src, dst, rows, row_bytes, in_pitch, out_pitch = tile
    raw = np.empty(isa.LANES_8, np.uint8)
    out = np.empty(isa.LANES_8, np.uint8)
    halves = (np.empty(isa.LANES_16, np.int16), np.empty(isa.LANES_16, np.int16))
    t = isa.splat_i16(ctx, thresh)
    m = isa.splat_i16(ctx, maxval)
    zero = isa.splat_i16(ctx, 0)
    above = np.empty(isa.LANES_16, np.bool_)
    for r in range(rows):
        for x in range(0, row_bytes, isa.VECTOR_BYTES):
            isa.load_u8(ctx, src + r * in_pitch + x, raw)
            isa.unpack_lo_u8_i16(ctx, raw, halves[0])
            isa.unpack_hi_u8_i16(ctx, raw, halves[1])
            for v in halves:
                isa.lt_i16(ctx, t, v, above)
                if kind == 0:
                    isa.mov_t(ctx, m, zero, above, v)
                elif kind == 1:
                    isa.mov_t(ctx, zero, m, above, v)
                elif kind == 2:
                    isa.min_i16(ctx, v, t, v)
                elif kind == 3:
                    isa.mov_t(ctx, v, zero, above, v)
                else:
                    isa.mov_t(ctx, zero, v, above, v)
            isa.pack_i16_u8(ctx, halves[0], halves[1], out)
            isa.store(ctx, out, dst + r * out_pitch + x)

"""Kernels shared by the CV operators, written with the vDSP ISA emulation."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from emu.jit import njit
from emu.vdsp import isa


@njit
def fill_rect(ctx: isa.Context, addr: int, pitch: int, rows: int, nbytes: int,
              pattern: npt.NDArray[np.uint8], pixel_bytes: int) -> None:
    """Write `nbytes` of `pattern` (one pixel repeated from byte 0) at the start of `rows`
    rows `pitch` apart: unaligned vector stores advancing by whole pixels, then a partial
    store for the rest of the row."""
    step = isa.VECTOR_BYTES - isa.VECTOR_BYTES % pixel_bytes
    for r in range(rows):
        at = addr + r * pitch
        done = 0
        while done + isa.VECTOR_BYTES <= nbytes:
            isa.storeu(ctx, pattern, at + done)
            done += step
        if done < nbytes:
            isa.store_partial(ctx, pattern, at + done, nbytes - done)


@njit
def channel_patterns() -> npt.NDArray[np.uint8]:
    """`sel_u8` patterns (constants, as the DSP's immediate select patterns) between 64
    interleaved 3-channel uint8 pixels (three vectors: byte 3i + c is channel c of pixel i)
    and three channel vectors. Rows 2c, 2c + 1 split out channel c in two steps (the first
    from vectors 0 and 1, the second adding vector 2); rows 6 + 2m, 7 + 2m build
    interleaved vector m back from the channels 0 and 1, then channel 2."""
    vec = isa.VECTOR_BYTES
    idx = np.zeros((12, vec), np.uint8)
    for c in range(3):
        for i in range(vec):
            at = 3 * i + c
            if at < 2 * vec:
                idx[2 * c, i] = at
                idx[2 * c + 1, i] = i
            else:
                idx[2 * c + 1, i] = vec + at - 2 * vec
    for m in range(3):
        for i in range(vec):
            at = m * vec + i
            c, pixel = at % 3, at // 3
            if c < 2:
                idx[6 + 2 * m, i] = pixel + vec * c
                idx[7 + 2 * m, i] = i
            else:
                idx[7 + 2 * m, i] = vec + pixel
    return idx


@njit
def load_channels(ctx: isa.Context, at: int, nbytes: int, raw: npt.NDArray[np.uint8],
                  idx: npt.NDArray[np.uint8], chans: npt.NDArray[np.uint8]) -> None:
    """The three channels of the (up to) 64 pixels at TCM address `at` into chans[0..2]
    (`idx` from `channel_patterns`); only the vectors that start before the `nbytes` left in
    the row are loaded."""
    for v in range(3):
        if v * isa.VECTOR_BYTES < nbytes:
            isa.loadu_u8(ctx, at + v * isa.VECTOR_BYTES, raw[v])
    for c in range(3):
        isa.sel_u8(ctx, raw[0], raw[1], idx[2 * c], chans[c])
        isa.sel_u8(ctx, chans[c], raw[2], idx[2 * c + 1], chans[c])

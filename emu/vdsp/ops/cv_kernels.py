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

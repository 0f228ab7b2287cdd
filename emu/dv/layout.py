"""The DV700's activation layout in memory ("WHC8").

What the public SDK shows: the FC weight packer of DMP's user driver reorders NCHW weights
into "WHC8", described there as (channels / 8, width, height, 8 channels): the channels are
cut into blocks of 8; a block is stored whole before the next one; inside a block the width
index is outermost, the height index next, and the block's channels innermost. The packer
keeps a last, partial block at its real number of channels (it is not padded to 8).

The emulator's rule (the specification):

* an FP16 tensor of shape (C, H, W) occupies exactly ``2 * C * H * W`` bytes; there is no
  padding, neither of the channels nor of the rows;
* channel ``c`` lies in block ``b = c // 8``, which holds ``n_b = min(8, C - 8 * b)``
  channels; the element (c, y, x) is the FP16 (little-endian) at element index
  ``8 * b * H * W + (x * H + y) * n_b + (c - 8 * b)``.

The byte image of a channel concatenation is the back-to-back byte images of its parts
whenever every part but the last has a multiple of 8 channels (the device writes the
external outputs of a convolution command back to back, see `emu.dv.compute`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from emu.errors import InputError

BLOCK = 8  # channels per block


def _check_dims(c: int, h: int, w: int) -> None:
    if min(c, h, w) <= 0:
        raise InputError(f"tensor dimensions must be positive, got C={c} H={h} W={w}")


def tensor_bytes(c: int, h: int, w: int) -> int:
    """Bytes that an FP16 tensor of shape (c, h, w) occupies in the device layout."""
    _check_dims(c, h, w)
    return 2 * c * h * w


def element_index(c: int, h: int, w: int) -> NDArray[np.int64]:
    """For a (c, h, w) tensor, the device element index of every (channel, y, x), shape
    (c, h, w): ``flat_device[element_index(...)] == tensor``."""
    _check_dims(c, h, w)
    ch = np.arange(c)
    block = ch // BLOCK
    n_b = np.minimum(BLOCK, c - BLOCK * block)
    y = np.arange(h)[None, :, None]
    x = np.arange(w)[None, None, :]
    base = (BLOCK * block * h * w)[:, None, None]
    return (base + (x * h + y) * n_b[:, None, None] + (ch - BLOCK * block)[:, None, None]
            ).astype(np.int64)


def to_device(x: NDArray[np.float16]) -> NDArray[np.uint8]:
    """The device byte image (uint8, length `tensor_bytes`) of an FP16 (C, H, W) tensor."""
    if x.ndim != 3:
        raise InputError(f"a device tensor has 3 dimensions (C, H, W), got shape {x.shape}")
    if x.dtype != np.float16:
        raise InputError(f"device tensors are float16, got {x.dtype}")
    c, h, w = x.shape
    flat = np.empty(c * h * w, dtype="<f2")
    flat[element_index(c, h, w)] = x
    return flat.view(np.uint8)


def from_device(data: NDArray[np.uint8] | bytes, c: int, h: int, w: int
                ) -> NDArray[np.float16]:
    """The FP16 (c, h, w) tensor whose device image starts at the beginning of `data`."""
    need = tensor_bytes(c, h, w)
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise InputError("device data must be a 1-D uint8 array or bytes")
    if raw.size < need:
        raise InputError(f"a ({c}, {h}, {w}) tensor needs {need} bytes, got {raw.size}")
    flat = np.ascontiguousarray(raw[:need]).view("<f2")
    return flat[element_index(c, h, w)].astype(np.float16)

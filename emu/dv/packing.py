"""Weight packers of the `dmp_dv` driver and the inverse readers the emulated device uses.

The layouts follow the behaviour of DMP's public user driver (`weights_conv.c`,
`weights_fc.c`), re-derived here as index maps; the one place where the emulator chooses
differently is marked "(choice)". Every multi-byte value is little-endian FP16 bits.

Convolution (`pack_conv_weights`)
---------------------------------
Weights are given as FP16 bits (uint16) in NCHW order, shape (n_kernels, n_channels, ky, kx),
or, with a 256-entry FP16 `quant_map`, as uint8 indices into it. For a depthwise run
(`conv_enable` 3 or 7) pack with ``n_channels = 1`` and ``n_kernels`` = the channel count;
for a deconvolution (5 or 7) the kernel rotated by 180 degrees, as DMP's packer says. The
kernel must be 1..7 in both directions. Let ``p = max(kx, ky) | 1`` (the odd size 1, 3, 5 or
7 the device works with) and ``e`` = 1 byte per weight when quantised, else 2.

* With a quant_map the buffer starts with the 256 FP16 table entries (512 bytes).
* Then, for each block of 8 output channels (the last block may hold fewer, ``nm``):
  the block's 8 biases (FP16, zeros past ``nm``), then, when PReLU slopes are given, the
  block's 8 slopes the same way (choice: the public API has no slope argument; the later
  driver and DMP's converter put the slopes right after the bias, and so does the emulator;
  the device reads them only for ``actfunc`` 4), then the weight tiles.
* A tile is 12 rows x 6 columns of weights (72 x ``e`` bytes), zeros where unused. The input
  channels are cut into groups of 8 (64 when p = 1); for each group, for each kernel of the
  block, the tiles of that (group, kernel) follow:
  p = 7: one tile per channel; weight (y, x) with x < 6 at row ``5 + y + 7 - ky``, column x,
  and column 6 of the kernel at the flat slot ``(17, 3, 9, 15, 0, 6, 12)[y + 7 - ky]``;
  p = 5: one tile per pair of channels; the first of a pair at rows ``7 + y + 5 - ky``, the
  second at rows ``1 + y + 5 - ky``, column x;
  p = 3: one tile for the group; channel t of the group (0..7) at row
  ``9 - 3 * (t // 2) + y + 3 - ky``, column ``3 * (t % 2) + x``;
  p = 1: one tile per group of 64; channel t of an 8-block and block j (0..7) of the group at
  row ``11 - 3 * (t // 2) - j // 3``, column ``3 * (t % 2) + j % 3``.
* The whole buffer is zero-padded to a multiple of 16 bytes.

Dilated convolution (`pack_dil_weights`)
----------------------------------------
A run whose dilation exceeds 1 in either direction (a normal convolution or deconvolution,
`conv_enable` 1 or 5, not a depthwise one) reads its weights in the layout of DMP's
`weights_dil.c`: the device computes it as one 1 x 1 convolution per kernel tap. After the
quant table (when quantised), for each tap (y, x) in raster order, the tap's weights
w[:, :, y, x] packed as a 1 x 1 convolution above (without a quant table of its own),
zero-padded to 16 bytes. Only the last tap carries the biases (and PReLU slopes); the other
taps hold zeros there, which the device adds, so it reads the last tap's.

Fully connected (`pack_fc_weights`)
-----------------------------------
Weights are FP16 bits or uint8 indices of an (output_size, input_size) matrix whose rows are
the output elements and columns the input elements, both in NCHW order of the given shapes.
The packer reorders both axes to the device layout of `emu.dv.layout` (WHC8), so the FC block
multiplies device-layout vectors directly: [quant table, 512 bytes], then the matrix row by row
(``e`` bytes per weight), zero-pad to 16 bytes, then the output_size FP16 biases, zero-pad to
16 bytes. The public packer copies the biases in the caller's order; the emulator (choice)
reorders them like the rows, so a bias always belongs to the output it is added to (no
difference for 1-D outputs, the usual case).

Invalid arguments raise `emu.errors.InputError`; the size functions answer the query the C
API answers when the given buffer size is 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from emu.dv.layout import element_index
from emu.errors import InputError

QUANT_TABLE_BYTES = 512
_TILE = 72  # weights per tile (12 rows x 6 columns)
_REMAP7 = np.array([17, 3, 9, 15, 0, 6, 12], dtype=np.int64)


def _pad16(n: int) -> int:
    return (n + 15) & ~15


MAX_CHANNELS = 65535
"""The most input or output channels a convolution can have: a run's `c` and `m` are
16-bit fields of the conv command (seed 002, `dmp_dv_cmdraw_conv_v0`)."""


def _check_conv_dims(n_channels: int, kx: int, ky: int, n_kernels: int) -> None:
    if not (1 <= kx <= 7 and 1 <= ky <= 7):
        raise InputError(f"conv kernels of 1..7 in each direction are supported, got {kx}x{ky}")
    if not 1 <= n_channels <= MAX_CHANNELS:
        raise InputError(f"number of input channels must be 1..{MAX_CHANNELS} (a 16-bit field "
                         f"of the conv command), got {n_channels}")
    if not 1 <= n_kernels <= MAX_CHANNELS:
        raise InputError(f"number of output channels must be 1..{MAX_CHANNELS} (a 16-bit "
                         f"field of the conv command), got {n_kernels}")


def _conv_bytes(n_channels: int, kx: int, ky: int, n_kernels: int, quantised: bool,
                prelu: bool) -> int:
    """The bytes of `_ConvMap`'s layout, counted without placing each weight: a block of
    `16` (32 with PReLU) bytes of biases and slopes per 8 kernels, and per kernel its tiles
    of `_TILE` weights; a kernel has one tile a 64-channel group for 1 x 1, one a
    2-channel pair for 5 x 5, one a channel for 7 x 7, else one an 8-channel group."""
    p = max(kx, ky) | 1
    group = 64 if p == 1 else 8
    full, rest = divmod(n_channels, group)
    if p == 7:
        tiles = n_channels
    elif p == 5:
        tiles = full * (group // 2) + (rest + 1) // 2
    else:
        tiles = full + (1 if rest else 0)
    blocks = -(-n_kernels // 8)
    weight_bytes = 1 if quantised else 2
    q0 = QUANT_TABLE_BYTES if quantised else 0
    return _pad16(q0 + blocks * 16 * (2 if prelu else 1)
                  + n_kernels * tiles * _TILE * weight_bytes)


class _ConvMap:
    """Byte offsets of every weight, bias and slope of a packed convolution buffer."""

    def __init__(self, n_channels: int, kx: int, ky: int, n_kernels: int, quantised: bool,
                 prelu: bool) -> None:
        _check_conv_dims(n_channels, kx, ky, n_kernels)
        e = 1 if quantised else 2
        p = max(kx, ky) | 1
        group = 64 if p == 1 else 8
        head = 16 * (2 if prelu else 1)
        q0 = QUANT_TABLE_BYTES if quantised else 0

        c = np.arange(n_channels)
        g = c // group
        n_groups = int(g[-1]) + 1
        counts = np.minimum(group, n_channels - group * np.arange(n_groups))
        if p == 7:
            per_kernel = counts
        elif p == 5:
            per_kernel = (counts + 1) // 2
        else:
            per_kernel = np.ones(n_groups, dtype=np.int64)
        prefix = np.concatenate([[0], np.cumsum(per_kernel)[:-1]])
        tiles_per_kernel = int(per_kernel.sum())
        local = c - group * g
        sub = local if p == 7 else (local // 2 if p == 5 else np.zeros_like(local))

        m = np.arange(n_kernels)
        mb = m // 8
        n_mblocks = int(mb[-1]) + 1
        nm = np.minimum(8, n_kernels - 8 * np.arange(n_mblocks))
        block_bytes = head + nm * tiles_per_kernel * _TILE * e
        base = q0 + np.concatenate([[0], np.cumsum(block_bytes)[:-1]])

        # tile index of every (m, c) inside its kernel block
        tile = (prefix[g][None, :] * nm[mb][:, None]
                + (m - 8 * mb)[:, None] * per_kernel[g][None, :] + sub[None, :])
        y = np.arange(ky)[:, None]
        x = np.arange(kx)[None, :]
        t = local[:, None, None]
        if p == 7:
            slot = np.where(x < 6, (5 + y + 7 - ky) * 6 + np.minimum(x, 5),
                            _REMAP7[np.minimum(y + 7 - ky, 6)])[None, :, :]
            slot = np.broadcast_to(slot, (n_channels, ky, kx))
        elif p == 5:
            slot = (7 - 6 * (t & 1) + y + 5 - ky) * 6 + x
        elif p == 3:
            slot = (9 - 3 * (t >> 1 & 3) + y + 3 - ky) * 6 + 3 * (t & 1) + x
        else:
            j = (t & 63) >> 3
            slot = (11 - 3 * (t >> 1 & 3) - j // 3) * 6 + 3 * (t & 1) + j % 3
        self.weights = ((base[mb] + head)[:, None, None, None]
                        + tile[:, :, None, None] * (_TILE * e) + slot[None] * e)
        self.bias = base[mb] + 2 * (m - 8 * mb)
        self.prelu = self.bias + 16 if prelu else None
        self.size = _pad16(q0 + int(block_bytes.sum()))
        self.shape = (n_kernels, n_channels, ky, kx)


def conv_weights_size(n_channels: int, kx: int, ky: int, n_kernels: int, quantised: bool,
                      prelu: bool = False) -> int:
    """Bytes `pack_conv_weights` writes for these dimensions."""
    _check_conv_dims(n_channels, kx, ky, n_kernels)
    return _conv_bytes(n_channels, kx, ky, n_kernels, quantised, prelu)


def _as_u16(name: str, values: Any, count: int) -> NDArray[np.uint16]:
    arr = np.asarray(values)
    if arr.dtype == np.float16:
        arr = arr.view(np.uint16)
    if arr.dtype != np.uint16:
        raise InputError(f"{name} must be FP16 bits (uint16) or float16, got {arr.dtype}")
    if arr.size != count:
        raise InputError(f"{name} must have {count} elements, got {arr.size}")
    return np.ascontiguousarray(arr.reshape(-1))


def _weights_in(quant_map: Any, weights: Any, count: int) -> NDArray[Any]:
    if quant_map is None:
        return _as_u16("weights", weights, count)
    arr = np.asarray(weights)
    if arr.dtype != np.uint8:
        raise InputError(f"quantised weights must be uint8 indices, got {arr.dtype}")
    if arr.size != count:
        raise InputError(f"weights must have {count} elements, got {arr.size}")
    return np.ascontiguousarray(arr.reshape(-1))


def _put16(buf: NDArray[np.uint8], offsets: NDArray[np.int64], values: NDArray[np.uint16]
           ) -> None:
    buf[offsets] = (values & 0xFF).astype(np.uint8)
    buf[offsets + 1] = (values >> 8).astype(np.uint8)


def _get16(buf: NDArray[np.uint8], offsets: NDArray[np.int64]) -> NDArray[np.uint16]:
    lo = buf[offsets].astype(np.uint16)
    hi = buf[offsets + 1].astype(np.uint16)
    return (lo | (hi << 8)).astype(np.uint16)


def _buffer(data: Any, size: int) -> NDArray[np.uint8]:
    raw = np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) \
        else data
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise InputError("packed weights must be bytes or a 1-D uint8 array")
    if raw.size < size:
        raise InputError(f"packed weights need {size} bytes, got {raw.size}")
    return raw


def pack_conv_weights(n_channels: int, kx: int, ky: int, n_kernels: int, quant_map: Any,
                      weights: Any, bias: Any, prelu: Any = None) -> bytes:
    """Pack convolution weights (NCHW FP16 bits, or uint8 indices with a 256-entry FP16
    `quant_map`), the `n_kernels` FP16 biases and optional PReLU slopes."""
    return _pack(False, n_channels, kx, ky, n_kernels, quant_map, weights, bias, prelu)


def _pack(dilated: bool, n_channels: int, kx: int, ky: int, n_kernels: int, quant_map: Any,
          weights: Any, bias: Any, prelu: Any) -> bytes:
    quantised = quant_map is not None
    layout = _layout(dilated, n_channels, kx, ky, n_kernels, quantised, prelu is not None)
    w = _weights_in(quant_map, weights, n_kernels * n_channels * ky * kx)
    b = _as_u16("bias", bias, n_kernels)
    buf = np.zeros(layout.size, dtype=np.uint8)
    if quantised:
        buf[:QUANT_TABLE_BYTES] = _as_u16("quant_map", quant_map, 256).astype("<u2").view(
            np.uint8)
        buf[layout.weights.reshape(-1)] = w
    else:
        _put16(buf, layout.weights.reshape(-1), w)
    _put16(buf, layout.bias, b)
    if layout.prelu is not None:
        _put16(buf, layout.prelu, _as_u16("prelu", prelu, n_kernels))
    return buf.tobytes()


def unpack_conv_weights(data: Any, n_channels: int, kx: int, ky: int, n_kernels: int,
                        quantised: bool, prelu: bool = False
                        ) -> tuple[NDArray[np.float16], NDArray[np.float16],
                                   NDArray[np.float16] | None]:
    """Read a packed convolution buffer the way the device does: (weights as float16 NCHW
    (n_kernels, n_channels, ky, kx), bias (n_kernels,), PReLU slopes or None)."""
    return _unpack(False, data, n_channels, kx, ky, n_kernels, quantised, prelu)


def _unpack(dilated: bool, data: Any, n_channels: int, kx: int, ky: int, n_kernels: int,
            quantised: bool, prelu: bool
            ) -> tuple[NDArray[np.float16], NDArray[np.float16], NDArray[np.float16] | None]:
    layout = _layout(dilated, n_channels, kx, ky, n_kernels, quantised, prelu)
    buf = _buffer(data, layout.size)
    if quantised:
        table = _get16(buf, np.arange(0, QUANT_TABLE_BYTES, 2, dtype=np.int64))
        bits = table[buf[layout.weights]]
    else:
        bits = _get16(buf, layout.weights)
    slopes = None if layout.prelu is None else _get16(buf, layout.prelu).view(np.float16)
    return (bits.view(np.float16).reshape(layout.shape), _get16(buf, layout.bias).view(
        np.float16), slopes)


class _DilMap:
    """Byte offsets of every weight, bias and slope of a packed dilated convolution: the
    1 x 1 map (`_ConvMap`) repeated once per kernel tap."""

    def __init__(self, n_channels: int, kx: int, ky: int, n_kernels: int, quantised: bool,
                 prelu: bool) -> None:
        _check_conv_dims(n_channels, kx, ky, n_kernels)
        tap = _ConvMap(n_channels, 1, 1, n_kernels, quantised, prelu)
        q0 = QUANT_TABLE_BYTES if quantised else 0
        step = tap.size - q0  # one tap, padded to 16 bytes
        taps = np.arange(ky * kx, dtype=np.int64).reshape(ky, kx)
        self.weights = tap.weights[:, :, :1, :1] + taps[None, None] * step
        last = (ky * kx - 1) * step
        self.bias = tap.bias + last
        self.prelu = None if tap.prelu is None else tap.prelu + last
        self.size = q0 + ky * kx * step
        self.shape = (n_kernels, n_channels, ky, kx)


def _layout(dilated: bool, n_channels: int, kx: int, ky: int, n_kernels: int,
            quantised: bool, prelu: bool) -> _ConvMap | _DilMap:
    return (_DilMap if dilated else _ConvMap)(n_channels, kx, ky, n_kernels, quantised, prelu)


def dil_weights_size(n_channels: int, kx: int, ky: int, n_kernels: int, quantised: bool,
                     prelu: bool = False) -> int:
    """Bytes `pack_dil_weights` writes for these dimensions."""
    _check_conv_dims(n_channels, kx, ky, n_kernels)
    q0 = QUANT_TABLE_BYTES if quantised else 0
    return q0 + ky * kx * (_conv_bytes(n_channels, 1, 1, n_kernels, quantised, prelu) - q0)


def pack_dil_weights(n_channels: int, kx: int, ky: int, n_kernels: int, quant_map: Any,
                     weights: Any, bias: Any, prelu: Any = None) -> bytes:
    """`pack_conv_weights` in the layout of a dilated run (see the module)."""
    return _pack(True, n_channels, kx, ky, n_kernels, quant_map, weights, bias, prelu)


def unpack_dil_weights(data: Any, n_channels: int, kx: int, ky: int, n_kernels: int,
                       quantised: bool, prelu: bool = False
                       ) -> tuple[NDArray[np.float16], NDArray[np.float16],
                                  NDArray[np.float16] | None]:
    """`unpack_conv_weights` of a dilated run's buffer (see the module)."""
    return _unpack(True, data, n_channels, kx, ky, n_kernels, quantised, prelu)


def _check_fc_dims(*dims: int) -> None:
    if min(dims) <= 0:
        raise InputError(f"FC input/output dimensions must be positive, got {dims}")


def _fc_sizes(input_size: int, output_size: int, quantised: bool) -> tuple[int, int, int]:
    """(offset of the matrix, offset of the biases, total bytes)."""
    q0 = QUANT_TABLE_BYTES if quantised else 0
    bias_at = _pad16(q0 + input_size * output_size * (1 if quantised else 2))
    return q0, bias_at, _pad16(bias_at + 2 * output_size)


def fc_weights_size(c_input: int, h_input: int, w_input: int, c_output: int, h_output: int,
                    w_output: int, quantised: bool) -> int:
    """Bytes `pack_fc_weights` writes for these dimensions."""
    _check_fc_dims(c_input, h_input, w_input, c_output, h_output, w_output)
    return _fc_sizes(c_input * h_input * w_input, c_output * h_output * w_output, quantised)[2]


def pack_fc_weights(c_input: int, h_input: int, w_input: int, c_output: int, h_output: int,
                    w_output: int, quant_map: Any, weights: Any, bias: Any) -> bytes:
    """Pack FC weights given in NCHW order of the output and input shapes (FP16 bits, or
    uint8 indices with a 256-entry FP16 `quant_map`) and the FP16 biases (NCHW order of the
    output), reordering both to the device layout."""
    _check_fc_dims(c_input, h_input, w_input, c_output, h_output, w_output)
    n_in = c_input * h_input * w_input
    n_out = c_output * h_output * w_output
    quantised = quant_map is not None
    q0, bias_at, size = _fc_sizes(n_in, n_out, quantised)
    w = _weights_in(quant_map, weights, n_in * n_out).reshape(n_out, n_in)
    b = _as_u16("bias", bias, n_out)
    rows = element_index(c_output, h_output, w_output).reshape(-1)
    cols = element_index(c_input, h_input, w_input).reshape(-1)
    dev = np.empty_like(w)
    dev[np.ix_(rows, cols)] = w
    dev_bias = np.empty_like(b)
    dev_bias[rows] = b
    buf = np.zeros(size, dtype=np.uint8)
    if quantised:
        buf[:q0] = _as_u16("quant_map", quant_map, 256).astype("<u2").view(np.uint8)
        buf[q0:q0 + dev.size] = dev.reshape(-1)
    else:
        buf[q0:q0 + 2 * dev.size] = dev.reshape(-1).astype("<u2").view(np.uint8)
    buf[bias_at:bias_at + 2 * n_out] = dev_bias.astype("<u2").view(np.uint8)
    return buf.tobytes()


def unpack_fc_weights(data: Any, input_size: int, output_size: int, quantised: bool
                      ) -> tuple[NDArray[np.float16], NDArray[np.float16]]:
    """Read a packed FC buffer the way the device does: the float16 (output_size,
    input_size) matrix and the (output_size,) biases, both in device (WHC8) order."""
    _check_fc_dims(input_size, output_size)
    q0, bias_at, size = _fc_sizes(input_size, output_size, quantised)
    buf = _buffer(data, size)
    n = input_size * output_size
    if quantised:
        table = np.ascontiguousarray(buf[:q0]).view("<u2")
        bits = table[buf[q0:q0 + n]]
    else:
        bits = np.ascontiguousarray(buf[q0:q0 + 2 * n]).view("<u2")
    bias = np.ascontiguousarray(buf[bias_at:bias_at + 2 * output_size]).view("<u2")
    return (bits.astype(np.uint16).view(np.float16).reshape(output_size, input_size),
            bias.astype(np.uint16).view(np.float16))

"""How the NN operators find their arguments: a small header at the start of the input buffer.

The board's DSP operators receive one input and one output buffer; what the input holds is
the operator's own convention. Ours, for the NN operators, is a little-endian header of
32-bit words, the per-axis parameters, then the tensor data at a 64-byte boundary:

    word  0  magic 0x44554D45 ("EMUD")     word  7  ndim (1..4)
    word  1  layout version (1)            words 8-11 shape, outermost first (unused = 1)
    word  2  input element type            word 12  number of parameters (1 or shape[axis])
    word  3  output element type           word 13  byte offset of the parameters
    word  4  quantisation mode             word 14  byte offset of the tensor data
    word  5  axis (0..ndim-1)              word 15  reserved (0)
    word  6  reserved (0)
    parameters: float32 scales[n] then int32 zero points[n] (mode SCALE), or int32 shifts[n]
    (mode SHIFT); none for softmax.

The output buffer holds the output tensor alone, in C order. `pack` builds such an input;
`parse` checks one and raises `DspError` saying what is wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.errors import DspError

MAGIC = 0x44554D45
VERSION = 1
HEADER_WORDS = 16
DATA_ALIGN_BYTES = 64

TYPE_F32, TYPE_S8, TYPE_U8 = 1, 2, 3
_DTYPES: dict[int, np.dtype] = {
    TYPE_F32: np.dtype("<f4"), TYPE_S8: np.dtype("i1"), TYPE_U8: np.dtype("u1"),
}
TYPE_NAMES = {TYPE_F32: "float32", TYPE_S8: "int8", TYPE_U8: "uint8"}

MODE_NONE, MODE_SCALE, MODE_SHIFT = 0, 1, 2
MODE_NAMES = {MODE_NONE: "none", MODE_SCALE: "scale", MODE_SHIFT: "shift"}


@dataclass(frozen=True)
class TensorArgs:
    """A parsed input: what to do, and where the data is."""

    in_type: int
    out_type: int
    mode: int
    axis: int
    shape: tuple[int, ...]
    scales: npt.NDArray[np.float32]
    zero_points: npt.NDArray[np.int32]
    shifts: npt.NDArray[np.int32]
    data_offset: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def in_dtype(self) -> np.dtype:
        return _DTYPES[self.in_type]

    @property
    def out_dtype(self) -> np.dtype:
        return _DTYPES[self.out_type]

    def outer_axis_inner(self) -> tuple[int, int, int]:
        """The shape seen as (outer, shape[axis], inner)."""
        outer = math.prod(self.shape[: self.axis])
        inner = math.prod(self.shape[self.axis + 1:])
        return outer, self.shape[self.axis], inner


def packed_bytes(data_bytes: int, param_words: int) -> int:
    """Size of an input buffer: header, `param_words` parameter words, then the tensor."""
    return _data_offset(param_words) + data_bytes


def _data_offset(param_words: int) -> int:
    return -(-(HEADER_WORDS * 4 + 4 * param_words) // DATA_ALIGN_BYTES) * DATA_ALIGN_BYTES


def pack(
    data: npt.NDArray, out_type: int, *, mode: int = MODE_NONE, axis: int = -1,
    scales: npt.ArrayLike = (), zero_points: npt.ArrayLike = (), shifts: npt.ArrayLike = (),
) -> bytes:
    """The input buffer contents for an NN operator on `data`."""
    in_type = next((code for code, dt in _DTYPES.items() if dt == data.dtype), None)
    if in_type is None:
        raise ValueError(f"unsupported input dtype {data.dtype}")
    if not 1 <= data.ndim <= 4:
        raise ValueError(f"tensors of 1 to 4 dimensions, got {data.ndim}")
    axis = axis % data.ndim
    if mode == MODE_SCALE:
        params = np.concatenate([np.asarray(scales, "<f4").view("<i4"),
                                 np.asarray(zero_points, "<i4")])
        n = len(np.asarray(scales))
    elif mode == MODE_SHIFT:
        params = np.asarray(shifts, "<i4")
        n = len(params)
    else:
        params = np.zeros(0, "<i4")
        n = 0
    param_offset = HEADER_WORDS * 4
    data_offset = _data_offset(len(params))
    shape = [*data.shape, *([1] * (4 - data.ndim))]
    header = np.array([MAGIC, VERSION, in_type, out_type, mode, axis, 0, data.ndim, *shape, n,
                       param_offset, data_offset, 0], dtype="<u4")
    blob = bytearray(data_offset + data.nbytes)
    blob[: HEADER_WORDS * 4] = header.tobytes()
    blob[param_offset: param_offset + 4 * len(params)] = params.tobytes()
    blob[data_offset:] = np.ascontiguousarray(data).tobytes()
    return bytes(blob)


def parse(buf: npt.NDArray[np.uint8], what: str) -> TensorArgs:
    """Read and check the header of an input buffer."""
    if len(buf) < HEADER_WORDS * 4:
        raise DspError(f"{what}: input of {len(buf)} B is shorter than the 64 B header")
    words = buf[: HEADER_WORDS * 4].view("<u4")
    if int(words[0]) != MAGIC or int(words[1]) != VERSION:
        raise DspError(f"{what}: input does not start with an EMUD v{VERSION} header")
    in_type, out_type, mode, axis, ndim = (int(w) for w in words[[2, 3, 4, 5, 7]])
    if in_type not in _DTYPES or out_type not in _DTYPES:
        raise DspError(f"{what}: unknown element type ({in_type}, {out_type})")
    if mode not in MODE_NAMES or not 1 <= ndim <= 4 or not 0 <= axis < ndim:
        raise DspError(f"{what}: bad mode {mode}, ndim {ndim} or axis {axis}")
    shape = tuple(int(s) for s in words[8: 8 + ndim])
    if any(s == 0 for s in shape):
        raise DspError(f"{what}: empty tensor of shape {shape}")
    n, param_offset, data_offset = (int(w) for w in words[12:15])
    n_words = 0 if mode == MODE_NONE else (2 * n if mode == MODE_SCALE else n)
    if mode != MODE_NONE and n not in (1, shape[axis]):
        raise DspError(f"{what}: {n} parameters for axis {axis} of size {shape[axis]} "
                       f"(expected 1 or {shape[axis]})")
    elements = math.prod(shape)
    data_bytes = elements * _DTYPES[in_type].itemsize
    if (param_offset + 4 * n_words > data_offset or data_offset % DATA_ALIGN_BYTES
            or data_offset + data_bytes > len(buf)):
        raise DspError(f"{what}: parameters or data run past the {len(buf)} B input")
    params = buf[param_offset: param_offset + 4 * n_words].view("<i4")
    empty_i = np.zeros(0, np.int32)
    return TensorArgs(
        in_type, out_type, mode, axis, shape,
        scales=params[:n].view("<f4").astype(np.float32) if mode == MODE_SCALE
        else np.zeros(0, np.float32),
        zero_points=params[n: 2 * n].astype(np.int32) if mode == MODE_SCALE else empty_i,
        shifts=params[:n].astype(np.int32) if mode == MODE_SHIFT else empty_i,
        data_offset=data_offset,
    )

"""How the CV operators find their images and parameters: a header at the start of the input.

A CV call, like every DSP call, passes one input and one output buffer. For the CV operators
(command ids 0x800-0xFFF) the input buffer is a small argument block that points at the
images, which stay in their own pool buffers (the DSP's iDMA reads them where the ARM code
wrote them, as the board's CV library does with its image structs). The output buffer is the
buffer the output image is written into. The argument block is little-endian 32-bit words:

    word  0  magic 0x43554D45 ("EMUC")    word  2  number of input images (1..3)
    word  1  layout version (1)           word  3  number of parameter words (0..64)
    words 4-27   three input image records (unused ones zero), words 28-35 the output's:
                 width, height, channels, element type, row stride in bytes, physical
                 address (low word, high word), planes (1, or 2 for NV12)
    words 36-99  parameter words: the operator's parameters in order, an int taking one
                 word (int32) and a real two (float64, low word first)

Element types: 1 uint8, 2 int16, 3 float32, 4 int32, 5 uint16. An NV12 image is one record
of its Y plane whose interleaved UV plane follows at `height` x `stride` bytes. `pack`
writes an argument block; `parse` checks one and raises `DspError` naming the problem;
`resolve` finds the pool buffer and offset each image lies in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.errors import DspError
from emu.mem.pool import CmaPool, PoolBuffer

MAGIC = 0x43554D45
VERSION = 1
MAX_INPUTS = 3
MAX_PARAM_WORDS = 64
_IMAGE_WORDS = 8
_OUTPUT_RECORD = MAX_INPUTS
_PARAMS_AT = 4 + (MAX_INPUTS + 1) * _IMAGE_WORDS
ARGS_BYTES = 4 * (_PARAMS_AT + MAX_PARAM_WORDS)
"""Size of an argument block."""

TYPE_U8, TYPE_S16, TYPE_F32, TYPE_S32, TYPE_U16 = 1, 2, 3, 4, 5
DTYPES: dict[int, np.dtype] = {
    TYPE_U8: np.dtype("u1"), TYPE_S16: np.dtype("<i2"), TYPE_F32: np.dtype("<f4"),
    TYPE_S32: np.dtype("<i4"), TYPE_U16: np.dtype("<u2"),
}
TYPE_NAMES = {TYPE_U8: "uint8", TYPE_S16: "int16", TYPE_F32: "float32", TYPE_S32: "int32",
              TYPE_U16: "uint16"}
MAX_SIDE = 1 << 15
"""Images are at most this many pixels a side (the CV library's 16-bit coordinates)."""


def type_code(dtype: npt.DTypeLike) -> int:
    """The element type code of a numpy dtype; ValueError when the CV library has none."""
    dt = np.dtype(dtype).newbyteorder("<")
    for code, known in DTYPES.items():
        if known == dt:
            return code
    raise ValueError(f"the CV operators take no {np.dtype(dtype)} images")


@dataclass(frozen=True)
class Image:
    """An image record: size, channels, element type, row stride and physical address."""

    width: int
    height: int
    channels: int
    etype: int
    stride: int
    addr: int
    planes: int = 1
    """2 for NV12 (a Y plane, then an interleaved UV plane of half the rows)."""

    @property
    def dtype(self) -> np.dtype:
        return DTYPES[self.etype]

    @property
    def pixel_bytes(self) -> int:
        return self.channels * self.dtype.itemsize

    @property
    def row_bytes(self) -> int:
        return self.width * self.pixel_bytes

    @property
    def rows_total(self) -> int:
        """Rows of `stride` the image takes, the UV plane of NV12 included."""
        return self.height + (self.height // 2 if self.planes == 2 else 0)

    @property
    def nbytes(self) -> int:
        """Bytes from the first row's start to the last row's end."""
        return (self.rows_total - 1) * self.stride + self.row_bytes

    def describe(self) -> str:
        kind = "NV12" if self.planes == 2 else f"{self.channels}x{TYPE_NAMES[self.etype]}"
        return f"{self.width}x{self.height} {kind}"


def encode_params(values: list[tuple[str, float]]) -> npt.NDArray[np.uint32]:
    """Parameter words of ("int", v) and ("real", v) entries, in order."""
    words: list[int] = []
    for kind, value in values:
        if kind == "int":
            words.append(int(value) & 0xFFFFFFFF)
        else:
            bits = int(np.array([value], "<f8").view("<u8")[0])
            words += [bits & 0xFFFFFFFF, bits >> 32]
    if len(words) > MAX_PARAM_WORDS:
        raise ValueError(f"{len(words)} parameter words; the block holds {MAX_PARAM_WORDS}")
    return np.array(words, "<u4")


def pack(inputs: list[Image], output: Image, params: npt.NDArray[np.uint32]) -> bytes:
    """An argument block for a call on `inputs` writing `output`."""
    if not 1 <= len(inputs) <= MAX_INPUTS:
        raise ValueError(f"1 to {MAX_INPUTS} input images, got {len(inputs)}")
    words = np.zeros(_PARAMS_AT + MAX_PARAM_WORDS, "<u4")
    words[:4] = [MAGIC, VERSION, len(inputs), len(params)]
    for k, rec in [*enumerate(inputs), (_OUTPUT_RECORD, output)]:
        at = 4 + k * _IMAGE_WORDS
        words[at: at + _IMAGE_WORDS] = [rec.width, rec.height, rec.channels, rec.etype,
                                        rec.stride, rec.addr & 0xFFFFFFFF, rec.addr >> 32,
                                        rec.planes]
    words[_PARAMS_AT: _PARAMS_AT + len(params)] = params
    return words.tobytes()


@dataclass(frozen=True)
class ImageCall:
    """A parsed CV call: its input images, its output image, its parameter words."""

    inputs: tuple[Image, ...]
    output: Image
    params: npt.NDArray[np.uint32]


def _record(words: npt.NDArray[np.uint32], k: int) -> Image | None:
    w = [int(x) for x in words[4 + k * _IMAGE_WORDS: 4 + (k + 1) * _IMAGE_WORDS]]
    if not any(w):
        return None
    return Image(w[0], w[1], w[2], w[3], w[4], w[5] | (w[6] << 32), w[7])


def _check_image(image: Image | None, what: str, name: str) -> Image:
    if image is None:
        raise DspError(f"{what}: the argument block has no {name} image")
    if image.etype not in DTYPES:
        raise DspError(f"{what}: {name} image has unknown element type {image.etype}")
    if not (1 <= image.width <= MAX_SIDE and 1 <= image.height <= MAX_SIDE
            and 1 <= image.channels <= 4 and image.planes in (1, 2)):
        raise DspError(f"{what}: {name} image of {image.width}x{image.height}x"
                       f"{image.channels} ({image.planes} planes) is outside 1..{MAX_SIDE} "
                       f"pixels a side and 1..4 channels")
    if image.planes == 2 and (image.channels != 1 or image.etype != TYPE_U8
                              or image.width % 2 or image.height % 2):
        raise DspError(f"{what}: NV12 {name} image must be uint8 with even width and height, "
                       f"got {image.width}x{image.height}")
    if image.stride < image.row_bytes:
        raise DspError(f"{what}: {name} image stride {image.stride} B is shorter than its "
                       f"rows of {image.row_bytes} B")
    return image


def parse(buf: npt.NDArray[np.uint8], what: str) -> ImageCall:
    """Read and check the argument block at the start of a CV call's input buffer."""
    if len(buf) < ARGS_BYTES:
        raise DspError(f"{what}: input of {len(buf)} B is shorter than the {ARGS_BYTES} B "
                       f"CV argument block")
    words = buf[:ARGS_BYTES].view("<u4")
    if int(words[0]) != MAGIC or int(words[1]) != VERSION:
        raise DspError(f"{what}: input does not start with an EMUC v{VERSION} argument block")
    n, n_params = int(words[2]), int(words[3])
    if not 1 <= n <= MAX_INPUTS or n_params > MAX_PARAM_WORDS:
        raise DspError(f"{what}: the block says {n} input images and {n_params} parameter "
                       f"words (1..{MAX_INPUTS} and at most {MAX_PARAM_WORDS})")
    inputs = tuple(_check_image(_record(words, k), what, f"input {k}") for k in range(n))
    output = _check_image(_record(words, _OUTPUT_RECORD), what, "output")
    return ImageCall(inputs, output, words[_PARAMS_AT: _PARAMS_AT + n_params].copy())


@dataclass(frozen=True)
class Placed:
    """An image and where it lies: its pool buffer and the byte offset in it."""

    image: Image
    buffer: PoolBuffer
    offset: int

    def pixels(self) -> npt.NDArray:
        """A copy of the image's rows (both planes for NV12) as (rows, width[, channels])."""
        im = self.image
        rows = np.lib.stride_tricks.as_strided(
            self.buffer.data[self.offset:], shape=(im.rows_total, im.row_bytes),
            strides=(im.stride, 1), writeable=False)
        pixels = np.ascontiguousarray(rows).view(im.dtype)
        if im.channels > 1:
            return pixels.reshape(im.rows_total, im.width, im.channels)
        return pixels


def place(image: Image, pool: CmaPool, what: str, name: str,
          must_be: PoolBuffer | None = None) -> Placed:
    """Find the live pool buffer holding all of `image`; DspError if none does (or if it is
    not `must_be`)."""
    buf = pool.find(image.addr)
    end = image.addr + image.nbytes
    if buf is None or not buf.alive or end > buf.phys_addr + buf.size_bytes:
        raise DspError(f"{what}: {name} image at {image.addr:#x}..{end:#x} "
                       f"({image.describe()}, stride {image.stride}) is not inside one live "
                       f"pool buffer")
    if must_be is not None and buf is not must_be:
        raise DspError(f"{what}: the {name} image must lie in the call's output buffer")
    return Placed(image, buf, image.addr - buf.phys_addr)

"""The BPU's resizer: crop a region of interest out of an image in DDR, scale it bilinearly.

J5's BPU reads a model's image input through a hardware resizer: it takes the ROI (region
of interest) of a source image in DDR and scales it to the model's input size. hbDNN
exposes it through `hbDNNResize` and `hbDNNRoiInfer`. This module is the pure part: which
jobs the hardware accepts (`check`), the exact pixels it produces (`resize`) and the job as
a layer group for the BPU cost model (`layer_group`). The runtime wires them to the API.

Limits (the hbDNN API documentation, `hbDNNRoiInfer`, "接口限制说明"; seed 000):
- ROI: 2 <= width <= 4096, 2 <= height <= 4096. A `Roi` is the board's `hbDNNRoi`: left,
  top, right, bottom, with right and bottom inclusive (width = right - left + 1).
- Source image: 1 <= W <= 4096, 16 <= stride <= 131072, stride a multiple of 16 (stride:
  bytes per row of a plane). The documents set no limit on H; it must be at least 1.
- Output: 2 <= Wout, 2 <= Hout (no maximum is documented, none is imposed).
- Scale step, per axis: step = ((src_len - 1) * 65536 + (dst_len - 1) // 2) // (dst_len - 1),
  src_len the ROI's width or height, dst_len the output's; 0 <= step <= 262143 (an 18-bit
  register of 2.16 fixed point). Step is the ROI-to-output ratio (src_len - 1) /
  (dst_len - 1) rounded to 1/65536, halves up, so it is never negative, and the limit holds
  exactly when src_len - 1 < 4 * (dst_len - 1): each axis may shrink by less than 4x;
  enlarging is not limited.

Choices this module makes where the documents are silent:
- the ROI lies inside the image (0 <= left, right < W, 0 <= top, bottom < H);
- a row holds the image: stride >= W x bytes per pixel;
- NV12: W, H, Wout and Hout are even, and the ROI's left and top are even and its right
  and bottom odd (so its width and height are even), so that the ROI covers whole 2 x 2
  blocks of the half-size chroma plane: its chroma ROI is (left / 2, top / 2, right // 2,
  bottom // 2), half the luma ROI's width and height. The step limit is checked on the
  luma ROI only, as documented; the chroma planes' own steps are computed the same way
  and may exceed 262143 in the last few sizes before the luma limit.

Formats and layouts (`image` is the bytes in DDR, rows of `stride` bytes):
- "gray": one plane of H rows; the output is uint8 (Hout, Wout);
- "nv12": the Y plane (H rows), then the interleaved U, V plane (H / 2 rows of W / 2 U, V
  pairs); the output is NV12 of the output size, as one uint8 array of
  Hout x Wout x 3 / 2 bytes (the Y plane, then the U, V pairs). Y is scaled from the ROI;
  U and V each from the chroma ROI to Wout / 2 x Hout / 2, with the steps of those sizes;
- "rgb", "bgr", "yuv444": packed, 3 bytes per pixel; each channel is scaled the same way
  and the output is uint8 (Hout, Wout, 3).

The fixed-point rule (the specification `resize` implements, integers only). Per axis, for
an ROI of `src_len` samples starting at `start` and `dst_len` outputs:
- step as above (step = 0 when dst_len = 1, which only a chroma plane of an NV12 output of
  width or height 2 has: its one sample takes the chroma ROI's first one);
- output index i sits at pos = i * step, in 16.16 fixed point relative to the ROI
  (aligned corners: output 0 on the ROI's first sample, output dst_len - 1 on its last, up
  to the rounding of step);
- the taps: n0 = min(pos >> 16, src_len - 1), n1 = min(n0 + 1, src_len - 1); the first
  `min` only matters for outputs of 131073 samples or more, where the rounded step can
  overshoot;
- the weight of the far tap is f = (pos >> 8) & 255: 8 fraction bits, the rest of pos's
  fraction dropped (truncated); the near tap weighs 256 - f.
With (x0, x1, fx) the taps and weight across, (y0, y1, fy) down, source pixels p(y, x) at
(top + y, left + x) of the plane and channel, the output is
    (p(y0, x0) (256 - fx) (256 - fy) + p(y0, x1) fx (256 - fy)
     + p(y1, x0) (256 - fx) fy + p(y1, x1) fx fy + 32768) >> 16,
the exact weighted sum rounded once, halves up. The weights are not negative and sum to
65536, so the result is always in 0..255 and needs no clamping. An output the size of its
ROI is the ROI exactly (step is then 65536, every f is 0).

Timing: the job is one "resize" layer group of the BPU cost model (`emu/bpu/timing.py`),
one operation per output byte, as a Resize node of a model is timed (`emu/nn/layers.py`).
It reads the ROI of each plane as the image lies in DDR, at its real bytes (the ROI's rows
x its width, not the whole stride: NV12's luma ROI, then its chroma ROI of U, V pairs;
packed pixels), not in the BPU's padded layout (`TensorRef.packed`). `hbDNNResize` writes
the output image, in its format's layout (NV12 as Hout x 3 / 2 rows of Wout bytes), to
DDR. A model compiled to read its input through the resizer (`hbDNNRoiInfer`) resizes on
the way in: the job's output is the model's image input as its first layer reads it
(`layers.image_ref`), a tensor of the model's first function call like any other, so it
stays on chip when it fits and only the ROIs come from DDR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.bpu.timing import LayerGroup, TensorRef
from emu.errors import InputError

FORMATS = ("gray", "nv12", "rgb", "bgr", "yuv444")
_PIXEL_BYTES = {"gray": 1, "nv12": 1, "rgb": 3, "bgr": 3, "yuv444": 3}

ROI_MIN, ROI_MAX = 2, 4096
IMAGE_WIDTH_MAX = 4096
STRIDE_MIN, STRIDE_MAX, STRIDE_ALIGN = 16, 131072, 16
OUTPUT_MIN = 2
STEP_MAX = 262143
STEP_FRACTION_BITS = 16
WEIGHT_BITS = 8

_WEIGHT_ONE = 1 << WEIGHT_BITS
_ROUND = 1 << (2 * WEIGHT_BITS - 1)


@dataclass(frozen=True)
class Roi:
    """A region of interest, as the board's `hbDNNRoi`: right and bottom are inclusive."""

    left: int
    top: int
    right: int
    bottom: int

    @property
    def width(self) -> int:
        return self.right - self.left + 1

    @property
    def height(self) -> int:
        return self.bottom - self.top + 1

    def chroma(self) -> Roi:
        """The same region in NV12's half-size chroma plane."""
        return Roi(self.left // 2, self.top // 2, self.right // 2, self.bottom // 2)

    def __str__(self) -> str:
        return f"({self.left}, {self.top})-({self.right}, {self.bottom})"


def scale_step(src_len: int, dst_len: int) -> int:
    """The 16.16 fixed-point source distance between neighbouring outputs (see the module)."""
    if dst_len == 1:
        return 0
    return ((src_len - 1) * 65536 + (dst_len - 1) // 2) // (dst_len - 1)


def check(src_w: int, src_h: int, stride: int, roi: Roi, dst_w: int, dst_h: int,
          fmt: str) -> str | None:
    """None when the resizer accepts the job, else one line naming the limit broken."""
    if fmt not in FORMATS:
        return f"format {fmt!r} is not one of {', '.join(FORMATS)}"
    if not 1 <= src_w <= IMAGE_WIDTH_MAX:
        return f"image width {src_w} outside 1..{IMAGE_WIDTH_MAX}"
    if src_h < 1:
        return f"image height {src_h} below 1"
    if not STRIDE_MIN <= stride <= STRIDE_MAX:
        return f"stride {stride} outside {STRIDE_MIN}..{STRIDE_MAX}"
    if stride % STRIDE_ALIGN:
        return f"stride {stride} is not a multiple of {STRIDE_ALIGN}"
    row_bytes = src_w * _PIXEL_BYTES[fmt]
    if stride < row_bytes:
        return f"stride {stride} is shorter than a row of {row_bytes} bytes"
    nv12 = fmt == "nv12"
    if nv12 and (src_w % 2 or src_h % 2):
        return f"nv12 image size {src_w}x{src_h} is odd"
    for axis, size in (("width", roi.width), ("height", roi.height)):
        if not ROI_MIN <= size <= ROI_MAX:
            return f"roi {axis} {size} outside {ROI_MIN}..{ROI_MAX}"
    if roi.left < 0 or roi.top < 0 or roi.right >= src_w or roi.bottom >= src_h:
        return f"roi {roi} is not inside the {src_w}x{src_h} image"
    if nv12 and (roi.left % 2 or roi.top % 2 or not roi.right % 2 or not roi.bottom % 2):
        return (f"nv12 roi {roi} does not cover whole chroma samples (left and top must be "
                "even, right and bottom odd)")
    for axis, size in (("width", dst_w), ("height", dst_h)):
        if size < OUTPUT_MIN:
            return f"output {axis} {size} below {OUTPUT_MIN}"
        if nv12 and size % 2:
            return f"nv12 output {axis} {size} is odd"
    for axis, src_len, dst_len in (("horizontal", roi.width, dst_w),
                                   ("vertical", roi.height, dst_h)):
        step = scale_step(src_len, dst_len)
        if not 0 <= step <= STEP_MAX:
            return (f"{axis} step {step} outside 0..{STEP_MAX} (roi {src_len} to output "
                    f"{dst_len}: 4x downscale or more)")
    return None


def _taps(src_len: int,
          dst_len: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp],
                                 npt.NDArray[np.int32]]:
    """Per output index along one axis: the near and far ROI-relative source index and the
    far tap's weight."""
    pos = np.arange(dst_len, dtype=np.int64) * scale_step(src_len, dst_len)
    near = np.minimum(pos >> STEP_FRACTION_BITS, src_len - 1)
    far = np.minimum(near + 1, src_len - 1)
    weight = (pos >> (STEP_FRACTION_BITS - WEIGHT_BITS)) & (_WEIGHT_ONE - 1)
    return near.astype(np.intp), far.astype(np.intp), weight.astype(np.int32)


def _scale(pixels: npt.NDArray[np.uint8], roi: Roi, dst_w: int,
           dst_h: int) -> npt.NDArray[np.uint8]:
    """(H, W, C) pixels -> (dst_h, dst_w, C) by the module's rule. The weighted sum is
    computed across first, then down, unrounded, which is the same integer. The work is
    proportional to the output (and to the ROI's width per output row)."""
    channels = pixels.shape[2]
    crop = pixels[roi.top:roi.bottom + 1, roi.left:roi.right + 1]
    rows = crop.reshape(roi.height, roi.width * channels)
    y0, y1, fy = _taps(roi.height, dst_h)
    x0, x1, fx = _taps(roi.width, dst_w)
    lanes = np.arange(channels)
    near_x = (x0[:, None] * channels + lanes).reshape(-1)
    far_x = (x1[:, None] * channels + lanes).reshape(-1)
    wx = np.repeat(fx, channels)[None, :]
    wy = fy[:, None]

    def across(y: npt.NDArray[np.intp]) -> npt.NDArray[np.int32]:
        band = rows[y]
        near = band[:, near_x].astype(np.int32)
        far = band[:, far_x].astype(np.int32)
        return near * (_WEIGHT_ONE - wx) + far * wx

    total = across(y0) * (_WEIGHT_ONE - wy) + across(y1) * wy + _ROUND
    return (total >> (2 * WEIGHT_BITS)).astype(np.uint8).reshape(dst_h, dst_w, channels)


def resize(image: npt.ArrayLike, fmt: str, src_w: int, src_h: int, stride: int, roi: Roi,
           dst_w: int, dst_h: int) -> npt.NDArray[np.uint8]:
    """The resizer's output for `roi` of `image` (uint8 bytes, rows of `stride` bytes; see
    the module for the layouts). Raises `InputError` for a job `check` refuses or an
    image shorter than its planes."""
    problem = check(src_w, src_h, stride, roi, dst_w, dst_h, fmt)
    if problem is not None:
        raise InputError(f"resizer: {problem}")
    data = np.asarray(image)
    if data.dtype != np.uint8:
        raise InputError(f"resizer: the image must be uint8 bytes, not {data.dtype}")
    data = data.reshape(-1)
    rows = src_h * 3 // 2 if fmt == "nv12" else src_h
    if data.size < rows * stride:
        raise InputError(f"resizer: a {src_w}x{src_h} {fmt} image of stride {stride} takes "
                         f"{rows * stride} bytes, the buffer has {data.size}")
    planes = data[:rows * stride].reshape(rows, stride)
    if fmt == "nv12":
        luma = _scale(planes[:src_h, :src_w, None], roi, dst_w, dst_h)
        pairs = planes[src_h:, :src_w].reshape(src_h // 2, src_w // 2, 2)
        chroma = _scale(pairs, roi.chroma(), dst_w // 2, dst_h // 2)
        return np.concatenate((luma.reshape(-1), chroma.reshape(-1)))
    channels = _PIXEL_BYTES[fmt]
    packed = planes[:, :src_w * channels].reshape(src_h, src_w, channels)
    out = _scale(packed, roi, dst_w, dst_h)
    return out[:, :, 0] if fmt == "gray" else out


def layer_group(name: str, fmt: str, dst_w: int, dst_h: int, rois: Sequence[Roi],
                into: TensorRef | None = None) -> LayerGroup:
    """The job, one output image per ROI of `rois`, as a "resize" layer group: it reads the
    ROI of each plane and writes the output images, in the format's layout, to DDR; or,
    with `into` (the model's image input, `layers.image_ref`, whose frames the ROIs fill),
    hands them to the layer groups that follow (see the module)."""
    if fmt not in FORMATS:
        raise InputError(f"resizer: format {fmt!r} is not one of {', '.join(FORMATS)}")
    if not rois:
        raise InputError("resizer: a job needs at least one ROI")
    inputs: list[TensorRef] = []
    for k, roi in enumerate(rois):
        if fmt == "nv12":
            half = roi.chroma()
            inputs += [TensorRef(f"{name}.roi{k}_y", 1, roi.height, roi.width, 1, packed=True),
                       TensorRef(f"{name}.roi{k}_uv", 1, half.height, half.width, 2,
                                 packed=True)]
        else:
            inputs.append(TensorRef(f"{name}.roi{k}", 1, roi.height, roi.width,
                                    _PIXEL_BYTES[fmt], packed=True))
    if into is not None:
        return LayerGroup(name, "RoiResize", "resize", into, tuple(inputs), split_axes=())
    batch = len(rois)
    if fmt == "nv12":
        output = TensorRef(f"{name}.out", batch, dst_h * 3 // 2, dst_w, 1, packed=True)
    else:
        output = TensorRef(f"{name}.out", batch, dst_h, dst_w, _PIXEL_BYTES[fmt], packed=True)
    return LayerGroup(name, "RoiResize", "resize", output, tuple(inputs), leaves=True,
                      split_axes=())  # one resizer job, never cut into parts

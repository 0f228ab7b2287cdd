"""The board's image input types: what a compiled model does to a camera frame first.

A model compiled for an image input type (`--input-type nv12|rgb|bgr|yuv444|gray`) takes
uint8 pixels and starts with one "Preprocess" node that runs on the BPU, as J5's does:
colour conversion to the colour space the network was trained on, then the data
normalisation `(pixel - mean[c]) * scale[c]`, whose result is the float tensor the ONNX
model's input stands for. A `featuremap` input is the ONNX input itself (float32, NCHW),
quantised on the CPU.

Layouts of the compiled model's input (N = batch, H x W = the ONNX input's plane):
- `rgb`, `bgr`, `yuv444`: uint8 (N, H, W, 3), NHWC as a camera pipeline writes it;
- `gray`: uint8 (N, H, W, 1);
- `nv12`: uint8 (N, H * 3 / 2, W): the Y plane, then the U, V samples interleaved at half
  resolution in both directions (H and W even). In memory hbDNN aligns its rows to
  `NV12_WIDTH_ALIGN` bytes (`aligned_width`; the runtime pads a copy of an input whose rows
  are not), and the BPU reads those rows.

The network is taken to be trained on RGB when it has 3 input channels and on gray when
it has 1; `rgb` feeds it unchanged, `bgr` swaps the channels, `yuv444` and `nv12` convert.

Colour conversion is integer arithmetic, so it is exact and the same everywhere:
- NV12 to YUV444: each chroma sample covers its 2 x 2 block (nearest, no filtering);
- YUV to RGB: BT.601 full range (JFIF), with 16-bit fixed-point coefficients
  C = round(c x 2**16) for c = 1.402 (R from V), 0.344136 (G from U), 0.714136 (G from V),
  1.772 (B from U). With d = U - 128, e = V - 128 and r(s) = (s + 2**15) >> 16 (the exact
  sum rounded once, halves up): R = Y + r(C_rv e), G = Y - r(C_gu d + C_gv e),
  B = Y + r(C_bu d), each saturated to [0, 255].

Normalisation: the mean is held in units of 1/256 (`round(mean x 256)`), so on the BPU the
int8 input code is `clamp(round_half_away((256 x p - m256) x scale / (256 x s_in)))`, with
the multiplier in the fixed-point form of `emu.nn.kernels`; in float (calibration and the
accuracy check) it is `(p - m256 / 256) x scale`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from emu.errors import InputError
from emu.nn import kernels

INPUT_TYPES = ("featuremap", "nv12", "rgb", "bgr", "yuv444", "gray")
IMAGE_TYPES = INPUT_TYPES[1:]
_FRACTION = 16
_HALF = 1 << (_FRACTION - 1)
_RV, _GU, _GV, _BU = (round(c * (1 << _FRACTION)) for c in (1.402, 0.344136, 0.714136, 1.772))
MEAN_UNITS = 256
NV12_WIDTH_ALIGN = 16  # an NV12 input's rows: documented, hbDNN's alignment rules (seed 000)


def aligned_width(width: int) -> int:
    """The bytes of an NV12 row of `width` pixels as hbDNN lays it out."""
    return -(-width // NV12_WIDTH_ALIGN) * NV12_WIDTH_ALIGN


@dataclass(frozen=True)
class ImageInput:
    """How one image input of a compiled model becomes the network's float input."""

    input_type: str
    channels: int  # the network's input channels: 3 (RGB) or 1 (gray)
    mean: tuple[float, ...]  # per channel of the network's input
    scale: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.input_type not in IMAGE_TYPES:
            raise InputError(f"--input-type {self.input_type}: expected one of "
                             f"{', '.join(INPUT_TYPES)}")
        wanted = 1 if self.input_type == "gray" else 3
        if self.channels != wanted:
            raise InputError(f"--input-type {self.input_type}: the model's input has "
                             f"{self.channels} channels; {self.input_type} gives {wanted}")
        for label, values in (("--mean", self.mean), ("--scale", self.scale)):
            if len(values) != self.channels or not all(np.isfinite(values)):
                raise InputError(f"{label}: expected {self.channels} finite values, got "
                                 f"{list(values)}")
        if not all(s > 0 for s in self.scale):
            raise InputError(f"--scale: expected positive values, got {list(self.scale)}")

    @property
    def mean_units(self) -> np.ndarray:
        """The mean in units of 1/256, per channel (int64)."""
        return np.array([round(m * MEAN_UNITS) for m in self.mean], dtype=np.int64)

    def shape(self, batch: int, height: int, width: int) -> tuple[int, ...]:
        """The compiled model's input shape for a network input of (batch, C, H, W)."""
        if self.input_type == "nv12":
            if height % 2 or width % 2:
                raise InputError(f"--input-type nv12: the input plane {height}x{width} "
                                 "must have even sides")
            return (batch, height * 3 // 2, width)
        return (batch, height, width, self.channels)

    def pixels(self, image: np.ndarray) -> np.ndarray:
        """uint8 input -> the network's colour space, int64 (N, C, H, W)."""
        if image.dtype != np.uint8:
            raise InputError(f"an {self.input_type} input must be uint8, got {image.dtype}")
        x = image.astype(np.int64)
        if self.input_type == "nv12":
            n, rows, width = x.shape
            height = rows * 2 // 3
            y = x[:, :height]
            uv = x[:, height:].reshape(n, height // 2, width // 2, 2)
            uv = uv.repeat(2, axis=1).repeat(2, axis=2)
            return _yuv_to_rgb(y, uv[..., 0], uv[..., 1])
        if self.input_type == "yuv444":
            return _yuv_to_rgb(x[..., 0], x[..., 1], x[..., 2])
        if self.input_type == "bgr":
            x = x[..., ::-1]
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))

    def to_float(self, image: np.ndarray) -> np.ndarray:
        """The float32 network input the image stands for (calibration, accuracy)."""
        p = self.pixels(image).astype(np.float64)
        mean = (self.mean_units / MEAN_UNITS).reshape(1, -1, 1, 1)
        scale = np.array(self.scale, dtype=np.float64).reshape(1, -1, 1, 1)
        return ((p - mean) * scale).astype(np.float32)

    def to_codes(self, image: np.ndarray, out_scale: float,
                 out_dtype: type | np.dtype = np.int8) -> np.ndarray:
        """The network input's integer codes at `out_scale`, exactly (the BPU's way)."""
        v = self.pixels(image) * MEAN_UNITS - self.mean_units.reshape(1, -1, 1, 1)
        info = np.iinfo(out_dtype)
        out = np.empty(v.shape, dtype=out_dtype)
        for c in range(self.channels):
            point = kernels.quantize_multiplier(self.scale[c] / (MEAN_UNITS * out_scale))
            scaled = kernels.apply_multiplier(v[:, c], point)
            out[:, c] = np.clip(scaled, info.min, info.max)
        return out


def _yuv_to_rgb(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """BT.601 full-range YUV (int64 planes of one shape) -> RGB int64 (N, 3, H, W)."""
    d, e = u - 128, v - 128
    r = y + ((_RV * e + _HALF) >> _FRACTION)
    g = y - ((_GU * d + _GV * e + _HALF) >> _FRACTION)
    b = y + ((_BU * d + _HALF) >> _FRACTION)
    return np.clip(np.stack([r, g, b], axis=1), 0, 255)


def parse_values(text: str | None, channels: int, default: float, label: str) -> tuple[float, ...]:
    """`--mean` / `--scale`: one value for every channel or one per channel."""
    if text is None:
        return (default,) * channels
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise InputError(f"{label} {text}: expected numbers separated by commas") from None
    if len(values) == 1:
        values *= channels
    return tuple(values)


def random_images(spec: ImageInput, shape: Sequence[int], count: int,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """`count` uniformly random uint8 inputs of the compiled input shape."""
    return [rng.integers(0, 256, size=tuple(shape), dtype=np.uint8) for _ in range(count)]

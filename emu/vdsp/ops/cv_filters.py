"""Linear-filter CV operators: box filter, Gaussian blur, 2-D filter, separable filter, Sobel.

All take one uint8 image of 1 or 3 interleaved channels (each channel filtered on its own;
the output has the input's channels). Output pixel (x, y) uses the source window of the
kernel placed with its anchor (OpenCV's default, ksize // 2) on (x, y); pixels outside the
image follow the border mode (`cv.BORDERS`; a constant border uses `borderValue`, rounded
to an integer 0..255, in every channel, where OpenCV's own functions use 0).

What each computes, and the arithmetic chosen to match OpenCV 5 (opencv-python 5.0):

- `box_filter` (cv::boxFilter, ddepth -1): S = the sum of the ksizeX x ksizeY window.
  Unnormalised: S saturated to 255. Normalised, area a = ksizeX * ksizeY: OpenCV takes
  three routes and we reproduce each bit for bit, as found by black-box tests over every
  size 1..31 x 1..31: for a power of two 2..256, floor((S + a/2 + 1) / a) (the 16-bit
  sum path's rounding, found black-box); for any other a <= 256, floor((S + a // 2) / a) (half
  up); for a > 256, S * float32(1/a) in float32 rounded half to even. The integer
  divisions are done in float32 with a reciprocal rounded up by one ulp, which is exact
  for every sum below 2**17 (checked exhaustively for a <= 256).
- `gaussian_blur` (cv::GaussianBlur): OpenCV's bit-exact 8-bit path. Kernel size from
  sigma when 0 (round(6 sigma + 1) | 1), sigma from size when 0; the taps are OpenCV's
  (the fixed tables for sizes 3..9 with sigma 0, else exp(-x^2 / (2 sigma^2)) normalised)
  turned into 8-bit fixed point by its error diffusion (the outer taps rounded with the
  carried error, the centre tap making the sum exactly 256). The result is
  (sum_j ky[j] sum_i kx[i] p + 2**15) >> 16: exact integer arithmetic, so the order of
  the passes does not matter and the output is bit-exact. (The taps use the host's exp;
  OpenCV uses a software double exp, which could differ in the last bit and move a tap
  only if a product landed exactly on a rounding boundary.)
- `filter2d` (cv::filter2D, ddepth -1): a ksize x ksize kernel (the top-left of the 5 x 5
  `kernel`, row-major), float32 arithmetic as OpenCV's 8-bit path: delta, then each
  non-zero tap in row-major order added with a fused multiply-add (`fma_f32`, one
  rounding), rounded half to even and saturated. That is the order and fusing of OpenCV's
  vector code on an x86 host with AVX2 (FMA3): bit-exact there, as the tests check. Where
  OpenCV runs unfused code (no FMA3) a result within a float32 rounding of a tie n + 0.5
  may round the other way: the bound is 1 LSB on at most 0.1 % of the pixels (measured
  with unfused arithmetic: 0 to 6 pixels of 640 x 480 for random 5 x 5 kernels).
- `sep_filter2d` (cv::sepFilter2D, ddepth -1): kernelX (ksizeX taps) along rows, kernelY
  (ksizeY taps) along columns, in float32 as OpenCV 5 computes 8-bit sepFilter2D (black-box
  tests: even a symmetric smoothing kernel such as [1 4 6 4 1] / 16 rounds exact ties to
  even, so it does not take a fixed-point path): rows first (fused products summed from 0
  in tap order), then delta plus the fused column products, rounded half to even and
  saturated. For symmetric kernels OpenCV adds each mirrored pair before multiplying,
  which the kernel does not mirror, so a value within a float32 rounding of a tie may
  round the other way: the bound, tested, is 1 LSB on at most 0.1 % of the pixels
  (measured: 1 pixel of 33 x 130 noise for [1 4 6 4 1] / 16; none for random kernels).
- `sobel` (cv::Sobel, ddepth CV_16S): the separable derivative kernels of order dx, dy and
  size ksize (1 means 3 taps without smoothing), scale applied to the smoothing kernel of x
  when dx is 0, else to the y kernel, as OpenCV does. With integer kernels and an integral
  delta (always for the default scale 1 and delta 0, and for any integral scale) the
  result is the exact integer sum plus delta saturated to int16, bit-exact. Otherwise the
  float32 engine as sep_filter2d: OpenCV's own float order (symmetric pairs, fused
  multiply-adds on this host) is not reproduced, so where the exact value is a tie
  (n + 0.5) the two may round differently: the bound, tested, is 1 LSB and only on
  pixels whose exact value scale * derivative + delta is such a tie (measured: 0.2 % of
  the pixels of random noise for scale 0.37, delta 3.7).

Tiling: `cv.image_plan` with the source rectangle grown by the kernel's reach, in bands of
whole rows (narrower strips when a band does not fit a TCM buffer). The integer engine
keeps one int16 row of vertical sums per output row as scratch after the output; the float
engine keeps the whole source tile in float32. Every pass works on whole 64-byte vectors.
The cost grows with the taps: per 64 pixels the integer engine spends, per vertical tap,
one load and two int16 multiply-accumulates, and per horizontal tap two loads and four
int32 multiply-accumulates; the float engine four loads and four float32
multiply-accumulates per tap. The coefficients are worked out once per call by scalar
code (charged as a table fill before the first tile) and splatted into registers by each
kernel call.

Not supported: other channel counts than 1 and 3 (only 1 for `sobel`: the API has no
3-channel int16 image format), other depths than uint8 in (and uint8 or int16 out),
custom anchors, the wrap border, kernels larger than 31 (box, Gaussian), 5 x 5 (filter2d)
or 7 taps (sep_filter2d).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import simpy

from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import isa, timing
from emu.vdsp.ops import cv
from emu.vdsp.ops import cv_filters_kernels as fk
from emu.vdsp.ops.image_args import TYPE_S16, TYPE_U8, Image

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_BOX_FILTER = 0x810
CMD_GAUSSIAN_BLUR = 0x811
CMD_FILTER2D = 0x812
CMD_SEP_FILTER2D = 0x813
CMD_SOBEL = 0x814

MAX_BOX = 31
MAX_GAUSSIAN = 31
MAX_FILTER2D = 5
MAX_SEP = 7

BORDER_PARAMS = (
    cv.Param("borderType", "choice", cv.BORDER_REFLECT_101, "border mode", choices=cv.BORDERS),
    cv.Param("borderValue", "real", 0.0, "value of a constant border (rounded)", 0.0, 255.0),
)


# --- kernels' coefficients ---------------------------------------------------------------


def gaussian_taps(n: int, sigma: float) -> list[float]:
    """OpenCV's normalised Gaussian of `n` taps (the fixed tables for sigma <= 0)."""
    tables = {1: [1.0], 3: [0.25, 0.5, 0.25], 5: [0.0625, 0.25, 0.375, 0.25, 0.0625],
              7: [0.03125, 0.109375, 0.21875, 0.28125, 0.21875, 0.109375, 0.03125],
              9: [w / 256 for w in (4, 13, 30, 51, 60, 51, 30, 13, 4)]}
    if sigma <= 0 and n in tables:
        return tables[n]
    s = sigma if sigma > 0 else n * 0.15 + 0.35
    scale2 = -0.125 / (s * s)
    half = (n - 1) // 2
    side = [math.exp(float((1 - n + 2 * i) ** 2) * scale2) for i in range(half)]
    total = sum(side) * 2 + 1.0
    mul = 1.0 / total
    taps = [0.0] * n
    for i, v in enumerate(side):
        taps[i] = taps[n - 1 - i] = v * mul
    taps[half] = mul
    return taps


def gaussian_fixed(n: int, sigma: float) -> list[int]:
    """The 8-bit fixed-point taps (sum 256) by OpenCV's error diffusion."""
    taps = gaussian_taps(n, sigma)
    out = [0] * n
    err = 0.0
    total = 0
    for i in range(n // 2):
        adjusted = taps[i] * 256.0 + err
        v = round(adjusted)  # half to even, as cvRound
        err = adjusted - v
        out[i] = out[n - 1 - i] = v
        total += v
    out[n // 2] = 256 - 2 * total
    return out


def gaussian_size(ksize: int, sigma: float) -> int:
    """The kernel size OpenCV uses for 8-bit images: `ksize`, or from sigma when 0."""
    return ksize if ksize > 0 else (round(sigma * 6 + 1) | 1)


def sobel_kernel(order: int, ksize: int) -> list[int]:
    """The 1-D Sobel kernel of `order` and size `ksize` (1 = no smoothing): a binomial of
    ksize - order taps differenced `order` times."""
    n = 3 if ksize == 1 and order > 0 else ksize
    k = np.array([1], np.int64)
    for _ in range(n - order - 1):
        k = np.convolve(k, [1, 1])
    for _ in range(order):
        k = np.convolve(k, [-1, 1])
    return [int(v) for v in k]


def sobel_kernels(values: cv.Values) -> tuple[list[float], list[float]]:
    """(kx, ky) of `sobel` with the scale applied as OpenCV applies it."""
    kx: list[float] = [float(v) for v in sobel_kernel(values["dx"], values["ksize"])]
    ky: list[float] = [float(v) for v in sobel_kernel(values["dy"], values["ksize"])]
    scale = values["scale"]
    if scale != 1:
        if values["dx"] == 0:
            kx = [v * scale for v in kx]
        else:
            ky = [v * scale for v in ky]
    return kx, ky


# --- parameter checks -------------------------------------------------------------------


def _grey(name: str, inputs: Sequence[Image]) -> Image:
    """The source image: uint8 with 1 or 3 (interleaved) channels."""
    src = inputs[0]
    if src.etype != TYPE_U8 or src.channels not in (1, 3) or src.planes != 1:
        raise ValueError(f"{name}: takes uint8 images of 1 or 3 channels, got "
                         f"{src.describe()}")
    return src


def _box_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = _grey("box_filter", inputs)
    return src.width, src.height, src.channels, TYPE_U8, 1


def _gaussian_sizes(values: cv.Values) -> tuple[int, int, float, float]:
    kx, ky = values["ksizeX"], values["ksizeY"]
    sx, sy = values["sigmaX"], values["sigmaY"]
    sy = sy if sy > 0 else sx
    for name, k in (("ksizeX", kx), ("ksizeY", ky)):
        if k != 0 and k % 2 == 0:
            raise ValueError(f"gaussian_blur: {name} must be odd (or 0 for from sigma), got {k}")
    if kx == 0 and sx <= 0:
        raise ValueError("gaussian_blur: sigmaX must be > 0 when ksizeX is 0, got "
                         f"{sx:g}")
    if ky == 0 and sy <= 0:
        raise ValueError("gaussian_blur: sigmaY (or sigmaX) must be > 0 when ksizeY is 0, "
                         f"got {sy:g}")
    nx, ny = gaussian_size(kx, sx), gaussian_size(ky, sy)
    for name, n in (("ksizeX", nx), ("ksizeY", ny)):
        if n > MAX_GAUSSIAN:
            raise ValueError(f"gaussian_blur: the sigma gives {name} = {n}, more than "
                             f"{MAX_GAUSSIAN}; give a smaller sigma")
    return nx, ny, sx, sy


def _gaussian_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = _grey("gaussian_blur", inputs)
    _gaussian_sizes(values)
    return src.width, src.height, src.channels, TYPE_U8, 1


def _filter2d_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = _grey("filter2d", inputs)
    return src.width, src.height, src.channels, TYPE_U8, 1


def _sep_plan(values: cv.Values) -> tuple[list[float], list[float]]:
    """(kernelX, kernelY) of sep_filter2d: the taps used."""
    return list(values["kernelX"][: values["ksizeX"]]), list(values["kernelY"][: values["ksizeY"]])


def _sep_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = _grey("sep_filter2d", inputs)
    _sep_plan(values)
    return src.width, src.height, src.channels, TYPE_U8, 1


def _sobel_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = _grey("sobel", inputs)
    if src.channels != 1:
        raise ValueError(f"sobel: takes uint8 grey images (int16 output has no 3-channel "
                         f"image format), got {src.describe()}")
    dx, dy, k = values["dx"], values["dy"], values["ksize"]
    if dx + dy == 0:
        raise ValueError("sobel: dx + dy must be at least 1, got dx = 0 and dy = 0")
    for name, order in (("dx", dx), ("dy", dy)):
        if k > 1 and order >= k:
            raise ValueError(f"sobel: {name} must be less than ksize {k}, got {order}")
    return src.width, src.height, src.channels, TYPE_S16, 1


# --- running the engines -----------------------------------------------------------------


def _border(values: cv.Values) -> tuple[int, float]:
    return values["borderType"], float(np.clip(np.rint(values["borderValue"]), 0, 255))


def _grown(nx: int, ny: int) -> Callable[[cv.Rect], cv.Rect]:
    ax, ay = nx // 2, ny // 2

    def source(out: cv.Rect) -> cv.Rect:
        return cv.Rect(out.x0 - ax, out.y0 - ay, out.x1 + nx - 1 - ax, out.y1 + ny - 1 - ay)

    return source


def _mid_pitch(src: cv.Rect, cn: int) -> int:
    """Row pitch of the int16 vertical sums: whole vectors of the source row and one more
    (the horizontal pass loads vectors up to taps - 1 pixels past an output row)."""
    return 2 * (cv.round_up(src.width * cn, isa.VECTOR_BYTES) + isa.VECTOR_BYTES)


def _f_pitch(src: cv.Rect, cn: int) -> int:
    """Row pitch of the float32 copy of the source tile (as `_mid_pitch`)."""
    return 4 * (cv.round_up(src.width * cn, isa.VECTOR_BYTES) + isa.VECTOR_BYTES)


def _setup_charge(core: VdspCore, coefficients: int) -> Callable[
        [timing.KernelCycles], timing.KernelCycles]:
    """What adds the set-up of a call to its first tile: the scalar code that works out the
    kernel's coefficients and writes them where the kernels read them, charged as
    `timing.table_fill_cycles` (the kernels then splat each one into a register)."""
    cycles = timing.table_fill_cycles(coefficients, 1, core.cfg)
    pending = [True]

    def charge(done: timing.KernelCycles) -> timing.KernelCycles:
        if not pending[0]:
            return done
        pending[0] = False
        setup = timing.KernelCycles(bundles=cycles, gather_cycles=0, fdiv_stall_cycles=0,
                                    call_cycles=0, memory_ops=0)
        return setup.then(done)

    return charge


def _filter_tile(src: int, dst: int, scratch: int, tile: cv.ImageTile, cn: int,
                 scratch_pitch: int) -> fk.FilterTile:
    return fk.FilterTile(src, dst, scratch, tile.out.height, tile.out.width * cn,
                         tile.src.height, tile.src.width * cn, tile.in_pitch, tile.out_pitch,
                         scratch_pitch, cn)


def _run_int(core: VdspCore, slot: CoreSlot, run: cv.CvRun, kx: Sequence[int],
             ky: Sequence[int], voff: int, hoff: int, finish: int, shift: int,
             scale: float) -> Generator[simpy.Event, Any, StageBody | None]:
    """The integer separable engine (`fk.sep_int_tile`) over the whole image."""
    kxa = np.array(kx, np.int16)
    kya = np.array(ky, np.int16)
    border, value = _border(run.values)
    cn = run.inputs[0].image.channels
    charge = _setup_charge(core, len(kx) + len(ky))
    filt = fk.IntFilter(kxa, kya, voff, hoff, finish, shift, scale)

    def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        mid = dst + tile.out.height * tile.out_pitch
        done = core.compute(fk.sep_int_tile, _filter_tile(src, dst, mid, tile, cn,
                                                          _mid_pitch(tile.src, cn)), filt)
        return charge(done)

    def plan() -> Any:
        return cv.image_plan(core, run, kernel, source=_grown(len(kx), len(ky)),
                             border=border, border_value=value,
                             scratch_bytes=lambda s, o: o.height * _mid_pitch(s, cn))

    return (yield from cv.run_plans(core, slot, run.what, [plan]))


def _run_float(core: VdspCore, slot: CoreSlot, run: cv.CvRun, *, kernel2d: npt.NDArray | None,
               kx: Sequence[float], ky: Sequence[float], delta: float,
               out16: bool) -> Generator[simpy.Event, Any, StageBody | None]:
    """The float32 engine (`fk.float_tile`): 2-D when `kernel2d` is given, else separable."""
    border, value = _border(run.values)
    cn = run.inputs[0].image.channels
    if kernel2d is not None:
        ny, nx = kernel2d.shape
        dy, dx = np.nonzero(kernel2d)  # row-major order
        taps = kernel2d[dy, dx].astype(np.float32)
        tap_dy, tap_dx = dy.astype(np.int64), dx.astype(np.int64) * cn
    else:
        nx, ny = len(kx), len(ky)
        taps = np.zeros(0, np.float32)
        tap_dy = tap_dx = np.zeros(0, np.int64)
    kxa = np.array(kx, np.float32)
    kya = np.array(ky, np.float32)
    separable = kernel2d is None
    charge = _setup_charge(core, len(taps) + len(kx) + len(ky))
    filt = fk.FloatFilter(taps, tap_dy, tap_dx, kxa, kya, delta, separable, out16)

    def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        fbuf = dst + tile.out.height * tile.out_pitch
        done = core.compute(fk.float_tile, _filter_tile(src, dst, fbuf, tile, cn,
                                                        _f_pitch(tile.src, cn)), filt)
        return charge(done)

    def plan() -> Any:
        return cv.image_plan(core, run, kernel, source=_grown(nx, ny), border=border,
                             border_value=value,
                             scratch_bytes=lambda s, o: s.height * _f_pitch(s, cn))

    return (yield from cv.run_plans(core, slot, run.what, [plan]))


def _box(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    v = run.values
    nx, ny = v["ksizeX"], v["ksizeY"]
    area = nx * ny
    if not v["normalize"]:
        finish, hoff, scale = fk.FIN_SHIFT_U8, 0, 1.0
    elif area <= 256:
        power = area & (area - 1) == 0
        hoff = area // 2 + 1 if power and area > 1 else area // 2
        finish = fk.FIN_FLOOR_DIV_U8
        scale = float(np.nextafter(np.float32(1) / np.float32(area), np.float32(2)))
    else:
        finish, hoff = fk.FIN_ROUND_MUL_U8, 0
        scale = float(np.float32(1) / np.float32(area))
    return (yield from _run_int(core, slot, run, [1] * nx, [1] * ny, 0, hoff, finish, 0,
                                scale))


def _gaussian(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    nx, ny, sx, sy = _gaussian_sizes(run.values)
    kx, ky = gaussian_fixed(nx, sx), gaussian_fixed(ny, sy)
    # Vertical sums offset by -128 * 256 stay in int16; the offset comes back as 2**23.
    return (yield from _run_int(core, slot, run, kx, ky, -128 * 256, 128 * 256 * 256,
                                fk.FIN_SHIFT_U8, 16, 1.0))


def _filter2d(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    v = run.values
    n = v["ksize"]
    kernel = np.array(v["kernel"], np.float64).reshape(MAX_FILTER2D, MAX_FILTER2D)[:n, :n]
    return (yield from _run_float(core, slot, run, kernel2d=kernel.astype(np.float32),
                                  kx=(), ky=(), delta=v["delta"], out16=False))


def _sep(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    kx, ky = _sep_plan(run.values)
    delta = run.values["delta"]
    return (yield from _run_float(core, slot, run, kernel2d=None, kx=kx, ky=ky, delta=delta,
                                  out16=False))


def _sobel(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    kx, ky = sobel_kernels(run.values)
    delta = run.values["delta"]
    integral = all(float(k).is_integer() for k in kx + ky) and float(delta).is_integer()
    if integral and sum(abs(k) for k in ky) <= 128 and sum(abs(k) for k in kx) <= 1024 \
            and abs(delta) < 2 ** 30:
        return (yield from _run_int(core, slot, run, [int(k) for k in kx],
                                    [int(k) for k in ky], 0, int(delta), fk.FIN_SAT_I16, 0,
                                    1.0))
    return (yield from _run_float(core, slot, run, kernel2d=None, kx=kx, ky=ky, delta=delta,
                                  out16=True))


# --- the operator table ------------------------------------------------------------------

_SHARPEN = (0.0, -1.0, 0.0, 0.0, 0.0,
            -1.0, 5.0, -1.0, 0.0, 0.0,
            0.0, -1.0, 0.0, 0.0, 0.0,
            0.0, 0.0, 0.0, 0.0, 0.0,
            0.0, 0.0, 0.0, 0.0, 0.0)
_BINOMIAL5 = (1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16, 0.0, 0.0)

BOX_FILTER = cv.define(cv.CvOp(
    CMD_BOX_FILTER, "box_filter", "BoxFilter",
    "box filter (sum or mean of a ksizeX x ksizeY window) of a uint8 image",
    (cv.Param("ksizeX", "int", 5, "window width", 1, MAX_BOX),
     cv.Param("ksizeY", "int", 5, "window height", 1, MAX_BOX),
     cv.Param("normalize", "choice", 1, "divide by the window area",
              choices=(("no", 0), ("yes", 1))),
     *BORDER_PARAMS),
    ("src",), _box_output, _box))

GAUSSIAN_BLUR = cv.define(cv.CvOp(
    CMD_GAUSSIAN_BLUR, "gaussian_blur", "GaussianBlur",
    "Gaussian blur of a uint8 image (OpenCV's bit-exact fixed point)",
    (cv.Param("ksizeX", "int", 5, "kernel width (odd, or 0 for from sigmaX)", 0, MAX_GAUSSIAN),
     cv.Param("ksizeY", "int", 5, "kernel height (odd, or 0 for from sigmaY)", 0,
              MAX_GAUSSIAN),
     cv.Param("sigmaX", "real", 0.0, "sigma along x (0: from ksizeX)", 0.0, 10.0),
     cv.Param("sigmaY", "real", 0.0, "sigma along y (0: sigmaX)", 0.0, 10.0),
     *BORDER_PARAMS),
    ("src",), _gaussian_output, _gaussian))

FILTER2D = cv.define(cv.CvOp(
    CMD_FILTER2D, "filter2d", "Filter2D",
    "2-D correlation of a uint8 image with a kernel of up to 5 x 5 (float32)",
    (cv.Param("ksize", "int", 3, "kernel size (the top-left ksize x ksize of kernel)", 1,
              MAX_FILTER2D),
     cv.Param("kernel", "reals", _SHARPEN, "5 x 5 kernel, row-major", count=25),
     cv.Param("delta", "real", 0.0, "added to every result", -1e6, 1e6),
     *BORDER_PARAMS),
    ("src",), _filter2d_output, _filter2d))

SEP_FILTER2D = cv.define(cv.CvOp(
    CMD_SEP_FILTER2D, "sep_filter2d", "SepFilter2D",
    "separable filter of a uint8 image: kernelX along rows, kernelY along columns",
    (cv.Param("ksizeX", "int", 5, "taps of kernelX used", 1, MAX_SEP),
     cv.Param("ksizeY", "int", 5, "taps of kernelY used", 1, MAX_SEP),
     cv.Param("kernelX", "reals", _BINOMIAL5, "row kernel (first ksizeX used)", count=MAX_SEP),
     cv.Param("kernelY", "reals", _BINOMIAL5, "column kernel (first ksizeY used)",
              count=MAX_SEP),
     cv.Param("delta", "real", 0.0, "added to every result", -1e6, 1e6),
     *BORDER_PARAMS),
    ("src",), _sep_output, _sep))

SOBEL = cv.define(cv.CvOp(
    CMD_SOBEL, "sobel", "Sobel",
    "Sobel derivative of a uint8 image into int16",
    (cv.Param("dx", "int", 1, "order of the x derivative", 0, 2),
     cv.Param("dy", "int", 0, "order of the y derivative", 0, 2),
     cv.Param("ksize", "choice", 3, "kernel size (1: 3 taps, no smoothing)",
              choices=(("1", 1), ("3", 3), ("5", 5))),
     cv.Param("scale", "real", 1.0, "scale of the derivative", -1e4, 1e4),
     cv.Param("delta", "real", 0.0, "added to every result", -1e6, 1e6),
     *BORDER_PARAMS),
    ("src",), _sobel_output, _sobel))

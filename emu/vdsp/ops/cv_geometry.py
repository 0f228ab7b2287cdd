"""Geometric CV operators: flip, transpose, rotate, resize, roi_resize, pyr_down, pyr_up.

All take uint8 images and give results bit-identical to OpenCV's (`cv2.flip`,
`cv2.transpose`, `cv2.rotate`, `cv2.resize`, `cv2.pyrDown`, `cv2.pyrUp` with default sizes
and borders):

- flip (flipCode 0 vertical: rows reversed; 1 horizontal: columns reversed; -1 both), grey
  or RGB. An output tile's source is the mirrored rectangle; the kernel reads rows in
  reverse order and reverses the pixels of each vector with one byte shuffle.
- transpose and rotate (rotateCode 0: 90 degrees clockwise, 1: 180, 2: 90 counter-
  clockwise). A 90-degree rotation is a transpose with the source rows (clockwise) or the
  output rows (counter-clockwise) taken in reverse order; 180 is a flip of both axes. An
  output tile (bands of 64 output rows) needs the transposed source rectangle; the kernel
  transposes 64 x 64 byte blocks with six rounds of byte interleaves (RGB: the block is
  split into three channel planes with byte selects, each plane transposed, and the output
  rows put back together). Grey or RGB.
- resize (dsizeWidth x dsizeHeight; interpolation 0 nearest, 1 linear, 3 area), grey or
  RGB.
  Nearest: source column floor(x * (1 / (dw / sw))) in double, capped at sw - 1 (the same
  for rows), as OpenCV's INTER_NEAREST. Linear: OpenCV's fixed-point 8-bit path. Per output
  column, fx = float32((x + 0.5) * scale - 0.5) (scale = 1 / (dw / sw) in double), sx =
  floor(fx), fx -= sx; left of the image sx = 0, fx = 0, right of it sx = sw - 1, fx = 0;
  coefficients round(2048 * (1 - fx)) and round(2048 * fx) computed in float32 and rounded
  half to even. Rows use the same formula but keep fy and clamp only the two row indices.
  The horizontal pass gives h = S[sx] * a0 + S[sx + 1] * a1 (int32); the vertical pass
  computes ((h0 >> 4) * b0 >> 16) + ((h1 >> 4) * b1 >> 16), then (v + 2) >> 2 saturated,
  which is the arithmetic of OpenCV's SIMD vertical pass (the one its results show for every
  pixel, tails included). OpenCV turns an exact 2x linear downscale into INTER_AREA; for
  8-bit images that average, (a + b + c + d + 2) >> 2, equals the formula above (the
  coefficients are 1024, 1024), so no special case is needed. A size equal to the source
  copies it, which the formula also gives.
  The column table (byte offsets, a0, a1 per output byte) lives in TCM, written by set-up
  code whose cost is charged (`timing.table_fill_cycles`; the per-row indices and
  coefficients likewise). A tile's source is the rectangle its rows' and columns' indices
  need; its kernel filters each source row it uses once, horizontally (two byte gathers per
  output byte), into int16 scratch rows, then forms each output row from two of them.
  Limits: dsizeWidth x channels <= 8192 (the table's TCM), source width x channels <= 65535
  (the gather offsets are 16-bit).
  Area (interpolation 3), as OpenCV: where either axis enlarges, the bilinear path above
  with OpenCV's area fractions (sx = floor(x * scale), fx = float32((x + 1) - (sx + 1) *
  dw / sw), 0 if <= 0 else its fractional part); a 2 x 2 shrink is the average above; other
  shrinks by integer factors kx x ky (the factors OpenCV treats as integers: 1 / (dw / sw)
  within DBL_EPSILON of one) give round-half-even(float32(sum) * float32(1 / (kx * ky))) of
  each kx x ky block (the kernel sums rows into 16-bit scratch, at most 257 of them, then
  gathers and sums the block's columns in int32, scales in float32 and rounds). Shrinking
  by other factors (OpenCV's fractional-area weights in float) is refused.
- roi_resize: resize of the crop roiX, roiY, roiWidth x roiHeight (inside the image), as
  `cv2.resize(src[y:y + h, x:x + w], ...)`: the crop's edges replicate, as in OpenCV,
  whatever lies beyond them in the image.
- pyr_down: (w + 1) / 2 x (h + 1) / 2 outputs of the 5 x 5 kernel [1 4 6 4 1]^2 at even
  source positions, (sum + 128) >> 8, border reflect101. Grey or RGB. A tile's source is
  the doubled rectangle with a 2-pixel halo; the kernel filters rows horizontally (even/odd
  byte deinterleaves, or byte selects for RGB, and widening multiply-accumulates) into int16
  scratch, then columns.
- pyr_up: 2w x 2h outputs: even positions weight 1 6 1 and odd ones 4 4 in each direction,
  (sum + 32) >> 6. OpenCV reflects (reflect101) at the top and left and replicates at the
  bottom and right; the kernel does the same (source rows clamped, one copied lane at the
  right edge). Grey or RGB. Tiles start on even output rows and columns.

Not supported: other element types and channel counts, OpenCV's cubic and Lanczos
interpolation, area shrinking by non-integer factors, pyramids with other output sizes or
borders. None of these operators takes a border mode (OpenCV's flip, transpose, rotate and
resize have none; the pyramids use their fixed borders above).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import simpy

from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.ops import cv, cv_geometry_kernels
from emu.vdsp.ops.cv_kernel_records import TileRows
from emu.vdsp.ops.image_args import TYPE_U8, Image
from emu.vdsp.tiling import TiledPlan, resumable, stream

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_FLIP, CMD_TRANSPOSE, CMD_ROTATE, CMD_RESIZE = 0x820, 0x821, 0x822, 0x823
CMD_ROI_RESIZE, CMD_PYR_DOWN, CMD_PYR_UP = 0x824, 0x825, 0x826

FLIP_CODES = (("both", -1), ("vertical", 0), ("horizontal", 1))
ROTATE_CODES = (("clockwise", 0), ("rotate180", 1), ("counterclockwise", 2))
INTER_NEAREST, INTER_LINEAR, INTER_AREA = 0, 1, 3
INTERPOLATIONS = (("nearest", INTER_NEAREST), ("linear", INTER_LINEAR), ("area", INTER_AREA))
MAX_AREA_ROWS = 257
"""Most source rows an area output sums (the column sums are 16-bit)."""
MAX_TABLE_ENTRIES = 8192
"""Most output bytes per row resize supports (its column table sits in TCM)."""
_COEF_SCALE = 2048


def _check_u8(op: str, src: Image, channels: tuple[int, ...]) -> None:
    if src.etype != TYPE_U8 or src.channels not in channels or src.planes != 1:
        raise ValueError(f"{op}: takes uint8 images of {' or '.join(map(str, channels))} "
                         f"channel(s), got {src.describe()}")


# --- flip, transpose, rotate -----------------------------------------------------------------


def _flip_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = inputs[0]
    _check_u8("flip", src, (1, 3))
    return src.width, src.height, src.channels, TYPE_U8, 1


def _flip_plan(core: VdspCore, run: cv.CvRun, rev_rows: bool, rev_cols: bool
               ) -> TiledPlan[cv.ImageTile]:
    im = run.inputs[0].image
    width, height, pb = im.width, im.height, im.pixel_bytes

    def source(out: cv.Rect) -> cv.Rect:
        x0, x1 = (width - out.x1, width - out.x0) if rev_cols else (out.x0, out.x1)
        y0, y1 = (height - out.y1, height - out.y0) if rev_rows else (out.y0, out.y1)
        return cv.Rect(x0, y0, x1, y1)

    def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        return core.compute(cv_geometry_kernels.flip_tile,
                            TileRows(src, dst, tile.out.height, tile.out.width, tile.in_pitch,
                                     tile.out_pitch), pb, rev_rows, rev_cols)

    return cv.image_plan(core, run, kernel, source=source)


def _flip(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    code = run.values["flipCode"]
    return (yield from cv.run_plans(core, slot, run.what,
                                    [lambda: _flip_plan(core, run, code <= 0, code != 0)]))


def _transposed_output(op: str, rotate: bool) -> Callable[[Sequence[Image], cv.Values],
                                                          cv.OutputSpec]:
    def output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
        src = inputs[0]
        _check_u8(op, src, (1, 3))
        if rotate and values["rotateCode"] == 1:
            return src.width, src.height, src.channels, TYPE_U8, 1
        return src.height, src.width, src.channels, TYPE_U8, 1

    return output


def _transpose_plan(core: VdspCore, run: cv.CvRun, rev_rows: bool, rev_cols: bool
                    ) -> TiledPlan[cv.ImageTile]:
    im = run.inputs[0].image
    width, height = im.width, im.height

    def source(out: cv.Rect) -> cv.Rect:
        # Output (y, x) is source (R(x), C(y)): rows from output columns, columns from rows.
        y0, y1 = (height - out.x1, height - out.x0) if rev_rows else (out.x0, out.x1)
        x0, x1 = (width - out.y1, width - out.y0) if rev_cols else (out.y0, out.y1)
        return cv.Rect(x0, y0, x1, y1)

    body = (cv_geometry_kernels.transpose_tile if im.channels == 1
            else cv_geometry_kernels.transpose3_tile)

    def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        return core.compute(body, TileRows(src, dst, tile.src.height, tile.src.width,
                                           tile.in_pitch, tile.out_pitch), rev_rows, rev_cols)

    return cv.image_plan(core, run, kernel, source=source, row_step=64)


def _transpose(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    return (yield from cv.run_plans(core, slot, run.what,
                                    [lambda: _transpose_plan(core, run, False, False)]))


def _rotate(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    code = run.values["rotateCode"]
    return (yield from cv.run_plans(core, slot, run.what, [
        lambda: (_flip_plan(core, run, True, True) if code == 1
                 else _transpose_plan(core, run, code == 0, code == 2))]))


# --- resize ----------------------------------------------------------------------------------


def linear_coefficients(src_n: int, dst_n: int, clamp: bool, area: bool = False) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """OpenCV's 8-bit bilinear source index and 11-bit coefficients for each of `dst_n`
    outputs along an axis of `src_n` pixels (see the module docstring); `clamp` is the column
    rule (index and fraction clamped at the edges), else the row rule (fraction kept).
    `area` gives the fractions of OpenCV's area mode where it enlarges."""
    inv_scale = dst_n / src_n
    scale = 1.0 / inv_scale
    d = np.arange(dst_n, dtype=np.float64)
    if area:
        index = np.floor(d * scale).astype(np.int64)
        f = ((d + 1) - (index + 1) * inv_scale).astype(np.float32)
        f = np.where(f <= 0, np.float32(0), f - np.floor(f)).astype(np.float32)
    else:
        f = ((d + 0.5) * scale - 0.5).astype(np.float32)
        index = np.floor(f).astype(np.int64)
        f = (f - index.astype(np.float32)).astype(np.float32)
    if clamp:
        low, high = index < 0, index >= src_n - 1
        f[low | high] = 0
        index[low] = 0
        index[high] = src_n - 1
    one = np.float32(1)
    c0 = np.rint((one - f) * np.float32(_COEF_SCALE)).astype(np.int64)
    c1 = np.rint(f * np.float32(_COEF_SCALE)).astype(np.int64)
    return index, c0, c1


def nearest_index(src_n: int, dst_n: int) -> npt.NDArray[np.int64]:
    """OpenCV's INTER_NEAREST source index of each of `dst_n` outputs."""
    scale = 1.0 / (dst_n / src_n)
    index = np.floor(np.arange(dst_n, dtype=np.float64) * scale).astype(np.int64)
    return np.minimum(index, src_n - 1)


def _check_dsize(op: str, values: cv.Values, channels: int) -> tuple[int, int]:
    dw, dh = values["dsizeWidth"], values["dsizeHeight"]
    if dw * channels > MAX_TABLE_ENTRIES:
        raise ValueError(f"{op}: dsizeWidth x channels must be at most {MAX_TABLE_ENTRIES}, "
                         f"got {dw} x {channels}")
    return dw, dh


def resize_method(op: str, size: tuple[int, int], dsize: tuple[int, int], channels: int,
                  interpolation: int) -> tuple[str, int, int]:
    """How a resize of `size` (width, height) to `dsize` runs, as OpenCV decides: "nearest",
    "linear", "area_linear" (area mode where it enlarges: bilinear with area fractions) or
    "box" (area by integer factors, which are returned). OpenCV's 2 x 2 area average and a
    same-size copy are "linear" (the same bytes). ValueError for area downscaling by factors
    OpenCV does not treat as integers."""
    (sw, sh), (dw, dh) = size, dsize
    if interpolation == INTER_NEAREST:
        return "nearest", 0, 0
    scale_x, scale_y = 1.0 / (dw / sw), 1.0 / (dh / sh)
    ix, iy = round(scale_x), round(scale_y)
    eps = float(np.finfo(np.float64).eps)
    integer = abs(scale_x - ix) < eps and abs(scale_y - iy) < eps
    if interpolation == INTER_LINEAR or (sw, sh) == (dw, dh) or (integer and ix == iy == 2):
        return "linear", 0, 0
    if scale_x < 1 or scale_y < 1:
        return "area_linear", 0, 0
    if not integer:
        raise ValueError(f"{op}: interpolation area shrinks by integer factors only (or "
                         f"enlarges), got {sw}x{sh} -> {dw}x{dh}")
    if iy > MAX_AREA_ROWS:
        raise ValueError(f"{op}: interpolation area sums at most {MAX_AREA_ROWS} rows, got "
                         f"{sh} -> {dh}")
    if 2 * (sw * channels + ix * (64 + channels)) > 65535:
        raise ValueError(f"{op}: interpolation area takes source rows of at most 32000 "
                         f"bytes, got {sw} x {channels}")
    return "box", ix, iy


def _resize_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = inputs[0]
    _check_u8("resize", src, (1, 3))
    if src.width * src.channels > 65535:
        raise ValueError(f"resize: the source row must be at most 65535 bytes, got "
                         f"{src.width} x {src.channels}")
    dw, dh = _check_dsize("resize", values, src.channels)
    resize_method("resize", (src.width, src.height), (dw, dh), src.channels,
                  values["interpolation"])
    return dw, dh, src.channels, TYPE_U8, 1


def _roi(values: cv.Values) -> tuple[int, int, int, int]:
    return values["roiX"], values["roiY"], values["roiWidth"], values["roiHeight"]


def _roi_resize_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = inputs[0]
    _check_u8("roi_resize", src, (1, 3))
    x, y, w, h = _roi(values)
    if x + w > src.width:
        raise ValueError(f"roi_resize: roiX + roiWidth must be at most the image width "
                         f"{src.width}, got {x} + {w}")
    if y + h > src.height:
        raise ValueError(f"roi_resize: roiY + roiHeight must be at most the image height "
                         f"{src.height}, got {y} + {h}")
    if w * src.channels > 65535:
        raise ValueError(f"roi_resize: roiWidth x channels must be at most 65535, got "
                         f"{w} x {src.channels}")
    dw, dh = _check_dsize("roi_resize", values, src.channels)
    resize_method("roi_resize", (w, h), (dw, dh), src.channels, values["interpolation"])
    return dw, dh, src.channels, TYPE_U8, 1


def _used_rows(rows0: npt.NDArray[np.int64], rows1: npt.NDArray[np.int64]) -> tuple[
        npt.NDArray[np.int64], tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]]:
    """The distinct source rows output rows read, and for each output row the positions of
    its two rows among them (its scratch rows)."""
    used = np.unique(np.concatenate([rows0, rows1]))
    return used, (np.searchsorted(used, rows0).astype(np.int32),
                  np.searchsorted(used, rows1).astype(np.int32))


def _scratch_pitch(out_bytes: int) -> int:
    """Bytes of one int16 scratch row of a linear resize tile."""
    return 2 * cv.round_up(out_bytes, 64)


def _resize_run(core: VdspCore, slot: CoreSlot, run: cv.CvRun,
                roi: tuple[int, int, int, int]) -> Generator[simpy.Event, Any, StageBody | None]:
    """Resize the crop `roi` (x, y, width, height) of the input to the output's size."""
    rx, ry, rw, rh = roi
    cn = run.inputs[0].image.channels
    out_im = run.output.image
    dw, dh = out_im.width, out_im.height
    method, kx, ky = resize_method(run.what, (rw, rh), (dw, dh), cn, run.values["interpolation"])
    if method == "box":
        return (yield from _box_run(core, slot, run, roi, kx, ky))
    linear = method != "nearest"
    if linear:
        area = method == "area_linear"
        xo, c0, c1 = linear_coefficients(rw, dw, clamp=True, area=area)
        yo, b0, b1 = linear_coefficients(rh, dh, clamp=False, area=area)
        rows0 = np.clip(yo, 0, rh - 1) + ry
        rows1 = np.clip(yo + 1, 0, rh - 1) + ry
        last_col = np.minimum(xo + 1, rw - 1)
    else:
        xo = nearest_index(rw, dw)
        rows0 = rows1 = nearest_index(rh, dh) + ry
        c0 = c1 = np.zeros(dw, np.int64)
        last_col = xo
    # The column table: per output byte, the byte offset (from the crop's first byte in a
    # row) of its first source byte, and its two coefficients; padded by a vector and more
    # with the last offset so that whole-vector reads stay on source pixels.
    entries = dw * cn
    padded = cv.round_up(entries, 64) + 64
    offsets = np.empty(padded, np.uint16)
    offsets[:entries] = (xo[:, None] * cn + np.arange(cn)).reshape(-1)
    offsets[entries:] = offsets[entries - 1]
    alpha0 = np.zeros(padded, np.int16)
    alpha1 = np.zeros(padded, np.int16)
    alpha0[:entries] = np.repeat(c0, cn)
    alpha1[:entries] = np.repeat(c1, cn)
    tables = 3 if linear else 1
    setup = (timing.table_fill_cycles(-(-padded // 2), tables, core.cfg)
             + timing.table_fill_cycles(dh, 3 if linear else 1, core.cfg))

    def source(out: cv.Rect) -> cv.Rect:
        return cv.Rect(rx + int(xo[out.x0: out.x1].min()), int(rows0[out.y0: out.y1].min()),
                       rx + int(last_col[out.x0: out.x1].max()) + 1,
                       int(rows1[out.y0: out.y1].max()) + 1)

    def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
        table = core.tcm.alloc(0, 2 * padded * tables, f"{run.what} column table")
        try:
            tcm = core.tcm.data
            at = table.offset
            tcm[at: at + 2 * padded] = offsets.view(np.uint8)
            if linear:
                tcm[at + 2 * padded: at + 4 * padded] = alpha0.view(np.uint8)
                tcm[at + 4 * padded: at + 6 * padded] = alpha1.view(np.uint8)
            yield from core.setup(slot, setup, f"{run.what} column table")

            def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
                o, s = tile.out, tile.src
                shift = (s.x0 - rx) * cn
                r0 = (rows0[o.y0: o.y1] - s.y0).astype(np.int32)
                if not linear:
                    return core.compute(cv_geometry_kernels.resize_nearest_tile,
                                        TileRows(src, dst, o.height, o.width * cn,
                                                 tile.in_pitch, tile.out_pitch),
                                        at, o.x0 * cn, shift, r0)
                used, slots = _used_rows(rows0[o.y0: o.y1], rows1[o.y0: o.y1])
                scratch = dst + o.height * tile.out_pitch
                gk = cv_geometry_kernels
                return core.compute(
                    gk.resize_linear_tile,
                    gk.ScratchTile(src, dst, scratch, _scratch_pitch(o.width * cn), o.height,
                                  o.width * cn, tile.in_pitch, tile.out_pitch),
                    gk.ColumnTable(at, at + 2 * padded, at + 4 * padded, o.x0 * cn, shift, cn),
                    gk.RowTable((used - s.y0).astype(np.int32), slots[0], slots[1],
                                b0[o.y0: o.y1].astype(np.int32),
                                b1[o.y0: o.y1].astype(np.int32)))

            def scratch_bytes(src: cv.Rect, out: cv.Rect) -> int:
                if not linear:
                    return 0
                used, _ = _used_rows(rows0[out.y0: out.y1], rows1[out.y0: out.y1])
                return len(used) * _scratch_pitch(out.width * cn)

            plan = cv.image_plan(core, run, kernel, source=source,
                                 scratch_bytes=scratch_bytes)
            return (yield from stream(core, slot, plan, run.what, first=first))
        finally:
            core.tcm.free(table)

    return (yield from resumable(tiles)(slot))


def _box_run(core: VdspCore, slot: CoreSlot, run: cv.CvRun, roi: tuple[int, int, int, int],
             kx: int, ky: int) -> Generator[simpy.Event, Any, StageBody | None]:
    """Area resize of the crop `roi` by the integer factors kx x ky."""
    rx, ry = roi[:2]
    cn = run.inputs[0].image.channels
    entries = run.output.image.width * cn
    padded = cv.round_up(entries, 64) + 64
    # Output byte J of a tile starts at scratch byte 2 * (kx * cn * (J // cn) + J % cn).
    j = np.arange(padded)
    offsets = (2 * (kx * cn * (j // cn) + j % cn)).astype(np.uint16)
    scale = float(np.float32(1) / np.float32(kx * ky))
    setup = timing.table_fill_cycles(-(-padded // 2), 1, core.cfg)

    def source(out: cv.Rect) -> cv.Rect:
        return cv.Rect(rx + kx * out.x0, ry + ky * out.y0, rx + kx * out.x1, ry + ky * out.y1)

    def scratch_bytes(src: cv.Rect, out: cv.Rect) -> int:
        return 2 * cv.round_up(src.width * cn, 64) + 2 * kx * (64 + cn) + 64

    def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
        table = core.tcm.alloc(0, 2 * padded, f"{run.what} column table")
        try:
            core.tcm.data[table.offset: table.offset + 2 * padded] = offsets.view(np.uint8)
            yield from core.setup(slot, setup, f"{run.what} column table")

            def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
                o, s = tile.out, tile.src
                return core.compute(cv_geometry_kernels.resize_area_tile,
                                    TileRows(src, dst, o.height, o.width * cn, tile.in_pitch,
                                             tile.out_pitch),
                                    dst + o.height * tile.out_pitch, s.width * cn,
                                    cv_geometry_kernels.AreaTable(table.offset, kx, ky, cn,
                                                                  scale))

            plan = cv.image_plan(core, run, kernel, source=source,
                                 scratch_bytes=scratch_bytes)
            return (yield from stream(core, slot, plan, run.what, first=first))
        finally:
            core.tcm.free(table)

    return (yield from resumable(tiles)(slot))


def _resize(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    im = run.inputs[0].image
    return (yield from _resize_run(core, slot, run, (0, 0, im.width, im.height)))


def _roi_resize(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    return (yield from _resize_run(core, slot, run, _roi(run.values)))


# --- image pyramids --------------------------------------------------------------------------


def _pyr_down_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = inputs[0]
    _check_u8("pyr_down", src, (1, 3))
    return (src.width + 1) // 2, (src.height + 1) // 2, src.channels, TYPE_U8, 1


def _pyr_up_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = inputs[0]
    _check_u8("pyr_up", src, (1, 3))
    if 2 * src.width > 1 << 15 or 2 * src.height > 1 << 15:
        raise ValueError(f"pyr_up: the output would be larger than 32768 a side, the source "
                         f"is {src.describe()}")
    return 2 * src.width, 2 * src.height, src.channels, TYPE_U8, 1


def _pyr_down_pitch(width: int) -> int:
    return 2 * cv.round_up(width, 64)


def _pyr_down(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    def source(out: cv.Rect) -> cv.Rect:
        # Two rows and columns of halo; one more source row so that the whole-vector reads
        # of the last row stay inside the tile.
        return cv.Rect(2 * out.x0 - 2, 2 * out.y0 - 2, 2 * out.x1 + 1, 2 * out.y1 + 2)

    cn = run.inputs[0].image.channels

    def scratch(src: cv.Rect, out: cv.Rect) -> int:
        return (2 * out.height + 3) * _pyr_down_pitch(out.width * cn)

    def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        o = tile.out
        return core.compute(cv_geometry_kernels.pyr_down_tile, cv_geometry_kernels.ScratchTile(
            src, dst, dst + o.height * tile.out_pitch, _pyr_down_pitch(o.width * cn), o.height,
            o.width * cn, tile.in_pitch, tile.out_pitch), cn)

    return (yield from cv.run_plans(core, slot, run.what, [
        lambda: cv.image_plan(core, run, kernel, source=source, border=cv.BORDER_REFLECT_101,
                              scratch_bytes=scratch)]))


def _pyr_up_pitch(src_cols: int) -> int:
    return 2 * cv.round_up(src_cols + 66, 64)


def _pyr_up(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    im = run.inputs[0].image

    def source(out: cv.Rect) -> cv.Rect:
        return cv.Rect(out.x0 // 2 - 1, out.y0 // 2 - 1, min(out.x1 // 2 + 1, im.width),
                       min(out.y1 // 2 + 1, im.height))

    cn = im.channels

    def scratch(src: cv.Rect, out: cv.Rect) -> int:
        return 2 * _pyr_up_pitch(src.width * cn)

    def kernel(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        o, s = tile.out, tile.src
        return core.compute(cv_geometry_kernels.pyr_up_tile, cv_geometry_kernels.ScratchTile(
            src, dst, dst + o.height * tile.out_pitch, _pyr_up_pitch(s.width * cn), o.height,
            o.width * cn, tile.in_pitch, tile.out_pitch), cn, s.height, s.width * cn,
            s.x1 == im.width)

    return (yield from cv.run_plans(core, slot, run.what, [
        lambda: cv.image_plan(core, run, kernel, source=source, border=cv.BORDER_REFLECT_101,
                              scratch_bytes=scratch, row_step=2, col_step=2)]))


# --- registration ----------------------------------------------------------------------------


def _rgb(picture: npt.NDArray) -> list[npt.NDArray]:
    return cv.rgb_input(picture)


FLIP = cv.define(cv.CvOp(
    CMD_FLIP, "flip", "Flip", "mirror a uint8 image (grey or RGB) around an axis or both",
    (cv.Param("flipCode", "choice", 1, "0 vertical (rows), 1 horizontal (columns), -1 both",
              choices=FLIP_CODES),),
    ("src",), _flip_output, _flip, _rgb))

TRANSPOSE = cv.define(cv.CvOp(
    CMD_TRANSPOSE, "transpose", "Transpose", "transpose a uint8 image (W x H -> H x W)",
    (), ("src",), _transposed_output("transpose", rotate=False), _transpose, _rgb))

ROTATE = cv.define(cv.CvOp(
    CMD_ROTATE, "rotate", "Rotate", "rotate a uint8 image by 90 or 180 degrees (cv2.rotate)",
    (cv.Param("rotateCode", "choice", 0, "0 clockwise, 1 180 degrees, 2 counter-clockwise",
              choices=ROTATE_CODES),),
    ("src",), _transposed_output("rotate", rotate=True), _rotate, _rgb))

_SIZE = 1 << 15
_DSIZE = (cv.Param("dsizeWidth", "int", 400, "output width", low=1, high=_SIZE),
          cv.Param("dsizeHeight", "int", 300, "output height", low=1, high=_SIZE),
          cv.Param("interpolation", "choice", INTER_LINEAR, "0 nearest, 1 linear, 3 area",
                   choices=INTERPOLATIONS))

RESIZE = cv.define(cv.CvOp(
    CMD_RESIZE, "resize", "Resize", "resize a uint8 image (nearest or bilinear, as OpenCV)",
    _DSIZE, ("src",), _resize_output, _resize, _rgb))

ROI_RESIZE = cv.define(cv.CvOp(
    CMD_ROI_RESIZE, "roi_resize", "RoiResize", "resize a rectangle of a uint8 image",
    (cv.Param("roiX", "int", 160, "left column of the rectangle", low=0, high=_SIZE - 1),
     cv.Param("roiY", "int", 120, "top row of the rectangle", low=0, high=_SIZE - 1),
     cv.Param("roiWidth", "int", 320, "width of the rectangle", low=1, high=_SIZE),
     cv.Param("roiHeight", "int", 240, "height of the rectangle", low=1, high=_SIZE),
     *_DSIZE),
    ("src",), _roi_resize_output, _roi_resize, _rgb))

PYR_DOWN = cv.define(cv.CvOp(
    CMD_PYR_DOWN, "pyr_down", "PyrDown", "Gaussian pyramid down-step of a uint8 image",
    (), ("src",), _pyr_down_output, _pyr_down, _rgb))

PYR_UP = cv.define(cv.CvOp(
    CMD_PYR_UP, "pyr_up", "PyrUp", "Gaussian pyramid up-step of a uint8 image",
    (), ("src",), _pyr_up_output, _pyr_up, _rgb))


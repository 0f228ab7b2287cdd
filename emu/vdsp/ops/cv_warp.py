"""Warps and remap of uint8 grey or 3-channel images: warp_affine, warp_perspective, remap.

What they compute (OpenCV 5.0's cv2.warpAffine, cv2.warpPerspective and cv2.remap with
CV_32FC1 maps, flags INTER_NEAREST or INTER_LINEAR, border BORDER_CONSTANT or
BORDER_REPLICATE): output pixel (x, y) is the source sampled at (sx, sy), where

  - warp_affine: (sx, sy) = A (x, y, 1) with A the 2x3 inverse map. Unless `inverseMap` is
    set, M is the forward map and is inverted in double precision as OpenCV does
    (determinant D = a e - b d, then the inverse's entries e/D, -b/D, -d/D, a/D and the
    translation -A (c, f)); a singular M is refused.
  - warp_perspective: (sx, sy) = (X / W, Y / W) with (X, Y, W) = A (x, y, 1); M is inverted
    with OpenCV's closed-form 3x3 inverse (cofactors times 1 / det, in double).
  - remap: (sx, sy) = (mapX[y, x], mapY[y, x]), the maps float32 images of the output size.

OpenCV 5 computes these in float32, not in the fixed point of older versions (their 10-bit
coordinates and 5-bit interpolation table): the matrix is rounded to float32; per row the
constants cx = fl(fl(y * m1) + m2) (and cy, cw likewise); for the columns its SIMD loop
covers, sx = fma(m0, x, cx), a fused multiply-add rounded once; the columns after the last
full SIMD block of 16 pixels (AVX2) are computed by its scalar tail, which the compiler
contracted to fl(fma(x, m0, fl(y * m1)) + m2); warp_perspective divides by w in float32.
Nearest takes the source pixel at (rint(sx), rint(sy)) (ties to even). Linear takes the
four pixels at ix = floor(sx), iy = floor(sy) and one right/below, with a = sx - ix and b =
sy - iy: v0 = p00 + a (p01 - p00), v1 = p10 + a (p11 - p10), v = v0 + b (v1 - v0), each
step fused in OpenCV, and the result rounded to nearest even and saturated to 0..255. Taps
outside the image read borderValue (saturated to uint8, in every channel) or the nearest
edge pixel. A 3-channel image is sampled at the same coordinates in each channel.

How the DSP reproduces it: with the vector FPU's fused multiply-add (`fma_f32`), operation
for operation. The set-up code writes per-column tables of the column numbers x and the
coefficient m0 into TCM (charged as a table fill); the kernel forms sx = fma(m0, x, cx);
the tail columns fuse with fl(y m1) the same way and then add m2; each interpolation step
is one fused multiply-add. Nearest and linear are then bit-exact to OpenCV in the tests
(this relies on OpenCV's AVX2 code on the x86 host: its SIMD block of 16 pixels and its
fused steps; on a host where OpenCV runs other code, within 1 LSB on at most 0.1 % of the
pixels). As on x86, where OpenCV's reference runs, a coordinate that
is NaN or at least 2**31 (inf from a map or a perspective's w = 0) converts to INT_MIN,
i.e. far left or above the image. Where that makes an interpolation weight NaN, OpenCV's
result is 0, except with a constant border where it skips the interpolation and stores the
border value: per pixel in its scalar tail, per block of 16 pixels (all of them outside) in
its SIMD loop; the kernel does the same.

Tiling. Output tiles are rectangles (columns in multiples of 64) split in halves, longer
side first, until the source bounding box of the tile's tap origins (plus one pixel right
and below for linear) fits a TCM buffer pair and the 64 KiB window of the 8-bit gather. The
planner finds the box from the coordinates (the matrix, in double with one pixel of margin,
for the warps; for remap the maps themselves, a min/max pass over them whose compute is
charged at set-up, counted by the ISA emulation of `map_bounds`, its reading of the maps is
not); origins are first clamped to the range
whose taps can still differ (constant: one or two pixels of border outside the image,
written by the fill kernel; replicate: the edge pixels, read through the border
descriptors). When even a tile of 64x64 pixels or less needs a larger box (random maps,
strong minification), its source is cut into horizontal pieces that fit: pass p of the
operator visits every tile whose origins reach piece p, loads the piece, the tile's maps
and the output the earlier passes wrote, and computes only the lanes whose source row is in
the piece; the others gather the earlier output byte itself, so the merge is a select of
offsets. Gathers count sub-bank conflicts: scattered (random) coordinates cost more gather
cycles than smooth ones. For 3 channels the tap offsets advance one byte per channel (three
gathers per tap and 32 pixels), and each channel's 32 results are scattered into the
interleaved output rows (offsets 3k + c), where grey results are packed and stored.

Not supported: 2 or 4 channels, other element types than uint8, INTER_CUBIC/AREA/LANCZOS4,
border modes other than constant and replicate (reflect, wrap, transparent), fixed-point
(CV_16SC2) maps, relative maps, per-channel border values; a source row of more than about
32 KiB (one row and its lower neighbour must fit the gather window).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import simpy

from emu.errors import DspError
from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import isa, timing
from emu.vdsp.ops import cv
from emu.vdsp.ops import cv_warp_kernels as kern
from emu.vdsp.ops.image_args import MAX_SIDE, TYPE_F32, TYPE_U8, Image, Placed
from emu.vdsp.tcm import VECTOR_ALIGN_BYTES
from emu.vdsp.tiling import Region, Tile, TiledPlan, resumable, stream

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_WARP_AFFINE, CMD_WARP_PERSPECTIVE, CMD_REMAP = 0x830, 0x831, 0x832

INTERPOLATIONS = (("nearest", 0), ("linear", 1))
WARP_BORDERS = (("constant", cv.BORDER_CONSTANT), ("replicate", cv.BORDER_REPLICATE))
MAP_DIRECTIONS = (("forward", 0), ("inverse", 1))

_UF = 16
"""Pixels per iteration of OpenCV's SIMD warp loop on x86 with AVX2 (8 float lanes, twice);
the columns after the last full block take its scalar path."""
_WINDOW = isa.WINDOW_BYTES
"""Bytes a gather reaches above its base: a tile's source piece and merged output."""
_MIN_SPLIT = 4096
"""Tiles of at most this many output pixels are not split further; their source is cut
into pieces instead."""
_LIMIT = 1 << 30
"""Coordinates are clipped to +-this before flooring when planning (inf, huge values)."""


# --- matrices ---------------------------------------------------------------------------------


def affine_inverse(m: Sequence[float]) -> npt.NDArray[np.float64]:
    """OpenCV's inverse of a 2x3 affine map, in double; ValueError when it is singular."""
    a, b, c, d, e, f = (float(v) for v in m)
    det = a * e - b * d
    if det == 0:
        raise ValueError("M is singular (M[0]*M[4] - M[1]*M[3] = 0): it cannot be inverted")
    r = 1.0 / det
    a11, a22, a12, a21 = e * r, a * r, -b * r, -d * r
    return np.array([a11, a12, -a11 * c - a12 * f, a21, a22, -a21 * c - a22 * f])


def perspective_inverse(m: Sequence[float]) -> npt.NDArray[np.float64]:
    """OpenCV's closed-form inverse of a 3x3 matrix (cofactors times 1/det, in double);
    ValueError when it is singular."""
    s = [float(v) for v in m]

    def at(i: int, j: int) -> float:
        return s[3 * i + j]

    det = (at(0, 0) * (at(1, 1) * at(2, 2) - at(1, 2) * at(2, 1))
           - at(0, 1) * (at(1, 0) * at(2, 2) - at(1, 2) * at(2, 0))
           + at(0, 2) * (at(1, 0) * at(2, 1) - at(1, 1) * at(2, 0)))
    if det == 0:
        raise ValueError("M is singular (its determinant is 0): it cannot be inverted")
    r = 1.0 / det
    return np.array([
        (at(1, 1) * at(2, 2) - at(1, 2) * at(2, 1)) * r,
        (at(0, 2) * at(2, 1) - at(0, 1) * at(2, 2)) * r,
        (at(0, 1) * at(1, 2) - at(0, 2) * at(1, 1)) * r,
        (at(1, 2) * at(2, 0) - at(1, 0) * at(2, 2)) * r,
        (at(0, 0) * at(2, 2) - at(0, 2) * at(2, 0)) * r,
        (at(0, 2) * at(1, 0) - at(0, 0) * at(1, 2)) * r,
        (at(1, 0) * at(2, 1) - at(1, 1) * at(2, 0)) * r,
        (at(0, 1) * at(2, 0) - at(0, 0) * at(2, 1)) * r,
        (at(0, 0) * at(1, 1) - at(0, 1) * at(1, 0)) * r,
    ])


def _matrix(kind: int, values: cv.Values) -> npt.NDArray[np.float32]:
    """The inverse map as the kernel uses it: 9 float32 entries (affine padded 0, 0, 1)."""
    m = values["M"]
    if kind == kern.KIND_AFFINE:
        inv = np.array(m, np.float64) if values["inverseMap"] else affine_inverse(m)
        inv = np.concatenate([inv, [0.0, 0.0, 1.0]])
    else:
        inv = np.array(m, np.float64) if values["inverseMap"] else perspective_inverse(m)
    return inv.astype(np.float32)


# --- parameters and outputs -------------------------------------------------------------------


def _rotation(angle: float, scale: float, cx: float, cy: float) -> tuple[float, ...]:
    a = scale * math.cos(math.radians(angle))
    b = scale * math.sin(math.radians(angle))
    return (a, b, (1 - a) * cx - b * cy, -b, a, b * cx + (1 - a) * cy)


_COMMON = (
    cv.Param("interpolation", "choice", 1, "nearest or bilinear sampling",
             choices=INTERPOLATIONS),
    cv.Param("borderMode", "choice", cv.BORDER_CONSTANT, "pixels outside the source",
             choices=WARP_BORDERS),
    cv.Param("borderValue", "real", 0.0, "value of a constant border (saturated to uint8)"),
)
_DSIZE = (
    cv.Param("dsizeWidth", "int", 0, "output width (0: the source's)", low=0, high=MAX_SIDE),
    cv.Param("dsizeHeight", "int", 0, "output height (0: the source's)", low=0, high=MAX_SIDE),
    cv.Param("inverseMap", "choice", 0, "forward: M maps source to output and is inverted "
             "first; inverse: M maps output to source (WARP_INVERSE_MAP)",
             choices=MAP_DIRECTIONS),
)


def _grey_source(what: str, src: Image) -> None:
    if src.etype != TYPE_U8 or src.channels not in (1, 3) or src.planes != 1:
        raise ValueError(f"{what}: takes a uint8 grey or 3-channel source image, got "
                         f"{src.describe()}")


def _warp_output(what: str, kind: int) -> Callable[[Sequence[Image], cv.Values],
                                                   cv.OutputSpec]:
    def output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
        src = inputs[0]
        _grey_source(what, src)
        try:
            m = _matrix(kind, values)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        if not np.all(np.isfinite(m)):
            raise ValueError(f"{what}: M's inverse is not finite in float32 ({m.tolist()})")
        width = values["dsizeWidth"] or src.width
        height = values["dsizeHeight"] or src.height
        return width, height, src.channels, TYPE_U8, 1

    return output


def _remap_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src, map_x, map_y = inputs
    _grey_source("remap", src)
    for name, im in (("mapX", map_x), ("mapY", map_y)):
        if im.etype != TYPE_F32 or im.channels != 1 or im.planes != 1:
            raise ValueError(f"remap: {name} must be a float32 one-channel image, got "
                             f"{im.describe()}")
    if (map_x.width, map_x.height) != (map_y.width, map_y.height):
        raise ValueError(f"remap: mapX ({map_x.width}x{map_x.height}) and mapY "
                         f"({map_y.width}x{map_y.height}) must have the same size")
    return map_x.width, map_x.height, src.channels, TYPE_U8, 1


def lens_maps(height: int, width: int, k: float = 0.18) -> tuple[npt.NDArray[np.float32],
                                                                  npt.NDArray[np.float32]]:
    """Smooth barrel-distortion maps of a height x width picture: each output pixel samples
    the source at its radius from the centre scaled by 1 + k r^2 (r = 1 at the corners)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    cx, cy = (width - 1) / 2, (height - 1) / 2
    norm = max(math.hypot(cx, cy), 1.0)
    r2 = ((x - cx) ** 2 + (y - cy) ** 2) / norm**2
    scale = (1 + k * r2) / (1 + k)
    return ((cx + (x - cx) * scale).astype(np.float32),
            (cy + (y - cy) * scale).astype(np.float32))


def _remap_inputs(picture: npt.NDArray) -> list[npt.NDArray]:
    grey = cv.gray_input(picture)[0]
    map_x, map_y = lens_maps(*grey.shape[:2])
    return [grey, map_x, map_y]


# --- planning ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarpTile:
    """One kernel call: an output rectangle and the source piece it reads in this pass."""

    out: cv.Rect
    src: cv.Rect
    """The source piece in TCM (image coordinates, may extend outside the image)."""
    origin_rows: int
    """Tap-origin rows the piece serves: src.y0 .. src.y0 + origin_rows - 1."""
    clamp: tuple[int, int, int, int]
    """(lo_x, hi_x, lo_y, hi_y): tap origins of the tile are clamped to these."""
    in_pitch: int
    out_pitch: int
    merge: bool
    part_at: int
    map_at: int
    map_pitch: int
    fills: tuple[cv.Rect, ...]


@dataclass(frozen=True)
class _Field:
    """Tap origins of every output pixel (clamped), for planning; margin 1 if approximate."""

    ox: npt.NDArray[np.int64]
    oy: npt.NDArray[np.int64]
    margin: int
    bounds: tuple[int, int, int, int]


def _bounds(width: int, height: int, linear: bool, border: int) -> tuple[int, int, int, int]:
    """The range tap origins are clamped to (see the module docstring)."""
    if border == cv.BORDER_CONSTANT:
        lo = -2 if linear else -1
        return lo, width, lo, height
    lo = -1 if linear else 0
    return lo, width - 1, lo, height - 1


def _origins(sx: npt.NDArray, sy: npt.NDArray, linear: bool, bounds: tuple[int, ...],
             margin: int) -> _Field:
    def one(v: npt.NDArray, lo: int, hi: int) -> npt.NDArray[np.int64]:
        v = np.where(np.isnan(v) | (v >= 2.0**31), -_LIMIT, np.clip(v, -_LIMIT, _LIMIT))
        o = np.floor(v) if linear else np.rint(v)
        return np.clip(o, lo, hi).astype(np.int64)

    lx, hx, ly, hy = bounds
    return _Field(one(sx, lx, hx), one(sy, ly, hy), margin, (lx, hx, ly, hy))


def _warp_field(kind: int, m: npt.NDArray[np.float32], width: int, height: int, linear: bool,
                bounds: tuple[int, ...]) -> _Field:
    """The planner's tap origins of a warp, from the matrix in double (margin 1)."""
    a = m.astype(np.float64)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    sx = a[0] * x + a[1] * y + a[2]
    sy = a[3] * x + a[4] * y + a[5]
    if kind == kern.KIND_PERSPECTIVE:
        with np.errstate(divide="ignore", invalid="ignore"):
            w = a[6] * x + a[7] * y + a[8]
            sx, sy = sx / w, sy / w
    return _origins(sx, sy, linear, bounds, 1)


def _plan_tiles(field: _Field, width: int, height: int, cn: int, linear: bool, remap: bool,
                budget: int, what: str) -> list[list[WarpTile]]:
    """The passes of an operator: pass p lists the tiles that have a p-th source piece."""
    halo = 1 if linear else 0
    lx, hx, ly, hy = field.bounds
    tiles: list[list[WarpTile]] = []

    def ranges(t: cv.Rect) -> tuple[int, int, int, int]:
        xs = field.ox[t.y0:t.y1, t.x0:t.x1]
        ys = field.oy[t.y0:t.y1, t.x0:t.x1]
        g = field.margin
        return (max(lx, int(xs.min()) - g), min(hx, int(xs.max()) + g),
                max(ly, int(ys.min()) - g), min(hy, int(ys.max()) + g))

    def pieces(t: cv.Rect, force: bool) -> list[WarpTile] | None:
        x0, x1, y0, y1 = ranges(t)
        in_pitch = cv.round_up((x1 + 1 + halo - x0) * cn + VECTOR_ALIGN_BYTES,
                               VECTOR_ALIGN_BYTES)
        # Whole blocks of 64 pixels are written, and a vector of slack.
        out_pitch = cv.round_up(t.width, VECTOR_ALIGN_BYTES) * cn + VECTOR_ALIGN_BYTES
        map_pitch = cv.round_up(t.width, VECTOR_ALIGN_BYTES) * 4 if remap else 0
        maps = 2 * t.height * map_pitch
        out_bytes = t.height * out_pitch
        rows = y1 + 1 - y0
        clamp = (x0, x1, y0, y1)
        src_bytes = (rows + halo) * in_pitch
        if src_bytes <= _WINDOW and src_bytes + maps + out_bytes <= budget:
            src = cv.Rect(x0, y0, x1 + 1 + halo, y1 + 1 + halo)
            return [WarpTile(t, src, rows, clamp, in_pitch, out_pitch, False, src_bytes,
                             src_bytes, map_pitch, ())]
        if not force:
            return None
        part = out_bytes
        room = min(_WINDOW - part, budget - maps - out_bytes - part)
        per = room // in_pitch - halo
        if per < 1:
            return None
        used = np.unique(field.oy[t.y0:t.y1, t.x0:t.x1]) if field.margin == 0 else None
        out: list[WarpTile] = []
        for a in range(y0, y1 + 1, per):
            b = min(a + per, y1 + 1)
            if used is not None and not np.any((used >= a) & (used < b)):
                continue
            loaded = (b - a + halo) * in_pitch
            src = cv.Rect(x0, a, x1 + 1 + halo, b + halo)
            out.append(WarpTile(t, src, b - a, clamp, in_pitch, out_pitch, True, loaded,
                                loaded + part, map_pitch, ()))
        if len(out) == 1:  # only one piece is used after all: no merge needed
            w = out[0]
            out = [WarpTile(t, w.src, w.origin_rows, clamp, in_pitch, out_pitch, False,
                            w.part_at, w.part_at, map_pitch, ())]
        return out

    def split(t: cv.Rect) -> tuple[cv.Rect, cv.Rect] | None:
        if t.width > VECTOR_ALIGN_BYTES and (t.width >= t.height or t.height == 1):
            cut = t.x0 + cv.round_up(t.width // 2, VECTOR_ALIGN_BYTES)
            return cv.Rect(t.x0, t.y0, cut, t.y1), cv.Rect(cut, t.y0, t.x1, t.y1)
        if t.height > 1:
            cut = t.y0 + t.height // 2
            return cv.Rect(t.x0, t.y0, t.x1, cut), cv.Rect(t.x0, cut, t.x1, t.y1)
        return None

    def visit(t: cv.Rect) -> None:
        done = pieces(t, force=False)
        halves = split(t)
        if done is None and (halves is None or t.width * t.height <= _MIN_SPLIT):
            done = pieces(t, force=True)
        if done is None:
            if halves is None:
                raise DspError(f"{what}: an output tile of {t.width}x{t.height} pixels needs "
                               f"more than the {budget} B of TCM a tile buffer pair has")
            for half in halves:
                visit(half)
            return
        for k, w in enumerate(done):
            while len(tiles) <= k:
                tiles.append([])
            tiles[k].append(w)

    visit(cv.Rect(0, 0, width, height))
    return tiles


# --- running ----------------------------------------------------------------------------------


def _run(kind: int) -> Callable[..., Generator[simpy.Event, Any, StageBody | None]]:
    def run(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
            simpy.Event, Any, StageBody | None]:
        v = run.values
        src, dst = run.inputs[0], run.output
        im, out_im = src.image, dst.image
        width, height, cn = out_im.width, out_im.height, im.channels
        linear = v["interpolation"] == 1
        border = v["borderMode"]
        bounds = _bounds(im.width, im.height, linear, border)
        fill = np.uint8(min(max(round(v["borderValue"]), 0), 255))
        pattern = np.full(VECTOR_ALIGN_BYTES, fill, np.uint8)
        wp = cv.round_up(width, VECTOR_ALIGN_BYTES)
        if kind == kern.KIND_REMAP:
            m = np.zeros(9, np.float32)
            field = _origins(run.inputs[1].pixels(), run.inputs[2].pixels(), linear, bounds, 0)
            tables = np.zeros((0, wp), np.float32)
        else:
            m = _matrix(kind, v)
            field = _warp_field(kind, m, width, height, linear, bounds)
            tables = _column_tables(m, wp, 3 if kind == kern.KIND_PERSPECTIVE else 2)
        iota = np.arange(16, dtype=np.int32)
        table_bytes = tables.size * 4 + iota.nbytes
        nsimd = width - width % _UF
        maps = ((run.inputs[1].pixels(), run.inputs[2].pixels()) if kind == kern.KIND_REMAP
                else None)

        def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
            # Every (re)start writes the column tables and the lane numbers into TCM.
            block = core.tcm.alloc(0, table_bytes, f"{run.what} tables")
            try:
                at = block.offset
                tcm = core.tcm.data
                tcm[at: at + tables.size * 4] = tables.reshape(-1).view(np.uint8)
                iota_at = at + tables.size * 4
                tcm[iota_at: iota_at + iota.nbytes] = iota.view(np.uint8)
                setup = (timing.table_fill_cycles(wp, tables.shape[0], core.cfg)
                         + timing.table_fill_cycles(16, 1, core.cfg))
                if maps is not None:
                    setup += _map_scan_cycles(core, maps, linear, run.what)
                yield from core.setup(slot, setup, f"{run.what} tables")
                budget = min(core.tcm.free_bytes(b) for b in range(core.cfg.tcm.banks))
                if core.cfg.tcm.banks == 1:
                    budget //= 2
                passes = _plan_tiles(field, width, height, cn, linear, kind == kern.KIND_REMAP,
                                     budget, run.what)
                base = np.zeros(kern.N_PARAMS, np.int64)
                base[kern.P_KIND] = kind
                base[kern.P_LINEAR] = int(linear)
                base[kern.P_TABLE] = at
                base[kern.P_TABLE_STRIDE] = wp * 4
                base[kern.P_NSIMD] = nsimd
                base[kern.P_IOTA] = iota_at
                base[kern.P_CONSTANT] = int(border == cv.BORDER_CONSTANT)
                base[kern.P_SRC_W], base[kern.P_SRC_H] = im.width, im.height
                base[kern.P_CN] = cn

                def compute(in_addr: int, out_addr: int, w: WarpTile) -> timing.KernelCycles:
                    cycles = cv.fill_borders(core, in_addr, w.in_pitch, w.fills, pattern, cn)
                    p = base.copy()
                    p[[kern.P_ROWS, kern.P_COLS, kern.P_OUT_Y0, kern.P_OUT_X0]] = (
                        w.out.height, w.out.width, w.out.y0, w.out.x0)
                    p[kern.P_IN_PITCH], p[kern.P_OUT_PITCH] = w.in_pitch, w.out_pitch
                    p[kern.P_MAP], p[kern.P_MAP_PITCH] = in_addr + w.map_at, w.map_pitch
                    p[kern.P_SRC_X0], p[kern.P_SRC_Y0] = w.src.x0, w.src.y0
                    p[kern.P_PIECE_ROWS], p[kern.P_MERGE] = w.origin_rows, int(w.merge)
                    p[kern.P_PART] = w.part_at
                    p[[kern.P_LO_X, kern.P_HI_X, kern.P_LO_Y, kern.P_HI_Y]] = w.clamp
                    done = core.compute(kern.warp_tile, in_addr, out_addr, p, m)
                    return done if cycles is None else cycles.then(done)

                offset = 0
                plans = [plan for k, level in enumerate(passes)
                         for plan in _tiled(core, run, level, k > 0, border, budget, compute)]
                for plan in plans:
                    if first < offset + plan.tiles:
                        resume = yield from stream(core, slot, plan, run.what,
                                                   first=max(0, first - offset))
                        if resume is not None:
                            return offset + resume
                    offset += plan.tiles
                return None
            finally:
                core.tcm.free(block)

        return (yield from resumable(tiles)(slot))

    return run


def _map_scan_cycles(core: VdspCore, maps: tuple[npt.NDArray, npt.NDArray], linear: bool,
                     what: str) -> int:
    """The cycles of remap's planning pass over its maps (`kern.map_bounds`), counted by the
    ISA emulation on the maps placed in TCM piece by piece (their reading is not charged:
    the planner works on the host's copy). A last partial vector is filled with the last
    pixel, which leaves the bounds as they are."""
    lanes = isa.LANES_32
    mx, my = (np.ascontiguousarray(m, np.float32).reshape(-1) for m in maps)
    vectors = -(-mx.size // lanes)
    mx, my = (np.pad(m, (0, vectors * lanes - m.size), mode="edge") for m in (mx, my))
    per = max(1, min(vectors, core.tcm.free_bytes(0) // (2 * isa.VECTOR_BYTES)))
    block = core.tcm.alloc(0, 2 * per * isa.VECTOR_BYTES, f"{what} map scan")
    bounds = np.empty((4, lanes), np.int32)
    bounds[0::2], bounds[1::2] = np.iinfo(np.int32).max, np.iinfo(np.int32).min

    def pieces() -> Iterator[tuple[Any, ...]]:
        tcm = core.tcm.data
        for v0 in range(0, vectors, per):
            n = min(per, vectors - v0)
            for k, m in enumerate((mx, my)):
                at = block.offset + k * n * isa.VECTOR_BYTES
                tcm[at: at + n * isa.VECTOR_BYTES] = m[v0 * lanes: (v0 + n) * lanes].view(np.uint8)
            yield block.offset, n, linear, bounds

    try:
        return core.setup_loop_cycles(kern.map_bounds, pieces())
    finally:
        core.tcm.free(block)


def _column_tables(m: npt.NDArray[np.float32], wp: int, coords: int) -> npt.NDArray[np.float32]:
    """Per coordinate (x, y[, w]) two tables of columns 0..wp-1: the column numbers x as
    float32 and the coordinate's x coefficient m splatted, for one fused multiply-add."""
    x = np.arange(wp, dtype=np.float32)
    rows = []
    for k in range(coords):
        rows += [x, np.full(wp, m[3 * k], np.float32)]
    return np.array(rows, np.float32)


def _tiled(core: VdspCore, run: cv.CvRun, level: list[WarpTile], later: bool, border: int,
           budget: int, compute: Callable[[int, int, WarpTile], timing.KernelCycles]
           ) -> list[TiledPlan[WarpTile]]:
    """The TiledPlans of one pass: each tile loads its source piece (border by descriptors
    or fills), its maps (remap) and, in a merging pass after the first, the output so far.
    Consecutive tiles share a plan while the largest input and output buffers of the plan
    fit the budget together."""
    src, dst = run.inputs[0], run.output
    plans: list[TiledPlan[WarpTile]] = []
    work: list[Tile[WarpTile]] = []
    in_bytes = out_bytes = 0
    for w in level:
        loads, fills = cv.source_regions(src, w.src, w.in_pitch, border)
        w = WarpTile(w.out, w.src, w.origin_rows, w.clamp, w.in_pitch, w.out_pitch, w.merge,
                     w.part_at, w.map_at, w.map_pitch, fills)
        o = w.out
        cn = dst.image.channels
        out_region = Region(dst.buffer, dst.offset + o.y0 * dst.image.stride + o.x0 * cn,
                            dst.image.stride, 0, w.out_pitch, o.height, o.width * cn)
        if w.merge and later:
            loads.append(Region(dst.buffer, out_region.ddr_offset, dst.image.stride,
                                w.part_at, w.out_pitch, o.height, o.width * cn))
        end = w.part_at + (o.height * w.out_pitch if w.merge else 0)
        if len(run.inputs) == 3:
            for k, placed in enumerate(run.inputs[1:]):
                loads.append(_map_region(placed, o, w.map_at + k * o.height * w.map_pitch,
                                         w.map_pitch))
            end = w.map_at + 2 * o.height * w.map_pitch
        out_end = o.height * w.out_pitch
        if work and max(in_bytes, end) + max(out_bytes, out_end) > budget:
            plans.append(TiledPlan(core, work, in_bytes, out_bytes, compute))
            work, in_bytes, out_bytes = [], 0, 0
        in_bytes, out_bytes = max(in_bytes, end), max(out_bytes, out_end)
        work.append(Tile(loads, w, [out_region]))
    if work:
        plans.append(TiledPlan(core, work, in_bytes, out_bytes, compute))
    return plans


def _map_region(placed: Placed, o: cv.Rect, at: int, pitch: int) -> Region:
    stride = placed.image.stride
    return Region(placed.buffer, placed.offset + o.y0 * stride + 4 * o.x0, stride, at, pitch,
                  o.height, 4 * o.width)


WARP_AFFINE = cv.define(cv.CvOp(
    CMD_WARP_AFFINE, "warp_affine", "WarpAffine",
    "affine warp of a uint8 grey or RGB image (cv2.warpAffine)",
    (cv.Param("M", "reals", _rotation(10.0, 0.9, 320.0, 240.0),
              "2x3 matrix, row-major (source to output unless inverseMap)", count=6),
     *_DSIZE, *_COMMON),
    ("src",), _warp_output("warp_affine", kern.KIND_AFFINE), _run(kern.KIND_AFFINE)))

WARP_PERSPECTIVE = cv.define(cv.CvOp(
    CMD_WARP_PERSPECTIVE, "warp_perspective", "WarpPerspective",
    "perspective warp of a uint8 grey or RGB image (cv2.warpPerspective)",
    (cv.Param("M", "reals", (0.9, 0.08, 20.0, -0.03, 0.95, 30.0, -1e-4, 5e-5, 1.0),
              "3x3 matrix, row-major (source to output unless inverseMap)", count=9),
     *_DSIZE, *_COMMON),
    ("src",), _warp_output("warp_perspective", kern.KIND_PERSPECTIVE),
    _run(kern.KIND_PERSPECTIVE)))

REMAP = cv.define(cv.CvOp(
    CMD_REMAP, "remap", "Remap",
    "uint8 grey or RGB image sampled at float32 maps (cv2.remap)",
    _COMMON, ("src", "mapX", "mapY"), _remap_output, _run(kern.KIND_REMAP),
    prepare=_remap_inputs))

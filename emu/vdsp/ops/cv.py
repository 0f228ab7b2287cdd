"""The CV operators (command ids 0x800-0xFFF): how one is described, registered and tiled.

A CV operator is a `CvOp`: its command id, its names (`gaussian_blur` on the command line,
`GaussianBlur` in the ARM API's `hbDSPGaussianBlur` and `hbDSPGaussianBlurParam`), its
parameters (`Param`: the OpenCV-like arguments, each an int, a real, a choice or a short
list of reals, with bounds and a default), its input images, the output it gives for given
inputs and parameters (`output`, which refuses what the operator cannot do with one line),
and the body that runs it on a core. `define` registers it in the operator registry under
its command id; the ARM API, the command line and the tests all read the same table
(`cv_operators`), so there is one place an operator is declared.

Most operators compute output tiles from a source rectangle of the input: a band of rows
with the halo a neighbourhood needs, a mirrored or transposed block, a scaled window.
`image_plan` turns "which source rectangle does this output rectangle need" into the tiles
of a `TiledPlan`: it picks the largest output tiles (full-width bands, narrower strips if a
band does not fit) whose source and output fit a TCM buffer pair, and lists each tile's iDMA
regions. Source pixels outside the image follow the border mode: the iDMA reads the
replicated or reflected rows and columns from DDR (a repeated row is a 0-pitch descriptor,
each mirrored column its own descriptor), and a constant border is written into the tile by
a fill kernel on the core before the operator's kernel runs. Source rows sit `in_pitch`
bytes apart in TCM with at least one vector of slack after the last pixel, so kernels may
load whole vectors past a row's end; output rows sit `out_pitch` apart.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import simpy

from emu.errors import DspError
from emu.registry import Registry
from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.ops import Operator, cv_kernels, register
from emu.vdsp.ops.image_args import Image, ImageCall, Placed, parse, place
from emu.vdsp.tcm import VECTOR_ALIGN_BYTES
from emu.vdsp.tiling import Region, Tile, TiledPlan, resumable, stream

if TYPE_CHECKING:
    from emu.mem.pool import PoolBuffer
    from emu.vdsp.cores import VdspCore

BORDER_CONSTANT, BORDER_REPLICATE, BORDER_REFLECT, BORDER_WRAP, BORDER_REFLECT_101 = 0, 1, 2, 3, 4
BORDERS = (("constant", BORDER_CONSTANT), ("replicate", BORDER_REPLICATE),
           ("reflect", BORDER_REFLECT), ("reflect101", BORDER_REFLECT_101))
"""The border modes the operators support (OpenCV's numbering); wrap is not one of them."""


def border_source(p: int, n: int, mode: int) -> int:
    """The source index of position `p` of a line of `n` pixels under border `mode` (OpenCV's
    borderInterpolate), or -1 where a constant border puts its value."""
    if 0 <= p < n:
        return p
    if mode == BORDER_CONSTANT:
        return -1
    if mode == BORDER_REPLICATE:
        return 0 if p < 0 else n - 1
    if n == 1:
        return 0
    delta = 1 if mode == BORDER_REFLECT_101 else 0
    while not 0 <= p < n:
        p = -p - 1 + delta if p < 0 else n - 1 - (p - n) - delta
    return p


def luma(rgb: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Grey of an RGB uint8 picture as OpenCV 5's RGB-to-grey gives it (0.299, 0.587, 0.114
    in 15-bit fixed point, rounded): the host-side conversion `emu dsp cv` uses to make a
    grey input from a colour picture (the DSP's own is the cvt_color operator)."""
    weighted = (rgb[..., 0].astype(np.int32) * 9798 + rgb[..., 1].astype(np.int32) * 19235
                + rgb[..., 2].astype(np.int32) * 3735 + (1 << 14)) >> 15
    return weighted.astype(np.uint8)


def gray_input(picture: npt.NDArray) -> list[npt.NDArray]:
    """A picture as one grey input (RGB uint8 is converted with `luma`)."""
    if picture.ndim == 3 and picture.dtype == np.uint8 and picture.shape[2] == 3:
        return [luma(picture)]
    return [picture]


def rgb_input(picture: npt.NDArray) -> list[npt.NDArray]:
    """A picture as one RGB input (grey is repeated in the three channels)."""
    if picture.ndim == 2:
        return [np.ascontiguousarray(np.stack([picture] * 3, axis=-1))]
    return [picture]


# --- parameters and the operator table -------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One argument of an operator, as a field of its ARM-side parameter struct."""

    name: str
    """The struct field (camelCase, as the board's structs); the CLI option is its kebab-case."""
    kind: str
    """"int", "real", "choice" (an int chosen by name) or "reals" (`count` reals)."""
    default: Any
    help: str
    low: float = -np.inf
    high: float = np.inf
    choices: tuple[tuple[str, int], ...] = ()
    count: int = 1

    @property
    def words(self) -> int:
        return {"int": 1, "choice": 1, "real": 2, "reals": 2 * self.count}[self.kind]

    def check(self, value: Any, what: str) -> Any:
        """`value` as this parameter's Python type; ValueError naming the field if it is
        not one or is out of bounds."""
        where = f"{what}: {self.name}"
        if self.kind == "reals":
            message = f"{where} needs a list of {self.count} finite numbers, got {_brief(value)}"
            if not isinstance(value, list | tuple | np.ndarray) or any(
                    isinstance(v, bool | np.bool_) or not isinstance(v, int | float | np.number)
                    for v in value):
                raise ValueError(message)  # None, a number, a string, nested lists
            values = tuple(float(v) for v in value)
            if len(values) != self.count or not all(np.isfinite(values)):
                raise ValueError(message)
            return values
        if self.kind in ("int", "choice"):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"{where} must be an integer, got {value!r}")
            value = int(value)
            if self.kind == "choice" and value not in dict(self.choices).values():
                names = ", ".join(f"{n} ({v})" for n, v in self.choices)
                raise ValueError(f"{where} must be one of {names}, got {value}")
        else:
            if isinstance(value, bool) or not isinstance(value, int | float | np.number):
                raise ValueError(f"{where} must be a number, got {value!r}")
            value = float(value)
            if not np.isfinite(value):
                raise ValueError(f"{where} must be finite, got {value}")
        if not self.low <= value <= self.high:
            raise ValueError(f"{where} = {value} is outside {self.low:g}..{self.high:g}")
        return value


def _brief(value: Any) -> str:
    """`value` for a one-line message: an array by its shape, anything else by a repr cut
    to 60 characters."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


Values = Mapping[str, Any]
OutputSpec = tuple[int, int, int, int, int]
"""(width, height, channels, element type, planes) of an output image."""


@dataclass(frozen=True)
class CvRun:
    """What an operator body gets: the call, its checked parameters, its placed images."""

    what: str
    call: ImageCall
    values: Values
    inputs: tuple[Placed, ...]
    output: Placed


@dataclass(frozen=True)
class CvOp:
    """A CV operator (see the module docstring)."""

    cmd: int
    name: str
    c_name: str
    description: str
    params: tuple[Param, ...]
    inputs: tuple[str, ...]
    output: Callable[[Sequence[Image], Values], OutputSpec]
    """The output for these inputs and parameters; ValueError for what the op cannot do."""
    run: Callable[[VdspCore, CoreSlot, CvRun], Generator[simpy.Event, Any, StageBody | None]]
    prepare: Callable[[npt.NDArray], list[npt.NDArray]] = field(default=lambda p: gray_input(p))
    """The operator's inputs made from one picture, for `emu dsp cv` (default: grey)."""

    def encode(self, values: Values) -> np.ndarray:
        """The parameter words of `values` (every parameter, checked)."""
        from emu.vdsp.ops.image_args import encode_params

        entries: list[tuple[str, float]] = []
        for param in self.params:
            value = param.check(values[param.name], self.name)
            if param.kind == "reals":
                entries += [("real", v) for v in value]
            else:
                entries.append(("int" if param.kind in ("int", "choice") else "real", value))
        return encode_params(entries)

    def decode(self, words: np.ndarray) -> dict[str, Any]:
        """The checked parameter values of `words`; DspError if they are malformed."""
        need = sum(p.words for p in self.params)
        if len(words) != need:
            raise DspError(f"{self.name}: {len(words)} parameter words, expected {need}")
        values: dict[str, Any] = {}
        at = 0
        for param in self.params:
            chunk = words[at: at + param.words]
            at += param.words
            if param.kind in ("int", "choice"):
                raw: Any = int(chunk.view("<i4")[0])
            elif param.kind == "real":
                raw = float(chunk.view("<f8")[0])
            else:
                raw = tuple(float(v) for v in chunk.view("<f8"))
            try:
                values[param.name] = param.check(raw, self.name)
            except ValueError as exc:
                raise DspError(str(exc)) from None
        return values

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}


_CV: Registry[str, CvOp] = Registry("CV operator", lambda op: op.name)


def define(op: CvOp) -> CvOp:
    """Register `op` in the DSP operator registry (CV range) and in the CV table."""
    if op.name in _CV:
        raise ValueError(f"CV operator {op.name} is defined twice")
    register(Operator(op.cmd, op.name, op.description, _body(op)), builtin=True)
    return _CV.add(op)


def cv_operators() -> list[CvOp]:
    """Every CV operator, by command id."""
    from emu.vdsp.ops import operators

    operators()  # loads the built-in operator modules
    return sorted(_CV.values(), key=lambda op: op.cmd)


def cv_operator(name: str) -> CvOp | None:
    cv_operators()  # loads the built-in operator modules
    return _CV.get(name)


def _body(op: CvOp) -> Callable[..., Generator[simpy.Event, Any, StageBody | None]]:
    def run(core: VdspCore, slot: CoreSlot, inp: PoolBuffer, out: PoolBuffer) -> Generator[
            simpy.Event, Any, StageBody | None]:
        call = parse(inp.data, op.name)
        if len(call.inputs) != len(op.inputs):
            raise DspError(f"{op.name}: takes {len(op.inputs)} input image(s) "
                           f"({', '.join(op.inputs)}), the block has {len(call.inputs)}")
        values = op.decode(call.params)
        try:
            spec = op.output(call.inputs, values)
        except ValueError as exc:
            raise DspError(str(exc)) from None
        o = call.output
        if (o.width, o.height, o.channels, o.etype, o.planes) != spec:
            raise DspError(f"{op.name}: the output record is {o.describe()}, the operator "
                           f"gives {Image(*spec[:4], 0, 0, spec[4]).describe()}")
        placed = tuple(place(im, core.pool, op.name, name)
                       for im, name in zip(call.inputs, op.inputs, strict=True))
        target = place(o, core.pool, op.name, "output", must_be=out)
        return (yield from op.run(core, slot, CvRun(op.name, call, values, placed, target)))

    return run


# --- image tiles -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rect:
    """Pixels x0..x1-1 of rows y0..y1-1."""

    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    @property
    def height(self) -> int:
        return self.y1 - self.y0


@dataclass(frozen=True)
class ImageTile:
    """One tile of an image operator: output rectangle, source rectangle, TCM pitches."""

    out: Rect
    src: Rect
    in_pitch: int
    out_pitch: int
    fills: tuple[Rect, ...]
    """Rectangles of the source tile (tile coordinates) a constant border fills."""


def round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _runs(mapping: list[int], allow_repeat: bool) -> list[tuple[int, int, int, int]]:
    """(first position, source, length, step) of maximal runs of positions whose sources go
    up by 1 (or, with `allow_repeat`, stay equal); positions mapped to -1 are left out."""
    runs: list[tuple[int, int, int, int]] = []
    i = 0
    while i < len(mapping):
        if mapping[i] < 0:
            i += 1
            continue
        j, step = i + 1, 1
        if j < len(mapping) and allow_repeat and mapping[j] == mapping[i]:
            step = 0
        while j < len(mapping) and mapping[j] >= 0 and mapping[j] == mapping[j - 1] + step:
            j += 1
        runs.append((i, mapping[i], j - i, step))
        i = j
    return runs


def source_regions(src: Placed, rect: Rect, pitch: int, border: int) -> tuple[
        list[Region], tuple[Rect, ...]]:
    """The iDMA regions that fill a TCM tile with source pixels `rect` (rows `pitch` apart),
    and the rectangles a constant border leaves to the fill kernel."""
    im = src.image
    pb = im.pixel_bytes
    rows = [border_source(y, im.height, border) for y in range(rect.y0, rect.y1)]
    cols = [border_source(x, im.width, border) for x in range(rect.x0, rect.x1)]
    regions = [
        Region(src.buffer, src.offset + r_src * im.stride + c_src * pb, im.stride * r_step,
               r_at * pitch + c_at * pb, pitch, r_len, c_len * pb)
        for r_at, r_src, r_len, r_step in _runs(rows, allow_repeat=True)
        for c_at, c_src, c_len, _ in _runs(cols, allow_repeat=False)
    ]
    fills: list[Rect] = []
    if border == BORDER_CONSTANT:
        top = max(0, -rect.y0)
        bottom = max(0, rect.y1 - im.height)
        left = max(0, -rect.x0)
        right = max(0, rect.x1 - im.width)
        w, h = rect.width, rect.height
        fills += [Rect(0, 0, w, top), Rect(0, h - bottom, w, h),
                  Rect(0, top, left, h - bottom), Rect(w - right, top, w, h - bottom)]
    return regions, tuple(f for f in fills if f.width > 0 and f.height > 0)


def output_regions(dst: Placed, tile: ImageTile) -> list[Region]:
    """The one region that stores a tile's output rows (`out_pitch` apart in TCM)."""
    im = dst.image
    r = tile.out
    return [Region(dst.buffer, dst.offset + r.y0 * im.stride + r.x0 * im.pixel_bytes,
                   im.stride, 0, tile.out_pitch, r.height, r.width * im.pixel_bytes)]


TileKernel = Callable[[int, int, ImageTile], timing.KernelCycles]


def image_plan(
    core: VdspCore, run: CvRun, kernel: TileKernel, *,
    source: Callable[[Rect], Rect] | None = None,
    border: int = BORDER_REPLICATE, border_value: float = 0.0,
    scratch_bytes: Callable[[Rect, Rect], int] = lambda src, out: 0,
    stores: Callable[[ImageTile], list[Region]] | None = None,
    row_step: int = 1, col_step: int = 1, src_index: int = 0,
) -> TiledPlan[ImageTile]:
    """The tiles of an image operator (see the module docstring).

    `source(out_rect)` is the source rectangle an output rectangle needs (default: the same
    rectangle); `scratch_bytes(src, out)` is working space the kernel needs after a tile's
    output rows; `stores` replaces the default one store per tile; output tiles start on
    multiples of `row_step` rows and `col_step` columns (for operators that work in pixel
    pairs, such as NV12 output). `kernel(in_address, out_address, tile)` computes a tile.
    """
    src, dst = run.inputs[src_index], run.output
    source = source or (lambda rect: rect)
    out_im = dst.image
    in_pb, out_pb = src.image.pixel_bytes, out_im.pixel_bytes
    if border == BORDER_WRAP or border not in dict(BORDERS).values():
        raise DspError(f"{run.what}: border mode {border} is not supported (have "
                       f"{', '.join(f'{n} ({v})' for n, v in BORDERS)})")
    budget = min(core.tcm.free_bytes(b) for b in range(core.cfg.tcm.banks))
    if core.cfg.tcm.banks == 1:
        budget //= 2

    def tile_of(out: Rect) -> ImageTile:
        rect = source(out)
        in_pitch = round_up(rect.width * in_pb + VECTOR_ALIGN_BYTES, VECTOR_ALIGN_BYTES)
        out_pitch = round_up(out.width * out_pb + VECTOR_ALIGN_BYTES, VECTOR_ALIGN_BYTES)
        return ImageTile(out, rect, in_pitch, out_pitch, ())

    def sizes(tile: ImageTile) -> tuple[int, int]:
        return (tile.src.height * tile.in_pitch,
                tile.out.height * tile.out_pitch + scratch_bytes(tile.src, tile.out))

    def layout(band: int, strip: int) -> list[ImageTile]:
        return [tile_of(Rect(x, y, min(x + strip, out_im.width), min(y + band, out_im.height)))
                for y in range(0, out_im.height, band) for x in range(0, out_im.width, strip)]

    def fits(band: int, strip: int) -> bool:
        return all(sum(sizes(t)) <= budget for t in layout(band, strip))

    strip = round_up(out_im.width, col_step)
    while True:
        if fits(row_step, strip):
            break
        narrower = round_up(strip // 2, max(col_step, VECTOR_ALIGN_BYTES))
        if narrower >= strip:
            raise DspError(f"{run.what}: a tile of {row_step} output row(s) x {strip} pixels "
                           f"needs more than the {budget} B of TCM a tile buffer pair has")
        strip = narrower
    low, high = 1, -(-out_im.height // row_step)  # the band in steps: fits(low) holds
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid * row_step, strip):
            low = mid
        else:
            high = mid - 1
    tiles = layout(low * row_step, strip)
    work: list[Tile[ImageTile]] = []
    for tile in tiles:
        loads, fills = source_regions(src, tile.src, tile.in_pitch, border)
        placed = ImageTile(tile.out, tile.src, tile.in_pitch, tile.out_pitch, fills)
        work.append(Tile(loads, placed, stores(placed) if stores else
                         output_regions(dst, placed)))
    in_bytes = max(sizes(t)[0] for t in tiles)
    out_bytes = max(sizes(t)[1] for t in tiles)
    pattern = border_pattern(src.image, border_value)

    def compute(in_addr: int, out_addr: int, tile: ImageTile) -> timing.KernelCycles:
        filled = fill_borders(core, in_addr, tile.in_pitch, tile.fills, pattern, in_pb)
        done = kernel(in_addr, out_addr, tile)
        return done if filled is None else filled.then(done)

    return TiledPlan(core, work, in_bytes, out_bytes, compute)


def border_pattern(image: Image, value: float) -> np.ndarray:
    """64 bytes of the constant border's pixel repeated (whole pixels from byte 0)."""
    pixel = np.full(image.channels, value).astype(image.dtype).view(np.uint8)
    reps = -(-VECTOR_ALIGN_BYTES // len(pixel))
    return np.tile(pixel, reps)[:VECTOR_ALIGN_BYTES].copy()


def fill_borders(core: VdspCore, at: int, pitch: int, fills: Sequence[Rect],
                 pattern: np.ndarray, pixel_bytes: int) -> timing.KernelCycles | None:
    """Write the constant border's `pattern` into the rectangles `fills` of a source tile at
    TCM address `at` (rows `pitch` apart); the cycles, or None when there is nothing."""
    cycles: timing.KernelCycles | None = None
    for f in fills:
        filled = core.compute(cv_kernels.fill_rect, at + f.y0 * pitch + f.x0 * pixel_bytes,
                              pitch, f.height, f.width * pixel_bytes, pattern, pixel_bytes)
        cycles = filled if cycles is None else cycles.then(filled)
    return cycles


def run_passes(core: VdspCore, slot: CoreSlot, what: str,
               build: Callable[[int], TiledPlan[Any] | None]) -> Generator[
                   simpy.Event, Any, StageBody | None]:
    """Stream pass 0, 1, ... of `build(k)`, each made when the one before has finished (so
    a pass can depend on its results; None ends), resuming where a preemption stopped: tile
    numbers run on across passes."""
    plans: dict[int, TiledPlan[Any] | None] = {}

    def plan(k: int) -> TiledPlan[Any] | None:
        if k not in plans:
            plans[k] = build(k)
        return plans[k]

    def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
        offset, k = 0, 0
        while (p := plan(k)) is not None:
            if first < offset + p.tiles:
                resume = yield from stream(core, slot, p, what, first=max(0, first - offset))
                if resume is not None:
                    return offset + resume
            offset += p.tiles
            k += 1
        return None

    return (yield from resumable(tiles)(slot))


def run_plans(core: VdspCore, slot: CoreSlot, what: str,
              plans: Sequence[Callable[[], TiledPlan[Any]]]) -> Generator[
                  simpy.Event, Any, StageBody | None]:
    """`run_passes` over a fixed list of passes."""
    return (yield from run_passes(core, slot, what,
                                  lambda k: plans[k]() if k < len(plans) else None))

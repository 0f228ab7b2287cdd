"""Image-statistics CV operators: integral image, histogram equalisation (uint8 grey).

integral (cv2.integral, sdepth CV_32S): an int32 image of (H + 1) x (W + 1) whose value
(y, x) is the sum of the source pixels above and left of it (rows < y, columns < x); row 0
and column 0 are zero. Integer sums, exact (they wrap past 2^31 as OpenCV's int does).
Tiled in full-width bands of output rows: output row y reads source row y - 1 with one
zero column in front, so the zero first row and column are a constant border the fill kernel
writes. Within a row the kernel sums along the row (shift-and-add in int16 lanes, then
int32 with the running total) and adds the row above; the row above a band's first row is
the previous band's last row, which the kernel also writes into a carry row kept in TCM
outside the tile buffers for the whole run. Preemption: a stream stopped between tiles has
drained its stores, so on resuming from band k the carry row is read back from the output
image in DDR (its row above band k) with one iDMA descriptor before the stream goes on; a
fresh start needs none (band 0 has no row above). Bands must be full width: an image whose
single output row does not fit a tile buffer pair is refused (DspError).

equalize_hist (cv2.equalizeHist): out = lut[src] with OpenCV's table (see
`cv_stats_kernels.equalize_lut`): cdf the cumulative histogram, i the first non-empty bin,
lut[v] = saturate_cast<uchar>(float32(cdf[v] - cdf[i]) * (255.f / float32(total - cdf[i])))
(float32 arithmetic and rounding half to even, as OpenCV computes it: bit-exact), and the
input unchanged when all pixels are equal. Two passes over the image: a histogram pass (16
int32 sub-histograms in TCM, one per gather lane, updated by gather / add / scatter), then,
after a kernel has summed the sub-histograms and made the 256-byte table in TCM, a table
pass (32-lane byte gathers from the table). The histogram and table live in TCM outside the
tile buffers; they are not kept across a preemption: a restart (whichever tile it resumes
from) clears and recounts the histogram, remakes the table, and resumes the table pass where
it stopped (a stop during the recount resumes at the same place again).

Not supported: other element types, more than one channel, other integral depths (sqsum,
tilted), an integral image whose output row does not fit a tile buffer pair.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import simpy

from emu.errors import DspError
from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.ops import cv, cv_stats_kernels
from emu.vdsp.ops.cv_kernel_records import TileRows
from emu.vdsp.ops.image_args import TYPE_S32, TYPE_U8, Image
from emu.vdsp.tcm import VECTOR_ALIGN_BYTES
from emu.vdsp.tiling import Region, TiledPlan, resumable, stream

if TYPE_CHECKING:
    from emu.vdsp.cores import VdspCore

CMD_EQUALIZE_HIST = 0x802
CMD_INTEGRAL = 0x803


def _grey(op: str, inputs: Sequence[Image]) -> Image:
    src = inputs[0]
    if src.etype != TYPE_U8 or src.channels != 1 or src.planes != 1:
        raise ValueError(f"{op}: takes uint8 images of 1 channel, got {src.describe()}")
    return src


def _integral_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = _grey("integral", inputs)
    return src.width + 1, src.height + 1, 1, TYPE_S32, 1


def _equalize_output(inputs: Sequence[Image], values: cv.Values) -> cv.OutputSpec:
    src = _grey("equalize_hist", inputs)
    return src.width, src.height, 1, TYPE_U8, 1


# --- integral ----------------------------------------------------------------------------------


def _integral(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    dst = run.output
    width = dst.image.width  # W + 1 values per output row
    carry_bytes = cv.round_up(4 * width, VECTOR_ALIGN_BYTES)
    carry_at = [0]  # the carry row's TCM address in the current (re)start
    plans: list[TiledPlan[cv.ImageTile]] = []

    def source(out: cv.Rect) -> cv.Rect:
        return cv.Rect(out.x0 - 1, out.y0 - 1, out.x1 - 1, out.y1 - 1)

    def kernel(src: int, out: int, tile: cv.ImageTile) -> timing.KernelCycles:
        prior = -1 if tile.out.y0 == 0 else carry_at[0]
        return core.compute(cv_stats_kernels.integral_tile,
                            TileRows(src, out, tile.out.height, width, tile.in_pitch,
                                     tile.out_pitch), prior, carry_at[0])

    def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
        carry = core.tcm.alloc(0, carry_bytes, f"{run.what} carry")
        try:
            carry_at[0] = carry.offset
            if not plans:  # the tiles are chosen once; a restart keeps their numbering
                plan = cv.image_plan(core, run, kernel, source=source,
                                     border=cv.BORDER_CONSTANT, border_value=0.0)
                if any(t.work.out.width != width for t in plan.work):
                    raise DspError(f"{run.what}: an output row of {width} int32 does not fit "
                                   f"a TCM tile buffer pair; rows must be done whole")
                plans.append(plan)
            plan = plans[0]
            if first > 0:  # the row above the next band, from the output in DDR
                y = plan.work[first].work.out.y0 - 1
                im = dst.image
                back = Region(dst.buffer, dst.offset + y * im.stride, im.stride, 0,
                              carry_bytes, 1, 4 * width)
                done = yield from core.load_channels[0].copy(
                    back.descriptor(f"{run.what} carry", core, carry, True))
                yield done
            return (yield from stream(core, slot, plan, run.what, first=first))
        finally:
            core.tcm.free(carry)

    return (yield from resumable(tiles)(slot))


# --- equalize_hist -------------------------------------------------------------------------------


def _equalize(core: VdspCore, slot: CoreSlot, run: cv.CvRun) -> Generator[
        simpy.Event, Any, StageBody | None]:
    image = run.inputs[0].image
    total = image.width * image.height
    lut_bytes, cdf_bytes = 256, 1024
    table_bytes = cv_stats_kernels.HIST_BYTES + cdf_bytes + lut_bytes
    at = {"hist": 0, "cdf": 0, "lut": 0}
    plans: list[TiledPlan[cv.ImageTile]] = []

    def count(src: int, out: int, tile: cv.ImageTile) -> timing.KernelCycles:
        return core.compute(cv_stats_kernels.histogram_tile, src, tile.out.height,
                            tile.out.width, tile.in_pitch, at["hist"])

    def apply(src: int, dst: int, tile: cv.ImageTile) -> timing.KernelCycles:
        return core.compute(cv_stats_kernels.lut_tile, src, dst, tile.out.height,
                            tile.out.width, tile.in_pitch, tile.out_pitch, at["lut"])

    def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
        tables = core.tcm.alloc(0, cv.round_up(table_bytes, VECTOR_ALIGN_BYTES),
                                f"{run.what} tables")
        try:
            at["hist"] = tables.offset
            at["cdf"] = tables.offset + cv.round_up(cv_stats_kernels.HIST_BYTES,
                                                    VECTOR_ALIGN_BYTES)
            at["lut"] = at["cdf"] + cdf_bytes
            if not plans:  # chosen once; a restart keeps the table pass's numbering
                plans.append(cv.image_plan(core, run, count, stores=lambda tile: []))
                plans.append(cv.image_plan(core, run, apply))
            histogram, table = plans
            yield from core.setup(slot, 0, f"{run.what} clear", kernel_cycles=core.compute(
                cv_stats_kernels.clear, at["hist"], cv_stats_kernels.HIST_BYTES).total)
            stopped = yield from stream(core, slot, histogram, f"{run.what} histogram")
            if stopped is not None:
                return first
            yield from core.setup(slot, 0, f"{run.what} table", kernel_cycles=core.compute(
                cv_stats_kernels.equalize_lut, at["hist"], at["cdf"], at["lut"], total).total)
            return (yield from stream(core, slot, table, run.what, first=first))
        finally:
            core.tcm.free(tables)

    return (yield from resumable(tiles)(slot))


EQUALIZE_HIST = cv.define(cv.CvOp(
    CMD_EQUALIZE_HIST, "equalize_hist", "EqualizeHist",
    "histogram equalisation of a grey image, as cv2.equalizeHist",
    (), ("src",), _equalize_output, _equalize, prepare=cv.gray_input))

INTEGRAL = cv.define(cv.CvOp(
    CMD_INTEGRAL, "integral", "Integral",
    "int32 integral image (H + 1) x (W + 1), as cv2.integral",
    (), ("src",), _integral_output, _integral, prepare=cv.gray_input))

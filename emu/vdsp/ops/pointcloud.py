"""The point-cloud DSP operators (command ids 0x900-0x903, in the CV range).

Each takes one input buffer that starts with a 128-byte parameter block and one output
buffer; tiles stream through the two TCMs with ping-pong iDMA (`emu.vdsp.tiling`).

Parameter block, little-endian 32-bit words: 0 magic 0x4350454D ("EMPC"), 1 version 2,
2 dims, 3 record count (stage 1: the points; stage 2: P x K, the records of the voxel
buffer), 4 max pillars P, 5 max points per pillar K, 6 x_len, 7 y_len, 8 pillars used
(stage 2), 9 voxel layout (stage 2: 1 slot-major, record s x P + n, the order of [c, s, n]
features; 0 pillar-major, record n x K + s), 10-15 reserved (zero), 16-26 the float32
parameter vector of `pointcloud_kernels`; data at byte 128. Version 1 had no words 8 and 9;
its blocks are refused rather than read as "no pillars used".

Stage 2 works on the pillars used only. Horizon's published DSP preprocessing sample for
J5's successor passes the pillar count to its DSP stage and works on those; J5's own block
is not public, and nothing suggests it does more. So stage 2 reads, encodes (scheme 1) and
transposes all K slots of pillars 0 .. used-1 (one run of used x K records pillar-major, K
rows of `used` records slot-major) and never reads the other records. Its output is still
the whole features tensor, and the DSP writes the part of each plane that belongs to unused
pillars as well: after the tiles of the used pillars come zero-fill tiles, which store zero
vectors into their TCM output buffer (aligned stores, no input DMA) for the output iDMA to
copy out like any other tile's result. The host therefore needs no memset of the features
(and no change), and the unused pillars' part costs one vector store per 64 bytes plus the
output DMA that moves it. Each zero-fill tile stores its zeros afresh: a TCM buffer is
never assumed to still hold them (another task may have had the TCM since a preemption).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import simpy

from emu.errors import DspError
from emu.mem.pool import PoolBuffer
from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.cores import VdspCore
from emu.vdsp.ops import Operator, pointcloud_kernels, register
from emu.vdsp.tiling import Region, Tile, TiledPlan, resumable, stream

CMD_STAGE1_QUANTIZE_FIRST = 0x900
CMD_STAGE1_CELLS = 0x901
CMD_STAGE2_TRANSPOSE = 0x902
CMD_STAGE2_ENCODE_TRANSPOSE = 0x903

MAGIC = 0x4350454D
VERSION = 2
HEADER_BYTES = 128
TILE_GROUP = 64  # records per tile row come in whole 64s (one int8 vector per plane)


class PillarGrid(Protocol):
    """What the parameter block describes (`emu.workloads.pointcloud.params.PillarParams`)."""

    @property
    def dims(self) -> int: ...
    @property
    def max_pillars(self) -> int: ...
    @property
    def max_points_per_pillar(self) -> int: ...
    @property
    def x_len(self) -> int: ...
    @property
    def y_len(self) -> int: ...
    @property
    def slot_major(self) -> bool: ...
    def f32(self) -> np.ndarray: ...


def header(params: PillarGrid, count: int, pillars: int = 0) -> np.ndarray:
    """The parameter block for `count` records of a model, `pillars` of its pillars used
    (stage 2 reads only theirs; stage 1 ignores the word)."""
    block = np.zeros(HEADER_BYTES // 4, dtype="<u4")
    block[:10] = [MAGIC, VERSION, params.dims, count, params.max_pillars,
                  params.max_points_per_pillar, params.x_len, params.y_len, pillars,
                  int(params.slot_major)]
    block[16:27] = params.f32().view("<u4")
    return block.view(np.uint8)


@dataclass(frozen=True)
class Records:
    """Records `first + r * pitch + i` (r < rows, i < cols) of a record array."""

    first: int
    rows: int
    cols: int
    pitch: int

    @property
    def count(self) -> int:
        return self.rows * self.cols

    def starts(self) -> range:
        """The first record of each row (none when the rows are empty)."""
        rows = self.rows if self.cols else 0
        return range(self.first, self.first + rows * self.pitch, self.pitch)


def pillar_records(first: int, end: int, max_pillars: int, max_slots: int,
                   slot_major: bool) -> Records:
    """Every slot of pillars [first, end) in a voxel buffer: one row per slot when slot-major
    (record s x P + n), else one row (record n x K + s); slot rows that meet are one row."""
    if slot_major and end - first < max_pillars:
        return Records(first, max_slots, end - first, max_pillars)
    return Records(first * max_slots, 1, (end - first) * max_slots, max_pillars * max_slots)


@dataclass(frozen=True)
class _Header:
    dims: int
    count: int
    max_pillars: int
    max_slots: int
    x_len: int
    y_len: int
    pillars: int
    slot_major: bool
    p: np.ndarray


def _parse(buf: np.ndarray, what: str) -> _Header:
    if len(buf) < HEADER_BYTES:
        raise DspError(f"{what}: input shorter than the {HEADER_BYTES} B parameter block")
    words = buf[:HEADER_BYTES].view("<u4")
    if int(words[0]) != MAGIC or int(words[1]) != VERSION:
        raise DspError(f"{what}: input does not start with an EMPC v{VERSION} parameter block")
    dims, count, pillars, slots, x_len, y_len, used, layout = (int(w) for w in words[2:10])
    if dims not in (4, 5) or min(pillars, slots, x_len, y_len) < 1 or layout > 1:
        raise DspError(f"{what}: bad parameters dims={dims}, P={pillars}, K={slots}, "
                       f"layout={layout}")
    return _Header(dims, count, pillars, slots, x_len, y_len, used, bool(layout),
                   words[16:27].view("<f4").astype(np.float32))


def _whole(records: int) -> int:
    """`records` rounded up to whole groups of TILE_GROUP."""
    return -(-records // TILE_GROUP) * TILE_GROUP


def _blocks(region: Records, capacity: int) -> list[Records]:
    """`region` cut into tiles of at most `capacity` records (a multiple of TILE_GROUP) with
    each row padded to whole groups: whole rows where they fit, else pieces of a row."""
    if not region.count:
        return []
    cols = min(_whole(region.cols), capacity)
    rows = min(region.rows, capacity // cols)
    return [Records(region.first + r * region.pitch + c, min(rows, region.rows - r),
                    min(cols, region.cols - c), region.pitch)
            for r in range(0, region.rows, rows) for c in range(0, region.cols, cols)]


@dataclass(frozen=True)
class _Work:
    """What a point-cloud tile's kernel does: compute records up to place `count` in TCM
    (the last record's place, plus one), or, for a zero-fill tile, store `count` zero bytes
    into its output buffer."""

    zero_fill: bool
    count: int


@dataclass(frozen=True)
class _RecordArrays:
    """The record arrays an operator streams: `records` records of `in_record` bytes after
    the input's parameter block, computed into `out_record` bytes each, either per record
    or (`planes` > 0) as one byte in each of `planes` planes of `records` bytes.

    In TCM a tile keeps its rows `_whole(cols)` records apart (output planes of
    `rows x _whole(cols)` bytes), so every row starts on a vector."""

    inp: PoolBuffer
    out: PoolBuffer
    records: int
    in_record: int
    out_record: int
    planes: int


def _record_tile(arrays: _RecordArrays, b: Records, compute: bool) -> Tile[_Work]:
    """The tile of records `b`: loaded and computed, or (not `compute`) a zero-fill tile."""
    pitch = _whole(b.cols)
    stores = _record_stores(arrays, b, pitch)
    if not compute:
        return Tile([], _Work(True, b.rows * pitch * arrays.out_record), stores)
    size = arrays.in_record
    load = Region(arrays.inp, HEADER_BYTES + b.first * size, b.pitch * size, 0, pitch * size,
                  b.rows, b.cols * size)
    return Tile([load], _Work(False, (b.rows - 1) * pitch + b.cols), stores)


def _record_stores(arrays: _RecordArrays, b: Records, pitch: int) -> list[Region]:
    """The output regions of the tile of records `b`, its rows `pitch` records apart in TCM."""
    out, records = arrays.out, arrays.records
    if not arrays.planes:
        size = arrays.out_record
        return [Region(out, b.first * size, 0, 0, 0, 1, b.cols * size)]
    # Row r of plane c: (c x rows + r) x pitch in TCM, c x records + first + r x b.pitch
    # in DDR. One descriptor covers every row when the DDR side has one pitch too.
    if b.rows == 1 or b.rows * b.pitch == records:
        runs = [(0, arrays.planes * b.rows, records if b.rows == 1 else b.pitch)]
    else:
        runs = [(c, b.rows, b.pitch) for c in range(arrays.planes)]
    return [Region(out, c * records + b.first, ddr_pitch, c * b.rows * pitch, pitch, rows, b.cols)
            for c, rows, ddr_pitch in runs]


def _record_plan(core: VdspCore, arrays: _RecordArrays, blocks: list[tuple[Records, bool]],
                 kernel: Callable[[int, int, int], timing.KernelCycles]) -> TiledPlan[_Work]:
    """The tiles of `blocks` (records, and False for a zero-fill tile) with buffers for the
    largest (rows padded to whole groups), computed by `kernel(src, dst, count)` or, for
    zero-fill tiles, by `fill_zero`."""
    largest = max((b.rows * _whole(b.cols) for b, _ in blocks), default=0)

    def run(src: int, dst: int, work: _Work) -> timing.KernelCycles:
        if work.zero_fill:
            return core.compute(pointcloud_kernels.fill_zero, dst, work.count)
        return kernel(src, dst, work.count)

    return TiledPlan(core, [_record_tile(arrays, b, compute) for b, compute in blocks],
                     largest * arrays.in_record, largest * arrays.out_record, run)


def _capacity(core: VdspCore, record_bytes: int) -> int:
    """Records of `record_bytes` (input and output) one tile buffer pair holds, in whole
    groups: each of the two ping-pong sides has a bank (half of it with one bank)."""
    budget = min(core.tcm.free_bytes(b) for b in range(core.cfg.tcm.banks))
    if core.cfg.tcm.banks == 1:
        budget //= 2
    capacity = budget // record_bytes // TILE_GROUP * TILE_GROUP
    if capacity <= 0:
        raise DspError(f"{core.tcm.path}: no room for a tile of {TILE_GROUP} records")
    return capacity


_Build = Callable[[VdspCore, _Header, PoolBuffer, PoolBuffer],
                  tuple[_RecordArrays, TiledPlan[_Work]]]


def _operator(what: str, build: _Build) -> Callable[..., Any]:
    def run(core: VdspCore, slot: CoreSlot, inp: PoolBuffer, out: PoolBuffer) -> Generator[
            simpy.Event, Any, StageBody | None]:
        head = _parse(inp.data, what)
        arrays, plan = build(core, head, inp, out)
        if len(inp.data) < HEADER_BYTES + arrays.records * arrays.in_record:
            raise DspError(f"{what}: input holds fewer than its {arrays.records} records")
        if len(out.data) < arrays.records * arrays.out_record:
            raise DspError(f"{what}: output buffer of {len(out.data)} B is too small")

        def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
            return (yield from stream(core, slot, plan, what, first=first))

        return (yield from resumable(tiles)(slot))

    return run


def _stage1(quantize_first: bool) -> _Build:
    def build(core: VdspCore, h: _Header, inp: PoolBuffer,
              out: PoolBuffer) -> tuple[_RecordArrays, TiledPlan[_Work]]:
        in_record = 4 * h.dims
        out_record = 4 * ((3 if h.dims == 5 else 2) if quantize_first else 1)
        kernel_fn = (pointcloud_kernels.stage1_quantize_first if quantize_first
                     else pointcloud_kernels.stage1_cells_only)

        def kernel(src: int, dst: int, n: int) -> timing.KernelCycles:
            return core.compute(kernel_fn, src, dst, n, h.dims, h.p, h.x_len, h.y_len)

        blocks = _blocks(Records(0, 1, h.count, h.count),
                         _capacity(core, in_record + out_record))
        arrays = _RecordArrays(inp, out, h.count, in_record, out_record, 0)
        return arrays, _record_plan(core, arrays, [(b, True) for b in blocks], kernel)

    return build


def _stage2(encode: bool) -> _Build:
    def build(core: VdspCore, h: _Header, inp: PoolBuffer,
              out: PoolBuffer) -> tuple[_RecordArrays, TiledPlan[_Work]]:
        records = h.max_pillars * h.max_slots
        if h.count != records or h.pillars > h.max_pillars:
            raise DspError(f"pointcloud stage 2: {h.count} records and {h.pillars} pillars "
                           f"used do not fit P={h.max_pillars}, K={h.max_slots}")
        in_record = 4 * h.dims if encode else h.dims
        capacity = _capacity(core, in_record + h.dims)

        def kernel(src: int, dst: int, n: int) -> timing.KernelCycles:
            # Whole vectors: the lanes past a row's last record read stale TCM and are not
            # stored; planes are as long as the padded tile.
            padded = _whole(n)
            if encode:
                return core.compute(pointcloud_kernels.stage2_encode_transpose, src, dst, padded,
                                    padded, h.dims, h.p)
            return core.compute(pointcloud_kernels.stage2_transpose, src, dst, padded, padded,
                                h.dims)

        def blocks(first: int, end: int, compute: bool) -> list[tuple[Records, bool]]:
            region = pillar_records(first, end, h.max_pillars, h.max_slots, h.slot_major)
            return [(b, compute) for b in _blocks(region, capacity)]

        arrays = _RecordArrays(inp, out, records, in_record, h.dims, h.dims)
        work = blocks(0, h.pillars, True) + blocks(h.pillars, h.max_pillars, False)
        return arrays, _record_plan(core, arrays, work, kernel)

    return build


register(Operator(CMD_STAGE1_QUANTIZE_FIRST, "pointcloud stage 1 (quantise first)",
                  "cells, packed xyzr and t of every point (scheme 2)",
                  _operator("pointcloud stage 1", _stage1(True))), builtin=True)
register(Operator(CMD_STAGE1_CELLS, "pointcloud stage 1 (cells)",
                  "the cell of every point (scheme 1)",
                  _operator("pointcloud stage 1", _stage1(False))), builtin=True)
register(Operator(CMD_STAGE2_TRANSPOSE, "pointcloud stage 2 (transpose)",
                  "int8 records of the pillars used to channel planes (scheme 2)",
                  _operator("pointcloud stage 2", _stage2(False))), builtin=True)
register(Operator(CMD_STAGE2_ENCODE_TRANSPOSE, "pointcloud stage 2 (encode, transpose)",
                  "float records of the pillars used encoded, quantised, to channel planes "
                  "(scheme 1)",
                  _operator("pointcloud stage 2", _stage2(True))), builtin=True)

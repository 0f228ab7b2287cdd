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
from emu.vdsp.idma import Descriptor, Endpoint, linear
from emu.vdsp.ops import Operator, pointcloud_kernels, register
from emu.vdsp.tcm import TcmBuffer
from emu.vdsp.tiling import TileStep, resumable, stream

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
class _Tile:
    block: Records
    compute: bool
    """False: a zero-fill tile, no input; its records' output is zero."""


@dataclass
class _RecordPlan:
    """Tiles over an input of `records` records: each tile's records are computed into
    `out_record` bytes each, either per record or (`planes` > 0) as one byte in each of
    `planes` planes of `records` bytes; zero-fill tiles only write zeros.

    In TCM a tile keeps its rows `_whole(cols)` records apart (output planes of
    `rows x _whole(cols)` bytes), so every row starts on a vector."""

    core: VdspCore
    inp: PoolBuffer
    out: PoolBuffer
    records: int
    work: list[_Tile]
    in_record: int
    out_record: int
    planes: int
    kernel: Callable[[int, int, int], timing.KernelCycles]

    @property
    def tiles(self) -> int:
        return len(self.work)

    @property
    def _largest(self) -> int:
        """Records in TCM of the largest tile (rows padded to whole groups)."""
        return max((t.block.rows * _whole(t.block.cols) for t in self.work), default=0)

    @property
    def in_bytes(self) -> int:
        return self._largest * self.in_record

    @property
    def out_bytes(self) -> int:
        return self._largest * self.out_record

    def step(self, k: int, in_buf: TcmBuffer, out_buf: TcmBuffer) -> TileStep:
        tile = self.work[k]
        b = tile.block
        pitch = _whole(b.cols)
        stores = self._stores(k, b, out_buf.offset, pitch)
        if not tile.compute:
            nbytes = b.rows * pitch * self.out_record
            return TileStep([], lambda: self.core.compute(pointcloud_kernels.fill_zero,
                                                          out_buf.offset, nbytes), stores)
        src = Endpoint(self.inp.data, HEADER_BYTES + b.first * self.in_record,
                       b.pitch * self.in_record, False, "input")
        dst = Endpoint(self.core.tcm.data, in_buf.offset, pitch * self.in_record, True,
                       "TCM in")
        load = Descriptor(f"in {k}", src, dst, b.rows, b.cols * self.in_record)
        n = (b.rows - 1) * pitch + b.cols  # the last record's place in TCM, plus one
        return TileStep([load], lambda: self.kernel(in_buf.offset, out_buf.offset, n), stores)

    def _stores(self, k: int, b: Records, at: int, pitch: int) -> list[Descriptor]:
        tcm = self.core.tcm.data
        if not self.planes:
            return [linear(f"out {k}", Endpoint(tcm, at, 0, True, "TCM out"),
                           Endpoint(self.out.data, b.first * self.out_record, 0, False,
                                    "output"), b.cols * self.out_record)]
        # Row r of plane c: (c x rows + r) x pitch in TCM, c x records + first + r x b.pitch
        # in DDR. One descriptor covers every row when the DDR side has one pitch too.
        if b.rows == 1 or b.rows * b.pitch == self.records:
            runs = [(0, self.planes * b.rows, self.records if b.rows == 1 else b.pitch)]
        else:
            runs = [(c, b.rows, b.pitch) for c in range(self.planes)]
        return [Descriptor(f"out {k}" if len(runs) == 1 else f"out {k}.{c}",
                           Endpoint(tcm, at + c * b.rows * pitch, pitch, True, "TCM out"),
                           Endpoint(self.out.data, c * self.records + b.first, ddr_pitch,
                                    False, "output"), rows, b.cols)
                for c, rows, ddr_pitch in runs]


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


def _operator(what: str, build: Callable[[VdspCore, _Header, PoolBuffer, PoolBuffer],
                                         _RecordPlan]) -> Callable[..., Any]:
    def run(core: VdspCore, slot: CoreSlot, inp: PoolBuffer, out: PoolBuffer) -> Generator[
            simpy.Event, Any, StageBody | None]:
        head = _parse(inp.data, what)
        plan = build(core, head, inp, out)
        if len(inp.data) < HEADER_BYTES + plan.records * plan.in_record:
            raise DspError(f"{what}: input holds fewer than its {plan.records} records")
        if len(out.data) < plan.records * plan.out_record:
            raise DspError(f"{what}: output buffer of {len(out.data)} B is too small")

        def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
            return (yield from stream(core, slot, plan, what, first=first))

        return (yield from resumable(tiles)(slot))

    return run


def _stage1(quantize_first: bool) -> Callable[..., _RecordPlan]:
    def build(core: VdspCore, h: _Header, inp: PoolBuffer, out: PoolBuffer) -> _RecordPlan:
        in_record = 4 * h.dims
        out_record = 4 * ((3 if h.dims == 5 else 2) if quantize_first else 1)
        kernel_fn = (pointcloud_kernels.stage1_quantize_first if quantize_first
                     else pointcloud_kernels.stage1_cells_only)

        def kernel(src: int, dst: int, n: int) -> timing.KernelCycles:
            return core.compute(kernel_fn, src, dst, n, h.dims, h.p, h.x_len, h.y_len)

        blocks = _blocks(Records(0, 1, h.count, h.count),
                         _capacity(core, in_record + out_record))
        return _RecordPlan(core, inp, out, h.count, [_Tile(b, True) for b in blocks],
                           in_record, out_record, 0, kernel)

    return build


def _stage2(encode: bool) -> Callable[..., _RecordPlan]:
    def build(core: VdspCore, h: _Header, inp: PoolBuffer, out: PoolBuffer) -> _RecordPlan:
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

        def tiles(first: int, end: int, compute: bool) -> list[_Tile]:
            region = pillar_records(first, end, h.max_pillars, h.max_slots, h.slot_major)
            return [_Tile(b, compute) for b in _blocks(region, capacity)]

        work = tiles(0, h.pillars, True) + tiles(h.pillars, h.max_pillars, False)
        return _RecordPlan(core, inp, out, records, work, in_record, h.dims, h.dims, kernel)

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

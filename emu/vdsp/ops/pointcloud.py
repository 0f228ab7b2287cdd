"""The point-cloud DSP operators (command ids 0x900-0x903, in the CV range).

Each takes one input buffer that starts with a 128-byte parameter block and one output
buffer; tiles stream through the two TCMs with ping-pong iDMA (`emu.vdsp.tiling`).

Parameter block, little-endian 32-bit words: 0 magic 0x4350454D ("EMPC"), 1 version 1,
2 dims, 3 record count, 4 max pillars P, 5 max points per pillar K, 6 x_len, 7 y_len,
8-15 reserved, 16-26 the float32 parameter vector of `pointcloud_kernels`; data at byte
128.
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
HEADER_BYTES = 128
TILE_GROUP = 64  # records per tile come in whole 64s (one int8 vector per plane)


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
    def f32(self) -> np.ndarray: ...


def header(params: PillarGrid, count: int) -> np.ndarray:
    """The parameter block for `count` records of a model."""
    block = np.zeros(HEADER_BYTES // 4, dtype="<u4")
    block[:8] = [MAGIC, 1, params.dims, count, params.max_pillars,
                 params.max_points_per_pillar, params.x_len, params.y_len]
    block[16:27] = params.f32().view("<u4")
    return block.view(np.uint8)


@dataclass(frozen=True)
class _Header:
    dims: int
    count: int
    max_pillars: int
    max_slots: int
    x_len: int
    y_len: int
    p: np.ndarray


def _parse(buf: np.ndarray, what: str) -> _Header:
    if len(buf) < HEADER_BYTES:
        raise DspError(f"{what}: input shorter than the {HEADER_BYTES} B parameter block")
    words = buf[:HEADER_BYTES].view("<u4")
    if int(words[0]) != MAGIC or int(words[1]) != 1:
        raise DspError(f"{what}: input does not start with an EMPC v1 parameter block")
    dims, count, pillars, slots, x_len, y_len = (int(w) for w in words[2:8])
    if dims not in (4, 5) or min(pillars, slots, x_len, y_len) < 1:
        raise DspError(f"{what}: bad parameters dims={dims}, P={pillars}, K={slots}")
    return _Header(dims, count, pillars, slots, x_len, y_len,
                   words[16:27].view("<f4").astype(np.float32))


@dataclass
class _RecordPlan:
    """`count` records, `tile` per tile; out either per record or as `dims` planes."""

    core: VdspCore
    inp: PoolBuffer
    out: PoolBuffer
    count: int
    tile: int
    in_record: int
    out_record: int
    planes: int
    kernel: Callable[[int, int, int], timing.KernelCycles]

    @property
    def tiles(self) -> int:
        return -(-self.count // self.tile)

    @property
    def in_bytes(self) -> int:
        return self.tile * self.in_record

    @property
    def out_bytes(self) -> int:
        return self.tile * self.out_record

    def step(self, k: int, in_buf: TcmBuffer, out_buf: TcmBuffer) -> TileStep:
        first = k * self.tile
        n = min(self.tile, self.count - first)
        tcm = self.core.tcm.data
        src = Endpoint(self.inp.data, HEADER_BYTES + first * self.in_record, 0, False, "input")
        load = linear(f"in {k}", src, Endpoint(tcm, in_buf.offset, 0, True, "TCM in"),
                      n * self.in_record)
        if self.planes:
            # One row per plane: tile planes are `tile` apart in TCM, `count` apart in DDR.
            store = Descriptor(f"out {k}", Endpoint(tcm, out_buf.offset, self.tile, True,
                                                    "TCM out"),
                               Endpoint(self.out.data, first, self.count, False, "output"),
                               self.planes, n)
        else:
            store = linear(f"out {k}", Endpoint(tcm, out_buf.offset, 0, True, "TCM out"),
                           Endpoint(self.out.data, first * self.out_record, 0, False, "output"),
                           n * self.out_record)
        return TileStep([load], lambda: self.kernel(in_buf.offset, out_buf.offset, n),
                        [store])


def _tile(core: VdspCore, record_bytes: int, count: int) -> int:
    budget = min(core.tcm.free_bytes(b) for b in range(core.cfg.tcm.banks))
    if core.cfg.tcm.banks == 1:
        budget //= 2
    tile = min(budget // record_bytes // TILE_GROUP * TILE_GROUP,
               max(1, -(-count // TILE_GROUP)) * TILE_GROUP)
    if tile <= 0:
        raise DspError(f"{core.tcm.path}: no room for a tile of {TILE_GROUP} records")
    return tile


def _operator(what: str, build: Callable[[VdspCore, _Header, PoolBuffer, PoolBuffer],
                                         _RecordPlan]) -> Callable[..., Any]:
    def run(core: VdspCore, slot: CoreSlot, inp: PoolBuffer, out: PoolBuffer) -> Generator[
            simpy.Event, Any, StageBody | None]:
        head = _parse(inp.data, what)
        plan = build(core, head, inp, out)
        if len(inp.data) < HEADER_BYTES + plan.count * plan.in_record:
            raise DspError(f"{what}: input holds fewer than its {plan.count} records")
        if len(out.data) < plan.count * plan.out_record:
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

        tile = _tile(core, in_record + out_record, h.count)
        return _RecordPlan(core, inp, out, h.count, tile, in_record, out_record, 0, kernel)

    return build


def _stage2(encode: bool) -> Callable[..., _RecordPlan]:
    def build(core: VdspCore, h: _Header, inp: PoolBuffer, out: PoolBuffer) -> _RecordPlan:
        count = h.max_pillars * h.max_slots
        in_record = 4 * h.dims if encode else h.dims

        tile = _tile(core, in_record + h.dims, count)

        def kernel(src: int, dst: int, n: int) -> timing.KernelCycles:
            # Whole vectors: a tail tile runs on a multiple of 64 records (the extra lanes
            # read stale TCM and are not stored).
            padded = -(-n // TILE_GROUP) * TILE_GROUP
            if encode:
                return core.compute(pointcloud_kernels.stage2_encode_transpose, src, dst, padded,
                                    tile, h.dims, h.p)
            return core.compute(pointcloud_kernels.stage2_transpose, src, dst, padded, tile, h.dims)

        plan = _RecordPlan(core, inp, out, count, tile, in_record, h.dims, h.dims, kernel)
        return plan

    return build


register(Operator(CMD_STAGE1_QUANTIZE_FIRST, "pointcloud stage 1 (quantise first)",
                  "cells, packed xyzr and t of every point (scheme 2)",
                  _operator("pointcloud stage 1", _stage1(True))), builtin=True)
register(Operator(CMD_STAGE1_CELLS, "pointcloud stage 1 (cells)",
                  "the cell of every point (scheme 1)",
                  _operator("pointcloud stage 1", _stage1(False))), builtin=True)
register(Operator(CMD_STAGE2_TRANSPOSE, "pointcloud stage 2 (transpose)",
                  "int8 records to channel planes (scheme 2)",
                  _operator("pointcloud stage 2", _stage2(False))), builtin=True)
register(Operator(CMD_STAGE2_ENCODE_TRANSPOSE, "pointcloud stage 2 (encode, transpose)",
                  "float records encoded, quantised, to channel planes (scheme 1)",
                  _operator("pointcloud stage 2", _stage2(True))), builtin=True)

"""NN operators on the DSP (command ids 0x400-0x7FF): softmax, quantize, dequantize.

Each operator reads its arguments from the header of the input buffer
(`emu.vdsp.ops.tensor_args`), streams the tensor through TCM in tiles with ping-pong iDMA
(`emu.vdsp.tiling`), and computes each tile with a kernel of `emu.vdsp.ops.nn_kernels`. The
output buffer receives the output tensor in C order.

Quantisation follows the hbDNN semantics (SCALE: q = clip(round(x / scale + zero_point)),
dequantised as (q - zero_point) * scale; SHIFT: q = clip(round(x * 2**shift)), dequantised
as q / 2**shift), per tensor or per axis, with rounding half to even and NaN quantising to
0 (the float-to-int conversion's rule). Softmax is taken along one axis of a float32 tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from emu.errors import DspError
from emu.mem.pool import PoolBuffer
from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp import timing
from emu.vdsp.cores import VdspCore
from emu.vdsp.ops import Operator, nn_kernels, register
from emu.vdsp.ops.tensor_args import (
    MODE_NONE,
    MODE_SCALE,
    TYPE_F32,
    TYPE_NAMES,
    TYPE_S8,
    TYPE_U8,
    TensorArgs,
    parse,
)
from emu.vdsp.tcm import VECTOR_ALIGN_BYTES
from emu.vdsp.tiling import Region, Tile, TiledPlan, resumable, stream

CMD_SOFTMAX = 0x400
CMD_QUANTIZE = 0x401
CMD_DEQUANTIZE = 0x402

# Longest per-axis parameter period (axis size x inner size) the operators keep in TCM.
MAX_PARAM_PERIOD = 4096
# Rows of softmax up to this length are done 16 at a time, one row per lane.
SOFTMAX_ROWS_ACROSS_LANES_MAX = 512
_LANES = nn_kernels.LANES


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _check_output(out: PoolBuffer, nbytes: int, what: str) -> None:
    if out.size_bytes < nbytes:
        raise DspError(f"{what}: output buffer of {out.size_bytes} B is smaller than the "
                       f"{nbytes} B result")


# --- quantize / dequantize -------------------------------------------------------------------


def _param_table(args: TensorArgs, what: str, dequantize: bool) -> tuple[np.ndarray, np.ndarray,
                                                                         int]:
    """Per-element multipliers and zero points over one period, extended by 16 entries."""
    _, axis_size, inner = args.outer_axis_inner()
    if args.mode == MODE_SCALE:
        scale = args.scales.astype(np.float32)
        zero = args.zero_points.astype(np.float32)
    else:
        if ((args.shifts < 0) | (args.shifts > 31)).any():
            raise DspError(f"{what}: shifts must lie in 0..31, got {args.shifts.tolist()}")
        power = np.ldexp(np.float32(1.0), (-args.shifts if dequantize else args.shifts))
        scale = power.astype(np.float32)
        zero = np.zeros_like(scale)
    per_axis = len(scale) > 1
    period = axis_size * inner if per_axis else 1
    if period > MAX_PARAM_PERIOD:
        raise DspError(f"{what}: per-axis parameters repeat every {period} elements (axis size "
                       f"x inner size); this operator supports at most {MAX_PARAM_PERIOD}")
    index = np.arange(period + _LANES) % period
    channel = index // inner if per_axis else np.zeros_like(index)
    return scale[channel], zero[channel], period


def _elementwise_tiles(inp: PoolBuffer, out: PoolBuffer, args: TensorArgs, tile: int,
                       in_size: int, out_size: int) -> list[Tile[tuple[int, int]]]:
    """Tiles of `tile` elements through TCM, same element positions in and out; each tile's
    work is its element count and the index of its first element."""
    tiles = []
    for first in range(0, args.elements, tile):
        count = min(tile, args.elements - first)
        load = Region(inp, args.data_offset + first * in_size, 0, 0, 0, 1, count * in_size)
        store = Region(out, first * out_size, 0, 0, 0, 1, count * out_size)
        tiles.append(Tile([load], (count, first), [store]))
    return tiles


def _elementwise_tile(core: VdspCore, args: TensorArgs, bytes_per_element: int, what: str) -> int:
    """Elements per tile: as many as an in and an out buffer in the freer bank hold, in
    whole groups of 64 (one packed int8 vector)."""
    group = 4 * _LANES
    banks = range(core.cfg.tcm.banks)
    budget = min(core.tcm.free_bytes(b) for b in banks) if len(banks) > 1 \
        else core.tcm.free_bytes(0) // 2
    tile = min(budget // bytes_per_element // group * group, _round_up(args.elements, group))
    if tile <= 0:
        raise DspError(f"{what}: TCM has no room for a tile of {group} elements")
    return tile


def _quantization(dequantize: bool) -> Callable[..., Generator[simpy.Event, Any, StageBody | None]]:
    what = "dequantize" if dequantize else "quantize"

    def run(core: VdspCore, slot: CoreSlot, inp: PoolBuffer, out: PoolBuffer) -> Generator[
            simpy.Event, Any, StageBody | None]:
        args = parse(inp.data, what)
        ints = (TYPE_S8, TYPE_U8)
        if dequantize and (args.in_type not in ints or args.out_type != TYPE_F32):
            raise DspError(f"{what}: converts int8/uint8 to float32, not "
                           f"{TYPE_NAMES[args.in_type]} to {TYPE_NAMES[args.out_type]}")
        if not dequantize and (args.in_type != TYPE_F32 or args.out_type not in ints):
            raise DspError(f"{what}: converts float32 to int8/uint8, not "
                           f"{TYPE_NAMES[args.in_type]} to {TYPE_NAMES[args.out_type]}")
        if args.mode == MODE_NONE:
            raise DspError(f"{what}: the header names no quantisation mode (scale or shift)")
        in_size, out_size = args.in_dtype.itemsize, args.out_dtype.itemsize
        _check_output(out, args.elements * out_size, what)
        scale, zero, period = _param_table(args, what, dequantize)
        unsigned = TYPE_U8 in (args.in_type, args.out_type)

        def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
            # Every (re)start writes the parameter tables (multipliers, zero points) into TCM.
            table = core.tcm.alloc(0, 8 * len(scale), f"{what} parameters")
            try:
                tcm = core.tcm.data
                tcm[table.offset: table.offset + 4 * len(scale)] = scale.view(np.uint8)
                zp_at = table.offset + 4 * len(scale)
                tcm[zp_at: zp_at + 4 * len(zero)] = zero.view(np.uint8)
                setup = timing.table_fill_cycles(len(scale), 2, core.cfg)
                yield from core.setup(slot, setup, f"{what} parameters")
                tile = _elementwise_tile(core, args, in_size + out_size, what)

                def kernel(src: int, dst: int, work: tuple[int, int]) -> timing.KernelCycles:
                    count, at = work
                    tables = nn_kernels.ParamTables(table.offset, zp_at, period, at % period)
                    if dequantize:
                        return core.compute(nn_kernels.dequantize_tile, src, dst, count, tables,
                                            unsigned)
                    return core.compute(nn_kernels.quantize_tile, src, dst, count, tables,
                                        args.mode == MODE_SCALE, unsigned)

                plan = TiledPlan(core, _elementwise_tiles(inp, out, args, tile, in_size, out_size),
                                 tile * in_size, tile * out_size, kernel)
                return (yield from stream(core, slot, plan, what, first=first))
            finally:
                core.tcm.free(table)

        return (yield from resumable(tiles)(slot))

    return run


# --- softmax ---------------------------------------------------------------------------------


def _softmax_tile_bytes(length: int, layout: str) -> int:
    """Bytes of a softmax tile buffer (input and output alike) for an axis of `length`."""
    if layout == "rows":
        return _LANES * 4 * length
    if layout == "long":
        return _round_up(4 * length, VECTOR_ALIGN_BYTES)
    return VECTOR_ALIGN_BYTES * length


def _softmax_tiles(inp: PoolBuffer, out: PoolBuffer, args: TensorArgs,
                   layout: str) -> list[Tile[None]]:
    """Softmax tiles: groups of whole softmax vectors, in one of three layouts ("rows": 16
    rows, one per lane; "long": one row; "columns": 16 columns)."""
    outer, length, inner = args.outer_axis_inner()
    start, row_bytes = args.data_offset, 4 * length
    if layout in ("rows", "long"):
        per_tile = _LANES if layout == "rows" else 1
        tiles: list[Tile[None]] = []
        for k in range(-(-(outer * inner) // per_tile)):
            rows = min(per_tile, outer * inner - k * per_tile)
            first = k * per_tile * row_bytes
            tiles.append(Tile([Region(inp, start + first, 0, 0, 0, 1, rows * row_bytes)], None,
                              [Region(out, first, 0, 0, 0, 1, rows * row_bytes)]))
        return tiles
    # Columns: a 2-D transfer picks 16 adjacent columns out of every row of the axis.
    pitch = 4 * inner
    tiles = []
    for o in range(outer):
        for column in range(0, inner, _LANES):
            width = 4 * min(_LANES, inner - column)
            first = (o * length * inner + column) * 4
            tiles.append(Tile(
                [Region(inp, start + first, pitch, 0, VECTOR_ALIGN_BYTES, length, width)], None,
                [Region(out, first, pitch, 0, VECTOR_ALIGN_BYTES, length, width)]))
    return tiles


def softmax_layout(shape: tuple[int, ...], axis: int) -> str:
    """Which kernel layout softmax uses for a shape; it fixes the order of the sums."""
    inner = math.prod(shape[axis + 1:])
    if inner > 1:
        return "columns"
    return "rows" if shape[axis] <= SOFTMAX_ROWS_ACROSS_LANES_MAX else "long"


def _softmax(core: VdspCore, slot: CoreSlot, inp: PoolBuffer, out: PoolBuffer) -> Generator[
        simpy.Event, Any, StageBody | None]:
    args = parse(inp.data, "softmax")
    if args.in_type != TYPE_F32 or args.out_type != TYPE_F32:
        raise DspError("softmax: takes and gives float32")
    _check_output(out, 4 * args.elements, "softmax")
    layout = softmax_layout(args.shape, args.axis)
    _, length, _ = args.outer_axis_inner()
    tile_bytes = _softmax_tile_bytes(length, layout)
    if 2 * tile_bytes > core.tcm.usable_bytes:
        raise DspError(f"softmax: a tile of {tile_bytes} B in and out does not fit the "
                       f"{core.tcm.usable_bytes} B of a TCM bank (axis of {length})")
    offsets = np.arange(_LANES, dtype=np.uint32) * 4 * length

    def kernel(src: int, dst: int, _work: None) -> timing.KernelCycles:
        if layout == "rows":
            return core.compute(nn_kernels.softmax_rows_across_lanes, src, dst, length, offsets)
        if layout == "long":
            return core.compute(nn_kernels.softmax_long_row, src, dst, length)
        return core.compute(nn_kernels.softmax_columns, src, dst, length)

    plan = TiledPlan(core, _softmax_tiles(inp, out, args, layout), tile_bytes, tile_bytes, kernel)

    def tiles(slot: CoreSlot, first: int) -> Generator[simpy.Event, Any, int | None]:
        return (yield from stream(core, slot, plan, "softmax", first=first))

    return (yield from resumable(tiles)(slot))


register(Operator(CMD_SOFTMAX, "softmax", "float32 softmax along one axis", _softmax),
         builtin=True)
register(Operator(CMD_QUANTIZE, "quantize",
                  "float32 -> int8/uint8, hbDNN SCALE or SHIFT, per tensor or per axis",
                  _quantization(dequantize=False)), builtin=True)
register(Operator(CMD_DEQUANTIZE, "dequantize",
                  "int8/uint8 -> float32, hbDNN SCALE or SHIFT, per tensor or per axis",
                  _quantization(dequantize=True)), builtin=True)

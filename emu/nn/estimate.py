"""The static performance estimate of a compiled model, as Horizon's `hb_perf` prints it.

`estimate(graph, segments, cfg, batch)` times every segment of `placement.place`'s split on
one core of an otherwise idle chip and adds them up (the segments run one after another):

- BPU segments: their layer groups (`emu/nn/layers.py`) with the BPU cost model
  (`emu/bpu/timing.py`): per layer compute time (no DDR), DDR time (the DDR's latency,
  then the bytes at the lesser of the core's port and `ddr.bw_bytes_per_s`), time = max
  of the two + the layer's fixed cost; each segment is one function call
  (`max_time_per_fc_ps` splits it as the compiler's option does, a part of a layer group a
  line of its own) and pays the FC cost.
  The model's weights stay on chip across runs when all of them (every BPU segment's)
  fit in `bpu.weight_sram_bytes`.
- CPU segments (input quantize, output dequantize, CPU ops such as Softmax) on one A55
  core, item by item (`cpu_items`), charged as the runtime's A55 model charges the same
  item (`emu.cpu.timing.cold_pass_ps`: the issue model, the cache and TLB stalls of a
  streaming pass, then its DDR traffic through `cpu.ddr_port_bytes_per_s` and the DDR's
  latency and `ddr.bw_bytes_per_s`; the core's time and the DDR's add up, as in the run).
  Each tensor is one stream through the DDR, except the model's float inputs and the CPU
  ops' weights when everything the CPU reads in an inference fits in the L3: the run's
  caches keep those from one inference to the next (the CPU's stores stream past the
  caches and what the BPU wrote is invalidated before it is read). Around each segment
  the hand-offs' cache maintenance (`handoffs`: invalidate what the BPU wrote before
  reading it, clean what the BPU will read after writing it), one hbSysFlushMem per range
  at `cpu.flush_call_cycles + lines * cpu.cache_op_cycles`. The NEON loop's instructions
  per vector of `cpu.vector_bytes` of float32: quantize loads one float32 vector,
  multiplies by 1/scale, converts with rounding and narrows (3 FP ops) and stores a
  quarter vector of int8; dequantize the reverse (a quarter-vector load, widen twice and
  convert and scale: 4 FP ops, one store); a Conv, FC, ConvTranspose or MatMul the BPU
  cannot run (`_DENSE`) is a NEON GEMM over its multiply-accumulates: per vector of MACs
  one fused multiply-add and one weight load (the inputs stay in registers across a
  blocked tile), and its DDR bytes are its float32 weights, inputs and outputs once; a view
  (Reshape and the other "alias" ops of emu/nn/optable.py) costs nothing; any other CPU op
  is timed as Softmax is computed, in three passes (max; exp, sum; scale), about 3 loads,
  1 store and 12 FP ops; every loop also pays its step (`emu.cpu.work.vector_loop`: an ALU
  op and a branch per iteration, the exit mispredicted). A 4-D tensor of more than one
  channel also changes layout where it crosses between CPU and BPU (NCHW on the CPU, the
  BPU's native NHWC): one more pass over its int8/int16 codes (int32 accumulators for a
  wide output), per vector a load, a store and two permutes.
  DSP segments are not estimated here (0 us): the vDSP operators are simulated where they
  run (`emu dsp`).

`cpu_items` gives the same CPU work item by item, with its instruction counts and the
tensors it reads and writes, for the runtime to run through the cache model.

The total is what `emu perf` with one thread measures on an idle chip, once the caches hold
what they keep between inferences: it also holds the runtime's start of each BPU task
(`bpu.task_overhead_ps`, in the first layer's time), though `bpu_ps`, the BPU's part, is
the compiler's view (hb_perf's, which the BPU calibration fits). Left out: the host API
calls (`cpu.api_call_ps`), and contention with anything else running.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from emu.bpu import timing
from emu.cpu import timing as cpu_timing
from emu.cpu.cluster import CLEAN, INVALIDATE
from emu.cpu.work import vector_loop
from emu.nn import optable
from emu.nn.graph import Graph, Node
from emu.nn.layers import layer_groups
from emu.nn.placement import Segment
from emu.soc.clock import PS_PER_MS, PS_PER_S, PS_PER_US, ceil_div
from emu.soc.config import CpuConfig, SocConfig

_FLOAT_BYTES = 4


@dataclass(frozen=True)
class _Loop:
    """Instructions per NEON vector of float32 of a CPU loop, and the bytes per element;
    the loop step is `emu.cpu.work.vector_loop`'s."""

    loads: float
    stores: float
    fp: float
    read_bytes: int
    written_bytes: int
    permutes: float = 0  # integer shuffles (NEON ZIP/UZP/TBL) per vector

    def per_vector(self) -> dict[str, float]:
        """The instructions per vector by class (`emu.cpu.ops` names)."""
        return {"load": self.loads, "store": self.stores, "fp": self.fp, "int": self.permutes}


@dataclass(frozen=True)
class CpuItem:
    """One piece of a CPU segment: a NEON loop (`vectors` iterations of `loop`, or a GEMM
    for a dense op) and the tensors it reads and writes, with their bytes."""

    name: str
    op: str  # "quantize", "dequantize", "layout" or the node's op
    loop: _Loop
    vectors: int
    reads: tuple[tuple[str, int], ...]
    writes: tuple[tuple[str, int], ...]
    macs: int = 0
    # The hand-offs: what of `reads` the BPU wrote (invalidated before the CPU reads it)
    # and what of `writes` the BPU reads (cleaned after the CPU writes it).
    invalidate: tuple[tuple[str, int], ...] = ()
    clean: tuple[tuple[str, int], ...] = ()

    def op_counts(self) -> npt.NDArray[np.int64]:
        """The instruction counts (`emu.cpu.ops`) of the loop (`emu.cpu.work.vector_loop`:
        its instructions per vector and the loop step, the exit mispredicted); none for a
        view, which runs no loop."""
        return vector_loop(self.vectors, exits=min(self.vectors, 1), **self.loop.per_vector())

    @property
    def moved_bytes(self) -> int:
        return sum(b for _, b in self.reads) + sum(b for _, b in self.writes)


_QUANTIZE = _Loop(loads=1, stores=0.25, fp=3, read_bytes=_FLOAT_BYTES, written_bytes=1)
_DEQUANTIZE = _Loop(loads=0.25, stores=1, fp=4, read_bytes=1, written_bytes=_FLOAT_BYTES)
_DENSE = _Loop(loads=1, stores=0, fp=1, read_bytes=0, written_bytes=0)
_DENSE_OPS = ("Conv", "FC", "ConvTranspose", "MatMul", "Gemm")
_CPU_OP = _Loop(loads=3, stores=1, fp=12, read_bytes=_FLOAT_BYTES, written_bytes=_FLOAT_BYTES)
COPY = _Loop(loads=1, stores=1, fp=0, read_bytes=1, written_bytes=1)  # memcpy, per vector
_LAYOUT = _Loop(loads=1, stores=1, fp=0, read_bytes=1, written_bytes=1, permutes=2)


@dataclass(frozen=True)
class LayerEstimate:
    """One layer's line of the estimate; times for the whole batch."""

    name: str
    op: str
    where: str
    ops: int
    compute_ps: int
    load_store_ps: int
    time_ps: int
    loaded_bytes: int = 0
    stored_bytes: int = 0
    segment: int = 0  # the index of its segment in the placement


@dataclass(frozen=True)
class ModelEstimate:
    """The whole model's estimate at one batch."""

    name: str
    batch: int
    layers: tuple[LayerEstimate, ...]
    latency_ps: int
    peak_macs_per_s: float
    bpu_ps: int

    @property
    def latency_ms(self) -> float:
        return self.latency_ps / PS_PER_MS

    @property
    def fps(self) -> float:
        return self.batch * PS_PER_S / self.latency_ps if self.latency_ps else math.inf

    @property
    def loaded_bytes_per_frame(self) -> float:
        return sum(layer.loaded_bytes for layer in self.bpu_layers) / self.batch

    @property
    def stored_bytes_per_frame(self) -> float:
        return sum(layer.stored_bytes for layer in self.bpu_layers) / self.batch

    @property
    def ddr_bytes_per_frame(self) -> float:
        return self.loaded_bytes_per_frame + self.stored_bytes_per_frame

    @property
    def bpu_layers(self) -> list[LayerEstimate]:
        return [layer for layer in self.layers if layer.where == "bpu"]

    @property
    def utilisation(self) -> float:
        """Useful BPU MACs over what the core's peak could do in the BPU time."""
        macs = sum(layer.ops for layer in self.bpu_layers) / 2
        return macs * PS_PER_S / (self.peak_macs_per_s * self.bpu_ps) if self.bpu_ps else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "batch": self.batch, "latency_ms": self.latency_ms,
            "bpu_latency_ms": self.bpu_ps / PS_PER_MS, "fps": self.fps,
            "ddr_bytes_per_frame": self.ddr_bytes_per_frame,
            "ddr_loaded_bytes_per_frame": self.loaded_bytes_per_frame,
            "ddr_stored_bytes_per_frame": self.stored_bytes_per_frame,
            "compute_utilisation": self.utilisation,
            "layers": [{"name": layer.name, "op": layer.op, "where": layer.where,
                        "ops": layer.ops, "compute_us": layer.compute_ps / PS_PER_US,
                        "load_store_us": layer.load_store_ps / PS_PER_US}
                       for layer in self.layers],
        }


def _item_line(item: CpuItem, cfg: SocConfig,
               held: frozenset[tuple[str, int]]) -> LayerEstimate:
    compute, ddr = cpu_timing.cold_pass_ps(
        item.op_counts(), [b for r, b in item.reads if (r, b) not in held],
        [b for _, b in item.writes], cfg.cpu, cfg.ddr,
        [b for r, b in item.reads if (r, b) in held])
    return LayerEstimate(item.name, item.op, "cpu", 2 * item.macs, compute, ddr,
                         compute + ddr, item.moved_bytes if item.macs else 0, 0)


def handoffs(items: Sequence[CpuItem]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The (tensor, bytes) a CPU segment of `items` invalidates before it runs and cleans
    after (see the module docstring)."""
    return (sorted({r for item in items for r in item.invalidate}),
            sorted({w for item in items for w in item.clean}))


def _maintenance_lines(op: str, ranges: Sequence[tuple[str, int]],
                       cfg: SocConfig) -> list[LayerEstimate]:
    """One line per hbSysFlushMem call, as the runtime makes them: nothing written back
    (the CPU's full-line stores went to memory; what the BPU wrote was never cached)."""
    lines = []
    for _, nbytes in ranges:
        compute, ddr = cpu_timing.maintenance_ps(ceil_div(nbytes, cfg.cpu.line_bytes), 0,
                                                 cfg.cpu, cfg.ddr)
        lines.append(LayerEstimate(f"cache {op}", "cache", "cpu", 0, compute, ddr,
                                   compute + ddr))
    return lines


def dense_macs(graph: Graph, node: Node) -> int:
    """Multiply-accumulates of a Conv / FC / ConvTranspose / MatMul / Gemm node."""
    out = graph.tensors[node.outputs[0]].shape
    if node.op in ("MatMul", "Gemm", "FC"):
        a = graph.tensors[node.inputs[0]].shape
        return math.prod(out) * a[-1]
    w = graph.tensors[node.inputs[1]].shape
    if node.op == "ConvTranspose":  # every input pixel times the whole kernel
        x = graph.tensors[node.inputs[0]].shape
        return math.prod(x) * math.prod(w[1:])
    return math.prod(out) * math.prod(w[1:])


def bpu_boundary(segments: Sequence[Segment]) -> frozenset[str]:
    """The tensors BPU subgraphs read or write (in their codes)."""
    return frozenset(t for s in segments if s.kind == "bpu" for t in (*s.inputs, *s.outputs))


def cpu_items(graph: Graph, segment: Segment, cpu: CpuConfig,
              dtypes: Mapping[str, str] | None = None,
              bpu_tensors: frozenset[str] = frozenset()) -> list[CpuItem]:
    """The CPU work of a quantize, dequantize or CPU segment, item by item (see the
    module docstring), with the tensors each item reads and writes; `bpu_tensors`
    (`bpu_boundary`) are those a CPU segment converts from and to the BPU's codes."""
    lanes = cpu.vector_bytes // _FLOAT_BYTES
    items: list[CpuItem] = []

    def code_bytes(tensor: str) -> int:
        return int(np.dtype((dtypes or {}).get(tensor, "int8")).itemsize)

    def layout(tensor: str, elements: int) -> None:
        shape = graph.tensors[tensor].shape
        if len(shape) == 4 and shape[1] > 1:
            nbytes = elements * code_bytes(tensor)
            items.append(CpuItem(f"layout {tensor}", "layout", _LAYOUT,
                                 math.ceil(nbytes / cpu.vector_bytes), ((tensor, nbytes),),
                                 ((tensor, nbytes),)))

    def convert(tensor: str, to_codes: bool) -> None:
        elements = math.prod(graph.tensors[tensor].shape)
        floats, codes = elements * _FLOAT_BYTES, elements * code_bytes(tensor)
        first = len(items)
        if to_codes:
            items.append(CpuItem(f"quantize {tensor}", "quantize", _QUANTIZE,
                                 math.ceil(elements / lanes), ((tensor, floats),),
                                 ((tensor, codes),)))
            layout(tensor, elements)
            items[-1] = replace(items[-1], clean=((tensor, codes),))
        else:
            layout(tensor, elements)
            items.append(CpuItem(f"dequantize {tensor}", "dequantize", _DEQUANTIZE,
                                 math.ceil(elements / lanes), ((tensor, codes),),
                                 ((tensor, floats),)))
            items[first] = replace(items[first], invalidate=((tensor, codes),))

    if segment.kind in ("quantize", "dequantize"):
        for tensor in segment.inputs:
            convert(tensor, segment.kind == "quantize")
        return items
    # Between BPU subgraphs the CPU reads the BPU's codes and hands codes back: the
    # toolchain puts a dequantize before and a quantize after the CPU ops.
    for tensor in segment.inputs:
        if tensor in bpu_tensors and tensor not in graph.inputs:
            convert(tensor, False)
    by_name = {node.name: node for node in graph.nodes}
    for node_name in segment.nodes:
        node = by_name[node_name]
        reads = tuple((n, _FLOAT_BYTES * math.prod(graph.tensors[n].shape))
                      for n in node.inputs if n)
        writes = tuple((n, _FLOAT_BYTES * math.prod(graph.tensors[n].shape))
                       for n in node.outputs if n)
        if optable.kind(node.op) == "alias":  # a view: the same memory, nothing to run
            items.append(CpuItem(node.name, node.op, _CPU_OP, 0, (), ()))
        elif node.op in _DENSE_OPS:
            macs = dense_macs(graph, node)
            items.append(CpuItem(node.name, node.op, _DENSE, math.ceil(macs / lanes), reads,
                                 writes, macs))
        else:
            elements = sum(b for _, b in writes) // _FLOAT_BYTES
            items.append(CpuItem(node.name, node.op, _CPU_OP, math.ceil(elements / lanes),
                                 reads, writes))
    for tensor in segment.outputs:
        if tensor in bpu_tensors:
            convert(tensor, True)
    return items


def estimate(graph: Graph, segments: Sequence[Segment], cfg: SocConfig, batch: int,
             name: str = "model", max_time_per_fc_ps: int = 0,
             spans: Mapping[int, Sequence[timing.Span]] | None = None,
             dtypes: Mapping[str, str] | None = None) -> ModelEstimate:
    """The static estimate of a compiled graph split by `placement.place` (see the
    module); `batch` is the graph's batch (frames per run). Each BPU segment is cut into
    FCs of at most `max_time_per_fc_ps`, unless `spans` gives the cut of segment index ->
    [start, end) ranges of its layer groups (a compiled model's); `dtypes` maps tensors
    to "int8", "int16" or "int32" (a wide output; default int8)."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    subgraphs = {k: layer_groups(graph, s, dtypes) for k, s in enumerate(segments)
                 if s.kind == "bpu"}
    resident = timing.weights_resident(
        [layer for part in subgraphs.values() for layer in part], cfg.bpu)
    by_name = {node.name: node for node in graph.nodes}
    boundary = bpu_boundary(segments)
    work = {k: cpu_items(graph, s, cfg.cpu, dtypes, boundary) for k, s in enumerate(segments)
            if s.kind in ("quantize", "dequantize", "cpu")}
    # What the CPU reads allocates in its caches, what it writes streams past them; what
    # the BPU wrote is invalidated before each read. So from one inference to the next the
    # L3 keeps the model's inputs and the CPU ops' weights when all the CPU reads fits.
    read = {r for part in work.values() for item in part for r in item.reads}
    held = frozenset(
        (t, b) for t, b in read if graph.is_const(t) or (
            t in graph.inputs and b == _FLOAT_BYTES * math.prod(graph.tensors[t].shape))
    ) if sum(b for _, b in read) <= cfg.cpu.l3.size_bytes else frozenset()
    lines: list[LayerEstimate] = []
    bpu_ps = 0
    for index, segment in enumerate(segments):
        first_line = len(lines)
        if segment.kind == "bpu":
            part = subgraphs[index]
            cut = (spans[index] if spans is not None and index in spans else
                   timing.split_function_calls(part, cfg.bpu, cfg.ddr, max_time_per_fc_ps,
                                               resident))
            start_ps = cfg.bpu.task_overhead_ps  # the runtime starts one task per segment
            for call in timing.function_calls(part, cfg.bpu, cfg.ddr, cut, resident):
                bpu_ps += call.time_ps
                first = True
                for layer, cost in zip(call.layers, call.costs, strict=True):
                    lines.append(LayerEstimate(
                        layer.name, layer.op, "bpu", layer.ops, cost.compute_ps,
                        cost.load_store_ps,
                        cost.time_ps + (call.overhead_ps + start_ps if first else 0),
                        cost.read_bytes, cost.written_bytes))
                    first = False
                    start_ps = 0
        elif segment.kind in ("quantize", "dequantize", "cpu"):
            invalidate, clean = handoffs(work[index])
            lines.extend(_maintenance_lines(INVALIDATE, invalidate, cfg))
            lines.extend(_item_line(item, cfg, held) for item in work[index])
            lines.extend(_maintenance_lines(CLEAN, clean, cfg))
        else:
            lines.extend(LayerEstimate(name, by_name[name].op, segment.kind, 0, 0, 0, 0)
                         for name in segment.nodes)
        lines[first_line:] = [replace(line, segment=index) for line in lines[first_line:]]
    peak = cfg.bpu.macs_per_cycle * cfg.bpu.freq_hz
    return ModelEstimate(name, batch, tuple(lines), sum(line.time_ps for line in lines),
                         peak, bpu_ps)

"""The static performance estimate of a compiled model, as Horizon's `hb_perf` prints it.

`estimate(graph, segments, cfg, batch)` times every segment of `placement.place`'s split on
one core of an otherwise idle chip and adds them up (the segments run one after another):

- BPU segments: their layer groups (`emu/nn/layers.py`) with the BPU cost model
  (`emu/bpu/timing.py`): per layer compute time (no DDR), DDR time at the core's port,
  time = max of the two + the layer's fixed cost; each segment is one function call
  (`max_time_per_fc_ps` splits it as the compiler's option does) and pays the FC cost.
  The model's weights stay on chip across runs when all of them (every BPU segment's)
  fit in `bpu.weight_sram_bytes`.
- CPU segments (input quantize, output dequantize, CPU ops such as Softmax) on one A55
  core, from the A55's configuration alone: the NEON loop's instructions per vector of
  `cpu.vector_bytes` of float32 (below), issued in order, so the cycles are the busiest of
  all instructions / `cpu.issue_width` and each class / its pipes (`cpu.load_pipes`,
  `store_pipes`, `fp_pipes`, `alu_pipes`, `branch_pipes`), at `cpu.freq_hz`. Their DDR
  time is the float32 and int8 bytes they read and write at `cpu.ddr_port_bytes_per_s`;
  a CPU layer takes the larger of the two. Per vector: quantize loads one float32 vector,
  multiplies by 1/scale, converts with rounding and narrows (3 FP ops) and stores a
  quarter vector of int8; dequantize the reverse (a quarter-vector load, widen twice and
  convert and scale: 4 FP ops, one store); a Conv, FC, ConvTranspose or MatMul the BPU
  cannot run (`_DENSE`) is a NEON GEMM over its multiply-accumulates: per vector of MACs
  one fused multiply-add and one weight load (the inputs stay in registers across a
  blocked tile), and its DDR bytes are its float32 weights, inputs and outputs once; any
  other CPU op is timed as Softmax is
  computed, in three passes (max; exp, sum; scale), about 3 loads, 1 store and 12 FP ops;
  every loop iteration also costs an ALU op and a branch. DSP segments are not estimated
  here (0 us): the vDSP operators are simulated where they run (`emu dsp`).

The estimate excludes the runtime (task start, the host thread): it is the compiler's view.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from emu.bpu import timing
from emu.nn.graph import Graph, Node
from emu.nn.layers import layer_groups
from emu.nn.placement import Segment
from emu.soc.clock import PS_PER_MS, PS_PER_S, PS_PER_US, bytes_to_ps
from emu.soc.config import CpuConfig, SocConfig

_FLOAT_BYTES = 4


@dataclass(frozen=True)
class _Loop:
    """Instructions per NEON vector of float32 of a CPU loop, and the bytes per element."""

    loads: float
    stores: float
    fp: float
    read_bytes: int
    written_bytes: int


_QUANTIZE = _Loop(loads=1, stores=0.25, fp=3, read_bytes=_FLOAT_BYTES, written_bytes=1)
_DEQUANTIZE = _Loop(loads=0.25, stores=1, fp=4, read_bytes=1, written_bytes=_FLOAT_BYTES)
_DENSE = _Loop(loads=1, stores=0, fp=1, read_bytes=0, written_bytes=0)
_DENSE_OPS = ("Conv", "FC", "ConvTranspose", "MatMul", "Gemm")
_CPU_OP = _Loop(loads=3, stores=1, fp=12, read_bytes=_FLOAT_BYTES, written_bytes=_FLOAT_BYTES)


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


def cpu_loop_ps(elements: int, loop: _Loop, cpu: CpuConfig) -> tuple[int, int]:
    """(compute, DDR) time of a NEON loop over `elements` float32 values on one A55."""
    vectors = math.ceil(elements / (cpu.vector_bytes // _FLOAT_BYTES))
    loads, stores, fp = loop.loads * vectors, loop.stores * vectors, loop.fp * vectors
    total = loads + stores + fp + 2 * vectors  # + the loop's ALU op and branch
    cycles = math.ceil(max(total / cpu.issue_width, loads / cpu.load_pipes,
                           stores / cpu.store_pipes, fp / cpu.fp_pipes,
                           vectors / cpu.alu_pipes, vectors / cpu.branch_pipes))
    compute = math.ceil(cycles * PS_PER_S / cpu.freq_hz)
    moved = elements * (loop.read_bytes + loop.written_bytes)
    return compute, bytes_to_ps(moved, cpu.ddr_port_bytes_per_s)


def _cpu_layer(name: str, op: str, elements: int, loop: _Loop, cpu: CpuConfig
               ) -> LayerEstimate:
    compute, ddr = cpu_loop_ps(elements, loop, cpu)
    return LayerEstimate(name, op, "cpu", 0, compute, ddr, max(compute, ddr))


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


def _cpu_dense(graph: Graph, node: Node, cpu: CpuConfig) -> LayerEstimate:
    macs = dense_macs(graph, node)
    compute, _ = cpu_loop_ps(macs, _DENSE, cpu)
    moved = _FLOAT_BYTES * sum(math.prod(graph.tensors[n].shape)
                               for n in (*node.inputs, *node.outputs) if n)
    ddr = bytes_to_ps(moved, cpu.ddr_port_bytes_per_s)
    return LayerEstimate(node.name, node.op, "cpu", 2 * macs, compute, ddr, max(compute, ddr),
                         moved, 0)


def estimate(graph: Graph, segments: Sequence[Segment], cfg: SocConfig, batch: int,
             name: str = "model", max_time_per_fc_ps: int = 0,
             spans: Mapping[int, Sequence[tuple[int, int]]] | None = None,
             dtypes: Mapping[str, str] | None = None) -> ModelEstimate:
    """The static estimate of a compiled graph split by `placement.place` (see the
    module); `batch` is the graph's batch (frames per run). Each BPU segment is cut into
    FCs of at most `max_time_per_fc_ps`, unless `spans` gives the cut of segment index ->
    [start, end) ranges of its layer groups (a compiled model's); `dtypes` maps tensors
    to "int8" or "int16" (default int8)."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    subgraphs = {k: layer_groups(graph, s, dtypes) for k, s in enumerate(segments)
                 if s.kind == "bpu"}
    resident = timing.weights_resident(
        [layer for part in subgraphs.values() for layer in part], cfg.bpu)
    by_name = {node.name: node for node in graph.nodes}
    lines: list[LayerEstimate] = []
    bpu_ps = 0
    for index, segment in enumerate(segments):
        first_line = len(lines)
        if segment.kind == "bpu":
            part = subgraphs[index]
            cut = (spans[index] if spans is not None and index in spans else
                   timing.split_function_calls(part, cfg.bpu, max_time_per_fc_ps, resident))
            for call in timing.function_calls(part, cfg.bpu, cut, resident):
                bpu_ps += call.time_ps
                first = True
                for layer, cost in zip(call.layers, call.costs, strict=True):
                    lines.append(LayerEstimate(
                        layer.name, layer.op, "bpu", layer.ops, cost.compute_ps,
                        cost.load_store_ps, cost.time_ps + (call.overhead_ps if first else 0),
                        cost.read_bytes, cost.written_bytes))
                    first = False
        elif segment.kind in ("quantize", "dequantize"):
            loop = _QUANTIZE if segment.kind == "quantize" else _DEQUANTIZE
            for tensor in segment.inputs:
                elements = math.prod(graph.tensors[tensor].shape)
                lines.append(_cpu_layer(f"{segment.kind} {tensor}", segment.kind, elements,
                                        loop, cfg.cpu))
        else:
            for node_name in segment.nodes:
                node = by_name[node_name]
                elements = sum(math.prod(graph.tensors[o].shape) for o in node.outputs)
                if segment.kind == "cpu" and node.op in _DENSE_OPS:
                    lines.append(_cpu_dense(graph, node, cfg.cpu))
                elif segment.kind == "cpu":
                    lines.append(_cpu_layer(node.name, node.op, elements, _CPU_OP, cfg.cpu))
                else:
                    lines.append(LayerEstimate(node.name, node.op, segment.kind, 0, 0, 0, 0))
        lines[first_line:] = [replace(line, segment=index) for line in lines[first_line:]]
    peak = cfg.bpu.macs_per_cycle * cfg.bpu.freq_hz
    return ModelEstimate(name, batch, tuple(lines), sum(line.time_ps for line in lines),
                         peak, bpu_ps)

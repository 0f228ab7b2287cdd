"""What a compiled model costs on a BPU core: layer groups, their cycles and DDR bytes.

A `LayerGroup` is one fused layer group of a compiled model (a conv with its activation and
residual add, a pool, a LUT op, a copy); this module turns a list of them into times, with
no simulation inside. The model, and what each part of it stands for:

- **Compute.** The MAC array works on blocks of the output's H, W and C and of the
  reduction's input channels per group; a dimension that is not a multiple of its granule
  (`bpu.align_h`, `align_w`, `align_cout`, `align_cin`) is padded up to one, and the padded
  lanes do no useful work. So a 1x1 feature map, a 3-channel stem or a depthwise conv (one
  input channel per group) use a fraction of the array. The padded MACs run at
  `macs_per_cycle` x the op class's efficiency (`bpu.efficiency_<class>`: what is left of
  the peak once the class's own data path is accounted for). An operand of two bytes
  (int16) takes two int8 lanes, so the work of a layer scales with the product of its input
  and weight element sizes. Ops without weights count one MAC per output element per input
  (elementwise, resize, move) or per kernel tap (pool, and a grid sample's gather of the
  neighbours it interpolates).
- **Dependent passes.** A recurrent layer (an LSTM, unrolled over its time steps) is a
  layer group of `passes` passes, each of which needs the one before: the output holds the
  passes' results side by side along W, each pass computing its own slice of W / passes
  columns. The array pads each pass's slice to the granules on its own (one step of a
  batch-1 LSTM is a matrix-vector product that fills one column of the array's W lanes),
  and each pass pays the fixed cost of a layer group.
- **On-chip SRAM and DDR.** Feature maps live in the core's SRAM (`bpu.sram_bytes`) while
  they fit, in the BPU's layout: N x H x W x C, each of H, W and C padded to its granule.
  The residency rule (`plan_residency`): tensors are placed smallest first (then in the
  order the layer groups produce them), the way a compiler keeps as many tensors on chip
  as it can; a tensor stays on chip when, at every layer group from its producer to its
  last consumer, it fits in the SRAM together with the tensors already kept there that are
  live at that point; otherwise its producer writes it to DDR and each consumer reads it
  back. A subgraph's inputs come from DDR and its outputs go there. So a pointwise
  projection's small output feeding the next expansion stays on chip, and the same model
  at batch 256 spills the large expansions. A layer group streams its DDR operands through
  tile buffers that this rule does not count.
- **Weights.** When all of a model's weights fit in the SRAM set aside for them
  (`bpu.weight_sram_bytes`), they stay there across runs (hbDNN loads a model once; the
  estimate is the steady state) and cost no DDR traffic; otherwise every layer group reads
  its weights from DDR once per run, so a batch shares them.
- **Time.** A layer group takes max(compute, DDR) plus `bpu.layer_overhead_cycles` (its
  configuration and pipeline fill) per pass; compute and the DDR traffic overlap. For the static
  estimate the DDR time is what the shared DDR model gives the layer's one flow when nothing
  else is in flight (`emu.mem.ddr.solo_transfer_ps`): the DDR latency, then the bytes at
  the lesser of the core's port (`bpu.ddr_port_bytes_per_s`) and the DDR's bandwidth
  (`ddr.bw_bytes_per_s`); in the simulation the same bytes go through that model,
  shared. Each function call (FC) costs `bpu.fc_overhead_cycles` more (the runtime
  fetches and starts it); the compiler splits a subgraph into FCs of at most a given
  estimated duration (`split_function_calls`), and the runtime switches tasks only there.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction

from emu.mem.ddr import solo_transfer_ps
from emu.soc.clock import Clock, ceil_div
from emu.soc.config import BpuConfig, DdrConfig

OP_CLASSES = ("dense", "depthwise", "elementwise", "pool", "resize", "move")


@dataclass(frozen=True)
class TensorRef:
    """A feature map a layer group reads or writes: its name and N x H x W x C shape."""

    name: str
    n: int
    h: int
    w: int
    c: int
    elem_bytes: int = 1

    def __post_init__(self) -> None:
        if min(self.n, self.h, self.w, self.c, self.elem_bytes) < 1:
            raise ValueError(f"tensor {self.name}: every dimension must be at least 1")

    @property
    def bytes(self) -> int:
        """Its size without padding."""
        return self.n * self.h * self.w * self.c * self.elem_bytes


@dataclass(frozen=True)
class LayerGroup:
    """One fused layer group of a compiled model; every count is for the whole batch.

    `cin` is the input channels per group (the reduction's depth: 1 for a depthwise conv,
    the number of summed inputs for an elementwise op); `kernel_h`/`kernel_w` the taps
    (pool windows too); `passes` the dependent passes the work takes, each a slice of the
    output's W (see the module); `leaves` marks an output the subgraph hands on (to DDR)."""

    name: str
    op: str
    op_class: str
    output: TensorRef
    inputs: tuple[TensorRef, ...]
    cin: int = 1
    kernel_h: int = 1
    kernel_w: int = 1
    groups: int = 1
    stride: int = 1
    weight_bytes: int = 0
    weight_elem_bytes: int = 1
    passes: int = 1
    leaves: bool = False

    def __post_init__(self) -> None:
        if self.op_class not in OP_CLASSES:
            raise ValueError(f"layer group {self.name}: op class {self.op_class!r} is not "
                             f"one of {', '.join(OP_CLASSES)}")
        if min(self.cin, self.kernel_h, self.kernel_w, self.groups, self.stride,
               self.weight_elem_bytes, self.passes) < 1 or self.weight_bytes < 0:
            raise ValueError(f"layer group {self.name}: counts must be positive")
        if self.output.w % self.passes:
            raise ValueError(f"layer group {self.name}: {self.passes} passes do not split "
                             f"the output's width {self.output.w}")

    @property
    def batch(self) -> int:
        return self.output.n

    @property
    def macs(self) -> int:
        """Useful multiply-accumulates (or element operations) of the whole batch."""
        out = self.output
        return out.n * out.h * out.w * out.c * self.cin * self.kernel_h * self.kernel_w

    @property
    def ops(self) -> int:
        """Operations as the toolchain counts them: two per MAC."""
        return 2 * self.macs


@dataclass(frozen=True)
class LayerCost:
    """What one layer group costs: compute alone, DDR alone, the fixed part, the total."""

    name: str
    compute_ps: int
    read_bytes: int
    written_bytes: int
    load_store_ps: int
    fixed_ps: int

    @property
    def ddr_bytes(self) -> int:
        return self.read_bytes + self.written_bytes

    @property
    def time_ps(self) -> int:
        return max(self.compute_ps, self.load_store_ps) + self.fixed_ps


@dataclass(frozen=True)
class FunctionCall:
    """Consecutive layer groups the runtime starts as one unit, with their costs."""

    name: str
    layers: tuple[LayerGroup, ...]
    costs: tuple[LayerCost, ...]
    overhead_ps: int

    @property
    def time_ps(self) -> int:
        """The static estimate of its duration on an otherwise idle chip."""
        return self.overhead_ps + sum(c.time_ps for c in self.costs)


def _pad(value: int, granule: int) -> int:
    return ceil_div(value, granule) * granule


def layout_bytes(tensor: TensorRef, bpu: BpuConfig) -> int:
    """Bytes of `tensor` in the BPU's layout: H, W and C padded to the array's granules."""
    return (tensor.n * _pad(tensor.h, bpu.align_h) * _pad(tensor.w, bpu.align_w)
            * _pad(tensor.c, bpu.align_cout) * tensor.elem_bytes)


def efficiency(op_class: str, bpu: BpuConfig) -> float:
    value: float = getattr(bpu, f"efficiency_{op_class}")
    return value


def padded_macs(layer: LayerGroup, bpu: BpuConfig) -> int:
    """The MACs the array spends: every dimension of each pass rounded up to its granule,
    times the int8 lanes an int16 operand takes."""
    out = layer.output
    lanes = max(t.elem_bytes for t in layer.inputs) if layer.inputs else 1
    if layer.weight_bytes:
        lanes *= layer.weight_elem_bytes
    pass_w = _pad(out.w // layer.passes, bpu.align_w)
    return (out.n * _pad(out.h, bpu.align_h) * pass_w * layer.passes
            * _pad(out.c, bpu.align_cout) * _pad(layer.cin, bpu.align_cin)
            * layer.kernel_h * layer.kernel_w * lanes)


def compute_cycles(layer: LayerGroup, bpu: BpuConfig) -> int:
    rate = bpu.macs_per_cycle * Fraction(efficiency(layer.op_class, bpu))
    return ceil_div(padded_macs(layer, bpu), rate)


def weights_resident(layers: Sequence[LayerGroup], bpu: BpuConfig) -> bool:
    """Whether all these weights stay in the weight SRAM across runs."""
    return sum(layer.weight_bytes for layer in layers) <= bpu.weight_sram_bytes


def plan_residency(layers: Sequence[LayerGroup], bpu: BpuConfig,
                   leaving: Collection[str] = ()) -> set[str]:
    """The feature maps that stay on chip (see the module's residency rule). Tensors no
    layer group here produces, those `leaving` names and those marked `leaves` are the
    subgraph's inputs and outputs, in DDR."""
    last_use = {layer.output.name: i for i, layer in enumerate(layers)}
    for i, layer in enumerate(layers):
        for ref in layer.inputs:
            if ref.name in last_use:
                last_use[ref.name] = max(last_use[ref.name], i)
    candidates = sorted(
        (layout_bytes(layer.output, bpu), i) for i, layer in enumerate(layers)
        if not layer.leaves and layer.output.name not in leaving
        and last_use[layer.output.name] > i)
    live = [0] * len(layers)
    resident: set[str] = set()
    for size, i in candidates:
        span = range(i, last_use[layers[i].output.name] + 1)
        if all(live[m] + size <= bpu.sram_bytes for m in span):
            resident.add(layers[i].output.name)
            for m in span:
                live[m] += size
    return resident


def layer_costs(layers: Sequence[LayerGroup], bpu: BpuConfig, ddr: DdrConfig,
                leaving: Collection[str] = (), resident_weights: bool | None = None,
                ) -> list[LayerCost]:
    """Per layer group: compute, DDR bytes and their time alone on `ddr` through the core's
    port, the fixed cost.
    `resident_weights` defaults to whether these layer groups' weights fit on chip."""
    if resident_weights is None:
        resident_weights = weights_resident(layers, bpu)
    on_chip = plan_residency(layers, bpu, leaving)
    clock = Clock("bpu", bpu.freq_hz)
    costs = []
    for layer in layers:
        fixed_ps = clock.cycles_to_ps(bpu.layer_overhead_cycles * layer.passes)
        read = sum(layout_bytes(ref, bpu) for ref in layer.inputs if ref.name not in on_chip)
        if not resident_weights:
            read += layer.weight_bytes
        written = 0 if layer.output.name in on_chip else layout_bytes(layer.output, bpu)
        costs.append(LayerCost(layer.name, clock.cycles_to_ps(compute_cycles(layer, bpu)),
                               read, written,
                               solo_transfer_ps(read + written, ddr, bpu.ddr_port_bytes_per_s),
                               fixed_ps))
    return costs


def split_function_calls(layers: Sequence[LayerGroup], bpu: BpuConfig, ddr: DdrConfig,
                         max_time_ps: int = 0, resident_weights: bool | None = None,
                         ) -> list[tuple[int, int]]:
    """The compiler's cut of a subgraph into FCs, as [start, end) ranges of `layers`, as
    the compiler's `max_time_per_fc` does: each FC takes the most consecutive layer groups
    whose FC, costed as `function_calls` costs it (its own overhead, and every feature map
    crossing its end written to DDR), is estimated at most `max_time_ps` (0: no limit, one
    FC; a layer group longer than the limit is an FC of its own)."""
    if max_time_ps < 0:
        raise ValueError(f"max_time_ps must not be negative, got {max_time_ps}")
    if not layers:
        return []
    if not max_time_ps:
        return [(0, len(layers))]
    if resident_weights is None:
        resident_weights = weights_resident(layers, bpu)
    overhead_ps = Clock("bpu", bpu.freq_hz).cycles_to_ps(bpu.fc_overhead_cycles)

    def fc_time(start: int, end: int) -> int:
        part = layers[start:end]
        later = {ref.name for layer in layers[end:] for ref in layer.inputs}
        leaving = {layer.output.name for layer in part} & later
        return overhead_ps + sum(c.time_ps for c in layer_costs(part, bpu, ddr, leaving,
                                                                resident_weights))

    # An FC's time is not monotone in its length (a longer FC keeps on chip a feature map
    # a shorter one writes to DDR), so every end is tried until the part of the time that
    # only grows (compute and fixed costs) alone exceeds the limit.
    floor = [overhead_ps]
    for cost in layer_costs(layers, bpu, ddr, resident_weights=resident_weights):
        floor.append(floor[-1] + cost.compute_ps + cost.fixed_ps)
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(layers):
        best = start + 1
        end = start + 2
        while end <= len(layers) and floor[end] - floor[start] + overhead_ps <= max_time_ps:
            if fc_time(start, end) <= max_time_ps:
                best = end
            end += 1
        spans.append((start, best))
        start = best
    return spans


def function_calls(layers: Sequence[LayerGroup], bpu: BpuConfig, ddr: DdrConfig,
                   spans: Sequence[tuple[int, int]] | None = None,
                   resident_weights: bool | None = None) -> list[FunctionCall]:
    """The FCs of a cut (`spans`, default one FC) with their costs on `bpu`. Each FC's costs
    are its own: a feature map that crosses an FC boundary is written to DDR and read back,
    since another task may run in between."""
    if spans is None:
        spans = [(0, len(layers))] if layers else []
    ends = [0]
    for start, end in spans:
        if start != ends[-1] or end <= start:
            break
        ends.append(end)
    if len(ends) != len(spans) + 1 or ends[-1] != len(layers):
        raise ValueError(f"function calls {list(spans)} do not cut {len(layers)} layer "
                         "groups into consecutive ranges")
    if resident_weights is None:
        resident_weights = weights_resident(layers, bpu)
    overhead_ps = Clock("bpu", bpu.freq_hz).cycles_to_ps(bpu.fc_overhead_cycles)
    calls = []
    for k, (start, end) in enumerate(spans):
        part = layers[start:end]
        later = {ref.name for layer in layers[end:] for ref in layer.inputs}
        leaving = {layer.output.name for layer in part} & later
        costs = layer_costs(part, bpu, ddr, leaving, resident_weights)
        calls.append(FunctionCall(f"fc{k}", tuple(part), tuple(costs), overhead_ps))
    return calls

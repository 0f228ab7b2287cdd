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
  tile buffers that this rule does not count. An output that every reader views with one
  other shape (`held_as`) is held, counted and written in that shape.
- **Images.** An image input (uint8 NV12 planes, packed RGB: `TensorRef.packed`) is not in
  the BPU's layout but as the camera pipeline, the user or the resizer wrote it: its DDR
  bytes, and its footprint when it is on chip, are its real bytes. The granules still pad
  the compute of the layer group that reads it.
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
  shared.
- **Function calls.** Each function call (FC) costs `bpu.fc_overhead_cycles` more (the
  runtime fetches and starts it); the compiler splits a subgraph into FCs of at most a
  given estimated duration (`split_function_calls`), and the runtime switches tasks only
  there. An FC boundary moves nothing by itself: the residency rule is planned over the
  whole subgraph, so a feature map that crosses a boundary stays on chip as it would
  without the cut. Only when the runtime switches the core to another task at a boundary
  do the feature maps then on chip (`FunctionCall.spill_bytes`) leave: the core writes
  them to DDR before the other task starts and reads them back when the task resumes
  (`emu/bpu/cores.py`), so a cut costs DDR traffic only where a preemption uses it.
- **Parts of a layer group.** A layer group longer than the limit becomes FCs of parts of
  it (`layer_part`), cut along one output axis its op allows (`LayerGroup.split_axes`):
  bands of output rows, each reading the rows of its inputs its kernel window needs (the
  halo rows are read again by the band next to it) and all the weights; or tiles of
  output channels, each reading its channels' share of the weights and, for a dense
  layer, all input channels (depthwise, elementwise and pooling tiles read their own).
  The compiler takes the axis whose parts fit the limit at the least total time (rows
  for a feature-map-bound layer, channels for a weight-bound one), parts of whole
  granules (`bpu.align_h` rows, `bpu.align_cout` channels) as large as fit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from itertools import pairwise

from emu.mem.ddr import solo_transfer_ps
from emu.soc.clock import Clock, ceil_div
from emu.soc.config import BpuConfig, DdrConfig

OP_CLASSES = ("dense", "depthwise", "elementwise", "pool", "resize", "move")
# The output axes (of N x H x W x C) a layer group may be cut along into parts.
ROWS = 1
CHANNELS = 3
SPLIT_AXES = (ROWS, CHANNELS)

Span = tuple[int, ...]
"""One FC of a cut: `(start, end)`, layer groups [start, end); or `(i, i + 1, axis, first,
stop)`, the part [first, stop) of layer group i's output along `axis` (ROWS, CHANNELS)."""


@dataclass(frozen=True)
class TensorRef:
    """A feature map a layer group reads or writes: its name and N x H x W x C shape;
    `packed` for an image stored as is, N x H x W x C bytes without padding (see the
    module), rather than in the BPU's layout."""

    name: str
    n: int
    h: int
    w: int
    c: int
    elem_bytes: int = 1
    packed: bool = False

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
    output's W (see the module); `leaves` marks an output the subgraph hands on (to DDR);
    `split_axes` the output axes along which the compiler may cut it into parts (ROWS: each
    output row reads a window of `kernel_h` rows of each input at the input's row step;
    CHANNELS: each output channel is computed on its own); `held_as` the shape the output is
    held in when every reader views it with one other shape (a pooled map flattened for an
    FC): the compiler lays it out for the view, so the view costs nothing and the bytes
    written are the bytes read (None: as `output`)."""

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
    split_axes: tuple[int, ...] = SPLIT_AXES
    held_as: TensorRef | None = None

    def __post_init__(self) -> None:
        if self.op_class not in OP_CLASSES:
            raise ValueError(f"layer group {self.name}: op class {self.op_class!r} is not "
                             f"one of {', '.join(OP_CLASSES)}")
        if min(self.cin, self.kernel_h, self.kernel_w, self.groups, self.stride,
               self.weight_elem_bytes, self.passes) < 1 or self.weight_bytes < 0:
            raise ValueError(f"layer group {self.name}: counts must be positive")
        if not set(self.split_axes) <= set(SPLIT_AXES):
            raise ValueError(f"layer group {self.name}: split axes {self.split_axes} are not "
                             f"among {SPLIT_AXES}")
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
    """Consecutive layer groups (or one part of one) the runtime starts as one unit, with
    their costs; `spill_bytes`: the feature maps on chip after it that the rest of the
    subgraph reads (what a task switched out there may have to write to DDR and read
    back); `sram_bytes`: the most SRAM its feature maps on chip take at any of its layer
    groups."""

    name: str
    layers: tuple[LayerGroup, ...]
    costs: tuple[LayerCost, ...]
    overhead_ps: int
    spill_bytes: int = 0
    sram_bytes: int = 0

    @property
    def time_ps(self) -> int:
        """The static estimate of its duration on an otherwise idle chip."""
        return self.overhead_ps + sum(c.time_ps for c in self.costs)


def _pad(value: int, granule: int) -> int:
    return ceil_div(value, granule) * granule


def held(layer: LayerGroup) -> TensorRef:
    """The output of `layer` in the shape it is held in (on chip or in DDR)."""
    return layer.held_as or layer.output


def layout_bytes(tensor: TensorRef, bpu: BpuConfig) -> int:
    """Bytes of `tensor` as it is held: in the BPU's layout, H, W and C padded to the
    array's granules; a packed image as is."""
    if tensor.packed:
        return tensor.bytes
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


def _last_use(layers: Sequence[LayerGroup]) -> dict[str, int]:
    """Per feature map produced here, the index of the last layer group that reads it (its
    producer's when none does)."""
    last_use = {layer.output.name: i for i, layer in enumerate(layers)}
    for i, layer in enumerate(layers):
        for ref in layer.inputs:
            if ref.name in last_use:
                last_use[ref.name] = max(last_use[ref.name], i)
    return last_use


def plan_residency(layers: Sequence[LayerGroup], bpu: BpuConfig,
                   leaving: Collection[str] = ()) -> set[str]:
    """The feature maps that stay on chip (see the module's residency rule). Tensors no
    layer group here produces, those `leaving` names and those marked `leaves` are the
    subgraph's inputs and outputs, in DDR."""
    last_use = _last_use(layers)
    candidates = sorted(
        (layout_bytes(held(layer), bpu), i) for i, layer in enumerate(layers)
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


def _cost(layer: LayerGroup, bpu: BpuConfig, ddr: DdrConfig, on_chip: Collection[str],
          resident_weights: bool) -> LayerCost:
    """What `layer` costs when the feature maps `on_chip` names are in the SRAM, its DDR
    bytes alone on `ddr` through the core's port."""
    clock = Clock("bpu", bpu.freq_hz)
    fixed_ps = clock.cycles_to_ps(bpu.layer_overhead_cycles * layer.passes)
    read = sum(layout_bytes(ref, bpu) for ref in layer.inputs if ref.name not in on_chip)
    if not resident_weights:
        read += layer.weight_bytes
    written = 0 if layer.output.name in on_chip else layout_bytes(held(layer), bpu)
    return LayerCost(layer.name, clock.cycles_to_ps(compute_cycles(layer, bpu)), read,
                     written, solo_transfer_ps(read + written, ddr, bpu.ddr_port_bytes_per_s),
                     fixed_ps)


def layer_costs(layers: Sequence[LayerGroup], bpu: BpuConfig, ddr: DdrConfig,
                leaving: Collection[str] = (), resident_weights: bool | None = None,
                ) -> list[LayerCost]:
    """Per layer group: compute, DDR bytes and their time alone on `ddr` through the core's
    port, the fixed cost.
    `resident_weights` defaults to whether these layer groups' weights fit on chip."""
    if resident_weights is None:
        resident_weights = weights_resident(layers, bpu)
    on_chip = plan_residency(layers, bpu, leaving)
    return [_cost(layer, bpu, ddr, on_chip, resident_weights) for layer in layers]


def _extent(layer: LayerGroup, axis: int) -> int:
    return layer.output.h if axis == ROWS else layer.output.c


def input_rows(layer: LayerGroup, ref: TensorRef, rows: int) -> int:
    """Rows of input `ref` that `rows` consecutive output rows of `layer` read: its kernel's
    window slid over them at the input's row step, halo included (at most all of them)."""
    return min(ref.h, ceil_div((rows - 1) * ref.h, layer.output.h) + layer.kernel_h)


def layer_part(layer: LayerGroup, axis: int, first: int, stop: int) -> LayerGroup:
    """The part [first, stop) of `layer`'s output along `axis` as a layer group of its own,
    with what it reads (see the module's parts of a layer group)."""
    if axis not in layer.split_axes or layer.passes > 1:
        raise ValueError(f"layer group {layer.name} cannot be cut along axis {axis}")
    if not 0 <= first < stop <= _extent(layer, axis):
        raise ValueError(f"layer group {layer.name}: no part [{first}, {stop}) along axis "
                         f"{axis}")
    size = stop - first
    if axis == ROWS:
        return replace(layer, name=f"{layer.name}[rows {first}:{stop}]",
                       output=replace(layer.output, h=size), held_as=None,
                       inputs=tuple(replace(ref, h=input_rows(layer, ref, size))
                                    for ref in layer.inputs))
    every_channel = layer.op_class == "dense" and layer.groups == 1
    inputs = tuple(ref if every_channel or ref.c != layer.output.c else replace(ref, c=size)
                   for ref in layer.inputs)
    return replace(layer, name=f"{layer.name}[channels {first}:{stop}]",
                   output=replace(layer.output, c=size), inputs=inputs,
                   held_as=(replace(layer.held_as, c=size) if layer.held_as is not None
                            and layer.held_as.c == layer.output.c else None),
                   weight_bytes=ceil_div(layer.weight_bytes * size, layer.output.c))


def _parts(layer: LayerGroup, index: int, max_time_ps: int,
           fc_ps: Callable[[LayerGroup], int], bpu: BpuConfig) -> list[Span]:
    """The FCs of parts of layer group `index` that the compiler makes of it (see the
    module), or none when no cut shortens its longest FC."""
    whole_ps = fc_ps(layer)
    options = []
    for axis in layer.split_axes:
        extent = _extent(layer, axis)
        if extent < 2 or layer.passes > 1:
            continue

        def part_ps(size: int, axis: int = axis) -> int:
            return fc_ps(layer_part(layer, axis, 0, size))

        # The largest part that fits (a part's time grows with its size), in whole granules.
        low, high = 0, extent - 1
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if part_ps(mid) <= max_time_ps else (low, mid - 1)
        granule = min(bpu.align_h if axis == ROWS else bpu.align_cout, extent)
        fits = low > 0
        size = low - low % granule if low >= granule else (low or granule)
        longest = part_ps(size)
        if not fits and longest >= whole_ps:
            continue
        bounds = [*range(0, extent, size), extent]
        last = bounds[-1] - bounds[-2]
        total = (len(bounds) - 2) * longest + part_ps(last)
        spans: list[Span] = [(index, index + 1, axis, a, b) for a, b in pairwise(bounds)]
        options.append((not fits, 0 if fits else longest, total, len(spans), spans))
    return min(options)[-1] if options else []


def split_function_calls(layers: Sequence[LayerGroup], bpu: BpuConfig, ddr: DdrConfig,
                         max_time_ps: int = 0, resident_weights: bool | None = None,
                         ) -> list[Span]:
    """The compiler's cut of a subgraph into FCs (see `Span`), as its `max_time_per_fc`
    does: each FC takes the most consecutive layer groups whose FC is estimated at most
    `max_time_ps` (0: no limit, one FC); a layer group longer than that becomes FCs of
    parts of it (`layer_part`), each within the limit where a part of one granule is, or
    else as short as its parts get; one that no cut shortens is an FC of its own."""
    if max_time_ps < 0:
        raise ValueError(f"max_time_ps must not be negative, got {max_time_ps}")
    if not layers:
        return []
    if not max_time_ps:
        return [(0, len(layers))]
    if resident_weights is None:
        resident_weights = weights_resident(layers, bpu)
    overhead_ps = Clock("bpu", bpu.freq_hz).cycles_to_ps(bpu.fc_overhead_cycles)
    on_chip = plan_residency(layers, bpu)

    def fc_ps(layer: LayerGroup) -> int:
        return overhead_ps + _cost(layer, bpu, ddr, on_chip, resident_weights).time_ps

    spans: list[Span] = []
    start, taken_ps = 0, overhead_ps
    for i, layer in enumerate(layers):
        layer_ps = fc_ps(layer) - overhead_ps
        parts = _parts(layer, i, max_time_ps, fc_ps, bpu) \
            if overhead_ps + layer_ps > max_time_ps else []
        if parts:
            spans += [(start, i)] if start < i else []
            spans += parts
            start, taken_ps = i + 1, overhead_ps
            continue
        if i > start and taken_ps + layer_ps > max_time_ps:
            spans.append((start, i))
            start, taken_ps = i, overhead_ps
        taken_ps += layer_ps
    if start < len(layers):
        spans.append((start, len(layers)))
    return spans


def _fc_layers(layers: Sequence[LayerGroup], spans: Sequence[Span]
               ) -> list[tuple[list[LayerGroup], int, int]]:
    """Per FC of the cut `spans`: its layer groups (a part, for a part of one), and which
    feature maps are live at its end (those produced before the first index and read
    at or after the second), or a ValueError when `spans` does not cut `layers`."""
    def refuse() -> ValueError:
        return ValueError(f"function calls {list(spans)} do not cut {len(layers)} layer "
                          "groups into consecutive ranges")

    found: list[tuple[list[LayerGroup], int, int]] = []
    pos, cut_at = 0, (0, 0)  # the next layer group, and where its parts got to (axis, row)
    for span in spans:
        if len(span) == 2 and cut_at[1] == 0 and span[0] == pos < span[1] <= len(layers):
            pos = span[1]
            found.append((list(layers[span[0]:pos]), pos, pos))
        elif len(span) == 5 and span[0] == pos < len(layers) and span[1] == pos + 1 \
                and span[3] == cut_at[1] and cut_at[0] in (0, span[2]):
            _, _, axis, first, stop = span
            layer = layers[pos]
            found.append(([layer_part(layer, axis, first, stop)], pos + 1, pos))
            if stop == _extent(layer, axis):
                pos, cut_at = pos + 1, (0, 0)
                found[-1] = (found[-1][0], pos, pos)
            else:
                cut_at = (axis, stop)
        else:
            raise refuse()
    if pos != len(layers) or cut_at[1]:
        raise refuse()
    return found


def function_calls(layers: Sequence[LayerGroup], bpu: BpuConfig, ddr: DdrConfig,
                   spans: Sequence[Span] | None = None,
                   resident_weights: bool | None = None) -> list[FunctionCall]:
    """The FCs of a cut (`spans`, default one FC) with their costs on `bpu`: the residency
    plan is the whole subgraph's, so a feature map crossing a boundary stays where it
    would be without the cut; each FC's `spill_bytes` is what is on chip at its end."""
    if spans is None:
        spans = [(0, len(layers))] if layers else []
    found = _fc_layers(layers, spans)
    if resident_weights is None:
        resident_weights = weights_resident(layers, bpu)
    overhead_ps = Clock("bpu", bpu.freq_hz).cycles_to_ps(bpu.fc_overhead_cycles)
    on_chip = plan_residency(layers, bpu)
    produced = {layer.output.name: i for i, layer in enumerate(layers)}
    sizes: Mapping[str, int] = {layer.output.name: layout_bytes(held(layer), bpu)
                                for layer in layers if layer.output.name in on_chip}
    last_use = _last_use(layers)
    in_use = [sum(size for name, size in sizes.items() if produced[name] <= m <= last_use[name])
              for m in range(len(layers))]
    calls = []
    first = 0  # the index of the FC's first layer group
    for k, (part, before, after) in enumerate(found):
        spill = sum(size for name, size in sizes.items()
                    if produced[name] < before and last_use[name] >= after)
        costs = [_cost(layer, bpu, ddr, on_chip, resident_weights) for layer in part]
        peak = max(in_use[first:max(before, first + 1)])
        calls.append(FunctionCall(f"fc{k}", tuple(part), tuple(costs), overhead_ps, spill,
                                  peak))
        first = after if before > after else before
    return calls


def with_prefix(spans: Sequence[Span], count: int) -> list[Span]:
    """The cut `spans` of some layer groups once `count` more are put in front of them:
    those run in the first FC, or in an FC of their own when that is a part of one."""
    shifted = [(span[0] + count, span[1] + count, *span[2:]) for span in spans]
    if not count:
        return shifted
    if shifted and len(shifted[0]) == 2:
        return [(0, shifted[0][1]), *shifted[1:]]
    return [(0, count), *shifted]

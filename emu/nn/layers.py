"""A BPU segment of a compiled `Graph` as the layer groups the BPU cost model times.

`layer_groups(graph, segment, dtypes)` turns each node of one BPU segment (see
`placement.place`) into a `LayerGroup` (`emu/bpu/timing.py`), in the segment's order:

- Conv (fused activation and residual included), FC, ConvTranspose and MatMul of two
  feature maps: "dense", or "depthwise" for a grouped conv with one input channel per
  group. Their weights are the weight tensor (int8, or the dtype `dtypes` gives) and an
  int32 bias. A ConvTranspose with kernel k and stride s does (k/s)^2 taps per output
  pixel, so it is timed as a conv with that kernel.
- A LUT activation (Relu, Clip, Sigmoid, HardSigmoid, Silu) right after a conv, FC or
  ConvTranspose of the segment, whose output nothing else reads, runs in that layer
  group's output stage, as the importer already fuses Relu and Clip into a Conv: the
  group then writes the activation's output, at no extra cost (op "Conv+Silu").
- Other LUT activations, ScaleShift, BatchNormalization (per-channel affine units) and
  Add, Mul, Sum: "elementwise", one MAC per output element per feature-map input. Their
  constants (LUT tables, per-channel scales) are part of the op's configuration, not
  weights read from DDR.
- MaxPool, AveragePool, GlobalAveragePool: "pool", one MAC per window tap.
- GridSample: "move", a gather of the taps it interpolates per output element (2 x 2 for
  bilinear, 1 for nearest), at the rate of data movement: each output element reads its
  neighbours at positions the grid gives, so the op is bound by those scattered reads, not
  by its few multiplies (the Q15 coordinate per output position and the 4 weights per
  element). It reads X and the grid, (N, OH, OW, 2) with the coordinate pair as channels.
- LSTM: two layer groups, each of T x D dependent passes (T steps, D directions: every
  step needs the hidden state of the one before; see `passes` in `emu/bpu/timing.py`):
  the gate matmuls ("dense": the 4H gate rows over the I + H inputs x_t and h_{t-1}, the
  int8 weights W and R and the int32 bias), then the cell update `<name>.cell`
  ("elementwise", `LSTM_CELL_OPS` operations per hidden unit and step). Sequences are
  rows of tokens (T x B tokens of I or H channels), as an FC's operand; the cell group
  writes the hidden-state sequence (Y, or `<name>#h` when Y is not an output), which Y_h
  and Y_c are read as (their bytes overestimated by the sequence length).
- Preprocess (an image input's colour conversion and normalisation): "elementwise", one
  op per output element, reading the uint8 image as it lies in memory (`image_ref`: NV12's
  Y and interleaved U, V rows at hbDNN's row pitch, or packed pixels), at its real bytes.
- Resize: "resize". Concat, Transpose, Slice, Gather: "move" (a copy of the output).
- Flatten, Reshape, Squeeze, Unsqueeze and Split along any axis cost nothing: the BPU's
  compiler views the same memory with another shape (a split's parts are slices of its
  input), so readers of their outputs read their input (`TensorRef.name` is then the
  input's). When every reader views a layer group's output with one other shape (a pooled
  map flattened for an FC), the compiler lays the output out in that shape (`held_as`):
  the view then is the same memory, and what the producer writes is what the readers read.
  Concat is not free: its parts come from different producers, and the compiler only
  writes them in place when each producer's output layout matches the concat's slice,
  which it does not track here; it is timed as a copy.

Tensors are N x H x W x C: an (N, C, H, W) feature map as is; (N, C), an FC's operand, as
one row of N pixels (an FC is a 1x1 conv over the batch, which fills the MAC array's
pixel lanes); (N, C, L) as H = L; a MatMul's (..., M, N) with the leading dimensions as
the batch.
The subgraph's outputs are marked `leaves` (their producers write them to DDR). Every
layer group may be cut into bands of output rows or tiles of output channels
(`timing.layer_part`) except: a MatMul by channels only (its rows are not the layout's
H); a Concat by rows only, and only along an axis other than N and H (each output row is
the same row of its inputs); an LSTM's groups (dependent passes), Preprocess (its image is
one row per frame), GridSample, Transpose, Slice and Gather (their output rows and
channels come from anywhere in their inputs) not at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from emu.bpu.timing import CHANNELS, ROWS, LayerGroup, TensorRef
from emu.errors import InputError
from emu.nn import optable
from emu.nn.graph import Graph, Node
from emu.nn.placement import Segment
from emu.nn.preprocess import aligned_width

_FUSE_INTO = {"Conv", "FC", "ConvTranspose"}
_BIAS_BYTES = 4  # the BPU accumulates in int32 and adds an int32 bias
# An LSTM step's work per hidden unit after the gate matmuls: the four gate LUTs (sigmoid
# i, o, f, tanh g), f x c, i x g, their sum, tanh(c) and o x tanh(c).
LSTM_CELL_OPS = 9


def _elem_bytes(dtypes: Mapping[str, str], name: str) -> int:
    return int(np.dtype(dtypes.get(name, "int8")).itemsize)


def _nhwc(name: str, shape: tuple[int, ...], elem_bytes: int) -> TensorRef:
    if len(shape) <= 1:
        return TensorRef(name, 1, 1, 1, max(1, math.prod(shape)), elem_bytes)
    if len(shape) == 2:  # an FC's operand: the batch streams through as a row of pixels
        return TensorRef(name, 1, 1, shape[0], shape[1], elem_bytes)
    n, c, *spatial = shape
    h = spatial[0] if spatial else 1
    w = math.prod(spatial[1:])
    return TensorRef(name, max(1, n), max(1, h), max(1, w), max(1, c), elem_bytes)


def image_ref(name: str, input_type: str, shape: tuple[int, ...]) -> TensorRef:
    """A compiled model's uint8 image input of `shape` as the BPU reads it: packed, at its
    real bytes (`TensorRef.packed`). NV12, (N, H x 3 / 2, W), is its rows (the Y plane,
    then the U, V plane) at hbDNN's row pitch (`preprocess.aligned_width`); the other
    types, (N, H, W, C), are N x H x W x C bytes."""
    if input_type == "nv12":
        n, rows, width = shape
        return TensorRef(name, n, rows, aligned_width(width), 1, packed=True)
    n, h, w, c = shape
    return TensorRef(name, n, h, w, c, packed=True)


class _Builder:
    """The layer groups of one segment, and what each tensor name reads as."""

    def __init__(self, graph: Graph, dtypes: Mapping[str, str]) -> None:
        self.graph = graph
        self.dtypes = dtypes
        self.views: dict[str, TensorRef] = {}
        self.layers: list[LayerGroup] = []

    def ref(self, name: str) -> TensorRef:
        """The tensor `name` as a reader sees it (an alias names its source)."""
        if name in self.views:
            return self.views[name]
        return _nhwc(name, self.graph.tensors[name].shape, _elem_bytes(self.dtypes, name))

    def feature_maps(self, node: Node) -> tuple[TensorRef, ...]:
        return tuple(self.ref(n) for n in node.inputs if n and not self.graph.is_const(n))

    def weight_bytes(self, node: Node) -> int:
        weight, *rest = (n for n in node.inputs[1:3] if n)
        size = self.graph.tensors[weight].value
        assert size is not None
        bias = sum(math.prod(self.graph.tensors[n].shape) for n in rest)
        return size.size * _elem_bytes(self.dtypes, weight) + bias * _BIAS_BYTES

    def add(self, node: Node) -> None:
        op = node.op
        kind = optable.kind(op)
        out_name = node.outputs[0]
        if kind == "alias":
            source = self.ref(node.inputs[0])
            for name in node.outputs:
                view = _nhwc(source.name, self.graph.tensors[name].shape, source.elem_bytes)
                self.views[name] = view
            return
        if kind == "recurrent":  # several outputs, any of them omitted
            self._lstm(node)
            return
        out = self.ref(out_name)
        if kind == "preprocess":
            image = image_ref(node.inputs[0], str(node.attrs["input_type"]),
                              self.graph.tensors[node.inputs[0]].shape)
            self.layers.append(LayerGroup(node.name, op, "elementwise", out, (image,),
                                          split_axes=()))
            return
        ins = self.feature_maps(node)
        op_class = optable.COST_CLASS.get(kind)
        if kind == "conv":
            self.layers.append(self._conv(node, out, ins))
        elif kind == "matmul":
            a, b = (self.graph.tensors[n].shape for n in node.inputs[:2])
            out = _nhwc(out_name, (math.prod(a[:-2]), b[-1], a[-2]), out.elem_bytes)
            weights = self.weight_bytes(node) if self.graph.is_const(node.inputs[1]) else 0
            self.layers.append(LayerGroup(node.name, op, "dense", out, ins, cin=a[-1],
                                          weight_bytes=weights, split_axes=(CHANNELS,)))
        elif op_class == "elementwise":
            self.layers.append(LayerGroup(node.name, op, "elementwise", out, ins,
                                          cin=max(1, len(ins))))
        elif op_class == "pool":
            kh, kw = self._window(node, ins[0])
            self.layers.append(LayerGroup(node.name, op, "pool", out, ins, kernel_h=kh,
                                          kernel_w=kw))
        elif kind == "sample":
            n, oh, ow, pair = self.graph.tensors[node.inputs[1]].shape   # (x, y) as channels
            taps = 1 if str(node.attrs.get("mode", "bilinear")) == "nearest" else 2
            ins = (ins[0], TensorRef(node.inputs[1], n, oh, ow, pair,
                                     _elem_bytes(self.dtypes, node.inputs[1])))
            self.layers.append(LayerGroup(node.name, op, "move", out, ins, kernel_h=taps,
                                          kernel_w=taps, split_axes=()))
        elif op_class == "resize":
            self.layers.append(LayerGroup(node.name, op, op_class, out, ins))
        elif op_class == "move":
            rank = len(self.graph.tensors[out_name].shape)
            # a Concat along neither N nor H (the layout's) keeps its inputs' rows apart
            rows = op == "Concat" and int(node.attrs.get("axis", 0)) % max(1, rank) not in (0, 2)
            self.layers.append(LayerGroup(node.name, op, op_class, out, ins,
                                          split_axes=(ROWS,) if rows else ()))
        else:
            raise InputError(f"node {node.name}: no BPU cost model for op {op}")

    def _lstm(self, node: Node) -> None:
        """An LSTM's gate matmuls and cell update (see the module)."""
        graph = self.graph
        x = graph.tensors[node.inputs[0]].shape
        steps, batch = (x[1], x[0]) if int(node.attrs.get("layout", 0)) else (x[0], x[1])
        directions, rows, hidden = graph.tensors[node.inputs[2]].shape
        passes = steps * directions
        reads = tuple(TensorRef(self.ref(n).name, 1, 1, math.prod(graph.tensors[n].shape[:-1]),
                                graph.tensors[n].shape[-1], self.ref(n).elem_bytes)
                      for n in node.inputs if n and not graph.is_const(n))
        gates = TensorRef(f"{node.name}#gates", 1, 1, passes * batch, rows)
        weights = directions * rows * (x[2] + hidden) + directions * rows * _BIAS_BYTES
        self.layers.append(LayerGroup(node.name, node.op, "dense", gates, reads,
                                      cin=x[2] + hidden, weight_bytes=weights, passes=passes,
                                      split_axes=()))
        first = node.outputs[0] if node.outputs and node.outputs[0] else f"{node.name}#h"
        states = TensorRef(first, 1, 1, passes * batch, hidden)
        self.layers.append(LayerGroup(f"{node.name}.cell", f"{node.op}.cell", "elementwise",
                                      states, (gates,), cin=LSTM_CELL_OPS, passes=passes,
                                      split_axes=()))
        self.views.update((name, states) for name in node.outputs if name)

    def _window(self, node: Node, x: TensorRef) -> tuple[int, int]:
        """The taps a pool or reduction reads per output element."""
        if node.op in ("GlobalAveragePool", "GlobalMaxPool"):
            return x.h, x.w
        if node.op in ("MaxPool", "AveragePool"):
            kh, kw = tuple(node.attrs.get("kernel_shape", (1, 1)))
            return int(kh), int(kw)
        shape = self.graph.tensors[node.inputs[0]].shape
        if node.op in ("ArgMax", "ArgMin"):
            return shape[int(node.attrs.get("axis", 0)) % len(shape)], 1
        axes = optable.reduce_axes(self.graph, node) or tuple(range(len(shape)))
        return math.prod(shape[a] for a in axes), 1

    def fuse_output(self, conv: str, lut: Node) -> None:
        """`lut` runs in the output stage of layer group `conv` (the last one made): the
        group now writes the LUT's output instead of the conv's."""
        last = self.layers[-1]
        assert last.name == conv, (last.name, conv)
        out = self.ref(lut.outputs[0])
        self.layers[-1] = replace(last, op=f"{last.op}+{lut.op}", output=out)

    def _conv(self, node: Node, out: TensorRef, ins: tuple[TensorRef, ...]) -> LayerGroup:
        w = self.graph.tensors[node.inputs[1]].shape
        groups = int(node.attrs.get("group", 1))
        strides = tuple(node.attrs.get("strides", (1, 1)))
        if node.op == "FC":
            cin, kh, kw = w[1], 1, 1
        elif node.op == "ConvTranspose":
            cin = w[0] // groups
            kh, kw = (math.ceil(k / s) for k, s in zip(w[2:], strides, strict=True))
        else:
            cin, kh, kw = w[1], w[2], w[3]
        op_class = "depthwise" if groups > 1 and cin == 1 else "dense"
        return LayerGroup(node.name, node.op, op_class, out, ins, cin=cin, kernel_h=kh,
                          kernel_w=kw, groups=groups, stride=max(strides),
                          weight_bytes=self.weight_bytes(node),
                          weight_elem_bytes=_elem_bytes(self.dtypes, node.inputs[1]))


def layer_groups(graph: Graph, segment: Segment,
                 dtypes: Mapping[str, str] | None = None) -> list[LayerGroup]:
    """The layer groups of a BPU segment (see the module). `dtypes` maps tensor names to
    "int8" (the default) or "int16"."""
    if segment.kind != "bpu":
        raise ValueError(f"layer_groups: a {segment.kind} segment has no BPU layer groups")
    builder = _Builder(graph, dtypes or {})
    by_name = {node.name: node for node in graph.nodes}
    readers, producers = graph.consumers(), graph.producers()
    fused: dict[str, str] = {}  # a LUT node -> the conv whose output stage runs it
    for before, name in zip(segment.nodes, segment.nodes[1:], strict=False):
        node = by_name[name]
        x = node.inputs[0] if node.inputs else ""
        if (optable.kind(node.op) in ("lut", "clamp") and producers.get(x) is by_name[before]
                and by_name[before].op in _FUSE_INTO and len(readers[x]) == 1
                and x not in segment.outputs):
            fused[name] = before
    for name in segment.nodes:
        if name in fused:
            builder.fuse_output(fused[name], by_name[name])
        else:
            builder.add(by_name[name])
    leaving = {builder.ref(name).name for name in segment.outputs}
    return [replace(layer, leaves=True) if layer.output.name in leaving else layer
            for layer in _held_as_viewed(builder.layers)]


def _held_as_viewed(layers: list[LayerGroup]) -> list[LayerGroup]:
    """Each layer group whose output every reader here views with one other shape (a
    flatten between a pool and an FC), set to hold its output in that shape."""
    seen: dict[str, set[TensorRef]] = {}
    for layer in layers:
        for ref in layer.inputs:
            seen.setdefault(ref.name, set()).add(ref)
    out = []
    for layer in layers:
        views = seen.get(layer.output.name, set())
        if len(views) == 1 and layer.output not in views:
            layer = replace(layer, held_as=next(iter(views)))
        out.append(layer)
    return out

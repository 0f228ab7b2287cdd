"""Running a quantised model (issue 11): BPU segments in exact integer arithmetic, the
rest with the float reference (`emu/nn/reference.py`, what the quantised model is compared
with).

`run(qmodel, feeds)` executes a `QuantModel` (emu/nn/quantize.py) segment by segment, as
the J5 would: the "quantize" segment turns the float inputs into codes; a BPU segment runs
its nodes on integer codes with the exact kernels of emu/nn/kernels.py (so its outputs are
defined bit for bit, and tests/nn/quant_reference.py restates them); a CPU or DSP segment
runs its nodes in float (`reference.float_node`); the "dequantize" segment turns the codes
of the model outputs back into float32. Where a CPU segment reads a BPU
segment's output it is dequantised, and where a BPU segment reads a float tensor it is
quantised, so every BPU <-> CPU boundary in the middle of a graph converts.

Conversions (symmetric, zero point 0):
- quantise: code = clamp(round_half_away(x / scale)), the quotient in float64 (x widened
  from float32 exactly), rounded to the nearest integer with ties away from zero, then
  saturated to the code type (int8 or int16);
- dequantise: float32(code x scale), the product in float64.

How each BPU op runs on codes (scales and types come from the QuantModel's tensor table):
- Conv, FC: `kernels.Conv2d` / `FullyConnected` with the int8 per-channel weights and int32
  biases. A Conv with a residual runs as the conv (no activation) into its own
  intermediate tensor (`<output>#conv`), then `kernels.Add` of it and the residual with the
  activation. ConvTranspose (group 1, no dilation) is the convolution of the input with
  stride - 1 zeros inserted between pixels (exact: a zero code is the value 0), padded by
  kernel - 1 - pad on each side (+ output_padding at the end), with the weight transposed
  to (C_out, C_in) and flipped in both spatial axes.
- ScaleShift, and Mul / Add by a per-channel (or scalar) constant: a per-channel affine
  map a[c] x + b[c], run as a depthwise 1x1 `Conv2d` (weight a quantised per channel,
  bias b in the accumulator's scale).
- Add, Sum of feature maps: `kernels.Add` (Sum of more than two: a chain of Adds, each
  into the output's scale). Inputs of different code types: the int8 one is widened to
  int16 (same scale, the same codes). Concat: `kernels.Concat`.
- Sigmoid, Silu, HardSigmoid (ONNX's default alpha and beta): `kernels.Lut` (int8 only).
- Preprocess (an image input type's colour conversion and normalisation): the exact
  integer `ImageInput.to_codes` of emu/nn/preprocess.py, from the raw uint8 input, which
  has no codes of its own and enters the BPU segment as it is.
- Code-preserving ops (output at the input's scale and type): MaxPool, AveragePool,
  GlobalAveragePool (the kernels' rounded averages), Resize (nearest, integer factor),
  Relu (max(q, 0)), Clip (q clamped to the bounds divided by the scale, rounded half away
  from zero), Flatten, Reshape, Squeeze, Unsqueeze, Transpose, Split, and GridSample
  (`kernels_tensor.GridSample` of X's codes at the grid's codes, the grid a feature map or
  a stored grid quantised at its own scale; opset 16's "bilinear" is opset 20's "linear").
- LSTM (batch 1, either layout: the same memory order then): per direction a
  `kernels_tensor.Lstm` over the sequence, reversed for "reverse" and for the second
  direction of "bidirectional" (whose Y is put back in time order). The scales of its
  inner tensors are calibrated like any tensor's, under the names
  `reference.lstm_tensor` gives (`<node>#lstm<d>.<part>`, `LSTM_PARTS`); its weights are
  `quantize`'s per-row quantisation of [W x s_x | R x s_h]. The initial states are zeros
  when absent, a stored one quantised and a feature map's codes rescaled
  (`kernels.Rescale`) to the direction's state scales; Y, Y_h and Y_c are the hidden and
  cell codes rescaled to their own scales.
  Everything is int8 (`quantize` keeps LSTM and GridSample tensors int8: J5's list gives
  them no int16).

Kernel objects are built once per model (`prepare`: by `quantize.quantize`, or on the first
`run` of a model read back with `from_arrays`) and kept in the QuantModel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any, cast, get_args

import numpy as np

from emu.nn import blas, kernels, kernels_tensor, optable, reference
from emu.nn.graph import Graph, Node
from emu.nn.opattrs import (
    Geometry,
    clip_bounds,
    deconv_as_conv,
    geometry,
    image_input,
    is_channel_affine,
    pair,
    repeat_factor,
    resize_scales,
    split_points,
    zero_insert,
)

if TYPE_CHECKING:
    from emu.nn.quantize import QuantModel

CODES_PREFIX = "codes:"
CODE_TYPES: dict[str, np.dtype[Any]] = {"int8": np.dtype(np.int8), "int16": np.dtype(np.int16)}
# The kinds (emu/nn/optable.py) whose outputs keep their input's codes, scale and type,
# and the ops of other kinds that do too.
_PRESERVING_KINDS = frozenset({"clamp", "pool", "resize", "sample", "move", "alias"})
_PRESERVING_OPS = frozenset({"ReduceMax", "ReduceMean"})
_OWN_SCALE_OPS = frozenset({"Concat"})  # a "move" that rescales its inputs
# LUT ops the kernels' named tables compute (the float op keeps its own NumPy definition).
_NAMED_LUTS = {"Sigmoid": "sigmoid", "Silu": "silu", "HardSwish": "hardswish"}


def code_preserving(node: Node) -> bool:
    """Whether the node's outputs keep its first input's codes, scale and type."""
    kind = optable.kind(node.op)
    return (kind in _PRESERVING_KINDS or node.op in _PRESERVING_OPS) \
        and node.op not in _OWN_SCALE_OPS


def is_lut(node: Node) -> bool:
    return optable.kind(node.op) == "lut"


def quantised_constants(graph: Graph, node: Node) -> list[str]:
    """The constant operands a BPU node reads as codes of their own scale (a binary op or
    MatMul by a constant that is not one value per channel, a GridSample's stored grid);
    weights of conv-like layers, LSTMs and per-channel affine maps are quantised per
    channel instead (`quantize`)."""
    if node.op not in (*_BINARY, "MatMul", "GridSample") or is_channel_affine(graph, node):
        return []
    return [n for n in node.inputs if n and graph.is_const(n)]



round_half_away = kernels.round_half_away_float64


def to_codes(x: np.ndarray, scale: float, dtype: str) -> np.ndarray:
    """Quantise: clamp(round_half_away(float64(x) / scale)) as int8 or int16 codes."""
    info = np.iinfo(CODE_TYPES[dtype])
    codes = round_half_away(np.asarray(x, np.float64) / scale)
    return np.asarray(np.clip(codes, info.min, info.max), CODE_TYPES[dtype])


def from_codes(codes: np.ndarray, scale: float) -> np.ndarray:
    """Dequantise: float32(code x scale)."""
    return (codes.astype(np.float64) * scale).astype(np.float32)


# ---------------------------------------------------------------------------------------
# Integer ops of BPU nodes

Codes = dict[str, np.ndarray]
Step = Callable[[Codes], None]


def _exact_bound(bound: float, scale: float, dtype: np.dtype) -> int:
    info = np.iinfo(dtype)
    if not math.isfinite(bound):
        return int(info.min) if bound < 0 else int(info.max)
    code = kernels.round_half_away(Fraction(bound) / Fraction(scale))
    return min(max(code, int(info.min)), int(info.max))


def _clamp(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.clip(v, lo, hi).astype(v.dtype)


def _reshape(v: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return v.reshape(shape)


def _copy(v: np.ndarray) -> np.ndarray:
    return v


_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Sum"})


def _transpose(v: np.ndarray, perm: Sequence[int] | None) -> np.ndarray:
    return np.ascontiguousarray(v.transpose(perm))


class _Builder:
    """Turns one BPU node of a QuantModel into a step over the code table."""

    def __init__(self, qmodel: QuantModel) -> None:
        self.q = qmodel
        self.graph = qmodel.graph
        self.wide = qmodel.wide_outputs()

    def scale(self, name: str) -> float:
        return self.q.tensors[name].scale

    def dtype(self, name: str) -> np.dtype:
        return np.dtype(np.int32) if name in self.wide else CODE_TYPES[self.q.tensors[name].dtype]

    def conv(self, node: Node, weight: np.ndarray, win: Geometry, groups: int, out: str,
             activation: str) -> kernels.Conv2d:
        layer = self.q.layers[node.name]
        return kernels.Conv2d(
            weight, layer.bias, in_scale=self.scale(node.inputs[0]), w_scales=layer.w_scales,
            out_scale=self.scale(out), stride=win.stride, padding=win.pads,
            dilation=win.dilation, groups=groups,
            activation=cast(kernels.Activation, activation),  # the kernel checks the name
            in_dtype=self.dtype(node.inputs[0]),
            out_dtype=CODE_TYPES[self.q.tensors[out].dtype])  # a wide Conv: accumulate()

    def add(self, a: str, b: str, out: str,
            activation: str = "none") -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """`kernels.Add` of tensors a and b into out (see `pair`)."""
        return self.pair("Add", a, b, out, activation)

    def pair(self, op: str, a: str, b: str, out: str,
             activation: str = "none") -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """The integer op of two code tensors a and b into out: Add, Sub, Mul, Div, Max or
        MatMul; an int8 input next to an int16 one is widened (same scale, same codes)."""
        wide = max(self.dtype(a), self.dtype(b), key=lambda t: t.itemsize)
        scales = (self.scale(a), self.scale(b), self.scale(out))
        out_dtype = self.dtype(out)
        kernel: Callable[[np.ndarray, np.ndarray], np.ndarray]
        if op in ("Add", "Sub"):
            kernel = kernels.Add(*scales, activation=cast(kernels.Activation, activation),
                                 in_dtype=wide, out_dtype=out_dtype, subtract=op == "Sub")
        elif op == "Mul":
            kernel = kernels.Mul(*scales, in_dtype=wide, out_dtype=out_dtype)
        elif op == "Div":
            kernel = kernels.Div(*scales, in_dtype=wide, out_dtype=out_dtype)
        elif op == "Max":
            kernel = kernels.Extremum("max", *scales, in_dtype=wide, out_dtype=out_dtype)
        elif op == "MatMul":
            kernel = kernels_tensor.MatMul(*scales, in_dtype=wide, out_dtype=out_dtype)
        else:
            raise kernels.QuantisationError(f"no integer {op} of two tensors")
        return lambda x, y: kernel(x.astype(wide, copy=False), y.astype(wide, copy=False))

    def step(self, node: Node) -> Step:
        """The step that computes `node`'s output codes from its input codes."""
        graph, op = self.graph, node.op
        if op == "Conv" and node.residual:
            return self._residual_conv(node)
        if self.wide.get(node.outputs[0]) is node:
            return self._wide_conv(node)
        if op in _BINARY and not is_channel_affine(graph, node):
            return self._binary(node)
        if op == "Split":
            return self._split(node)
        if op == "MatMul":
            return self._binary(node)
        if op == "GridSample":
            return self._grid_sample(node)
        if op == "LSTM":
            return self._lstm(node)
        if self._on_codes_op(node):
            return self._on_codes(node)
        fn = self._function(node)
        feature_maps = [n for n in node.inputs if n and not graph.is_const(n)]
        if op in ("Conv", "FC", "ConvTranspose"):
            feature_maps = feature_maps[:1]
        out = node.outputs[0]

        def node_step(codes: Codes) -> None:
            codes[out] = fn(*(codes[n] for n in feature_maps))
        return node_step

    def _on_codes_op(self, node: Node) -> bool:
        """Data movement whose ONNX definition, applied to the codes, gives the output codes
        (every "move" op but Concat; a nearest Resize that does not simply repeat)."""
        if node.op in ("Resize", "Upsample"):
            return (str(node.attrs.get("mode", "nearest")) == "nearest"
                    and repeat_factor(self.graph, node) is None)
        return optable.kind(node.op) == "move" and node.op != "Concat"

    def _function(self, node: Node) -> Callable[..., np.ndarray]:
        """The codes -> codes function of a node with one output."""
        graph, op, a = self.graph, node.op, node.attrs
        x, out = node.inputs[0], node.outputs[0]
        x_shape = graph.tensors[x].shape
        if op == "Conv":
            weight = self.q.layers[node.name].weight
            return self.conv(node, weight, geometry(node, weight.shape[2:], x_shape[2:]),
                             int(a.get("group", 1)), out, node.activation)
        if op == "ConvTranspose":
            return self._deconv(node)
        if op == "FC":
            layer = self.q.layers[node.name]
            return kernels.FullyConnected(
                layer.weight, layer.bias, in_scale=self.scale(x), w_scales=layer.w_scales,
                out_scale=self.scale(out), in_dtype=self.dtype(x), out_dtype=self.dtype(out))
        if is_channel_affine(graph, node):
            return self._affine(node)
        if op == "Concat":
            concat = kernels.Concat([self.scale(n) for n in node.inputs], self.scale(out),
                                    axis=int(a["axis"]), out_dtype=self.dtype(out))
            return lambda *parts: concat(list(parts))
        if is_lut(node):
            function: Callable[..., Any] | str = (_NAMED_LUTS.get(op)
                                                  or reference.lut_function(graph, node))
            return kernels.Lut.from_function(function, self.scale(x), self.scale(out),
                                             in_dtype=self.dtype(x), out_dtype=self.dtype(out))
        if op in ("ReduceMax", "ReduceMean", "ReduceSum", "GlobalMaxPool"):
            return self._reduce(node)
        if op in ("ArgMax", "ArgMin"):
            pick = kernels_tensor.argmax if op == "ArgMax" else kernels_tensor.argmin
            return partial(pick, axis=int(a.get("axis", 0)) % len(x_shape),
                           keepdims=bool(a.get("keepdims", 1)),
                           select_last_index=bool(a.get("select_last_index", 0)))
        if op == "Identity":
            return _copy
        if op in ("MaxPool", "AveragePool"):
            win = geometry(node, a["kernel_shape"], x_shape[2:],
                           graph.tensors[out].shape[2:])
            if op == "MaxPool":
                return partial(kernels.max_pool2d, kernel=win.kernel, stride=win.stride,
                               padding=win.pads, dilation=win.dilation)
            return partial(kernels.avg_pool2d, kernel=win.kernel, stride=win.stride,
                           padding=win.pads, dilation=win.dilation,
                           count_include_pad=bool(a.get("count_include_pad", 0)))
        if op == "GlobalAveragePool":
            return kernels.global_avg_pool2d
        if op == "Preprocess":
            return partial(image_input(graph, node).to_codes, out_scale=self.scale(out),
                           out_dtype=self.dtype(out))
        if op in ("Resize", "Upsample"):
            factor = repeat_factor(graph, node)
            if factor is not None:
                return partial(kernels.resize_nearest, factor=factor)
            mode = (str(a.get("coordinate_transformation_mode", "half_pixel"))
                    if graph.opset >= 11 else "asymmetric")
            if mode not in get_args(kernels_tensor.CoordinateMode):
                raise kernels.QuantisationError(f"node {node.name}: linear Resize in "
                                                f"coordinate mode {mode}")
            height, width = graph.tensors[out].shape[2:]
            return partial(kernels_tensor.resize_linear, sizes=(height, width),
                           mode=cast(kernels_tensor.CoordinateMode, mode),
                           scales=resize_scales(graph, node))
        if op in ("Relu", "Clip"):
            low, high = (0.0, math.inf) if op == "Relu" else clip_bounds(graph, node)
            return partial(_clamp, lo=_exact_bound(low, self.scale(x), self.dtype(x)),
                           hi=_exact_bound(high, self.scale(x), self.dtype(x)))
        if op in ("Flatten", "Reshape", "Squeeze", "Unsqueeze"):
            return partial(_reshape, shape=graph.tensors[out].shape)
        if op == "Transpose":
            return partial(_transpose, perm=a.get("perm"))
        raise kernels.QuantisationError(
            f"node {node.name}: no integer implementation of {op} on the BPU")

    def _reduce(self, node: Node) -> Callable[[np.ndarray], np.ndarray]:
        graph, x, out = self.graph, node.inputs[0], node.outputs[0]
        rank = len(graph.tensors[x].shape)
        if node.op == "GlobalMaxPool":
            return partial(kernels_tensor.reduce_max, axes=tuple(range(2, rank)))
        axes = optable.reduce_axes(graph, node)
        assert axes is not None  # the table's check refuses a reduction without axes
        if node.op == "ReduceMax":
            return partial(kernels_tensor.reduce_max, axes=axes)
        if node.op == "ReduceMean":
            return partial(kernels_tensor.reduce_mean, axes=axes)
        return kernels_tensor.ReduceSum(self.scale(x), self.scale(out), axes,
                                        in_dtype=self.dtype(x), out_dtype=self.dtype(out))

    def _binary(self, node: Node) -> Step:
        """Add, Sub, Mul, Div, Max, Sum and MatMul of codes: feature maps, or a constant
        operand quantised at its own scale (`quantize` gives it one). Sum and Max of more
        than two inputs are a chain of pairs, each into the output's scale."""
        graph, out = self.graph, node.outputs[0]
        names = list(node.inputs)
        fixed = {n: to_codes(np.asarray(graph.tensors[n].value), self.scale(n),
                             self.q.tensors[n].dtype)
                 for n in names if graph.is_const(n)}
        if len(names) == 1:  # a Sum or Max of one input: its codes at the output's scale
            rescale = kernels.Rescale(self.scale(names[0]), self.scale(out),
                                      out_dtype=self.dtype(out))
            kernel_chain: list[Callable[[np.ndarray, np.ndarray], np.ndarray]] = []
        else:
            op = "Add" if node.op == "Sum" else node.op
            kernel_chain = [self.pair(op, names[0], names[1], out)]
            kernel_chain += [self.pair(op, out, name, out) for name in names[2:]]

        def value(codes: Codes, name: str) -> np.ndarray:
            return fixed[name] if name in fixed else codes[name]

        def binary_step(codes: Codes) -> None:
            if not kernel_chain:
                codes[out] = rescale(value(codes, names[0]))
                return
            total = kernel_chain[0](value(codes, names[0]), value(codes, names[1]))
            for kernel, name in zip(kernel_chain[1:], names[2:], strict=True):
                total = kernel(total, value(codes, name))
            codes[out] = total
        return binary_step

    def _on_codes(self, node: Node) -> Step:
        """The op's ONNX definition on the codes (see `_on_codes_op`); a Pad's constant is
        its code at the input's scale."""
        graph, x = self.graph, node.inputs[0]
        target = node
        consts = [None if not n or not graph.is_const(n) else graph.tensors[n].value
                  for n in node.inputs]
        if node.op == "Pad":
            value = consts[2] if len(consts) > 2 and consts[2] is not None else \
                np.float64(node.attrs.get("value", 0.0))
            code = to_codes(np.asarray(value, np.float64).reshape(-1)[:1],
                            self.scale(x), self.q.tensors[x].dtype)[0]
            if len(consts) > 2 and consts[2] is not None:
                consts[2] = np.asarray(code)
            else:
                target = Node(node.name, node.op, node.inputs, node.outputs,
                              {**node.attrs, "value": float(code)})
        dtypes = [self.dtype(n) if n in self.q.tensors else np.dtype(graph.tensors[n].dtype)
                  for n in node.outputs]

        def codes_step(codes: Codes) -> None:
            ins = [c if c is not None or not n else codes[n]
                   for n, c in zip(node.inputs, consts, strict=True)]
            outs = reference.reference_node(graph.opset, target, ins)
            codes.update((name, np.asarray(v).astype(t, copy=False))
                         for name, v, t in zip(node.outputs, outs, dtypes, strict=True))
        return codes_step

    def _wide_conv(self, node: Node) -> Step:
        """A final Conv or FC handing over its int32 accumulators
        (`QuantModel.wide_outputs`)."""
        weight = self.q.layers[node.name].weight
        x, out = node.inputs[0], node.outputs[0]
        flat = node.op == "FC"  # the 1 x 1 convolution of (N, K, 1, 1)
        if flat:
            weight = weight[:, :, None, None]
        in_hw = (1, 1) if flat else self.graph.tensors[x].shape[2:]
        conv = self.conv(node, weight, geometry(node, weight.shape[2:], in_hw),
                         int(node.attrs.get("group", 1)), out, "none")

        def wide_step(codes: Codes) -> None:
            value = codes[x][:, :, None, None] if flat else codes[x]
            sums = conv.accumulate(value).astype(np.int32)  # int8 input: fits
            codes[out] = sums[:, :, 0, 0] if flat else sums
        return wide_step

    def _residual_conv(self, node: Node) -> Step:
        x, out, residual = node.inputs[0], node.outputs[0], node.residual
        assert residual is not None
        pre = out + "#conv"
        weight = self.q.layers[node.name].weight
        conv = self.conv(node, weight, geometry(node, weight.shape[2:],
                                                self.graph.tensors[x].shape[2:]),
                         int(node.attrs.get("group", 1)), pre, "none")
        add = self.add(pre, residual, out, node.activation)

        def residual_step(codes: Codes) -> None:
            codes[pre] = conv(codes[x])
            codes[out] = add(codes[pre], codes[residual])
        return residual_step

    def _deconv(self, node: Node) -> Callable[[np.ndarray], np.ndarray]:
        weight = self.q.layers[node.name].weight
        transposed_shape = (weight.shape[1], weight.shape[0], *weight.shape[2:])
        _, win = deconv_as_conv(node, np.zeros(transposed_shape))
        conv = self.conv(node, weight, win, 1, node.outputs[0], "none")
        stride = pair(node.attrs.get("strides"), 1)
        return lambda v: conv(zero_insert(v, stride))

    def _affine(self, node: Node) -> Callable[[np.ndarray], np.ndarray]:
        x = next(n for n in node.inputs if not self.graph.is_const(n))
        out = node.outputs[0]
        layer = self.q.layers[node.name]
        channels = layer.weight.shape[0]
        conv = kernels.Conv2d(
            layer.weight, layer.bias, in_scale=self.scale(x), w_scales=layer.w_scales,
            out_scale=self.scale(out), groups=channels, in_dtype=self.dtype(x),
            out_dtype=self.dtype(out))
        shape = self.graph.tensors[out].shape
        return lambda v: conv(v.reshape(shape[0], channels, -1, 1)).reshape(shape)

    def _grid_sample(self, node: Node) -> Step:
        """`kernels_tensor.GridSample` of X's codes at the grid's codes (a stored grid has
        codes of its own scale); the output keeps X's scale and type."""
        graph, a = self.graph, node.attrs
        x, grid, out = node.inputs[0], node.inputs[1], node.outputs[0]
        mode = str(a.get("mode", "bilinear"))
        height, width = graph.tensors[x].shape[2:]
        sample = kernels_tensor.GridSample(
            self.scale(grid), (height, width),
            mode="bilinear" if mode == "linear" else cast(kernels_tensor.GridMode, mode),
            padding_mode=cast(kernels_tensor.GridPadding, str(a.get("padding_mode", "zeros"))),
            align_corners=bool(a.get("align_corners", 0)))
        stored = None if not graph.is_const(grid) else to_codes(
            np.asarray(graph.tensors[grid].value), self.scale(grid), self.q.tensors[grid].dtype)

        def grid_sample_step(codes: Codes) -> None:
            codes[out] = sample(codes[x], codes[grid] if stored is None else stored)
        return grid_sample_step

    def lstm_scales(self, node: Node, direction: int) -> kernels_tensor.LstmScales:
        """The scales of one LSTM direction's inner tensors (`lstm_tensor`)."""
        def scale(part: str) -> float:
            return self.scale(reference.lstm_tensor(node, direction, part))
        pre = tuple(scale(f"pre_{g}") for g in "iofg")
        gate = tuple(scale(g) for g in "iofg")
        return kernels_tensor.LstmScales(
            (pre[0], pre[1], pre[2], pre[3]), (gate[0], gate[1], gate[2], gate[3]),
            scale("forget"), scale("update"), scale("c"), scale("tanh_c"), scale("h"))

    def _lstm_state(self, node: Node, slot: int,
                    part: str) -> Callable[[Codes], list[np.ndarray]]:
        """The initial state of input `slot` (initial_h or initial_c) as codes of each
        direction's state scale (`part` "h" or "c"), (B, H) per direction: zeros when the
        node has none, a stored one quantised, a feature map's codes rescaled."""
        graph, layer = self.graph, self.q.layers[node.name]
        directions, hidden = layer.weight.shape[0], layer.weight.shape[1] // 4
        scales = [self.scale(reference.lstm_tensor(node, d, part)) for d in range(directions)]
        name = node.inputs[slot] if len(node.inputs) > slot else ""
        shape = (directions, 1, hidden)     # (D, B, H) or (B, D, H): the same for batch 1
        if not name:
            zeros = [np.zeros(shape[1:], np.int8) for _ in scales]
            return lambda codes: zeros
        if graph.is_const(name):
            value = np.asarray(graph.tensors[name].value).reshape(shape)
            stored = [to_codes(value[d], s, "int8") for d, s in enumerate(scales)]
            return lambda codes: stored
        rescales = [kernels.Rescale(self.scale(name), s) for s in scales]
        return lambda codes: [rescale(v) for rescale, v in
                              zip(rescales, codes[name].reshape(shape), strict=True)]

    def _lstm(self, node: Node) -> Step:
        """An LSTM of batch 1: each direction a `kernels_tensor.Lstm` over the sequence (a
        backward one over it reversed), the outputs Y, Y_h, Y_c the hidden and cell codes
        rescaled to their own scales (see the module)."""
        graph, layer = self.graph, self.q.layers[node.name]
        backward = optable.lstm_backward(node)
        cells = [kernels_tensor.Lstm(layer.weight[d], layer.bias[d], layer.w_scales[d],
                                     self.lstm_scales(node, d)) for d in range(len(backward))]
        initial_h, initial_c = self._lstm_state(node, 5, "h"), self._lstm_state(node, 6, "c")
        x_name = node.inputs[0]
        x_shape = reference.lstm_sequence(node, np.empty(graph.tensors[x_name].shape)).shape
        outputs = [(k, name) for k, name in enumerate(node.outputs[:3]) if name]
        rescales = {name: [kernels.Rescale(
            self.scale(reference.lstm_tensor(node, d, "c" if k == 2 else "h")), self.scale(name))
            for d in range(len(backward))] for k, name in outputs}

        def lstm_step(codes: Codes) -> None:
            x = codes[x_name].reshape(x_shape)      # (T, 1, I): layout 1 is the same at batch 1
            h0, c0 = initial_h(codes), initial_c(codes)
            hs, cs = [], []
            for d, cell in enumerate(cells):
                h, c = cell(np.ascontiguousarray(x[::-1] if backward[d] else x), h0[d], c0[d])
                hs.append(h)
                cs.append(c)
            for k, name in outputs:
                if k == 0:      # Y: every step's h, in the input's time order
                    parts = [r(h[::-1] if back else h) for r, h, back in
                             zip(rescales[name], hs, backward, strict=True)]
                    value = np.stack(parts, axis=1)
                else:           # Y_h, Y_c: the state after the last step each direction ran
                    value = np.stack([r(v[-1]) for r, v in
                                      zip(rescales[name], hs if k == 1 else cs, strict=True)])
                codes[name] = value.reshape(graph.tensors[name].shape)
        return lstm_step

    def _split(self, node: Node) -> Step:
        x, outs = node.inputs[0], node.outputs
        axis, points = split_points(self.graph, node)

        def split_step(codes: Codes) -> None:
            parts = np.split(codes[x], points, axis=axis)
            codes.update((name, np.ascontiguousarray(part))
                         for name, part in zip(outs, parts, strict=True))
        return split_step


def prepare(qmodel: QuantModel) -> dict[int, list[Step]]:
    """The steps of every BPU segment (by segment index), built once per model and kept in
    it; a node the kernels cannot execute raises QuantisationError here."""
    if not qmodel.programs:
        builder = _Builder(qmodel)
        nodes = {n.name: n for n in qmodel.graph.nodes}
        qmodel.programs.update(
            {k: [builder.step(nodes[name]) for name in segment.nodes]
             for k, segment in enumerate(qmodel.segments) if segment.kind == "bpu"})
    return qmodel.programs


NodeFunction = Callable[[Node, list[Any]], list[np.ndarray]]


class Execution:
    """One inference, segment by segment (the runtime runs each segment when its simulated
    time has come, and lets plugin layers or a DSP compute some nodes: `run_segment`'s
    `node_fn`, `set_float`). `run` is all segments in order."""

    def __init__(self, qmodel: QuantModel, feeds: dict[str, np.ndarray]) -> None:
        self.qmodel = qmodel
        self.graph = qmodel.graph
        self.floats = {**reference.constant_outputs(self.graph),
                       **reference.check_feeds(self.graph, feeds)}
        self.codes: Codes = {}
        self.program = prepare(qmodel)
        self._nodes = {n.name: n for n in self.graph.nodes}
        self._wide = qmodel.wide_outputs()

    def as_float(self, name: str) -> np.ndarray:
        if name not in self.floats:
            qt = self.qmodel.tensors.get(name)
            # No codes for an integer output of the BPU (ArgMax's indices): it is as it is.
            value = self.codes[name]
            if name in self._wide:
                _, scales, axis = output_quantization(self.qmodel, name)
                shape = [1] * value.ndim
                shape[axis or 0] = -1
                self.floats[name] = (value.astype(np.float64) * scales.reshape(shape)
                                     ).astype(np.float32)
            else:
                self.floats[name] = value if qt is None else from_codes(value, qt.scale)
        return self.floats[name]

    def as_codes(self, name: str) -> np.ndarray:
        if name not in self.codes:
            qt = self.qmodel.tensors.get(name)
            # No codes for a raw input (a Preprocess node's uint8 image): it goes as it is.
            value = self.floats[name]
            self.codes[name] = value if qt is None else to_codes(value, qt.scale, qt.dtype)
        return self.codes[name]

    def set_float(self, name: str, value: np.ndarray) -> None:
        """A tensor computed elsewhere (a DSP operator): it replaces the float value and
        any codes derived from it."""
        self.floats[name] = value
        self.codes.pop(name, None)

    def node(self, name: str) -> Node:
        return self._nodes[name]

    def node_inputs(self, node: Node) -> list[Any]:
        """A CPU/DSP node's inputs in float32 (constants as the graph holds them)."""
        for n in node.inputs:
            if n and not self.graph.is_const(n):
                self.as_float(n)
        return reference.node_inputs(self.graph, node, self.floats)

    def run_segment(self, k: int, node_fn: NodeFunction | None = None) -> None:
        """Compute segment `k`; `node_fn(node, inputs)` computes a CPU/DSP node instead of
        the built-in float op when given."""
        segment = self.qmodel.segments[k]
        if segment.kind in ("quantize", "bpu"):
            for name in segment.inputs:
                self.as_codes(name)
        if segment.kind == "dequantize":
            for name in segment.outputs:
                self.as_float(name)
        elif segment.kind == "bpu":
            for step in self.program[k]:
                step(self.codes)
        elif segment.kind in ("cpu", "dsp"):
            for name in segment.nodes:
                node = self._nodes[name]
                ins = self.node_inputs(node)
                outs = (reference.float_node(self.graph, node, ins) if node_fn is None
                        else node_fn(node, ins))
                self.floats.update(zip(node.outputs, outs, strict=True))

    def outputs(self) -> dict[str, np.ndarray]:
        return {name: self.as_float(name) for name in self.graph.outputs}

    def output_codes(self, name: str) -> np.ndarray:
        """A BPU output as the BPU leaves it when the model keeps its outputs quantised
        (`output_quantization` says how to read it): a wide output's int32 accumulators
        (bias included), any other output its codes."""
        return self.codes[name] if name in self._wide else self.as_codes(name)


def output_quantization(qmodel: QuantModel, name: str) -> tuple[str, np.ndarray, int | None]:
    """(code type, scales, axis) of a BPU output: value = code x scale, per channel for a
    wide output's int32 accumulators (input scale x each output channel's weight scale;
    `QuantModel.wide_outputs`) along `QuantModel.wide_axis` (1 of NCHW, or where layout
    ops moved the channels), one scale for the tensor (axis None) otherwise."""
    node = qmodel.wide_outputs().get(name)
    if node is None:
        qt = qmodel.tensors[name]
        return qt.dtype, np.array([qt.scale]), None
    in_scale = qmodel.tensors[node.inputs[0]].scale
    return ("int32", in_scale * np.asarray(qmodel.layers[node.name].w_scales, np.float64),
            qmodel.wide_axis(name))


def run(qmodel: QuantModel, feeds: dict[str, np.ndarray], *,
        integer: bool = False) -> dict[str, np.ndarray]:
    """The model's outputs in float32 (dequantised), executing BPU segments on codes. With
    `integer`, the dict also holds the codes of every BPU segment's inputs and outputs,
    under CODES_PREFIX + tensor name."""
    ex = Execution(qmodel, feeds)
    exposed: dict[str, np.ndarray] = {}
    for k, segment in enumerate(qmodel.segments):
        ex.run_segment(k)
        if integer and segment.kind == "bpu":
            exposed.update((CODES_PREFIX + n, ex.codes[n])
                           for n in (*segment.inputs, *segment.outputs))
    return {**ex.outputs(), **exposed}


# ---------------------------------------------------------------------------------------
# Comparison


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """a . b / (|a| |b|) in float64; 1 when both are zero, 0 when one is."""
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    with blas.one_thread():  # dot products: the same bits on any number of threads
        norm = float(np.linalg.norm(x) * np.linalg.norm(y))
        dot = float(x @ y)
    if norm == 0.0:
        return 1.0 if not (x.any() or y.any()) else 0.0
    return dot / norm

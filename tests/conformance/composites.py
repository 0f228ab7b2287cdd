"""Small composite ONNX graphs of the structures users' networks are built from.

Each builder writes one structure node by node with `onnx.helper`, as PyTorch's exporter
writes it from a model in eval mode (BatchNormalization folded into the convolutions'
biases), and returns an `onnx.ModelProto`: float32, static shapes, weights drawn from a
NumPy generator seeded by `seed` and the builder's name (so a name and a seed give the same
bytes), He-normal for convolutions and linear layers so activations keep unit scale. All
are a few thousand weights on maps of at most 16x16 or 16 tokens: onnxruntime runs each in
well under a millisecond. `CASES` maps each name to its builder.

- `se_block`: an SE-ResNet basic block: 3x3 conv, ReLU, 3x3 conv, squeeze-excitation
  (GlobalAveragePool, 1x1 conv down by 4, ReLU, 1x1 conv up, Sigmoid, Mul of the [1, C, 1,
  1] gate with the map), residual Add, ReLU.
- `mobilenetv3_block`: MobileNetV3's bneck: 1x1 expansion, 5x5 depthwise, squeeze-
  excitation with a HardSigmoid gate (PyTorch's alpha 1/6, beta 0.5), h-swish written as
  x * HardSigmoid(x) (what torch.onnx writes below opset 14), linear 1x1 projection,
  residual Add; opset 13. `mobilenetv3_block_hardswish` is the same block at opset 14,
  where h-swish is the HardSwish op.
- `yolov5_neck`: a YOLOv5 PAN step: 1x1 Conv-SiLU (SiLU as x * Sigmoid(x)) on the deeper
  map, nearest 2x Resize, Concat with the shallower map, C3 (two 1x1 branches, a
  bottleneck without shortcut, Concat, 1x1).
- `fpn_topdown`: an FPN's top-down path over three levels: 1x1 laterals, bilinear 2x
  Resize (half_pixel: PyTorch's align_corners=False) of the coarser level added to the
  finer one, 3x3 output convs; three outputs. `fpn_topdown_align_corners` is the same
  with align_corners=True.
- `attention_block`: a pre-norm transformer encoder block on [1, N, D] tokens, opset 17:
  LayerNormalization, Q, K and V as nn.Linear exports it on a 3-D input (MatMul by a
  constant [D, D] weight, Add of the bias), Q x K^T as a MatMul of two activations with a
  Transpose, scale Mul by 1/sqrt(d), Softmax over the last axis, MatMul with V, output
  projection, residual Add; then LayerNormalization, MLP with GELU written with Erf
  (0.5 x (1 + erf(x / sqrt 2)), as torch.onnx writes it before opset 20), residual Add.
  One head; `attention_block_multihead` splits D into 2 heads with Reshape and
  Transpose (scores [1, heads, N, N]) and merges them back.
- `lstm_sequence`: a two-layer sequence model as torch.onnx exports nn.LSTM, opset 14, on
  [T, 1, I] = [12, 1, 16]: an LSTM of hidden size 24 with stored zero initial states (the
  exporter's), its Y squeezed to [T, 1, 24]; a bidirectional LSTM of 16, its Y [T, 2, 1,
  16] merged to [T, 1, 32] (Transpose, Reshape) and classified per step by nn.Linear; the
  second layer's Y_h is an output too. PyTorch's initialisation: uniform in +-1 / sqrt(H).
- `grid_sample_warp`: a flow warp, opset 16: a 3x3 conv's features on a 16x16 map, a
  flow head (3x3 conv to 2 channels, Tanh, Transpose to [1, 16, 16, 2]) scaled to offsets
  of at most 2 pixels and added to the identity grid (align_corners 0), GridSample
  (bilinear, zeros) of the features at those positions, a 1x1 conv.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8  # what onnxruntime 1.17 and later read


class _Graph:
    """A composite being written: nodes, seeded initializers and each tensor's channels
    (axis 1, what the next layer's weights are sized by)."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[str] = []
        self.channels: dict[str, int] = {}

    def input(self, name: str, shape: Sequence[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.channels[name] = shape[1]
        return name

    def node(self, op: str, inputs: Sequence[str], name: str, **attrs: object) -> str:
        """One node whose single output is named `name`, as its node is; its channels
        are the first input's unless the caller records others."""
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        if inputs and inputs[0] in self.channels:
            self.channels[name] = self.channels[inputs[0]]
        return name

    def constant(self, name: str, values: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(values, name))
        return name

    def normal(self, name: str, shape: tuple[int, ...], std: float) -> str:
        values = self.rng.standard_normal(shape) * std
        return self.constant(name, values.astype(np.float32))

    def model(self, opset: int) -> onnx.ModelProto:
        """The model, its outputs typed by ONNX shape inference."""
        outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                   for o in self.outputs]
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outputs,
                                  initializer=self.initializers)
        model = helper.make_model(graph, producer_name="emu composites",
                                  opset_imports=[helper.make_opsetid("", opset)],
                                  ir_version=IR_VERSION)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        return model

    # layers

    def conv(self, x: str, cout: int, k: int, name: str, groups: int = 1,
             act: str | None = None) -> str:
        """k x k convolution, stride 1, "same" padding, with a bias (a folded
        BatchNormalization's), then `act`."""
        cin = self.channels[x]
        fan_in = cin // groups * k * k
        w = self.normal(f"{name}.weight", (cout, cin // groups, k, k), math.sqrt(2 / fan_in))
        b = self.normal(f"{name}.bias", (cout,), 0.05)
        y = self.node("Conv", [x, w, b], name, kernel_shape=[k, k], pads=[k // 2] * 4,
                      group=groups)
        self.channels[y] = cout
        return self.act(y, act, f"{name}.act")

    def act(self, x: str, kind: str | None, name: str) -> str:
        if kind is None:
            return x
        if kind in ("Relu", "Sigmoid", "HardSwish"):
            return self.node(kind, [x], name)
        if kind == "HardSigmoid":  # PyTorch's relu6(x + 3) / 6
            return self.node("HardSigmoid", [x], name, alpha=1 / 6, beta=0.5)
        if kind == "hswish":  # x * HardSigmoid(x): h-swish below opset 14
            return self.node("Mul", [x, self.act(x, "HardSigmoid", f"{name}.gate")], name)
        if kind == "silu":  # x * Sigmoid(x): SiLU below opset 22
            return self.node("Mul", [x, self.act(x, "Sigmoid", f"{name}.gate")], name)
        raise ValueError(f"unknown activation {kind!r}")

    def squeeze_excite(self, x: str, hidden: int, gate: str, name: str) -> str:
        pooled = self.node("GlobalAveragePool", [x], f"{name}.pool")
        y = self.conv(pooled, hidden, 1, f"{name}.fc1", act="Relu")
        y = self.conv(y, self.channels[x], 1, f"{name}.fc2", act=gate)
        return self.node("Mul", [x, y], f"{name}.scale")

    def resize2x(self, x: str, name: str, mode: str, transform: str) -> str:
        scales = self.constant(f"{name}.scales", np.array([1, 1, 2, 2], np.float32))
        attrs = {"nearest_mode": "floor"} if mode == "nearest" else {}
        return self.node("Resize", [x, "", scales], name, mode=mode,
                         coordinate_transformation_mode=transform, **attrs)

    def linear(self, x: str, d_in: int, d_out: int, name: str) -> str:
        """nn.Linear on [1, N, d_in] tokens as torch.onnx writes it: MatMul by the
        transposed weight, a constant [d_in, d_out], and Add of the bias."""
        w = self.normal(f"{name}.weight", (d_in, d_out), math.sqrt(2 / d_in))
        b = self.normal(f"{name}.bias", (d_out,), 0.02)
        return self.node("Add", [self.node("MatMul", [x, w], f"{name}.matmul"), b], name)

    def layer_norm(self, x: str, d: int, name: str) -> str:
        gamma = self.constant(f"{name}.weight",
                              self.rng.uniform(0.9, 1.1, d).astype(np.float32))
        beta = self.normal(f"{name}.bias", (d,), 0.02)
        return self.node("LayerNormalization", [x, gamma, beta], name, axis=-1,
                         epsilon=1e-5)


def se_block(seed: int = 0) -> onnx.ModelProto:
    g = _Graph("se_block", seed)
    x = g.input("input", [1, 32, 8, 8])
    y = g.conv(x, 32, 3, "conv1", act="Relu")
    y = g.squeeze_excite(g.conv(y, 32, 3, "conv2"), 8, "Sigmoid", "se")
    g.outputs.append(g.node("Relu", [g.node("Add", [x, y], "add")], "output"))
    return g.model(13)


def _mobilenetv3_block(name: str, seed: int, hswish: str, opset: int) -> onnx.ModelProto:
    g = _Graph(name, seed)
    x = g.input("input", [1, 16, 8, 8])
    y = g.conv(x, 64, 1, "expand", act=hswish)
    y = g.conv(y, 64, 5, "dw", groups=64, act=hswish)
    y = g.squeeze_excite(y, 16, "HardSigmoid", "se")
    y = g.conv(y, 16, 1, "project")
    g.outputs.append(g.node("Add", [x, y], "output"))
    return g.model(opset)


def mobilenetv3_block(seed: int = 0) -> onnx.ModelProto:
    return _mobilenetv3_block("mobilenetv3_block", seed, "hswish", 13)


def mobilenetv3_block_hardswish(seed: int = 0) -> onnx.ModelProto:
    return _mobilenetv3_block("mobilenetv3_block_hardswish", seed, "HardSwish", 14)


def yolov5_neck(seed: int = 0) -> onnx.ModelProto:
    g = _Graph("yolov5_neck", seed)
    p4 = g.input("p4", [1, 32, 8, 8])
    p5 = g.input("p5", [1, 64, 4, 4])
    up = g.resize2x(g.conv(p5, 32, 1, "lateral", act="silu"), "upsample", "nearest",
                    "asymmetric")
    x = g.node("Concat", [up, p4], "concat", axis=1)
    g.channels[x] = 64
    # C3 with one bottleneck (no shortcut in the neck).
    a = g.conv(x, 16, 1, "c3.cv1", act="silu")
    a = g.conv(g.conv(a, 16, 1, "c3.m.0.cv1", act="silu"), 16, 3, "c3.m.0.cv2", act="silu")
    b = g.conv(x, 16, 1, "c3.cv2", act="silu")
    y = g.node("Concat", [a, b], "c3.concat", axis=1)
    g.channels[y] = 32
    g.outputs.append(g.conv(y, 32, 1, "c3.cv3", act="silu"))
    return g.model(13)


def _fpn_topdown(name: str, seed: int, transform: str) -> onnx.ModelProto:
    g = _Graph(name, seed)
    levels = [g.input("c3", [1, 16, 16, 16]), g.input("c4", [1, 32, 8, 8]),
              g.input("c5", [1, 64, 4, 4])]
    top = None
    merged = []
    for level, c in reversed(list(enumerate(levels, start=3))):
        lateral = g.conv(c, 24, 1, f"lateral{level}")
        if top is not None:
            up = g.resize2x(top, f"up{level}", "linear", transform)
            lateral = g.node("Add", [lateral, up], f"merge{level}")
        merged.append(lateral)
        top = lateral
    for level, m in zip((3, 4, 5), reversed(merged), strict=True):
        g.outputs.append(g.conv(m, 24, 3, f"p{level}"))
    return g.model(13)


def fpn_topdown(seed: int = 0) -> onnx.ModelProto:
    return _fpn_topdown("fpn_topdown", seed, "half_pixel")


def fpn_topdown_align_corners(seed: int = 0) -> onnx.ModelProto:
    return _fpn_topdown("fpn_topdown_align_corners", seed, "align_corners")


_TOKENS = 16
_WIDTH = 32
_MLP_RATIO = 4


def _attention_block(name: str, seed: int, heads: int) -> onnx.ModelProto:
    g = _Graph(name, seed)
    n, d = _TOKENS, _WIDTH
    head = d // heads
    x = g.input("tokens", [1, n, d])
    h = g.layer_norm(x, d, "norm1")
    q, k, v = (g.linear(h, d, d, f"attn.{p}") for p in "qkv")
    if heads == 1:
        k_t = g.node("Transpose", [k], "attn.k_t", perm=[0, 2, 1])
    else:  # [1, N, D] -> [1, heads, N, D / heads]; K straight to [1, heads, D / heads, N]
        split = g.constant("attn.split_heads", np.array([1, n, heads, head], np.int64))
        q, k, v = (g.node("Reshape", [t, split], f"{t}.heads") for t in (q, k, v))
        q, v = (g.node("Transpose", [t], f"{t}.t", perm=[0, 2, 1, 3]) for t in (q, v))
        k_t = g.node("Transpose", [k], "attn.k_t", perm=[0, 2, 3, 1])
    scores = g.node("MatMul", [q, k_t], "attn.scores")
    scale = g.constant("attn.scale", np.array(1 / math.sqrt(head), np.float32))
    weights = g.node("Softmax", [g.node("Mul", [scores, scale], "attn.scaled")],
                     "attn.softmax", axis=-1)
    context = g.node("MatMul", [weights, v], "attn.context")
    if heads > 1:
        merge = g.constant("attn.merge_heads", np.array([1, n, d], np.int64))
        context = g.node("Reshape", [g.node("Transpose", [context], "attn.context.t",
                                            perm=[0, 2, 1, 3]), merge], "attn.merged")
    x = g.node("Add", [x, g.linear(context, d, d, "attn.proj")], "residual1")
    h = g.linear(g.layer_norm(x, d, "norm2"), d, _MLP_RATIO * d, "mlp.fc1")
    root2 = g.constant("gelu.sqrt2", np.array(math.sqrt(2), np.float32))
    one = g.constant("gelu.one", np.array(1, np.float32))
    half = g.constant("gelu.half", np.array(0.5, np.float32))
    erf = g.node("Erf", [g.node("Div", [h, root2], "mlp.gelu.div")], "mlp.gelu.erf")
    gelu = g.node("Mul", [g.node("Mul", [h, g.node("Add", [erf, one], "mlp.gelu.add")],
                                 "mlp.gelu.mul"), half], "mlp.gelu")
    g.outputs.append(g.node("Add", [x, g.linear(gelu, _MLP_RATIO * d, d, "mlp.fc2")],
                            "output"))
    return g.model(17)


def attention_block(seed: int = 0) -> onnx.ModelProto:
    return _attention_block("attention_block", seed, heads=1)


def attention_block_multihead(seed: int = 0) -> onnx.ModelProto:
    return _attention_block("attention_block_multihead", seed, heads=2)


def _lstm_layer(g: _Graph, x: str, d_in: int, hidden: int, name: str,
                direction: str = "forward") -> tuple[str, str]:
    """nn.LSTM's layer as torch.onnx writes it: W, R and B in ONNX's gate order, stored
    zero initial states; (Y, Y_h)."""
    directions = 2 if direction == "bidirectional" else 1
    bound = 1 / math.sqrt(hidden)

    def uniform(part: str, shape: tuple[int, ...]) -> str:
        return g.constant(f"{name}.{part}",
                          g.rng.uniform(-bound, bound, shape).astype(np.float32))
    w = uniform("W", (directions, 4 * hidden, d_in))
    r = uniform("R", (directions, 4 * hidden, hidden))
    b = uniform("B", (directions, 8 * hidden))
    zeros = np.zeros((directions, 1, hidden), np.float32)
    h0, c0 = g.constant(f"{name}.h0", zeros), g.constant(f"{name}.c0", zeros)
    y, y_h = f"{name}.Y", f"{name}.Y_h"
    g.nodes.append(helper.make_node("LSTM", [x, w, r, b, "", h0, c0], [y, y_h], name=name,
                                    hidden_size=hidden, direction=direction))
    return y, y_h


def lstm_sequence(seed: int = 0) -> onnx.ModelProto:
    g = _Graph("lstm_sequence", seed)
    steps, d_in, hidden1, hidden2, classes = 12, 16, 24, 16, 8
    x = g.input("sequence", [steps, 1, d_in])
    y, _ = _lstm_layer(g, x, d_in, hidden1, "lstm1")
    axis = g.constant("lstm1.squeeze_axes", np.array([1], np.int64))
    y = g.node("Squeeze", [y, axis], "lstm1.squeeze")
    y, y_h = _lstm_layer(g, y, hidden1, hidden2, "lstm2", "bidirectional")
    merged = g.constant("lstm2.merged", np.array([steps, 1, 2 * hidden2], np.int64))
    y = g.node("Reshape", [g.node("Transpose", [y], "lstm2.t", perm=[0, 2, 1, 3]), merged],
               "lstm2.merge")
    g.outputs += [g.linear(y, 2 * hidden2, classes, "classifier"), y_h]
    return g.model(14)


def grid_sample_warp(seed: int = 0) -> onnx.ModelProto:
    g = _Graph("grid_sample_warp", seed)
    size = 16
    x = g.input("input", [1, 8, size, size])
    features = g.conv(x, 16, 3, "features", act="Relu")
    flow = g.node("Tanh", [g.conv(features, 2, 3, "flow")], "flow.tanh")
    flow = g.node("Transpose", [flow], "flow.nhwc", perm=[0, 2, 3, 1])
    reach = g.constant("flow.reach", np.array(2 * 2 / size, np.float32))  # 2 pixels
    centres = (2 * np.arange(size) + 1) / size - 1         # align_corners 0: pixel centres
    identity = np.stack(np.meshgrid(centres, centres), axis=-1)[None].astype(np.float32)
    grid = g.node("Add", [g.node("Mul", [flow, reach], "flow.scaled"),
                          g.constant("flow.identity", identity)], "grid")
    warped = g.node("GridSample", [features, grid], "warp", mode="bilinear",
                    padding_mode="zeros", align_corners=0)
    g.channels[warped] = 16
    g.outputs.append(g.conv(warped, 8, 1, "head"))
    return g.model(16)


CASES: dict[str, Callable[..., onnx.ModelProto]] = {
    fn.__name__: fn for fn in (se_block, mobilenetv3_block, mobilenetv3_block_hardswish,
                               yolov5_neck, fpn_topdown, fpn_topdown_align_corners,
                               attention_block, attention_block_multihead, lstm_sequence,
                               grid_sample_warp)}

"""The operator table: where each ONNX operator runs on J5, how the BPU computes it, and
under which constraints. Placement (`placement.decide`), quantisation (which tensors keep
their input's codes), execution (which integer step a node gets), the cost model (each
BPU op's layer-group class) and `emu ops` all read this one table.

The rows restate the J5 (RDK Ultra, "bayes" march) ONNX operator list: an operator is
- "bpu": the BPU runs it, quantised (int8, int16 where `int16` says so), while the node
  meets the row's constraints (`check`); a node that does not runs on the CPU and its
  segment's reasons name the failed constraint;
- "cpu": the CPU runs it in float as ONNX defines it (operators the list places on the
  CPU, and those the list puts on the BPU only on request, `run_on_bpu`: Softmax, Min and
  the comparisons);
- "fold": only constant folding supports it (Constant, Shape, ...): a node that is still
  there after folding, that is one whose input is not constant, is refused;
- "unsupported": the list names it as a CPU operator the toolchain has not integrated;
  a model with one is refused, naming it.
Operators the list does not name are refused too, except the few rows marked `extension`:
operators newer exporters write for structures the list supports (HardSwish, Gelu and
LayerNormalization, which opset-11 exporters write as a chain of listed operators), and
emu's own fused ops (FC, Silu, ScaleShift, Preprocess).

`kind` says how the BPU computes a node, which fixes its quantisation and its cost class
(`COST_CLASS`; `emu/bpu/timing.py` explains each class's cost):
- "conv": a weighted layer (Conv, FC, ConvTranspose): int8 per-channel weights, int32
  bias, its own output scale; "matmul": MatMul, with constant or feature-map B;
- "affine": a per-channel a x + b (ScaleShift: a BatchNormalization with no conv before it);
- "lut": an elementwise function through a table from input codes to output codes;
- "clamp": Relu and Clip: the codes clamped, scale kept;
- "binary": Add, Sub, Mul, Div, Max, Sum: its own output scale;
- "pool", "reduce": windows and reductions; "index": ArgMax/ArgMin (int64 indices out);
- "resize": Resize and Upsample, scale kept;
- "sample": GridSample, X's codes interpolated (or picked) at the positions a grid of
  codes gives, scale kept; its cost is a gather of the 4 neighbours (or 1) per output
  element, timed as data movement;
- "recurrent": LSTM, the cell unrolled over the time steps into gate matmuls, LUT
  activations and elementwise state updates, each step waiting for the one before;
- "move": data movement that keeps every code as it is (the op applied to the codes
  gives the output codes); Concat rescales its inputs to one output scale;
- "alias": a view of the same memory (Reshape and friends, Split's parts);
- "preprocess": an image input's colour conversion and normalisation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from emu.nn.graph import Graph, Node

Check = Callable[[Graph, Node], "str | None"]

WHERE = ("bpu", "cpu", "fold", "unsupported")
KINDS = ("conv", "matmul", "affine", "lut", "clamp", "binary", "pool", "reduce", "index",
         "resize", "sample", "recurrent", "move", "alias", "preprocess", "")
# The BPU cost model's class of each kind (emu/bpu/timing.py OP_CLASSES); "" costs nothing.
COST_CLASS = {"conv": "dense", "matmul": "dense", "affine": "elementwise",
              "lut": "elementwise", "clamp": "elementwise", "binary": "elementwise",
              "pool": "pool", "reduce": "pool", "index": "pool", "resize": "resize",
              "sample": "move", "recurrent": "dense", "move": "move", "alias": "",
              "preprocess": "elementwise"}

# General limits of a BPU tensor (the list's notes): the highest dimension and the others.
HIGHEST_DIM_MAX = 4096
OTHER_DIM_MAX = 65536
RANK_MAX = 10
CONV_KERNEL_MAX = 31
CONV_CHANNELS_MAX = 8192
CONV_KERNEL_VOLUME_MAX = 65535
CONV_STRIDE_MAX = 256
CONV_DILATION_MAX = 16
DECONV_CHANNELS_MAX = 2048
DECONV_KERNEL_MAX = 14
DECONV_STRIDE_MAX = 14
POOL_MAX = 256
GLOBAL_MAX_POOL_SIDE_MAX = 256
MATMUL_DIM_MAX = 8192
MATMUL_BATCH_DIM_MAX = 4096
ARG_CHANNELS_MAX = 64
REDUCE_AXIS_MAX = 8192
GRID_SIDE_MAX = 1024
GRID_AREA_MAX = 720 * 1024
GRID_MODES = ("bilinear", "linear", "nearest")  # "linear" is opset 20's name of bilinear
GRID_PADDINGS = ("zeros", "border")
LSTM_ACTIVATIONS = ("sigmoid", "tanh", "tanh")  # ONNX's defaults: f, g, h
# The coordinate modes of a linear Resize the BPU's fixed-point resize computes.
LINEAR_RESIZE_MODES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners",
                       "tf_half_pixel_for_nn")


@dataclass(frozen=True)
class OpRule:
    """One operator of the table."""

    op: str
    where: str
    kind: str = ""
    constraints: str = ""  # what `emu ops` prints: the BPU constraints, or why not BPU
    int16: bool = False
    check: Check | None = None
    extension: bool = False  # not in J5's list: emu's decision, said in `constraints`

    def __post_init__(self) -> None:
        if self.where not in WHERE or self.kind not in KINDS:
            raise ValueError(f"operator table row {self.op}: {self.where!r}, {self.kind!r}")


# --- shapes and attributes ---------------------------------------------------------------------

def _shape(graph: Graph, name: str) -> tuple[int, ...]:
    return graph.tensors[name].shape


def _pair(value: object, default: int) -> tuple[int, ...]:
    if value is None:
        return (default, default)
    return tuple(int(v) for v in value)  # type: ignore[attr-defined]


def _const_value(graph: Graph, node: Node, k: int) -> np.ndarray | None:
    if len(node.inputs) > k and node.inputs[k] and graph.is_const(node.inputs[k]):
        return np.asarray(graph.tensors[node.inputs[k]].value)
    return None


def _general(graph: Graph, node: Node) -> str | None:
    """The list's general tensor limits, on every feature map the node reads or writes."""
    for name in (*node.inputs, *node.outputs):
        if not name or graph.is_const(name):
            continue
        shape = _shape(graph, name)
        if 0 in shape:
            return f"{name} is empty {shape}"
        if len(shape) > RANK_MAX:
            return f"{name} has {len(shape)} dimensions (at most {RANK_MAX})"
        if shape and shape[0] > HIGHEST_DIM_MAX:
            return f"{name}'s first dimension {shape[0]} exceeds {HIGHEST_DIM_MAX}"
        if any(d > OTHER_DIM_MAX for d in shape[1:]):
            return f"{name} {shape} has a dimension over {OTHER_DIM_MAX}"
    return None


def _ranks(low: int, high: int) -> Check:
    def check(graph: Graph, node: Node) -> str | None:
        for name in (n for n in node.inputs if n and not graph.is_const(n)):
            rank = len(_shape(graph, name))
            if not low <= rank <= high:
                return f"a {rank}-D input (the BPU takes {low}-D to {high}-D here)"
        return None
    return check


def _all(*checks: Check) -> Check:
    def check(graph: Graph, node: Node) -> str | None:
        for one in checks:
            problem = one(graph, node)
            if problem is not None:
                return problem
        return None
    return check


def _conv(graph: Graph, node: Node) -> str | None:
    w = _shape(graph, node.inputs[1])
    if node.op == "FC":
        w = (*w, 1, 1)  # a 1x1 convolution
    if len(w) != 4:
        return f"{len(w) - 2}-D convolution (the BPU runs conv2d)"
    cout, cin, kh, kw = w
    if max(kh, kw) > CONV_KERNEL_MAX:
        return f"kernel {kh}x{kw} exceeds {CONV_KERNEL_MAX}x{CONV_KERNEL_MAX}"
    if cin * kh * kw > CONV_KERNEL_VOLUME_MAX:
        return f"kernel C*H*W = {cin * kh * kw} exceeds {CONV_KERNEL_VOLUME_MAX}"
    if max(cin, cout) > CONV_CHANNELS_MAX:
        return f"channels {cin}->{cout} exceed {CONV_CHANNELS_MAX}"
    strides = _pair(node.attrs.get("strides"), 1)
    dilations = _pair(node.attrs.get("dilations"), 1)
    if max(strides) > CONV_STRIDE_MAX:
        return f"stride {strides} exceeds {CONV_STRIDE_MAX}"
    if node.residual and max(strides) > 2:
        return f"stride {strides} with a fused residual add (allowed: 1, 2)"
    if max(dilations) > CONV_DILATION_MAX:
        return f"dilation {dilations} exceeds {CONV_DILATION_MAX}"
    if max(dilations) > 1 and max(strides) > 1:
        return f"dilation {dilations} with stride {strides} (dilated convs need stride 1)"
    return None


def _deconv(graph: Graph, node: Node) -> str | None:
    w = _shape(graph, node.inputs[1])
    if len(w) != 4:
        return "ConvTranspose is not 2-D"
    cin, cout, kh, kw = w
    if int(node.attrs.get("group", 1)) != 1:
        return "grouped ConvTranspose"
    if max(cin, cout) > DECONV_CHANNELS_MAX:
        return f"channels {cin}->{cout} exceed {DECONV_CHANNELS_MAX}"
    if max(kh, kw) > DECONV_KERNEL_MAX or (kh, kw) == (1, 1):
        return f"kernel {kh}x{kw} (allowed: up to {DECONV_KERNEL_MAX}, not 1x1)"
    strides = _pair(node.attrs.get("strides"), 1)
    if max(strides) > DECONV_STRIDE_MAX or all(s == 1 for s in strides):
        return f"stride {strides} (allowed: up to {DECONV_STRIDE_MAX}, not both 1)"
    if max(_pair(node.attrs.get("dilations"), 1)) > 1:
        return "dilated ConvTranspose"
    if "output_shape" in node.attrs:
        return "output_shape (emu's BPU ConvTranspose takes explicit pads)"
    if str(node.attrs.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        return "ConvTranspose with auto_pad SAME"
    pads = _pair(node.attrs.get("pads"), 0)
    for pad, k, s in zip(pads, (kh, kw, kh, kw), strides * 2, strict=False):
        limit = k // s if s % 2 == 0 else math.ceil(k / s) - 1
        if pad > limit or pad > k - 1:
            return f"pads {pads} too large for kernel {kh}x{kw} stride {strides}"
    if max(_pair(node.attrs.get("output_padding"), 0)) > 1:
        return "output_padding above 1"
    return None


def _pool(graph: Graph, node: Node) -> str | None:
    if len(_shape(graph, node.inputs[0])) != 4:
        return f"{len(_shape(graph, node.inputs[0])) - 2}-D pooling (the BPU pools 2-D)"
    for key in ("kernel_shape", "strides", "pads"):
        values = _pair(node.attrs.get(key), 1)
        if max(values) > POOL_MAX:
            return f"{key} {values} exceeds {POOL_MAX}"
    if node.op == "MaxPool":
        if max(_pair(node.attrs.get("dilations"), 1)) > 1:
            return "dilated MaxPool"
        if len(node.outputs) > 1:
            return "MaxPool's Indices output"
    if node.op == "AveragePool" and max(_pair(node.attrs.get("dilations"), 1)) > 1:
        return "dilated AveragePool"
    if node.op == "AveragePool" and node.attrs.get("ceil_mode", 0) \
            and node.attrs.get("count_include_pad", 0):
        return "ceil_mode with count_include_pad"
    return None


def _global_max_pool(graph: Graph, node: Node) -> str | None:
    shape = _shape(graph, node.inputs[0])
    if len(shape) != 4:
        return f"a {len(shape)}-D input (GlobalMaxPool takes NCHW)"
    if max(shape[2:]) > GLOBAL_MAX_POOL_SIDE_MAX:
        return f"H, W {shape[2:]} exceed {GLOBAL_MAX_POOL_SIDE_MAX}"
    return None


def _one_const_at_most(graph: Graph, node: Node) -> str | None:
    consts = sum(graph.is_const(n) for n in node.inputs if n)
    return f"{consts} constant inputs (at most 1)" if consts > 1 else None


def _no_batch_broadcast(graph: Graph, node: Node) -> str | None:
    out = _shape(graph, node.outputs[0])
    for name in (n for n in node.inputs if n and not graph.is_const(n)):
        shape = _shape(graph, name)
        if len(shape) == len(out) and len(out) >= 2 and shape[0] != out[0]:
            return "broadcast along the first dimension"
    return None


def _feature_maps_only(graph: Graph, node: Node) -> str | None:
    consts = [n for n in node.inputs if n and graph.is_const(n)]
    return f"a constant input {consts[0]!r} (the BPU divides feature maps)" if consts else None


def _one_side_broadcast(graph: Graph, node: Node) -> str | None:
    out = _shape(graph, node.outputs[0])
    broadcast = [n for n in node.inputs if n and _shape(graph, n) != out]
    return "both inputs broadcast" if len(broadcast) > 1 else None


def reduce_axes(graph: Graph, node: Node) -> tuple[int, ...] | None:
    rank = len(_shape(graph, node.inputs[0]))
    given = node.attrs.get("axes")
    if given is None:
        value = _const_value(graph, node, 1)
        given = None if value is None else tuple(int(v) for v in value.reshape(-1))
    if given is None or len(given) == 0:
        return None
    return tuple(sorted(int(a) % rank for a in given))


def _reduce(graph: Graph, node: Node) -> str | None:
    if int(node.attrs.get("keepdims", 1)) != 1:
        return "keepdims=0 (the BPU keeps the reduced axes)"
    axes = reduce_axes(graph, node)
    if axes is None:
        return "no axes (a reduction over every axis)"
    shape = _shape(graph, node.inputs[0])
    if len(axes) == 2 and node.op == "ReduceMean" and len(shape) == 4 and axes == (2, 3):
        return None
    if len(axes) != 1:
        return f"axes {axes} (the BPU reduces one axis)"
    if node.op == "ReduceMax" and shape[axes[0]] > REDUCE_AXIS_MAX:
        return f"reduced axis of {shape[axes[0]]} exceeds {REDUCE_AXIS_MAX}"
    return None


def _argmax(graph: Graph, node: Node) -> str | None:
    shape = _shape(graph, node.inputs[0])
    if len(shape) != 4:
        return f"a {len(shape)}-D input (the BPU takes NCHW)"
    if int(node.attrs.get("axis", 0)) % 4 != 1:
        return f"axis {node.attrs.get('axis', 0)} (the BPU reduces C, axis 1)"
    if shape[1] > ARG_CHANNELS_MAX:
        return f"C = {shape[1]} exceeds {ARG_CHANNELS_MAX}"
    return None


def _matmul(graph: Graph, node: Node) -> str | None:
    a, b = (_shape(graph, n) for n in node.inputs[:2])
    if len(a) < 2 or len(b) < 2:
        return f"a 1-D operand ({a} x {b})"
    if not graph.is_const(node.inputs[1]) and len(a) != len(b):
        return f"operands of different ranks ({a} x {b})"
    if max(a[-2:] + b[-2:]) > MATMUL_DIM_MAX:
        return f"a matrix dimension of {a} x {b} exceeds {MATMUL_DIM_MAX}"
    if max((*a[:-2], *b[:-2]), default=1) > MATMUL_BATCH_DIM_MAX:
        return f"a batch dimension of {a} x {b} exceeds {MATMUL_BATCH_DIM_MAX}"
    return None


def _resize(graph: Graph, node: Node) -> str | None:
    x, y = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    mode = str(node.attrs.get("mode", "nearest"))
    if len(x) != 4 or x[:2] != y[:2]:
        return f"resize of {x} -> {y} (the BPU resizes H and W of NCHW)"
    if mode == "linear":
        coords = str(node.attrs.get("coordinate_transformation_mode", "half_pixel"))
        if coords not in LINEAR_RESIZE_MODES:
            return f"coordinate mode {coords}"
        if int(node.attrs.get("antialias", 0)):
            return "antialias"
        if str(node.attrs.get("keep_aspect_ratio_policy", "stretch")) != "stretch":
            return "keep_aspect_ratio_policy"
        return None
    if mode != "nearest":
        return f"mode {mode} (the BPU resizes nearest or linear)"
    factors = []
    for i, o in zip(x[2:], y[2:], strict=True):
        if o % i or (o // i) & (o // i - 1):
            return f"nearest by {o}/{i} (the BPU repeats pixels by powers of two)"
        factors.append(o // i)
    if factors[0] > factors[1]:
        return f"nearest factors {factors[0]}x{factors[1]} (H factor above W factor)"
    return None


def _depth_space(graph: Graph, node: Node) -> str | None:
    if int(node.attrs.get("blocksize", 0)) != 2:
        return f"blocksize {node.attrs.get('blocksize')} (the BPU rearranges by 2)"
    shape = _shape(graph, node.inputs[0])
    if len(shape) != 4:
        return f"a {len(shape)}-D input"
    if node.op == "DepthToSpace" and _shape(graph, node.outputs[0])[1] % 4:
        return "an output channel count that is not a multiple of 4"
    return None


def _one_dim_changes(graph: Graph, node: Node) -> str | None:
    x, y = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    x = (1,) * (len(y) - len(x)) + x
    changed = sum(a != b for a, b in zip(x, y, strict=True))
    return f"{changed} dimensions change ({x} -> {y}; at most 1)" if changed > 1 else None


def _gather(graph: Graph, node: Node) -> str | None:
    ranks = [len(_shape(graph, n)) for n in (*node.inputs[:2], node.outputs[0])]
    if max(ranks) > 4:
        return f"ranks {ranks} (at most 4)"
    if not graph.is_const(node.inputs[1]):
        return "feature-map indices (emu's BPU Gather takes constant indices)"
    return None


def _const_indices(graph: Graph, node: Node) -> str | None:
    return None if graph.is_const(node.inputs[1]) else "feature-map indices"


def _pad(graph: Graph, node: Node) -> str | None:
    mode = str(node.attrs.get("mode", "constant"))
    if mode != "constant":
        return f"mode {mode} (the BPU pads with a constant)"
    if len(node.inputs) > 1 and node.inputs[1] and not graph.is_const(node.inputs[1]):
        return "pads that are not constant"
    if len(node.inputs) > 2 and node.inputs[2] and not graph.is_const(node.inputs[2]):
        return "a constant value that is not constant"
    if len(node.inputs) > 3 and node.inputs[3] and not graph.is_const(node.inputs[3]):
        return "axes that are not constant"
    return None


def _pow(graph: Graph, node: Node) -> str | None:
    exponent = _const_value(graph, node, 1)
    return None if exponent is not None and exponent.size == 1 else \
        "an exponent that is not a constant scalar"


def _topk(graph: Graph, node: Node) -> str | None:
    if not int(node.attrs.get("sorted", 1)):
        return "sorted=0"
    return None if _const_value(graph, node, 1) is not None else "k that is not constant"


def _slice(graph: Graph, node: Node) -> str | None:
    extra = [n for n in node.inputs[1:] if n and not graph.is_const(n)]
    return f"{extra[0]!r} is not constant" if extra else None


def _split(graph: Graph, node: Node) -> str | None:
    if len(node.inputs) > 1 and node.inputs[1] and not graph.is_const(node.inputs[1]):
        return "split sizes that are not constant"
    rank = len(_shape(graph, node.inputs[0]))
    if rank >= 3 and int(node.attrs.get("axis", 0)) % rank == 0:
        return "a split along N"
    return None


def _concat(graph: Graph, node: Node) -> str | None:
    rank = len(_shape(graph, node.outputs[0]))
    if rank >= 3 and int(node.attrs.get("axis", 0)) % rank == 0:
        return "a concat along N"
    return None


def _grid_sample(graph: Graph, node: Node) -> str | None:
    shape = _shape(graph, node.inputs[0])
    if len(shape) != 4:
        return f"a {len(shape)}-D input (the BPU samples NCHW)"
    if graph.is_const(node.inputs[0]):
        return "a stored X (the BPU samples a feature map)"
    if str(node.attrs.get("mode", "bilinear")) not in GRID_MODES:
        return f"mode {node.attrs.get('mode')} (the BPU samples bilinear or nearest)"
    if str(node.attrs.get("padding_mode", "zeros")) not in GRID_PADDINGS:
        return f"padding_mode {node.attrs.get('padding_mode')} (the BPU pads zeros or border)"
    if max(shape[2:]) > GRID_SIDE_MAX or shape[2] * shape[3] > GRID_AREA_MAX:
        return f"H, W {shape[2:]} over {GRID_SIDE_MAX} or H*W over {GRID_AREA_MAX}"
    return None


def lstm_backward(node: Node) -> tuple[bool, ...]:
    """Per direction of an LSTM, whether it runs the sequence from its end (ONNX's
    "reverse", and the second direction of "bidirectional")."""
    direction = str(node.attrs.get("direction", "forward"))
    return {"forward": (False,), "reverse": (True,)}.get(direction, (False, True))


def _lstm(graph: Graph, node: Node) -> str | None:
    """J5's batch-1 rule, and what emu's integer LSTM computes (kernels_tensor.Lstm)."""
    shape = _shape(graph, node.inputs[0])
    layout = int(node.attrs.get("layout", 0))
    batch = shape[1] if layout == 0 else shape[0]
    if batch != 1:
        return f"batch {batch} (the BPU's LSTM takes batch 1)"
    stored = [n for n in node.inputs[1:4] if n and not graph.is_const(n)]
    if stored:
        return f"{stored[0]!r} is not constant (the BPU's LSTM stores W, R and B)"
    given = node.attrs.get("activations")
    if given is not None and tuple(str(a).lower() for a in given) \
            != LSTM_ACTIVATIONS * len(lstm_backward(node)):
        return f"activations {tuple(given)} (the BPU's LSTM takes Sigmoid, Tanh, Tanh)"
    if "clip" in node.attrs:
        return "clip (the BPU's LSTM does not clip its cell input)"
    if int(node.attrs.get("input_forget", 0)):
        return "input_forget (the BPU's LSTM has separate input and forget gates)"
    peepholes = _const_value(graph, node, 7)
    if len(node.inputs) > 7 and node.inputs[7] and (peepholes is None or peepholes.any()):
        return "peepholes P (the BPU's LSTM has none)"
    lengths = _const_value(graph, node, 4)
    steps = shape[0] if layout == 0 else shape[1]
    if len(node.inputs) > 4 and node.inputs[4] and (lengths is None or (lengths != steps).any()):
        return f"sequence_lens shorter than the {steps} steps (the BPU runs every step)"
    return None


def _gemm(graph: Graph, node: Node) -> str | None:
    # A Gemm the importer left alone is one no FC computes (see importer.gemm_to_fc).
    return "transA, a feature-map B or a bias that is not one value per output"


def _inference_batchnorm(graph: Graph, node: Node) -> str | None:
    # One the importer did not fold: training mode, or statistics that are not constant.
    return "training mode or statistics that are not constant"


def _clip(graph: Graph, node: Node) -> str | None:
    extra = [n for n in node.inputs[1:] if n and not graph.is_const(n)]
    return f"bound {extra[0]!r} is not constant" if extra else None


# --- the table -------------------------------------------------------------------------------

_UNARY = "1-10 dims"
_BROADCAST = "2-5 dims; at most one constant input; no broadcast along N"
_CPU_ON_REQUEST = "CPU by default on J5 (the toolchain's run_on_bpu moves it to the BPU)"
_LUT_CHECK = _all(_general, _ranks(1, RANK_MAX))
_BINARY_CHECK = _all(_general, _ranks(1, 5), _one_const_at_most, _no_batch_broadcast)


def _rows() -> list[OpRule]:
    rows = [OpRule(op, "bpu", "lut", _UNARY, True, _LUT_CHECK) for op in (
        "Abs", "Atan", "Ceil", "Cos", "Elu", "Exp", "Floor", "HardSigmoid", "LeakyRelu",
        "Log", "Reciprocal", "Sigmoid", "Sin", "Softplus", "Sqrt", "Tanh")]
    rows += [
        OpRule("Pow", "bpu", "lut", _UNARY + "; the exponent a constant scalar", True,
               _all(_LUT_CHECK, _pow)),
        OpRule("HardSwish", "bpu", "lut", _UNARY + " (emu: as the LUT activations; "
               "exporters before opset 14 write it as x * HardSigmoid(x))", True,
               _LUT_CHECK, extension=True),
        OpRule("Silu", "bpu", "lut", "emu's fused x * Sigmoid(x), a LUT", True, _LUT_CHECK,
               extension=True),
        OpRule("Relu", "bpu", "clamp", "no constraint", True),
        OpRule("Clip", "bpu", "clamp", _UNARY + "; constant bounds", True,
               _all(_general, _clip)),
        OpRule("Add", "bpu", "binary", _BROADCAST, True, _BINARY_CHECK),
        OpRule("Sub", "bpu", "binary", _BROADCAST, True, _BINARY_CHECK),
        OpRule("Mul", "bpu", "binary", _BROADCAST, True, _BINARY_CHECK),
        OpRule("Sum", "bpu", "binary", "as Add", True, _BINARY_CHECK),
        OpRule("Div", "bpu", "binary", "two feature maps (a constant divisor becomes a "
               "Mul by its reciprocal on import); shapes as Mul", True,
               _all(_BINARY_CHECK, _feature_maps_only)),
        OpRule("Max", "bpu", "binary", "2-5 dims; only one input broadcasts", True,
               _all(_general, _ranks(1, 5), _one_side_broadcast)),
        OpRule("Min", "cpu", "", _CPU_ON_REQUEST),
        OpRule("ArgMax", "bpu", "index", "NCHW, axis 1, C <= 64", True,
               _all(_general, _argmax)),
        OpRule("ArgMin", "bpu", "index", "NCHW, axis 1, C <= 64", True,
               _all(_general, _argmax)),
        OpRule("AveragePool", "bpu", "pool", "2-D; kernel, stride, pads <= 256", True,
               _all(_general, _pool)),
        OpRule("MaxPool", "bpu", "pool", "2-D; kernel, stride, pads <= 256; "
               "no dilation", True, _all(_general, _pool)),
        OpRule("GlobalAveragePool", "bpu", "pool", "no constraint", True, _general),
        OpRule("GlobalMaxPool", "bpu", "pool", "H, W <= 256", True,
               _all(_general, _global_max_pool)),
        OpRule("BatchNormalization", "bpu", "affine", "no constraint (folded into the conv "
               "before it, or a per-channel scale and shift)", True,
               _all(_general, _inference_batchnorm)),
        OpRule("ScaleShift", "bpu", "affine", "emu's BatchNormalization without a conv",
               True, _general, extension=True),
        OpRule("Concat", "bpu", "move", "not along N", True, _all(_general, _concat)),
        OpRule("Conv", "bpu", "conv", "conv2d; kernel H, W <= 31; C*H*W <= 65535; channels "
               "<= 8192; stride <= 256 ({1, 2} with a fused residual add); dilation <= 16 "
               "with stride 1", True, _all(_general, _conv)),
        OpRule("FC", "bpu", "conv", "emu's Gemm / MatMul with constant weights: as Conv",
               True, _all(_general, _conv), extension=True),
        OpRule("Gemm", "bpu", "conv", "converted into a Conv (FC), constraints as Conv",
               True, _gemm),
        OpRule("ConvTranspose", "bpu", "conv", "2-D, group 1; channels <= 2048; kernel "
               "<= 14 and not 1x1; stride 1-14, not both 1; pads below kernel / stride; "
               "output_padding 0 or 1; no dilation", True, _all(_general, _deconv)),
        OpRule("DepthToSpace", "bpu", "move", "DCR and CRD; blocksize 2; output C a "
               "multiple of 4", True, _all(_general, _depth_space)),
        OpRule("SpaceToDepth", "bpu", "move", "DCR and CRD; blocksize 2", True,
               _all(_general, _depth_space)),
        OpRule("Expand", "bpu", "move", "1-10 dims; one dimension changes", True,
               _all(_general, _one_dim_changes)),
        OpRule("Tile", "bpu", "move", "one dimension changes", True,
               _all(_general, _one_dim_changes)),
        OpRule("Flatten", "bpu", "alias", "as Reshape", True, _general),
        OpRule("Reshape", "bpu", "alias", "1-10 dims", True, _general),
        OpRule("Squeeze", "bpu", "alias", "a Reshape", True, _general),
        OpRule("Unsqueeze", "bpu", "alias", "a Reshape", True, _general),
        OpRule("Identity", "bpu", "alias", "removed on import; kept only where a graph "
               "output is a graph input", True, None),
        OpRule("Gather", "bpu", "move", "ranks <= 4; constant indices", True,
               _all(_general, _gather)),
        OpRule("GatherElements", "bpu", "move", "1-10 dims; constant indices", True,
               _all(_general, _const_indices)),
        OpRule("Slice", "bpu", "move", "any rank; constant starts, ends, axes, steps",
               True, _all(_general, _slice)),
        OpRule("Split", "bpu", "alias", "not along N; constant sizes", True,
               _all(_general, _split)),
        OpRule("Transpose", "bpu", "move", "any rank", True, _general),
        OpRule("Pad", "bpu", "move", "mode constant; constant pads", True,
               _all(_general, _pad)),
        OpRule("TopK", "bpu", "move", "sorted=1; constant k", True,
               _all(_general, _topk)),
        OpRule("MatMul", "bpu", "matmul", "operands of one rank (or constant B); the two "
               "lowest dimensions <= 8192, the others <= 4096", True,
               _all(_general, _matmul)),
        OpRule("ReduceMax", "bpu", "reduce", "2-5 dims; one axis of <= 8192; "
               "keepdims=1", True, _all(_general, _ranks(2, 5), _reduce)),
        OpRule("ReduceMean", "bpu", "reduce", "2-5 dims; one axis, or H and W "
               "together; keepdims=1", True, _all(_general, _ranks(2, 5), _reduce)),
        OpRule("ReduceSum", "bpu", "reduce", "2-5 dims; one axis; keepdims=1", True,
               _all(_general, _ranks(2, 5), _reduce)),
        OpRule("Resize", "bpu", "resize", "NCHW, H and W only; nearest by powers of two "
               "(H factor <= W factor) or linear", True, _all(_general, _resize)),
        OpRule("Upsample", "bpu", "resize", "as Resize", True, _all(_general, _resize)),
        OpRule("GridSample", "bpu", "sample", "NCHW; bilinear or nearest; padding zeros or "
               "border; H, W <= 1024, H*W <= 720*1024", False,
               _all(_general, _grid_sample)),
        OpRule("LSTM", "bpu", "recurrent", "batch 1 (emu: forward, reverse or "
               "bidirectional; default activations; stored W, R, B; no clip, input_forget, "
               "peepholes or shorter sequence_lens)", False, _all(_general, _lstm)),
        OpRule("Preprocess", "bpu", "preprocess", "emu's image input conversion", False,
               None, extension=True),
        OpRule("Softmax", "cpu", "", _CPU_ON_REQUEST + "; emu's --dsp-softmax runs it on "
               "the vDSP"),
    ]
    rows += [OpRule(op, "cpu", "", _CPU_ON_REQUEST) for op in (
        "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual")]
    rows += [OpRule(op, "fold", "", "constant folding only") for op in (
        "Constant", "ConstantOfShape", "Shape", "Size", "Dropout")]
    rows.append(OpRule("CastLike", "cpu", "", "CPU, as Cast (emu: not in J5's list; folded "
                       "when its first input is constant, as opset-18 function bodies write "
                       "it)", extension=True))
    rows += [OpRule(op, "cpu", "", "CPU on J5") for op in (
        "Acos", "Acosh", "And", "Asin", "Asinh", "Atanh", "Cast", "Cosh", "CumSum",
        "DequantizeLinear", "Erf", "EyeLike", "GRU", "GatherND", "GlobalLpPool",
        "InstanceNormalization", "LRN", "LogSoftmax", "LpNormalization", "LpPool",
        "MaxRoiPool", "Neg", "Not", "OneHot", "Or", "PRelu", "QuantizeLinear", "RNN",
        "RandomUniform", "RandomUniformLike", "Range", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceMin", "ReduceProd", "ReduceSumSquare",
        "ReverseSequence", "RoiAlign", "Round", "ScatterElements", "ScatterND", "Selu",
        "Sign", "Sinh", "Softsign", "Tan", "ThresholdedRelu", "Where",
        "NonMaxSuppression")]
    rows += [
        OpRule("LayerNormalization", "cpu", "", "CPU (emu: not in J5's list, which has "
               "opset-11 exporters' chain of ReduceMean, Sub, Pow, Sqrt, Div)",
               extension=True),
        OpRule("Gelu", "cpu", "", "CPU (emu: not in J5's list; opset-11 exporters write "
               "it with Erf)", extension=True),
    ]
    rows += [OpRule(op, "unsupported", "", "listed as a CPU operator the toolchain has not "
                    "integrated") for op in (
        "BitShift", "Compress", "ConcatFromSequence", "ConvInteger", "Det", "Einsum",
        "Hardmax", "If", "IsInf", "IsNaN", "Loop", "MatMulInteger", "Mean", "Mod",
        "Multinomial", "QLinearConv", "QLinearMatMul", "RandomNormal", "RandomNormalLike",
        "Scan", "Scatter", "Shrink", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
        "SequenceErase", "SequenceInsert", "SequenceLength", "SplitToSequence",
        "StringNormalizer", "TfIdfVectorizer", "Unique", "Xor", "Celu",
        "DynamicQuantizeLinear", "MeanVarianceNormalization")]
    return rows


def _table() -> dict[str, OpRule]:
    table: dict[str, OpRule] = {}
    for row in _rows():
        if row.op in table:
            raise ValueError(f"operator table: {row.op} twice")
        table[row.op] = row
    return table


RULES: dict[str, OpRule] = _table()


def rule(op: str) -> OpRule | None:
    return RULES.get(op)


def kind(op: str) -> str:
    """The BPU kind of an op ("" for ops the BPU does not run)."""
    found = RULES.get(op)
    return found.kind if found is not None else ""

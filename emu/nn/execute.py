"""Running a compiled graph: in float (the IR as ONNX defines it) and quantised (issue 11).

`run_float(graph, feeds)` evaluates the IR `Graph` in float32 with NumPy, node by node, as
ONNX defines each op (fused nodes as the ops they replace: a Conv with `activation` and a
residual is act(conv(x) + residual), FC is x @ w.T + b, Silu is x * sigmoid(x), ScaleShift
is x * scale + shift per channel). It is what calibration observes and what the quantised
model is compared with.

`run(qmodel, feeds)` executes a `QuantModel` (emu/nn/quantize.py) segment by segment, as
the J5 would: the "quantize" segment turns the float inputs into codes; a BPU segment runs
its nodes on integer codes with the exact kernels of emu/nn/kernels.py (so its outputs are
defined bit for bit, and tests/nn/quant_reference.py restates them); a CPU or DSP segment
runs its nodes in float (the same NumPy ops as `run_float`); the "dequantize" segment
turns the codes of the model outputs back into float32. Where a CPU segment reads a BPU
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
  inner tensors are calibrated like any tensor's, under the names `lstm_tensor` gives
  (`<node>#lstm<d>.<part>`, `LSTM_PARTS`); its weights are `quantize`'s per-row
  quantisation of [W x s_x | R x s_h]. The initial states are zeros when absent, a stored
  one quantised and a feature map's codes rescaled (`kernels.Rescale`) to the direction's
  state scales; Y, Y_h and Y_c are the hidden and cell codes rescaled to their own scales.
  Everything is int8 (`quantize` keeps LSTM and GridSample tensors int8: J5's list gives
  them no int16).

Inner tensors (`intermediates`): a residual Conv's `<output>#conv` and an LSTM's gates and
states have codes and a scale of their own but are no graph tensor; calibration measures
them from their float values (`intermediate_values`: the Conv without its residual, the
LSTM's steps as ONNX computes them).

The float GridSample (CPU nodes and calibration) is `float_grid_sample`, onnx's reference
arithmetic vectorised for 4-D inputs in the modes the BPU takes (the reference loops in
Python over every output element); other GridSamples use the reference.

Kernel objects are built once per model (`prepare`: by `quantize.quantize`, or on the first
`run` of a model read back with `from_arrays`) and kept in the QuantModel.
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any, cast, get_args

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from emu.errors import InputError
from emu.nn import kernels, kernels_tensor, optable
from emu.nn.graph import Graph, Node
from emu.nn.preprocess import ImageInput

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


# ---------------------------------------------------------------------------------------
# Tensors inside a node: a residual Conv's conv output, an LSTM's gates and states

# An LSTM direction's tensors with codes of their own (kernels_tensor.LstmScales): the gate
# pre-activations, the gates (ONNX's order i, o, f, g), f x c, i x g, the cell state (the
# initial one and every step's), tanh of it and the hidden state (the initial one and
# every step's).
LSTM_PARTS = ("pre_i", "pre_o", "pre_f", "pre_g", "i", "o", "f", "g", "forget", "update",
              "c", "tanh_c", "h")


def lstm_tensor(node: Node, direction: int, part: str) -> str:
    """The name of one of an LSTM direction's inner tensors (`LSTM_PARTS`)."""
    return f"{node.name}#lstm{direction}.{part}"


def intermediates(graph: Graph, node: Node) -> tuple[str, ...]:
    """The tensors a BPU node computes inside itself with codes of their own scale but no
    graph tensor: a residual Conv's conv output (`<output>#conv`), an LSTM's gates and
    states (`lstm_tensor`). Calibration measures them (`intermediate_values`)."""
    if node.residual:
        return (node.outputs[0] + "#conv",)
    if node.op == "LSTM":
        return tuple(lstm_tensor(node, d, part) for d in range(len(optable.lstm_backward(node)))
                     for part in LSTM_PARTS)
    return ()


def intermediate_values(graph: Graph, node: Node, ins: list[Any]) -> dict[str, np.ndarray]:
    """The float values of the node's `intermediates` for its input values: the residual
    Conv's conv(x) + bias; the LSTM's tensors over all steps, as ONNX's LSTM computes them."""
    if node.residual:
        return {node.outputs[0] + "#conv": float_node(graph, node, ins, pre_residual=True)[0]}
    if node.op == "LSTM":
        return _lstm_intermediates(graph, node, ins)
    return {}


def lstm_weights(graph: Graph, node: Node) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An LSTM's stored W (D, 4H, I), R (D, 4H, H) and Wb + Rb (D, 4H), float64."""
    w, r = (np.asarray(graph.tensors[n].value, np.float64) for n in node.inputs[1:3])
    if len(node.inputs) > 3 and node.inputs[3]:
        both = np.asarray(graph.tensors[node.inputs[3]].value, np.float64)
        bias = both[:, : both.shape[1] // 2] + both[:, both.shape[1] // 2:]
    else:
        bias = np.zeros(w.shape[:2])
    return w, r, bias


def lstm_sequence(node: Node, x: np.ndarray) -> np.ndarray:
    """An LSTM's input X as (T, B, I) (layout 1 is (B, T, I))."""
    return np.swapaxes(x, 0, 1) if int(node.attrs.get("layout", 0)) else x


def _lstm_intermediates(graph: Graph, node: Node, ins: list[Any]) -> dict[str, np.ndarray]:
    """Every LSTM_PARTS tensor of every direction, stacked over the steps (h and c with the
    initial state first), in float32 as ONNX's LSTM computes them."""
    x = lstm_sequence(node, np.asarray(ins[0], np.float32))
    w, r, bias = (v.astype(np.float32) for v in lstm_weights(graph, node))
    directions, hidden = w.shape[0], r.shape[2]
    states = []
    for slot in (5, 6):                    # initial_h, initial_c: (D, B, H) in layout 0
        given = ins[slot] if len(ins) > slot and ins[slot] is not None else None
        if given is None:
            states.append(np.zeros((directions, x.shape[1], hidden), np.float32))
        else:
            value = np.asarray(given, np.float32)
            states.append(np.swapaxes(value, 0, 1) if int(node.attrs.get("layout", 0))
                          else value)
    found: dict[str, np.ndarray] = {}
    for d, backward in enumerate(optable.lstm_backward(node)):
        h, c = states[0][d], states[1][d]
        seen: dict[str, list[np.ndarray]] = {part: [] for part in LSTM_PARTS}
        seen["h"].append(h)
        seen["c"].append(c)
        for x_t in (x[::-1] if backward else x):
            pre = np.split(x_t @ w[d].T + h @ r[d].T + bias[d], 4, axis=-1)
            gates = [sigmoid(pre[0]), sigmoid(pre[1]), sigmoid(pre[2]), np.tanh(pre[3])]
            forget, update = gates[2] * c, gates[0] * gates[3]
            c = forget + update
            tanh_c = np.tanh(c)
            h = gates[1] * tanh_c
            for part, value in zip(LSTM_PARTS, (*pre, *gates, forget, update, c, tanh_c, h),
                                   strict=True):
                seen[part].append(value)
        found.update((lstm_tensor(node, d, part), np.stack(values))
                     for part, values in seen.items())
    return found


# ---------------------------------------------------------------------------------------
# Feeds and conversions


def check_feeds(graph: Graph, feeds: dict[str, np.ndarray],
                where: str | None = None) -> dict[str, np.ndarray]:
    """The feeds if they name every graph input with its static shape and dtype, else a
    one-line InputError (starting with `where`, the file or option they came from)."""
    def refuse(message: str) -> InputError:
        return InputError(f"{where}: {message}" if where else message)

    if not isinstance(feeds, dict):
        raise refuse(f"feeds must be a dict of input name -> array, got "
                     f"{type(feeds).__name__}")
    missing = [name for name in graph.inputs if name not in feeds]
    if missing:
        raise refuse(f"missing feed for input {missing[0]!r} (inputs: "
                     f"{', '.join(graph.inputs)})")
    unknown = sorted(set(feeds) - set(graph.inputs))
    if unknown:
        raise refuse(f"feed {unknown[0]!r} is not a model input (inputs: "
                     f"{', '.join(graph.inputs)})")
    for name in graph.inputs:
        value, tensor = feeds[name], graph.tensors[name]
        if not isinstance(value, np.ndarray):
            raise refuse(f"feed {name!r} must be a numpy array, got {type(value).__name__}")
        wanted = f"the model takes {tensor.dtype} {tensor.shape}"
        if value.dtype != np.dtype(tensor.dtype):
            raise refuse(f"input {name!r} has dtype {value.dtype}; {wanted}")
        if value.shape != tensor.shape:
            raise refuse(f"input {name!r} has shape {value.shape}; {wanted}")
    return dict(feeds)


def read_feeds(graph: Graph, data: bytes, where: str,
               kinds: str = "a .npy or .npz file") -> dict[str, np.ndarray]:
    """The feeds in a file's bytes, checked (`check_feeds`): a .npy array feeds a model of
    one input, a .npz holds one array per input name. Anything NumPy cannot read from it
    without pickle (not `kinds`, truncated, object arrays) is a one-line InputError."""
    try:
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            feeds = {graph.inputs[0]: loaded} if len(graph.inputs) == 1 else None
        else:
            with loaded:  # members are read when asked for: here, inside the try
                feeds = {k: loaded[k] for k in loaded.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"{where}: not {kinds} ({exc})") from None
    if feeds is None:
        raise InputError(f"{where}: the model has {len(graph.inputs)} inputs; give a .npz "
                         "file keyed by input name")
    return check_feeds(graph, feeds, where)


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
# Geometry shared by the float and the integer ops


@dataclass(frozen=True)
class Geometry:
    """A 2-D window: kernel, stride, pads (top, left, bottom, right), dilation."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]


def _pair(value: Any, default: int) -> tuple[int, int]:
    if value is None:
        return (default, default)
    values = tuple(int(v) for v in value)
    if len(values) != 2:
        raise InputError(f"expected a 2-D window attribute, got {values}")
    return (values[0], values[1])


def geometry(node: Node, kernel: Sequence[int], in_hw: Sequence[int],
             out_hw: Sequence[int] | None = None) -> Geometry:
    """The window of a Conv / pool node from its attributes (auto_pad resolved; a pool's
    ceil_mode as extra bottom / right padding, which no window takes a value from, up to
    the output size `out_hw` that shape inference gave: ONNX's rule for a last window
    starting in the padding changed at opset 22)."""
    size = (int(kernel[0]), int(kernel[1]))
    stride = _pair(node.attrs.get("strides"), 1)
    dilation = _pair(node.attrs.get("dilations"), 1)
    auto_pad = str(node.attrs.get("auto_pad", "NOTSET"))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = [max(0, (-(-in_hw[i] // stride[i]) - 1) * stride[i]
                     + dilation[i] * (size[i] - 1) + 1 - in_hw[i]) for i in range(2)]
        small = [t // 2 for t in total]
        big = [t - s for t, s in zip(total, small, strict=True)]
        first, last = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        pads = (first[0], first[1], last[0], last[1])
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        given = tuple(int(p) for p in node.attrs.get("pads", (0, 0, 0, 0)))
        if len(given) != 4:
            raise InputError(f"node {node.name} ({node.op}): pads {given} are not 2-D")
        pads = (given[0], given[1], given[2], given[3])
    if node.attrs.get("ceil_mode", 0):
        pads = _ceil_pads(pads, size, stride, dilation, in_hw, out_hw)
    return Geometry(size, stride, pads, dilation)


def _ceil_pads(pads: tuple[int, int, int, int], size: tuple[int, int],
               stride: tuple[int, int], dilation: tuple[int, int],
               in_hw: Sequence[int], out_hw: Sequence[int] | None) -> tuple[int, int, int, int]:
    """Pads whose floor-rule output size is the ceil_mode size: `out_hw`, or without it the
    output rounded up less a last window that would start beyond the input and its
    leading pad."""
    extra = []
    for i in range(2):
        span = in_hw[i] + pads[i] + pads[i + 2] - dilation[i] * (size[i] - 1) - 1
        out = -(-span // stride[i]) + 1
        if (out - 1) * stride[i] >= in_hw[i] + pads[i]:
            out -= 1
        if out_hw is not None:
            out = int(out_hw[i])
        extra.append(max(0, (out - 1) * stride[i] - span))
    return (pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1])


def _windows(x: np.ndarray, win: Geometry, fill: float, wrap: bool = False) -> np.ndarray:
    """(N, C, kh, kw, OH, OW) view of the windows over x padded with `fill` (or, with
    `wrap`, circularly: the zoo's calibration of BatchNormalization statistics)."""
    n, c, height, width = x.shape
    top, left, bottom, right = win.pads
    (kh, kw), (sy, sx), (dy, dx) = win.kernel, win.stride, win.dilation
    oh = (height + top + bottom - dy * (kh - 1) - 1) // sy + 1
    ow = (width + left + right - dx * (kw - 1) - 1) // sx + 1
    if wrap:
        padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), mode="wrap")
    else:
        padded = np.full((n, c, height + top + bottom, width + left + right), fill, x.dtype)
        padded[:, :, top:top + height, left:left + width] = x
    s0, s1, s2, s3 = padded.strides
    return np.lib.stride_tricks.as_strided(
        padded, (n, c, kh, kw, oh, ow), (s0, s1, s2 * dy, s3 * dx, s2 * sy, s3 * sx),
        writeable=False)


def zero_insert(x: np.ndarray, stride: tuple[int, int]) -> np.ndarray:
    """x with stride - 1 zeros between neighbouring pixels (ConvTranspose's input)."""
    n, c, height, width = x.shape
    out = np.zeros((n, c, (height - 1) * stride[0] + 1, (width - 1) * stride[1] + 1), x.dtype)
    out[:, :, ::stride[0], ::stride[1]] = x
    return out


def deconv_as_conv(node: Node, weight: np.ndarray) -> tuple[np.ndarray, Geometry]:
    """A ConvTranspose as a convolution over the zero-inserted input: the (C_out, C_in,
    kh, kw) flipped weight and the stride-1 window (see the module docstring)."""
    if int(node.attrs.get("group", 1)) != 1 or any(
            d != 1 for d in _pair(node.attrs.get("dilations"), 1)):
        raise InputError(f"node {node.name}: only ConvTranspose with group 1 and no "
                         "dilation is supported")
    if str(node.attrs.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        raise InputError(f"node {node.name}: ConvTranspose with auto_pad SAME is not "
                         "supported")
    kh, kw = weight.shape[2], weight.shape[3]
    pads = tuple(int(p) for p in node.attrs.get("pads", (0, 0, 0, 0)))
    extra = _pair(node.attrs.get("output_padding"), 0)
    conv_pads = (kh - 1 - pads[0], kw - 1 - pads[1], kh - 1 - pads[2] + extra[0],
                 kw - 1 - pads[3] + extra[1])
    if min(conv_pads) < 0:
        raise InputError(f"node {node.name}: ConvTranspose pads larger than kernel - 1")
    flipped = np.ascontiguousarray(weight.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    return flipped, Geometry((kh, kw), (1, 1), conv_pads, (1, 1))


def repeat_factor(graph: Graph, node: Node) -> tuple[int, int] | None:
    """The integer (fy, fx) of a nearest Resize (opset 11 on) that repeats each pixel, or
    None for any other resize."""
    mode = str(node.attrs.get("mode", "nearest"))
    coords = str(node.attrs.get("coordinate_transformation_mode", "half_pixel"))
    nearest = str(node.attrs.get("nearest_mode", "round_prefer_floor"))
    x, y = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    ok = len(x) == 4 and x[:2] == y[:2] and y[2] % x[2] == 0 and y[3] % x[3] == 0
    fy, fx = (y[2] // x[2], y[3] // x[3]) if ok else (0, 0)
    repeats = ((coords == "asymmetric" and nearest == "floor")
               or (coords == "half_pixel" and nearest == "round_prefer_floor")
               or (coords == "asymmetric" and nearest == "round_prefer_floor"
                   and fy == fx == 2))
    if node.op != "Resize" or graph.opset < 11 or mode != "nearest" or not ok \
            or not repeats or _explicit_roi(graph, node):
        return None
    return fy, fx


def _explicit_roi(graph: Graph, node: Node) -> bool:
    coords = str(node.attrs.get("coordinate_transformation_mode", "half_pixel"))
    return coords == "tf_crop_and_resize"


def resize_scales(graph: Graph, node: Node) -> tuple[float, float]:
    """A 4-D Resize's (H, W) scales: the `scales` input when given, else out / in."""
    x, y = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    index = 2 if node.op == "Resize" and graph.opset >= 11 else 1
    if len(node.inputs) > index and node.inputs[index] and graph.is_const(node.inputs[index]):
        value = np.asarray(graph.tensors[node.inputs[index]].value, np.float64).reshape(-1)
        if value.size == 4:
            return float(value[2]), float(value[3])
    return y[2] / x[2], y[3] / x[3]


def clip_bounds(graph: Graph, node: Node) -> tuple[float, float]:
    """Clip's (min, max) from attributes (opset < 11) or constant inputs."""
    low = float(node.attrs.get("min", -math.inf))
    high = float(node.attrs.get("max", math.inf))
    bounds = [low, high]
    for k in (1, 2):
        if len(node.inputs) > k and node.inputs[k]:
            if not graph.is_const(node.inputs[k]):
                raise InputError(f"node {node.name}: Clip bounds must be constants")
            value = graph.tensors[node.inputs[k]].value
            assert value is not None
            bounds[k - 1] = float(np.asarray(value).reshape(-1)[0])
    return bounds[0], bounds[1]


def _per_channel(graph: Graph, node: Node) -> np.ndarray | None:
    """The constant operand of a Mul / Add as one float64 value per channel (axis 1 of the
    output), or None when it varies along another axis or the output has no channel axis."""
    out = graph.tensors[node.outputs[0]].shape
    const = next(n for n in node.inputs if graph.is_const(n))
    value = np.asarray(graph.tensors[const].value, np.float64)
    if len(out) < 2 or value.ndim > len(out):
        return None
    full = value.reshape((1,) * (len(out) - value.ndim) + value.shape)
    if any(d != 1 for k, d in enumerate(full.shape) if k != 1):
        return None
    return np.broadcast_to(full.reshape(-1), (out[1],)).copy()


def channel_affine(graph: Graph, node: Node) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) per channel with y = a[c] x + b[c], for ScaleShift and Mul / Add by a
    constant that varies at most along axis 1."""
    channels = graph.tensors[node.outputs[0]].shape[1]
    if node.op == "ScaleShift":
        scale, shift = (graph.tensors[n].value for n in node.inputs[1:3])
        assert scale is not None and shift is not None
        return (np.asarray(scale, np.float64).reshape(channels),
                np.asarray(shift, np.float64).reshape(channels))
    per_channel = _per_channel(graph, node)
    if per_channel is None:
        raise InputError(f"node {node.name}: {node.op} by a constant that is not per channel")
    if node.op == "Mul":
        return per_channel, np.zeros(channels)
    return np.ones(channels), per_channel


def is_channel_affine(graph: Graph, node: Node) -> bool:
    """ScaleShift, or a Mul / Add of a float feature map by a per-channel float constant."""
    if node.op == "ScaleShift":
        return True
    if node.op not in ("Mul", "Add") or len(node.inputs) != 2 \
            or sum(graph.is_const(n) for n in node.inputs) != 1:
        return False
    const = next(n for n in node.inputs if graph.is_const(n))
    return graph.tensors[const].dtype.startswith("float") and _per_channel(graph, node) is not None


def split_points(graph: Graph, node: Node) -> tuple[int, list[int]]:
    """Split's axis and the indices where its output parts begin."""
    rank = len(graph.tensors[node.inputs[0]].shape)
    axis = int(node.attrs.get("axis", 0)) % rank
    sizes = [graph.tensors[o].shape[axis] for o in node.outputs]
    return axis, [int(v) for v in np.cumsum(sizes)[:-1]]


def image_input(graph: Graph, node: Node) -> ImageInput:
    """The image input type of a Preprocess node (emu/nn/preprocess.py)."""
    a = node.attrs
    return ImageInput(str(a["input_type"]), graph.tensors[node.outputs[0]].shape[1],
                      tuple(a["mean"]), tuple(a["scale"]))


# ---------------------------------------------------------------------------------------
# Float ops


def float_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, win: Geometry,
               groups: int, wrap: bool = False) -> np.ndarray:
    """ONNX Conv in float32 (zero padding, or circular with `wrap`)."""
    cols = _windows(x, win, 0.0, wrap)
    n, c, kh, kw, oh, ow = cols.shape
    c_out = w.shape[0]
    k = (c // groups) * kh * kw
    matrix = w.reshape(groups, c_out // groups, k).astype(np.float32, copy=False)
    y = np.matmul(matrix, cols.reshape(n, groups, k, oh * ow)).reshape(n, c_out, oh, ow)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1).astype(np.float32)
    return y


def _activate(y: np.ndarray, activation: str) -> np.ndarray:
    if activation == "relu":
        return np.maximum(y, np.float32(0))
    if activation == "relu6":
        return np.clip(y, np.float32(0), np.float32(6))
    return y


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in float32, through tanh (no overflow for any input)."""
    return (0.5 + 0.5 * np.tanh(0.5 * x.astype(np.float64))).astype(np.float32)


def float_pool(x: np.ndarray, win: Geometry, kind: str, count_include_pad: bool = False,
               wrap: bool = False) -> np.ndarray:
    """ONNX MaxPool ("max": padding never wins) or AveragePool ("average": over the taps
    inside the input, or all kh x kw with `count_include_pad`); circular with `wrap`."""
    if kind == "max":
        return np.asarray(_windows(x, win, -np.inf, wrap).max(axis=(2, 3)))
    total = _windows(x, win, 0.0, wrap).sum(axis=(2, 3))
    if count_include_pad or wrap:
        return np.asarray(total / (win.kernel[0] * win.kernel[1]))
    count = _windows(np.ones((1, 1, *x.shape[2:]), np.float32), win, 0.0).sum(axis=(2, 3))
    return np.asarray(total / count)


def float_grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str,
                      align_corners: bool) -> np.ndarray:
    """ONNX GridSample of an NCHW x in float32, mode "linear" (opset 16's "bilinear") or
    "nearest" (ties to even), padding "zeros" or "border": onnx's reference implementation's
    arithmetic, vectorised (that one loops in Python over every output element)."""
    n, _, height, width = x.shape

    def source(normalised: np.ndarray, length: int) -> np.ndarray:
        found: np.ndarray
        if align_corners:
            found = (normalised + 1) / np.float32(2) * np.float32(length - 1)
        else:
            found = ((normalised + 1) * np.float32(length) - 1) / np.float32(2)
        if mode == "nearest":
            found = np.rint(found)
        if padding_mode == "border":
            found = np.clip(found, np.float32(0), np.float32(length - 1))
        return found.astype(np.float32)

    sy, sx = source(grid[..., 1], height), source(grid[..., 0], width)
    batch = np.arange(n)[:, None, None]

    def tap(iy: np.ndarray, ix: np.ndarray) -> np.ndarray:
        inside = (iy >= 0) & (iy < height) & (ix >= 0) & (ix < width)
        picked = x[batch, :, np.clip(iy, 0, height - 1), np.clip(ix, 0, width - 1)]
        return np.moveaxis(np.where(inside[..., None], picked, np.float32(0)), 3, 1)

    if mode == "nearest":
        return tap(sy.astype(np.int64), sx.astype(np.int64))
    y0, x0 = np.floor(sy), np.floor(sx)
    ty, tx = (sy - y0)[:, None], (sx - x0)[:, None]
    iy, ix = y0.astype(np.int64), x0.astype(np.int64)
    rows = [tap(iy, ix) * (1 - tx) + tap(iy, ix + 1) * tx,
            tap(iy + 1, ix) * (1 - tx) + tap(iy + 1, ix + 1) * tx]
    return np.asarray(rows[0] * (1 - ty) + rows[1] * ty, np.float32)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return np.asarray(e / e.sum(axis=axis, keepdims=True))


def lrn(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75,
        bias: float = 1.0) -> np.ndarray:
    """ONNX LRN: across `size` channels centred on each (one more after than before)."""
    square = np.square(x)
    padded = np.pad(square, ((0, 0), ((size - 1) // 2, size // 2), (0, 0), (0, 0)))
    window = sum(padded[:, k:k + x.shape[1]] for k in range(size))
    return np.asarray(x / (bias + alpha / size * window) ** beta)


def float_node(graph: Graph, node: Node, ins: list[Any], *,
               pre_residual: bool = False) -> list[np.ndarray]:
    """The outputs of one node given its input values (None for omitted inputs), as ONNX
    defines the op: emu's NumPy definitions for float inputs (float32 arithmetic), onnx's
    reference implementation (`reference_node`) for every other op and for integer or
    boolean inputs. With `pre_residual`, a residual Conv gives conv(x) + bias without the
    residual and the activation (what calibration measures for the intermediate tensor)."""
    own = node.op in _EMU_OPS or (
        len(node.outputs) == 1 and all(
            graph.tensors[n].dtype.startswith("float")
            for n in (*node.inputs[:1], *node.outputs) if n))
    outs = _numpy_node(graph, node, ins, pre_residual) if own else None
    if outs is None:
        outs = reference_node(graph.opset, node, ins)
    return [np.asarray(v, graph.tensors[name].dtype) if name else np.asarray(v)
            for name, v in zip(node.outputs, outs, strict=True)]


# emu's own ops (fused by the importer): only its NumPy definitions compute them.
_EMU_OPS = frozenset({"FC", "Silu", "ScaleShift", "Preprocess"})


_WINDOWED = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool"})


def plain_window(node: Node, rank: int) -> bool:
    """Whether emu's NumPy window ops compute the node: 2-D (a 4-D input), and for a
    ConvTranspose group 1, no dilation and no output_shape; for an AveragePool, not
    ceil_mode together with count_include_pad."""
    a = node.attrs
    if rank != 4:
        return False
    if node.op == "ConvTranspose":
        return (int(a.get("group", 1)) == 1 and "output_shape" not in a
                and all(d == 1 for d in a.get("dilations", (1, 1)))
                and str(a.get("auto_pad", "NOTSET")) in ("NOTSET", "VALID"))
    if node.op == "AveragePool":
        return not (a.get("ceil_mode", 0) and a.get("count_include_pad", 0))
    return True


def lut_function(graph: Graph, node: Node) -> Callable[[np.ndarray], np.ndarray]:
    """The ONNX definition of a LUT op (emu/nn/optable.py kind "lut") with the node's
    attributes, vectorised over float64: what the float model computes and what the BPU's
    table is built from."""
    a, op = node.attrs, node.op
    if op in ("Elu", "LeakyRelu"):
        alpha = float(a.get("alpha", 1.0 if op == "Elu" else 0.01))
        if op == "Elu":
            return lambda x: np.where(x >= 0, x, alpha * np.expm1(x))
        return lambda x: np.where(x >= 0, x, alpha * x)
    if op == "HardSigmoid":
        alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
        return lambda x: np.clip(alpha * x + beta, 0.0, 1.0)
    if op == "HardSwish":  # alpha 1/6, beta 1/2
        return lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    if op == "Pow":
        exponent = graph.tensors[node.inputs[1]].value
        assert exponent is not None
        power = float(np.asarray(exponent).reshape(-1)[0])
        return lambda x: np.power(x, power)
    functions: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "Abs": np.abs, "Atan": np.arctan, "Ceil": np.ceil, "Cos": np.cos, "Exp": np.exp,
        "Floor": np.floor, "Log": np.log, "Reciprocal": np.reciprocal, "Sin": np.sin,
        "Softplus": lambda x: np.logaddexp(0.0, x), "Sqrt": np.sqrt, "Tanh": np.tanh,
        "Sigmoid": lambda x: 0.5 + 0.5 * np.tanh(0.5 * x),
        "Silu": lambda x: x * (0.5 + 0.5 * np.tanh(0.5 * x))}
    if op not in functions:
        raise InputError(f"node {node.name}: {op} is not a LUT op")
    return functions[op]


def _proto_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """Node attributes as onnx.helper.make_node takes them (arrays as tensors; an empty
    list, whose type nothing says, is left out: ONNX reads it as the default)."""
    def value(v: Any) -> Any:
        return onnx.numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
    out = {}
    for key, v in attrs.items():
        if isinstance(v, tuple):
            if v:
                out[key] = [value(item) for item in v]
        else:
            out[key] = value(v)
    return out


# GridSample's modes by their opset-16 names, which onnx's reference implementation does
# not know: it takes only the opset-20 names of the same interpolations.
_GRID_SAMPLE_MODES = {"bilinear": "linear", "bicubic": "cubic"}


def _grid_mode(node: Node) -> str:
    """A GridSample's mode by its opset-20 name."""
    mode = str(node.attrs.get("mode", "linear"))
    return _GRID_SAMPLE_MODES.get(mode, mode)


def _reference_attrs(node: Node) -> dict[str, Any]:
    """The node's attributes as onnx's reference implementation reads them."""
    if node.op == "GridSample":
        return {**node.attrs, "mode": _grid_mode(node)}
    return node.attrs


_REFERENCE_CACHE: dict[int, tuple[Node, int, ReferenceEvaluator]] = {}
_REFERENCE_CACHE_SIZE = 4096


def reference_node(opset: int, node: Node, ins: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """The node's outputs from the ONNX reference implementation the onnx package ships
    (`onnx.reference`), at `opset`: the definition of every op emu has no NumPy code for,
    which the CPU computes in float (and integer) as ONNX defines it. A failure is a
    one-line InputError naming the node."""
    cached = _REFERENCE_CACHE.get(id(node))
    if cached is None or cached[0] is not node or cached[1] != opset:
        try:
            proto = onnx.helper.make_node(
                node.op, [f"in{k}" if n else "" for k, n in enumerate(node.inputs)],
                [f"out{k}" if n else "" for k, n in enumerate(node.outputs)],
                **_proto_attrs(_reference_attrs(node)))
            evaluator = ReferenceEvaluator(proto, opsets={"": opset})
        except Exception as exc:  # onnx raises many kinds for an op it cannot build
            raise InputError(f"node {node.name} ({node.op}): {_first_line(exc)}") from None
        if len(_REFERENCE_CACHE) >= _REFERENCE_CACHE_SIZE:
            _REFERENCE_CACHE.clear()
        cached = _REFERENCE_CACHE[id(node)] = (node, opset, evaluator)
    feeds = {f"in{k}": v for k, (n, v) in enumerate(zip(node.inputs, ins, strict=True)) if n}
    try:
        with np.errstate(all="ignore"):
            outs = cached[2].run(None, feeds)
    except Exception as exc:  # the reference raises what NumPy raises
        raise InputError(f"node {node.name} ({node.op}): {_first_line(exc)}") from None
    return [np.asarray(v) for v in list(outs)[:len(node.outputs)]]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _numpy_node(graph: Graph, node: Node, ins: list[Any],
                pre_residual: bool) -> list[np.ndarray] | None:
    """emu's own NumPy definition of a node on float inputs, or None when it has none."""
    op, a = node.op, node.attrs
    if op in _WINDOWED and not plain_window(node, ins[0].ndim):
        return None
    x = ins[0]
    out_shape = graph.tensors[node.outputs[0]].shape
    y: np.ndarray
    if op == "Conv":
        w = ins[1]
        y = float_conv(x, w, ins[2] if len(ins) > 2 else None,
                        geometry(node, w.shape[2:], x.shape[2:]), int(a.get("group", 1)))
        if pre_residual:
            return [y]
        if node.residual:
            y = y + ins[3]
        y = _activate(y, node.activation)
    elif op == "ConvTranspose":
        w, win = deconv_as_conv(node, ins[1])
        y = float_conv(zero_insert(x, _pair(a.get("strides"), 1)), w,
                        ins[2] if len(ins) > 2 else None, win, 1)
    elif op == "FC":
        y = x @ ins[1].T.astype(np.float32)
        if len(ins) > 2 and ins[2] is not None:
            y = y + ins[2].astype(np.float32)
    elif op in ("MaxPool", "AveragePool"):
        win = geometry(node, a["kernel_shape"], x.shape[2:], out_shape[2:])
        y = float_pool(x, win, "max" if op == "MaxPool" else "average",
                       bool(a.get("count_include_pad", 0)))
    elif op == "GlobalAveragePool":
        y = x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)
    elif op in ("Flatten", "Reshape", "Squeeze", "Unsqueeze"):
        y = x.reshape(out_shape)
    elif op == "Transpose":
        y = x.transpose(a.get("perm"))
    elif op == "Split":
        axis, points = split_points(graph, node)
        return [part.copy() for part in np.split(x, points, axis=axis)]
    elif op == "Concat":
        y = np.concatenate(ins, axis=int(a["axis"]))
    elif op == "Resize" and repeat_factor(graph, node) is not None:
        fy, fx = repeat_factor(graph, node) or (1, 1)
        y = np.repeat(np.repeat(x, fy, axis=2), fx, axis=3)
    elif op == "Relu":
        y = np.maximum(x, np.float32(0))
    elif op == "Clip":
        low, high = clip_bounds(graph, node)
        y = np.clip(x, np.float32(low), np.float32(high))
    elif op == "Sigmoid":
        y = sigmoid(x)
    elif op == "Silu":
        y = x * sigmoid(x)
    elif op == "HardSigmoid":
        y = np.clip(float(a.get("alpha", 0.2)) * x + float(a.get("beta", 0.5)), 0.0, 1.0)
    elif op == "ScaleShift":
        scale, shift = channel_affine(graph, node)
        view = (1, -1) + (1,) * (x.ndim - 2)
        y = x * scale.astype(np.float32).reshape(view) + shift.astype(np.float32).reshape(view)
    elif op in ("Add", "Sum", "Mul", "Sub", "Div"):
        fn: Callable[[Any, Any], Any] = {"Add": np.add, "Sum": np.add, "Mul": np.multiply,
                                         "Sub": np.subtract, "Div": np.divide}[op]
        y = ins[0]
        for other in ins[1:]:
            y = fn(y, other)
    elif op == "Preprocess":
        y = image_input(graph, node).to_float(x)
    elif op == "Softmax" and (graph.opset >= 13 or int(a.get("axis", 1)) % x.ndim == x.ndim - 1):
        y = softmax(x, int(a.get("axis", -1)))
    elif op == "GridSample" and x.ndim == 4 and _grid_mode(node) in ("linear", "nearest") \
            and str(a.get("padding_mode", "zeros")) in ("zeros", "border"):
        y = float_grid_sample(x, ins[1], _grid_mode(node), str(a.get("padding_mode", "zeros")),
                              bool(a.get("align_corners", 0)))
    elif op == "LRN":
        y = lrn(x, int(a["size"]), float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)),
                float(a.get("bias", 1.0)))
    elif op == "LayerNormalization":
        axis = int(a.get("axis", -1)) % x.ndim
        axes = tuple(range(axis, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = np.square(x - mean).mean(axis=axes, keepdims=True)
        y = (x - mean) / np.sqrt(var + float(a.get("epsilon", 1e-5))) * ins[1]
        if len(ins) > 2 and ins[2] is not None:
            y = y + ins[2]
    elif op == "InstanceNormalization":
        axes = tuple(range(2, x.ndim))
        view = (1, -1) + (1,) * (x.ndim - 2)
        mean = x.mean(axis=axes, keepdims=True)
        var = np.square(x - mean).mean(axis=axes, keepdims=True)
        y = ((x - mean) / np.sqrt(var + float(a.get("epsilon", 1e-5))) * ins[1].reshape(view)
             + ins[2].reshape(view))
    elif op == "Pow":
        with np.errstate(all="ignore"):
            y = np.power(x.astype(np.float64), np.asarray(ins[1]))
    elif op == "Gelu":
        z = x.astype(np.float64)
        if str(a.get("approximate", "none")) == "tanh":
            y = 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))
        else:
            y = 0.5 * z * (1.0 + kernels.erf(z / math.sqrt(2.0)))
    elif is_lut(node):
        with np.errstate(all="ignore"):
            y = lut_function(graph, node)(x.astype(np.float64))
    else:
        return None
    return [np.asarray(y, np.float32).reshape(out_shape)]


def node_inputs(graph: Graph, node: Node, values: dict[str, np.ndarray]) -> list[Any]:
    """A node's input values: constants from the graph, the rest from `values`."""
    return [None if not name else
            graph.tensors[name].value if graph.is_const(name) else values[name]
            for name in node.inputs]


def run_float(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's outputs in float32, every node as ONNX defines it (see the module)."""
    values = {**constant_outputs(graph), **check_feeds(graph, feeds)}
    for node in graph.nodes:
        values.update(zip(node.outputs, float_node(graph, node, node_inputs(graph, node, values)),
                          strict=True))
    return {name: values[name] for name in graph.outputs}


def constant_outputs(graph: Graph) -> dict[str, np.ndarray]:
    """The graph outputs that constant folding made constants (a Shape of the input)."""
    return {name: np.asarray(graph.tensors[name].value) for name in graph.outputs
            if graph.is_const(name)}


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
            function: Callable[..., Any] | str = _NAMED_LUTS.get(op) or lut_function(graph, node)
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
            outs = reference_node(graph.opset, target, ins)
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
        stride = _pair(node.attrs.get("strides"), 1)
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
            return self.scale(lstm_tensor(node, direction, part))
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
        scales = [self.scale(lstm_tensor(node, d, part)) for d in range(directions)]
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
        x_shape = lstm_sequence(node, np.empty(graph.tensors[x_name].shape)).shape
        outputs = [(k, name) for k, name in enumerate(node.outputs[:3]) if name]
        rescales = {name: [kernels.Rescale(self.scale(lstm_tensor(node, d, "c" if k == 2
                                                                   else "h")), self.scale(name))
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
        self.floats = {**constant_outputs(self.graph), **check_feeds(self.graph, feeds)}
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
        return node_inputs(self.graph, node, self.floats)

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
                outs = (float_node(self.graph, node, ins) if node_fn is None
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
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    if norm == 0.0:
        return 1.0 if not (x.any() or y.any()) else 0.0
    return float(x @ y) / norm

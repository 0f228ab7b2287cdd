"""The float reference: the IR evaluated in float32, every node as ONNX defines it.

`run_float(graph, feeds)` evaluates the IR `Graph` in float32 with NumPy, node by node, as
ONNX defines each op (fused nodes as the ops they replace: a Conv with `activation` and a
residual is act(conv(x) + residual), FC is x @ w.T + b, Silu is x * sigmoid(x), ScaleShift
is x * scale + shift per channel); `float_node` is one node of it, which the CPU and DSP
segments of a quantised model run (`emu/nn/execute.py`) and calibration observes
(`emu/nn/quantize.py`); the zoo's BatchNormalization calibration runs it on the ONNX
graph as it is (`emu/nn/zoo.py`, with `wrap`: circular padding). Ops emu has no NumPy code
for, and integer or boolean inputs, go to the reference implementation the onnx package
ships (`reference_node`).

Inner tensors (`intermediates`): a residual Conv's `<output>#conv` and an LSTM's gates and
states have codes and a scale of their own on the BPU but are no graph tensor; calibration
measures them from their float values (`intermediate_values`: the Conv without its
residual, the LSTM's steps as ONNX computes them).

The float GridSample (CPU nodes and calibration) is `float_grid_sample`, onnx's reference
arithmetic vectorised for 4-D inputs in the modes the BPU takes (the reference loops in
Python over every output element); other GridSamples use the reference.
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from emu.errors import InputError
from emu.nn import blas, kernels, optable
from emu.nn.graph import Graph, Node
from emu.nn.opattrs import (
    Geometry,
    channel_affine,
    clip_bounds,
    deconv_as_conv,
    geometry,
    image_input,
    pair,
    repeat_factor,
    split_points,
    zero_insert,
)

# ---------------------------------------------------------------------------------------
# Feeds


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
            pre = np.split(blas.matmul(x_t, w[d].T) + blas.matmul(h, r[d].T) + bias[d], 4,
                           axis=-1)
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
# Float ops


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


def float_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, win: Geometry,
               groups: int, wrap: bool = False) -> np.ndarray:
    """ONNX Conv in float32 (zero padding, or circular with `wrap`)."""
    cols = _windows(x, win, 0.0, wrap)
    n, c, kh, kw, oh, ow = cols.shape
    c_out = w.shape[0]
    k = (c // groups) * kh * kw
    matrix = w.reshape(groups, c_out // groups, k).astype(np.float32, copy=False)
    y = blas.matmul(matrix, cols.reshape(n, groups, k, oh * ow)).reshape(n, c_out, oh, ow)
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
               pre_residual: bool = False, wrap: bool = False) -> list[np.ndarray]:
    """The outputs of one node given its input values (None for omitted inputs), as ONNX
    defines the op: emu's NumPy definitions for float inputs (float32 arithmetic), onnx's
    reference implementation (`reference_node`) for every other op and for integer or
    boolean inputs. With `pre_residual`, a residual Conv gives conv(x) + bias without the
    residual and the activation (what calibration measures for the intermediate tensor).
    With `wrap`, a Conv, MaxPool or AveragePool pads circularly instead of with zeros (or
    -inf): the zoo's BatchNormalization calibration (`emu/nn/zoo.py`), whose small input
    then behaves like the inside of a large one."""
    own = node.op in _EMU_OPS or (
        len(node.outputs) == 1 and all(
            graph.tensors[n].dtype.startswith("float")
            for n in (*node.inputs[:1], *node.outputs) if n))
    outs = _numpy_node(graph, node, ins, pre_residual, wrap) if own else None
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
        with np.errstate(all="ignore"), blas.one_thread():  # its MatMul, Gemm, Einsum...
            outs = cached[2].run(None, feeds)
    except Exception as exc:  # the reference raises what NumPy raises
        raise InputError(f"node {node.name} ({node.op}): {_first_line(exc)}") from None
    return [np.asarray(v) for v in list(outs)[:len(node.outputs)]]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _numpy_node(graph: Graph, node: Node, ins: list[Any], pre_residual: bool,
                wrap: bool) -> list[np.ndarray] | None:
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
                        geometry(node, w.shape[2:], x.shape[2:]), int(a.get("group", 1)), wrap)
        if pre_residual:
            return [y]
        if node.residual:
            y = y + ins[3]
        y = _activate(y, node.activation)
    elif op == "ConvTranspose":
        w, win = deconv_as_conv(node, ins[1])
        y = float_conv(zero_insert(x, pair(a.get("strides"), 1)), w,
                        ins[2] if len(ins) > 2 else None, win, 1)
    elif op == "FC":
        y = blas.matmul(x, ins[1].T.astype(np.float32))
        if len(ins) > 2 and ins[2] is not None:
            y = y + ins[2].astype(np.float32)
    elif op in ("MaxPool", "AveragePool"):
        win = geometry(node, a["kernel_shape"], x.shape[2:], out_shape[2:])
        y = float_pool(x, win, "max" if op == "MaxPool" else "average",
                       bool(a.get("count_include_pad", 0)), wrap)
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
    elif op == "BatchNormalization" and len(node.outputs) == 1:  # inference mode
        view = (1, -1) + (1,) * (x.ndim - 2)
        scale, shift, mean, var = (np.asarray(v).reshape(view) for v in ins[1:5])
        y = (x - mean) / np.sqrt(var + float(a.get("epsilon", 1e-5))) * scale + shift
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
    elif optable.kind(node.op) == "lut":
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

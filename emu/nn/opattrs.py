"""What a node's attributes mean, as the float reference (`emu/nn/reference.py`) and the
integer executor (`emu/nn/execute.py`) both read them: a Conv's or pool's window
(`geometry`: auto_pad and ceil_mode resolved), a ConvTranspose as a convolution, a Resize's
factor and scales, Clip's bounds, the per-channel affine map of a ScaleShift or a Mul / Add
by a constant, Split's points, a Preprocess node's image input type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from emu.errors import InputError
from emu.nn.graph import Graph, Node
from emu.nn.preprocess import ImageInput


@dataclass(frozen=True)
class Geometry:
    """A 2-D window: kernel, stride, pads (top, left, bottom, right), dilation."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]


def pair(value: Any, default: int) -> tuple[int, int]:
    """A 2-D window attribute (strides, dilations, output_padding) as a pair."""
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
    stride = pair(node.attrs.get("strides"), 1)
    dilation = pair(node.attrs.get("dilations"), 1)
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
            d != 1 for d in pair(node.attrs.get("dilations"), 1)):
        raise InputError(f"node {node.name}: only ConvTranspose with group 1 and no "
                         "dilation is supported")
    if str(node.attrs.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        raise InputError(f"node {node.name}: ConvTranspose with auto_pad SAME is not "
                         "supported")
    kh, kw = weight.shape[2], weight.shape[3]
    pads = tuple(int(p) for p in node.attrs.get("pads", (0, 0, 0, 0)))
    extra = pair(node.attrs.get("output_padding"), 0)
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

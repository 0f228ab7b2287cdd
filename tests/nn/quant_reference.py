"""A slow, plain restatement of what a QuantModel's BPU segments compute, code for code.

It reads the model's tables (tensor scales and types, int8 weights, int32 biases, weight
scales) and the graph's node attributes, and evaluates each BPU node with integer NumPy
(int64 arrays, convolutions as a loop over kernel taps, no BLAS, no float in any sum) and
the Python-int rules of `tests/nn/kernels_reference.py`. It shares nothing with
`emu/nn/execute.py` or `emu/nn/kernels.py`: the rules below are the spec the executor's
docstring states, written out again.

- quantise: code = round half away from zero of the float64 quotient x / scale (Python's
  float division), saturated to the type.
- requantise: acc (int32) times M0, shifted right by 31 + n, rounded half away from zero,
  saturated, then the fused activation's clamp (ReLU6 at 6 / scale rounded exactly).
- Conv with a residual: the conv into `<out>#conv`, then the add of it and the residual.
- ConvTranspose: the stored equivalent-conv weight over the input with stride - 1 zeros
  inserted, padded by kernel - 1 - pad. Affine ops (ScaleShift, Mul / Add by a constant):
  a depthwise 1x1 conv with the stored weight.
- Add: both inputs aligned (int8 widened to int16), shifted left by 20 (int8) or 15
  (int16), each scaled by its scale / (2 x max scale), summed, scaled to the output.
- Preprocess: (256 x pixel - round(256 x mean)) x scale / (256 x out_scale) in fixed
  point per channel, from the pixels of the image (colour conversion and layout are
  `ImageInput.pixels`, integer code that emu/nn/preprocess.py's tests check).
- Sub, Mul, Div, Max of two code tensors (a constant operand that is not per channel has
  codes of its own scale), MatMul, the LUT ops (ONNX's definitions, restated below),
  ReduceMax / ReduceMean / ReduceSum / GlobalMaxPool, linear Resize, GridSample (a stored
  grid at its own scale): the rules of `tests/nn/kernels_reference.py`.
- LSTM (batch 1): each direction's stored weights and the scales of its inner tensors
  `<node>#lstm<d>.<part>` through `kernels_reference.lstm`, the sequence reversed for a
  backward direction; initial states quantised (stored) or rescaled (feature maps) to the
  direction's state scales, zeros when absent; Y, Y_h, Y_c the hidden and cell codes
  rescaled to their own scales.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from emu.nn.preprocess import ImageInput
from tests.nn import kernels_reference as kr

TYPES = {"int8": np.int8, "int16": np.int16}
PRESERVING = {"MaxPool", "AveragePool", "GlobalAveragePool", "Resize", "Relu", "Clip",
              "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Split"}
LUTS = {"Sigmoid": "sigmoid", "Silu": "silu", "HardSwish": "hardswish"}


def onnx_function(node):
    """ONNX's definition of a LUT op with the node's attributes, over float64 arrays."""
    a = node.attrs
    if node.op == "HardSigmoid":
        return lambda x: kr.hard_sigmoid(x, float(a.get("alpha", 0.2)), float(a.get("beta", 0.5)))
    if node.op == "LeakyRelu":
        return lambda x: np.where(x >= 0, x, float(a.get("alpha", 0.01)) * x)
    if node.op == "Elu":
        return lambda x: np.where(x >= 0, x, float(a.get("alpha", 1.0)) * np.expm1(x))
    if node.op in LUTS:
        return kr.FUNCTIONS[LUTS[node.op]]
    return {"Tanh": np.tanh, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Abs": np.abs,
            "Reciprocal": lambda x: 1.0 / x, "Sin": np.sin, "Cos": np.cos, "Atan": np.arctan,
            "Ceil": np.ceil, "Floor": np.floor,
            "Softplus": lambda x: np.logaddexp(0.0, x)}[node.op]


def quantise(x, scale, dtype):
    lo, hi = kr.type_range(TYPES[dtype])
    flat = [min(max(kr.nearest(Fraction(float(v) / scale)), lo), hi)
            for v in np.asarray(x).reshape(-1).tolist()]
    return np.array(flat, dtype=TYPES[dtype]).reshape(np.shape(x))


def shift_round(v, s):
    """int64 v / 2**s rounded half away from zero (|v| < 2**62)."""
    half = np.int64(1) << np.int64(s - 1)
    magnitude = (np.abs(v) + half) >> np.int64(s)
    return np.where(v < 0, -magnitude, magnitude)


def requantise(acc, reals, dtype, activation="none", out_scale=1.0):
    """acc int64 (N, C, ...) with one real multiplier per channel (or one for all)."""
    acc = np.asarray(acc, np.int64)
    assert acc.min(initial=0) >= -(2**31) and acc.max(initial=0) <= 2**31 - 1
    reals = np.broadcast_to(np.asarray(reals, np.float64), (acc.shape[1],))
    out = np.empty(acc.shape, np.int64)
    for c, real in enumerate(reals.tolist()):
        m0, n = kr.fixed_point(real)
        out[:, c] = shift_round(acc[:, c] * m0, 31 + n)
    lo, hi = kr.type_range(TYPES[dtype])
    out = np.clip(out, lo, hi)
    if activation in ("relu", "relu6"):
        out = np.maximum(out, 0)
    if activation == "relu6":
        out = np.minimum(out, kr.nearest(Fraction(6) / Fraction(out_scale)))
    return out.astype(TYPES[dtype])


def conv_acc(x, w, bias, stride, pads, dilation, groups):
    """bias + sum of x * w in int64, one kernel tap at a time."""
    x = np.asarray(x, np.int64)
    w = np.asarray(w, np.int64)
    n, _, height, width = x.shape
    c_out, c_group, kh, kw = w.shape
    top, left, bottom, right = pads
    oh = kr.out_size(height, kh, stride[0], top, bottom, dilation[0])
    ow = kr.out_size(width, kw, stride[1], left, right, dilation[1])
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    acc = np.zeros((n, c_out, oh, ow), np.int64) + np.asarray(bias, np.int64)[None, :, None, None]
    per_group = c_out // groups
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dilation[0], kx * dilation[1]
            taps = padded[:, :, y0:y0 + (oh - 1) * stride[0] + 1:stride[0],
                          x0:x0 + (ow - 1) * stride[1] + 1:stride[1]]
            if c_group == 1 and per_group == 1:
                acc += taps * w[:, 0, ky, kx][None, :, None, None]
                continue
            for g in range(groups):
                part = taps[:, g * c_group:(g + 1) * c_group]
                weights = w[g * per_group:(g + 1) * per_group, :, ky, kx]
                acc[:, g * per_group:(g + 1) * per_group] += np.einsum(
                    "nchw,oc->nohw", part, weights)
    return acc


def window(node):
    a = node.attrs
    stride = tuple(a.get("strides", (1, 1)))
    dilation = tuple(a.get("dilations", (1, 1)))
    pads = tuple(a.get("pads", (0, 0, 0, 0)))
    assert a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") and not a.get("ceil_mode", 0)
    return stride, pads, dilation


def add(a, b, a_scale, b_scale, out_scale, out_dtype, activation="none"):
    wide = np.int16 if np.int16 in (a.dtype, b.dtype) else np.int8
    left = 20 if wide == np.int8 else 15
    twice = 2.0 * max(a_scale, b_scale)
    ma, na = kr.fixed_point(a_scale / twice)
    mb, nb = kr.fixed_point(b_scale / twice)
    fa = shift_round((a.astype(np.int64) << left) * ma, 31 + na)
    fb = shift_round((b.astype(np.int64) << left) * mb, 31 + nb)
    total = fa + fb
    return requantise(total.reshape(total.shape[0], 1, -1), twice / (out_scale * 2.0**left),
                      out_dtype, activation, out_scale).reshape(total.shape)


def rescale(x, in_scale, out_scale, out_dtype):
    flat = np.asarray(x, np.int64).reshape(x.shape[0], 1, -1)
    return requantise(flat, in_scale / out_scale, out_dtype).reshape(x.shape)


class Segment:
    """One BPU segment of a QuantModel, evaluated from its input codes."""

    def __init__(self, qmodel, index):
        self.q = qmodel
        self.graph = qmodel.graph
        self.segment = qmodel.segments[index]
        assert self.segment.kind == "bpu"

    def scale(self, name):
        return self.q.tensors[name].scale

    def dtype(self, name):
        return self.q.tensors[name].dtype

    def hands_over_accumulators(self, node):
        """Whether this Conv is the last op on the BPU for its output: no activation or
        residual add, int8 input, its output leaves the segment and no BPU node anywhere
        reads it (J5 then hands over the int32 accumulators)."""
        out = node.outputs[0]
        if node.activation != "none" or node.residual or out not in self.segment.outputs:
            return False
        if self.dtype(node.inputs[0]) != "int8":
            return False
        for segment in self.q.segments:
            if segment.kind != "bpu":
                continue
            for name in segment.nodes:
                reader = next(n for n in self.graph.nodes if n.name == name)
                if out in reader.inputs:
                    return False
        return True

    def codes_of(self, name, codes):
        """A tensor's codes; a constant operand's, at the scale the model gives it."""
        if self.graph.is_const(name):
            return quantise(self.graph.tensors[name].value, self.scale(name), self.dtype(name))
        return codes[name]

    def axes(self, node):
        given = node.attrs.get("axes")
        if given is None:
            given = self.graph.tensors[node.inputs[1]].value
        rank = len(self.graph.tensors[node.inputs[0]].shape)
        return tuple(sorted(int(v) % rank for v in np.ravel(given)))

    def resize_scales(self, node):
        """The `scales` input of a Resize (opset 11 on) when given, else None per axis."""
        if len(node.inputs) > 2 and node.inputs[2] and self.graph.is_const(node.inputs[2]):
            value = np.ravel(self.graph.tensors[node.inputs[2]].value)
            if value.size == 4:
                return (float(value[2]), float(value[3]))
        return (None, None)

    def run(self, codes):
        codes = dict(codes)
        nodes = {n.name: n for n in self.graph.nodes}
        for name in self.segment.nodes:
            self.node(nodes[name], codes)
        return codes

    def conv(self, node, x, out, stride, pads, dilation, groups, activation):
        layer = self.q.layers[node.name]
        weight = layer.weight.reshape(layer.weight.shape + (1,) * (4 - layer.weight.ndim))
        acc = conv_acc(x, weight, layer.bias, stride, pads, dilation, groups)
        in_scale, out_scale = self.scale(node.inputs[0]), self.scale(out)
        reals = [in_scale * float(s) / out_scale for s in layer.w_scales.tolist()]
        return requantise(acc, reals, self.dtype(out), activation, self.scale(out))

    def preprocess(self, node, image, out):
        """(256 x pixel - round(256 x mean)) x scale / (256 x out_scale), per channel; the
        colour conversion to pixels is ImageInput.pixels (integer, tested with its module)."""
        a = node.attrs
        spec = ImageInput(a["input_type"], self.graph.tensors[out].shape[1], tuple(a["mean"]),
                          tuple(a["scale"]))
        pixels = spec.pixels(image)
        lo, hi = kr.type_range(TYPES[self.dtype(out)])
        result = np.empty(pixels.shape, TYPES[self.dtype(out)])
        for c, (mean, scale) in enumerate(zip(a["mean"], a["scale"], strict=True)):
            m0, n = kr.fixed_point(scale / (256 * self.scale(out)))
            v = pixels[:, c] * 256 - round(mean * 256)
            result[:, c] = np.clip(shift_round(v * m0, 31 + n), lo, hi)
        return result

    def lstm(self, node, codes):
        g, layer = self.graph, self.q.layers[node.name]
        directions, hidden = layer.weight.shape[0], layer.weight.shape[1] // 4
        x = codes[node.inputs[0]]
        x = x.reshape(x.size // x.shape[-1], 1, x.shape[-1])     # batch 1, either layout
        direction = node.attrs.get("direction", "forward")
        backward = {"forward": [False], "reverse": [True]}.get(direction, [False, True])

        def inner(d, part):
            return self.scale(f"{node.name}#lstm{d}.{part}")

        def initial(slot, part):
            given = node.inputs[slot] if len(node.inputs) > slot else ""
            states = []
            for d in range(directions):
                if not given:
                    states.append(np.zeros((1, hidden), np.int8))
                elif g.is_const(given):
                    value = np.asarray(g.tensors[given].value).reshape(directions, 1, hidden)
                    states.append(quantise(value[d], inner(d, part), "int8"))
                else:
                    value = codes[given].reshape(directions, 1, hidden)
                    states.append(rescale(value[d], self.scale(given), inner(d, part), "int8"))
            return states

        h0, c0 = initial(5, "h"), initial(6, "c")
        ys, last_h, last_c = [], [], []
        for d, back in enumerate(backward):
            scales = {"pre": tuple(inner(d, f"pre_{k}") for k in "iofg"),
                      "gate": tuple(inner(d, k) for k in "iofg"),
                      **{k: inner(d, k) for k in ("forget", "update", "c", "tanh_c", "h")}}
            # h, c of every step in the order the steps ran
            h, c = kr.lstm(x[::-1] if back else x, h0[d], c0[d], layer.weight[d],
                           layer.bias[d], layer.w_scales[d], scales)
            ys.append(h[::-1] if back else h)          # Y in the input's time order
            last_h.append(h[-1])
            last_c.append(c[-1])
        y, y_h, y_c = (*node.outputs, "", "", "")[:3]
        for name, values, part, axis in ((y, ys, "h", 1), (y_h, last_h, "h", 0),
                                         (y_c, last_c, "c", 0)):
            if name:
                parts = [rescale(v, inner(d, part), self.scale(name), "int8")
                         for d, v in enumerate(values)]
                codes[name] = np.stack(parts, axis=axis).reshape(g.tensors[name].shape)

    def node(self, node, codes):
        g, op, a = self.graph, node.op, node.attrs
        out = node.outputs[0]
        x = codes.get(node.inputs[0])
        if op == "LSTM":
            self.lstm(node, codes)
        elif op == "GridSample":
            mode = a.get("mode", "bilinear")
            codes[out] = kr.grid_sample(
                x, self.codes_of(node.inputs[1], codes), self.scale(node.inputs[1]),
                "bilinear" if mode == "linear" else mode, a.get("padding_mode", "zeros"),
                bool(a.get("align_corners", 0)))
        elif op == "Conv":
            stride, pads, dilation = window(node)
            groups = int(a.get("group", 1))
            if node.residual:
                pre = out + "#conv"
                codes[pre] = self.conv(node, x, pre, stride, pads, dilation, groups, "none")
                codes[out] = add(codes[pre], codes[node.residual], self.scale(pre),
                                 self.scale(node.residual), self.scale(out), self.dtype(out),
                                 node.activation)
            elif self.hands_over_accumulators(node):
                layer = self.q.layers[node.name]
                weight = layer.weight.reshape(layer.weight.shape + (1,) * (4 - layer.weight.ndim))
                acc = conv_acc(x, weight, layer.bias, stride, pads, dilation, groups)
                assert acc.min() >= -(2**31) and acc.max() < 2**31
                codes[out] = acc.astype(np.int32)
            else:
                codes[out] = self.conv(node, x, out, stride, pads, dilation, groups,
                                       node.activation)
        elif op == "ConvTranspose":
            kh, kw = self.q.layers[node.name].weight.shape[2:]
            sy, sx = a["strides"]
            p = tuple(a.get("pads", (0, 0, 0, 0)))
            assert not any(a.get("output_padding", (0, 0)))
            n, c, h, w = x.shape
            spread = np.zeros((n, c, (h - 1) * sy + 1, (w - 1) * sx + 1), x.dtype)
            spread[:, :, ::sy, ::sx] = x
            pads = (kh - 1 - p[0], kw - 1 - p[1], kh - 1 - p[2], kw - 1 - p[3])
            codes[out] = self.conv(node, spread, out, (1, 1), pads, (1, 1), 1, "none")
        elif op == "FC":
            y = self.conv(node, x[:, :, None, None], out, (1, 1), (0, 0, 0, 0), (1, 1), 1,
                          "none")
            codes[out] = y[:, :, 0, 0]
        elif node.name not in self.q.layers and (
                op in ("Sub", "Mul", "Div", "Max", "MatMul")
                or (op == "Add" and any(g.is_const(i) for i in node.inputs))):
            a_codes, b_codes = (self.codes_of(n, codes) for n in node.inputs)
            scales = (self.scale(node.inputs[0]), self.scale(node.inputs[1]), self.scale(out))
            if op in ("Add", "Sub"):
                codes[out] = kr.add(a_codes, b_codes, *scales, out_dtype=TYPES[self.dtype(out)],
                                    subtract=op == "Sub")
            elif op == "Mul":
                codes[out] = kr.mul(a_codes, b_codes, *scales, TYPES[self.dtype(out)])
            elif op == "Div":
                codes[out] = kr.div(a_codes, b_codes, *scales, TYPES[self.dtype(out)])
            elif op == "Max":
                codes[out] = kr.extremum(a_codes, b_codes, "max", *scales,
                                         TYPES[self.dtype(out)])
            else:
                codes[out] = kr.matmul(a_codes, b_codes, *scales, out_dtype=TYPES[self.dtype(out)])
        elif op in ("ScaleShift", "Mul") or (op == "Add" and any(g.is_const(i)
                                                                  for i in node.inputs)):
            name = next(i for i in node.inputs if not g.is_const(i))
            v = codes[name]
            shape = g.tensors[out].shape
            layer = self.q.layers[node.name]
            acc = conv_acc(v.reshape(shape[0], shape[1], -1, 1), layer.weight, layer.bias,
                           (1, 1), (0, 0, 0, 0), (1, 1), shape[1])
            reals = [self.scale(name) * float(s) / self.scale(out)
                     for s in layer.w_scales.tolist()]
            codes[out] = requantise(acc, reals, self.dtype(out)).reshape(shape)
        elif op in ("Add", "Sum"):
            names = list(node.inputs)
            total = add(codes[names[0]], codes[names[1]], self.scale(names[0]),
                        self.scale(names[1]), self.scale(out), self.dtype(out))
            for name in names[2:]:
                total = add(total, codes[name], self.scale(out), self.scale(name),
                            self.scale(out), self.dtype(out))
            codes[out] = total
        elif op == "Concat":
            parts = [rescale(codes[n], self.scale(n), self.scale(out), self.dtype(out))
                     for n in node.inputs]
            codes[out] = np.concatenate(parts, axis=int(a["axis"]))
        elif op in LUTS or op in ("HardSigmoid", "LeakyRelu", "Elu", "Tanh", "Exp", "Log", "Sqrt",
                                  "Abs", "Reciprocal", "Sin", "Cos", "Atan", "Ceil", "Floor",
                                  "Softplus"):
            in_type, out_type = TYPES[self.dtype(node.inputs[0])], TYPES[self.dtype(out)]
            table = kr.lut_table(onnx_function(node), self.scale(node.inputs[0]),
                                 self.scale(out), in_type, out_type)
            codes[out] = kr.lut(x, table, out_type)
        elif op in ("GlobalMaxPool", "ReduceMax", "ReduceMean"):
            axes = (2, 3) if op == "GlobalMaxPool" else self.axes(node)
            codes[out] = kr.reduce(x, axes, "mean" if op == "ReduceMean" else "max")
        elif op == "ReduceSum":
            codes[out] = kr.reduce_sum(x, self.axes(node), self.scale(node.inputs[0]),
                                       self.scale(out), TYPES[self.dtype(out)])
        elif op == "Identity":
            codes[out] = x
        elif op in ("MaxPool", "AveragePool"):
            stride, pads, dilation = window(node)
            codes[out] = kr.pool2d(x, tuple(a["kernel_shape"]), stride, pads, dilation,
                                   "max" if op == "MaxPool" else "avg",
                                   bool(a.get("count_include_pad", 0)))
        elif op == "GlobalAveragePool":
            codes[out] = kr.global_avg_pool(x)
        elif op == "Preprocess":
            codes[out] = self.preprocess(node, x, out)
        elif op == "Resize" and a.get("mode", "nearest") == "linear":
            shape = g.tensors[out].shape
            codes[out] = kr.resize_linear(x, shape[2:], str(a.get(
                "coordinate_transformation_mode", "half_pixel")), self.resize_scales(node))
        elif op == "Resize":
            shape = g.tensors[out].shape
            codes[out] = kr.resize_nearest(x, shape[2] // x.shape[2], shape[3] // x.shape[3])
        elif op in ("Relu", "Clip"):
            lo, hi = kr.type_range(x.dtype)
            scale = Fraction(self.scale(node.inputs[0]))
            if op == "Clip":
                low = g.tensors[node.inputs[1]].value if len(node.inputs) > 1 else None
                high = g.tensors[node.inputs[2]].value if len(node.inputs) > 2 else None
                if low is not None:
                    lo = max(lo, kr.nearest(Fraction(float(low)) / scale))
                if high is not None:
                    hi = min(hi, kr.nearest(Fraction(float(high)) / scale))
            else:
                lo = 0
            codes[out] = np.clip(x, lo, hi).astype(x.dtype)
        elif op in ("Flatten", "Reshape", "Squeeze", "Unsqueeze"):
            codes[out] = x.reshape(g.tensors[out].shape)
        elif op == "Transpose":
            codes[out] = x.transpose(a["perm"])
        elif op == "Split":
            axis = int(a.get("axis", 0))
            start = 0
            for name in node.outputs:
                size = g.tensors[name].shape[axis]
                codes[name] = np.take(x, range(start, start + size), axis=axis)
                start += size
        else:
            raise NotImplementedError(op)

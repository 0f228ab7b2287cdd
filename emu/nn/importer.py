"""ONNX -> `Graph`, and the compiler's graph passes (issue 11, the front of `emu compile`).

`load` reads a model (a path, bytes or an `onnx.ModelProto`), runs ONNX shape inference in
strict mode and converts it. Accepted: default-domain opsets 10 to 21 (what onnx 1.23's
shape inference and the J5 toolchain both cover), static shapes on every graph input, a
shape for every tensor after inference. Anything else raises a one-line `InputError`.

`compile_graph` applies the passes in this fixed order; each is a pure Graph -> Graph:

1. `fold_constants`: nodes whose inputs are all constant (and Shape of a static shape)
   are evaluated with NumPy for Constant, ConstantOfShape, Shape, Gather, Concat, Reshape,
   Unsqueeze, Squeeze, Cast, Add, Sub, Mul, Div, Identity, Transpose; other ops stay.
2. `remove_identities`: Dropout (inference) and Identity vanish; readers read the input.
3. `fold_batchnorm`: a BatchNormalization after a Conv (whose output nothing else reads)
   goes into the Conv: w' = w*g/sqrt(v+eps), b' = (b-mean)*g/sqrt(v+eps)+beta, in float64,
   stored float32. Any other BatchNormalization becomes "ScaleShift" (x*scale + shift per
   channel, both constants of shape (C,)).
4. `gemm_to_fc`: Gemm (transA=0) and 2-D MatMul with constant weights become "FC" with
   inputs (x, w[out, in], bias or ""): a 1x1 convolution for the later passes.
5. `fuse_activations`: Conv -> Relu and Conv -> Clip(0, 6) become the Conv's `activation`
   ("relu", "relu6") when the Conv's output has no other reader.
6. `fuse_residuals`: Add(conv, shortcut), where the shortcut is a feature map of the Add's
   shape, becomes the Conv's fourth input (the ResNet shortcut, which the J5 compiler fuses
   into the conv); a Relu after the Add becomes the activation: y = relu(conv(x) + s).
7. `fuse_silu`: Mul(x, Sigmoid(x)) becomes "Silu" (one LUT op later).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from emu.errors import InputError
from emu.nn.graph import Graph, Node, Tensor

MIN_OPSET = 10
MAX_OPSET = 21


def load(source: str | Path | bytes | onnx.ModelProto) -> Graph:
    """The model as a `Graph` (shapes inferred, not yet compiled)."""
    where = "model" if isinstance(source, onnx.ModelProto | bytes) else str(source)
    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        try:
            data = source if isinstance(source, bytes) else Path(source).read_bytes()
        except OSError as exc:
            raise InputError(f"{where}: cannot read: {exc.strerror}") from None
        try:
            model = onnx.load_from_string(data)
        except Exception:  # protobuf's DecodeError and friends
            raise InputError(f"{where}: not an ONNX model (cannot parse it)") from None
        if not model.graph.node:
            raise InputError(f"{where}: not an ONNX model (no graph nodes)")
    opsets = {o.domain: o.version for o in model.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx"))
    if opset is None:
        raise InputError(f"{where}: no default-domain opset import")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise InputError(f"{where}: opset {opset} is outside the supported range "
                         f"{MIN_OPSET}-{MAX_OPSET}")
    foreign = sorted({n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if foreign:
        raise InputError(f"{where}: operators of unsupported domain(s) {', '.join(foreign)}")
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        if not value.type.tensor_type.HasField("shape") or any(
                not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
            raise InputError(f"{where}: input {value.name!r} has a dynamic or missing "
                             "shape; export it with static shapes")
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{where}: shape inference failed: {first}") from None
    return _convert(model, where)


def _dtype(elem_type: int) -> str:
    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


def _attr(value: Any) -> Any:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return tuple(_attr(v) for v in value)
    return value


def _convert(model: onnx.ModelProto, where: str) -> Graph:
    g = model.graph
    tensors: dict[str, Tensor] = {}
    for init in g.initializer:
        value = onnx.numpy_helper.to_array(init)
        tensors[init.name] = Tensor(init.name, tuple(value.shape), str(value.dtype), value)
    for info in list(g.input) + list(g.value_info) + list(g.output):
        if info.name in tensors or not info.type.HasField("tensor_type"):
            continue
        tt = info.type.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            continue
        tensors[info.name] = Tensor(info.name, tuple(d.dim_value for d in tt.shape.dim),
                                    _dtype(tt.elem_type))
    nodes = []
    for k, proto in enumerate(g.node):
        for name in proto.output:
            if name and name not in tensors:
                raise InputError(f"{where}: no static shape for tensor {name!r} "
                                 f"(output of {proto.op_type} {proto.name or k})")
        attrs = {a.name: _attr(onnx.helper.get_attribute_value(a)) for a in proto.attribute}
        nodes.append(Node(proto.name or f"{proto.op_type}_{k}", proto.op_type,
                          tuple(proto.input), tuple(n for n in proto.output if n), attrs))
    inputs = tuple(v.name for v in g.input if not tensors[v.name].is_const)
    graph = Graph(inputs, tuple(v.name for v in g.output), tuple(nodes), tensors)
    graph.validate()
    return graph


# --- constant folding --------------------------------------------------------------------------

def _evaluate(node: Node, ins: list[np.ndarray | None]) -> list[np.ndarray] | None:
    """The outputs of a node of the folding set, or None when it is not in the set."""
    a = node.attrs
    x = ins[0] if ins else None
    op = node.op
    if op == "Constant":
        if "value" not in a:
            return None
        return [np.asarray(a["value"])]
    if x is None:
        return None
    if op == "ConstantOfShape":
        fill = np.asarray(a.get("value", np.zeros(1, np.float32))).reshape(-1)
        return [np.full(tuple(int(d) for d in x), fill[0], dtype=fill.dtype)]
    if op == "Gather":
        assert ins[1] is not None
        return [np.take(x, ins[1].astype(np.int64), axis=a.get("axis", 0))]
    if op == "Concat":
        return [np.concatenate([v for v in ins if v is not None], axis=a["axis"])]
    if op == "Reshape":
        shape = [x.shape[k] if int(d) == 0 else int(d) for k, d in enumerate(ins[1])]  # type: ignore[arg-type]
        return [x.reshape(shape)]
    if op in ("Unsqueeze", "Squeeze"):
        given = a.get("axes") if len(ins) < 2 or ins[1] is None else ins[1]
        axes: tuple[int, ...] | None = (None if given is None
                                        else tuple(int(v) for v in np.ravel(given)))
        if op == "Squeeze":
            return [np.squeeze(x, axis=axes)]
        if axes is None:
            return None
        out = x
        for axis in sorted(int(v) % (x.ndim + len(axes)) for v in axes):
            out = np.expand_dims(out, axis)
        return [out]
    if op == "Cast":
        return [x.astype(onnx.helper.tensor_dtype_to_np_dtype(a["to"]))]
    if op in ("Add", "Sub", "Mul", "Div"):
        y = ins[1]
        assert y is not None
        if op == "Div" and np.issubdtype(x.dtype, np.integer):
            return [np.trunc(x / y).astype(x.dtype)]
        fn: Callable[[np.ndarray, np.ndarray], np.ndarray] = {
            "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
        return [fn(x, y).astype(x.dtype)]
    if op == "Identity":
        return [x]
    if op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    return None


def fold_constants(graph: Graph) -> Graph:
    """Evaluate the nodes whose inputs are all constant (Shape: whose input shape is known)."""
    tensors = dict(graph.tensors)
    kept = []
    for node in graph.nodes:
        outs: list[np.ndarray] | None = None
        if node.op == "Shape":
            shape = np.array(tensors[node.inputs[0]].shape, dtype=np.int64)
            outs = [shape[node.attrs.get("start", 0):node.attrs.get("end")]]
        elif all(not n or tensors[n].is_const for n in node.inputs):
            outs = _evaluate(node, [tensors[n].value if n else None for n in node.inputs])
        if outs is None:
            kept.append(node)
            continue
        for name, value in zip(node.outputs, outs, strict=True):
            old = tensors[name]
            tensors[name] = Tensor(name, tuple(value.shape), str(value.dtype), value)
            if old.shape != tuple(value.shape):
                raise InputError(f"constant folding: {node.op} {node.name} gives shape "
                                 f"{value.shape}, inference said {old.shape}")
    return graph.with_nodes(kept, tensors)


def _rename(graph: Graph, nodes: list[Node], alias: dict[str, str]) -> Graph:
    def target(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name
    renamed = [Node(n.name, n.op, tuple(target(i) for i in n.inputs), n.outputs, n.attrs)
               for n in nodes]
    return graph.with_nodes(renamed, outputs=[target(o) for o in graph.outputs])


def remove_identities(graph: Graph) -> Graph:
    """Drop Dropout and Identity nodes; their readers read the input instead."""
    alias = {}
    kept = []
    for node in graph.nodes:
        if node.op in ("Dropout", "Identity") and node.inputs[0]:
            alias[node.outputs[0]] = node.inputs[0]
            if len(node.outputs) > 1 and graph.consumers().get(node.outputs[1]):
                kept.append(node)  # the mask is read: leave it
                alias.pop(node.outputs[0])
        else:
            kept.append(node)
    return _rename(graph, kept, alias)


def _single_reader(graph: Graph, name: str, readers: dict[str, list[Node]]) -> Node | None:
    users = readers.get(name, [])
    return users[0] if len(users) == 1 and name not in graph.outputs else None


def fold_batchnorm(graph: Graph) -> Graph:
    """BatchNormalization into the Conv before it, or a standalone ScaleShift."""
    tensors = dict(graph.tensors)
    readers = graph.consumers()
    producers = graph.producers()
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        if node.op != "BatchNormalization" or not all(graph.is_const(n)
                                                       for n in node.inputs[1:5]):
            continue
        gamma, beta, mean, var = (np.asarray(tensors[n].value, np.float64)
                                  for n in node.inputs[1:5])
        factor = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        conv = producers.get(node.inputs[0])
        if (conv is not None and conv.op == "Conv" and conv.name not in replaced
                and graph.is_const(conv.inputs[1])
                and (len(conv.inputs) < 3 or not conv.inputs[2] or graph.is_const(conv.inputs[2]))
                and _single_reader(graph, conv.outputs[0], readers) is node):
            w = np.asarray(tensors[conv.inputs[1]].value, np.float64)
            bias_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
            b = (np.asarray(tensors[bias_name].value, np.float64) if bias_name
                 else np.zeros(w.shape[0]))
            w2 = (w * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
            b2 = ((b - mean) * factor + beta).astype(np.float32)
            wn, bn = f"{conv.name}.bn_weight", f"{conv.name}.bn_bias"
            tensors[wn] = Tensor(wn, tuple(w2.shape), "float32", w2)
            tensors[bn] = Tensor(bn, tuple(b2.shape), "float32", b2)
            replaced[conv.name] = Node(conv.name, "Conv", (conv.inputs[0], wn, bn),
                                       node.outputs[:1], conv.attrs)
            dropped.add(node.name)
        else:
            scale = factor.astype(np.float32)
            shift = (beta - mean * factor).astype(np.float32)
            sn, hn = f"{node.name}.scale", f"{node.name}.shift"
            tensors[sn] = Tensor(sn, tuple(scale.shape), "float32", scale)
            tensors[hn] = Tensor(hn, tuple(shift.shape), "float32", shift)
            replaced[node.name] = Node(node.name, "ScaleShift", (node.inputs[0], sn, hn),
                                       node.outputs[:1], {})
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return graph.with_nodes(nodes, tensors)


def gemm_to_fc(graph: Graph) -> Graph:
    """Gemm / 2-D MatMul with constant weights -> FC(x, w[out, in], bias)."""
    tensors = dict(graph.tensors)
    nodes = []
    for node in graph.nodes:
        x = tensors[node.inputs[0]] if node.inputs else None
        if (node.op in ("Gemm", "MatMul") and x is not None and len(x.shape) == 2
                and graph.is_const(node.inputs[1]) and not node.attrs.get("transA", 0)
                and (len(node.inputs) < 3 or not node.inputs[2] or graph.is_const(node.inputs[2]))):
            w = np.asarray(tensors[node.inputs[1]].value, np.float64)
            if w.ndim != 2:
                nodes.append(node)
                continue
            w = w if node.attrs.get("transB", 0) else w.T
            w = w * float(node.attrs.get("alpha", 1.0))
            out = w.shape[0]
            bias = np.zeros(out)
            if len(node.inputs) > 2 and node.inputs[2]:
                c = np.asarray(tensors[node.inputs[2]].value, np.float64)
                if c.size not in (1, out):
                    nodes.append(node)
                    continue
                bias = np.broadcast_to(c.reshape(-1), (out,)) * float(node.attrs.get("beta", 1.0))
            wn, bn = f"{node.name}.fc_weight", f"{node.name}.fc_bias"
            tensors[wn] = Tensor(wn, tuple(w.shape), "float32", w.astype(np.float32))
            tensors[bn] = Tensor(bn, (out,), "float32", bias.astype(np.float32))
            nodes.append(Node(node.name, "FC", (node.inputs[0], wn, bn), node.outputs, {}))
        else:
            nodes.append(node)
    return graph.with_nodes(nodes, tensors)


def _clip_bounds(graph: Graph, node: Node) -> tuple[float, float]:
    low, high = node.attrs.get("min", -math.inf), node.attrs.get("max", math.inf)
    for k, default in ((1, low), (2, high)):
        if len(node.inputs) > k and node.inputs[k]:
            if not graph.is_const(node.inputs[k]):
                return (math.nan, math.nan)
            value = float(np.asarray(graph.tensors[node.inputs[k]].value).reshape(-1)[0])
            low, high = (value, high) if k == 1 else (low, value)
        else:
            low, high = (default, high) if k == 1 else (low, default)
    return (float(low), float(high))


def _activation(graph: Graph, node: Node) -> str | None:
    if node.op == "Relu":
        return "relu"
    if node.op == "Clip" and _clip_bounds(graph, node) == (0.0, 6.0):
        return "relu6"
    return None


def fuse_activations(graph: Graph) -> Graph:
    """Conv -> Relu / Clip(0, 6) becomes one Conv with `activation`."""
    readers = graph.consumers()
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        if node.op != "Conv" or node.attrs.get("activation", "none") != "none" or node.residual:
            continue
        act = _single_reader(graph, node.outputs[0], readers)
        kind = _activation(graph, act) if act is not None else None
        if act is None or kind is None:
            continue
        fused[node.name] = Node(node.name, "Conv", node.inputs, act.outputs,
                                {**node.attrs, "activation": kind})
        dropped.add(act.name)
    nodes = [fused.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return graph.with_nodes(nodes)


def fuse_residuals(graph: Graph) -> Graph:
    """Add(conv, shortcut) [-> Relu] becomes Conv(x, w, b, shortcut, activation)."""
    readers = graph.consumers()
    producers = graph.producers()
    order = {n.name: k for k, n in enumerate(graph.nodes)}
    taken: set[str] = set()
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for add in graph.nodes:
        if add.op != "Add" or len(add.inputs) != 2 or any(graph.is_const(n) for n in add.inputs):
            continue
        shape = graph.tensors[add.outputs[0]].shape
        if any(graph.tensors[n].shape != shape for n in add.inputs):
            continue
        candidates = []
        for k, name in enumerate(add.inputs):
            conv = producers.get(name)
            if (conv is not None and conv.op == "Conv" and conv.name not in taken
                    and conv.attrs.get("activation", "none") == "none" and not conv.residual
                    and _single_reader(graph, name, readers) is add):
                candidates.append((order[conv.name], conv, add.inputs[1 - k]))
        if not candidates:
            continue
        _, conv, shortcut = max(candidates, key=lambda c: c[0])  # the later conv: its
        # shortcut is written before it
        outputs, activation = add.outputs, "none"
        after = _single_reader(graph, add.outputs[0], readers)
        kind = _activation(graph, after) if after is not None else None
        if after is not None and kind is not None:
            outputs, activation = after.outputs, kind
            dropped.add(after.name)
        bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
        fused[conv.name] = Node(conv.name, "Conv", (conv.inputs[0], conv.inputs[1], bias,
                                                    shortcut), outputs,
                                {**conv.attrs, "activation": activation})
        taken.add(conv.name)
        dropped.add(add.name)
    nodes = [fused.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return graph.with_nodes(nodes)


def fuse_silu(graph: Graph) -> Graph:
    """Mul(x, Sigmoid(x)) -> Silu(x)."""
    readers = graph.consumers()
    producers = graph.producers()
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for mul in graph.nodes:
        if mul.op != "Mul" or len(mul.inputs) != 2:
            continue
        for k, name in enumerate(mul.inputs):
            sig = producers.get(name)
            x = mul.inputs[1 - k]
            if (sig is not None and sig.op == "Sigmoid" and sig.inputs[0] == x
                    and _single_reader(graph, name, readers) is mul):
                fused[mul.name] = Node(mul.name, "Silu", (x,), mul.outputs, {})
                dropped.add(sig.name)
                break
    nodes = [fused.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return graph.with_nodes(nodes)


PASSES: tuple[Callable[[Graph], Graph], ...] = (
    fold_constants, remove_identities, fold_batchnorm, gemm_to_fc, fuse_activations,
    fuse_residuals, fuse_silu)


def compile_graph(graph: Graph) -> Graph:
    """The passes of `PASSES`, in that order."""
    for step in PASSES:
        graph = step(graph)
    return graph

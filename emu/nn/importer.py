"""ONNX -> `Graph`, and the compiler's graph passes (issue 11, the front of `emu compile`).

`load` reads a model (a path, bytes or an `onnx.ModelProto`) and converts it. Opsets: J5's
toolchain takes default-domain opsets 10 to 21. A model below 10 is converted up to 13
(the zoo's opset) with `onnx.version_converter`, and `notes` receives one line saying so;
a model newer than 21 that the installed onnx package knows is read with its own opset's
definitions (said in `notes` too) rather than converted down, because converting down can
change what an op computes (MaxPool's ceil_mode rule changed at opset 22); a model the
converter cannot convert is refused naming the operator. Then ONNX shape inference runs
in strict mode. Accepted besides: static shapes on every graph input, a shape for every
tensor after inference, a Reshape keeping its element count (inference takes a constant
shape input on trust). Anything else raises a one-line `InputError`.

`compile_graph` applies the passes in this fixed order; each is a pure Graph -> Graph, and
none renames a graph output:

1. `fold_constants`: nodes whose inputs are all constant (and Shape and Size of a static
   shape, CastLike of a constant) are evaluated: with NumPy for Constant,
   ConstantOfShape, Shape, Gather, Concat, Reshape, Unsqueeze, Squeeze, Cast, Add, Sub,
   Mul, Div, Identity, Transpose, with the operator's ONNX definition
   (`reference.reference_node`) for any other, except the random generators.
2. `remove_identities`: Dropout (inference; its mask, all true, becomes a constant) and
   Identity vanish; readers read the input. One
   whose output is a graph output and whose input is a graph input or another graph output
   stays, as Identity, so the output keeps its name; otherwise the node writing the input
   writes the output name instead.
3. `fold_batchnorm`: a BatchNormalization after a Conv (whose output nothing else reads)
   goes into the Conv: w' = w*g/sqrt(v+eps), b' = (b-mean)*g/sqrt(v+eps)+beta, in float64,
   stored float32. Any other BatchNormalization becomes "ScaleShift" (x*scale + shift per
   channel, both constants of shape (C,)).
4. `gemm_to_fc`: Gemm (transA=0) and 2-D MatMul with constant weights become "FC" with
   inputs (x, w[out, in], bias or ""): a 1x1 convolution for the later passes.
   `fc_over_maps`: an FC reading a flattened N x C x H x W map (Flatten, or Reshape to
   N x CHW) becomes a Conv with an H x W kernel over the map and a Reshape to N x out, as
   J5's toolchain maps Gemm (the same products, so the same function), which keeps wide
   classifiers (AlexNet's 9216, VGG's 25088 inputs) within the conv's channel limit.
   `constant_divisors`: Div by a float constant becomes Mul by its reciprocal and Sub of a
   constant becomes Add of its negation (J5 divides only feature maps; this is what its
   toolchain does with a constant divisor).
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
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.external_data_helper
import onnx.version_converter

from emu.errors import InputError
from emu.nn import reference
from emu.nn.graph import Graph, Node, Tensor

MIN_OPSET = 10
MAX_OPSET = 21
CONVERT_UP_TO = 13  # the opset a model below MIN_OPSET is converted to (the zoo's)
# Models newer than MAX_OPSET keep their opset (see the module docstring).
_RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                     "Multinomial", "Bernoulli"})


def convert_opset(model: onnx.ModelProto, opset: int, where: str) -> onnx.ModelProto:
    """The model converted to `opset` by onnx's version converter, or a one-line error
    naming the operator it could not convert. The converter resolves every name through
    the graph inputs (as IR versions before 4 required), so initializers are listed as
    inputs while it runs."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    listed = {v.name for v in work.graph.input}
    extra = [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
             for t in work.graph.initializer if t.name not in listed]
    work.graph.input.extend(extra)
    try:
        converted = onnx.version_converter.convert_version(work, opset)
    except Exception as exc:  # the converter raises RuntimeError and friends
        text = " ".join(str(exc).split())
        ops = sorted({n.op_type for n in model.graph.node if n.op_type in text})
        named = f" (operator {', '.join(ops)})" if ops else ""
        raise InputError(f"{where}: cannot convert opset to {opset}{named}: "
                         f"{text[:200]}") from None
    added = {v.name for v in extra}
    kept = [v for v in converted.graph.input if v.name not in added]
    del converted.graph.input[:]
    converted.graph.input.extend(kept)
    return converted


def read_model(source: str | Path | bytes, where: str) -> onnx.ModelProto:
    """The ONNX model in file `source` (or these bytes), with the weights it keeps in
    external files read from the model's own folder (onnx refuses a location outside it)."""
    try:
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
    except OSError as exc:
        raise InputError(f"{where}: cannot read: {exc.strerror}") from None
    try:
        model = onnx.load_from_string(data)
    except Exception:  # protobuf's DecodeError and friends
        raise InputError(f"{where}: not an ONNX model (cannot parse it)") from None
    if not isinstance(source, bytes) and external_initializers(model):
        try:
            onnx.external_data_helper.load_external_data_for_model(
                model, str(Path(source).resolve().parent))
        except Exception as exc:  # onnx's ValidationError, OSError, ...
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise InputError(f"{where}: cannot read its external data: {first}") from None
    return model


def external_initializers(model: onnx.ModelProto) -> list[str]:
    """The names of the initializers whose data is still in external files."""
    return [t.name for t in model.graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL]


def load(source: str | Path | bytes | onnx.ModelProto, notes: list[str] | None = None,
         where: str | None = None) -> Graph:
    """The model as a `Graph` (shapes inferred, not yet compiled); a line about anything
    done to it on the way (an opset conversion) is appended to `notes`. `where` names the
    model in messages (default: its path, or "model")."""
    if where is None:
        where = "model" if isinstance(source, onnx.ModelProto | bytes) else str(source)
    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        model = read_model(source, where)
        if not model.graph.node:
            raise InputError(f"{where}: not an ONNX model (no graph nodes)")
    outside = external_initializers(model)
    if outside:
        raise InputError(f"{where}: initializer {outside[0]!r} keeps its data in an external "
                         "file; give the model as a file, whose folder holds that data")
    opsets = {o.domain: o.version for o in model.opset_import}
    opset = opsets.get("", opsets.get("ai.onnx"))
    if opset is None:
        raise InputError(f"{where}: no default-domain opset import")
    foreign = sorted({f"{n.op_type} ({n.domain})" for n in model.graph.node
                      if n.domain not in ("", "ai.onnx")})
    if foreign:
        raise InputError(f"{where}: operator(s) of a domain other than ONNX's: "
                         f"{', '.join(foreign)}")
    if opset < MIN_OPSET or opset > onnx.defs.onnx_opset_version():
        target = CONVERT_UP_TO if opset < MIN_OPSET else onnx.defs.onnx_opset_version()
        model = convert_opset(model, target, where)
        if notes is not None:
            notes.append(f"{where}: converted from opset {opset} to {target} "
                         "(onnx.version_converter)")
        opset = target
    elif opset > MAX_OPSET and notes is not None:
        notes.append(f"{where}: opset {opset} is newer than J5's {MIN_OPSET}-{MAX_OPSET}; "
                     "read with that opset's definitions")
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        if not value.type.tensor_type.HasField("shape") or any(
                not d.HasField("dim_value") or d.dim_value < 0 for d in dims):
            raise InputError(f"{where}: input {value.name!r} has a dynamic or missing "
                             "shape; export it with static shapes")
    try:
        shapes = inferred_shapes(model)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{where}: shape inference failed: {first}") from None
    return _convert(model, shapes.graph, where, opset)


SHAPE_ONLY_ELEMENTS = 1024
"""Initializers of more elements go to shape inference by type and shape only (see
`inferred_shapes`). The values that set a shape (Reshape's target, Slice's bounds, Pad's
amounts, Resize's scales or sizes, Expand's, Tile's, Range's and TopK's arguments) take
a few elements each, at most two a dimension."""


def inferred_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's strict shape inference of `model`, without its weights: a model with the
    graph's nodes, its inputs, outputs and value_info as inferred, and its initializers up
    to `SHAPE_ONLY_ELEMENTS` elements; each larger one is a graph input of its type and
    shape. `model` is left unchanged.

    onnx's inference copies the whole model to C++ and the result back, weights and all:
    for ResNet-50 at 224 x 224 (100 MB) 0.48 s, nearly all of it copying, against 5 ms
    without the weights. Only the small shape-giving tensors' values matter to it. An
    initializer the graph also declares as an input (the form of IR versions below 4) is
    passed whole, so that its declaration is read as before."""
    graph = model.graph
    declared = {v.name for v in graph.input}
    light = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                            functions=model.functions)
    kept = light.graph
    kept.node.extend(graph.node)
    kept.input.extend(graph.input)
    kept.output.extend(graph.output)
    kept.value_info.extend(graph.value_info)
    kept.sparse_initializer.extend(graph.sparse_initializer)
    for init in graph.initializer:
        if init.name in declared or math.prod(init.dims) <= SHAPE_ONLY_ELEMENTS:
            kept.initializer.append(init)
        else:
            kept.input.append(onnx.helper.make_tensor_value_info(
                init.name, init.data_type, list(init.dims)))
    return onnx.shape_inference.infer_shapes(light, strict_mode=True)


# NumPy's own numeric and boolean element types: ONNX's others (strings, bfloat16, the
# float8, int4 and float4 kinds) are nothing the BPU or emu's CPU computes with.
_NUMPY_KINDS = frozenset("biufc?")


def _dtype(elem_type: int, name: str = "", where: str = "model") -> str:
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    if dtype.kind not in _NUMPY_KINDS:
        raise InputError(f"{where}: tensor {name!r} has ONNX type "
                         f"{onnx.TensorProto.DataType.Name(elem_type)}, which emu does not "
                         "compute with")
    return str(dtype)


def _attr(value: Any) -> Any:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return tuple(_attr(v) for v in value)
    return value


MAX_TENSOR_BYTES = 1 << 30
"""The largest tensor a model may declare: the J5 preset's whole ION pool (`mem.pool_bytes`,
1 GiB), where hbDNN keeps a model's tensors. Checked on the shapes before anything is made,
so a few bytes of ONNX declaring a 32768 x 32768 input are refused, not allocated."""


def _check_sizes(tensors: dict[str, Tensor], where: str) -> None:
    for t in tensors.values():
        nbytes = math.prod(t.shape) * np.dtype(t.dtype).itemsize
        if nbytes > MAX_TENSOR_BYTES:
            raise InputError(f"{where}: tensor {t.name!r} of shape {t.shape} {t.dtype} takes "
                             f"{nbytes:,} B; emu compiles tensors of up to "
                             f"{MAX_TENSOR_BYTES:,} B (the J5's 1 GiB ION pool)")


def _convert(model: onnx.ModelProto, shapes: onnx.GraphProto, where: str,
             opset: int) -> Graph:
    """`model` as a Graph, with the shapes of `shapes` (its graph as `inferred_shapes` gave
    it)."""
    g = model.graph
    tensors: dict[str, Tensor] = {}
    for init in g.initializer:
        value = onnx.numpy_helper.to_array(init)
        tensors[init.name] = Tensor(init.name, tuple(value.shape), str(value.dtype), value)
    for info in list(shapes.input) + list(shapes.value_info) + list(shapes.output):
        if info.name in tensors or not info.type.HasField("tensor_type"):
            continue
        tt = info.type.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            continue
        tensors[info.name] = Tensor(info.name, tuple(d.dim_value for d in tt.shape.dim),
                                    _dtype(tt.elem_type, info.name, where))
    _check_sizes(tensors, where)
    nodes = []
    for k, proto in enumerate(g.node):
        for name in proto.output:
            if name and name not in tensors:
                raise InputError(f"{where}: no static shape for tensor {name!r} "
                                 f"(output of {proto.op_type} {proto.name or k})")
        attrs = {a.name: _attr(onnx.helper.get_attribute_value(a)) for a in proto.attribute}
        outputs = list(proto.output)
        while outputs and not outputs[-1]:
            outputs.pop()  # omitted trailing outputs; an omitted one before others stays ""
        nodes.append(Node(proto.name or f"{proto.op_type}_{k}", proto.op_type,
                          tuple(proto.input), tuple(outputs), attrs))
    inputs = tuple(v.name for v in g.input if not tensors[v.name].is_const)
    graph = Graph(inputs, tuple(v.name for v in g.output), tuple(nodes), tensors, opset)
    graph.validate()
    for node in graph.nodes:
        _check_reshape(graph, node, where)
    return graph


def _check_reshape(graph: Graph, node: Node, where: str) -> None:
    """InputError for a Reshape to a shape of another element count, which ONNX shape
    inference takes on trust from the shape input (a constant [4, 512] on 512 values)."""
    if node.op != "Reshape" or not node.inputs or not node.outputs:
        return
    before = math.prod(graph.tensors[node.inputs[0]].shape)
    after = math.prod(graph.tensors[node.outputs[0]].shape)
    if before != after:
        raise InputError(f"{where}: Reshape {node.name} turns {before:,} values of shape "
                         f"{list(graph.tensors[node.inputs[0]].shape)} into shape "
                         f"{list(graph.tensors[node.outputs[0]].shape)} ({after:,} values)")


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
    """Evaluate the nodes whose inputs are all constant (Shape and Size: whose input shape
    is known)."""
    tensors = dict(graph.tensors)
    kept = []
    for node in graph.nodes:
        outs: list[np.ndarray] | None = None
        if node.op == "Shape":
            shape = np.array(tensors[node.inputs[0]].shape, dtype=np.int64)
            outs = [shape[node.attrs.get("start", 0):node.attrs.get("end")]]
        elif node.op == "Size":
            outs = [np.array(math.prod(tensors[node.inputs[0]].shape), dtype=np.int64)]
        elif node.op == "CastLike" and tensors[node.inputs[0]].is_const:
            # a constant cast to the type of the second input, which is known statically
            value = np.asarray(tensors[node.inputs[0]].value)
            outs = [value.astype(tensors[node.inputs[1]].dtype)]
        elif node.op not in _RANDOM and all(not n or tensors[n].is_const
                                            for n in node.inputs):
            ins = [tensors[n].value if n else None for n in node.inputs]
            outs = _evaluate(node, ins)
            if outs is None:
                outs = reference.reference_node(graph.opset, node, ins)
        if outs is None:
            kept.append(node)
            continue
        for name, value in zip(node.outputs, outs, strict=True):
            old = tensors[name]
            value = np.asarray(value)
            tensors[name] = Tensor(name, tuple(value.shape), str(value.dtype), value)
            if old.shape != tuple(value.shape):
                raise InputError(f"constant folding: {node.op} {node.name} gives shape "
                                 f"{value.shape}, inference said {old.shape}")
    return graph.with_nodes(kept, tensors)


def _training(graph: Graph, node: Node) -> bool:
    """A Dropout whose training_mode input is not a constant false."""
    if node.op != "Dropout" or len(node.inputs) < 3 or not node.inputs[2]:
        return False
    flag = graph.tensors[node.inputs[2]].value
    return flag is None or bool(np.asarray(flag).any())


def remove_identities(graph: Graph) -> Graph:
    """Drop Dropout and Identity nodes; their readers read the input instead, and a graph
    output they wrote keeps its name (see the module)."""
    readers = graph.consumers()
    producers = graph.producers()
    outputs = set(graph.outputs)
    alias: dict[str, str] = {}
    renamed: dict[str, str] = {}  # a node's output -> the graph output name it now writes
    kept = []
    tensors = dict(graph.tensors)
    for node in graph.nodes:
        if node.op not in ("Dropout", "Identity") or not node.inputs[0] or _training(graph, node):
            kept.append(node)  # a Dropout in training mode stays (and is refused)
            continue
        if len(node.outputs) > 1 and node.outputs[1]:  # inference: the mask keeps everything
            mask = tensors[node.outputs[1]]
            tensors[mask.name] = replace(mask, value=np.ones(mask.shape, bool))
        source, out = node.inputs[0], node.outputs[0]
        while source in alias:
            source = alias[source]
        writer = producers.get(source)
        if out not in outputs:
            alias[out] = renamed.get(source, source)
        elif (writer is not None and source not in outputs and source not in renamed
              and all(r is node for r in readers.get(source, []))):
            renamed[source] = out
        else:
            kept.append(Node(node.name, "Identity", (source,), (out,), {}))
    def target(name: str) -> str:
        while name in alias:
            name = alias[name]
        return renamed.get(name, name)
    nodes = [Node(n.name, n.op, tuple(target(i) for i in n.inputs),
                  tuple(renamed.get(o, o) for o in n.outputs), n.attrs) for n in kept]
    for old, new in renamed.items():
        tensors[new] = replace(tensors[old], name=new)
    return graph.with_nodes(nodes, tensors, outputs=[target(o) for o in graph.outputs])


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
                                                       for n in node.inputs[1:5]) \
                or len(node.outputs) > 1 or node.attrs.get("training_mode", 0):
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


def _const(tensors: dict[str, Tensor], name: str, value: np.ndarray) -> str:
    tensors[name] = Tensor(name, tuple(value.shape), str(value.dtype), value)
    return name


def _fc_parts(graph: Graph, node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(w[out, in], bias[out]) in float64 of a Gemm / MatMul with constant weights that an
    FC computes, or None."""
    if node.op not in ("Gemm", "MatMul") or not graph.is_const(node.inputs[1]) \
            or node.attrs.get("transA", 0):
        return None
    w = np.asarray(graph.tensors[node.inputs[1]].value, np.float64)
    if w.ndim != 2 or not np.issubdtype(w.dtype, np.floating):
        return None
    w = (w if node.attrs.get("transB", 0) else w.T) * float(node.attrs.get("alpha", 1.0))
    out = w.shape[0]
    bias = np.zeros(out)
    if len(node.inputs) > 2 and node.inputs[2]:
        if not graph.is_const(node.inputs[2]):
            return None
        c = np.asarray(graph.tensors[node.inputs[2]].value, np.float64)
        if c.size not in (1, out) or (c.ndim == 2 and c.shape[0] != 1) or c.ndim > 2:
            return None
        bias = np.broadcast_to(c.reshape(-1), (out,)) * float(node.attrs.get("beta", 1.0))
    return w, bias


def gemm_to_fc(graph: Graph) -> Graph:
    """Gemm / MatMul with constant 2-D weights -> FC(x, w[out, in], bias); a MatMul of a
    3-D or higher x (nn.Linear on tokens) is the FC of x viewed as rows, between two
    Reshapes."""
    tensors = dict(graph.tensors)
    nodes = []
    for node in graph.nodes:
        parts = _fc_parts(graph, node)
        x = tensors[node.inputs[0]].shape if node.inputs else ()
        if parts is None or len(x) < 2 or (node.op == "Gemm" and len(x) != 2):
            nodes.append(node)
            continue
        w, bias = parts
        wn = _const(tensors, f"{node.name}.fc_weight", w.astype(np.float32))
        bn = _const(tensors, f"{node.name}.fc_bias", bias.astype(np.float32))
        if len(x) == 2:
            nodes.append(Node(node.name, "FC", (node.inputs[0], wn, bn), node.outputs, {}))
            continue
        rows = (math.prod(x[:-1]), x[-1])
        y = node.outputs[0]
        flat_in, flat_out = f"{node.name}.rows", f"{node.name}.fc_rows"
        tensors[flat_in] = Tensor(flat_in, rows, tensors[node.inputs[0]].dtype)
        tensors[flat_out] = Tensor(flat_out, (rows[0], w.shape[0]), tensors[y].dtype)
        nodes += [
            Node(f"{node.name}.to_rows", "Reshape",
                 (node.inputs[0], _const(tensors, f"{node.name}.rows_shape",
                                         np.array(rows, np.int64))), (flat_in,), {}),
            Node(node.name, "FC", (flat_in, wn, bn), (flat_out,), {}),
            Node(f"{node.name}.from_rows", "Reshape",
                 (flat_out, _const(tensors, f"{node.name}.out_shape",
                                   np.array(tensors[y].shape, np.int64))), (y,), {})]
    return graph.with_nodes(nodes, tensors)


def fc_over_maps(graph: Graph) -> Graph:
    """FC(Flatten(x)) of an N x C x H x W map x -> Reshape(Conv(x, w as C x H x W kernels))."""
    tensors = dict(graph.tensors)
    producers = graph.producers()
    nodes = []
    flattens = set()
    for node in graph.nodes:
        flat = producers.get(node.inputs[0]) if node.op == "FC" else None
        x = tensors[flat.inputs[0]].shape if flat is not None else ()
        if (flat is None or flat.op not in ("Flatten", "Reshape") or len(x) != 4
                or x[2] * x[3] == 1 or tensors[node.inputs[0]].shape != (x[0], math.prod(x[1:]))):
            nodes.append(node)
            continue
        weight = tensors[node.inputs[1]].value
        assert weight is not None
        kernel = _const(tensors, f"{node.name}.conv_weight",
                        np.ascontiguousarray(weight.reshape(weight.shape[0], *x[1:])))
        y = node.outputs[0]
        conv_out = f"{node.name}.conv"
        tensors[conv_out] = Tensor(conv_out, (x[0], weight.shape[0], 1, 1), tensors[y].dtype)
        nodes += [Node(node.name, "Conv", (flat.inputs[0], kernel, node.inputs[2]),
                       (conv_out,), {"kernel_shape": (x[2], x[3])}),
                  Node(f"{node.name}.flatten", "Reshape",
                       (conv_out, _const(tensors, f"{node.name}.out_shape",
                                         np.array(tensors[y].shape, np.int64))), (y,), {})]
        flattens.add(flat.name)
    read = {name for n in nodes for name in n.inputs} | set(graph.outputs)
    nodes = [n for n in nodes if n.name not in flattens or n.outputs[0] in read]
    return graph.with_nodes(nodes, tensors)


def constant_divisors(graph: Graph) -> Graph:
    """Div(x, c) -> Mul(x, 1 / c) and Sub(x, c) -> Add(x, -c) for a float constant c."""
    tensors = dict(graph.tensors)
    nodes = []
    for node in graph.nodes:
        c = tensors[node.inputs[1]] if node.op in ("Div", "Sub") else None
        if (c is None or c.value is None or graph.is_const(node.inputs[0])
                or not c.dtype.startswith("float")):
            nodes.append(node)
            continue
        value = np.asarray(c.value)
        if node.op == "Div":
            with np.errstate(divide="ignore"):
                changed = (np.float32(1) / value).astype(value.dtype)
            op = "Mul"
        else:
            changed, op = -value, "Add"
        name = _const(tensors, f"{node.name}.{op.lower()}_const", changed)
        nodes.append(Node(node.name, op, (node.inputs[0], name), node.outputs, node.attrs))
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


def _conv2d(graph: Graph, node: Node) -> bool:
    """A 2-D Conv (4-D weights): the only one the fused forms (activation, residual) take."""
    return node.op == "Conv" and len(graph.tensors[node.inputs[1]].shape) == 4


def fuse_activations(graph: Graph) -> Graph:
    """Conv -> Relu / Clip(0, 6) becomes one Conv with `activation`."""
    readers = graph.consumers()
    fused: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        if not _conv2d(graph, node) or node.attrs.get("activation", "none") != "none" \
                or node.residual:
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
            if (conv is not None and _conv2d(graph, conv) and conv.name not in taken
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
    fold_constants, remove_identities, constant_divisors, fold_batchnorm, gemm_to_fc,
    fc_over_maps, fuse_activations, fuse_residuals, fuse_silu)


def compile_graph(graph: Graph, *, fc_as_conv: bool = True) -> Graph:
    """The passes of `PASSES`, in that order; without `fc_as_conv`, FCs over flattened maps
    stay FCs (for a device that runs fully connected layers as such: the DV700)."""
    for step in PASSES:
        if fc_as_conv or step is not fc_over_maps:
            graph = step(graph)
    return graph

"""emu.nn.importer: ONNX loading, its errors, and the graph passes (checked numerically
against onnxruntime on the original models)."""

from __future__ import annotations

import functools
import importlib
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from emu.errors import InputError
from emu.nn import importer, reference, zoo
from emu.nn.graph import Graph

SIZE = (64, 64)


# The last two networks only, as tests/nn/test_zoo.py keeps them (every one at once held
# this process at 1.66 GB).
@functools.lru_cache(maxsize=2)
def _build(name: str) -> onnx.ModelProto:
    return zoo.build(name) if name.startswith("onnx_") else zoo.build(name, SIZE)


def run_graph(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The IR's outputs from the float reference (checked against onnxruntime op by op in
    tests/nn/test_zoo.py and tests/nn/test_onnxruntime_agreement.py)."""
    outputs = reference.run_float(graph, feeds)
    return [outputs[name] for name in graph.outputs]


# the big ones (large weights or many nodes) only with -m slow
SLOW = ("resnet50", "yolov8s", "onnx_densenet121", "onnx_vgg19", "onnx_zfnet512",
        "onnx_bvlc_alexnet")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in zoo.names()])
def test_every_zoo_model_imports_and_compiles(name):
    model = _build(name)
    before = model.SerializeToString()
    graph = importer.load(model)
    assert model.SerializeToString() == before  # the caller's model is left alone
    _light_matches_full(model)
    compiled = importer.compile_graph(graph)
    compiled.validate()
    before, after = graph.ops(), compiled.ops()
    assert len(compiled.nodes) < len(graph.nodes)
    for gone in ("BatchNormalization", "Dropout", "Identity", "Constant", "Gemm"):
        assert gone not in after, after
    producers = compiled.producers()
    for node in compiled.nodes:
        if node.op == "ScaleShift":  # a BN kept standalone: no single-reader Conv before it
            conv = producers.get(node.inputs[0])
            assert conv is None or conv.op != "Conv" or node.inputs[0] in compiled.outputs \
                or len(compiled.consumers()[node.inputs[0]]) > 1
    if before.get("BatchNormalization") and name.startswith(("resnet", "mobilenet")):
        assert "ScaleShift" not in after


def test_resnet18_fusion_counts():
    graph = importer.load(_build("resnet18"))
    compiled = importer.compile_graph(graph)
    assert graph.ops() == {"Conv": 20, "BatchNormalization": 20, "Relu": 17, "MaxPool": 1,
                           "Add": 8, "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1}
    assert compiled.ops() == {"Conv": 20, "MaxPool": 1, "GlobalAveragePool": 1,
                              "Flatten": 1, "FC": 1}
    fused = [n for n in compiled.nodes if n.residual]
    assert len(fused) == 8  # every shortcut Add went into a Conv, with the Relu after it
    assert all(n.activation == "relu" for n in fused)


def test_yolov8n_silu_and_mobilenetv2_relu6():
    yolo = importer.compile_graph(importer.load(_build("yolov8n"))).ops()
    assert yolo.get("Silu") == 57 and "Sigmoid" not in yolo and "Mul" not in yolo
    mnet = importer.compile_graph(importer.load(_build("mobilenetv2")))
    acts = {n.activation for n in mnet.nodes if n.op == "Conv"}
    assert acts == {"relu6", "none"} and "Clip" not in mnet.ops()
    assert sum(1 for n in mnet.nodes if n.residual) == 10


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2", "yolov8n", "onnx_squeezenet",
                                  "onnx_shufflenet"])
def test_passes_preserve_semantics(name):
    ort = importlib.import_module("onnxruntime")

    model = _build(name)
    graph = importer.compile_graph(importer.load(model))
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(graph.tensors[n].shape).astype(np.float32)
             for n in graph.inputs}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    got = run_graph(graph, feeds)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_batchnorm_fold_is_exact_formula():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    g, beta, mean = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2, 4).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(v, n) for v, n in
             ((w, "w"), (b, "b"), (g, "g"), (beta, "beta"), (mean, "m"), (var, "v"))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "m", "v"], ["y"],
                              epsilon=1e-3)]
    model = helper.make_model(helper.make_graph(
        nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    graph = importer.compile_graph(importer.load(model))
    (conv,) = graph.nodes
    f = g.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-3)
    np.testing.assert_array_equal(graph.tensors[conv.inputs[1]].value,
                                  (w * f.reshape(-1, 1, 1, 1)).astype(np.float32))
    np.testing.assert_array_equal(graph.tensors[conv.inputs[2]].value,
                                  ((b.astype(np.float64) - mean) * f + beta).astype(np.float32))


def _tiny(opset: int = 13, dims: list[Any] | None = None) -> onnx.ModelProto:
    dims = dims if dims is not None else [1, 3, 8, 8]
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _reshaped(shape: list[int]) -> onnx.ModelProto:
    """x (1 x 3 x 8 x 8) reshaped to the constant `shape`."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="to")
    target = helper.make_tensor("shape", TensorProto.INT64, [len(shape)], shape)
    graph = helper.make_graph([node], "reshaped",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [target])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_reshape_keeping_its_values_imports():
    graph = importer.load(_reshaped([4, -1]))
    assert graph.tensors["y"].shape == (4, 48)


@pytest.mark.parametrize(("source", "message"), [
    (_reshaped([4, 192]), r"Reshape to turns 192 values of shape \[1, 3, 8, 8\] into shape "
                          r"\[4, 192\] \(768 values\)"),
    (_reshaped([7, 0]), "Reshape to turns 192 values"),
    (_tiny().SerializeToString()[:-7], "not an ONNX model"),
    (b"hello, this is not onnx at all", "not an ONNX model"),
    (_tiny(dims=["batch", 3, 8, 8]), "input 'x' has a dynamic or missing shape"),
    (_tiny(opset=99), "cannot convert opset to"),
])
def test_bad_models_raise_one_line_input_error(source, message):
    with pytest.raises(InputError, match=message) as info:
        importer.load(source)
    assert "\n" not in str(info.value)


def test_bad_file_path(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(_tiny().SerializeToString()[:20])
    with pytest.raises(InputError, match=r"broken\.onnx: not an ONNX model"):
        importer.load(path)
    with pytest.raises(InputError, match="cannot read"):
        importer.load(tmp_path / "missing.onnx")


@pytest.mark.parametrize(("opset", "target"), [(9, 13), (7, 13), (22, 22), (23, 23)])
def test_opsets_outside_the_range_are_converted_and_said_so(opset, target):
    notes: list[str] = []
    graph = importer.load(_tiny(opset=opset), notes, "tiny.onnx")
    assert graph.opset == target
    if opset < importer.MIN_OPSET:
        assert notes == [f"tiny.onnx: converted from opset {opset} to {target} "
                         "(onnx.version_converter)"]
    else:  # newer than J5's range: read with its own definitions, not converted down
        assert notes == [f"tiny.onnx: opset {opset} is newer than J5's 10-21; read with "
                         "that opset's definitions"]
    notes.clear()
    assert importer.load(_tiny(opset=13), notes).opset == 13 and notes == []


def _one_input(nodes: list[onnx.NodeProto], shape: list[int], out_shape: list[int],
               inits: list[onnx.TensorProto], outputs: tuple[str, ...] = ("y",)
               ) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, out_shape) for o in outputs],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _against_onnxruntime(model: onnx.ModelProto, shape: list[int]) -> Graph:
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    graph = importer.compile_graph(importer.load(model))
    from emu.nn import reference

    got = reference.run_float(graph, {"x": x})
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for name, want in zip(graph.outputs, session.run(None, {"x": x}), strict=True):
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)
    return graph


def test_identity_outputs_keep_their_names():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"]),
             helper.make_node("Identity", ["x"], ["z"]),
             helper.make_node("Dropout", ["r"], ["d"]),
             helper.make_node("Sigmoid", ["d"], ["w"])]
    model = _one_input(nodes, [1, 4], [1, 4], [], outputs=("y", "z", "w"))
    graph = _against_onnxruntime(model, [1, 4])
    assert graph.outputs == ("y", "z", "w")
    # r has another reader, x is an input: both Identities stay; the Dropout goes
    assert [(n.op, n.inputs, n.outputs) for n in graph.nodes] == [
        ("Relu", ("x",), ("r",)), ("Identity", ("r",), ("y",)), ("Identity", ("x",), ("z",)),
        ("Sigmoid", ("r",), ("w",))]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])]
    graph = _against_onnxruntime(_one_input(nodes, [1, 4], [1, 4], []), [1, 4])
    assert [(n.op, n.inputs, n.outputs) for n in graph.nodes] == [("Relu", ("x",), ("y",))]


def test_constant_divisor_becomes_a_multiplication_and_subtraction_an_addition():
    c = onnx.numpy_helper.from_array(np.array([2.0, 4.0, 8.0], np.float32).reshape(1, 3, 1, 1),
                                     "c")
    nodes = [helper.make_node("Div", ["x", "c"], ["q"]), helper.make_node("Sub", ["q", "c"], ["y"])]
    graph = _against_onnxruntime(_one_input(nodes, [1, 3, 2, 2], [1, 3, 2, 2], [c]),
                                 [1, 3, 2, 2])
    assert [n.op for n in graph.nodes] == ["Mul", "Add"]


def test_linear_on_tokens_and_a_classifier_over_a_map_become_fcs_and_a_conv():
    rng = np.random.default_rng(2)
    w = onnx.numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    model = _one_input([helper.make_node("MatMul", ["x", "w"], ["y"])], [2, 5, 16], [2, 5, 8],
                       [w])
    graph = _against_onnxruntime(model, [2, 5, 16])
    assert [n.op for n in graph.nodes] == ["Reshape", "FC", "Reshape"]
    wide = onnx.numpy_helper.from_array(rng.standard_normal((10, 9 * 36)).astype(np.float32),
                                        "w")
    nodes = [helper.make_node("Flatten", ["x"], ["f"]),
             helper.make_node("Gemm", ["f", "w"], ["y"], transB=1)]
    graph = _against_onnxruntime(_one_input(nodes, [1, 9, 6, 6], [1, 10], [wide]), [1, 9, 6, 6])
    assert [n.op for n in graph.nodes] == ["Conv", "Reshape"]
    assert graph.tensors[graph.nodes[0].inputs[1]].shape == (10, 9, 6, 6)


def _types(graph: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    return {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]}


def _light_matches_full(model: onnx.ModelProto) -> None:
    """Shape inference without the large weights (`importer.inferred_shapes`) gives every
    tensor the type onnx's inference of the whole model gives it; the tensors it adds are
    the weights it left out, as inputs of their own type and shape."""
    full = _types(onnx.shape_inference.infer_shapes(model, strict_mode=True).graph)
    light = _types(importer.inferred_shapes(model).graph)
    assert {name: light.get(name) for name in full} == full
    weights = {t.name: t for t in model.graph.initializer}
    for name in light.keys() - full.keys():
        made = helper.make_tensor_value_info(name, weights[name].data_type,
                                             list(weights[name].dims))
        assert light[name] == made.type


def test_shape_giving_values_reach_shape_inference_and_old_style_inputs_keep_theirs(
        monkeypatch):
    """With every initializer above 4 elements left out, a Reshape to a 6-element target
    (left out) loses its output shape, one to a 2-element target does not; an initializer
    also declared as a graph input (IR version 3) passes whole."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])
    big = helper.make_tensor("big", TensorProto.INT64, [6], [2, 3, 1, 2, 5, 2])
    small = helper.make_tensor("small", TensorProto.INT64, [2], [6, 20])
    nodes = [helper.make_node("Reshape", ["x", "big"], ["a"]),
             helper.make_node("Reshape", ["x", "small"], ["b"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "ab"]
    graph = helper.make_graph(nodes, "g", [x], outs, [big, small])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    monkeypatch.setattr(importer, "SHAPE_ONLY_ELEMENTS", 4)
    types = _types(importer.inferred_shapes(model).graph)
    assert [d.dim_value for d in types["b"].tensor_type.shape.dim] == [6, 20]
    assert not [d.dim_value for d in types["a"].tensor_type.shape.dim if d.dim_value]
    with pytest.raises(AssertionError):
        _light_matches_full(model)
    graph.input.append(helper.make_tensor_value_info("big", TensorProto.INT64, [6]))
    old = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=3)
    _light_matches_full(old)
    assert "big" in {t.name for t in importer.inferred_shapes(old).graph.initializer}

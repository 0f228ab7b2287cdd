"""emu.nn.placement: the per-op device table and the split into BPU subgraphs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from emu.nn import importer, placement, zoo

SIZE = (64, 64)


def _segments(model: onnx.ModelProto, **kw: bool) -> list[placement.Segment]:
    return placement.place(importer.compile_graph(importer.load(model)), **kw)


# The zoo's own networks: one BPU subgraph between the quantize and dequantize boundaries.
@pytest.mark.parametrize("name", ["resnet18", "mobilenetv1", "mobilenetv2",
                                  "efficientnet_lite0", "yolov8n", "unet",
                                  "centerpoint_pillars",
                                  pytest.param("resnet50", marks=pytest.mark.slow),
                                  pytest.param("yolov8s", marks=pytest.mark.slow),
                                  pytest.param("onnx_densenet121", marks=pytest.mark.slow)])
def test_zoo_network_is_one_bpu_subgraph(name):
    model = zoo.build(name) if name.startswith("onnx_") else zoo.build(name, SIZE)
    kinds = [s.kind for s in _segments(model)]
    assert kinds == ["quantize", "bpu", "dequantize"]


def test_a_subgraphs_inputs_and_outputs_come_in_the_order_its_nodes_use_them():
    """The outputs were once taken from a set: their order, and the compiled model's bytes,
    changed with Python's string hashing from one process to the next (yolov8n's six head
    outputs)."""
    graph = importer.compile_graph(importer.load(zoo.build("yolov8n", SIZE)))
    nodes = {n.name: n for n in graph.nodes}
    (bpu,) = [s for s in placement.place(graph) if s.kind == "bpu"]
    written = [o for name in bpu.nodes for o in nodes[name].outputs]
    read = [i for name in bpu.nodes for i in nodes[name].inputs]
    assert len(bpu.outputs) == 6
    assert list(bpu.outputs) == sorted(bpu.outputs, key=written.index)
    assert list(bpu.inputs) == sorted(bpu.inputs, key=read.index)


def test_onnx_classifier_softmax_tail_on_cpu():
    # documented: Softmax runs on the CPU by default; the outputs then come from the CPU
    segments = _segments(zoo.build("onnx_resnet50"))
    assert [s.kind for s in segments] == ["quantize", "bpu", "cpu"]
    assert any("Softmax runs on the CPU" in r for r in segments[-1].reasons)
    dsp = _segments(zoo.build("onnx_resnet50"), dsp_softmax=True)
    assert [s.kind for s in dsp] == ["quantize", "bpu", "dsp"]


def test_lrn_cuts_inception_v1():
    segments = _segments(zoo.build("onnx_inception_v1"))
    kinds = [s.kind for s in segments]
    assert kinds.count("bpu") == 3
    assert sum("LRN runs on the CPU" in r for s in segments for r in s.reasons) == 2


def _w(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)


def _mixed_model() -> onnx.ModelProto:
    """conv -> softmax (channels) -> conv -> LayerNorm (last axis) -> conv -> relu."""
    rng = np.random.default_rng(0)
    inits = [_w(rng, f"w{k}", (8, 8 if k else 3, 3, 3)) for k in range(3)]
    inits += [numpy_helper.from_array(np.ones(16, np.float32), "ln_g"),
              numpy_helper.from_array(np.zeros(16, np.float32), "ln_b")]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
        helper.make_node("Softmax", ["c0"], ["s0"], axis=1, name="softmax"),
        helper.make_node("Conv", ["s0", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("LayerNormalization", ["r1", "ln_g", "ln_b"], ["n1"], axis=-1,
                         name="layernorm"),
        helper.make_node("Conv", ["n1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["y"], name="relu2"),
    ]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_softmax_and_layernorm_split_into_three_bpu_subgraphs():
    segments = _segments(_mixed_model())
    assert [s.kind for s in segments] == ["quantize", "bpu", "cpu", "bpu", "cpu", "bpu",
                                          "dequantize"]
    assert [s.nodes for s in segments if s.kind == "bpu"] == [("conv0",), ("conv1",),
                                                              ("conv2",)]
    cpu = [s for s in segments if s.kind == "cpu"]
    (softmax,), (layernorm,) = cpu[0].reasons, cpu[1].reasons
    assert softmax.startswith("softmax (Softmax): Softmax runs on the CPU by default on J5")
    assert layernorm.startswith("layernorm (LayerNormalization): LayerNormalization runs on "
                                "the CPU")
    assert segments[0].inputs == ("x",) and segments[-1].outputs == ("y",)
    assert cpu[0].inputs == ("c0",) and cpu[0].outputs == ("s0",)


def test_conv_33x33_kernel_goes_to_cpu():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="big"),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 40, 40])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])],
        [_w(rng, "w", (4, 2, 33, 33))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    segments = _segments(model)
    assert [s.kind for s in segments] == ["cpu"]
    assert segments[0].reasons == ("big (Conv): kernel 33x33 exceeds 31x31",)


def test_decisions_of_the_table():
    model = _mixed_model()
    graph = importer.compile_graph(importer.load(model))
    decisions = {n.name: placement.decide(graph, n) for n in graph.nodes}
    assert decisions["conv0"].where == "bpu" and decisions["conv0"].reason == "supported"
    assert decisions["softmax"].where == "cpu"
    assert placement.decide(graph, graph.nodes[1], dsp_softmax=True).where == "dsp"
    assert decisions["layernorm"].where == "cpu"

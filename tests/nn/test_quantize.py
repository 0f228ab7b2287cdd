"""Calibration and quantisation (emu/nn/quantize.py): scales, code types, weights, the
accuracy flag and the serialised form."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from emu.errors import InputError
from emu.nn import execute, importer, placement, quantize, zoo
from tests.nn.test_execute import quantised, samples_for


def two_convs(scale_first: float = 1.0) -> onnx.ModelProto:
    """x -> Conv 3x3 (4 -> 6) + Relu -> Conv 1x1 (6 -> 3) + residual-free output."""
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((6, 4, 3, 3)) * 0.3 * scale_first).astype(np.float32)
    w2 = (rng.standard_normal((3, 6, 1, 1)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 6])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_calibration_is_max_abs_and_the_median_of_nonzero_magnitudes():
    graph = importer.compile_graph(importer.load(two_convs()))
    segments = placement.place(graph)
    samples = samples_for(graph, 3, seed=1)
    calibration = quantize.calibrate(graph, segments, samples)
    hidden = graph.nodes[0].outputs[0]
    values = []
    for feeds in samples:
        run = {**feeds}
        for node in graph.nodes:
            run.update(zip(node.outputs, execute.float_node(
                graph, node, execute.node_inputs(graph, node, run)), strict=True))
        values.append(run[hidden].astype(np.float64))
    every = np.concatenate([v.ravel() for v in values])
    stats = calibration.stats[hidden]
    assert stats.max_abs == float(np.abs(every).max())
    medians = [np.median(np.abs(v[v != 0])) for v in values]
    assert stats.median_abs == float(np.median(medians))
    assert set(calibration.stats) == {"x", hidden, "y"} and calibration.samples == 3


def test_scales_types_and_weights_follow_the_rules():
    model = quantised(zoo.build("resnet18", input_size=(32, 32)))
    graph, stats = model.graph, None
    calibration = quantize.calibrate(graph, model.segments, samples_for(graph, 4, seed=0))
    stats = calibration.stats
    for node in graph.nodes:
        out = node.outputs[0]
        if execute.code_preserving(node):
            assert model.tensors[out] == model.tensors[node.inputs[0]], node.name
        else:
            assert model.tensors[out].scale == stats[out].max_abs / 127, node.name
        if node.residual:
            assert model.tensors[out + "#conv"].dtype == "int8"
    for name, layer in model.layers.items():
        node = next(n for n in graph.nodes if n.name == name)
        w = np.asarray(graph.tensors[node.inputs[1]].value, np.float64)
        view = (-1,) + (1,) * (w.ndim - 1)
        assert layer.weight.dtype == np.int8 and layer.bias.dtype == np.int32
        assert np.abs(layer.weight.reshape(len(layer.w_scales), -1)).max(axis=1).tolist() == \
            [127] * len(layer.w_scales)
        step = layer.w_scales.reshape(view)
        assert np.all(np.abs(layer.weight * step - w) <= step / 2 * (1 + 1e-9))
        in_scale = model.tensors[node.inputs[0]].scale
        b = np.asarray(graph.tensors[node.inputs[2]].value, np.float64)
        assert np.all(np.abs(layer.bias * in_scale * layer.w_scales - b)
                      <= in_scale * layer.w_scales / 2 * (1 + 1e-9))


def test_int16_auto_widens_outlier_tensors_and_luts_stay_int8():
    graph = importer.compile_graph(importer.load(zoo.build("yolov8n", input_size=(64, 64))))
    segments = placement.place(graph)
    samples = samples_for(graph, 2, seed=0)
    samples[0][graph.inputs[0]][0, 0, 5, 5] = 500.0  # a glitch: spread ~ 700
    calibration = quantize.calibrate(graph, segments, samples)
    auto = quantize.quantize(graph, segments, calibration)
    never = quantize.quantize(graph, segments, calibration, int16="never")
    always = quantize.quantize(graph, segments, calibration, int16="always")
    assert auto.tensors[graph.inputs[0]].dtype == "int16"
    assert never.tensors[graph.inputs[0]].dtype == "int8"
    assert {t.dtype for t in never.tensors.values()} == {"int8"}
    wide = {n for n, s in calibration.stats.items() if s.spread > quantize.INT16_SPREAD}
    assert {n for n, t in auto.tensors.items() if t.dtype == "int16"} >= wide - {
        n for n in wide if always.tensors[n].dtype == "int8"}
    for node in graph.nodes:
        if node.op == "Silu":
            assert always.tensors[node.inputs[0]].dtype == "int8"
            assert always.tensors[node.outputs[0]].dtype == "int8"


def test_an_outlier_dominated_model_is_flagged_and_int16_repairs_it():
    graph = importer.compile_graph(importer.load(zoo.build("resnet18", input_size=(32, 32))))
    segments = placement.place(graph)
    samples = samples_for(graph, 4, seed=0)
    samples[1][graph.inputs[0]][0, 1, 3, 4] = 2000.0  # a glitch in one sample of four
    calibration = quantize.calibrate(graph, segments, samples)
    test = samples_for(graph, 2, seed=9)
    bad = quantize.accuracy(quantize.quantize(graph, segments, calibration, int16="never"), test)
    good = quantize.accuracy(quantize.quantize(graph, segments, calibration), test)
    assert bad.low and bad.worst[1] < quantize.COSINE_MIN
    assert not good.low and good.worst[1] >= quantize.COSINE_MIN


def test_to_arrays_and_from_arrays_round_trip_exactly():
    model = quantised(zoo.build("yolov8n", input_size=(64, 64)))
    meta, arrays = model.to_arrays()
    text = json.dumps(meta)
    copies = {k: v.copy() for k, v in arrays.items()}
    back = quantize.QuantModel.from_arrays(json.loads(text), copies, model.graph)
    assert back.tensors == model.tensors and back.segments == model.segments
    meta2, arrays2 = back.to_arrays()
    assert json.dumps(meta2) == text and arrays2.keys() == arrays.keys()
    for key, value in arrays.items():
        assert arrays2[key].dtype == value.dtype and np.array_equal(arrays2[key], value)
    feeds = samples_for(model.graph, 1, seed=4)[0]
    first, second = execute.run(model, feeds), execute.run(back, feeds)
    assert all(np.array_equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("damage", ["format", "tensors", "array", "node"])
def test_a_damaged_description_raises_input_error(damage):
    model = quantised(two_convs(), count=1)
    meta, arrays = model.to_arrays()
    if damage == "format":
        meta["format"] = "other"
    elif damage == "tensors":
        meta["tensors"] = {"x": [0.1]}
    elif damage == "array":
        arrays.pop(next(iter(arrays)))
    else:
        meta["segments"][1]["nodes"] = ["nowhere"]
    with pytest.raises(InputError, match=r"^quantised model: [^\n]*$"):
        quantize.QuantModel.from_arrays(meta, arrays, model.graph)


def test_bad_arguments_raise_input_error():
    graph = importer.compile_graph(importer.load(two_convs()))
    segments = placement.place(graph)
    with pytest.raises(InputError, match="at least one sample"):
        quantize.calibrate(graph, segments, [])
    calibration = quantize.calibrate(graph, segments, samples_for(graph, 1, seed=0))
    with pytest.raises(InputError, match="int16 must be one of"):
        quantize.quantize(graph, segments, calibration, int16="sometimes")
    with pytest.raises(InputError, match="no calibration data"):
        quantize.quantize(graph, segments, quantize.Calibration({}, 0))


def test_a_square_of_a_feature_map_runs_on_the_bpu_within_a_code():
    w = numpy_helper.from_array(np.full((2, 2, 1, 1), 0.5, np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"]),
             helper.make_node("Mul", ["h", "h"], ["y"])]
    graph_proto = helper.make_graph(
        nodes, "square", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], [w])
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    graph = importer.compile_graph(importer.load(model))
    segments = placement.place(graph)
    assert [s.kind for s in segments] == ["quantize", "bpu", "dequantize"]
    samples = samples_for(graph, 1, seed=0)
    qmodel = quantize.quantize(graph, segments, quantize.calibrate(graph, segments, samples))
    got = execute.run(qmodel, samples[0])["y"]
    want = execute.run_float(graph, samples[0])["y"]
    # h's rounding (half a code of h, times 2|h|) and y's own: a few codes of y at most
    assert np.abs(got - want).max() <= 3 * qmodel.tensors["y"].scale

"""emu.nn.optable: the operator table, and `emu ops` printed from it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from emu.bpu.timing import OP_CLASSES
from emu.cli.main import main
from emu.errors import InputError
from emu.nn import importer, optable, placement

# Operators J5's list places on the BPU, read off its table by hand (71 rows; "Upsample"
# is its "Upsample (resize替代)" and "GridSample" its PyTorch GridSample).
J5_BPU = (
    "Abs", "Add", "ArgMax", "ArgMin", "Atan", "AveragePool", "BatchNormalization", "Ceil",
    "Clip", "Concat", "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "Cos",
    "DepthToSpace", "Div", "Dropout", "Elu", "Equal", "Exp", "Expand", "Flatten", "Floor",
    "Gather", "GatherElements", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater",
    "HardSigmoid", "LSTM", "LeakyRelu", "Less", "LessOrEqual", "Log", "MatMul", "Max",
    "MaxPool", "Min", "Mul", "Pad", "Pow", "Reciprocal", "ReduceMax", "ReduceMean",
    "ReduceSum", "Relu", "Reshape", "Resize", "Shape", "Sigmoid", "Sin", "Size", "Slice",
    "Softmax", "Softplus", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh",
    "Tile", "TopK", "Transpose", "Unsqueeze", "Upsample", "GreaterOrEqual", "GridSample")


def test_every_j5_bpu_operator_has_a_row_that_runs_or_folds_it():
    assert len(set(J5_BPU)) == 71
    for op in J5_BPU:
        row = optable.rule(op)
        assert row is not None, op
        assert row.where in ("bpu", "cpu", "fold"), op  # cpu: the list's run_on_bpu ops


def test_rows_are_consistent():
    for row in optable.RULES.values():
        assert row.constraints, row.op
        if row.where == "bpu":
            assert row.kind, row.op
            assert optable.COST_CLASS[row.kind] in (*OP_CLASSES, ""), row.op
        else:
            assert not row.kind, row.op


def _model(node, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph([node], "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _decisions(model):
    graph = importer.compile_graph(importer.load(model))
    return [placement.decide(graph, n) for n in graph.nodes]


def test_a_constraint_outside_the_table_sends_the_op_to_the_cpu_with_the_reason():
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1)
    (decision,) = _decisions(_model(node, [_vi("x", [1, 65, 4, 4])],
                                    [_vi("y", [1, 1, 4, 4], TensorProto.INT64)]))
    assert (decision.where, decision.reason) == ("cpu", "C = 65 exceeds 64")
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")
    scales = numpy_helper.from_array(np.array([1, 1, 3, 3], np.float32), "s")
    (decision,) = _decisions(_model(node, [_vi("x", [1, 2, 4, 4])], [_vi("y", [1, 2, 12, 12])],
                                    [scales]))
    assert decision.where == "cpu" and "powers of two" in decision.reason


def test_integer_feature_maps_run_on_the_cpu():
    node = helper.make_node("Abs", ["x"], ["y"])
    (decision,) = _decisions(_model(node, [_vi("x", [3, 4], TensorProto.INT32)],
                                    [_vi("y", [3, 4], TensorProto.INT32)]))
    assert decision.where == "cpu" and "int32 tensor 'x'" in decision.reason


@pytest.mark.parametrize(("op", "message"), [
    ("Einsum", "Einsum is listed as a CPU operator the toolchain has not integrated"),
    ("Mish", "Mish is not in the J5 operator table"),
])
def test_unsupported_and_unknown_operators_are_refused_in_one_line(op, message):
    attrs = {"equation": "ij->ji"} if op == "Einsum" else {}
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    model = _model(node, [_vi("x", [2, 3])], [_vi("y", [3, 2] if op == "Einsum" else [2, 3])],
                   opset=18)
    with pytest.raises(InputError) as info:
        _decisions(model)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_emu_ops_prints_the_table(capsys):
    assert main(["ops", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["operators"]
    assert {r["op"] for r in rows} == set(optable.RULES)
    assert main(["ops", "--where", "refused"]) == 0
    text = capsys.readouterr().out
    assert "Einsum" in text and not any(line.startswith("Conv ") for line in text.splitlines())
    assert max(len(line) for line in text.splitlines()) <= 100


def _lstm_model(steps=3, batch=1, inputs=2, hidden=3, extra_inputs=(), stored=True, **attrs):
    """One LSTM node: X a feature map, W, R (stored, or feature maps), then `extra_inputs`
    as (name, value) pairs: stored values, or None for an omitted input."""
    rng = np.random.default_rng(0)
    directions = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    x_shape = [batch, steps, inputs] if layout else [steps, batch, inputs]
    w = rng.standard_normal((directions, 4 * hidden, inputs)).astype(np.float32)
    r = rng.standard_normal((directions, 4 * hidden, hidden)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")]
    graph_inputs = [_vi("x", x_shape)]
    if not stored:
        graph_inputs.append(_vi("W", list(w.shape)))
        inits = inits[1:]
    names = ["x", "W", "R"]
    for name, value in extra_inputs:
        names.append(name if value is not None else "")
        if value is not None:
            inits.append(numpy_helper.from_array(value, name))
    node = helper.make_node("LSTM", names, ["", "y_h"], hidden_size=hidden, **attrs)
    y_h = [batch, directions, hidden] if layout else [directions, batch, hidden]
    return _model(node, graph_inputs, [_vi("y_h", y_h)], inits, opset=14)


@pytest.mark.parametrize(("model", "reason"), [
    (_lstm_model(batch=3), "batch 3 (the BPU's LSTM takes batch 1)"),
    (_lstm_model(batch=2, layout=1), "batch 2 (the BPU's LSTM takes batch 1)"),
    (_lstm_model(stored=False), "'W' is not constant (the BPU's LSTM stores W, R and B)"),
    (_lstm_model(activations=["Sigmoid", "Tanh", "Relu"]),
     "activations ('Sigmoid', 'Tanh', 'Relu') (the BPU's LSTM takes Sigmoid, Tanh, Tanh)"),
    (_lstm_model(clip=3.0), "clip (the BPU's LSTM does not clip its cell input)"),
    (_lstm_model(input_forget=1), "input_forget (the BPU's LSTM has separate input and "
                                  "forget gates)"),
    (_lstm_model(extra_inputs=[("B", None), ("lens", np.array([2], np.int32)), ("h0", None),
                               ("c0", None), ("P", np.ones((1, 9), np.float32))]),
     "peepholes P (the BPU's LSTM has none)"),
    (_lstm_model(extra_inputs=[("B", None), ("lens", np.array([2], np.int32))]),
     "sequence_lens shorter than the 3 steps (the BPU runs every step)"),
])
def test_an_lstm_the_bpu_does_not_compute_goes_to_the_cpu_naming_why(model, reason):
    (decision,) = _decisions(model)
    assert (decision.where, decision.reason) == ("cpu", reason)


@pytest.mark.parametrize("model", [
    _lstm_model(), _lstm_model(direction="reverse"), _lstm_model(direction="bidirectional"),
    _lstm_model(layout=1), _lstm_model(activations=["Sigmoid", "Tanh", "Tanh"]),
    _lstm_model(extra_inputs=[("B", np.zeros((1, 24), np.float32)),
                              ("lens", np.array([3], np.int32)), ("h0", None), ("c0", None),
                              ("P", np.zeros((1, 9), np.float32))])])
def test_a_batch_1_lstm_runs_on_the_bpu(model):
    (decision,) = _decisions(model)
    assert decision.where == "bpu", decision.reason


@pytest.mark.parametrize(("attrs", "x_shape", "stored_x", "where", "reason"), [
    ({}, [1, 2, 4, 4], False, "bpu", "supported"),
    ({"mode": "nearest", "padding_mode": "border", "align_corners": 1}, [1, 2, 4, 4], False,
     "bpu", "supported"),
    ({"mode": "bicubic"}, [1, 2, 4, 4], False, "cpu",
     "mode bicubic (the BPU samples bilinear or nearest)"),
    ({"padding_mode": "reflection"}, [1, 2, 4, 4], False, "cpu",
     "padding_mode reflection (the BPU pads zeros or border)"),
    ({}, [1, 1, 4, 1025], False, "cpu", "H, W (4, 1025) over 1024 or H*W over 737280"),
    ({}, [1, 2, 4, 4], True, "cpu", "a stored X (the BPU samples a feature map)"),
])
def test_grid_sample_runs_on_the_bpu_within_the_table_s_constraints(attrs, x_shape, stored_x,
                                                                    where, reason):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    inputs = [_vi("grid", [1, 3, 3, 2])]
    inits = []
    if stored_x:
        inits.append(numpy_helper.from_array(np.ones(x_shape, np.float32), "x"))
    else:
        inputs.insert(0, _vi("x", x_shape))
    model = _model(node, inputs, [_vi("y", [*x_shape[:2], 3, 3])], inits, opset=16)
    (decision,) = _decisions(model)
    assert (decision.where, decision.reason) == (where, reason)

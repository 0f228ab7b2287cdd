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
    rows = json.loads(capsys.readouterr().out)
    assert {r["op"] for r in rows} == set(optable.RULES)
    assert main(["ops", "--where", "refused"]) == 0
    text = capsys.readouterr().out
    assert "Einsum" in text and not any(line.startswith("Conv ") for line in text.splitlines())
    assert max(len(line) for line in text.splitlines()) <= 100

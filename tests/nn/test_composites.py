"""The conformance composites (tests/conformance/composites.py): each is a valid ONNX model
that onnxruntime runs with finite, input-dependent outputs; the same seed gives the same
bytes; and the float reference run on the ONNX graph as it is (what calibrates the
zoo's BatchNormalization statistics) computes what onnxruntime does on every one:
squeeze-excitation gates, HardSigmoid with PyTorch's alpha, HardSwish, nearest and
bilinear Resize, attention, LSTMs, GridSample."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.conformance.composites import CASES
from tests.nn.test_zoo import _session, assert_float_reference_matches_onnxruntime


def _feeds(model, seed):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim],
                                        dtype=np.float32) for v in model.graph.input}


@pytest.mark.parametrize("name", CASES)
def test_each_composite_is_valid_onnx_that_onnxruntime_runs(name):
    model = CASES[name]()
    onnx.checker.check_model(model, full_check=True)
    session = _session(model)
    first = session.run(None, _feeds(model, 1))
    second = session.run(None, _feeds(model, 2))
    assert len(first) == len(model.graph.output) >= 1
    for out, other, spec in zip(first, second, model.graph.output, strict=True):
        assert list(out.shape) == [d.dim_value for d in spec.type.tensor_type.shape.dim]
        assert np.isfinite(out).all(), spec.name
        assert 0.1 < float(np.sqrt(np.mean(np.square(out)))) < 10, spec.name  # unit scale
        assert not np.array_equal(out, other), f"{spec.name} ignores the input"


@pytest.mark.parametrize("name", CASES)
def test_a_composite_is_the_same_bytes_for_a_seed(name):
    build = CASES[name]
    assert build(3).SerializeToString() == build(3).SerializeToString()
    assert build(3).SerializeToString() != build(4).SerializeToString()


def test_the_composites_have_the_structures_they_are_named_for():
    def ops(name):
        model = CASES[name]()
        return ([(o.domain, o.version) for o in model.opset_import],
                [node.op_type for node in model.graph.node], model)

    opsets, kinds, _ = ops("mobilenetv3_block")
    assert opsets == [("", 13)] and "HardSwish" not in kinds
    assert kinds.count("HardSigmoid") == 3 and kinds.count("GlobalAveragePool") == 1
    opsets, kinds, _ = ops("mobilenetv3_block_hardswish")
    assert opsets == [("", 14)] and kinds.count("HardSwish") == 2
    _, kinds, model = ops("se_block")
    inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred}
    (mul,) = (n for n in model.graph.node if n.op_type == "Mul")
    gate = next(n for n in model.graph.node if n.op_type == "Sigmoid")
    assert gate.output[0] in mul.input and shapes[gate.output[0]] == [1, 32, 1, 1]
    _, kinds, model = ops("fpn_topdown_align_corners")
    modes = {(a.name, a.s) for n in model.graph.node if n.op_type == "Resize"
             for a in n.attribute}
    assert modes == {("mode", b"linear"), ("coordinate_transformation_mode", b"align_corners")}
    opsets, kinds, model = ops("attention_block")
    assert opsets == [("", 17)] and kinds.count("LayerNormalization") == 2
    assert {"Erf", "Softmax", "Transpose"} <= set(kinds)
    matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
    constants = {t.name for t in model.graph.initializer}
    assert sum(not set(n.input) & constants for n in matmuls) == 2  # Q x K^T, weights x V
    _, kinds, _ = ops("attention_block_multihead")
    assert kinds.count("Reshape") == 4
    opsets, kinds, model = ops("lstm_sequence")
    assert opsets == [("", 14)] and kinds.count("LSTM") == 2
    directions = [a.s for n in model.graph.node if n.op_type == "LSTM" for a in n.attribute
                  if a.name == "direction"]
    assert directions == [b"forward", b"bidirectional"]
    opsets, kinds, model = ops("grid_sample_warp")
    (warp,) = (n for n in model.graph.node if n.op_type == "GridSample")
    assert opsets == [("", 16)] and warp.input[1] == "grid" and "Tanh" in kinds


@pytest.mark.parametrize("name", CASES)
def test_the_float_reference_computes_what_onnxruntime_does_on_the_composites(name):
    model = CASES[name]()
    assert_float_reference_matches_onnxruntime(name, model, _feeds(model, 5), 1e-4, 1e-5)

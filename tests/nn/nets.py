"""Small ONNX models written for the tests (the zoo's networks are in emu/nn/zoo.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _conv(nodes, inits, rng, x, cin, cout, name, act=True):
    w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * np.float32(
        (2.0 / (9 * cin)) ** 0.5)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    inits += [numpy_helper.from_array(w, f"{name}.w"), numpy_helper.from_array(b, f"{name}.b")]
    nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.y"],
                                  name=name, pads=[1, 1, 1, 1]))
    if not act:
        return f"{name}.y"
    nodes.append(helper.make_node("Relu", [f"{name}.y"], [f"{name}.r"], name=f"{name}.relu"))
    return f"{name}.r"


def segmented(size: int = 16, channels: int = 8, seed: int = 0,
              middle: tuple[str, ...] = ("Softmax", "LayerNormalization")) -> onnx.ModelProto:
    """conv -> [CPU op] -> conv -> [CPU op] -> conv: one BPU subgraph per conv run, with the
    ops the J5 BPU does not run (Softmax over channels, LayerNormalization over W) between."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x = _conv(nodes, inits, rng, "input", 3, channels, "conv0")
    for k, op in enumerate(middle):
        out = f"mid{k}"
        if op == "Softmax":
            nodes.append(helper.make_node("Softmax", [x], [out], name=f"softmax{k}", axis=1))
        elif op == "LayerNormalization":
            gamma = (1 + 0.1 * rng.standard_normal(size)).astype(np.float32)
            beta = (0.1 * rng.standard_normal(size)).astype(np.float32)
            inits += [numpy_helper.from_array(gamma, f"ln{k}.g"),
                      numpy_helper.from_array(beta, f"ln{k}.b")]
            nodes.append(helper.make_node("LayerNormalization", [x, f"ln{k}.g", f"ln{k}.b"],
                                          [out], name=f"layernorm{k}", axis=-1))
        else:
            raise ValueError(op)
        x = _conv(nodes, inits, rng, out, channels, channels, f"conv{k + 1}",
                  act=k + 1 < len(middle))
    graph = helper.make_graph(
        nodes, "segmented",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="emu-tests")


def wide_fc(inputs: int = 9000, outputs: int = 16, seed: int = 0) -> onnx.ModelProto:
    """Gemm over more input channels than the J5 BPU takes (8192): an FC on the CPU,
    between two BPU ops (a Relu before it, one after)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((outputs, inputs)) / inputs ** 0.5).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_in"),
             helper.make_node("Gemm", ["r", "w"], ["g"], name="fc", transB=1),
             helper.make_node("Relu", ["g"], ["y"], name="relu_out")]
    graph = helper.make_graph(
        nodes, "wide_fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, outputs])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


# The newer zoo networks at a size that keeps the slow runs short.
ZOO_SMALL = {"mobilenetv3_large": (32, 32), "se_resnet50": (32, 32), "deeplabv3": (32, 32)}


def zoo_case(name: str, default_run: bool) -> object:
    """Zoo network `name` as a test parameter: in the default run, or with -m slow."""
    if default_run:
        return name
    return pytest.param(name, marks=pytest.mark.slow)


# The ops `ranked` builds, by the rank of the input they take (0: a scalar); each compiles
# to the BPU at that rank on this branch.
RANKED_OPS = {"Relu": range(0, 6), "Sigmoid": range(1, 6), "Add": range(1, 6),
              "MatMul": (2,), "Gemm": (2,), "Conv": (4,)}


def ranked(shape: tuple[int, ...], op: str, softmax_axis: int | None = None,
           seed: int = 0) -> onnx.ModelProto:
    """One op on an input of `shape` (any rank `RANKED_OPS` allows it): Relu or Sigmoid of
    x, Add of x and a second input z of the same shape, MatMul / Gemm of x (rows x k) by a
    constant k x 5, or a 3x3 Conv of x (N x C x H x W) to 4 channels. With `softmax_axis`,
    a Softmax along it follows (on the CPU), then a Relu (on the BPU), so that a CPU
    segment sits between two BPU subgraphs."""
    if len(shape) not in RANKED_OPS[op]:
        raise ValueError(f"{op} on rank {len(shape)}")
    rng = np.random.default_rng(seed)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    inits: list[onnx.TensorProto] = []
    feeds = ["x"]
    if op == "Add":
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, list(shape)))
        feeds.append("z")
    elif op in ("MatMul", "Gemm"):
        w = rng.standard_normal((shape[1], 5)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
        feeds.append("w")
    elif op == "Conv":
        w = rng.standard_normal((4, shape[1], 3, 3)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
        feeds.append("w")
    attrs = {"pads": [1, 1, 1, 1]} if op == "Conv" else {}
    nodes = [helper.make_node(op, feeds, ["y"], name=op.lower(), **attrs)]
    out = "y"
    if softmax_axis is not None:
        nodes += [helper.make_node("Softmax", ["y"], ["s"], name="softmax", axis=softmax_axis),
                  helper.make_node("Relu", ["s"], ["out"], name="relu_out")]
        out = "out"
    graph = helper.make_graph(nodes, "ranked", inputs,
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="emu-tests")

"""Executing a QuantModel (emu/nn/execute.py): every BPU segment's codes equal the slow
reference's (tests/nn/quant_reference.py) bit for bit; feeds are checked; speed."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from emu.errors import InputError
from emu.nn import compiler, execute, importer, placement, quantize, reference, zoo
from emu.nn.graph import Graph, Node, Tensor
from tests.nn import quant_reference as ref


def samples_for(graph: Graph, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Standard-normal feeds, as the zoo calibrates its BatchNormalization statistics."""
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(graph.tensors[name].shape).astype(np.float32)
             for name in graph.inputs} for _ in range(count)]


def quantised(model: onnx.ModelProto, *, int16: str = "auto", count: int = 4,
              seed: int = 0, method: str = "max") -> quantize.QuantModel:
    """The model compiled, placed, calibrated on `count` random-normal samples with
    `method`, quantised."""
    graph = importer.compile_graph(importer.load(model))
    segments = placement.place(graph)
    calibration = quantize.calibrate(graph, segments, samples_for(graph, count, seed),
                                     method=method)
    return quantize.quantize(graph, segments, calibration, int16=int16)


def _init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def mixed_model(seed: int = 0) -> onnx.ModelProto:
    """Convs with CPU ops in the middle (LayerNormalization, Softmax) and the BPU ops the
    zoo's bit-exact cases do not cover (Mul / Add by per-channel constants, Sigmoid, padded
    AveragePool, Clip, Sum of three, Transpose, Reshape)."""
    rng = np.random.default_rng(seed)

    def w(shape: tuple[int, ...]) -> np.ndarray:
        fan_in = int(np.prod(shape[1:]))
        return rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)

    inits = [_init("w1", w((8, 3, 3, 3))), _init("b1", rng.standard_normal(8) * 0.1),
             _init("ln_s", rng.uniform(0.5, 1.5, 8)), _init("ln_b", rng.standard_normal(8) * .1),
             _init("w2", w((6, 8, 1, 1))), _init("w3", w((6, 6, 3, 3))),
             _init("k", rng.uniform(0.5, 2.0, (6, 1, 1))), _init("c", rng.standard_normal(
                 (1, 6, 1, 1))), _init("lo", np.array(-1.0)), _init("hi", np.array(2.5)),
             numpy_helper.from_array(np.array([1, 6, 16], np.int64), "shape")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("LayerNormalization", ["r1", "ln_s", "ln_b"], ["ln"], axis=-1),
        helper.make_node("Conv", ["ln", "w2"], ["c2"]),
        helper.make_node("Mul", ["c2", "k"], ["m"]),
        helper.make_node("Add", ["m", "c"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Conv", ["s", "w3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("AveragePool", ["c3"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["p", "lo", "hi"], ["cl"]),
        helper.make_node("Sum", ["cl", "c3", "p"], ["sum"]),
        helper.make_node("Transpose", ["sum"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("Reshape", ["t", "shape"], ["flat"]),
        helper.make_node("Softmax", ["flat"], ["prob"], axis=-1),
        helper.make_node("Relu", ["prob"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 16]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 6, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def check_bit_exact(qmodel: quantize.QuantModel, feeds: dict[str, np.ndarray]) -> int:
    """Every BPU segment's output codes equal the reference's from the same input codes;
    the input quantisation too. Returns the number of BPU segments checked."""
    got = execute.run(qmodel, feeds, integer=True)
    codes = {k.removeprefix(execute.CODES_PREFIX): v for k, v in got.items()
             if k.startswith(execute.CODES_PREFIX)}
    checked = 0
    for k, segment in enumerate(qmodel.segments):
        if segment.kind == "quantize":
            for name in segment.inputs:
                qt = qmodel.tensors[name]
                assert np.array_equal(codes[name], ref.quantise(feeds[name], qt.scale,
                                                                qt.dtype)), name
        if segment.kind != "bpu":
            continue
        expected = ref.Segment(qmodel, k).run({n: codes[n] for n in segment.inputs})
        for name in segment.outputs:
            assert codes[name].dtype == np.dtype(qmodel.tensor_dtypes()[name]), name
            assert codes[name].shape == expected[name].shape, name
            assert np.array_equal(codes[name], expected[name]), (
                f"{name}: {np.count_nonzero(codes[name] != expected[name])} codes differ")
        checked += 1
    return checked


ZOO_CASES = [("resnet18", (32, 32)), ("mobilenetv2", (32, 32)), ("yolov8n", (64, 64)),
             ("unet", (16, 16)), ("centerpoint_pillars", (16, 16)),
             ("efficientnet_lite0", (32, 32))]


@pytest.mark.parametrize(("name", "size"), ZOO_CASES)
def test_zoo_bpu_segments_equal_the_reference_bit_for_bit(name, size):
    model = quantised(zoo.build(name, input_size=size))
    assert check_bit_exact(model, samples_for(model.graph, 1, seed=7)[0]) >= 1


@pytest.mark.parametrize(("name", "size"), [("resnet18", (32, 32)), ("yolov8n", (64, 64)),
                                            ("centerpoint_pillars", (16, 16))])
def test_the_int16_path_is_bit_exact_too(name, size):
    model = quantised(zoo.build(name, input_size=size), int16="always")
    kinds = {t.dtype for t in model.tensors.values()}
    assert kinds == {"int16"} or (name == "yolov8n" and kinds == {"int8", "int16"})
    check_bit_exact(model, samples_for(model.graph, 1, seed=7)[0])


def test_a_batch_runs_and_is_bit_exact():
    model = quantised(zoo.build("mobilenetv2", input_size=(32, 32), batch=3))
    feeds = samples_for(model.graph, 1, seed=3)[0]
    check_bit_exact(model, feeds)
    whole = execute.run(model, feeds)["logits"]
    assert whole.shape == (3, 1000)


def test_cpu_ops_between_bpu_segments_convert_at_each_boundary():
    model = quantised(mixed_model())
    kinds = [s.kind for s in model.segments]
    assert kinds == ["quantize", "bpu", "cpu", "bpu", "cpu", "bpu", "dequantize"]
    for seed in range(3):
        feeds = samples_for(model.graph, 1, seed=100 + seed)[0]
        assert check_bit_exact(model, feeds) == 3
        out = execute.run(model, feeds)
        exact = reference.run_float(model.graph, feeds)
        # "y" is a Softmax of 16 values re-quantised to int8 for the BPU Relu: one code is
        # about 1 % of the largest probability, so this toy stays near, not above, 0.99.
        for name in model.graph.outputs:
            assert execute.cosine_similarity(out[name], exact[name]) > 0.97, name


@pytest.mark.parametrize("input_type", ["rgb", "nv12"])
def test_an_image_input_s_preprocess_node_runs_on_codes(input_type):
    graph = importer.compile_graph(importer.load(zoo.build("mobilenetv1", input_size=(32, 32))))
    options = compiler.CompileOptions(input_type=input_type, mean=(120.0, 110.0, 100.0),
                                      scale=(0.017, 0.018, 0.019))
    graph = compiler.add_preprocess(graph, options)
    segments = placement.place(graph)
    rng = np.random.default_rng(2)
    shape = graph.tensors[graph.inputs[0]].shape
    samples = [{graph.inputs[0]: rng.integers(0, 256, shape, dtype=np.uint8)} for _ in range(3)]
    model = quantize.quantize(graph, segments, quantize.calibrate(graph, segments, samples))
    assert graph.inputs[0] not in model.tensors  # the raw image has no codes
    assert check_bit_exact(model, samples[0]) == 1
    assert not quantize.accuracy(model, samples[:2]).low


def test_run_gives_float32_outputs_and_keeps_its_kernels():
    model = quantised(zoo.build("mobilenetv1", input_size=(32, 32)))
    feeds = samples_for(model.graph, 1, seed=1)[0]
    programs = dict(model.programs)
    assert programs  # built by quantize
    first = execute.run(model, feeds)
    assert set(first) == set(model.graph.outputs)
    assert all(v.dtype == np.float32 for v in first.values())
    second = execute.run(model, feeds)
    assert model.programs == programs  # not rebuilt per call
    assert all(np.array_equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize(("feeds", "needle"), [
    ({}, "missing feed for input 'input'"),
    ({"input": np.zeros((1, 3, 32, 32), np.float32), "other": np.zeros(1)}, "not a model input"),
    ({"input": np.zeros((1, 3, 16, 32), np.float32)}, "has shape (1, 3, 16, 32)"),
    ({"input": np.zeros((1, 3, 32, 32), np.float64)}, "has dtype float64"),
    ({"input": [[0.0]]}, "must be a numpy array"),
])
def test_bad_feeds_raise_one_line_input_errors(feeds, needle):
    model = quantised(zoo.build("resnet18", input_size=(32, 32)), count=1)
    for call in (lambda: execute.run(model, feeds), lambda: reference.run_float(model.graph, feeds),
                 lambda: quantize.calibrate(model.graph, model.segments, [feeds])):
        with pytest.raises(InputError, match=r"^[^\n]*$") as error:
            call()
        assert needle in str(error.value)


def test_rounding_is_half_away_from_zero_and_exact():
    values = np.array([0.5, -0.5, 1.5, -2.5, 0.49999999999999994, -0.49999999999999994,
                       2.4999999999999996, 1e300])
    assert execute.round_half_away(values).tolist() == [1, -1, 2, -3, 0, 0, 2, 1e300]
    codes = execute.to_codes(np.array([1000.0, -1000.0, 0.26], np.float32), 0.5, "int8")
    assert codes.tolist() == [127, -128, 1]


def new_ops_model(seed: int = 0) -> onnx.ModelProto:
    """The operators beyond the zoo's on codes: h-swish, a squeeze-excitation gate (Mul of two
    feature maps), LeakyRelu, Elu, Sub and Div of feature maps, Max, a linear Resize, a
    MatMul of two maps, ReduceMean, ReduceSum, GlobalMaxPool."""
    rng = np.random.default_rng(seed)

    def w(shape: tuple[int, ...]) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.4).astype(np.float32)
    inits = [_init("w0", w((8, 3, 3, 3))), _init("w1", w((4, 8, 1, 1))),
             _init("w2", w((8, 4, 1, 1))), _init("w3", w((8, 8, 1, 1))),
             _init("scales", np.array([1, 1, 2, 2], np.float32)),
             numpy_helper.from_array(np.array([1], np.int64), "axes"),
             _init("bias", (rng.standard_normal((1, 1, 1, 8)) * 0.1 + 1.0).astype(np.float32))]
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        node("HardSwish", ["c0"], ["h0"]),
        node("GlobalAveragePool", ["h0"], ["p0"]),
        node("Conv", ["p0", "w1"], ["s0"]), node("Relu", ["s0"], ["s1"]),
        node("Conv", ["s1", "w2"], ["s2"]),
        node("HardSigmoid", ["s2"], ["gate"], alpha=0.25, beta=0.4),
        node("Mul", ["h0", "gate"], ["se"]),
        node("LeakyRelu", ["se"], ["l0"], alpha=0.1),
        node("Conv", ["l0", "w3"], ["c1"]),
        node("Elu", ["c1"], ["e0"], alpha=0.7),
        node("Sub", ["e0", "se"], ["d0"]),
        node("Max", ["d0", "l0"], ["m0"]),
        node("Sigmoid", ["m0"], ["g1"]),
        node("Add", ["g1", "bias"], ["g2"]),
        node("Div", ["m0", "g2"], ["q0"]),
        node("Resize", ["q0", "", "scales"], ["r0"], mode="linear"),
        node("Transpose", ["r0"], ["t0"], perm=[0, 1, 3, 2]),
        node("MatMul", ["r0", "t0"], ["mm"]),
        node("ReduceMean", ["mm", "axes"], ["rm"], keepdims=1),
        node("ReduceSum", ["r0", "axes"], ["rs"], keepdims=1),
        node("GlobalMaxPool", ["r0"], ["gm"]),
    ]
    graph = helper.make_graph(
        nodes, "new_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("rm", "rs", "gm")],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


@pytest.mark.parametrize("int16", ["never", "always"])
def test_the_new_operators_are_bit_exact_on_the_bpu(int16):
    model = quantised(new_ops_model(), int16=int16)
    assert [s.kind for s in model.segments] == ["quantize", "bpu", "dequantize"]
    assert check_bit_exact(model, samples_for(model.graph, 1, seed=3)[0]) == 1


def sampling_and_recurrent_model(seed: int = 0) -> onnx.ModelProto:
    """GridSample and LSTM on the BPU, every variant the table allows: a conv's map warped
    by a grid computed from it (Conv to 2 channels, Tanh, Transpose) bilinear with zeros
    and nearest with border and align_corners, and by a stored grid; a bidirectional LSTM
    with a bias, a feature-map initial_h (a Tanh of an input, as a hidden state is) and a
    stored initial_c, all three outputs, whose Y (as PyTorch's exporter reshapes it) feeds a
    reverse LSTM of layout 1."""
    rng = np.random.default_rng(seed)
    steps, inputs, hidden, second = 5, 4, 6, 3
    inits = [
        _init("w0", rng.standard_normal((8, 3, 3, 3)) * 0.4),
        _init("w1", rng.standard_normal((2, 8, 1, 1)) * 0.05),
        _init("grid", rng.uniform(-1.2, 1.2, (1, 4, 5, 2))),
        _init("W", rng.uniform(-0.4, 0.4, (2, 4 * hidden, inputs))),
        _init("R", rng.uniform(-0.4, 0.4, (2, 4 * hidden, hidden))),
        _init("B", rng.uniform(-0.2, 0.2, (2, 8 * hidden))),
        _init("c0", rng.uniform(-0.5, 0.5, (2, 1, hidden))),
        _init("W2", rng.uniform(-0.5, 0.5, (1, 4 * second, 2 * hidden))),
        _init("R2", rng.uniform(-0.5, 0.5, (1, 4 * second, second))),
        numpy_helper.from_array(np.array([1, steps, 2 * hidden], np.int64), "merged")]
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w0"], ["c"], pads=[1, 1, 1, 1]),
        node("Conv", ["c", "w1"], ["flow"]),
        node("Tanh", ["flow"], ["t"]),
        node("Transpose", ["t"], ["g"], perm=[0, 2, 3, 1]),
        node("GridSample", ["c", "g"], ["warped"], mode="bilinear"),
        node("GridSample", ["c", "g"], ["picked"], mode="nearest", padding_mode="border",
             align_corners=1),
        node("GridSample", ["c", "grid"], ["stored"], padding_mode="border"),
        node("Tanh", ["state"], ["h0"]),
        node("LSTM", ["seq", "W", "R", "B", "", "h0", "c0"], ["Y", "Y_h", "Y_c"],
             hidden_size=hidden, direction="bidirectional"),
        node("Transpose", ["Y"], ["Yt"], perm=[2, 0, 1, 3]),
        node("Reshape", ["Yt", "merged"], ["tokens"]),
        node("LSTM", ["tokens", "W2", "R2"], ["Y2", "Y2_h"], hidden_size=second,
             direction="reverse", layout=1),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "sampling_and_recurrent",
        [value("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         value("seq", TensorProto.FLOAT, [steps, 1, inputs]),
         value("state", TensorProto.FLOAT, [2, 1, hidden])],
        [value(n, TensorProto.FLOAT, None) for n in ("warped", "picked", "stored", "Y_h",
                                                    "Y_c", "Y2", "Y2_h")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize("int16", ["never", "always"])
def test_grid_sample_and_lstm_are_bit_exact_on_the_bpu(int16):
    model = quantised(sampling_and_recurrent_model(), int16=int16)
    assert [s.kind for s in model.segments] == ["quantize", "bpu", "dequantize"]
    assert check_bit_exact(model, samples_for(model.graph, 1, seed=3)[0]) == 1
    # J5's list gives LSTM and GridSample no int16: they read and write int8 whatever the rule
    narrow = {n for node in model.graph.nodes if node.op in ("LSTM", "GridSample")
              for n in (*node.inputs, *node.outputs, *reference.intermediates(model.graph, node))
              if n in model.tensors}
    assert {model.tensors[n].dtype for n in narrow} == {"int8"}
    if int16 == "always":
        assert model.tensors["x"].dtype == "int16"


def test_lstm_and_grid_sample_layers_and_scales_survive_the_model_file_s_arrays():
    model = quantised(sampling_and_recurrent_model(), count=1)
    meta, arrays = model.to_arrays()
    back = quantize.QuantModel.from_arrays(json.loads(json.dumps(meta)), arrays, model.graph)
    feeds = samples_for(model.graph, 1, seed=4)[0]
    first, second = execute.run(model, feeds), execute.run(back, feeds)
    assert all(np.array_equal(first[name], second[name]) for name in model.graph.outputs)


def test_grid_sample_and_lstm_match_the_float_model():
    model = quantised(sampling_and_recurrent_model(), count=4)
    for seed in (11, 12):
        feeds = samples_for(model.graph, 1, seed=seed)[0]
        got, want = execute.run(model, feeds), reference.run_float(model.graph, feeds)
        # not "picked": a nearest sample of a map without spatial correlation changes
        # wholesale when its int8 coordinate rounds to the neighbouring pixel
        for name in set(model.graph.outputs) - {"picked"}:
            assert execute.cosine_similarity(got[name], want[name]) > 0.99, (seed, name)


@pytest.mark.parametrize("mode", ["bilinear", "linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("align", [0, 1])
def test_emu_s_float_grid_sample_is_onnx_s(mode, padding, align):
    """The CPU's (and calibration's) vectorised GridSample against onnx's reference, on a
    grid reaching past the borders, with exact ties for nearest."""
    rng = np.random.default_rng(align + 2 * len(padding))
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 6, 7, 2)).astype(np.float32)
    grid[0, 0, :4] = [[-1, -1], [0, 0], [1, 1], [0.5, -0.5]]
    node = Node("gs", "GridSample", ("x", "grid"), ("y",),
                {"mode": mode, "padding_mode": padding, "align_corners": align})
    graph = Graph(("x", "grid"), ("y",), (node,), {
        "x": Tensor("x", x.shape, "float32"), "grid": Tensor("grid", grid.shape, "float32"),
        "y": Tensor("y", (2, 3, 6, 7), "float32")}, opset=16 if mode == "bilinear" else 20)
    (got,) = reference.float_node(graph, node, [x, grid])
    (want,) = reference.reference_node(20, Node("gs", "GridSample", ("x", "grid"), ("y",), {
        **node.attrs, "mode": "linear" if mode == "bilinear" else mode}), [x, grid])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

"""Calibration and quantisation (emu/nn/quantize.py): scales, code types, weights, the
accuracy flag and the serialised form."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from emu.errors import InputError
from emu.nn import execute, importer, placement, quantize, zoo
from emu.nn import reference as nn_reference
from tests.nn import calibration_reference as reference
from tests.nn.test_execute import quantised, samples_for


def _model(nodes: list[onnx.NodeProto], name: str, x_shape: list[int], y: str,
           y_shape: list[int], weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """An opset-13 model of `nodes` from float input "x" to float output `y`."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(w, k) for k, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def two_convs(scale_first: float = 1.0) -> onnx.ModelProto:
    """x -> Conv 3x3 (4 -> 6) + Relu -> Conv 1x1 (6 -> 3) + residual-free output."""
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((6, 4, 3, 3)) * 0.3 * scale_first).astype(np.float32)
    w2 = (rng.standard_normal((3, 6, 1, 1)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    return _model(nodes, "two", [1, 4, 6, 6], "y", [1, 3, 6, 6], {"w1": w1, "w2": w2})


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
            run.update(zip(node.outputs, nn_reference.float_node(
                graph, node, nn_reference.node_inputs(graph, node, run)), strict=True))
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
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"]),
             helper.make_node("Mul", ["h", "h"], ["y"])]
    model = _model(nodes, "square", [1, 2, 4, 4], "y", [1, 2, 4, 4],
                   {"w": np.full((2, 2, 1, 1), 0.5, np.float32)})
    graph = importer.compile_graph(importer.load(model))
    segments = placement.place(graph)
    assert [s.kind for s in segments] == ["quantize", "bpu", "dequantize"]
    samples = samples_for(graph, 1, seed=0)
    qmodel = quantize.quantize(graph, segments, quantize.calibrate(graph, segments, samples))
    got = execute.run(qmodel, samples[0])["y"]
    want = nn_reference.run_float(graph, samples[0])["y"]
    # h's rounding (half a code of h, times 2|h|) and y's own: a few codes of y at most
    assert np.abs(got - want).max() <= 3 * qmodel.tensors["y"].scale


# --- calibration methods: the histogram, percentile and KL against the plain reference ----

def _magnitudes(kind: str, count: int, seed: int) -> np.ndarray:
    """Nonzero |x| of a few shapes of distribution: bell, heavy tail, flat, with outliers."""
    rng = np.random.default_rng(seed)
    if kind == "normal":
        x = rng.standard_normal(count)
    elif kind == "laplace":
        x = rng.laplace(size=count)
    elif kind == "uniform":
        x = rng.uniform(-3, 3, count)
    else:  # a normal bulk and a few glitches 40 times larger
        x = rng.standard_normal(count)
        x[rng.choice(count, 5, replace=False)] = 40.0
    return np.abs(x[x != 0]).astype(np.float64)


def _histogram(parts: list[np.ndarray]) -> quantize.Histogram:
    histogram = quantize.Histogram()
    for part in parts:
        histogram.add(np.asarray(part, np.float64))
    return histogram


def _same_as_reference(histogram: quantize.Histogram, values: np.ndarray) -> None:
    counts, top = reference.histogram(values.tolist())
    assert histogram.top == top
    assert histogram.counts.tolist() == counts


KINDS = ["normal", "laplace", "uniform", "outliers"]
BINS = quantize.HISTOGRAM_BINS


@pytest.mark.parametrize("kind", KINDS)
def test_the_histogram_is_the_one_over_the_final_range_whatever_the_order(kind):
    x = _magnitudes(kind, 5_000, seed=1)
    parts = [x[:7] * 0.01, x[7:2000], x[2000:]]  # a small start: the range doubles often
    every = np.concatenate(parts)
    for order in itertools.permutations(parts):
        _same_as_reference(_histogram(list(order)), every)


@pytest.mark.parametrize("case", ["zeros", "one value", "bin edges", "powers of two",
                                  "growth", "far growth", "non-finite"])
def test_the_histogram_on_edge_inputs(case):
    rng = np.random.default_rng(7)
    if case == "zeros":
        parts = [np.zeros(10), np.zeros(0)]
    elif case == "one value":
        parts = [np.array([3.0])]
    elif case == "bin edges":  # k bin widths of top 8 (bin k), then 8 itself: top 16
        parts = [np.arange(1, BINS) * (8.0 / BINS), np.array([8.0])]
    elif case == "powers of two":  # a power of two is the bottom of its bin, top above it
        parts = [np.array([2.0**e]) for e in range(-6, 7)]
    elif case == "growth":  # the range doubles a few times at each part
        parts = [rng.random(500) * 10.0**e for e in range(-3, 4)]
    elif case == "far growth":  # by more than the bin count at once: all into bin 0
        parts = [rng.random(300) * 1e-3, rng.random(300) * 1e3]
    else:
        parts = [np.array([np.inf, 1.5, np.nan, 0.25])]
    histogram = _histogram(parts)
    _same_as_reference(histogram, np.concatenate(parts))
    _same_as_reference(_histogram(parts[::-1]), np.concatenate(parts))
    if case == "zeros":
        assert histogram.top == 0 and histogram.percentile(99) == 0
        assert histogram.kl_threshold() == 0
    if case == "one value":
        assert histogram.top == 4.0 and histogram.counts[3072] == 1
    if case == "bin edges":  # bins 2j and 2j + 1 of top 8 merged into bin j of top 16
        assert histogram.top == 16.0 and histogram.counts[0] == 1
        assert histogram.counts[1:BINS // 2].tolist() == [2] * (BINS // 2 - 1)
        assert histogram.counts[BINS // 2] == 1 and histogram.counts.sum() == BINS
    if case == "far growth":
        assert histogram.counts[0] == 300


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("percent", [50.0, 99.0, 99.9, 99.99, 100.0])
def test_the_percentile_is_the_reference_s_and_that_of_the_sorted_magnitudes_to_a_bin(
        kind, percent):
    x = _magnitudes(kind, 30_000, seed=2)
    histogram = _histogram([x[:100], x[100:]])
    counts, top = reference.histogram(x.tolist())
    found = histogram.percentile(percent)
    assert found == reference.percentile(counts, top, percent)
    ranked = np.sort(x)[max(1, math.ceil(round(percent * x.size) / 100)) - 1]
    assert ranked < found <= ranked + histogram.width


@pytest.mark.parametrize("count, percent, rank", [(10_000, 99.99, 9999), (1000, 99.9, 999),
                                                  (300, 99.0, 297), (7, 50.0, 4),
                                                  (1, 50.0, 1), (9999, 99.99, 9999)])
def test_the_percentile_rank_is_exact_for_the_percent_as_written(count, percent, rank):
    x = np.arange(1, count + 1, dtype=np.float64)  # the k-th smallest is k, in bin k
    histogram = _histogram([x])
    edge = histogram.percentile(percent)  # the upper edge of the bin holding value `rank`
    assert edge == reference.percentile(*reference.histogram(x.tolist()), percent)
    assert edge - histogram.width <= rank < edge


def _coarse(kind: str, seed: int, used_bins: int = 600) -> quantize.Histogram:
    """A histogram of `kind` with its counts in about `used_bins` bins (so the reference's
    loops stay quick): the full histogram's bins summed in groups."""
    full = _histogram([_magnitudes(kind, 50_000, seed=seed)])
    group = 2 ** max(0, math.ceil(math.log2(BINS / used_bins)) - 1)
    counts = np.zeros(BINS, np.int64)
    summed = full.counts.reshape(-1, group).sum(axis=1)
    counts[:summed.size] = summed
    histogram = quantize.Histogram()
    histogram.counts, histogram.top = counts, full.top * group
    return histogram


@pytest.mark.parametrize("kind", KINDS)
def test_kl_divergences_match_the_reference_s_loops(kind):
    histogram = _coarse(kind, seed=3)
    counts = histogram.counts.tolist()
    used = int(np.flatnonzero(histogram.counts)[-1]) + 1
    candidates = np.arange(quantize.KL_LEVELS, used + 1)
    fast = quantize.kl_divergences(histogram.counts[:used], candidates)
    slow = np.array([reference.kl_divergence(counts[:used], int(i)) for i in candidates])
    assert np.array_equal(np.isinf(fast), np.isinf(slow))
    finite = np.isfinite(slow)
    assert finite.any()
    np.testing.assert_allclose(fast[finite], slow[finite], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", [*KINDS, "gaps", "spike", "flat"])
def test_the_kl_clip_is_the_reference_s(kind):
    if kind in KINDS:
        histogram = _coarse(kind, seed=4)
    else:
        counts = np.zeros(BINS, np.int64)
        if kind == "gaps":  # every third bin empty: clips on an empty bin are infinite
            counts[:900] = np.random.default_rng(6).integers(0, 50, 900)
            counts[2:900:3] = 0
        elif kind == "spike":  # one bin holds nearly everything
            counts[400], counts[:800:7] = 10_000, 1
        else:
            counts[:700] = 5
        histogram = quantize.Histogram()
        histogram.counts, histogram.top = counts, 1.0
    want = reference.kl_threshold(histogram.counts.tolist(), histogram.top)
    assert histogram.kl_threshold() == want


def test_kl_clips_outliers_and_keeps_a_bell_nearly_whole():
    outliers = _histogram([_magnitudes("outliers", 100_000, seed=4)])
    assert outliers.kl_threshold() < 8  # the bulk ends near 4.5; the glitches are at 40
    bell = _magnitudes("normal", 100_000, seed=4)
    assert 0.8 * bell.max() < _histogram([bell]).kl_threshold() <= bell.max() + 1e-12
    few = quantize.Histogram()  # fewer bins used than levels: no clip
    few.counts[[3, 50, 100]], few.top = 1, 1.0
    assert few.kl_threshold() == 101 / BINS
    # a band away from zero (a head's logits around their bias prior): every clip inside
    # the band leaves P one spike that Q matches, so the divergence alone would clip it all
    band = 11.0 + np.random.default_rng(5).random(100_000)
    histogram = _histogram([band])
    used = int(np.flatnonzero(histogram.counts)[-1]) + 1
    every = np.arange(quantize.KL_LEVELS, used + 1)
    unguarded = every[np.argmin(quantize.kl_divergences(histogram.counts[:used], every))]
    assert unguarded * histogram.width < np.quantile(band, 0.5)
    assert histogram.kl_threshold() >= np.quantile(band, quantize.KL_MIN_KEPT / 100)


@pytest.mark.parametrize("method", ["percentile", "kl"])
def test_int8_scales_come_from_the_method_and_int16_and_outputs_keep_max_abs(method):
    graph = importer.compile_graph(importer.load(zoo.build("yolov8n", input_size=(64, 64))))
    segments = placement.place(graph)
    samples = samples_for(graph, 2, seed=0)
    samples[0][graph.inputs[0]][0, 0, 5, 5] = 500.0  # the input becomes int16 (auto)
    calibration = quantize.calibrate(graph, segments, samples, method=method,
                                     percentile=99.9)
    model = quantize.quantize(graph, segments, calibration)
    assert model.tensors[graph.inputs[0]].dtype == "int16"
    copies = {out for node in graph.nodes if execute.code_preserving(node)
              for out in node.outputs}  # their input's codes
    clipped = 0
    for name, tensor in model.tensors.items():
        if name in copies or name in graph.outputs or name not in calibration.stats:
            continue
        stats = calibration.stats[name]
        if tensor.dtype == "int16":
            assert tensor.scale == stats.max_abs / 32767, name
        else:
            clip = stats.clip(method, 99.9)
            assert tensor.scale == clip / 127 and clip <= stats.max_abs, name
            clipped += clip < stats.max_abs
    assert clipped > len(model.tensors) // 2
    for name in graph.outputs:  # a detection is the rare largest value: never clipped
        assert model.tensors[name].scale == calibration.stats[name].max_abs / 127
    assert any(calibration.stats[n].clip(method, 99.9) < calibration.stats[n].max_abs
               for n in graph.outputs)  # which the method would have clipped
    plain = quantize.calibrate(graph, segments, samples)  # max: no histograms gathered
    assert all(s.histogram is None for s in plain.stats.values())
    assert all(s.max_abs == plain.stats[n].max_abs for n, s in calibration.stats.items())
    assert quantize.quantize(graph, segments, plain).tensors == quantize.quantize(
        graph, segments, dataclasses.replace(calibration, method="max")).tensors


def test_what_the_bpu_hands_to_the_cpu_keeps_max_abs():
    """Logits that go to Softmax on the CPU: clipping their largest values would flatten the
    winner, so they keep max|x| though the method clips the tensors inside the BPU."""
    rng = np.random.default_rng(8)
    w1 = (rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((16, 8, 1, 1)) * 0.5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["h", "w2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["p"], axis=1)]
    model = _model(nodes, "head", [1, 4, 24, 24], "p", [1, 16, 24, 24], {"w1": w1, "w2": w2})
    graph = importer.compile_graph(importer.load(model))
    segments = placement.place(graph)
    assert [s.kind for s in segments] == ["quantize", "bpu", "cpu"]
    calibration = quantize.calibrate(graph, segments, samples_for(graph, 2, seed=0),
                                     method="kl")
    qmodel = quantize.quantize(graph, segments, calibration)
    stats = calibration.stats["logits"]
    assert stats.clip("kl", 99.99) < stats.max_abs  # the method would clip them
    assert qmodel.tensors["logits"].scale == stats.max_abs / 127


def test_a_tensor_that_is_always_zero_gets_scale_1_whatever_the_method():
    stats = quantize.TensorStats(0.0, 0.0, quantize.Histogram())
    assert stats.clip("kl", 99.99) == 0.0 and stats.clip("percentile", 50.0) == 0.0
    one = quantize.TensorStats(3.0, 3.0, _histogram([np.array([3.0])]))
    assert one.clip("kl", 99.99) == 3.0 and one.clip("percentile", 50.0) == 3.0


def test_bad_methods_are_refused():
    graph = importer.compile_graph(importer.load(two_convs()))
    segments = placement.place(graph)
    samples = samples_for(graph, 1, seed=0)
    with pytest.raises(InputError, match="--calib-method mean: expected one of max, "):
        quantize.calibrate(graph, segments, samples, method="mean")
    with pytest.raises(InputError, match=r"--calib-percentile 49\.0: expected 50 to 100"):
        quantize.calibrate(graph, segments, samples, method="percentile", percentile=49.0)
    with pytest.raises(InputError, match=r"--calib-percentile nan"):
        quantize.Calibration({}, 0, "percentile", math.nan)
    calibration = quantize.calibrate(graph, segments, samples)
    with pytest.raises(InputError, match="needs histograms"):
        quantize.quantize(graph, segments, dataclasses.replace(calibration, method="kl"))


def _cpu_head_bpu_conv_cpu_tail() -> onnx.ModelProto:
    """x -> Asinh (CPU) -> Conv 3x3 (BPU) -> Softmax (CPU) -> y."""
    w = (np.random.default_rng(3).standard_normal((3, 4, 3, 3)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Asinh", ["x"], ["s"]),
             helper.make_node("Conv", ["s", "w"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["h"], ["y"], axis=1)]
    return _model(nodes, "tail", [1, 4, 6, 6], "y", [1, 3, 6, 6], {"w": w})


def _recording_float_node(monkeypatch) -> list[str]:
    ran: list[str] = []
    real = nn_reference.float_node

    def float_node(graph, node, ins, *args, **kwargs):
        ran.append(node.op)
        return real(graph, node, ins, *args, **kwargs)

    monkeypatch.setattr(nn_reference, "float_node", float_node)
    return ran


def test_calibration_runs_only_what_the_bpu_tensors_depend_on(monkeypatch):
    graph = importer.compile_graph(importer.load(_cpu_head_bpu_conv_cpu_tail()))
    segments = placement.place(graph)
    where = {node.op: s.kind for s in segments for node in graph.nodes if node.name in s.nodes}
    assert where == {"Asinh": "cpu", "Conv": "bpu", "Softmax": "cpu"}
    samples = samples_for(graph, 3, seed=2)
    ran = _recording_float_node(monkeypatch)
    pruned = quantize.calibrate(graph, segments, samples, method="kl")
    assert ran == ["Asinh", "Conv"] * 3  # the CPU head feeds the BPU; the tail does not
    monkeypatch.setattr(quantize, "_feeding", lambda g, tensors: {n.name for n in g.nodes})
    ran.clear()
    whole = quantize.calibrate(graph, segments, samples, method="kl")
    assert ran == ["Asinh", "Conv", "Softmax"] * 3
    assert pruned == whole and set(pruned.stats) == {"s", "h"}
    for name, stats in pruned.stats.items():  # the histograms too, which == leaves out
        other = whole.stats[name].histogram
        assert stats.histogram is not None and other is not None
        assert stats.histogram.top == other.top
        assert stats.histogram.counts.tobytes() == other.counts.tobytes()


def test_a_model_with_nothing_on_the_bpu_calibrates_nothing_and_is_exact(monkeypatch):
    nodes = [helper.make_node("Asinh", ["x"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=1)]
    graph = importer.compile_graph(importer.load(
        _model(nodes, "cpu", [1, 4, 6, 6], "y", [1, 4, 6, 6], {})))
    segments = placement.place(graph)
    assert [s.kind for s in segments] == ["cpu"]
    samples = samples_for(graph, 2, seed=4)
    ran = _recording_float_node(monkeypatch)
    calibration = quantize.calibrate(graph, segments, samples)
    assert ran == [] and calibration.stats == {}
    qmodel = quantize.quantize(graph, segments, calibration)
    assert quantize.accuracy(qmodel, samples) == {"y": 1.0}
    for feeds in samples:  # what the accuracy check no longer runs: the same float code
        assert execute.run(qmodel, feeds)["y"].tobytes() == \
            nn_reference.run_float(graph, feeds)["y"].tobytes()


def test_calibration_keeps_the_float_outputs_the_accuracy_check_would_compute(monkeypatch):
    graph = importer.compile_graph(importer.load(_cpu_head_bpu_conv_cpu_tail()))
    segments = placement.place(graph)
    samples = samples_for(graph, 3, seed=5)
    ran = _recording_float_node(monkeypatch)
    calibration = quantize.calibrate(graph, segments, samples, keep_outputs=2)
    # the first two samples run the CPU tail too, the third only what feeds the BPU
    assert ran == ["Asinh", "Conv", "Softmax"] * 2 + ["Asinh", "Conv"]
    assert calibration == quantize.calibrate(graph, segments, samples)
    assert len(calibration.float_outputs) == 2
    for feeds, kept in zip(samples, calibration.float_outputs, strict=False):
        assert kept.keys() == {"y"}
        assert kept["y"].tobytes() == nn_reference.run_float(graph, feeds)["y"].tobytes()
    qmodel = quantize.quantize(graph, segments, calibration)
    ran.clear()
    given = quantize.accuracy(qmodel, samples, calibration.float_outputs)
    assert ran.count("Softmax") == 3 + 1  # each quantised run's tail; one float run, not 3
    assert given == quantize.accuracy(qmodel, samples)

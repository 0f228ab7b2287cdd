import dataclasses
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from emu.bpu import timing
from emu.mem.ddr import solo_transfer_ps
from emu.nn import compiler, importer, layers, placement, zoo
from emu.nn.estimate import estimate
from emu.soc.clock import PS_PER_S, Clock
from emu.soc.config import load_config
from emu.workloads import bpu_calibration
from tests.conformance import composites

CFG = load_config().soc
BPU_CLOCK = Clock("bpu", CFG.bpu.freq_hz)
FC_PS = BPU_CLOCK.cycles_to_ps(CFG.bpu.fc_overhead_cycles)


def _split_model() -> onnx.ModelProto:
    """conv 3x3 (8 -> 16) + ReLU, Softmax over channels (a CPU op), conv 1x1 (16 -> 4)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 16, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Softmax", ["r1"], ["s"], name="softmax", axis=1),
             helper.make_node("Conv", ["s", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(
        nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 16, 16])],
        initializer=[w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def split():
    graph = importer.compile_graph(importer.load(_split_model()))
    return graph, placement.place(graph)


def test_the_json_has_the_hb_perf_contract(split):
    graph, segments = split
    doc = estimate(graph, segments, CFG, 2, name="split").to_json()
    assert {"name", "latency_ms", "fps", "ddr_bytes_per_frame", "layers"} <= set(doc)
    assert doc["name"] == "split"
    assert [set(line) for line in doc["layers"]] == [
        {"name", "op", "where", "ops", "compute_us", "load_store_us"}] * len(doc["layers"])
    # The CPU invalidates what the BPU wrote before reading it and cleans what the BPU
    # reads after writing it; the float output, read by the CPU only, is not cleaned.
    assert [(line["name"], line["where"]) for line in doc["layers"]] == [
        ("quantize x", "cpu"), ("layout x", "cpu"), ("cache clean", "cpu"), ("conv1", "bpu"),
        ("cache invalidate", "cpu"), ("layout r1", "cpu"), ("dequantize r1", "cpu"),
        ("softmax", "cpu"), ("quantize s", "cpu"), ("layout s", "cpu"), ("cache clean", "cpu"),
        ("conv2", "bpu"), ("cache invalidate", "cpu"), ("layout y", "cpu"),
        ("dequantize y", "cpu")]
    assert doc["layers"][3]["ops"] == 2 * 2 * 16 * 16 * 16 * 8 * 9


def test_a_cpu_op_splits_the_model_and_each_subgraph_pays_its_function_call(split):
    graph, segments = split
    est = estimate(graph, segments, CFG, 2)
    assert est.latency_ps == sum(line.time_ps for line in est.layers)
    bpu = [line for line in est.layers if line.where == "bpu"]
    layer_ps = sum(max(line.compute_ps, line.load_store_ps) for line in bpu)
    fixed_ps = len(bpu) * BPU_CLOCK.cycles_to_ps(CFG.bpu.layer_overhead_cycles)
    assert est.bpu_ps == layer_ps + fixed_ps + 2 * FC_PS
    # Both subgraphs hand their tensors over through DDR.
    assert all(line.loaded_bytes and line.stored_bytes for line in bpu)
    assert est.fps == pytest.approx(2 / (est.latency_ps / PS_PER_S))


def test_cpu_layers_follow_the_a55_issue_model_its_caches_and_the_ddr(split):
    graph, segments = split
    cpu, ddr = CFG.cpu, CFG.ddr
    quantize = estimate(graph, segments, CFG, 2).layers[0]
    elements = 2 * 8 * 16 * 16
    vectors = elements // (cpu.vector_bytes // 4)
    # per vector: 1 load, 0.25 store, 3 FP, 1 ALU, 1 branch, dual issue: 6.25 / 2 cycles,
    # and the loop's last branch mispredicted
    issue = 6.25 * vectors / cpu.issue_width + cpu.mispredict_cycles
    # The input (16 KiB of floats, 4 pages) is still in the L3 from the last inference (all
    # the CPU reads fits): two misses before the prefetcher has the stride, L2 TLB hits. The
    # codes (4 KiB) stream to DDR: a walk for their page, their bytes at the port.
    memory = 2 * cpu.l3.hit_latency_cycles + 4 * cpu.tlb.l2_hit_cycles + cpu.tlb.walk_cycles
    assert quantize.compute_ps == math.ceil((issue + memory) * PS_PER_S / cpu.freq_hz)
    assert quantize.load_store_ps == math.ceil(elements * PS_PER_S / cpu.ddr_port_bytes_per_s)
    assert quantize.time_ps == quantize.compute_ps + quantize.load_store_ps
    slow = dataclasses.replace(CFG, cpu=dataclasses.replace(cpu, freq_hz=cpu.freq_hz / 4))
    assert estimate(graph, segments, slow, 2).layers[0].compute_ps > quantize.compute_ps
    # A DDR narrower than the port sets the pace.
    narrow = dataclasses.replace(CFG, ddr=dataclasses.replace(ddr, bw_bytes_per_s=1e9))
    assert estimate(graph, segments, narrow, 2).layers[0].load_store_ps == math.ceil(
        elements * PS_PER_S / 1e9)
    with pytest.raises(ValueError, match="batch"):
        estimate(graph, segments, CFG, 0)


def test_weights_that_fit_on_chip_stay_there_across_runs():
    graph = bpu_calibration.compiled("mobilenetv2", 32, 1, 10)
    segments = placement.place(graph)
    streamed = estimate(graph, segments, CFG, 1)
    big = dataclasses.replace(CFG, bpu=dataclasses.replace(CFG.bpu, weight_sram_bytes=8 << 20))
    resident = estimate(graph, segments, big, 1)
    weights = sum(lg.weight_bytes for part in
                  [layers.layer_groups(graph, s) for s in segments if s.kind == "bpu"]
                  for lg in part)
    assert streamed.ddr_bytes_per_frame - resident.ddr_bytes_per_frame == weights
    assert resident.latency_ps < streamed.latency_ps


def test_max_time_per_fc_splits_a_subgraph_into_more_calls():
    graph = bpu_calibration.compiled("mobilenetv2", 32, 1, 10)
    segments = placement.place(graph)
    whole = estimate(graph, segments, CFG, 1)
    cut = estimate(graph, segments, CFG, 1, max_time_per_fc_ps=20_000_000)
    (part,) = [layers.layer_groups(graph, s) for s in segments if s.kind == "bpu"]
    spans = timing.split_function_calls(part, CFG.bpu, CFG.ddr, 20_000_000)
    assert len(spans) > 1
    assert cut.bpu_ps >= whole.bpu_ps + (len(spans) - 1) * FC_PS


def _bpu_layers(graph):
    (segment,) = [s for s in placement.place(graph) if s.kind == "bpu"]
    return layers.layer_groups(graph, segment)


def test_layer_groups_of_mobilenetv2_classify_its_convs_and_alias_the_flatten():
    graph = bpu_calibration.compiled("mobilenetv2", 32, 1, 10)
    groups = {lg.name: lg for lg in _bpu_layers(graph)}
    assert "fc.flatten" not in groups  # a view of the pool's output
    assert groups["logits"].inputs[0].name == "fc.pool"
    assert groups["block1.dw.conv"].op_class == "depthwise"
    assert groups["block1.dw.conv"].cin == 1 and groups["block1.dw.conv"].groups == 96
    assert groups["block1.expand.conv"].op_class == "dense"
    assert groups["block2.project.conv"].inputs[1].name == "block1.project.bn"  # residual
    assert groups["fc.pool"].op_class == "pool" and groups["fc.pool"].kernel_h == 1
    assert [lg.name for lg in groups.values() if lg.leaves] == ["logits"]
    stem = groups["stem.conv"]
    assert stem.weight_bytes == 32 * 3 * 9 + 32 * 4  # int8 weights, int32 bias
    # hb_perf counts 12,249,856 ops per frame for this network
    assert sum(lg.ops for lg in groups.values() if lg.op in ("Conv", "FC")) == 12_249_856


@pytest.mark.parametrize("batch", [1, 256])
def test_a_flattened_pool_is_held_as_the_fc_reads_it(batch):
    """The pool's output is read only through the flatten's view (one row of `batch`
    pixels of 1280 channels): it is held in that shape, so whatever the pool writes to DDR
    is what the FC reads back, byte for byte, and its footprint on chip is the view's."""
    graph = bpu_calibration.compiled("mobilenetv2", 32, batch, 10)
    groups = {lg.name: lg for lg in _bpu_layers(graph)}
    pool, fc = groups["fc.pool"], groups["logits"]
    assert timing.held(pool) == fc.inputs[0]  # at batch 1 the view is the output's shape
    assert (pool.output.n, pool.output.w) == (batch, 1)
    assert (fc.inputs[0].n, fc.inputs[0].h, fc.inputs[0].w, fc.inputs[0].c) == (1, 1, batch, 1280)
    assert timing.held(groups["head.conv"]) == groups["head.conv"].output  # read as is
    tight = dataclasses.replace(CFG, bpu=dataclasses.replace(CFG.bpu, sram_bytes=64 << 10))
    costs = {c.name: c for c in timing.layer_costs(list(groups.values()), tight.bpu, CFG.ddr)}
    view = timing.layout_bytes(fc.inputs[0], CFG.bpu)
    assert costs["fc.pool"].written_bytes == view
    assert costs["logits"].read_bytes - fc.weight_bytes == view


def test_layer_groups_of_yolov8_fuse_silu_alias_split_and_copy_concat():
    graph = bpu_calibration.compiled("yolov8n", 64, 1)
    groups = _bpu_layers(graph)
    ops = {lg.op for lg in groups}
    assert {"Conv+Silu", "Concat", "MaxPool", "Resize", "Add"} <= ops
    assert "Silu" not in ops and "Split" not in ops
    classes = {lg.op: lg.op_class for lg in groups}
    assert (classes["Concat"], classes["MaxPool"], classes["Resize"], classes["Add"]) == (
        "move", "pool", "resize", "elementwise")
    # what the compiler may cut a layer group into: a Concat of channels by rows only
    axes = {lg.op: lg.split_axes for lg in groups}
    assert axes["Concat"] == (timing.ROWS,)
    assert axes["Conv+Silu"] == axes["MaxPool"] == (timing.ROWS, timing.CHANNELS)
    produced = {lg.output.name for lg in groups}
    # Readers of a split's parts read slices of the split's input.
    assert all(ref.name in produced or ref.name in graph.inputs
               for lg in groups for ref in lg.inputs)
    assert sum(lg.leaves for lg in groups) == len(graph.outputs)


def test_layer_groups_of_an_lstm_and_a_grid_sample():
    """The composites' LSTMs: gate matmuls and cell updates of T x D dependent passes; a
    grid sample: a gather of 2 x 2 taps per output element, timed as data movement."""
    graph = importer.compile_graph(importer.load(composites.lstm_sequence()))
    groups = {lg.name: lg for lg in _bpu_layers(graph)}
    gates, cell = groups["lstm2"], groups["lstm2.cell"]    # bidirectional, 12 steps, 24 -> 16
    assert (gates.op_class, gates.passes, gates.cin) == ("dense", 24, 24 + 16)
    assert (gates.output.w, gates.output.c) == (24, 64)
    assert gates.weight_bytes == 2 * 64 * 40 + 2 * 64 * 4
    assert (cell.op_class, cell.passes, cell.cin, cell.inputs) == (
        "elementwise", 24, layers.LSTM_CELL_OPS, (gates.output,))
    assert groups["lstm1"].inputs[0].name == "sequence"
    assert groups["lstm2"].inputs[0].name == "lstm1.Y"         # through the Squeeze view
    assert cell.leaves                                           # lstm2.Y_h is an output
    assert gates.split_axes == cell.split_axes == ()             # dependent passes
    graph = importer.compile_graph(importer.load(composites.grid_sample_warp()))
    warp = next(lg for lg in _bpu_layers(graph) if lg.op == "GridSample")
    assert (warp.op_class, warp.kernel_h, warp.kernel_w, warp.split_axes) == ("move", 2, 2, ())
    assert warp.macs == 16 * 16 * 16 * 4
    assert [(t.name, t.c) for t in warp.inputs] == [("features.act", 16), ("grid", 2)]


def test_int16_tensors_double_their_bytes():
    graph = bpu_calibration.compiled("mobilenetv2", 32, 1, 10)
    (segment,) = [s for s in placement.place(graph) if s.kind == "bpu"]
    wide = layers.layer_groups(graph, segment, {"stem.act": "int16"})
    stem = next(lg for lg in wide if lg.name == "stem.conv")
    assert stem.output.elem_bytes == 2
    with pytest.raises(ValueError, match="quantize"):
        layers.layer_groups(graph, placement.place(graph)[0])


def test_a_compiled_cut_can_be_given_instead_of_a_time_limit():
    graph = bpu_calibration.compiled("mobilenetv2", 32, 1, 10)
    segments = placement.place(graph)
    index = next(k for k, s in enumerate(segments) if s.kind == "bpu")
    count = len(layers.layer_groups(graph, segments[index]))
    whole = estimate(graph, segments, CFG, 1)
    cut = estimate(graph, segments, CFG, 1, spans={index: [(0, 10), (10, count)]})
    assert cut.bpu_ps == whole.bpu_ps + FC_PS  # one more FC; the maps stay on chip
    with pytest.raises(ValueError, match="consecutive"):
        estimate(graph, segments, CFG, 1, spans={index: [(0, 10)]})


def test_a_four_d_tensor_changes_layout_where_it_crosses_between_cpu_and_bpu(split):
    graph, segments = split
    lines = estimate(graph, segments, CFG, 2).layers
    quantize, layout = lines[0], lines[1]
    assert (quantize.op, layout.op) == ("quantize", "layout")
    codes = 2 * 8 * 16 * 16  # int8: one byte per element
    vectors = codes // CFG.cpu.vector_bytes
    # per vector: a load, a store, two permutes and the loop's ALU op, a branch; the codes
    # the quantize streamed to DDR come back (two demand misses from DDR, then prefetched)
    cpu = CFG.cpu
    cycles = (6 * vectors / cpu.issue_width + cpu.mispredict_cycles
              + 2 * cpu.l3.hit_latency_cycles + 2 * cpu.tlb.walk_cycles)
    assert layout.compute_ps == math.ceil(cycles * PS_PER_S / cpu.freq_hz)
    assert layout.load_store_ps == 2 * CFG.ddr.latency_ps + math.ceil(
        2 * codes * PS_PER_S / cpu.ddr_port_bytes_per_s)
    assert [line.op for line in lines if line.where == "cpu"][-2:] == ["layout", "dequantize"]


@pytest.fixture(scope="module")
def small_net():
    """MobileNetV2 at batch 2 on a 32 x 40 input: 40 is no multiple of NV12's row pitch."""
    return importer.compile_graph(importer.load(
        zoo.build("mobilenetv2", input_size=(32, 40), batch=2, classes=10)))


@pytest.mark.parametrize("align_cout", [1, 8, 32])
@pytest.mark.parametrize("input_type, frame_bytes", [
    ("nv12", 32 * 48 * 3 // 2),  # Y then U, V rows at the 16-byte pitch hbDNN aligns to
    ("rgb", 32 * 40 * 3), ("bgr", 32 * 40 * 3), ("yuv444", 32 * 40 * 3)])
def test_an_image_input_is_read_at_its_real_bytes_whatever_the_granules(
        small_net, input_type, frame_bytes, align_cout):
    cfg = load_config(overrides=[f"bpu.align_cout={align_cout}"]).soc
    graph = compiler.add_preprocess(small_net, compiler.CompileOptions(input_type=input_type))
    lines = {line.name: line for line in estimate(graph, placement.place(graph), cfg, 2).layers}
    assert lines["preprocess"].loaded_bytes == 2 * frame_bytes
    assert lines["preprocess"].stored_bytes == 0  # the network's input stays on chip
    assert lines["preprocess"].load_store_ps == solo_transfer_ps(
        2 * frame_bytes, cfg.ddr, cfg.bpu.ddr_port_bytes_per_s)


def test_a_feature_map_input_is_still_read_in_the_bpu_layout(small_net):
    cfg = load_config(overrides=["bpu.align_cout=8", "bpu.align_w=32"]).soc
    stem = next(lg for lg in _bpu_layers(small_net) if lg.name == "stem.conv")
    lines = {line.name: line for line in
             estimate(small_net, placement.place(small_net), cfg, 2).layers}
    assert not stem.inputs[0].packed
    assert lines["stem.conv"].loaded_bytes - stem.weight_bytes == 2 * 32 * 64 * 8

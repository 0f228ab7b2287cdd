import dataclasses

import pytest

from emu.bpu.timing import (
    CHANNELS,
    ROWS,
    LayerGroup,
    TensorRef,
    compute_cycles,
    function_calls,
    input_rows,
    layer_costs,
    layer_part,
    layout_bytes,
    padded_macs,
    plan_residency,
    split_function_calls,
    with_prefix,
)
from emu.soc.config import load_config

# Round numbers: 1000 MACs a cycle at 1 GHz, no padding, full efficiency, 1 byte per ns.
BPU = load_config(overrides=[
    "bpu.freq_hz=1GHz", "bpu.macs_per_cycle=1000", "bpu.align_h=1", "bpu.align_w=1",
    "bpu.align_cin=1", "bpu.align_cout=1", "bpu.efficiency_dense=1",
    "bpu.efficiency_depthwise=0.5", "bpu.sram_bytes=1MiB", "bpu.weight_sram_bytes=0",
    "bpu.ddr_port_bytes_per_s=1GB/s", "bpu.layer_overhead_cycles=0",
    "bpu.fc_overhead_cycles=0",
]).soc.bpu
# No latency, and a DDR wider than the port: the DDR time is the bytes at the port.
DDR = load_config(overrides=["ddr.latency_ps=0", "ddr.bw_bytes_per_s=100GB/s"]).soc.ddr
KIB = 1024


def fmap(name: str, side: int, c: int, elem_bytes: int = 1) -> TensorRef:
    return TensorRef(name, 1, side, side, c, elem_bytes)


def conv(name: str, x: TensorRef, out: TensorRef, k: int = 1, weights: int = 0,
         **kw: object) -> LayerGroup:
    return LayerGroup(name, "Conv", "dense", out, (x,), cin=x.c, kernel_h=k, kernel_w=k,
                      weight_bytes=weights, **kw)  # type: ignore[arg-type]


def chain(sizes_kib: list[int]) -> list[LayerGroup]:
    """1x1 convs whose outputs are `sizes_kib` KiB (side 32, channels = KiB)."""
    x = fmap("in", 32, 1)
    layers = []
    for i, size in enumerate(sizes_kib):
        out = fmap(f"t{i}", 32, size)
        layers.append(conv(f"l{i}", x, out, leaves=i == len(sizes_kib) - 1))
        x = out
    return layers


def test_compute_is_padded_macs_over_the_rate_of_the_op_class():
    layer = conv("c", fmap("x", 3, 5), fmap("y", 3, 7), k=3)
    assert layer.macs == 3 * 3 * 7 * 5 * 9 and layer.ops == 2 * layer.macs
    assert compute_cycles(layer, BPU) == 3  # 2835 MACs at 1000 a cycle, rounded up
    padded = dataclasses.replace(BPU, align_h=4, align_w=8, align_cin=16, align_cout=16)
    assert padded_macs(layer, padded) == 4 * 8 * 16 * 16 * 9
    dw = dataclasses.replace(layer, op_class="depthwise", cin=1, groups=7)
    assert compute_cycles(dw, BPU) == 2 * -(-dw.macs // 1000)  # efficiency 0.5
    assert padded_macs(dw, padded) == 4 * 8 * 16 * 16 * 9  # one input channel of 16 used


def test_int16_operands_take_two_int8_lanes_each():
    x8, x16 = fmap("x", 4, 8), fmap("x", 4, 8, elem_bytes=2)
    base = conv("c", x8, fmap("y", 4, 8), weights=64)
    assert padded_macs(dataclasses.replace(base, inputs=(x16,)), BPU) == 2 * base.macs
    assert padded_macs(dataclasses.replace(base, inputs=(x16,), weight_elem_bytes=2),
                       BPU) == 4 * base.macs


def test_the_feature_map_layout_pads_h_w_and_c():
    padded = dataclasses.replace(BPU, align_h=4, align_w=8, align_cout=16)
    assert layout_bytes(TensorRef("t", 2, 1, 1, 20, 2), padded) == 2 * 4 * 8 * 32 * 2


def test_a_packed_image_is_its_bytes_in_ddr_and_on_chip_but_its_reader_pads_compute():
    padded = dataclasses.replace(BPU, align_h=4, align_w=32, align_cin=8, align_cout=8)
    image = TensorRef("img", 2, 5, 30, 3, packed=True)
    assert layout_bytes(image, padded) == image.bytes == 2 * 5 * 30 * 3
    assert layout_bytes(dataclasses.replace(image, packed=False), padded) == 2 * 8 * 32 * 8
    out = TensorRef("y", 2, 5, 30, 3)
    pre = LayerGroup("pre", "Preprocess", "elementwise", out, (image,))
    assert padded_macs(pre, padded) == 2 * 8 * 32 * 8 * 8  # the compute granules still pad
    (cost,) = layer_costs([pre], padded, DDR)
    assert cost.read_bytes == image.bytes
    # made on chip (the resizer's output) and read there, it takes its own bytes of SRAM
    made = LayerGroup("made", "RoiResize", "resize", image, (fmap("roi", 4, 3),))
    tight = dataclasses.replace(padded, sram_bytes=image.bytes)
    assert plan_residency([made, dataclasses.replace(pre, leaves=True)], tight) == {"img"}
    spread = dataclasses.replace(image, packed=False)
    made, pre = (dataclasses.replace(made, output=spread),
                 dataclasses.replace(pre, inputs=(spread,), leaves=True))
    assert plan_residency([made, pre], tight) == set()


def test_intermediates_stay_on_chip_while_they_fit_and_subgraph_ends_use_ddr():
    costs = layer_costs(chain([256, 256, 256]), BPU, DDR)
    assert [c.read_bytes for c in costs] == [1 * KIB, 0, 0]  # only the input from DDR
    assert [c.written_bytes for c in costs] == [0, 0, 256 * KIB]  # only the output to DDR


def test_a_tensor_that_does_not_fit_is_written_once_and_read_by_its_consumer():
    costs = layer_costs(chain([256, 2048, 256]), BPU, DDR)
    assert [c.written_bytes for c in costs] == [0, 2048 * KIB, 256 * KIB]
    assert [c.read_bytes for c in costs] == [1 * KIB, 0, 2048 * KIB]


def test_smaller_tensors_are_kept_first_and_live_ones_share_the_sram():
    # t0 (600 KiB) is read again by the last layer: it is live throughout, so t1 (500 KiB)
    # cannot join it; the smaller t1 is placed first and t0 spills instead.
    x = fmap("in", 32, 1)
    t0, t1, t2 = fmap("t0", 32, 600), fmap("t1", 32, 500), fmap("t2", 32, 8)
    layers = [conv("a", x, t0), conv("b", t0, t1),
              LayerGroup("c", "Add", "elementwise", t2, (t1, t0), cin=2, leaves=True)]
    assert plan_residency(layers, BPU) == {"t1"}
    assert plan_residency(layers, dataclasses.replace(BPU, sram_bytes=1100 * KIB)) == {
        "t0", "t1"}


def test_weights_are_read_every_run_unless_all_of_them_fit():
    layers = [conv("a", fmap("in", 8, 8), fmap("t", 8, 8), weights=3000),
              conv("b", fmap("t", 8, 8), fmap("out", 8, 8), weights=5000, leaves=True)]
    streamed = layer_costs(layers, BPU, DDR)
    assert [c.read_bytes for c in streamed] == [512 + 3000, 5000]
    resident = layer_costs(layers, dataclasses.replace(BPU, weight_sram_bytes=8000), DDR)
    assert [c.read_bytes for c in resident] == [512, 0]


def test_a_layer_takes_the_slower_of_compute_and_ddr_plus_its_fixed_cost():
    slow = dataclasses.replace(BPU, layer_overhead_cycles=7)
    big = conv("c", fmap("x", 10, 100), fmap("y", 10, 100), leaves=True)
    (cost,) = layer_costs([big], slow, DDR)
    assert cost.compute_ps == 1000 * 1000  # 1e6 MACs: 1000 cycles of 1 ns
    assert cost.load_store_ps == 20_000 * 1000  # 20 kB at 1 byte per ns
    assert cost.fixed_ps == 7000 and cost.time_ps == 20_000_000 + 7000


def test_the_ddr_time_is_the_layers_flow_alone_on_the_ddr():
    """The DDR's latency first, then the bytes at the lesser of the port and the DDR."""
    big = conv("c", fmap("x", 10, 100), fmap("y", 10, 100), leaves=True)
    narrow = dataclasses.replace(DDR, latency_ps=300_000, bw_bytes_per_s=0.5e9)
    (cost,) = layer_costs([big], BPU, narrow)
    assert cost.load_store_ps == 300_000 + 40_000 * 1000  # 20 kB at half a byte per ns
    (cost,) = layer_costs([big], BPU, dataclasses.replace(narrow, bw_bytes_per_s=4e9))
    assert cost.load_store_ps == 300_000 + 20_000 * 1000  # the port is the narrower


def test_dependent_passes_pad_each_slice_and_pay_the_fixed_cost_each():
    """An LSTM's gate matmuls: 10 steps of a batch-1 matrix-vector product, 32 outputs over
    48 inputs, each step a one-column slice of the output's W."""
    x = TensorRef("x", 1, 1, 10, 16)
    gates = TensorRef("gates", 1, 1, 10, 32)
    steps = LayerGroup("lstm", "LSTM", "dense", gates, (x,), cin=48, passes=10)
    assert steps.macs == 10 * 32 * 48
    padded = dataclasses.replace(BPU, align_w=8, layer_overhead_cycles=7)
    assert padded_macs(steps, padded) == 10 * 8 * 32 * 48     # each step alone in 8 lanes
    one_pass = dataclasses.replace(steps, passes=1)
    assert padded_macs(one_pass, padded) == 16 * 32 * 48      # all steps side by side
    (cost,) = layer_costs([steps], padded, DDR)
    assert cost.fixed_ps == 10 * 7000
    with pytest.raises(ValueError, match="3 passes do not split"):
        dataclasses.replace(steps, passes=3)
    with pytest.raises(ValueError, match="positive"):
        dataclasses.replace(steps, passes=0)


def test_split_function_calls_keeps_each_call_under_the_limit():
    layers = chain([64] * 5 + [1])
    assert split_function_calls(layers, BPU, DDR) == [(0, 6)]
    (one,) = function_calls(layers, BPU, DDR)
    assert [lg.name for lg in one.layers] == [f"l{i}" for i in range(6)]
    whole = one.time_ps
    assert split_function_calls(layers, BPU, DDR, whole) == [(0, 6)]
    for limit in (whole - 1, whole // 2, whole // 3, one.costs[1].time_ps,
                  one.costs[1].time_ps // 4):
        spans = split_function_calls(layers, BPU, DDR, limit)
        calls = function_calls(layers, BPU, DDR, spans)
        assert len(calls) > 1 and all(call.time_ps <= limit for call in calls)
        for k in range(len(spans) - 1):  # whole layer groups: as many as the limit allows
            if len(spans[k]) == len(spans[k + 1]) == 2:
                assert calls[k].time_ps + calls[k + 1].costs[0].time_ps > limit
    # l1 (4.2 us of compute) is longer than a quarter of itself: cut into parts
    quarter = split_function_calls(layers, BPU, DDR, one.costs[1].time_ps // 4)
    assert [span for span in quarter if len(span) == 5 and span[0] == 1]


def test_an_fc_boundary_moves_nothing_when_the_maps_stay_on_chip():
    layers = chain([64] * 5 + [1])
    (one,) = function_calls(layers, BPU, DDR)
    pairs = [(0, 2), (2, 4), (4, 6)]
    calls = function_calls(layers, BPU, DDR, pairs)
    # The crossing maps stay in the SRAM: every layer group costs what it does uncut.
    assert [c for call in calls for c in call.costs] == list(one.costs)
    assert sum(c.read_bytes + c.written_bytes for call in calls for c in call.costs) == \
        1024 + 1024
    fc = dataclasses.replace(BPU, fc_overhead_cycles=500)
    assert sum(c.time_ps for c in function_calls(layers, fc, DDR, pairs)) == \
        function_calls(layers, fc, DDR)[0].time_ps + 2 * 500_000
    # ... and are what a task switched out at the boundary spills.
    crossing = 64 * 32 * 32
    assert [c.spill_bytes for c in calls] == [crossing, crossing, 0]
    assert [c.sram_bytes for c in calls] == [2 * crossing] * 3  # l1, l3, l4: two maps
    # A map the SRAM cannot hold at the boundary is in DDR with or without the cut, and
    # only the one that is on chip is spilled: t0, t2, t4 fit next to their neighbours.
    small = dataclasses.replace(BPU, sram_bytes=100 * KIB)
    assert plan_residency(layers, small) == {"t0", "t2", "t4"}
    (one,) = function_calls(layers, small, DDR)
    calls = function_calls(layers, small, DDR, [(0, 1), (1, 2), (2, 6)])
    assert [c for call in calls for c in call.costs] == list(one.costs)
    assert [c.spill_bytes for c in calls] == [crossing, 0, 0]


def test_a_layer_group_longer_than_the_limit_becomes_row_bands_with_their_halo():
    # A 3x3 conv between DDR maps of 64 KiB, bound by its DDR traffic (131 us).
    layer = conv("c", fmap("x", 64, 16), fmap("y", 64, 16), k=3, leaves=True)
    (whole,) = function_calls([layer], BPU, DDR)
    limit = whole.time_ps // 3
    spans = split_function_calls([layer], BPU, DDR, limit)
    assert len(spans) > 1 and all(span[:3] == (0, 1, ROWS) for span in spans)
    assert [span[3] for span in spans] == [span[4] for span in [(0, 0, 0, 0, 0), *spans[:-1]]]
    assert spans[-1][4] == 64
    calls = function_calls([layer], BPU, DDR, spans)
    assert all(call.time_ps <= limit for call in calls)
    parts = [call.layers[0] for call in calls]
    assert sum(part.macs for part in parts) == layer.macs
    row = 64 * 16
    # Each band writes its rows and reads them with the kernel's halo (2 rows).
    assert [c.written_bytes for call in calls for c in call.costs] == \
        [(span[4] - span[3]) * row for span in spans]
    assert [c.read_bytes for call in calls for c in call.costs] == \
        [min(64, span[4] - span[3] + 2) * row for span in spans]
    assert [input_rows(layer, layer.inputs[0], r) for r in (1, 5, 64)] == [3, 7, 64]
    # A one-row band fits any limit above its own time; below it, bands are one row.
    assert len(split_function_calls([layer], BPU, DDR, 1)) == 64
    # A layer group whose op cannot be cut stays one FC.
    assert split_function_calls([dataclasses.replace(layer, split_axes=())], BPU, DDR,
                                limit) == [(0, 1)]


def test_a_layer_group_bound_by_its_weights_becomes_tiles_of_output_channels():
    # 590 KB of 3x3 weights streamed from DDR for an 8x8 map: every row band would read
    # them all, a tile of channels reads its share (and the whole 16 KiB input).
    layer = conv("c", fmap("x", 8, 256), fmap("y", 8, 256), k=3,
                 weights=256 * 256 * 9, leaves=True)
    (whole,) = function_calls([layer], BPU, DDR)
    limit = whole.time_ps // 4
    spans = split_function_calls([layer], BPU, DDR, limit)
    assert len(spans) > 1 and all(span[:3] == (0, 1, CHANNELS) for span in spans)
    calls = function_calls([layer], BPU, DDR, spans)
    assert all(call.time_ps <= limit for call in calls)
    assert sum(call.layers[0].weight_bytes for call in calls) == layer.weight_bytes
    assert all(call.costs[0].read_bytes == call.layers[0].weight_bytes + 8 * 8 * 256
               for call in calls)
    tile = layer_part(layer, CHANNELS, 0, 16)
    assert (tile.output.c, tile.inputs[0].c, tile.cin) == (16, 256, 256)
    dw = dataclasses.replace(layer, op_class="depthwise", cin=1, groups=256)
    assert layer_part(dw, CHANNELS, 0, 16).inputs[0].c == 16


def test_a_layer_longer_than_the_limit_that_no_cut_shortens_is_a_call_of_its_own():
    whole = [dataclasses.replace(lg, split_axes=()) for lg in chain([256, 256])]
    assert split_function_calls(whole, BPU, DDR, max_time_ps=1) == [(0, 1), (1, 2)]
    fc = dataclasses.replace(BPU, fc_overhead_cycles=500)
    assert function_calls(chain([4]), fc, DDR)[0].time_ps == function_calls(
        chain([4]), BPU, DDR)[0].time_ps + 500_000
    with pytest.raises(ValueError, match="negative"):
        split_function_calls(chain([4]), BPU, DDR, -1)
    for bad in ([(0, 1), (2, 3)], [(0, 1), (1, 2, ROWS, 0, 16), (2, 3)],
                [(0, 1), (1, 2, ROWS, 0, 16), (1, 2, CHANNELS, 16, 32), (2, 3)],
                [(0, 1), (1, 2, ROWS, 0, 16), (1, 2, ROWS, 20, 32), (2, 3)]):
        with pytest.raises(ValueError, match="consecutive"):
            function_calls(chain([4, 4, 4]), BPU, DDR, bad)
    with pytest.raises(ValueError, match="cannot be cut"):
        function_calls(whole, BPU, DDR, [(0, 1, ROWS, 0, 32), (1, 2)])
    good = [(0, 1), (1, 2, ROWS, 0, 16), (1, 2, ROWS, 16, 32), (2, 3)]
    assert len(function_calls(chain([4, 4, 4]), BPU, DDR, good)) == 4


def test_a_prefix_joins_the_first_call_unless_that_is_a_part():
    assert with_prefix([(0, 2), (2, 3)], 1) == [(0, 3), (3, 4)]
    assert with_prefix([(0, 1, ROWS, 0, 4), (0, 1, ROWS, 4, 8), (1, 2)], 2) == [
        (0, 2), (2, 3, ROWS, 0, 4), (2, 3, ROWS, 4, 8), (3, 4)]


def test_bad_layer_groups_are_refused():
    x = fmap("x", 4, 4)
    with pytest.raises(ValueError, match="op class"):
        LayerGroup("l", "Conv", "winograd", x, (x,))
    with pytest.raises(ValueError, match="positive"):
        LayerGroup("l", "Conv", "dense", x, (x,), cin=0)
    with pytest.raises(ValueError, match="at least 1"):
        TensorRef("t", 1, 0, 4, 4)


def test_a_part_of_a_layer_held_as_a_view_holds_its_share_of_the_view():
    """A pool's 8 maps of 1x1x64 held as one row of 8 pixels (the view an FC reads): a tile
    of 16 channels is held as 8 pixels of 16 channels; a band of rows (a reshape's rows are
    not the view's) falls back to the part's own shape."""
    x = TensorRef("x", 8, 2, 2, 64)
    pool = LayerGroup("pool", "GlobalAveragePool", "pool", TensorRef("p", 8, 1, 1, 64), (x,),
                      cin=1, kernel_h=2, kernel_w=2,
                      held_as=TensorRef("p", 1, 1, 8, 64))
    tile = layer_part(pool, CHANNELS, 0, 16)
    assert tile.held_as == TensorRef("p", 1, 1, 8, 16)
    flat = dataclasses.replace(pool, held_as=TensorRef("p", 1, 1, 8 * 64, 1))
    assert layer_part(flat, CHANNELS, 0, 16).held_as is None
    deep = dataclasses.replace(pool, output=TensorRef("p", 8, 4, 1, 64))
    assert layer_part(deep, ROWS, 0, 2).held_as is None

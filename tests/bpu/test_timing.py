import dataclasses

import pytest

from emu.bpu.timing import (
    LayerGroup,
    TensorRef,
    compute_cycles,
    function_calls,
    layer_costs,
    layout_bytes,
    padded_macs,
    plan_residency,
    split_function_calls,
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
    for limit in (whole - 1, whole // 2, whole // 3, one.costs[1].time_ps, 1):
        spans = split_function_calls(layers, BPU, DDR, limit)
        assert len(spans) > 1 and spans[0][0] == 0 and spans[-1][1] == 6
        calls = function_calls(layers, BPU, DDR, spans)
        for k, ((start, end), call) in enumerate(zip(spans, calls, strict=True)):
            # each FC (costed as it runs: its overhead, crossing feature maps through DDR)
            # is within the limit unless it is a single layer group ...
            assert end - start == 1 or call.time_ps <= limit
            if k + 1 < len(spans):  # ... and as long as the limit allows
                longer = [*spans[:k], (start, end + 1), (end + 1, spans[k + 1][1]),
                          *spans[k + 2:]]
                longer = [s for s in longer if s[1] > s[0]]
                assert function_calls(layers, BPU, DDR, longer)[k].time_ps > limit
    pairs = [(0, 2), (2, 4), (4, 6)]
    calls = function_calls(layers, BPU, DDR, pairs)
    # A tensor crossing an FC boundary goes through DDR: the cut costs traffic.
    crossing = 64 * 32 * 32
    assert [c.costs[-1].written_bytes for c in calls] == [crossing, crossing, 1024]
    assert [c.costs[0].read_bytes for c in calls] == [1024, crossing, crossing]


def test_a_layer_longer_than_the_limit_is_a_call_of_its_own():
    assert split_function_calls(chain([256, 256]), BPU, DDR, max_time_ps=1) == [
        (0, 1), (1, 2)]
    fc = dataclasses.replace(BPU, fc_overhead_cycles=500)
    assert function_calls(chain([4]), fc, DDR)[0].time_ps == function_calls(
        chain([4]), BPU, DDR)[0].time_ps + 500_000
    with pytest.raises(ValueError, match="negative"):
        split_function_calls(chain([4]), BPU, DDR, -1)
    with pytest.raises(ValueError, match="consecutive"):
        function_calls(chain([4, 4, 4]), BPU, DDR, [(0, 1), (2, 3)])


def test_bad_layer_groups_are_refused():
    x = fmap("x", 4, 4)
    with pytest.raises(ValueError, match="op class"):
        LayerGroup("l", "Conv", "winograd", x, (x,))
    with pytest.raises(ValueError, match="positive"):
        LayerGroup("l", "Conv", "dense", x, (x,), cin=0)
    with pytest.raises(ValueError, match="at least 1"):
        TensorRef("t", 1, 0, 4, 4)

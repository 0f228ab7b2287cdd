"""The DV700 cost model and device: the mechanisms, exact on a simple configuration."""

import dataclasses
import math

from emu.chip import Soc
from emu.dv import timing
from emu.dv.timing import RunShape
from emu.soc.clock import PS_PER_S
from emu.soc.config import load_config

CFG = load_config().soc.dv


def _conv(c=64, m=64, side=56, k=3, **kw):
    return RunShape(c, side, side, m, side, side, kernel=(k, k), **kw)


def test_macs_count_after_the_channel_blocking():
    odd = timing.run_cost(_conv(c=9, m=9), CFG)
    blocked = timing.run_cost(_conv(c=16, m=16), CFG)
    assert odd.compute_ps == blocked.compute_ps  # 9 channels take two blocks of 8
    macs = 56 * 56 * 16 * 16 * 9
    assert blocked.compute_ps == math.ceil(
        macs * PS_PER_S / (CFG.conv_macs * CFG.conv_freq_hz * CFG.efficiency_conv))
    depthwise = timing.run_cost(_conv(c=16, m=16, depthwise=True), CFG)
    assert depthwise.compute_ps == math.ceil(  # one input channel per output channel
        macs // 16 * PS_PER_S / (CFG.conv_macs * CFG.conv_freq_hz * CFG.efficiency_conv))


def test_doubling_the_conv_clock_halves_a_compute_bound_run_not_a_ddr_bound_one():
    fast = dataclasses.replace(CFG, conv_freq_hz=2 * CFG.conv_freq_hz)
    heavy = _conv(c=256, m=256, side=28)  # many MACs per byte
    light = _conv(c=8, m=8, side=112, k=1, reads_input=True)  # bytes dominate
    for shape in (heavy, light):
        slow_cost, fast_cost = timing.run_cost(shape, CFG), timing.run_cost(shape, fast)
        assert abs(2 * fast_cost.compute_ps - slow_cost.compute_ps) <= 1
        assert fast_cost.ddr_bytes == slow_cost.ddr_bytes
    port = CFG.ddr_port_bytes_per_s
    for shape in (heavy, light):
        cost = timing.run_cost(shape, CFG)
        ddr_ps = cost.ddr_bytes * PS_PER_S / port
        assert (cost.compute_ps > ddr_ps) is (shape is heavy)


def test_an_output_kept_in_the_unified_buffer_costs_no_ddr():
    out = timing.tensor_bytes(64, 28, 28)
    to_ddr = timing.run_cost(_conv(side=28, to_external=True), CFG)
    in_ub = timing.run_cost(_conv(side=28, to_external=False), CFG)
    assert to_ddr.ddr_bytes - in_ub.ddr_bytes == out == to_ddr.written_bytes
    assert in_ub.written_bytes == 0


def test_a_run_too_big_for_the_unified_buffer_streams_through_ddr():
    small_ub = dataclasses.replace(CFG, ub_bytes=64 << 10)
    shape = _conv(side=28, to_external=False)
    cost = timing.run_cost(shape, small_ub)
    both = timing.tensor_bytes(64, 28, 28) * 2
    assert cost.ddr_bytes == both and timing.run_cost(shape, CFG).ddr_bytes == 0


def test_the_device_runs_commands_in_order_with_fixed_costs_and_ddr():
    soc = Soc(load_config(overrides=["ddr.latency_ps=0"])).build()
    cost = timing.Cost(fixed_ps=1000, compute_ps=5000, ddr_bytes=0, written_bytes=0)
    task = soc.dv.cmdlist_task("list", [("a", [cost, cost]), ("b", [cost])])
    soc.dv.submit(task)
    soc.run()
    assert task.finished_ps == 3 * 6000
    assert soc.dv.stats()["runs"] == 3 and soc.dv.stats()["commands"] == 2


def test_a_deconvolution_does_every_tap_of_every_output_and_reads_its_input_unexpanded():
    # 2x upsampling of a 28 x 28 input with a 4 x 4 kernel: 56 x 56 outputs (pads 2)
    deconv = timing.run_cost(RunShape(16, 28, 28, 16, 56, 56, kernel=(4, 4),
                                      reads_input=True), CFG)
    macs = 56 * 56 * 16 * 16 * 16
    assert deconv.compute_ps == math.ceil(
        macs * PS_PER_S / (CFG.conv_macs * CFG.conv_freq_hz * CFG.efficiency_conv))
    assert deconv.ddr_bytes == timing.tensor_bytes(16, 28, 28) + timing.tensor_bytes(16, 56, 56)

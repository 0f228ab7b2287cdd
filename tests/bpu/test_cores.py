"""The BPU cores run function calls; timelines are exact in picoseconds."""

from collections.abc import Generator
from dataclasses import replace
from typing import Any

import pytest
import simpy

from emu.bpu.timing import LayerGroup, TensorRef, function_calls, split_function_calls
from emu.chip import Soc
from emu.nn import layers, placement
from emu.soc.config import load_config
from emu.workloads import bpu_calibration

# 1000 MACs a cycle at 1 GHz; DDR of 2 bytes per ns, no latency; the core's port 1 byte/ns.
BASE = ["bpu.freq_hz=1GHz", "bpu.macs_per_cycle=1000", "bpu.align_h=1", "bpu.align_w=1",
        "bpu.align_cin=1", "bpu.align_cout=1", "bpu.efficiency_dense=1",
        "bpu.sram_bytes=1MiB", "bpu.weight_sram_bytes=0", "bpu.ddr_port_bytes_per_s=1GB/s",
        "bpu.layer_overhead_cycles=100", "bpu.fc_overhead_cycles=1000",
        "bpu.task_overhead_ps=5000", "ddr.bw_bytes_per_s=2GB/s", "ddr.latency_ps=0",
        "bpu.cores=1"]


def _soc(*extra: str) -> Soc:
    return Soc(load_config(overrides=[*BASE, *extra])).build()


def _layer(name: str, side: int, c: int, src: str = "in") -> LayerGroup:
    """A 1x1 conv reading `src` from DDR and writing its output there: compute
    side^2 * c^2 MACs, DDR 2 * side^2 * c bytes."""
    x = TensorRef(src, 1, side, side, c)
    return LayerGroup(name, "Conv", "dense", TensorRef(name, 1, side, side, c), (x,), cin=c,
                      leaves=True)


def test_one_layer_runs_its_fixed_costs_then_compute_and_ddr_side_by_side():
    soc = _soc()
    # 10x10x100: 1e6 MACs = 1 us of compute; 20 kB of DDR = 20 us at the port.
    task = soc.bpu.model_task("m", [_layer("a", 10, 100)])
    soc.bpu.submit(task)
    soc.run()
    assert task.finished_ps == 5000 + 1000 * 1000 + 100 * 1000 + 20_000_000
    assert soc.ddr.bytes_by_requester == {"soc.bpu.core0": 20_000}
    compute_bound = _soc("bpu.ddr_port_bytes_per_s=100GB/s", "ddr.bw_bytes_per_s=100GB/s")
    task = compute_bound.bpu.model_task("m", [_layer("a", 10, 100)])
    compute_bound.bpu.submit(task)
    compute_bound.run()
    assert task.finished_ps == 5000 + 1_000_000 + 100_000 + 1_000_000


def test_a_layer_slows_down_when_another_requester_streams_from_ddr():
    # The DDR (1 B/ns) is all the core's port could use; a DSP stream of 40 kB at once
    # shares it fairly, so the layer's 20 kB move at 0.5 B/ns.
    alone, shared = _soc("ddr.bw_bytes_per_s=1GB/s"), _soc("ddr.bw_bytes_per_s=1GB/s")
    for soc in (alone, shared):
        soc.bpu.submit(soc.bpu.model_task("m", [_layer("a", 10, 100)]))
    shared.ddr.transfer(40_000, "soc.vdsp.core0")
    alone.run()
    shared.run()
    assert alone.bpu.busy_ps[0] == 5000 + 1_100_000 + 20_000_000
    assert shared.bpu.busy_ps[0] == 5000 + 1_100_000 + 40_000_000


def test_a_task_is_one_stage_per_function_call_and_preempts_only_between_them():
    soc = _soc()
    model = [_layer(f"l{i}", 10, 100, src="in" if i == 0 else f"l{i - 1}") for i in range(4)]
    spans = split_function_calls(model, soc.config.bpu, soc.config.ddr,
                                 max_time_ps=45_000_000)
    assert spans == [(0, 2), (2, 4)]
    calls = function_calls(model, soc.config.bpu, soc.config.ddr, spans)
    low = soc.bpu.model_task("low", model, max_time_per_fc_ps=45_000_000)
    assert [s.name for s in low.stages] == ["low fc0", "low fc1"]
    high = soc.bpu.model_task("high", [_layer("h", 10, 100)], priority=255)
    soc.bpu.submit(low)

    def later() -> Generator[simpy.Event, Any, None]:
        yield soc.env.timeout(10_000_000)  # in the middle of low's first FC
        soc.bpu.submit(high)

    soc.env.process(later())
    soc.run()
    first_fc = 5000 + calls[0].time_ps
    assert low.preemptions == 1
    assert high.started_ps == first_fc  # it waited for the FC in flight, not the task
    assert high.finished_ps == first_fc + 5000 + 1_000_000 + 100_000 + 20_000_000
    assert low.finished_ps > high.finished_ps


def _chain(names: str, count: int, *sram: str) -> tuple[Soc, list[LayerGroup]]:
    """A chain of `count` 1x1 convs whose 10 kB maps stay on chip where they fit; the
    last one's output goes to DDR."""
    model = [_layer(f"{names}{i}", 10, 100, src=f"{names}in" if i == 0 else f"{names}{i - 1}")
             for i in range(count)]
    return _soc(*sram), [replace(lg, leaves=i == count - 1) for i, lg in enumerate(model)]


def _preempted(soc: Soc, model: list[LayerGroup], cut: list[tuple[int, int]],
               urgent: list[LayerGroup]) -> tuple[Any, Any]:
    low = soc.bpu.model_task("low", model, spans=cut)
    high = soc.bpu.model_task("high", urgent, priority=255)
    soc.bpu.submit(low)

    def later() -> Generator[simpy.Event, Any, None]:
        yield soc.env.timeout(5_000_000)  # in low's first FC
        soc.bpu.submit(high)

    soc.env.process(later())
    soc.run()
    return low, high


def test_an_fc_boundary_costs_its_overhead_and_a_preemption_only_what_must_leave():
    soc, model = _chain("l", 4)
    cut = [(0, 2), (2, 4)]
    times = []
    for spans in (None, cut):
        alone = _soc()
        task = alone.bpu.model_task("low", model, spans=spans)
        alone.bpu.submit(task)
        alone.run()
        times.append(task.finished_ps)
        assert "spill_bytes" not in alone.bpu.stats()
    assert times[1] == times[0] + 1_000_000  # one more FC overhead, no DDR traffic
    # A preemptor whose maps fit next to the 10 kB l1 leaves them on chip.
    calls = function_calls(model, soc.config.bpu, soc.config.ddr, cut)
    assert [c.spill_bytes for c in calls] == [10_000, 0]
    low, high = _preempted(soc, model, cut, _chain("h", 2)[1])
    assert high.started_ps == 5000 + calls[0].time_ps
    assert low.finished_ps == high.finished_ps + 5000 + calls[1].time_ps
    assert "spill_bytes" not in soc.bpu.stats()


def test_a_preempted_boundary_spills_what_the_preemptor_needs_and_reloads_it():
    # 15 kB of SRAM: l2's 10 kB map is on chip at the cut, and the preemptor keeps its own
    # 10 kB h0 there: 5 kB of l2 go to DDR (5 us at the port) before it starts.
    soc, model = _chain("l", 4, "bpu.sram_bytes=15000")
    urgent = _chain("h", 2)[1]
    cut = [(0, 3), (3, 4)]
    calls = function_calls(model, soc.config.bpu, soc.config.ddr, cut)
    assert [c.spill_bytes for c in calls] == [10_000, 0]
    assert function_calls(urgent, soc.config.bpu, soc.config.ddr)[0].sram_bytes == 10_000
    low, high = _preempted(soc, model, cut, urgent)
    spill_ps = 5_000_000
    assert high.started_ps == 5000 + calls[0].time_ps + spill_ps
    # low resumes: its start, the reload of what was spilled, then its second FC
    assert low.finished_ps == high.finished_ps + 5000 + spill_ps + calls[1].time_ps
    stats = soc.bpu.stats()
    assert stats["spill_bytes"] == stats["reload_bytes"] == 5000


def test_resnet50_runs_timing_only_one_event_set_per_layer_group():
    # Its wall time is benchmarks/bench_nn.py's figure, not an assertion here.
    graph = bpu_calibration.compiled("resnet50", 224, 1)
    (segment,) = [s for s in placement.place(graph) if s.kind == "bpu"]
    model = layers.layer_groups(graph, segment)
    soc = Soc(load_config()).build()
    task = soc.bpu.model_task("resnet50", model)
    soc.bpu.submit(task)
    soc.run()
    assert task.finished and soc.bpu.stats()["layer_groups"] == len(model)


@pytest.mark.parametrize("fc_limit_ps, priority, depth, after_fcs", [
    (25_000_000, 255, 1024, 1),   # 255 goes to the high FIFO: in at the next FC boundary
    (25_000_000, 100, 0, 1),      # no FC queued in the low FIFO: in at the next boundary
    (25_000_000, 100, 1, 2),      # one FC queued ahead of it: in one FC later
    (25_000_000, 100, 1024, None),  # J5's FIFO holds the rest of the model: it waits
    (0, 255, 1024, None),         # one FC: even 255 waits for the whole model
    (25_000_000, 0, 0, None),     # the same priority: it waits its turn
])
def test_a_higher_priority_overtakes_after_the_fcs_queued_in_the_hardware_fifo(
        fc_limit_ps, priority, depth, after_fcs):
    soc = _soc(f"bpu.fc_fifo_depth={depth}")
    model = [_layer(f"l{i}", 10, 100, src="in" if i == 0 else f"l{i - 1}") for i in range(4)]
    low = soc.bpu.model_task("low", model, max_time_per_fc_ps=fc_limit_ps)
    small = soc.bpu.model_task("small", [_layer("h", 10, 100)], priority=priority)
    soc.bpu.submit(low)

    def later() -> Generator[simpy.Event, Any, None]:
        yield soc.env.timeout(10_000_000)  # in the middle of low's first FC
        soc.bpu.submit(small)

    soc.env.process(later())
    soc.run()
    calls = function_calls(model, soc.config.bpu, soc.config.ddr, split_function_calls(
        model, soc.config.bpu, soc.config.ddr, fc_limit_ps))
    assert len(calls) == (4 if fc_limit_ps else 1)
    overtakes = after_fcs is not None
    assert (small.finished_ps < low.finished_ps) is overtakes
    assert low.preemptions == (1 if overtakes else 0)
    if overtakes:
        assert small.started_ps == 5000 + sum(c.time_ps for c in calls[:after_fcs])

"""Every configuration key changes what the model it describes computes.

A key the model ignores would make a what-if silently wrong, so each leaf key of the schema
has a row here: a legal value other than the preset's, and a probe (a small run that reads
the key's block) whose result must differ from the probe's result on the preset. The table
must name every key the schema has; a new key without a row fails
`test_every_key_has_a_row`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

import emu
from emu.chip import Soc
from emu.nn import layers, placement
from emu.nn.estimate import estimate
from emu.runtime import hbsys
from emu.soc.config import load_config, schema_fields
from emu.vdsp.idma import Endpoint, linear
from emu.workloads import bpu_calibration, cameras, dsp_ops
from emu.workloads.pointcloud import runner
from emu.workloads.pointcloud.impls import IMPLS, Preprocessor
from emu.workloads.pointcloud.params import CENTERPOINT

POINTS = 20_000


def pointcloud(overrides: tuple[str, ...]) -> Any:
    """Stage times of one small CenterPoint frame, all three ways."""
    frame = runner.synthetic(CENTERPOINT, 1, seed=0, points=POINTS)[0]
    out = {}
    for impl in IMPLS:
        with emu.Session("j5", overrides=overrides):
            pre = Preprocessor(CENTERPOINT)
            pre.load(frame.points)
            out[impl] = pre.run(impl).stages_ps
    return out


def camera_scenario(overrides: tuple[str, ...]) -> Any:
    """Latencies of two small cameras sharing CPU, BPU and DSP."""
    params = cameras.CameraParams(cameras=2, frames=3, width=256, height=128, gmacs=0.5,
                                  sync=True)
    results, _ = cameras.run(params, overrides=overrides)
    return results["cameras"]


def bpu_estimate(overrides: tuple[str, ...]) -> Any:
    """The static estimates of a small MobileNetV2 (depthwise convs) and YOLOv8n (LUT,
    pool, resize, concat layer groups)."""
    cfg = load_config(overrides=overrides).soc
    graphs = [bpu_calibration.compiled("mobilenetv2", 32, 1, 10),
              bpu_calibration.compiled("yolov8n", 64, 1)]
    return [estimate(g, placement.place(g), cfg, 1).to_json() for g in graphs]


def dsp(overrides: tuple[str, ...]) -> Any:
    """Four concurrent softmax calls on any DSP core, then a (memory-bound) dequantize."""
    with emu.Session("j5", overrides=overrides):
        return [dsp_ops.execute(dsp_ops.DspRun("softmax", (64, 300), rpcs=4)),
                dsp_ops.execute(dsp_ops.DspRun("dequantize", (64, 1000)))]


def idma_queue(overrides: tuple[str, ...]) -> Any:
    """When each of 40 descriptors, handed to one channel at once, is accepted: the built-in
    operators never queue more than two descriptors on a channel, so only a direct burst
    shows the queue depth."""
    soc = Soc(load_config(overrides=overrides)).build()
    core = soc.vdsp.hw[0]
    buf = soc.pool.alloc(1024, cached=False)
    src = Endpoint(buf.data, 0, 0, in_tcm=False, name="ddr")
    dst = Endpoint(core.tcm.data, 64 << 10, 0, in_tcm=True, name="tcm")
    accepted: list[int] = []

    def submit() -> Generator[simpy.Event, Any, None]:
        for k in range(40):
            yield from core.channels[0].copy(linear(f"d{k}", src, dst, 1024))
            accepted.append(soc.env.now)

    soc.env.process(submit())
    soc.run()
    return accepted


def pool(overrides: tuple[str, ...]) -> Any:
    """Where two allocations land, and whether a 100 MiB one fits."""
    with emu.Session("j5", overrides=overrides):
        mems = [hbsys.hbSysMem() for _ in range(3)]
        rcs = [hbsys.hbSysAllocMem(mem, size)
               for mem, size in zip(mems, (1000, 1000, 100 << 20), strict=True)]
        return rcs, [mem.phyAddr for mem in mems]


def bpu_fifo(overrides: tuple[str, ...]) -> Any:
    """When a priority-100 task that arrives during a long 8-FC model starts on the core."""
    soc = Soc(load_config(overrides=overrides)).build()
    graph = bpu_calibration.compiled("mobilenetv2", 32, 1, 10)
    (segment,) = [s for s in placement.place(graph) if s.kind == "bpu"]
    model = layers.layer_groups(graph, segment)
    long = soc.bpu.model_task("long", model, spans=[(k * len(model) // 8, (k + 1) * len(model)
                                                    // 8) for k in range(8)], core=0)
    small = soc.bpu.model_task("small", model[:1], priority=100, core=0)
    soc.bpu.submit(long)

    def later() -> Generator[simpy.Event, Any, None]:
        yield soc.env.timeout(1)
        soc.bpu.submit(small)

    soc.env.process(later())
    soc.run()
    return small.started_ps, long.finished_ps


def dv_device(overrides: tuple[str, ...]) -> Any:
    """dmp_dv: what the context reports, and the simulated time of a command list with a
    compute-bound conv, a DDR-bound 1x1 conv of 9 channels (the channel blocking) whose
    output stays in a unified buffer it nearly fills, and an FC command."""
    from emu.runtime import dmp_dv as dv
    from tests.runtime.test_dmp_dv import _conv_command, _fp16, _mem

    with emu.Session("j5", overrides=overrides) as sess:
        ctx = dv.dmp_dv_context_create()
        info = dv.dmp_dv_info_v0()
        dv.dmp_dv_context_get_info(ctx, info)
        heavy, *_ = _conv_command(ctx, _fp16((72, 16, 16)), _fp16((72, 72, 3, 3)),
                                  _fp16((72,)), kernel=3, pad=1)
        light, *_ = _conv_command(ctx, _fp16((9, 96, 96)), _fp16((9, 9, 1, 1)), _fp16((9,)),
                                  kernel=1)
        fc = dv.dmp_dv_cmdraw_fc_v0()
        _, size = dv.dmp_dv_pack_fc_weights(512, 1, 1, 64, 1, 1, None,
                                            np.zeros(512 * 64, np.uint16),
                                            np.zeros(64, np.uint16), None, 0)
        packed = np.zeros(size, np.uint8)
        dv.dmp_dv_pack_fc_weights(512, 1, 1, 64, 1, 1, None, np.zeros(512 * 64, np.uint16),
                                  np.zeros(64, np.uint16), packed, size)
        fc.weight_buf = dv.dmp_dv_buf(_mem(ctx, packed)[0], 0)
        fc.input_buf = dv.dmp_dv_buf(_mem(ctx, size=1024)[0], 0)
        fc.output_buf = dv.dmp_dv_buf(_mem(ctx, size=128)[0], 0)
        fc.input_size, fc.output_size = 512, 64
        cl = dv.dmp_dv_cmdlist_create(ctx)
        for cmd in (heavy, light, fc):
            assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0
        dv.dmp_dv_cmdlist_commit(cl)
        start = sess.now_ps
        dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl))
        return vars(info), sess.now_ps - start


PROBES = {"pointcloud": pointcloud, "cameras": camera_scenario, "dsp": dsp, "pool": pool,
          "idma_queue": idma_queue, "bpu_estimate": bpu_estimate, "bpu_fifo": bpu_fifo,
          "dv": dv_device}

# key: (a legal non-preset value, probe, overrides both runs share so the key has a say)
ROWS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "cpu.cores": ("1", "cameras", ()),
    "cpu.freq_hz": ("1GHz", "pointcloud", ()),
    "cpu.issue_width": ("1", "pointcloud", ()),
    "cpu.alu_pipes": ("1", "pointcloud", ("cpu.issue_width=4",)),
    "cpu.load_pipes": ("2", "pointcloud", ("cpu.issue_width=4",)),
    "cpu.store_pipes": ("2", "pointcloud", ("cpu.issue_width=4",)),
    "cpu.fp_pipes": ("1", "pointcloud", ("cpu.issue_width=4",)),
    "cpu.branch_pipes": ("2", "pointcloud", ("cpu.issue_width=4",)),
    "cpu.mispredict_cycles": ("20", "pointcloud", ()),
    "cpu.fdiv_cycles": ("5", "pointcloud", ()),
    "cpu.fpcr_write_cycles": ("30", "pointcloud", ()),
    "cpu.line_bytes": ("32", "pointcloud", ()),
    "cpu.vector_bytes": ("8", "pointcloud", ()),
    "cpu.l1d.size_bytes": ("8KiB", "pointcloud", ()),
    "cpu.l1d.ways": ("1", "pointcloud", ()),
    "cpu.l2.size_bytes": ("32KiB", "pointcloud", ()),
    "cpu.l2.ways": ("1", "pointcloud", ()),
    "cpu.l2.hit_latency_cycles": ("20", "pointcloud", ()),
    "cpu.l3.size_bytes": ("128KiB", "pointcloud", ()),
    "cpu.l3.ways": ("2", "pointcloud", ()),
    "cpu.l3.hit_latency_cycles": ("60", "pointcloud", ()),
    "cpu.tlb.page_bytes": ("64KiB", "pointcloud", ()),
    "cpu.tlb.l1_entries": ("4", "pointcloud", ()),
    "cpu.tlb.l2_entries": ("64", "pointcloud", ()),
    "cpu.tlb.l2_ways": ("1", "pointcloud", ()),
    "cpu.tlb.l2_hit_cycles": ("20", "pointcloud", ()),
    "cpu.tlb.walk_cycles": ("300", "pointcloud", ()),
    "cpu.write_stream_lines": ("1000", "pointcloud", ()),
    "cpu.ddr_port_bytes_per_s": ("2GB/s", "pointcloud", ()),
    "cpu.cache_op_cycles": ("50", "pointcloud", ()),
    "cpu.flush_call_cycles": ("30000", "pointcloud", ()),
    "cpu.api_call_ps": ("20us", "pointcloud", ()),
    "bpu.cores": ("1", "cameras", ()),
    "bpu.freq_hz": ("600MHz", "cameras", ()),
    "bpu.macs_per_cycle": ("1000", "cameras", ()),
    "bpu.align_h": ("5", "cameras", ()),
    "bpu.align_w": ("5", "cameras", ()),
    "bpu.align_cin": ("1", "cameras", ()),
    "bpu.align_cout": ("1", "cameras", ()),
    "bpu.efficiency_dense": ("0.05", "cameras", ()),
    "bpu.efficiency_depthwise": ("0.05", "bpu_estimate", ()),
    "bpu.efficiency_elementwise": ("0.05", "bpu_estimate", ()),
    "bpu.efficiency_pool": ("0.01", "bpu_estimate", ()),
    "bpu.efficiency_resize": ("0.01", "bpu_estimate", ()),
    "bpu.efficiency_move": ("0.01", "bpu_estimate", ()),
    "bpu.sram_bytes": ("64KiB", "cameras", ()),
    "bpu.weight_sram_bytes": ("8MiB", "bpu_estimate", ()),
    "bpu.ddr_port_bytes_per_s": ("1GB/s", "cameras", ("bpu.sram_bytes=64KiB",)),
    "bpu.layer_overhead_cycles": ("100000", "cameras", ()),
    "bpu.fc_overhead_cycles": ("100000", "cameras", ()),
    "bpu.task_overhead_ps": ("1ms", "cameras", ()),
    "bpu.fc_fifo_depth": ("2", "bpu_fifo", ()),
    "dv.conv_macs": ("72", "dv", ()),
    "dv.conv_freq_hz": ("100MHz", "dv", ()),
    "dv.fc_macs": ("8", "dv", ()),
    "dv.fc_freq_hz": ("50MHz", "dv", ()),
    "dv.ub_bytes": ("64KiB", "dv", ()),
    "dv.max_kernel": ("5", "dv", ()),
    "dv.max_fc_vector": ("1024", "dv", ()),
    "dv.channel_block": ("16", "dv", ()),
    "dv.efficiency_conv": ("0.1", "dv", ()),
    "dv.efficiency_fc": ("0.05", "dv", ()),  # FC layers are DDR-bound at the preset
    "dv.ddr_port_bytes_per_s": ("100MB/s", "dv", ()),
    "dv.run_overhead_cycles": ("100000", "dv", ()),
    "dv.kick_ps": ("1ms", "dv", ()),
    "dv.wake_ps": ("1ms", "dv", ()),
    "vdsp.cores": ("1", "dsp", ()),
    "vdsp.freq_hz": ("800MHz", "pointcloud", ()),
    "vdsp.vliw_slots": ("3", "pointcloud", ()),
    "vdsp.loads_per_bundle": ("1", "dsp", ()),
    "vdsp.stores_per_bundle": ("2", "dsp", ("vdsp.loads_per_bundle=4", "vdsp.vliw_slots=8")),
    "vdsp.fdiv_cycles": ("40", "pointcloud", ()),
    "vdsp.gather_access_cycles": ("3", "pointcloud", ()),
    "vdsp.kernel_call_cycles": ("1000", "pointcloud", ()),
    "vdsp.tcm.banks": ("1", "pointcloud", ("vdsp.tcm.bank_bytes=256KiB",)),
    "vdsp.tcm.bank_bytes": ("64KiB", "pointcloud", ()),
    "vdsp.tcm.sub_banks": ("2", "pointcloud", ()),
    "vdsp.tcm.sub_bank_width_bytes": ("16", "pointcloud", ()),
    "vdsp.tcm.access_bytes": ("8", "pointcloud",
                              ("vdsp.tcm.banks=1", "vdsp.tcm.bank_bytes=256KiB")),
    "vdsp.tcm.reserved_bytes": ("80KiB", "pointcloud", ()),
    "vdsp.idma.channels": ("1", "pointcloud", ()),
    "vdsp.idma.queue_depth": ("4", "idma_queue", ()),
    "vdsp.idma.bytes_per_cycle": ("4", "pointcloud", ()),
    "vdsp.idma.descriptor_latency_cycles": ("5000", "pointcloud", ()),
    "vdsp.rpc_mode": ("direct", "pointcloud", ()),
    "vdsp.relay_hop_ps": ("1ms", "pointcloud", ()),
    "vdsp.rpc_submit_ps": ("1ms", "pointcloud", ()),
    "vdsp.rpc_return_ps": ("1ms", "pointcloud", ()),
    "vdsp.operator_dispatch_cycles": ("100000", "pointcloud", ()),
    "ddr.bw_bytes_per_s": ("4GB/s", "pointcloud", ()),
    "ddr.latency_ps": ("400ns", "pointcloud", ()),
    "ddr.policy": ("in_order", "cameras", ()),
    "mem.pool_bytes": ("64MiB", "pool", ()),
    "mem.alignment_bytes": ("64KiB", "pool", ()),
}


@functools.cache
def _result(probe: str, overrides: tuple[str, ...]) -> str:
    return json.dumps(PROBES[probe](overrides), sort_keys=True, default=str)


def test_every_key_has_a_row():
    keys = [info.key for info in schema_fields()]
    assert sorted(ROWS) == sorted(keys)


@pytest.mark.parametrize("key", sorted(ROWS))
def test_the_key_changes_what_its_probe_measures(key):
    value, probe, shared = ROWS[key]
    load_config(overrides=[f"{key}={value}"])  # legal: an illegal value raises ConfigError
    before = _result(probe, shared)
    after = _result(probe, (*shared, f"{key}={value}"))
    assert after != before, f"{key}={value} changed nothing the {probe} probe measures"


def test_the_pool_probe_sees_what_it_claims():
    rcs, addrs = pool(())
    assert rcs == [0, 0, 0] and addrs[1] > addrs[0]
    assert pool(("mem.pool_bytes=64MiB",))[0][2] == hbsys.HB_SYS_OUT_OF_MEMORY
    assert np.diff(pool(("mem.alignment_bytes=64KiB",))[1][:2])[0] == 64 << 10

"""The cameras scenario: a host program of one thread per camera, through the runtime."""

import pytest

from emu.workloads import cameras
from emu.workloads.cameras import CameraParams, percentile


@pytest.fixture(scope="module")
def staggered():
    return cameras.run(CameraParams(cameras=2, frames=4, fps=30))


def test_every_frame_splits_exactly_into_cpu_bpu_dsp_and_waiting(staggered):
    results, sess = staggered
    cfg = sess.soc.config.vdsp
    dispatch = sess.soc.vdsp.clock.cycles_to_ps(cfg.operator_dispatch_cycles)
    for camera in results["cameras"]:
        assert camera["frames"] == 4 and len(camera["per_frame"]) == 4
        for frame in camera["per_frame"]:
            parts = frame["cpu_ms"] + frame["bpu_ms"] + frame["dsp_ms"] + frame["wait_ms"]
            assert parts == pytest.approx(frame["latency_ms"], abs=1e-5)
            assert min(frame["cpu_ms"], frame["bpu_ms"], frame["dsp_ms"]) > 0
            assert frame["wait_ms"] >= 0
            # The DSP part is the RPC's two messages and the operator on the core.
            assert frame["dsp_ms"] * 1e9 > cfg.rpc_submit_ps + cfg.rpc_return_ps + dispatch


def test_the_scenario_goes_through_hbsys_and_hbdsp(staggered):
    _, sess = staggered
    stats = sess.stats()
    threads = {t["name"]: t for t in stats["host"]["threads"]}
    assert {"cam0", "cam1"} <= set(threads)
    # Per camera: 4 allocations, per frame 3 flushes, an RPC, a release, 4 frees, plus
    # the BPU submit: every one an API call charged on an A55 core.
    assert threads["cam0"]["api_calls"] == 4 + 4 * (3 + 1 + 1 + 1) + 4
    assert stats["pool"]["alloc_count"] == 8 and stats["pool"]["live_buffers"] == 0
    assert stats["vdsp"]["tasks_done"] == 8 and stats["bpu"]["tasks_done"] == 8
    assert stats["cpu"]["tasks_done"] > 8 * 6


def test_staggered_frames_keep_one_bpu_core_busy_and_synchronised_ones_use_both(staggered):
    results, _ = staggered
    assert results["bpu_busy_ms"][0] > 0 and results["bpu_busy_ms"][1] == 0
    synced, _ = cameras.run(CameraParams(cameras=2, frames=4, fps=30, sync=True))
    assert min(synced["bpu_busy_ms"]) > 0
    assert [f["arrival_ms"] for f in synced["cameras"][1]["per_frame"]] == \
        [f["arrival_ms"] for f in synced["cameras"][0]["per_frame"]]


def test_latency_percentiles_and_deadline_misses():
    results, _ = cameras.run(CameraParams(cameras=3, frames=6, fps=400, gmacs=60, sync=True))
    period = results["period_ms"]
    for camera in results["cameras"]:
        lat = [f["latency_ms"] for f in camera["per_frame"]]
        assert camera["latency_ms"]["max"] == max(lat)
        assert camera["latency_ms"]["p99"] == max(lat)  # nearest rank of 6 values
        assert camera["deadline_misses"] == sum(x > period for x in lat)
    # At 400 FPS three 60-GMAC networks do not fit: frames queue and deadlines are missed;
    # camera 0 (priority 255) suffers least.
    misses = [c["deadline_misses"] for c in results["cameras"]]
    assert sum(misses) > 0 and misses[0] == min(misses)
    waits = [c["stages_ms"]["wait"] for c in results["cameras"]]
    assert waits[0] < waits[2]


def test_percentile_is_the_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50 and percentile(values, 0.99) == 99
    assert percentile([7], 0.99) == 7 and percentile([3, 1, 2], 0.5) == 2

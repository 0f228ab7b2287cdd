"""`provisional_sensitivity` moves only provisional values, and orders them by effect."""

from __future__ import annotations

import pytest

from emu.soc.config import load_config
from emu.soc.sensitivity import PROVISIONAL, provisional_sensitivity


def _model(soc):
    # A made-up result: inversely proportional to the weight SRAM, a little dependent on
    # the task overhead, and on one documented value (which must never be moved).
    return (1e9 / soc.bpu.weight_sram_bytes + soc.bpu.task_overhead_ps / 1e6
            + soc.bpu.macs_per_cycle / 1e3)


def test_orders_provisional_parameters_by_effect_and_skips_the_rest():
    resolved = load_config("j5")
    assert resolved.sources["bpu.weight_sram_bytes"].startswith(PROVISIONAL)
    assert resolved.sources["bpu.task_overhead_ps"].startswith(PROVISIONAL)
    assert resolved.sources["bpu.macs_per_cycle"].startswith("documented")
    found = provisional_sensitivity(resolved, _model, ["bpu."], top=5)
    assert [s.key for s in found] == ["bpu.weight_sram_bytes", "bpu.task_overhead_ps"]
    sram = found[0]
    assert sram.result == pytest.approx(_model(resolved.soc))
    assert [v for v, _ in sram.moves] == [sram.value / 2, sram.value * 2]
    for value, result in sram.moves:
        changed = load_config("j5", overrides=[f"bpu.weight_sram_bytes={int(value)}"]).soc
        assert result == pytest.approx(_model(changed))
    assert "bpu.weight_sram_bytes" in sram.describe()


def test_blocks_threshold_and_top_limit_what_is_tried():
    resolved = load_config("j5")
    assert provisional_sensitivity(resolved, _model, ["cpu."]) == []
    assert len(provisional_sensitivity(resolved, _model, ["bpu."], top=1)) == 1
    # The overhead moves the result by well under 50 %: a high threshold drops it.
    found = provisional_sensitivity(resolved, _model, ["bpu."], threshold=0.5)
    assert [s.key for s in found] == ["bpu.weight_sram_bytes"]


def test_a_change_the_configuration_refuses_is_left_out():
    # mem.pool_bytes may be at most 64 GiB: at 64 GiB, doubling is refused and only halving
    # is tried.
    resolved = load_config("j5", overrides=["mem.pool_bytes=64GiB"])
    assert not resolved.sources["mem.pool_bytes"].startswith(PROVISIONAL)  # set, not a guess
    found = provisional_sensitivity(resolved, lambda soc: soc.mem.pool_bytes, ["mem."])
    assert found == []
    top = load_config("j5", overrides=["mem.pool_bytes=64GiB"])
    top = type(top)(top.soc, top.preset, {**top.sources, "mem.pool_bytes": PROVISIONAL},
                    top.config_file, top.overrides)
    [only] = provisional_sensitivity(top, lambda soc: soc.mem.pool_bytes, ["mem."])
    assert only.moves == ((32 * 2**30, 32 * 2**30),)

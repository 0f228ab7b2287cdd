import pytest

from emu.bpu.timing import Layer, compute_cycles, ddr_bytes
from emu.soc.config import load_config

BPU = load_config(overrides=["bpu.macs_per_cycle=1000", "bpu.sram_bytes=1MiB"]).soc.bpu


def test_compute_cycles_round_up():
    assert compute_cycles(Layer("l", 1001, 0, 0, 0), BPU) == 2
    assert compute_cycles(Layer("l", 0, 0, 0, 0), BPU) == 0


def test_activations_stay_on_chip_while_they_fit():
    fits = Layer("l", 0, weight_bytes=100, input_bytes=400_000, output_bytes=400_000)
    assert ddr_bytes(fits, BPU) == (100, 0)
    spills = Layer("l", 0, weight_bytes=100, input_bytes=600_000, output_bytes=600_000)
    assert ddr_bytes(spills, BPU) == (600_100, 600_000)


def test_negative_sizes_are_refused():
    with pytest.raises(ValueError, match="macs"):
        Layer("l", -1, 0, 0, 0)

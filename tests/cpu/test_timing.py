import pytest

from emu.cpu import timing
from emu.soc.config import load_config

CPU = load_config(overrides=["cpu.issue_width=2", "cpu.fdiv_cycles=10",
                             "cpu.miss_overlap=4"]).soc.cpu


def test_compute_cycles_adds_issue_divides_and_stalls():
    assert timing.compute_cycles(ops=101, fdivs=4, stall_cycles=87, cpu=CPU) == 51 + 40 + 87


def test_replacing_divisions_by_multiplications_is_cheaper():
    with_div = timing.compute_cycles(ops=1000, fdivs=100, stall_cycles=0, cpu=CPU)
    with_mul = timing.compute_cycles(ops=1100, fdivs=0, stall_cycles=0, cpu=CPU)
    assert with_mul < with_div


def test_misses_overlap_by_miss_overlap():
    assert timing.miss_latency_ps(9, CPU, 100_000) == 3 * 100_000
    assert timing.miss_latency_ps(8, CPU, 100_000) == 2 * 100_000
    assert timing.miss_latency_ps(0, CPU, 100_000) == 0


def test_negative_counts_are_refused():
    with pytest.raises(ValueError):
        timing.compute_cycles(-1, 0, 0, CPU)

from fractions import Fraction

import pytest

from emu.soc.clock import Clock, bytes_to_ps, ceil_div


def test_cycles_round_up_to_whole_picoseconds_exactly():
    dsp = Clock("dsp", 648e6)
    # One 648 MHz cycle is 1543.209... ps.
    assert dsp.cycles_to_ps(1) == 1544
    assert dsp.cycles_to_ps(648) == 1_000_000
    assert dsp.cycles_to_ps(648_000_000) == 10**12
    assert dsp.cycles_to_ps(0) == 0
    assert Clock("cpu", 1e9).cycles_to_ps(3) == 3000


def test_clock_rejects_bad_values():
    with pytest.raises(ValueError, match="positive"):
        Clock("x", 0)
    with pytest.raises(ValueError, match="negative cycle"):
        Clock("x", 1e9).cycles_to_ps(-1)


def test_bytes_to_ps_and_ceil_div():
    assert bytes_to_ps(1_000_000, 25.6e9) == 39_062_500
    assert bytes_to_ps(1, 3e12) == 1
    assert ceil_div(7, 2) == 4 and ceil_div(8, 2) == 4 and ceil_div(0, 5) == 0
    assert ceil_div(Fraction(1, 3), Fraction(1, 6)) == 2
    with pytest.raises(ValueError):
        bytes_to_ps(-1, 1e9)

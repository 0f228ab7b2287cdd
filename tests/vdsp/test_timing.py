import pytest

from emu.soc.config import load_config
from emu.vdsp.timing import bundle_cycles

VDSP = load_config().soc.vdsp  # 5 slots, 2 loads or 1 store per bundle


def test_bundles_are_bound_by_the_busiest_constraint():
    assert bundle_cycles(loads=10, stores=0, alu_ops=0, vdsp=VDSP) == 5
    assert bundle_cycles(loads=0, stores=10, alu_ops=0, vdsp=VDSP) == 10
    assert bundle_cycles(loads=2, stores=1, alu_ops=20, vdsp=VDSP) == 5
    assert bundle_cycles(loads=0, stores=0, alu_ops=0, vdsp=VDSP) == 0


def test_negative_counts_are_refused():
    with pytest.raises(ValueError):
        bundle_cycles(-1, 0, 0, VDSP)

import pytest

from emu.chip import Soc
from emu.errors import DspError
from emu.soc.config import load_config


def _core(*overrides):
    return Soc(load_config(overrides=list(overrides))).build().vdsp.hw[0]


def test_j5_banks_leave_103_kib_per_bank_to_operators():
    tcm = _core().tcm
    assert len(tcm.data) == 2 * 128 * 1024
    assert tcm.usable_bytes == 103 * 1024
    buf = tcm.alloc(1, 50 * 1024, "in")
    assert buf.bank == 1 and buf.offset == 128 * 1024 + 25 * 1024
    assert buf.offset % 64 == 0
    assert tcm.free_bytes(1) == 53 * 1024 and tcm.free_bytes(0) == 103 * 1024


def test_a_tile_that_does_not_fit_is_an_error_naming_the_bank():
    tcm = _core().tcm
    tcm.alloc(0, 80 * 1024, "a")
    with pytest.raises(DspError, match=r"tcm\.bank0: tile buffer 'b' does not fit"):
        tcm.alloc(0, 30 * 1024, "b")
    with pytest.raises(DspError, match="no TCM bank 2"):
        tcm.alloc(2, 64, "c")


def test_high_water_mark_and_free():
    core = _core()
    a = core.tcm.alloc(0, 1000, "a")
    b = core.tcm.alloc(0, 2000, "b")
    core.tcm.free(a)
    core.tcm.free(b)
    assert core.tcm.counters["bank0_high_water_bytes"] == 1024 + 2048
    assert core.tcm.free_bytes(0) == 103 * 1024


def test_bigger_tcm_from_config():
    tcm = _core("vdsp.tcm.bank_bytes=256KiB").tcm
    assert tcm.usable_bytes == 231 * 1024

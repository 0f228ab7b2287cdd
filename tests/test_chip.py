import pytest

from emu.chip import Phase, Soc
from emu.errors import SimulationError
from emu.soc.config import load_config


def test_phases_are_guarded():
    soc = Soc(load_config())
    assert soc.phase is Phase.CONFIGURED
    with pytest.raises(SimulationError, match=r"soc\.ddr does not exist before soc\.build"):
        _ = soc.ddr
    with pytest.raises(SimulationError, match=r"soc\.run\(\) needs phase 'built'"):
        soc.run()
    soc.build()
    with pytest.raises(SimulationError, match=r"soc\.build\(\) needs phase 'configured'"):
        soc.build()
    soc.run()
    soc.finish()
    with pytest.raises(SimulationError, match=r"the SoC is 'finished'"):
        soc.run()


def test_blocks_follow_the_configuration_and_have_hierarchical_names():
    soc = Soc(load_config(overrides=["vdsp.cores=3", "vdsp.idma.channels=2"])).build()
    assert soc.bpu.cores == 2
    assert soc.vdsp.cores == 3
    assert soc.cpu.cores == 8
    paths = [c.path for c in soc.walk()]
    assert paths[:3] == ["soc", "soc.ddr", "soc.cpu"]
    assert "soc.vdsp.core2.idma.ch1" in paths
    assert "soc.vdsp.core0.idma.ch2" not in paths
    tree = soc.stats_tree()
    assert tree["sim_time_ps"] == 0
    assert set(tree) >= {"ddr", "cpu", "bpu", "vdsp", "pool"}
    assert "ch0" in tree["vdsp"]["core1"]["idma"]

from emu.soc.builder import Soc
from emu.soc.config import load_config
from emu.soc.sched import CoreSlot, Stage, Task
from emu.vdsp.tiling import Tile, pingpong


def _soc():
    cfg = load_config(overrides=["vdsp.freq_hz=1e9", "vdsp.idma.bytes_per_cycle=1",
                                 "vdsp.idma.descriptor_latency_cycles=0", "ddr.latency_ps=0",
                                 "ddr.bw_bytes_per_s=1e12", "vdsp.rpc_overhead_ps=0"])
    return Soc(cfg, trace=True).build()


def _run(soc, tiles):
    def body(slot: CoreSlot):
        ch = soc.vdsp.hw[slot.index].channels
        yield from pingpong(slot, ch[0], ch[1], tiles, "op")

    task = Task("op", [Stage("op", body)])
    soc.vdsp.submit(task)
    soc.run()
    return task.finished_ps


def test_loads_overlap_compute_and_stores():
    # Each tile: 1000 B in (1 us at 1 B/cycle, 1 GHz), 2 us compute, 1000 B out (1 us).
    tiles = [Tile(1000, 1000, 2000)] * 4
    # Serial would be 4 x 4 us; double buffered: first load, 4 computes, last store.
    assert _run(_soc(), tiles) == (1 + 4 * 2 + 1) * 1_000_000


def test_transfer_bound_tiles_are_limited_by_the_channel():
    tiles = [Tile(3000, 0, 1000)] * 3
    assert _run(_soc(), tiles) == (3 * 3 + 1) * 1_000_000


def test_no_tiles_is_free():
    soc = _soc()
    assert _run(soc, []) == 0
    stats = soc.stats_tree()["vdsp"]["core0"]["idma"]
    assert stats["ch0"] == {}

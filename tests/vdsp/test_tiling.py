from dataclasses import dataclass

import numpy as np

from emu.chip import Soc
from emu.jit import njit
from emu.soc.config import load_config
from emu.soc.sched import Stage, Task
from emu.vdsp import isa
from emu.vdsp.idma import Endpoint, linear
from emu.vdsp.tiling import TileStep, resumable, stream


@njit
def add_one(ctx, src, dst, count):
    for at in range(0, count, 16):
        v = isa.load_i32(ctx, src + 4 * at)
        isa.store(ctx, isa.add_i32(ctx, v, isa.splat_i32(ctx, 1)), dst + 4 * at)


@dataclass
class AddOnePlan:
    core: object
    inp: object
    out: object
    tile: int
    count: int

    @property
    def tiles(self):
        return -(-self.count // self.tile)

    @property
    def in_bytes(self):
        return 4 * self.tile

    @property
    def out_bytes(self):
        return 4 * self.tile

    def step(self, k, in_buf, out_buf):
        n = min(self.tile, self.count - k * self.tile)
        tcm = self.core.tcm.data
        load = linear(f"in {k}", Endpoint(self.inp.data, 4 * k * self.tile, 0, False, "in"),
                      Endpoint(tcm, in_buf.offset, 0, True, "tcm in"), 4 * n)
        store = linear(f"out {k}", Endpoint(tcm, out_buf.offset, 0, True, "tcm out"),
                       Endpoint(self.out.data, 4 * k * self.tile, 0, False, "out"), 4 * n)
        return TileStep([load], lambda: self.core.compute(add_one, in_buf.offset,
                                                          out_buf.offset, n), [store])


def _setup(*overrides):
    cfg = load_config(overrides=["vdsp.freq_hz=1e9", "vdsp.idma.bytes_per_cycle=4",
                                 "vdsp.idma.descriptor_latency_cycles=0", "ddr.latency_ps=0",
                                 "ddr.bw_bytes_per_s=1e12", "vdsp.operator_dispatch_cycles=0",
                                 "vdsp.kernel_call_cycles=0", *overrides])
    soc = Soc(cfg, trace=True).build()
    count = 16 * 1024
    inp = soc.pool.alloc(4 * count, cached=False)
    out = soc.pool.alloc(4 * count, cached=False)
    inp.data.view(np.int32)[:] = np.arange(count)
    core = soc.vdsp.hw[0]
    return soc, core, AddOnePlan(core, inp, out, 2048, count)


def _task(core, plan, *, same_bank=False, priority=0):
    def tiles(slot, first):
        return (yield from stream(core, slot, plan, "add", first=first, same_bank=same_bank))

    return Task("add", [Stage("add", resumable(tiles))], priority=priority, core=0)


def test_tiles_are_computed_for_real_and_dma_overlaps_compute():
    soc, core, plan = _setup()
    task = _task(core, plan)
    soc.vdsp.submit(task)
    soc.run()
    assert (plan.out.data.view(np.int32) == np.arange(plan.count) + 1).all()
    # Per tile: 2048 int32 = 8 KiB; DMA 2048 cycles each way; compute: 128 loads and stores
    # with one store per bundle = 128 bundles... the DMA dominates: with overlap the run
    # takes about tiles + 1 transfers, not 2 x tiles.
    per_transfer = 8192 // 4 * 1000  # ps at 4 B/cycle, 1 GHz
    assert task.finished_ps < (plan.tiles + 2) * per_transfer
    assert task.finished_ps >= (plan.tiles + 1) * per_transfer
    assert core.tcm.free_bytes(0) == core.tcm.usable_bytes  # buffers released


def test_same_bank_buffers_cost_bank_conflicts():
    results = []
    for same_bank in (False, True):
        # Compute-bound tiles (slow kernel clock) so that stolen cycles show in the total.
        soc, core, plan = _setup("vdsp.freq_hz=50e6", "vdsp.idma.bytes_per_cycle=64")
        task = _task(core, plan, same_bank=same_bank)
        soc.vdsp.submit(task)
        soc.run()
        results.append((task.finished_ps, core.counters.get("bank_conflict_bytes", 0)))
    (split_ps, split_bytes), (same_ps, same_bytes) = results
    assert split_bytes == 0 and same_bytes > 0
    assert same_ps > split_ps


def test_a_preemptor_takes_the_core_between_tiles_and_the_stream_resumes():
    soc, core, plan = _setup()
    low = _task(core, plan)
    high = Task("urgent", [Stage("urgent", 1000)], priority=255, core=0)
    soc.vdsp.submit(low)

    def later():
        yield soc.env.timeout(3_000_000)
        soc.vdsp.submit(high)

    soc.env.process(later())
    soc.run()
    assert low.preemptions == 1
    assert low.started_ps < high.started_ps < high.finished_ps < low.finished_ps
    assert (plan.out.data.view(np.int32) == np.arange(plan.count) + 1).all()

from dataclasses import dataclass

import numpy as np

from emu.chip import Soc
from emu.jit import njit
from emu.soc.config import load_config
from emu.soc.sched import Stage, Task
from emu.vdsp import isa
from emu.vdsp.idma import Endpoint, linear
from emu.vdsp.tiling import Region, Tile, TiledPlan, TileStep, resumable, stream


@njit
def add_one(ctx, src, dst, count):
    for at in range(0, count, 16):
        v = isa.load_i32(ctx, src + 4 * at)
        isa.store(ctx, isa.add_i32(ctx, v, isa.splat_i32(ctx, 1)), dst + 4 * at)


@njit
def fill_i32(ctx, dst, count, value):
    for at in range(0, count, 16):
        isa.store(ctx, isa.splat_i32(ctx, value), dst + 4 * at)


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


def test_a_tiled_plan_moves_its_regions_and_computes_every_tile():
    # A 12 x 40 int32 image in DDR (rows 160 B apart); tile buffers hold rows of 16 int32
    # (64 B apart). Tiles: two 2-D loads side by side and two stores; one wide block; a
    # tile without loads that fills its output; one load stored as three pieces.
    soc, core, _ = _setup()
    rows, cols, row = 12, 40, 160
    inp = soc.pool.alloc(4 * rows * cols, cached=False)
    out = soc.pool.alloc(4 * rows * cols, cached=False)
    image = np.arange(rows * cols, dtype=np.int32).reshape(rows, cols) * 7 - 1000
    inp.data.view(np.int32)[:] = image.ravel()
    out.data.view(np.int32)[:] = -1

    def block(buf, r, c, tcm_offset, nrows, ncols):
        return Region(buf, r * row + 4 * c, row, tcm_offset, 64, nrows, 4 * ncols)

    work = [
        Tile([block(inp, 0, 0, 0, 4, 8), block(inp, 0, 20, 32, 4, 8)], ("add", 64),
             [block(out, 0, 0, 0, 4, 8), block(out, 0, 20, 32, 4, 8)]),
        Tile([block(inp, 4, 8, 0, 4, 16)], ("add", 64), [block(out, 4, 8, 0, 4, 16)]),
        Tile([], ("fill", 32), [block(out, 8, 0, 0, 2, 16)]),
        Tile([block(inp, 10, 30, 0, 2, 10)], ("add", 32),
             [block(out, 10, 30, 0, 1, 10), Region(out, 11 * row + 4 * 30, 0, 64, 0, 1, 20),
              Region(out, 11 * row + 4 * 35, 0, 84, 0, 1, 20)]),
    ]

    def kernel(src, dst, tile_work):
        kind, count = tile_work
        if kind == "fill":
            return core.compute(fill_i32, dst, count, 77)
        return core.compute(add_one, src, dst, count)

    plan = TiledPlan(core, work, 256, 256, kernel)
    assert plan.tiles == 4
    soc.vdsp.submit(_task(core, plan))
    soc.run()

    want = np.full((rows, cols), -1, dtype=np.int32)
    want[0:4, 0:8] = image[0:4, 0:8] + 1
    want[0:4, 20:28] = image[0:4, 20:28] + 1
    want[4:8, 8:24] = image[4:8, 8:24] + 1
    want[8:10, 0:16] = 77
    want[10:12, 30:40] = image[10:12, 30:40] + 1
    np.testing.assert_array_equal(out.data.view(np.int32).reshape(rows, cols), want)
    assert core.tcm.free_bytes(0) == core.tcm.usable_bytes  # buffers released

    channels = {ch.track.index: ch for ch in core.load_channels + core.store_channels}
    moved = [(s.name, dict(s.args)["bytes"]) for s in soc.recorder.recording.slices
             if s.track in channels]
    assert sorted(moved) == sorted([
        ("in 0.0", 128), ("in 0.1", 128), ("out 0.0", 128), ("out 0.1", 128),
        ("in 1", 256), ("out 1", 256),
        ("out 2", 128),
        ("in 3", 80), ("out 3.0", 40), ("out 3.1", 20), ("out 3.2", 20),
    ])
    loaded = sum(ch.counters.get("bytes_in", 0) for ch in core.load_channels)
    stored = sum(ch.counters.get("bytes_out", 0) for ch in core.store_channels)
    assert (loaded, stored) == (592, 720)

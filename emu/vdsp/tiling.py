"""Ping-pong tiling: stream tiles DDR -> TCM -> DDR while the core computes.

Tile k+1 is loaded on one iDMA channel while tile k is computed; tile k's result is written
back on another channel while tile k+1 is computed. Each tile's input and output buffers
sit in one TCM bank and consecutive tiles alternate banks, so the DMA of one tile and the
compute of the next touch different memories (as the seed's DSP sample does). With
`same_bank=True` every buffer is placed in bank 0: the DMA then competes with the core for
that bank (`timing.bank_conflict_cycles`). Loads go round-robin over the core's load
channels and stores over its store channels, so a tile with several descriptors moves them
in parallel.

Overlap is not assumed: it emerges from the channels, the DDR and the core running as
separate simulation processes, and shows in the trace as slices on the channel tracks next
to the core's compute slices. Between tiles the loop offers a preemption point: when a
priority-255 task waits for the core, it finishes the tile in flight, drains its DMA,
releases its TCM and says where to resume; `resumable` turns that into the continuation a
preempted stage returns to the scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import simpy

from emu.mem.pool import PoolBuffer
from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp.cores import VdspCore
from emu.vdsp.idma import Descriptor, Endpoint, IdmaChannel
from emu.vdsp.tcm import TcmBuffer
from emu.vdsp.timing import KernelCycles, bank_conflict_cycles

_Work = TypeVar("_Work")


@dataclass(frozen=True)
class TileStep:
    """Tile k of a plan: how to fill its input, compute it, and drain its output."""

    loads: list[Descriptor]
    compute: Callable[[], KernelCycles]
    stores: list[Descriptor]


class TilePlan(Protocol):
    """What an operator tells the helper: tile count, buffer sizes, and each tile's step."""

    @property
    def tiles(self) -> int: ...

    @property
    def in_bytes(self) -> int: ...

    @property
    def out_bytes(self) -> int: ...

    def step(self, k: int, in_buf: TcmBuffer, out_buf: TcmBuffer) -> TileStep: ...


@dataclass(frozen=True)
class Region:
    """A block one descriptor moves between a DDR buffer and a tile buffer: `rows` rows of
    `row_bytes`, `ddr_pitch` apart in `ddr` from `ddr_offset`, `tcm_pitch` apart in the tile
    buffer from `tcm_offset` (relative to the buffer's start). A pitch of 0 repeats one row."""

    ddr: PoolBuffer
    ddr_offset: int
    ddr_pitch: int
    tcm_offset: int
    tcm_pitch: int
    rows: int
    row_bytes: int

    def descriptor(self, label: str, core: VdspCore, buf: TcmBuffer, to_tcm: bool) -> Descriptor:
        ddr = Endpoint(self.ddr.data, self.ddr_offset, self.ddr_pitch, in_tcm=False,
                       name=f"DDR buffer {self.ddr.label}")
        tcm = Endpoint(core.tcm.data, buf.offset + self.tcm_offset, self.tcm_pitch,
                       in_tcm=True, name=f"TCM {buf.label}")
        src, dst = (ddr, tcm) if to_tcm else (tcm, ddr)
        return Descriptor(label, src, dst, self.rows, self.row_bytes)


@dataclass(frozen=True)
class Tile(Generic[_Work]):
    """One tile of a `TiledPlan`: the regions loaded into its input buffer, what its kernel
    gets (`work`), and the regions stored from its output buffer."""

    loads: Sequence[Region]
    work: _Work
    stores: Sequence[Region]


@dataclass(frozen=True)
class TiledPlan(Generic[_Work]):
    """The one tile plan of the DSP operators (NN, point cloud, CV): a list of tiles, each
    with its own regions, computed by `kernel(in_address, out_address, work)` with the
    addresses of the tile's two TCM buffers. Operators differ only in the tiles they list."""

    core: VdspCore
    work: Sequence[Tile[_Work]]
    in_bytes: int
    out_bytes: int
    kernel: Callable[[int, int, _Work], KernelCycles]

    @property
    def tiles(self) -> int:
        return len(self.work)

    def step(self, k: int, in_buf: TcmBuffer, out_buf: TcmBuffer) -> TileStep:
        tile = self.work[k]

        def name(kind: str, i: int, n: int) -> str:
            return f"{kind} {k}" if n == 1 else f"{kind} {k}.{i}"

        loads = [r.descriptor(name("in", i, len(tile.loads)), self.core, in_buf, True)
                 for i, r in enumerate(tile.loads)]
        stores = [r.descriptor(name("out", i, len(tile.stores)), self.core, out_buf, False)
                  for i, r in enumerate(tile.stores)]
        return TileStep(loads, lambda: self.kernel(in_buf.offset, out_buf.offset, tile.work),
                        stores)


TileRun = Callable[[CoreSlot, int], Generator[simpy.Event, Any, int | None]]
"""Runs tiles from the given index on; returns None when all are done, or the index to
resume from after stopping for a preemptor."""


def resumable(run: TileRun, first: int = 0) -> StageBody:
    """A stage body running `run` from tile `first`, continuing where a preemption left it."""

    def body(slot: CoreSlot) -> Generator[simpy.Event, Any, StageBody | None]:
        resume = yield from run(slot, first)
        return None if resume is None else resumable(run, resume)

    return body


def stream(
    core: VdspCore, slot: CoreSlot, plan: TilePlan, label: str, *, first: int = 0,
    same_bank: bool = False,
) -> Generator[simpy.Event, Any, int | None]:
    """Run tiles `first`.. of `plan` double-buffered on `core` (see the module docstring)."""
    env = slot.env
    if first >= plan.tiles:
        return None
    turns = {"load": 0, "store": 0}  # the next channel of each direction, round-robin
    banks = [0, 0] if same_bank else [0, 1 % core.cfg.tcm.banks]
    buffers: list[tuple[TcmBuffer, TcmBuffer]] = []
    try:
        for side in (0, 1):
            buffers.append((core.tcm.alloc(banks[side], plan.in_bytes, f"{label} in{side}"),
                            core.tcm.alloc(banks[side], plan.out_bytes, f"{label} out{side}")))
        steps: dict[int, TileStep] = {}

        def step(k: int) -> TileStep:
            if k not in steps:
                steps[k] = plan.step(k, *buffers[k % 2])
            return steps[k]

        def issue(descs: list[Descriptor], direction: str) -> Generator[
                simpy.Event, Any, list[simpy.Event]]:
            channels: list[IdmaChannel] = (core.load_channels if direction == "load"
                                           else core.store_channels)
            events = []
            for desc in descs:
                channel = channels[turns[direction] % len(channels)]
                turns[direction] += 1
                events.append((yield from channel.copy(desc)))
            return events

        # One track per tile buffer: its input buffer is busy from the load's issue to the
        # end of the compute, its output buffer from the compute's start to the store's end.
        # Tiles k and k+2 share the buffers, and never overlap in them.
        recorder = slot.group.recorder
        tracks = [tuple(recorder.track(f"{core.tcm.path}.bank{buf.bank}.{kind}{side}")
                        for buf, kind in zip(pair, ("in", "out"), strict=True))
                  for side, pair in enumerate(buffers)]
        issued_at: dict[int, int] = {first: env.now}

        def occupancy(k: int, computed: tuple[int, int], events: list[simpy.Event]) -> None:
            in_track, out_track = tracks[k % 2]
            in_track.slice(f"{label} tile {k}", issued_at.pop(k), computed[1])

            def record(_event: simpy.Event) -> None:
                out_track.slice(f"{label} tile {k}", computed[0], env.now)

            env.all_of(events).callbacks.append(record)

        loaded = yield from issue(step(first).loads, "load")
        stored: dict[int, list[simpy.Event]] = {}
        for k in range(first, plan.tiles):
            yield from _wait_all(env, loaded)
            nxt = k + 1 < plan.tiles and not slot.preempt_requested()
            if nxt:
                issued_at[k + 1] = env.now
                loaded = yield from issue(step(k + 1).loads, "load")
            if k - 2 in stored:  # tile k writes the output buffer tile k-2 used
                yield from _wait_all(env, stored.pop(k - 2))
                del steps[k - 2]
            start = env.now
            cycles = step(k).compute()
            busy: list[Descriptor] = []  # DMA that runs while tile k computes
            if nxt:
                busy += steps[k + 1].loads
            if k - 1 in stored and not all(e.triggered for e in stored[k - 1]):
                busy += steps[k - 1].stores
            stall = _bank_conflict_cycles(core, buffers[k % 2][0].bank, busy, cycles)
            yield env.timeout(core.clock.cycles_to_ps(cycles.total + stall))
            slot.track.slice(f"{label} tile {k}", start, env.now, cycles=cycles.total,
                             bank_stall=stall, bound=cycles.bound,
                             tcm_bank=buffers[k % 2][0].bank)
            computed = (start, env.now)
            stored[k] = yield from issue(step(k).stores, "store")
            if recorder.enabled:  # an untraced run waits on no extra event per tile
                occupancy(k, computed, stored[k])
            if k + 1 < plan.tiles and not nxt:
                yield from _wait_all(env, [e for evs in stored.values() for e in evs])
                return k + 1
        yield from _wait_all(env, [e for evs in stored.values() for e in evs])
        return None
    finally:
        for pair in buffers:
            for buf in pair:
                core.tcm.free(buf)


def _wait_all(env: simpy.Environment, events: list[simpy.Event]
              ) -> Generator[simpy.Event, Any, None]:
    """Wait for `events`: for none of them if all are processed, on the one itself if only
    one is not, else on their `all_of` (one simulation event fewer than an `all_of` each)."""
    pending = [e for e in events if not e.processed]
    if len(pending) == 1:
        yield pending[0]
    elif pending:
        yield env.all_of(pending)


def _bank_conflict_cycles(
    core: VdspCore, bank: int, busy: list[Descriptor], cycles: KernelCycles,
) -> int:
    """Cycles the core loses to the DMA (`busy`) into or out of the bank it computes on."""
    dma_bytes = 0
    for desc in busy:
        side = desc.dst if desc.to_tcm else desc.src
        if core.tcm.bank_of(side.offset) == bank:
            dma_bytes += desc.nbytes
    if dma_bytes:
        core.count("bank_conflict_bytes", dma_bytes)
    return bank_conflict_cycles(dma_bytes, cycles.memory_ops, core.cfg)

"""Ping-pong tiling: stream tiles DDR -> TCM -> DDR while the core computes.

Tile k+1 is loaded on one iDMA channel while tile k is computed; the result of tile k is
written back on another channel while tile k+1 is computed. Overlap is not assumed: it
emerges from the channels, the DDR and the core running as separate simulation processes,
and shows in the trace as slices on the channel tracks beside the core's compute slices.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from emu.soc.sched import CoreSlot
from emu.vdsp.idma import Descriptor, IdmaChannel


@dataclass(frozen=True)
class Tile:
    """One tile: bytes in, bytes out, and the core cycles computing it takes."""

    in_bytes: int
    out_bytes: int
    compute_cycles: int


def pingpong(
    slot: CoreSlot, load: IdmaChannel, store: IdmaChannel, tiles: Sequence[Tile], label: str,
) -> Generator[simpy.Event, Any, None]:
    """Process `tiles` with double buffering on two channels; returns when all are stored."""
    env = slot.env
    if not tiles:
        return

    def fetch(k: int) -> Generator[simpy.Event, Any, simpy.Event]:
        desc = Descriptor(f"{label} in {k}", 1, tiles[k].in_bytes, to_tcm=True)
        return (yield from load.copy(desc))

    loaded = yield from fetch(0)
    stores: list[simpy.Event] = []
    for k, tile in enumerate(tiles):
        yield loaded
        if k + 1 < len(tiles):
            loaded = yield from fetch(k + 1)
        start = env.now
        yield env.timeout(load.clock.cycles_to_ps(tile.compute_cycles))
        slot.track.slice(f"{label} compute {k}", start, env.now)
        out = Descriptor(f"{label} out {k}", 1, tile.out_bytes, to_tcm=False)
        stores.append((yield from store.copy(out)))
    yield env.all_of(stores)

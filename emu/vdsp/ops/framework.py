"""Framework commands (0x000-0x3FF)."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from emu.soc.sched import CoreSlot, StageBody
from emu.vdsp.ops import Operator, register

if TYPE_CHECKING:
    from emu.mem.pool import PoolBuffer
    from emu.vdsp.cores import VdspCore

CMD_PING = 0x000


def _ping(
    core: VdspCore, slot: CoreSlot, inp: PoolBuffer, out: PoolBuffer,
) -> Generator[simpy.Event, Any, StageBody | None]:
    # The round trip itself is the work: dispatch on the core, RPC latency on the ARM side.
    yield from ()
    return None


PING = register(Operator(CMD_PING, "ping", "round trip with no work: measures RPC overhead",
                         _ping), builtin=True)

"""The message path of an hbDSP RPC between the ARM program and the vDSP queue.

A round trip on the board, after the ARM library call itself (`cpu.api_call_ps`, charged to
the calling thread) and whatever cache maintenance the program does around it:

1. relay mode only (`vdsp.rpc_mode = "relay"`, how seed 001's sample scripts run every DSP
   program): the request goes to the relay server process (`dsp_relay_server`), which
   forwards it: `vdsp.relay_hop_ps`;
2. the message reaches the DSP through the kernel's inter-processor channel and the DSP
   runtime queues it: `vdsp.rpc_submit_ps`;
3. the task waits in the DSP queue, the core decodes it and enters the operator
   (`vdsp.operator_dispatch_cycles`), and the operator runs: `emu.soc.sched` and the
   operator's own model;
4. the completion message comes back to the ARM side: `vdsp.rpc_return_ps`;
5. relay mode only: the relay server hands the reply to the program: `vdsp.relay_hop_ps`.

In `direct` mode the program talks to the kernel channel itself and steps 1 and 5 vanish.
Only the sum of the fixed parts is seen by the board's round trips
(`shared/calibration/j5_cv.md` does not split them); the split is the preset's. A hop is a
latency, not an occupancy: concurrent RPCs do not queue at the relay server, whose threads'
own work per message no measurement shows (the board's figures are one call at a time);
they queue only for the DSP cores.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from emu.soc.component import Component
from emu.soc.config import RPC_MODES, VdspConfig
from emu.soc.sched import CoreGroup, Task
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder

__all__ = ["RPC_MODES", "RpcPath", "message_ps"]


def message_ps(cfg: VdspConfig) -> int:
    """The fixed time an RPC spends in messages there and back (steps 1, 2, 4 and 5)."""
    hops = 2 * cfg.relay_hop_ps if cfg.rpc_mode == "relay" else 0
    return hops + cfg.rpc_submit_ps + cfg.rpc_return_ps


class RpcPath(Component):
    """The ARM <-> DSP message path in front of a `CoreGroup`."""

    def __init__(self, name: str, parent: Component, env: Sim, cfg: VdspConfig,
                 cores: CoreGroup, recorder: TraceRecorder) -> None:
        super().__init__(name, parent)
        self.env = env
        self.cfg = cfg
        self.cores = cores
        self.relay = cfg.rpc_mode == "relay"
        self._recorder = recorder
        self._lanes: list[int] = []  # when each trace lane of the relay is free again

    def round_trip(self, task: Task, on_done: Callable[[], None] | None = None
                   ) -> Generator[simpy.Event, Any, None]:
        """Carry `task` from the program to the DSP queue, wait for it, and carry the
        completion back; `on_done` runs when the operator has finished on the DSP."""
        if self.relay:
            yield from self._hop(f"request {task.name}")
        yield self.env.timeout(self.cfg.rpc_submit_ps)
        yield self.cores.submit(task)
        if on_done is not None:
            on_done()
        yield self.env.timeout(self.cfg.rpc_return_ps)
        if self.relay:
            yield from self._hop(f"reply {task.name}")
        self.count("round_trips")

    def _hop(self, what: str) -> Generator[simpy.Event, Any, None]:
        start = self.env.now
        end = start + self.cfg.relay_hop_ps
        # Hops overlap in time, so the trace shows them on as many lanes as are in use at
        # once: the lowest free one.
        lane = next((i for i, free in enumerate(self._lanes) if free <= start),
                    len(self._lanes))
        self._lanes[lane:lane + 1] = [end]
        yield self.env.timeout(self.cfg.relay_hop_ps)
        self.count("relay_hops")
        if self._recorder.enabled:
            self._recorder.track(f"{self.path}.relay{lane}").slice(what, start, end)

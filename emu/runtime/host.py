"""The host: the user's program, a thread of control on one A55 core.

The host lives at the simulation's current time. Every call it makes costs CPU time
(`cpu.api_call_ps`) and lets the rest of the SoC run meanwhile. Submitting work returns
as soon as the task is queued; waiting runs the simulation until the task is done or the
timeout (simulated time) has passed, and says which.
"""

from __future__ import annotations

import simpy

from emu.cpu.cluster import CpuWork
from emu.errors import SimulationError
from emu.soc.builder import Soc
from emu.soc.sched import PRIORITY_HIGHEST, CoreGroup, Task


class Host:
    """One host thread on A55 core `core`."""

    def __init__(self, soc: Soc, name: str = "main", core: int = 0) -> None:
        if not 0 <= core < soc.config.cpu.cores:
            raise SimulationError(f"host {name}: no A55 core {core}")
        self.soc = soc
        self.name = name
        self.core = core
        self.track = soc.recorder.track(f"host.{name}")

    @property
    def now_ps(self) -> int:
        return self.soc.now_ps

    def advance(self, duration_ps: int, label: str = "busy") -> None:
        """Spend `duration_ps` of host time; the SoC runs meanwhile."""
        if duration_ps < 0:
            raise SimulationError(f"host {self.name}: negative duration {duration_ps}")
        if duration_ps == 0:
            return
        start = self.now_ps
        self.soc.run(self.soc.env.timeout(duration_ps))
        self.track.slice(label, start, self.now_ps)

    def api_call(self, name: str) -> None:
        """The CPU cost of one runtime API call."""
        self.advance(self.soc.config.cpu.api_call_ps, name)

    def submit(self, group: CoreGroup, task: Task) -> Task:
        """Queue `task` on `group` and return at once (after the call's own cost)."""
        self.api_call(f"submit {task.name}")
        group.submit(task)
        return task

    def wait(self, task: Task, timeout_ps: int | None = None) -> bool:
        """Run until `task` is done (True) or `timeout_ps` has passed (False).

        `None` waits for as long as it takes.
        """
        if task.done is None:
            raise SimulationError(f"host {self.name}: task {task.name!r} was never submitted")
        return self.wait_event(task.done, timeout_ps, f"wait {task.name}")

    def wait_event(self, event: simpy.Event, timeout_ps: int | None, label: str) -> bool:
        """Run until `event` has happened (True) or `timeout_ps` has passed (False)."""
        start = self.now_ps
        env = self.soc.env
        until = event
        if timeout_ps is not None:
            if timeout_ps < 0:
                raise SimulationError(f"host {self.name}: negative timeout {timeout_ps}")
            until = env.any_of([event, env.timeout(timeout_ps)])
        if not event.triggered:
            self.soc.run(until)
        self.track.slice(label, start, self.now_ps)
        return event.triggered

    def run_cpu(self, work: CpuWork) -> None:
        """Do CPU work on the host's own core and come back when it is finished."""
        task = self.soc.cpu.work_task(work, core=self.core, priority=PRIORITY_HIGHEST)
        self.soc.cpu.submit(task)
        self.wait(task)

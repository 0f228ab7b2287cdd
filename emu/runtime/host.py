"""Host threads: the user's program as threads of control that live in simulated time.

A host program on the board is a set of pthreads calling the runtime libraries. Here each
host thread is an ordinary Python function running on its own greenlet (a stack of its own
that is switched to and from explicitly, never preempted). A SimPy process stands in for
the thread in the simulation: it switches into the greenlet, the greenlet runs the user's
code until a call has to take simulated time, hands the process the event it waits for and
switches back; the process yields that event and, once it has happened, switches in again.
So any number of threads interleave in simulated-time order, one at a time, and the order
is the event queue's (time, then scheduling order), never the operating system's.

Why greenlets: user code blocks deep inside ordinary function calls (`hbDSPWaitTaskDone`
inside a helper inside a loop), which a generator cannot do without every caller becoming
a generator. OS threads passing a baton could, but each hand-over costs a kernel round
trip and the determinism would rest on our locking being right; a greenlet switch is a
stack swap in the same OS thread, about a microsecond, and the order is ours by
construction. greenlet is the C extension behind gevent and SQLAlchemy's asyncio layer.

The main program (the code that is not in a spawned thread) is a host thread too, the
session's `main`: when it blocks, it drives the simulation itself until what it waits for
has happened, so a straight-line script needs no threads at all.

What a thread does with time:
  cpu()    work on an A55 core: it queues behind other threads' work when every core is
           busy (the cluster's priority queue) and occupies the core while it runs;
  sleep()  time passes and no core is used (usleep, a frame that has not arrived yet);
  wait()   until an event, a timeout, or the simulation's verdict that nothing left in it
           can make the event happen (a deadlock: every thread waits and no event is due).
"""

from __future__ import annotations

import abc
import contextlib
import enum
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import simpy
from greenlet import greenlet

from emu.bpu.timing import LayerGroup
from emu.cpu.cluster import CpuWork
from emu.soc.clock import PS_PER_MS
from emu.soc.sched import ANY_CORE, PRIORITY_LOWEST, CoreGroup, Stage, Task
from emu.soc.trace import Flow

if TYPE_CHECKING:
    from emu.runtime.session import Session


class WaitResult(enum.Enum):
    DONE = "done"
    TIMEOUT = "timeout"
    DEADLOCK = "deadlock"  # nothing left in the simulation can make the event happen


class HostThread(abc.ABC):
    """One thread of the host program: its timeline, its track and what it spent."""

    def __init__(
        self, session: Session, name: str, index: int, *, core: int = ANY_CORE,
        priority: int = PRIORITY_LOWEST, daemon: bool = False,
    ) -> None:
        self.session = session
        self.soc = session.soc
        self.name = name
        self.index = index  # creation order; the main thread is 0
        self.core = core
        self.priority = priority
        self.daemon = daemon
        self.track = self.soc.recorder.track(f"host.{name}")
        self.finished = self.soc.env.event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.api_calls = 0
        self.cpu_busy_ps = 0
        self.cpu_queued_ps = 0
        self.blocked_ps = 0
        self._wake: simpy.Event | None = None

    @property
    def now_ps(self) -> int:
        return self.soc.env.now

    @property
    def waiting(self) -> bool:
        """Whether the thread is in a `wait` that a deadlock verdict may end."""
        return self._wake is not None

    @abc.abstractmethod
    def _block(self, event: simpy.Event) -> Any:
        """Give up control until `event` has happened; its value."""

    # --- time ------------------------------------------------------------------------------

    def sleep(self, duration_ps: int, label: str = "sleep") -> None:
        """Let `duration_ps` pass without using a core."""
        if duration_ps < 0:
            raise ValueError(f"host thread {self.name}: negative sleep {duration_ps}")
        if duration_ps:
            start = self.now_ps
            self._block(self.soc.env.timeout(duration_ps))
            self.track.slice(label, start, self.now_ps)

    def cpu(self, work: CpuWork | int, label: str) -> None:
        """Do CPU work on an A55 core: a `CpuWork` (op counts and its address stream through
        the cache model) or a fixed number of picoseconds; back when it is done."""
        start = self.now_ps
        self._on_core(work, label)
        self.track.slice(label, start, self.now_ps)

    def _on_core(self, work: CpuWork | int, label: str) -> None:
        cluster = self.soc.cpu
        if isinstance(work, CpuWork):
            task = cluster.work_task(work, core=self.core, priority=self.priority)
        else:
            task = Task(label, [Stage(label, work)], priority=self.priority, core=self.core)
        cluster.submit(task)
        self._block(self._done(task))
        self.cpu_queued_ps += task.pending_ps
        self.cpu_busy_ps += task.busy_ps

    @contextlib.contextmanager
    def call(self, name: str) -> Iterator[ApiCall]:
        """One runtime API call: its CPU cost (`cpu.api_call_ps`) on entry, and one slice on
        this thread's track for the whole call, which the task it submits (`ApiCall.link`)
        is linked to in the trace."""
        start = self.now_ps
        self.api_calls += 1
        self._on_core(self.soc.config.cpu.api_call_ps, name)
        record = ApiCall(self)
        try:
            yield record
        finally:
            self.track.slice(name, start, self.now_ps, flow=record.flow)

    def wait(self, event: simpy.Event, timeout_ps: int | None = None,
             label: str = "wait") -> WaitResult:
        """Block until `event` (DONE), `timeout_ps` passed (TIMEOUT; None waits for ever), or
        the simulation found that nothing can make `event` happen any more (DEADLOCK)."""
        if event.triggered:
            return WaitResult.DONE
        if timeout_ps is not None and timeout_ps < 0:
            raise ValueError(f"host thread {self.name}: negative timeout {timeout_ps}")
        env = self.soc.env
        start = self.now_ps
        wake = env.event()
        timer = env.timeout(timeout_ps) if timeout_ps is not None else None
        self._wake = wake
        try:
            self._block(env.any_of([event, wake] if timer is None else [event, wake, timer]))
        finally:
            self._wake = None
            if timer is not None:
                env.cancel(timer)  # it must not keep the simulation alive or move the clock
        self.blocked_ps += self.now_ps - start
        self.track.slice(label, start, self.now_ps)
        if event.triggered:
            return WaitResult.DONE
        return WaitResult.DEADLOCK if wake.triggered else WaitResult.TIMEOUT

    def idle_until(self, event: simpy.Event) -> Any:
        """Block until `event`, as a service thread waiting for work does: such a wait is
        not a deadlock, so the deadlock verdict never ends it. The event's value."""
        return self._block(event)

    def wake_for_deadlock(self) -> None:
        """End this thread's `wait` with DEADLOCK (the session found that nothing else can)."""
        assert self._wake is not None
        self._wake.succeed()

    # --- work elsewhere ---------------------------------------------------------------------

    def submit(self, group: CoreGroup, task: Task, label: str = "submit") -> simpy.Event:
        """Queue `task` on `group` (an API call's cost); its completion event."""
        with self.call(label) as call:
            call.link(task)
            group.submit(task)
        return self._done(task)

    def run_model(self, name: str, layers: Sequence[LayerGroup], *,
                  priority: int = PRIORITY_LOWEST, custom_id: int = 0,
                  max_time_per_fc_ps: int = 0) -> Task:
        """Run a model's layer groups in order (in function calls of at most
        `max_time_per_fc_ps`) on a BPU core and wait for it; the finished task says how
        long it ran and queued. For synthetic networks (the cameras scenario); compiled
        models go through hbDNN (`emu.runtime.hbdnn`)."""
        bpu = self.soc.bpu
        task = bpu.model_task(name, layers, priority=priority, custom_id=custom_id,
                              max_time_per_fc_ps=max_time_per_fc_ps)
        self.wait(self.submit(bpu, task, "bpu submit"), None, f"bpu wait {name}")
        return task

    @staticmethod
    def _done(task: Task) -> simpy.Event:
        assert task.done is not None, f"task {task.name!r} was never submitted"
        return task.done

    def stats(self) -> dict[str, Any]:
        return {"name": self.name, "api_calls": self.api_calls,
                "cpu_busy_ps": self.cpu_busy_ps, "cpu_queued_ps": self.cpu_queued_ps,
                "blocked_ps": self.blocked_ps}


class ApiCall:
    """What an API call in progress records: the task it submitted, for the trace's flow."""

    def __init__(self, thread: HostThread) -> None:
        self._recorder = thread.soc.recorder
        self.flow: Flow | None = None

    def link(self, task: Task) -> None:
        """Draw the trace's arrow from this call to `task`'s slices on the core."""
        task.flow_id = self._recorder.new_flow()
        if task.flow_id:
            self.flow = Flow(task.flow_id, into=False, onward=True)


class MainThread(HostThread):
    """The main program: blocking drives the session's simulation until the event."""

    def _block(self, event: simpy.Event) -> Any:
        self.session.drive(event)
        return event.value


class _Fiber(greenlet):
    """The greenlet of a spawned thread; the with-blocks entered in it stack here."""

    def __init__(self, run: Callable[[], Any], thread: SpawnedThread) -> None:
        super().__init__(run)
        self.thread = thread
        self.sessions: list[Session] = [thread.session]


def current_fiber() -> _Fiber | None:
    """The spawned host thread's greenlet that is running, if one is."""
    g = greenlet.getcurrent()
    return g if isinstance(g, _Fiber) else None


class SpawnedThread(HostThread):
    """A thread started with `Session.spawn`: a greenlet driven by a SimPy process."""

    def __init__(
        self, session: Session, name: str, index: int, fn: Callable[..., Any],
        args: tuple[Any, ...], kwargs: dict[str, Any], **options: Any,
    ) -> None:
        super().__init__(session, name, index, **options)
        self._fiber = _Fiber(lambda: fn(*args, **kwargs), self)
        self.finished_ps = -1
        self.soc.env.process(self._drive())

    def _block(self, event: simpy.Event) -> Any:
        return self._fiber.parent.switch(event)

    def _drive(self) -> Any:
        # Runs the fiber until it asks for an event, yields the event, and so on until the
        # function returns. The fiber comes back to whichever greenlet resumed it.
        resume: tuple[Any, ...] = ()  # the first switch starts the function with no value
        while True:
            self._fiber.parent = greenlet.getcurrent()
            try:
                request = self._fiber.switch(*resume)
            except Exception as exc:  # the user's function raised: this thread ends
                exc.add_note(f"(in emu host thread {self.name!r} at "
                             f"{self.now_ps / PS_PER_MS:.6f} ms simulated)")
                self.error = exc
                self.session.thread_failed(self, exc)
                break
            if self._fiber.dead:
                self.result = request
                break
            resume = ((yield request),)
        self.finished_ps = self.now_ps
        self.finished.succeed(self.result)

    def kill(self) -> None:
        """End a thread that can never run again (its session closed): its `finally`
        blocks run now, and its calls into the closed session return error codes."""
        if not self._fiber.dead:
            self._fiber.parent = greenlet.getcurrent()
            self._fiber.throw()

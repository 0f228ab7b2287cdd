"""Sessions: one emulated board, the host program's threads on it, and every handle made in it.

    with emu.Session(preset="j5", overrides=["vdsp.freq_hz=800MHz"]) as s:
        s.spawn(camera_loop, 0, name="camera0")
        s.spawn(lidar_loop, name="lidar")
        s.run()                       # until every spawned thread has returned

The C-named functions (`hbSysAllocMem`, `hbDSPRpc`, ...) take no board argument; they act on
the current session: the innermost `with` block entered in the calling thread, a spawned
thread's own session, or else the default session, a `j5` board made on first use by the
main OS thread (`start` replaces it). Sessions are isolated: each has its own SoC, clock,
pool and handles, and a handle of one is refused by another, or once its session closed.

The simulation loop is driven in one place, `Session.drive`, by the main program (a wait in
straight-line code, or `run`); spawned threads only ever hand control back to it. A session
belongs to the OS thread that made it: a call from another OS thread, or from inside the
simulation loop (an operator body, a SimPy callback), is refused with the API's error code,
because the event loop and the threads' greenlets can only run where they were made.

When every event has run and a thread still waits without a timeout, nothing can ever wake
it: the session ends the earliest such wait (main first, then in spawn order) with a
deadlock verdict, and the API returns its error code instead of hanging.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import simpy

from emu.chip import Phase, Soc
from emu.errors import EmuError, HostThreadError, SimulationError
from emu.runtime.host import HostThread, MainThread, SpawnedThread, WaitResult, current_fiber
from emu.soc.config import SocConfig, load_config
from emu.soc.sched import ANY_CORE, PRIORITY_HIGHEST, PRIORITY_LOWEST

if TYPE_CHECKING:
    from emu.runtime.dmp_dv import DvState
    from emu.runtime.dnn_engine import DnnEngine


class WrongThread(EmuError):
    """A runtime call from where the session cannot serve it (another OS thread, inside the
    simulation loop, or a closed session); the C-named API turns it into its error code."""


_serials = itertools.count(1)


class Session:
    """One emulated board and the host program running on it."""

    def __init__(
        self, preset: str = "j5", config: str | Path | None = None,
        overrides: Sequence[str] = (), *, trace: bool = False,
    ) -> None:
        self.soc = Soc(load_config(preset, config, overrides), trace=trace).build()
        self.serial = next(_serials)
        self.closed = False
        self.main = MainThread(self, "main", 0)
        self.threads: list[HostThread] = [self.main]
        self.deadlocks = 0
        self._os_thread = threading.get_ident()
        self._driving = False  # whether `drive` is running the loop (it is not re-entrant)
        self._failures: list[tuple[HostThread, BaseException]] = []
        self._failures_raised = 0
        self._callbacks: simpy.Store | None = None
        self._callback_backlog = 0  # callbacks due (their event happened) and not yet run
        self._callbacks_drained = self.soc.env.event()
        self._serial_numbers = itertools.count(1)
        # hbDNN's tasks, plugin layers and worker threads (`dnn_engine.engine` makes it)
        self.dnn: DnnEngine | None = None
        # dmp_dv's last error message and execution ids (`dmp_dv` makes it)
        self.dmp_dv: DvState | None = None

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"at {self.now_ps} ps"
        return f"<emu.Session {self.serial} {self.soc.resolved.preset}, {state}>"

    @property
    def config(self) -> SocConfig:
        """The hardware this session simulates (resolved preset, file and overrides)."""
        return self.soc.config

    @property
    def now_ps(self) -> int:
        return self.soc.now_ps

    def next_serial(self) -> int:
        """1, 2, ...: numbers for the session's handles, so names in traces are stable."""
        return next(self._serial_numbers)

    # --- with-blocks ------------------------------------------------------------------------

    def __enter__(self) -> Session:
        if self.closed:
            raise SimulationError(f"session {self.serial} is closed; make a new emu.Session")
        _stack().append(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        stack = _stack()
        if self in stack:
            del stack[len(stack) - 1 - stack[::-1].index(self)]
        try:
            if exc_type is None and not self.closed:
                self.run()  # as leaving a thread pool waits for its threads
        finally:
            self.close()

    def close(self) -> None:
        """End the session: unfinished threads are ended, handles stop working, stats stay.

        Not from inside its own simulation (one of its host threads, a callback): a thread
        cannot end the loop that runs it. That raises `WrongThread` and changes nothing."""
        if self.closed:
            return
        if self._driving:
            raise WrongThread(f"session {self.serial}: close() called from inside its own "
                              f"simulation (a host thread or a callback); close it from the "
                              f"program that made it, once run() has returned")
        self.closed = True
        self.dnn = None  # nothing of hbDNN outlives the session
        for thread in self.threads:
            if isinstance(thread, SpawnedThread):
                thread.kill()
        if self.soc.phase is Phase.BUILT:
            self.soc.finish()
        self.soc.pool.close()  # its buffers' bytes back now, not when a collection runs

    # --- threads ----------------------------------------------------------------------------

    def spawn(
        self, fn: Callable[..., Any], *args: Any, name: str | None = None,
        core: int | None = None, priority: int = PRIORITY_LOWEST, **kwargs: Any,
    ) -> SpawnedThread:
        """Start a host thread that runs `fn(*args, **kwargs)` from the current simulated time.

        `core` pins its CPU work to one A55 core (as CPU affinity does); by default it takes
        any free core. `priority` (0-255) orders its CPU work against other threads' when
        the cores are busy. The thread runs when the simulation is driven (`run`, or a
        blocking call of the main program)."""
        self.check_caller()
        if not callable(fn):
            raise TypeError(f"spawn: {fn!r} is not callable")
        cores = self.soc.config.cpu.cores
        if core is not None and not (isinstance(core, int) and 0 <= core < cores):
            raise ValueError(f"spawn: no A55 core {core!r} (cores 0..{cores - 1})")
        if not isinstance(priority, int) or not PRIORITY_LOWEST <= priority <= PRIORITY_HIGHEST:
            raise ValueError(f"spawn: priority {priority!r} outside 0..255")
        return self._start(fn, args, kwargs, name, ANY_CORE if core is None else core,
                           priority, daemon=False)

    def start_daemon(self, fn: Callable[..., Any], args: tuple[Any, ...], name: str,
                     core: int, priority: int) -> SpawnedThread:
        """A runtime's own host thread (a worker of its thread pool): it serves requests
        for as long as the session lives and does not keep `run` from returning."""
        return self._start(fn, args, {}, name, core, priority, daemon=True)

    def _start(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               name: str | None, core: int, priority: int, daemon: bool) -> SpawnedThread:
        index = len(self.threads)
        name = f"thread{index}" if name is None else name
        if not isinstance(name, str) or not name or any(t.name == name for t in self.threads):
            raise ValueError(f"spawn: thread name {name!r} is empty or already taken")
        thread = SpawnedThread(self, name, index, fn, args, kwargs, core=core,
                               priority=priority, daemon=daemon)
        self.threads.append(thread)
        return thread

    def thread(self) -> HostThread:
        """The host thread making the call (the main thread outside spawned threads)."""
        fiber = current_fiber()
        if fiber is not None and fiber.thread.session is self:
            return fiber.thread
        return self.main

    def run(self) -> None:
        """Simulate until every spawned thread has returned and every completion callback
        that is due has run.

        Raises `HostThreadError` if a thread's function raised (the first one not yet
        reported); the other threads ran on regardless."""
        self.check_caller()
        if self.thread() is not self.main:
            raise SimulationError(f"Session.run() waits for every host thread; call it from "
                                  f"the main program, not from thread {self.thread().name!r}")
        while True:
            pending = [t.finished for t in self.threads
                       if not t.daemon and t is not self.main and not t.finished.triggered]
            if self._callback_backlog:
                pending.append(self._callbacks_drained)
            if not pending:
                break
            self.drive(self.soc.env.all_of(pending))
        self.raise_failures()

    def join(self, thread: SpawnedThread, timeout_ps: int | None = None) -> bool:
        """Block the calling thread until `thread` has returned (True) or the timeout or a
        deadlock ended the wait (False)."""
        caller = self.thread()
        if thread is caller:
            raise SimulationError(f"thread {thread.name!r} cannot join itself")
        return caller.wait(thread.finished, timeout_ps, f"join {thread.name}") is WaitResult.DONE

    def thread_failed(self, thread: HostThread, exc: BaseException) -> None:
        self._failures.append((thread, exc))

    def raise_failures(self) -> None:
        """Raise `HostThreadError` for the first thread failure not raised yet."""
        if self._failures_raised < len(self._failures):
            thread, exc = self._failures[self._failures_raised]
            self._failures_raised += 1
            raise HostThreadError(f"host thread {thread.name!r} failed: "
                                  f"{type(exc).__name__}: {exc}") from exc

    # --- the loop ---------------------------------------------------------------------------

    def drive(self, until: simpy.Event) -> None:
        """Run the simulation until `until` has been processed (the main program blocks)."""
        env = self.soc.env
        self._driving = True
        try:
            while not until.processed:
                if not env.step_live():
                    self._end_a_deadlock()
        finally:
            self._driving = False

    def _end_a_deadlock(self) -> None:
        for thread in self.threads:
            if thread.waiting:
                self.deadlocks += 1
                thread.wake_for_deadlock()
                return
        blocked = [t.name for t in self.threads
                   if not t.daemon and t is not self.main and not t.finished.triggered]
        raise SimulationError(f"deadlock: host threads {blocked} are blocked and nothing in "
                              f"the simulation can wake them")

    def check_caller(self) -> None:
        """Raise `WrongThread` unless the calling code may use this session now."""
        if self.closed:
            raise WrongThread(f"session {self.serial} is closed")
        if threading.get_ident() != self._os_thread:
            raise WrongThread(f"session {self.serial} belongs to another OS thread; start host "
                              f"threads with Session.spawn instead")
        if self._driving:
            # Only the session's own threads run while its loop does; anything else here is
            # code called back from inside the loop.
            fiber = current_fiber()
            if fiber is None or fiber.thread.session is not self:
                raise WrongThread(f"session {self.serial}: called from inside the simulation "
                                  f"loop (an operator body or a callback), not a host thread")

    # --- completion callbacks ---------------------------------------------------------------

    def call_when_done(self, event: simpy.Event, fn: Callable[..., Any], *args: Any) -> None:
        """Call `fn(*args)` on the session's callback thread once `event` has happened, at
        that simulated time (the board runs task-done callbacks on a runtime thread; they
        run one at a time, in completion order)."""
        if self._callbacks is None:
            store = simpy.Store(self.soc.env)
            self._callbacks = store
            self._start(self._serve_callbacks, (store,), {}, "runtime.callbacks",
                        ANY_CORE, PRIORITY_HIGHEST, daemon=True)
        store = self._callbacks

        def deliver(_event: simpy.Event) -> None:
            if self._callback_backlog == 0:
                self._callbacks_drained = self.soc.env.event()
            self._callback_backlog += 1
            store.put((fn, args))

        if event.processed:
            deliver(event)
        else:
            event.callbacks.append(deliver)

    def _serve_callbacks(self, store: simpy.Store) -> None:
        thread = self.thread()
        while True:
            fn, args = thread.idle_until(store.get())
            try:
                fn(*args)
            except Exception as exc:
                exc.add_note(f"(in a completion callback {getattr(fn, '__name__', fn)!r})")
                self.thread_failed(thread, exc)
            self._callback_backlog -= 1
            if self._callback_backlog == 0:
                self._callbacks_drained.succeed()

    # --- results ----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The SoC's stats tree with the host threads' figures under `host`."""
        tree = self.soc.stats_tree()
        tree["host"] = {"deadlocks": self.deadlocks,
                        "threads": [t.stats() for t in self.threads]}
        return tree


_local = threading.local()  # per OS thread: the with-blocks entered outside host threads
_default: Session | None = None


def _stack() -> list[Session]:
    fiber = current_fiber()
    if fiber is not None:
        return fiber.sessions
    stack: list[Session] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def current() -> Session:
    """The session the runtime APIs act on; raises `WrongThread` if the caller may not."""
    stack = _stack()
    sess = stack[-1] if stack else _default_session()
    sess.check_caller()
    return sess


def caller() -> tuple[Session, HostThread]:
    """The current session and the host thread that is calling."""
    sess = current()
    return sess, sess.thread()


def _default_session() -> Session:
    global _default
    if threading.current_thread() is not threading.main_thread():
        raise WrongThread("the default session belongs to the main OS thread; start host "
                          "threads with Session.spawn, or use a `with emu.Session()` block "
                          "in this OS thread")
    if _default is None or _default.closed:
        _default = Session()
    return _default


def start(
    preset: str = "j5", config_file: str | Path | None = None, overrides: Sequence[str] = (),
    *, trace: bool = False,
) -> Session:
    """Replace the default session (used outside any `with` block) with a new board.

    A bad configuration raises `ConfigError` and leaves the old default in place."""
    global _default
    new = Session(preset, config_file, overrides, trace=trace)
    if _default is not None:
        _default.close()
    _default = new
    return new

"""A C program's OS threads as host threads of one session, in simulated time.

A program linked with libemu_rt runs on real OS threads; the session runs on a thread of
its own, the simulation thread, where every host thread's greenlet lives (greenlets run
only on the OS thread that made them). Each program thread is paired with a host thread by
a `Channel`, and the two take turns: the program thread runs its own code while its host
thread waits for it (the simulation does not move: conservative synchronisation); when it
calls the runtime it posts the call, which its host thread runs on the simulation thread,
blocking in simulated time where the Python API does (`hbDNNWaitTaskDone`, a join), while
the program thread waits for the result.

Exactly one thread runs at a time, program or simulation, and whose turn it is follows
the session's event queue: the host thread that receives a result hands the turn to its
program thread at once, inside the same simulation step, as a Python host thread would go
on running. So a C program gives the timeline of the same program written in Python with
`Session.spawn` and `Session.join`, to the picosecond, and the same timeline on every
run, whatever the operating system does with the threads.

- The main thread (the one that loaded the library) is the session's main host thread:
  its calls run at the top of the simulation thread and its blocking drives the loop.
- A thread created by a program thread (`pthread_create`, interposed in `shim.c`) is
  spawned in the session at its creator's simulated time, and runs none of its own code
  before its host thread starts.
- `pthread_join` waits in simulated time for the thread's host thread to return.
- The process's exit (`atexit`) ends the simulation where it stands and writes the report
  and trace that the environment asks for (`emu.capi.environment`).

What the simulation cannot see: a program thread that blocks outside the runtime (on a
mutex another thread holds across a runtime call, a condition variable, a pipe) keeps its
turn, and no other thread can run. After `EMU_STALL_WARN_S` seconds of host time (60 by
default) of such a turn, the library says so on stderr once.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from emu.errors import EmuError
from emu.runtime.host import SpawnedThread
from emu.runtime.session import Session

EXIT = object()  # a program thread's last post: its function returned or it called exit


class Channel:
    """The turn-taking between one program thread and its host thread."""

    def __init__(self, tid: int, program_turn: bool, stall_s: float) -> None:
        self.tid = tid
        self.cond = threading.Condition()
        self.program_turn = program_turn
        self.request: Any = None
        self.result: Any = None
        self.ended = False
        self.host: Any = None  # the HostThread, once it exists
        self._stall_s = stall_s

    # --- the program thread's side ----------------------------------------------------------

    def call(self, request: Callable[[], Any]) -> Any:
        """Post a runtime call and wait for its result (the turn comes back with it)."""
        with self.cond:
            self.request = request
            self.program_turn = False
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.program_turn)
            return self.result

    def begin(self) -> None:
        """A new thread: wait for the first turn."""
        with self.cond:
            self.cond.wait_for(lambda: self.program_turn)

    def end(self) -> None:
        """The thread is done: its host thread returns."""
        with self.cond:
            self.request = EXIT
            self.ended = True
            self.program_turn = False
            self.cond.notify_all()

    # --- the simulation's side --------------------------------------------------------------

    def hand_over(self, result: Any) -> Any:
        """Give the program thread its turn with `result`; its next post."""
        with self.cond:
            if not self.ended:
                self.result = result
                self.program_turn = True
                self.cond.notify_all()
            self._wait_post()
            request, self.request = self.request, None
            return request

    def first(self) -> Any:
        """The main thread's first post (it had the turn from the start)."""
        with self.cond:
            self._wait_post()
            request, self.request = self.request, None
            return request

    def _wait_post(self) -> None:
        if not self.cond.wait_for(lambda: not self.program_turn, self._stall_s):
            print(f"emu: program thread {self.tid} has run outside the runtime for "
                  f"{self._stall_s:g} s of host time; while it does, no other thread runs. If "
                  f"it waits for another thread (a mutex held across a runtime call, a "
                  f"condition variable, a pipe), the program cannot go on: see "
                  f"docs/c_programs.md", file=sys.stderr, flush=True)
            self.cond.wait_for(lambda: not self.program_turn)


class Bridge:
    """The session a C program runs on, its simulation thread and the threads' channels."""

    def __init__(self, make_session: Callable[[], Session], set_now: Callable[[int], None],
                 finish: Callable[[Session], None]) -> None:
        self._make_session = make_session
        self._set_now = set_now
        self._finish = finish
        self._stall_s = float(os.environ.get("EMU_STALL_WARN_S", "60") or 60)
        self._lock = threading.Lock()
        self.channels: dict[int, Channel] = {0: Channel(0, True, self._stall_s)}
        self._pthreads: dict[int, int] = {}  # pthread_t -> thread number
        self._next_tid = 1
        self.session: Session | None = None
        self.failure: str | None = None
        self._ready = threading.Event()
        self._sim = threading.Thread(target=self._simulate, name="emu-simulation", daemon=True)
        self._sim.start()
        self._ready.wait()

    @property
    def sim_ident(self) -> int | None:
        return self._sim.ident

    # --- calls from the program's threads ---------------------------------------------------

    def call(self, tid: int, request: Callable[[], Any]) -> Any:
        """Run `request` in thread `tid`'s host thread; on the simulation thread itself (a
        program callback calling the runtime) run it where it is."""
        if threading.get_ident() == self._sim.ident:
            return request()
        return self.channels[tid].call(request)

    def spawn(self, parent: int) -> int:
        """A new program thread, created by thread `parent`: its number."""
        with self._lock:
            tid = self._next_tid
            self._next_tid += 1
            channel = self.channels[tid] = Channel(tid, False, self._stall_s)

        def start() -> None:
            assert self.session is not None
            channel.host = self.session.spawn(self._serve_thread, channel)

        self.call(parent, start)
        return tid

    def created(self, tid: int, pthread: int) -> None:
        with self._lock:
            self._pthreads[pthread] = tid

    def begin(self, tid: int) -> None:
        self.channels[tid].begin()

    def end(self, tid: int) -> None:
        channel = self.channels.get(tid)
        if channel is not None:
            channel.end()

    def join(self, pthread: int, tid: int) -> None:
        """Thread `tid` joins the program thread `pthread` (if it is one): wait in simulated
        time for its host thread to return."""
        with self._lock:
            target = self._pthreads.pop(pthread, None)
        if target is None:
            return
        host = self.channels[target].host

        def wait() -> None:
            assert self.session is not None
            if isinstance(host, SpawnedThread) and host is not self.session.thread():
                self.session.join(host)

        self.call(tid, wait)

    def exit(self, tid: int) -> None:
        """The process exits on thread `tid`: the report and trace, where it stands."""
        if tid not in self.channels or self.session is None:
            return
        self.call(tid, lambda: self._finish(self.session))  # type: ignore[arg-type]

    # --- the simulation thread ----------------------------------------------------------------

    def _simulate(self) -> None:
        try:
            self.session = self._make_session()
        except EmuError as exc:
            self.failure = str(exc)
        except Exception as exc:  # the emulator itself cannot start: one line, not a trace
            self.failure = f"cannot start the simulation: {type(exc).__name__}: {exc}"
        finally:
            self._ready.set()
        if self.session is None:
            return
        self.session.__enter__()  # the current session of the simulation thread's code
        main = self.channels[0]
        main.host = self.session.main
        self._serve(main, main.first())

    def _serve_thread(self, channel: Channel) -> None:
        self._serve(channel, self._handed(channel, None))

    def _serve(self, channel: Channel, request: Any) -> None:
        while request is not EXIT:
            result = request()
            request = self._handed(channel, result)

    def _handed(self, channel: Channel, result: Any) -> Any:
        assert self.session is not None
        self._set_now(self.session.now_ps)
        return channel.hand_over(result)

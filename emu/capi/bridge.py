"""A C program's OS threads as host threads of one session, in simulated time.

A program linked with libemu_rt runs on real OS threads. The session runs on the main
thread, the one that loaded the library and makes the first call: every host thread's
greenlet lives there (greenlets run only on the OS thread that made them). The main
thread's calls run where they are made, as a Python main program's do, and its blocking
drives the simulation. Each other program thread is paired with a host thread by a
`Channel`, and the two take turns: the program thread runs its own code while its host
thread waits for it (the simulation does not move: conservative synchronisation); when it
calls the runtime it posts the call, which its host thread runs on the main thread,
blocking in simulated time where the Python API does (`hbDNNWaitTaskDone`, a join), while
the program thread waits for the result.

Exactly one thread runs at a time, program or simulation, and whose turn it is follows
the session's event queue: the host thread that receives a result hands the turn to its
program thread at once, inside the same simulation step, as a Python host thread would go
on running. So a C program gives the timeline of the same program written in Python with
`Session.spawn` and `Session.join`, to the picosecond, and the same timeline on every
run, whatever the operating system does with the threads.

- A thread created by a program thread (`pthread_create`, interposed in `shim.c`) is
  spawned in the session at its creator's simulated time, and runs none of its own code
  before its host thread starts.
- `pthread_join` waits in simulated time for the thread's host thread to return.
- The process's exit (`atexit`) ends the simulation where it stands and writes the report
  and trace that the environment asks for (`emu.capi.program`).
- While the runtime works on the main thread, `shim.c` is told (`set_runtime`), so that a
  thread a library starts from there (a BLAS pool) is not taken for the program's; a
  program callback the runtime runs there is the program's code again (`set_callback`).

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
    """The turn-taking between one program thread and its host thread: two locks used as
    signals, one for each direction (a post to the host thread, the turn back to the
    program thread), each held while there is nothing to take."""

    def __init__(self, tid: int, stall_s: float) -> None:
        self.tid = tid
        self._posted = threading.Lock()
        self._posted.acquire()
        self._turn = threading.Lock()
        self._turn.acquire()
        self.request: Any = None
        self.result: Any = None
        self.ended = False
        self.host: Any = None  # the HostThread, once it exists
        self._stall_s = stall_s

    # --- the program thread's side ----------------------------------------------------------

    def call(self, request: Callable[[], Any]) -> Any:
        """Post a runtime call and wait for its result (the turn comes back with it)."""
        self.request = request
        self._posted.release()
        self._turn.acquire()
        return self.result

    def begin(self) -> None:
        """A new thread: wait for the first turn."""
        self._turn.acquire()

    def end(self) -> None:
        """The thread is done: its host thread returns."""
        if not self.ended:
            self.ended = True
            self.request = EXIT
            self._posted.release()

    # --- the simulation's side --------------------------------------------------------------

    def hand_over(self, result: Any) -> Any:
        """Give the program thread its turn with `result`; its next post."""
        if not self.ended:
            self.result = result
            self._turn.release()
        return self.first()

    def first(self) -> Any:
        """The next post (for the main thread at the start: it had the turn already)."""
        if not self._posted.acquire(timeout=self._stall_s):
            print(f"emu: program thread {self.tid} has run outside the runtime for "
                  f"{self._stall_s:g} s of host time; while it does, no other thread runs. If "
                  f"it waits for another thread (a mutex held across a runtime call, a "
                  f"condition variable, a pipe), the program cannot go on: see "
                  f"docs/c_programs.md", file=sys.stderr, flush=True)
            self._posted.acquire()
        request, self.request = self.request, None
        return request


class Bridge:
    """The session a C program runs on and its threads' channels.

    The simulation runs on the program's main OS thread, the one that made the first call
    (greenlets live on the OS thread that made them): the main thread's calls run where
    they are made, as a Python main program's do, and only the other threads' calls cross
    to it through their channels."""

    def __init__(self, make_session: Callable[[], Session], set_now: Callable[[int], None],
                 finish: Callable[[Session], None], set_runtime: Callable[[int], None],
                 set_callback: Callable[[int], None]) -> None:
        self._set_now = set_now
        self._finish = finish
        self._set_runtime, self._set_callback = set_runtime, set_callback
        self._in_runtime = False  # a call of the main thread's is in progress
        self._stall_s = float(os.environ.get("EMU_STALL_WARN_S", "60") or 60)
        self._lock = threading.Lock()
        self.channels: dict[int, Channel] = {}
        self._pthreads: dict[int, int] = {}  # pthread_t -> thread number
        self._next_tid = 1
        self.session: Session | None = None
        self.failure: str | None = None
        self.sim_ident = threading.get_ident()
        try:
            self.session = make_session()
        except EmuError as exc:
            self.failure = str(exc)
        except Exception as exc:  # the emulator itself cannot start: one line, not a trace
            self.failure = f"cannot start the simulation: {type(exc).__name__}: {exc}"
        else:
            self.session.__enter__()  # the current session of this OS thread's code
            self._set_now(self.session.now_ps)

    # --- calls from the program's threads ---------------------------------------------------

    def call(self, tid: int, request: Callable[[], Any]) -> Any:
        """Run `request` in thread `tid`'s host thread. On the simulation's own OS thread
        (the main thread, or a program callback the simulation runs) it runs where it is,
        and the program goes on at the simulated time it ends at."""
        if threading.get_ident() != self.sim_ident:
            return self.channels[tid].call(request)
        assert self.session is not None
        if self._in_runtime:  # from a program callback the runtime runs: back to it after
            self._set_callback(0)
            try:
                return request()
            finally:
                self._set_callback(1)
                self._set_now(self.session.now_ps)
        self._in_runtime = True
        self._set_runtime(1)
        try:
            return request()
        finally:
            self._in_runtime = False
            self._set_runtime(0)
            self._set_now(self.session.now_ps)

    def spawn(self, parent: int) -> int:
        """A new program thread, created by thread `parent`: its number."""
        with self._lock:
            tid = self._next_tid
            self._next_tid += 1
            channel = self.channels[tid] = Channel(tid, self._stall_s)

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
        if self.session is None or (tid != 0 and tid not in self.channels):
            return
        self.call(tid, lambda: self._finish(self.session))  # type: ignore[arg-type]

    # --- the host threads of the program's other threads -----------------------------------

    def _serve_thread(self, channel: Channel) -> None:
        request = self._handed(channel, None)
        while request is not EXIT:
            request = self._handed(channel, request())

    def _handed(self, channel: Channel, result: Any) -> Any:
        assert self.session is not None
        self._set_now(self.session.now_ps)
        return channel.hand_over(result)

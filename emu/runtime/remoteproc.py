"""DSP core power state, as the board's remoteproc sysfs controls it.

On the board, `echo stop > /sys/class/remoteproc/remoteprocN/state` stops a DSP core and
`echo start` boots it again. Here the same is a function call on the current session. A
stopped core takes no task from the RPC queue (the operator it is running finishes); an RPC
aimed at it fails at once with HB_DSP_CORE_OFFLINE; tasks already queued for it wait until
it starts, and a wait for them that nothing else can end returns HB_DSP_DEADLOCK.
"""

from __future__ import annotations

from typing import Any

from emu.runtime import session, status

RPROC_SUCCESS = status.SUCCESS
RPROC_INVALID_ARGUMENT = status.define(-6300001, "remoteproc: no such DSP core or state")
RPROC_WRONG_THREAD = status.define_wrong_thread(-6300002, "remoteproc")


def _core(core: Any, sess: session.Session) -> int | None:
    return status.as_int(core, 0, sess.soc.vdsp.cores - 1)


@status.c_function(RPROC_WRONG_THREAD)
def rproc_set_state(core: int, state: str) -> int:
    """`state` is "start" or "stop", as written to the sysfs file."""
    sess = session.current()
    index = _core(core, sess)
    if index is None or not isinstance(state, str) or state not in ("start", "stop"):
        return RPROC_INVALID_ARGUMENT
    sess.soc.vdsp.set_online(index, state == "start")
    return RPROC_SUCCESS


@status.c_function("invalid")
def rproc_state(core: int) -> str:
    """"running" or "offline", as read from the sysfs file; "invalid" for no such core."""
    sess = session.current()
    index = _core(core, sess)
    if index is None:
        return "invalid"
    return "running" if sess.soc.vdsp.hw[index].online else "offline"

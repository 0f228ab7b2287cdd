"""DSP core power state, as the board's remoteproc sysfs controls it.

On the board, `echo stop > /sys/class/remoteproc/remoteprocN/state` stops a DSP core and
`echo start` boots it again. Here the same is a function call on the current session. A
stopped core takes no task from the RPC queue; an RPC aimed at it fails at once with
HB_DSP_CORE_OFFLINE; tasks already queued for it wait until it starts.
"""

from __future__ import annotations

from emu.runtime import session, status

RPROC_SUCCESS = status.SUCCESS
RPROC_INVALID_ARGUMENT = status.define(-6300001, "remoteproc: no such DSP core or state")


def rproc_set_state(core: int, state: str) -> int:
    """`state` is "start" or "stop", as written to the sysfs file."""
    cores = session.current().soc.vdsp
    if not isinstance(core, int) or not 0 <= core < cores.cores or state not in ("start", "stop"):
        return RPROC_INVALID_ARGUMENT
    cores.set_online(core, state == "start")
    return RPROC_SUCCESS


def rproc_state(core: int) -> str:
    """"running" or "offline", as read from the sysfs file; "invalid" for no such core."""
    cores = session.current().soc.vdsp
    if not isinstance(core, int) or not 0 <= core < cores.cores:
        return "invalid"
    return "running" if cores.hw[core].online else "offline"

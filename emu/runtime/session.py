"""The emulated board behind the C-named runtime APIs.

Code ported from C calls `hbSysAllocMem`, `hbDSPRpc`, ... without saying which board it
runs on; those calls act on the current session: one built SoC and the host thread making
the calls. A session is created on first use from the `j5` preset, or explicitly with
`start()` to choose the hardware (preset, config file, overrides) and whether to trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from emu.runtime.host import Host
from emu.soc.builder import Soc
from emu.soc.config import load_config


class Session:
    """One emulated board and the host thread that drives it."""

    def __init__(self, soc: Soc) -> None:
        self.soc = soc
        self.host = Host(soc)
        self.rpcs_issued = 0


_current: Session | None = None


def start(
    preset: str = "j5", config_file: str | Path | None = None, overrides: Sequence[str] = (),
    *, trace: bool = False,
) -> Session:
    """Begin a new session on freshly built hardware; the previous one is dropped."""
    global _current
    _current = Session(Soc(load_config(preset, config_file, overrides), trace=trace).build())
    return _current


def current() -> Session:
    """The session the runtime APIs act on, started on the `j5` preset if there is none."""
    return _current if _current is not None else start()

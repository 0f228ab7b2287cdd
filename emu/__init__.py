"""emu: a cycle-approximate emulator of a J5-class automotive AI SoC.

Importing the package is cheap: sub-packages are imported where they are used, so that
`emu --help` does not pay for numpy, numba or simpy. The names below are the host-program
API (`spec/contracts.md`, "Host programs"):

    emu.Session(preset="j5", config=None, overrides=(), trace=False)   a board; see
        emu.runtime.session
    emu.now_ms()        the calling host thread's simulated time, in milliseconds
    emu.sleep_ms(ms)    let simulated time pass in the calling thread without using a core
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from emu.runtime.session import Session

__all__ = ["Session", "__version__", "now_ms", "sleep_ms"]


def __getattr__(name: str) -> Any:
    if name == "Session":
        from emu.runtime.session import Session

        return Session
    raise AttributeError(f"module 'emu' has no attribute {name!r}")


def now_ms() -> float:
    """The calling host thread's simulated time in ms (in the current session)."""
    from emu.runtime import session
    from emu.soc.clock import PS_PER_MS

    return session.caller()[1].now_ps / PS_PER_MS


def sleep_ms(ms: float) -> None:
    """Let `ms` simulated milliseconds pass in the calling host thread; no core is used."""
    import math

    from emu.runtime import session
    from emu.soc.clock import PS_PER_MS

    if isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(ms) \
            or ms < 0:
        raise ValueError(f"sleep_ms: expected a finite number of ms >= 0, got {ms!r}")
    session.caller()[1].sleep(round(ms * PS_PER_MS))

"""The one place that sets the numba options every kernel in the emulator is compiled with.

`cache=True` keeps compiled kernels on disk, so only the first run after a change pays for
compilation; `nogil=True` lets kernels run while other Python threads (the SimPy driver, a
progress reporter) go on. Kernels are compiled lazily, on their first call, never at import.
Setting `NUMBA_DISABLE_JIT=1` turns every kernel back into plain Python, for debugging and
for coverage.
"""

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

_Kernel = TypeVar("_Kernel", bound=Callable[..., Any])


def njit(kernel: _Kernel) -> _Kernel:
    """Decorate a private kernel: compiled with the shared options on its first call.

    Typed as returning the function itself, so that callers are checked against the
    kernel's own signature rather than numba's untyped dispatcher.
    """
    return cast(_Kernel, numba.njit(cache=True, nogil=True)(kernel))


def njit_inline(helper: _Kernel) -> _Kernel:
    """Decorate a small helper that numba copies into every compiled caller.

    A call between compiled functions that LLVM does not inline costs reference-count updates
    (atomic, through numba's runtime) for every array that crosses it, tens of nanoseconds
    per call; a helper copied in at numba's level usually avoids them. Measure before using
    it on anything large: every caller then compiles its own copy.
    """
    return cast(_Kernel, numba.njit(cache=True, nogil=True, inline="always")(helper))


def njit_ieee(kernel: _Kernel) -> _Kernel:
    """`njit` for code whose scalar float division must follow IEEE 754, as vector lanes do:
    x / 0 gives +-inf and 0 / 0 NaN, where Python semantics would raise ZeroDivisionError."""
    return cast(_Kernel, numba.njit(cache=True, nogil=True, error_model="numpy")(kernel))

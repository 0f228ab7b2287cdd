"""Status codes of the emulated runtime APIs, their descriptions, and the guard every
C-named function wears.

Functions return 0 on success and a negative code otherwise, like the board's libraries.
The numeric values are the emulator's own (the board's headers define theirs); code that is
ported should compare against the names, never against literal numbers.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

SUCCESS = 0

_DESCRIPTIONS: dict[int, str] = {SUCCESS: "success"}

F = TypeVar("F", bound=Callable[..., Any])


def c_names(namespace: dict[str, Any], *prefixes: str) -> list[str]:
    """A C-API module's `__all__`: the names in `namespace` under its header's `prefixes`
    (functions, structs, constants, macros), so that `from <module> import *` gives what
    `#include` would and nothing else: no module it imports, no helper, none of the
    emulator's own extensions (import those by name)."""
    return sorted(n for n, v in namespace.items()
                  if n.startswith(prefixes) and not isinstance(v, types.ModuleType))


def define(code: int, description: str) -> int:
    """Register a status code once; returns it, so modules can write `X = define(-1, "...")`."""
    if code >= 0 or code in _DESCRIPTIONS:
        raise ValueError(f"status code {code} is not negative or is already defined")
    _DESCRIPTIONS[code] = description
    return code


def define_wrong_thread(code: int, api: str) -> int:
    """The code an API returns for a call its session cannot serve (see `c_function`)."""
    return define(code, f"{api}: called from outside the session's host threads (another OS "
                        f"thread, a callback from inside the simulation, or a closed session)")


def describe(code: Any) -> str:
    value = as_int(code)
    if value is None:
        return f"not a status code: {code!r}"
    return _DESCRIPTIONS.get(value, f"unknown status code {value}")


def c_function(refused: Any) -> Callable[[F], F]:
    """Guard a C-named function: when the current session cannot serve the caller (another
    OS thread, a callback from inside the simulation loop, a closed session) the function
    returns `refused` (its error code, with None for each out-parameter) instead of raising."""
    from emu.runtime.session import WrongThread

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except WrongThread:
                return refused

        return call  # type: ignore[return-value]

    return wrap


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def as_int(value: Any, low: int | None = None, high: int | None = None) -> int | None:
    """`value` as a Python int if it is an integer (Python or NumPy, not bool) within
    [low, high]; None otherwise. C integer parameters are checked with this."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        return None
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        return None
    return number


def timeout_ps(timeout_ms: Any) -> int | bool | None:
    """A wait's timeout in simulated ms as ps: None waits for ever (<= 0, as the board's
    APIs take it), False is not a valid timeout (not a real number, NaN, infinite, or
    outside the C int32 range). Fractions of a millisecond are allowed: the emulator's
    clock is finer than the board's."""
    if isinstance(timeout_ms, bool | np.bool_) or not isinstance(
            timeout_ms, int | float | np.integer | np.floating):
        return False
    # Integers are compared as integers: float() of a huge one overflows.
    if isinstance(timeout_ms, int | np.integer) and not INT32_MIN <= timeout_ms <= INT32_MAX:
        return False
    value = float(timeout_ms)
    if not math.isfinite(value) or not INT32_MIN <= value <= INT32_MAX:
        return False
    if value <= 0:
        return None
    return max(1, round(value * 10**9))

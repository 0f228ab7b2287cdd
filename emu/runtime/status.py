"""Status codes of the emulated runtime APIs, and their descriptions.

Functions return 0 on success and a negative code otherwise, like the board's libraries.
The numeric values are the emulator's own (the board's headers define theirs); code that is
ported should compare against the names, never against literal numbers.
"""

from __future__ import annotations

SUCCESS = 0

_DESCRIPTIONS: dict[int, str] = {SUCCESS: "success"}


def define(code: int, description: str) -> int:
    """Register a status code once; returns it, so modules can write `X = define(-1, "...")`."""
    if code >= 0 or code in _DESCRIPTIONS:
        raise ValueError(f"status code {code} is not negative or is already defined")
    _DESCRIPTIONS[code] = description
    return code


def describe(code: int) -> str:
    return _DESCRIPTIONS.get(code, f"unknown status code {code}")

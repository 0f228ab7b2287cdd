"""The DSP operator library: operators an RPC command id selects, and their registry.

Command ids follow the J5 DSP runtime's ranges: 0x000-0x3FF framework (0 = PING),
0x400-0x7FF neural-network operators (0x400 = softmax), 0x800-0xFFF computer-vision
operators, 0x1000-0xFFFF custom operators of the user. Built-in operators register on
import of their module; users register theirs in the custom range with `register`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from emu.registry import Registry
from emu.soc.sched import CoreSlot, StageBody

if TYPE_CHECKING:
    from emu.mem.pool import PoolBuffer
    from emu.vdsp.cores import VdspCore

CMD_RANGES: dict[str, tuple[int, int]] = {
    "framework": (0x000, 0x3FF),
    "nn": (0x400, 0x7FF),
    "cv": (0x800, 0xFFF),
    "custom": (0x1000, 0xFFFF),
}

OperatorBody = Callable[
    ["VdspCore", CoreSlot, "PoolBuffer", "PoolBuffer"],
    Generator[simpy.Event, Any, StageBody | None],
]


@dataclass(frozen=True)
class Operator:
    """An RPC operator: its command id, and the body that runs it on a core.

    `run(core, slot, input, output)` is a SimPy generator; it may raise `DspError` (bad
    arguments, a tile that does not fit, an emulated fault), which fails the RPC task.
    """

    cmd: int
    name: str
    description: str
    run: OperatorBody


_REGISTRY: Registry[int, Operator] = Registry("operator command id", lambda op: op.cmd)


def cmd_range(cmd: int) -> str | None:
    for name, (low, high) in CMD_RANGES.items():
        if low <= cmd <= high:
            return name
    return None


def register(op: Operator, *, builtin: bool = False) -> Operator:
    """Make `op` callable by RPC under `op.cmd`; user operators take custom-range ids."""
    kind = cmd_range(op.cmd)
    if kind is None:
        raise ValueError(f"operator {op.name}: command id {op.cmd:#x} is outside 0x0-0xFFFF")
    if not builtin and kind != "custom":
        raise ValueError(f"operator {op.name}: command id {op.cmd:#x} is in the {kind} range; "
                         f"user operators take 0x1000-0xFFFF")
    taken = _REGISTRY.get(op.cmd)
    if taken is not None:
        raise ValueError(f"operator {op.name}: command id {op.cmd:#x} is taken by "
                         f"{taken.name}")
    return _REGISTRY.add(op)


def unregister(cmd: int) -> None:
    """Remove a user operator (built-in ones stay)."""
    if cmd_range(cmd) == "custom":
        _REGISTRY.remove(cmd)


def lookup(cmd: int) -> Operator | None:
    _load_builtins()
    return _REGISTRY.get(cmd)


def operators() -> list[Operator]:
    _load_builtins()
    return sorted(_REGISTRY.values(), key=lambda op: op.cmd)


def _load_builtins() -> None:
    # Importing the modules registers their operators; done on first lookup, not on import
    # of this package, so that listing commands stays cheap.
    from emu.vdsp.ops import (  # noqa: F401
        cv_bilateral,
        cv_color,
        cv_features,
        cv_filters,
        cv_geometry,
        cv_pixel,
        cv_rank,
        cv_stats,
        cv_warp,
        framework,
        nn,
        pointcloud,
    )

"""Running one sweep point, naming it by its content, and the executor protocol.

`run_point(job)` is the whole of a point's work and is pure: its input is plain picklable
data (the command line, the preset, the text of the config file, the `--set` overrides) and
its result a plain dictionary, so any executor can ship it to another process or machine.
It runs the command in-process through the command layer (`emu.commands`: parse, resolve,
run) and keeps its report's JSON document without the wall-clock part; the command starts a
new simulation session as it always does, so points never share simulated state.

An executor is any object with

    map_unordered(fn, items) -> iterator of (index, fn(items[index]))

yielding each result as it is ready, in any order (`emu.sweep.local.LocalExecutor`, worker
processes on this machine; `InlineExecutor`, the calling process; the Dask executor of
`emu.sweep.dask_executor`). A result that the executor itself could not produce (a worker
died) is `{"status": "error", "error": ..., "transient": True}`: it is reported but not
stored, so running the sweep again retries it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from emu import __version__
from emu.errors import EmuError, UsageError, UserError


class Executor(Protocol):
    """Runs `fn` on every item, yielding (index, result) as results come in."""

    def map_unordered(self, fn: Callable[[Any], Any],
                      items: Sequence[Any]) -> Iterator[tuple[int, Any]]: ...


class InlineExecutor:
    """Every point in the calling process, one after the other (no worker start-up: for
    small sweeps, tests and debugging)."""

    def map_unordered(self, fn: Callable[[Any], Any],
                      items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        for index, item in enumerate(items):
            yield index, fn(item)

    def close(self) -> None:
        pass


def point_key(config: dict[str, Any], command: str, args: Sequence[str],
              seed: int | None) -> str:
    """A point's identity: sha256 of the canonical JSON of its resolved configuration
    (`ResolvedConfig.to_dict()`), command, arguments, seed and emu's version. Two points
    with the same key compute the same report, whichever sweep they belong to."""
    doc = {"config": config, "command": command, "args": list(args), "seed": seed,
           "emu_version": __version__}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_point(job: dict[str, Any]) -> dict[str, Any]:
    """Run one point: {"status": "ok", "report", "seconds"} or {"status": "error",
    "error": one line, "seconds"}; `seconds` is the command's own wall time. The error
    line is the one `emu` would print: "emu CMD: ..." for a usage error, "emu: error: ..."
    for another user error, "emu: failed: ..." for a failure of the emulator."""
    from emu import commands
    from emu.commands.report import without_wall_clock

    command = commands.find(job["argv"])
    if command is None:
        return {"status": "error", "error": f"emu: error: no command {job['argv'][:2]}",
                "seconds": 0.0}
    words = [*job["argv"][len(command.words):], "--preset", job["preset"]]
    for item in job["overrides"]:
        words += ["--set", item]
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if job.get("config_text") is not None:
            handle = stack.enter_context(tempfile.NamedTemporaryFile(
                "w", suffix=".toml", prefix="emu-sweep-", encoding="utf-8"))
            handle.write(job["config_text"])
            handle.flush()
            words += ["--config", handle.name]
        try:
            args = command.parse(words)
            report = command.run(command.resolve(args), args)
        except KeyboardInterrupt:
            return {"status": "error", "error": "interrupted",
                    "seconds": time.perf_counter() - start, "transient": True}
        except Exception as exc:  # a failure of the command is the point's, not the sweep's
            return {"status": "error", "error": _one_line(error_line(exc)),
                    "seconds": time.perf_counter() - start}
    return {"status": "ok", "report": without_wall_clock(report.document()),
            "seconds": time.perf_counter() - start}


def error_line(exc: Exception) -> str:
    """An exception as the line `emu` prints for it."""
    if isinstance(exc, UsageError):
        return str(exc)
    if isinstance(exc, UserError):
        return f"emu: error: {exc}"
    if isinstance(exc, EmuError):
        return f"emu: failed: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0] if lines else text

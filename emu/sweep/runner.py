"""Running one sweep point, naming it by its content, and the executor protocol.

`run_point(job)` is the whole of a point's work and is pure: its input is plain picklable
data (the command line, the preset, the text of the config file, the `--set` overrides) and
its result a plain dictionary, so any executor can ship it to another process or machine.
It runs the command in-process through `emu.cli.main.main` with `--json`, capturing
stdout and stderr; the command starts a new simulation session as it always does, so
points never share simulated state.

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
import io
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from emu import __version__

EXIT_INTERRUPTED = 130  # emu.cli.main's exit status after Ctrl-C


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
    "error": one line, "seconds"}; `seconds` is the command's own wall time."""
    from emu.cli.main import main

    argv = [*job["argv"], "--json", "--preset", job["preset"]]
    for item in job["overrides"]:
        argv += ["--set", item]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        if job.get("config_text") is not None:
            handle = stack.enter_context(tempfile.NamedTemporaryFile(
                "w", suffix=".toml", prefix="emu-sweep-", encoding="utf-8"))
            handle.write(job["config_text"])
            handle.flush()
            argv += ["--config", handle.name]
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
        except Exception as exc:  # a failure of the command is the point's, not the sweep's
            return {"status": "error", "error": _one_line(f"{type(exc).__name__}: {exc}"),
                    "seconds": time.perf_counter() - start}
        seconds = time.perf_counter() - start
    if code == EXIT_INTERRUPTED:
        return {"status": "error", "error": "interrupted", "seconds": seconds,
                "transient": True}
    if code != 0:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return {"status": "error", "error": lines[-1] if lines else f"exit status {code}",
                "seconds": seconds}
    try:
        report = json.loads(out.getvalue())
    except ValueError as exc:
        return {"status": "error", "error": f"the report is not JSON ({exc})",
                "seconds": seconds}
    return {"status": "ok", "report": report, "seconds": seconds}


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0] if lines else text

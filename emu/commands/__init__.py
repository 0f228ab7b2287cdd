"""The user commands as a library: each declared once, run the same way from the command
line, a sweep, `emu compare` or Python.

    import emu.commands
    command = emu.commands.get("pointcloud")
    args = command.parse(["--model", "pointpillars", "--synthetic", "1", "--points", "3000"])
    report = command.run(command.resolve(args), args)
    report.document()      # the --json document; report["summary"] a result
    print(command.text(report))

or in one call, `emu.commands.run("pointcloud", [...words...])`.

A `Command` is its name (the words after `emu`: "pointcloud", "dsp cv", "scenario cameras"),
its options as data (`emu.options.Option`; the hardware options `--preset/--config/--set`,
`--json`, `--trace` and `--quiet` are added from its flags), `run(resolved, args, progress)
-> Report`, `text(report) -> str`, the dotted paths its report has (what a sweep may
collect as metrics) and the options naming files it writes. Each command module registers
its commands with `register` when it is imported; `commands()` imports them all. Nothing
heavy is imported until a command runs, so `emu --help` stays instant.

Commands that differ say so as data: `hardware=False` (it simulates nothing: no hardware
options, no provenance or configuration in its report: `list`, `ops`, `zoo`, `sweep show`),
`embed_config=False` (its results are the configuration: `config show`), `configure` (the
one hardware a command without the hardware options describes: `sweep run`'s spec's base
hardware) and `parse_words` (a command line the option builder cannot express: `compare`'s
`-- COMMAND ARGS`). A report whose run failed in part is `Report.failed` (`Outcome.failed`).

`run` does the whole of the work, output files included, and never prints: what a run has
to say beside its results is in `Report.messages`. The envelope of the report (what
produced it, the resolved configuration, the wall-clock part) is made by `Command.run`
alone (`emu.commands.report`).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from emu.commands.report import Report, plain
from emu.options import Option
from emu.registry import Registry

if TYPE_CHECKING:
    from emu.soc.config import ResolvedConfig

__all__ = ["Command", "Outcome", "Report", "commands", "get", "register", "run", "trace_path",
           "write_trace"]

Progress = Callable[[int, int, str], None]

# The modules that register commands, imported on first use of the registry. The sweep's
# commands run other commands through this layer, so they live above it, in the sweep
# package, and are registered by name like the rest.
_MODULES = ("emu.commands.pointcloud", "emu.commands.calibrate", "emu.commands.dsp",
            "emu.commands.dsp_cv", "emu.commands.nn", "emu.commands.dv", "emu.commands.zoo",
            "emu.commands.info", "emu.commands.capi", "emu.sweep.commands")


@dataclass(frozen=True)
class Outcome:
    """What a command's own work returns; `Command.run` wraps it in the report envelope."""

    results: dict[str, Any]
    seed: int | None = None
    wall_clock: dict[str, Any] = field(default_factory=dict)
    messages: tuple[str, ...] = ()
    written: tuple[str, ...] = ()  # the files and folders the run wrote
    failed: bool = False  # the run finished but part of it failed (a sweep's points): exit 1


@dataclass(frozen=True)
class Command:
    """One user command (see the module's docstring)."""

    name: str
    help: str
    description: str
    options: tuple[Option, ...]
    work: Callable[[ResolvedConfig | None, argparse.Namespace, Progress | None], Outcome]
    text: Callable[[Report], str]
    reports: tuple[str, ...] = ()   # dotted paths of its results; `*` any one name, `**` below
    hardware: bool = True           # simulates: --preset/--config/--set, provenance, config
    trace: bool = False             # takes --trace FILE
    progress: bool = False          # long enough for a progress bar (and --quiet)
    outputs: tuple[str, ...] = ()   # its flags naming files or folders it writes
    wall_clock_at_top: tuple[str, ...] = ()
    # Options that depend on what was given (`dsp cv OP`: the operator's own; called with
    # None before anything is parsed), or None.
    more_options: Callable[[argparse.Namespace | None], tuple[Option, ...]] | None = None
    # Checks across options, made as the arguments are parsed (UsageError or InputError).
    check: Callable[[argparse.Namespace], None] | None = None
    label: Callable[[argparse.Namespace], str] | None = None  # the progress bar's label
    sweepable: bool = False         # a sweep or `emu compare` may run it
    usage: str | None = None
    epilog: str | None = None
    # The report's envelope repeats the resolved configuration (`config show`: its results
    # are the configuration, so the envelope leaves it out rather than hold it twice).
    embed_config: bool = True
    # The configuration a command without the hardware options describes its report with
    # (`sweep run`: its spec's base hardware), from its parsed arguments; or None.
    configure: Callable[[argparse.Namespace], ResolvedConfig] | None = None
    # A command line the option builder cannot express (`compare`: options, `--`, then
    # another command's words) parsed and checked by the command itself; or None.
    parse_words: Callable[[list[str]], argparse.Namespace] | None = None

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(self.name.split())

    @property
    def reserved(self) -> tuple[str, ...]:
        """The flags a sweep or `emu compare` may not pass it: they set the hardware and the
        output form themselves, and a file written by every run would hold only the last
        run's."""
        return (*RESERVED_FLAGS, *self.outputs)

    def all_options(self, args: argparse.Namespace | None = None) -> tuple[Option, ...]:
        """Its options with the common ones its flags ask for (and, given what was parsed
        first, the ones that depend on it)."""
        from emu.commands import parse

        extra = () if self.more_options is None else self.more_options(args)
        return (*self.options, *extra, *parse.common_options(self))

    def parse(self, words: Sequence[str]) -> argparse.Namespace:
        """Its arguments parsed and checked for form; UsageError (one line) if they are
        not (emu.commands.parse)."""
        if self.parse_words is not None:
            return self.parse_words(list(words))
        from emu.commands import parse

        return parse.parse_args(self, list(words))

    def resolve(self, args: argparse.Namespace) -> ResolvedConfig | None:
        """The configuration its arguments select (None for a command that does not
        simulate); ConfigError naming the key for a bad one."""
        if self.configure is not None:
            return self.configure(args)
        if not self.hardware:
            return None
        from emu.soc.config import load_config

        return load_config(args.preset, args.config, args.overrides)

    def run(self, resolved: ResolvedConfig | None, args: argparse.Namespace,
            progress: Progress | None = None) -> Report:
        """Do the command's work and return its report, in the one envelope."""
        outcome = self.work(resolved, args, progress)
        provenance = config = None
        if resolved is not None:
            from emu.report.document import provenance as make_provenance

            provenance = make_provenance(resolved, outcome.seed)
            config = resolved.to_dict() if self.embed_config else None
        return Report(command=self.name, arguments=self.arguments(args),
                      preset=None if resolved is None else resolved.preset,
                      provenance=provenance, config=config, results=outcome.results,
                      wall_clock=dict(outcome.wall_clock),
                      wall_clock_at_top=self.wall_clock_at_top,
                      messages=outcome.messages, written=outcome.written,
                      failed=outcome.failed)

    def arguments(self, args: argparse.Namespace) -> dict[str, Any]:
        """The command's own options as given (the hardware and output ones are in the
        provenance or make no difference to the results), JSON-ready."""
        names = [o.name for o in self.all_options(args)
                 if o.name not in _NOT_ARGUMENTS]
        return {name: plain(getattr(args, name)) for name in names if hasattr(args, name)}


RESERVED_FLAGS = ("--preset", "--config", "--set", "--json", "--quiet", "--trace", "-h",
                  "--help")
_NOT_ARGUMENTS = {"preset", "config", "overrides", "json", "trace", "quiet"}

_REGISTRY: Registry[str, Command] = Registry("command", lambda command: command.name)


def trace_path(args: argparse.Namespace) -> Any:
    """The `--trace` file asked for, checked before any work (`emu.report.outputs`), or
    None."""
    if getattr(args, "trace", None) is None:
        return None
    from emu.report import outputs

    return outputs.check_file("--trace", args.trace)


def write_trace(path: Any, recordings: Sequence[tuple[str, Any]],
                about: dict[str, Any]) -> None:
    """Write the Chrome trace of one or more sessions' recordings ((name, recording) pairs;
    one without a name is the only one) to `path`, whole or not at all."""
    from emu.report.document import dumps, write_atomic
    from emu.report.trace import chrome_trace_many

    write_atomic(path, dumps(chrome_trace_many(list(recordings), about)))


def register(command: Command) -> Command:
    """Add a command to the registry (each name once)."""
    return _REGISTRY.add(command)


def commands() -> list[Command]:
    """Every registered command, in registration order, then the scenarios (made from
    their own registry each time, `emu.commands.scenario`)."""
    for module in _MODULES:
        importlib.import_module(module)
    from emu.commands import scenario

    return [*_REGISTRY.values(), *scenario.commands()]


def get(name: str) -> Command:
    """The command called `name` ("pointcloud", "dsp cv", "scenario cameras"); KeyError
    listing the names if there is none."""
    known = {c.name: c for c in commands()}
    if name not in known:
        raise KeyError(f"no command {name!r} (one of: {', '.join(known)})")
    return known[name]


def find(words: Sequence[str]) -> Command | None:
    """The command the first of `words` name (the longest name that fits), or None."""
    best = None
    for command in commands():
        if tuple(words[:len(command.words)]) == command.words and (
                best is None or len(command.words) > len(best.words)):
            best = command
    return best


def run(name: str, words: Sequence[str], progress: Progress | None = None) -> Report:
    """Parse `words` as command `name`'s arguments, resolve its hardware and run it."""
    command = get(name)
    args = command.parse(words)
    return command.run(command.resolve(args), args, progress)

"""`emu`: the command-line entry point.

`main(argv) -> int` does the work and never exits, so tests can call it. The commands are
`emu.commands`': this module builds their command lines from the registry, runs them and
prints their reports (`--json`: the report's one envelope; otherwise the command's text,
and the report's messages on stderr), and maps errors and a report that failed in part (a
sweep's points: `Report.failed`) to exit codes. It parses and prints only. Heavy modules
(numpy, numba, simpy and the models) are imported only when a command runs, which keeps
`emu --help` instant.

Exit status: 0 success; 2 a user error (bad usage, option value, input file, output path or
configuration; one line on stderr naming it), found before any simulation starts where it
can be; 1 a run that failed in part (a sweep's failed points, listed on stderr) and anything
else; 130 (128 + SIGINT) after Ctrl-C, with the one line
`emu: interrupted`; 141 (128 + SIGPIPE, what a shell reports for a program a closed pipe
stopped) when stdout's reader went away (`emu list | head -1`), with nothing printed. An
interrupted or failed run leaves no partial `--trace` file or `--dump` folder
(`emu.report.outputs`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from emu import __version__, commands
from emu.commands import parse
from emu.errors import EmuError, UsageError, UserError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141
__all__ = ["build_parser", "entry", "main"]

# The words that group commands (`emu zoo export`): the group's help, the metavar of its
# actions and its description.
GROUPS = {
    "config": ("show the resolved hardware configuration", "ACTION", None),
    "scenario": ("run a system scenario on the emulated SoC", "NAME", None),
    "dv": ("DMP's DV700 CNN accelerator through the dmp_dv driver", "ACTION",
           "Networks on the DV700 (the dmp_dv user driver, emu/runtime/dmp_dv.py)."),
    "zoo": ("neural networks built on the spot as ONNX files (no download)", "ACTION",
            "A zoo of networks written with onnx.helper (opset 13, NCHW, float32) with seeded "
            "weights: ResNet, MobileNet, EfficientNet-lite, YOLOv8, UNet, "
            "CenterPoint-PointPillars and the topologies of the onnx package's test data."),
    "sweep": ("what-if sweeps over hardware and command options, with a durable store",
              "ACTION", "What-if sweeps: one simulating command over a grid or a sample of "
              "hardware configurations and command options, each point's metrics collected, "
              "every finished point kept in a SQLite store."),
}


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, for `emu --help` (and the groups' `--help`). A command is
    parsed by `emu.commands.parse` (or its own `Command.parse_words`) once named."""
    parser = parse.Parser(prog="emu", description=(
        "Cycle-approximate emulator of a J5-class automotive AI SoC (2 BPU, 2 vDSP, 8 A55, "
        "DDR, CMA/ION) and its runtime APIs."))
    parser.add_argument("--version", action="version", version=f"emu {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=parse.Parser)
    groups: dict[str, Any] = {}
    named = {c.words[0] for c in commands.commands() if len(c.words) == 1}
    for command in commands.commands():
        if len(command.words) > 1 and command.words[0] in named:
            continue  # `dsp cv`: its own options, parsed once named (`emu dsp cv --help`)
        where = top
        if len(command.words) > 1:
            word = command.words[0]
            if word not in groups:
                help_text, metavar, description = GROUPS[word]
                sub = top.add_parser(word, help=help_text, description=description)
                groups[word] = sub.add_subparsers(dest=f"{word}_command", metavar=metavar,
                                                  required=True, parser_class=parse.Parser)
            where = groups[word]
        sub = where.add_parser(command.words[-1], help=command.help,
                               description=command.description, usage=command.usage)
        parse.add_options(sub, command.all_options())
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        # What is still buffered (--help's text): a reader that went away, or a full disk,
        # shows here, not as a message at exit.
        code = _guarded(lambda: _flushed(code))
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        print("emu: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def _interrupted(exc: BaseException) -> bool:
    """Whether `exc` is Ctrl-C's KeyboardInterrupt or was caused by it: one that arrives
    inside compiled code or a simulation step can come out wrapped (a numba kernel raises
    SystemError, SimPy raises a copy of a failed process's exception)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        if isinstance(item, KeyboardInterrupt):
            return True
        seen.add(id(item))
        todo += [item.__cause__, item.__context__]
    return False


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what the closed pipe
    did not take fails silently instead of printing "Exception ignored"."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = commands.find(words)
    if command is not None:
        return _guarded(lambda: _run(command, words[len(command.words):]))
    return _guarded(lambda: _no_command(words))


def _no_command(words: list[str]) -> int:
    """`emu` without a command or a group without its action (a usage error), or the help
    and version of emu and its groups (exit 0): argparse says which."""
    build_parser().parse_args(words)
    raise UsageError(f"emu: no command in {' '.join(words)!r}")  # every command is found first


def _guarded(run: Callable[[], int]) -> int:
    """Run a command with the exit codes and one-line messages of a user error (2) and a
    failure (1); --help and --version exit 0 here."""
    try:
        return run()
    except UsageError as exc:  # its message names the command
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    except UserError as exc:
        print(f"emu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except EmuError as exc:
        print(f"emu: failed: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def _run(command: commands.Command, words: list[str]) -> int:
    """Parse, resolve (configuration errors before any work), run and print one command."""
    args = command.parse(words)
    resolved = command.resolve(args)
    label = command.label(args) if command.label is not None else command.name
    with _progress(args, label) as progress:
        report = command.run(resolved, args, progress)
    for message in report.messages:
        print(f"emu: {message}", file=sys.stderr)
    if args.json:
        from emu.report.document import dumps

        _write_stdout(dumps(report.document()))
    else:
        _write_stdout(command.text(report) + "\n")
    return EXIT_FAILURE if report.failed else EXIT_OK


def _flushed(code: int) -> int:
    """`code`, once what stdout still buffers is written (see `_write_stdout`)."""
    _write_stdout("")
    return code


def _write_stdout(text: str) -> None:
    """Write `text` to stdout and flush it. A reader that went away is `main`'s
    (BrokenPipeError); any other failure (a full disk, `> /dev/full`) is one line, and
    stdout is pointed at /dev/null so that the interpreter's last flush of what was not
    written fails silently too."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        _discard_stdout()
        raise EmuError(f"cannot write to stdout: {exc.strerror or exc}") from None


def _progress(args: argparse.Namespace, label: str) -> Any:
    """The progress bar of a long run (a context manager giving the callback or None)."""
    if not hasattr(args, "quiet"):
        return contextlib.nullcontext(None)
    from emu.report import progress

    return progress.bar(label, progress.wanted(quiet=args.quiet, json_output=args.json,
                                               stdout=sys.stdout, stderr=sys.stderr),
                        sys.stderr)


def entry() -> None:
    sys.exit(main())

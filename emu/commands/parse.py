"""Command lines from options: the argparse form of a command's `Option`s.

One builder for the `emu` command line, a sweep's points and `emu compare`'s command:
`parse_args(command, words)` parses and checks a command's words without running anything,
and `add_options(parser, options)` puts options on any parser (the CLI's tree for
`emu --help`). A usage error raises `UsageError` whose one line starts with the command
(`emu pointcloud: argument --synthetic: expected a whole number from 1 to 1000, got '0'`);
`--help` prints and raises SystemExit(0), as argparse does.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from emu.errors import UsageError
from emu.options import Option

if TYPE_CHECKING:
    from emu.commands import Command

HARDWARE = (
    Option("preset", str, "j5", "hardware preset (default: j5)"),
    Option("config", str, None, "partial config layered over the preset", metavar="FILE.toml"),
    Option("overrides", str, None, "override one parameter, e.g. vdsp.freq_hz=800e6 "
                                   "(repeatable)", flags=("--set",), metavar="KEY=VALUE",
           repeat=True),
)
JSON = Option("json", bool, False, "one JSON document on stdout")
TRACE = Option("trace", str, None, "write a Chrome trace-event JSON of the run (opens in "
               "Perfetto) when it completes; an existing regular file is replaced, a folder, "
               "device, pipe or symbolic link is refused", metavar="FILE")
QUIET = Option("quiet", bool, False, "no progress bar (there is none anyway when stderr is "
               "not a terminal, or with --json going to a file or pipe)")
_SECTIONS = {"preset": "hardware", "config": "hardware", "overrides": "hardware",
             "json": "output", "trace": "output"}


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises UsageError instead of exiting, and an option
    must be spelt out: argparse's default takes any unambiguous prefix (`--tra` for
    `--trace`), which let a misspelt or shortened output option through the checks that
    look for it by name (a sweep's or `compare`'s "no output files" rule) and write files
    anywhere; it would also change meaning whenever a new option shares the prefix."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}")


def common_options(command: Command) -> tuple[Option, ...]:
    """The options every command of its kind takes: hardware, output, progress."""
    found: list[Option] = [*HARDWARE] if command.hardware else []
    found.append(JSON)
    if command.trace:
        found.append(TRACE)
    if command.progress:
        found.append(QUIET)
    return tuple(found)


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """Add `options` to `parser` (argument groups for the hardware and output ones, a
    mutually exclusive group per `Option.group`)."""
    sections: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    for option in options:
        target: Any = parser
        section = _SECTIONS.get(option.name)
        if section is not None:
            if section not in sections:
                sections[section] = parser.add_argument_group(section)
            target = sections[section]
        if option.group is not None:
            if option.group not in groups:
                groups[option.group] = parser.add_mutually_exclusive_group(
                    required=option.group_required)
            target = groups[option.group]
        target.add_argument(*_flags(option), **_keywords(option))


def _flags(option: Option) -> tuple[str, ...]:
    return option.flags or (option.flag,)


def _keywords(option: Option) -> dict[str, Any]:
    kw: dict[str, Any] = {"help": option.help_text()}
    if not option.positional:
        kw["dest"] = option.name
    if option.kind is bool:
        kw["action"] = "store_true"
        return kw
    convert = option.converter()
    if convert is not None:
        kw["type"] = argument_type(convert, option.name)
    if option.choices:
        kw["choices"] = list(option.choices)
    if option.metavar is not None:
        kw["metavar"] = option.metavar
    if option.repeat:
        kw["action"] = "append"
        kw["default"] = [] if option.default is None else option.default
    else:
        kw["default"] = option.default
    if option.many:
        kw["nargs"] = "+"
    if option.required and not option.positional:
        kw["required"] = True
    if option.positional and not option.required:
        kw["nargs"] = "?"
    return kw


def argument_type(convert: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """A converter (`emu.options`) as an argparse type: its ValueError becomes the message
    argparse prints for the argument."""
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = name
    return parse


def parser(command: Command, args: argparse.Namespace | None = None,
           add_help: bool = True) -> argparse.ArgumentParser:
    """The argparse parser of `command` (with the options that depend on `args`)."""
    built = Parser(prog=f"emu {command.name}", description=command.description,
                   usage=command.usage, epilog=command.epilog, add_help=add_help)
    add_options(built, command.all_options(args))
    return built


_PARSERS: dict[int, tuple[Command, argparse.ArgumentParser]] = {}
"""Each command's parser once made (by the command's identity; a parser keeps nothing
from one parse to the next): a sweep parses every point's arguments."""


def parse_args(command: Command, words: list[str]) -> argparse.Namespace:
    """`words` (what follows the command's name) parsed and checked for form."""
    if command.more_options is None:
        made = _PARSERS.get(id(command))
        if made is None or made[0] is not command:
            made = _PARSERS[id(command)] = (command, parser(command))
        args = made[1].parse_args(words)
    else:
        # Options that depend on what is given (`dsp cv OP`): a first pass without --help
        # finds it, the second parses everything with them.
        first, _ = parser(command, add_help=False).parse_known_args(
            [w for w in words if w not in ("-h", "--help")])
        args = parser(command, first).parse_args(words)
    if command.check is not None:
        command.check(args)
    return args

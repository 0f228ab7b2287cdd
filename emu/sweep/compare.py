"""`emu compare`: one command on two hardware descriptions, A and B, reports side by side.

    emu compare [--preset NAME] [--config FILE.toml] [--set KEY=VALUE ...]
                [--a-preset NAME] [--a-config FILE.toml] [--a-set KEY=VALUE ...]
                [--b-preset NAME] [--b-config FILE.toml] [--b-set KEY=VALUE ...]
                [--only-different] [--json]
                -- COMMAND [ARGS ...]

The short form of the contract, two hardware items in order (`emu compare --config A.toml
--config B.toml -- ...`, or `--set K=V1 --set K=V2`, or one of each), is side A then side
B. Otherwise `--preset`, `--config` and `--set` describe the hardware both sides share, and
`--a-*` and `--b-*` make each side what it is: `--a-preset` replaces the preset for A, `--a-config`
replaces the config file for A, and `--a-set` overrides are applied after the shared ones
(so they win). For example, the DSP at two clocks:

    emu compare --a-set vdsp.freq_hz=400MHz --b-set vdsp.freq_hz=1GHz -- dsp softmax --shape 16,100

COMMAND and its ARGS are any simulating command's, given after `--` as they would be typed
after `emu`, without the hardware options and `--json` (compare adds them) and without
output files (`--trace`, `--dump`, `-o`: both runs would write the same file). The two runs
happen in this process one after the other, each in a fresh simulation session, through
the sweep's `emu.sweep.runner.run_point` (the command layer, `emu.commands`), so what a side
reports is exactly what `emu COMMAND ARGS --json` with that hardware prints.

The result is every numeric leaf of the two JSON reports' results (not their envelope:
the configuration and provenance, whose differences are the hardware's, and the
wall-clock part, which differs from run to run), named by its dotted path
(`cores.0.compute_ms`), with A, B, B-A and B/A; leaves that differ come first (marked `*`),
then the equal ones unless `--only-different`. Above the table: how the two hardware
descriptions differ, key by key. `--json` prints one document with both reports, the
hardware differences and the leaves (in the report envelope, the command and its arguments
under `scenario`). A and B that resolve to the same hardware are refused: the reports would
only differ in wall-clock figures. This module parses, runs and makes the results and their
text; `emu.sweep.commands` declares the command.
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emu import commands
from emu.commands import parse as parse_options
from emu.commands.report import results_of
from emu.errors import EmuError, InputError, UsageError, UserError
from emu.options import Option


@dataclass(frozen=True)
class Side:
    """One hardware description: a preset, a config file (or none) and `--set` overrides."""

    name: str
    preset: str
    config_file: str | None
    overrides: tuple[str, ...]

    def hardware(self) -> str:
        """The side's hardware in one line: preset, config file, overrides."""
        parts = [f"preset {self.preset}"]
        if self.config_file:
            parts.append(f"config {self.config_file}")
        if self.overrides:
            parts.append("--set " + " ".join(self.overrides))
        return "; ".join(parts)


OPTIONS = (
    *parse_options.HARDWARE,
    *(Option(f"{side}_{what}", str, None, text.format(upper=side.upper()), metavar=metavar,
             repeat=what == "overrides",
             flags=(f"--{side}-{'set' if what == 'overrides' else what}",))
      for side in ("a", "b")
      for what, metavar, text in (
          ("preset", "NAME", "{upper}'s preset instead of --preset"),
          ("config", "FILE.toml", "{upper}'s config file instead of --config"),
          ("overrides", "KEY=VALUE", "override one parameter for {upper}, after the shared "
                                     "--set (repeatable)"))),
    Option("only_different", bool, False, "show only the figures that differ between A and "
                                          "B"),
)


def build_parser() -> argparse.ArgumentParser:
    """The options of `emu compare` (everything before `--`)."""
    parser = parse_options.Parser(
        prog="emu compare", usage="emu compare [options] -- COMMAND [ARGS ...]",
        description="Run one simulating command on two hardware descriptions, A and B, and "
                    "show every numeric figure of the two JSON reports side by side: A, B, "
                    "B-A and B/A, the ones that differ first (wall-clock figures are left "
                    "out). The command and its arguments come after `--`, as typed after "
                    "`emu`, without hardware options, --json or output files. Short form: "
                    "exactly two of --config/--set and no --a-*/--b-* option make side A "
                    "(the first) and side B (the second): emu compare --config A.toml "
                    "--config B.toml -- COMMAND ..., or --set K=V1 --set K=V2. Otherwise "
                    "--preset/--config/--set are shared by both sides and --a-*/--b-* make "
                    "each side what it is.",
        epilog="examples: emu compare --a-set vdsp.freq_hz=400MHz --b-set vdsp.freq_hz=1GHz "
               "-- dsp softmax --shape 16,100;  emu compare --set vdsp.freq_hz=400MHz --set "
               "vdsp.freq_hz=1GHz -- dsp softmax")
    parse_options.add_options(parser, (*OPTIONS, parse_options.JSON))
    return parser


def _ordered_sides(words: list[str]) -> list[str]:
    """The contract's short form, `emu compare (--config A.toml | --set K=V) (--config
    B.toml | --set K=V) -- ...`: without any --a-*/--b-* option, exactly two hardware items
    (each a --config or a --set) are side A then side B. Anything else is left as it is
    (shared --preset/--config/--set with --a-*/--b-*)."""
    if any(w.startswith(("--a-", "--b-")) for w in words):
        return words
    items: list[tuple[str, str]] = []
    rest: list[str] = []
    k = 0
    while k < len(words):
        word = words[k]
        flag, eq, value = word.partition("=")
        if flag in ("--config", "--set"):
            if not eq:
                if k + 1 >= len(words):
                    return words  # let the parser say what is missing
                value, k = words[k + 1], k + 1
            items.append((flag, value))
        else:
            rest.append(word)
        k += 1
    if len(items) != 2:
        return words
    return [*rest, *(w for (flag, value), side in zip(items, "ab", strict=True)
                     for w in (f"--{side}-{flag[2:]}", value))]


def parse(words: Sequence[str]) -> tuple[argparse.Namespace, Side, Side, list[str]]:
    """Split `emu compare`'s words into its options, the two sides and the command line,
    checking all of them (and both hardware descriptions) before anything runs."""
    words = list(words)
    parser = build_parser()
    if "--" not in words:
        if any(w in ("-h", "--help") for w in words):
            parser.parse_args(["--help"])
        raise InputError("emu compare: give the command to run after `--`, e.g. emu compare "
                         "--a-set vdsp.freq_hz=400MHz --b-set vdsp.freq_hz=1GHz -- dsp softmax")
    cut = words.index("--")
    try:
        args = parser.parse_args(_ordered_sides(words[:cut]))
    except UsageError as exc:  # said as "emu: error: emu compare: ..." as ever
        raise InputError(str(exc)) from None
    command = words[cut + 1:]
    if not command or command[0].startswith("-"):
        raise InputError("emu compare: expected a command after `--`, e.g. `-- dsp softmax`")
    # Options the command after `--` may not carry (`Command.reserved`): compare sets the
    # hardware and the output form itself, a file written by both runs would hold only B's,
    # and a command's help is no report (`emu COMMAND --help` shows it).
    named = commands.find(command)
    if named is not None and not named.hardware:  # `list`, `zoo`, `sweep run`, itself...
        raise InputError(f"emu compare: {named.name} takes no hardware: nothing to compare")
    reserved = named.reserved if named is not None else commands.RESERVED_FLAGS
    for word in command:
        if word.split("=")[0] in reserved:
            if word in ("-h", "--help"):
                head = itertools.takewhile(lambda w: not w.startswith("-"), command)
                raise InputError(f"emu compare: {word} after `--`: see the command's options "
                                 f"with emu {' '.join(head)} --help")
            raise InputError(f"emu compare: {word} is not allowed after `--` (the hardware "
                             "goes before `--`, as --a-set/--b-set and the like; output files "
                             "are not written)")
    sides = [Side(name, getattr(args, f"{name.lower()}_preset") or args.preset,
                  getattr(args, f"{name.lower()}_config") or args.config,
                  tuple([*args.overrides, *getattr(args, f"{name.lower()}_overrides")]))
             for name in ("A", "B")]
    return args, sides[0], sides[1], command


def hardware_differences(a: Side, b: Side) -> list[dict[str, str]]:
    """Every configuration key whose value differs between A and B (values as `emu config
    show` writes them). Raises the configuration's own error for a bad side, and
    InputError when the two sides resolve to the same hardware."""
    from emu.soc.config import format_value, load_config

    resolved = []
    for side in (a, b):
        try:
            resolved.append(load_config(side.preset, side.config_file, side.overrides))
        except UserError as exc:
            raise type(exc)(f"side {side.name}: {exc}") from None
    out = [{"key": info.key, "a": format_value(info, value_a), "b": format_value(info, value_b)}
           for (info, value_a, _), (_, value_b, _) in zip(resolved[0].leaves(),
                                                          resolved[1].leaves(), strict=True)
           if value_a != value_b]
    if not out:
        raise InputError("emu compare: A and B resolve to the same hardware; make them differ "
                         "with --a-set/--b-set, --a-config/--b-config or --a-preset/--b-preset")
    return out


def run_side(side: Side, command: Sequence[str]) -> dict[str, Any]:
    """Run `command` on one side's hardware (in this process, a fresh session) and return its
    JSON report. A failed run raises: InputError for a user error (the command's own
    message), EmuError otherwise."""
    from emu.sweep.runner import run_point

    config_text = None
    if side.config_file is not None:
        try:
            config_text = Path(side.config_file).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"side {side.name}: --config {side.config_file}: cannot read it "
                             f"({exc})") from None
    result = run_point({"argv": list(command), "preset": side.preset,
                        "config_text": config_text, "overrides": list(side.overrides)})
    if result["status"] != "ok":
        message = str(result.get("error") or "failed")
        # The command's exit status is not passed on, but emu's main says which kind of
        # error it was: "emu: error: ..." (a user error), "emu CMD: ..." (a usage error),
        # "emu: failed: ..." (a failure); anything else is an exception that escaped.
        kind: type[EmuError] = InputError
        if message.startswith("emu: failed: ") or not message.startswith("emu"):
            kind = EmuError
        for prefix in ("emu: error: ", "emu: failed: "):
            message = message.removeprefix(prefix)
        raise kind(f"side {side.name} ({side.hardware()}): {message}")
    report = result["report"]
    if not isinstance(report, dict):
        raise EmuError(f"side {side.name}: the report is not a JSON object")
    return report


def numeric_leaves(doc: Any, prefix: str = "") -> Iterator[tuple[str, int | float]]:
    """Every number in a JSON document with its dotted path (list items by index), in
    document order. Flags (true/false) are not numbers here."""
    if isinstance(doc, dict):
        for key, item in doc.items():
            yield from numeric_leaves(item, f"{prefix}{key}.")
    elif isinstance(doc, list):
        for index, item in enumerate(doc):
            yield from numeric_leaves(item, f"{prefix}{index}.")
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield prefix[:-1], doc


def leaves(report_a: Any, report_b: Any) -> list[dict[str, Any]]:
    """The numeric leaves of both reports side by side: path, a, b, delta (b - a), ratio
    (b / a) and whether they differ. A leaf only one report has is None on the other side
    (and differs). Differing leaves come first, each group in document order (A's, then
    what only B has)."""
    a, b = dict(numeric_leaves(report_a)), dict(numeric_leaves(report_b))
    paths = list(a) + [path for path in b if path not in a]
    rows = []
    for path in paths:
        va, vb = a.get(path), b.get(path)
        delta = ratio = None
        if va is not None and vb is not None:
            delta = vb - va
            ratio = vb / va if va != 0 else None
            if isinstance(delta, float) and not math.isfinite(delta):
                delta = None
        rows.append({"path": path, "a": va, "b": vb, "delta": delta, "ratio": ratio,
                     "differs": va is None or vb is None or va != vb})
    return sorted(rows, key=lambda row: not row["differs"])


def compare(a: Side, b: Side, command: Sequence[str]) -> dict[str, Any]:
    """Run `command` on A and on B and build the comparison document (what `--json`
    prints)."""
    hardware = hardware_differences(a, b)
    report_a = run_side(a, command)
    report_b = run_side(b, command)
    rows = leaves(results_of(report_a), results_of(report_b))
    named = commands.find(command)
    cut = 1 if named is None else len(named.words)
    return {"scenario": {"command": " ".join(command[:cut]), "args": list(command[cut:])},
            "a": {"preset": a.preset, "config_file": a.config_file,
                  "overrides": list(a.overrides), "report": report_a},
            "b": {"preset": b.preset, "config_file": b.config_file,
                  "overrides": list(b.overrides), "report": report_b},
            "hardware_differences": hardware,
            "differing": sum(1 for row in rows if row["differs"]),
            "leaves": rows}


def text(doc: dict[str, Any], only_different: bool = False) -> str:
    """The comparison as text: the two sides, how their hardware differs, then the table."""
    from emu.report.table import render

    a, b = (Side(name, doc[key]["preset"], doc[key]["config_file"],
                 tuple(doc[key]["overrides"])) for name, key in (("A", "a"), ("B", "b")))
    scenario = doc["scenario"]
    lines = [f"emu compare -- {' '.join([scenario['command'], *scenario['args']])}",
             f"A: {a.hardware()}", f"B: {b.hardware()}",
             "hardware: " + "; ".join(f"{d['key']} {d['a']} -> {d['b']}"
                                      for d in doc["hardware_differences"])]
    rows = [row for row in doc["leaves"] if row["differs"] or not only_different]
    cells = [["*" if row["differs"] else "", row["path"], _number(row["a"]),
              _number(row["b"]), _number(row["delta"], signed=True), _ratio(row["ratio"])]
             for row in rows]
    for column in range(2, 6):  # numbers right-aligned: pad each column to its widest cell
        width = max([len(line[column]) for line in cells], default=0)
        for line in cells:
            line[column] = line[column].rjust(width)
    total = len(doc["leaves"])
    title = (f"{doc['differing']} of {total} figures differ"
             + (" (only those shown)" if only_different else "; * marks them, first"))
    lines += ["", render(["", "figure", "A", "B", "B-A", "B/A"], cells, title=title)]
    return "\n".join(lines)


def _number(item: int | float | None, signed: bool = False) -> str:
    if item is None:
        return "-"
    if isinstance(item, int):
        return f"{item:+d}" if signed and item else str(item)
    return f"{item:+.6g}" if signed and item else f"{item:.6g}"


def _ratio(item: float | None) -> str:
    return "-" if item is None else f"{item:.4g}"

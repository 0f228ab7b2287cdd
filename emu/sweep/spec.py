"""Sweep specs: reading a TOML spec, checking all of it, and expanding it into points.

A spec names one simulating command with its arguments, the metrics to collect (a name and a
dotted path into the command's `--json` report), a base hardware and the axes:

    [scenario]
    command = "pointcloud"
    args = ["--model", "centerpoint", "--impl", "dsp2", "--synthetic", "2"]
    metrics = { dsp2_ms = "summary.dsp2.avg_ms", kept = "frames.0.points_kept" }

    [hardware]
    preset = "j5"
    config = "base.toml"        # optional, relative to the spec's folder
    set = ["ddr.policy=fcfs"]

    [axes]
    mode = "grid"               # grid | zip | random (with samples, seed, method)
    "vdsp.freq_hz" = ["400MHz", "648MHz", "1GHz"]
    "--points" = [30000, 60000]

An axis is a configuration key (any key `emu config show` lists) or an option of the
command, spelled with its dashes. `grid` is the cartesian product in spec order (the last
axis varies fastest), `zip` takes the i-th value of every axis (all of the same length),
`random` draws `samples` points with `seed`, each axis being a list to choose from or a
range `{low, high, log, integer}` (units allowed for configuration keys), independently
(`method = "uniform"`) or as a Latin hypercube (`method = "lhs"`: each axis's range cut into
`samples` strata, each stratum used once).

Everything is checked here, before any point runs, because a sweep that fails at its
thirtieth point after an hour has wasted the hour: unknown sections and keys, the command,
each point's resolved configuration (built with `emu.soc.config.load_config`, so a bad
value is found with the key named), each point's command line (parsed by the command's own
parser without running it) and every metric path (against the paths each command declares
its report to have, `emu.commands`' `Command.reports`, and the envelope's;
tests/sweep/test_spec.py runs each command once to keep them true). A mistake raises
`InputError` with one line naming the spec, the section and the key or point.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import random
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emu.commands import Progress
from emu.errors import ConfigError, InputError
from emu.sweep.runner import point_key

MODES = ("grid", "zip", "random")
METHODS = ("uniform", "lhs")
MAX_POINTS = 100_000

# Paths every simulating command's report has: its envelope (`emu.commands.report`).
ENVELOPE_PATHS = ("command", "arguments.**", "preset", "provenance.emu_version",
                  "provenance.preset", "provenance.config_file", "provenance.overrides.*",
                  "provenance.changed_from_preset.*", "provenance.seed", "config.**")


def sweepable() -> dict[str, Any]:
    """The commands a sweep may run, by name (`emu.commands`)."""
    from emu import commands

    return {c.name: c for c in commands.commands() if c.sweepable}


def report_paths(command: Any) -> tuple[str, ...]:
    """The dotted paths `command`'s report has: what it declares, and the envelope's."""
    return (*command.reports, *ENVELOPE_PATHS)


@dataclass(frozen=True)
class Axis:
    """One axis: a configuration key or a command option, and its values or range."""

    name: str
    kind: str  # "config" or "option"
    values: tuple[Any, ...] = ()
    low: Any = None
    high: Any = None
    log: bool = False
    integer: bool = False


@dataclass(frozen=True)
class Point:
    """One point of a sweep, resolved and checked: what it runs and its content key."""

    index: int
    axes: dict[str, Any]
    args: tuple[str, ...]       # the command's arguments, the axes' options applied
    overrides: tuple[str, ...]  # the base `set` and then the axes' configuration keys
    seed: int | None
    key: str
    job: dict[str, Any]         # runner.run_point's picklable input


@dataclass(frozen=True)
class Spec:
    """A checked sweep spec and its points in spec order."""

    where: str
    command: str
    args: tuple[str, ...]
    metrics: dict[str, str]
    preset: str
    config_file: str | None
    config_text: str | None
    overrides: tuple[str, ...]
    mode: str
    samples: int | None
    seed: int | None
    method: str
    axes: tuple[Axis, ...]
    points: tuple[Point, ...] = field(default=())

    @property
    def key(self) -> str:
        """The sweep's identity: a hash of its points' keys in order."""
        return hashlib.sha256("\n".join(p.key for p in self.points).encode()).hexdigest()


def load(path: str | Path, progress: Progress | None = None) -> Spec:
    """Read and check the spec file at `path` (TOML); `progress(done, total, what)` hears
    how far the check of its points has come (every point's configuration is resolved:
    about a minute for 100,000 points)."""
    where = str(path)
    try:
        with Path(path).open("rb") as fh:
            data = tomllib.load(fh)
    except IsADirectoryError:
        raise InputError(f"{where}: is a folder, not a sweep spec") from None
    except FileNotFoundError:
        raise InputError(f"{where}: no such sweep spec") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot read the sweep spec ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    return parse(data, where, base=Path(path).resolve().parent, progress=progress)


def parse(data: Mapping[str, Any], where: str = "spec", base: Path | None = None,
          progress: Progress | None = None) -> Spec:
    """Check a spec given as data (what `tomllib` reads) and expand its points.

    `where` names the spec in error messages; a relative `hardware.config` path is taken
    from `base` (the spec file's folder; the current folder by default).
    """
    _known(data, {"scenario", "hardware", "axes"}, where, "")
    scenario = _table(data, "scenario", where, required=True)
    _known(scenario, {"command", "args", "metrics"}, where, "[scenario] ")
    command = scenario.get("command")
    known = sweepable()
    if command not in known:
        raise InputError(f"{where}: [scenario] command {command!r}: not a sweepable command "
                         f"(one of: {', '.join(known)})")
    args = scenario.get("args", [])
    if not (isinstance(args, list) and all(isinstance(a, str | int | float)
                                            and not isinstance(a, bool) for a in args)):
        raise InputError(f"{where}: [scenario] args: expected a list of strings")
    args = [str(a) for a in args]
    reserved = known[command].reserved  # the sweep sets these, or they write files
    for arg in args:
        if arg.split("=")[0] in reserved:
            raise InputError(f"{where}: [scenario] args: {arg} is not allowed (the hardware "
                             "goes in [hardware]; outputs per point are not written)")
    metrics = scenario.get("metrics", {})
    if not isinstance(metrics, dict) or not metrics:
        raise InputError(f"{where}: [scenario] metrics: expected a table of name = \"path\"")
    for name, path in metrics.items():
        _check_metric(known[command], name, path, where)

    hardware = _table(data, "hardware", where, required=False)
    _known(hardware, {"preset", "config", "set"}, where, "[hardware] ")
    preset = hardware.get("preset", "j5")
    if not isinstance(preset, str):
        raise InputError(f"{where}: [hardware] preset: expected a name")
    config_file, config_text = _config_file(hardware.get("config"), where, base)
    base_set = hardware.get("set", [])
    if not (isinstance(base_set, list) and all(isinstance(s, str) for s in base_set)):
        raise InputError(f"{where}: [hardware] set: expected a list of \"KEY=VALUE\" strings")

    axes_table = dict(_table(data, "axes", where, required=False))
    mode = axes_table.pop("mode", "grid")
    samples = axes_table.pop("samples", None)
    seed = axes_table.pop("seed", None)
    method = axes_table.pop("method", "uniform")
    if mode not in MODES:
        raise InputError(f"{where}: [axes] mode {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "random":
        if not (isinstance(samples, int) and not isinstance(samples, bool)
                and 1 <= samples <= MAX_POINTS):
            raise InputError(f"{where}: [axes] samples: random mode needs a whole number of "
                             f"samples from 1 to {MAX_POINTS}, got {samples!r}")
        if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32):
            raise InputError(f"{where}: [axes] seed: random mode needs a whole number from 0 "
                             f"to 4294967295, got {seed!r}")
        if method not in METHODS:
            raise InputError(f"{where}: [axes] method {method!r}: expected one of "
                             f"{', '.join(METHODS)}")
    else:
        for name, value in (("samples", samples), ("seed", seed)):
            if value is not None:
                raise InputError(f"{where}: [axes] {name}: only for mode = \"random\"")
        if "method" in data.get("axes", {}):
            raise InputError(f"{where}: [axes] method: only for mode = \"random\"")
    axes = tuple(_axis(name, value, mode, where, reserved)
                 for name, value in _flat_axes(axes_table))

    spec = Spec(where, command, tuple(args), {str(k): str(v) for k, v in metrics.items()},
                preset, config_file, config_text, tuple(base_set), mode, samples, seed,
                method, axes)
    return _with_points(spec, progress)


def resolve_metric(report: Any, path: str) -> Any:
    """The value at dotted `path` in `report`; KeyError saying where the path stops."""
    value = report
    done: list[str] = []
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() \
                and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            at = ".".join(done) or "the top"
            raise KeyError(f"no {part!r} at {at} of the report")
        done.append(part)
    return value


def matches(path: str, pattern: str) -> bool:
    """Whether dotted `path` is one of those `pattern` (with `*` and a final `**`) stands
    for."""
    parts, wanted = path.split("."), pattern.split(".")
    if wanted[-1] == "**":
        return len(parts) >= len(wanted) - 1 and all(
            w in ("*", p) for p, w in zip(parts, wanted[:-1], strict=False))
    return len(parts) == len(wanted) and all(w in ("*", p)
                                             for p, w in zip(parts, wanted, strict=True))


def _check_metric(command: Any, name: Any, path: Any, where: str) -> None:
    paths = report_paths(command)
    if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
        raise InputError(f"{where}: [scenario] metrics {name}: expected a dotted path like "
                         f"\"{paths[0]}\", got {path!r}")
    if not any(matches(path, pattern) for pattern in paths):
        head = path.split(".")[0]
        near = [p for p in paths if p.split(".")[0] == head] or \
            sorted({p.split(".")[0] for p in paths})
        raise InputError(f"{where}: [scenario] metrics {name} = {path!r}: not a path of the "
                         f"{command.name} report (its paths: {', '.join(near[:8])}"
                         f"{', ...' if len(near) > 8 else ''})")


def _known(table: Mapping[str, Any], names: set[str], where: str, section: str) -> None:
    unknown = [k for k in table if k not in names]
    if unknown:
        raise InputError(f"{where}: {section}unknown key {unknown[0]!r} (expected: "
                         f"{', '.join(sorted(names))})")


def _table(data: Mapping[str, Any], name: str, where: str, required: bool) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        if required:
            raise InputError(f"{where}: missing the [{name}] table")
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: {name}: expected a table [{name}]")
    return value


def _config_file(value: Any, where: str, base: Path | None) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    if not isinstance(value, str):
        raise InputError(f"{where}: [hardware] config: expected a file name")
    path = Path(value)
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise InputError(f"{where}: [hardware] config {value}: cannot read "
                         f"({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: [hardware] config {value}: not UTF-8 text "
                         f"(byte {exc.start})") from None
    return str(path), text


_RANGE_KEYS = {"low", "high", "log", "integer"}


def _flat_axes(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Axes in spec order; an unquoted dotted key (`vdsp.freq_hz = [...]`) reads as nested
    tables in TOML and is joined back here."""
    out: list[tuple[str, Any]] = []
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and not (set(value) & _RANGE_KEYS):
            out.extend(_flat_axes(value, key + "."))
        else:
            out.append((key, value))
    return out


def _config_units() -> dict[str, tuple[str, type]]:
    from emu.soc.config import schema_fields

    return {info.key: (info.unit, info.type) for info in schema_fields()}


def _axis(name: str, value: Any, mode: str, where: str, reserved: Sequence[str]) -> Axis:
    at = f"{where}: [axes] {name!r}"
    if name.startswith("-"):
        if name in reserved:
            raise InputError(f"{at}: not an axis (the hardware varies through configuration "
                             "keys; outputs per point are not written)")
        kind = "option"
    else:
        units = _config_units()
        if name not in units:
            hint = ""
            near = [k for k in units if k.rsplit(".", 1)[0] == name.rsplit(".", 1)[0]]
            if near:
                hint = f" (keys of {name.rsplit('.', 1)[0]}: " \
                       f"{', '.join(k.rsplit('.', 1)[1] for k in near)})"
            raise InputError(f"{at}: unknown configuration key (nor a command option: those "
                             f"start with --){hint}")
        kind = "config"
    if isinstance(value, list):
        if not value:
            raise InputError(f"{at}: no values")
        if any(isinstance(v, dict | list) for v in value):
            raise InputError(f"{at}: values must be numbers, strings or booleans")
        return Axis(name, kind, tuple(value))
    if isinstance(value, dict):
        if mode != "random":
            raise InputError(f"{at}: a range {{low, high}} needs mode = \"random\"; grid and "
                             "zip take a list of values")
        unknown = sorted(set(value) - _RANGE_KEYS)
        if unknown:
            raise InputError(f"{at}: unknown key {unknown[0]!r} in the range (expected: low, "
                             "high, log, integer)")
        if "low" not in value or "high" not in value:
            raise InputError(f"{at}: a range needs low and high")
        low, high = _bound(name, kind, value["low"], at), _bound(name, kind, value["high"], at)
        if not low < high:
            raise InputError(f"{at}: low must be less than high, got {value['low']!r} and "
                             f"{value['high']!r}")
        log, integer = value.get("log", False), value.get("integer", False)
        if not isinstance(log, bool) or not isinstance(integer, bool):
            raise InputError(f"{at}: log and integer must be true or false")
        if log and low <= 0:
            raise InputError(f"{at}: a log range needs low > 0")
        if kind == "config" and _config_units()[name][1] is int:
            integer = True
        return Axis(name, kind, (), low, high, log, integer)
    raise InputError(f"{at}: expected a list of values"
                     + (" or a range {low, high}" if mode == "random" else ""))


def _bound(name: str, kind: str, raw: Any, at: str) -> float:
    if kind == "config":
        from emu.soc.units import parse_quantity

        unit, _ = _config_units()[name]
        try:
            return float(parse_quantity(raw, unit, integer=False))
        except ValueError as exc:
            raise InputError(f"{at}: {exc}") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise InputError(f"{at}: low and high must be finite numbers, got {raw!r}")
    return float(raw)


def _combinations(spec: Spec) -> list[dict[str, Any]]:
    """The axes' values of every point, in spec order."""
    names = [a.name for a in spec.axes]
    if not spec.axes:
        return [{}]
    if spec.mode == "grid":
        count = math.prod(len(a.values) for a in spec.axes)
        if count > MAX_POINTS:
            raise InputError(f"{spec.where}: [axes] the grid has {count} points, more than "
                             f"{MAX_POINTS}")
        return [dict(zip(names, combo, strict=True))
                for combo in itertools.product(*(a.values for a in spec.axes))]
    if spec.mode == "zip":
        lengths = {a.name: len(a.values) for a in spec.axes}
        if len(set(lengths.values())) > 1:
            first = spec.axes[0]
            other = next(a for a in spec.axes if len(a.values) != len(first.values))
            raise InputError(f"{spec.where}: [axes] zip needs axes of one length: "
                             f"{first.name!r} has {len(first.values)} values, {other.name!r} "
                             f"{len(other.values)}")
        return [dict(zip(names, combo, strict=True))
                for combo in zip(*(a.values for a in spec.axes), strict=True)]
    assert spec.samples is not None and spec.seed is not None
    rng = random.Random(spec.seed)
    columns: list[list[Any]] = []
    for axis in spec.axes:
        if spec.method == "lhs":
            strata = list(range(spec.samples))
            rng.shuffle(strata)
            units = [(s + rng.random()) / spec.samples for s in strata]
        else:
            units = [rng.random() for _ in range(spec.samples)]
        columns.append([_draw(axis, u) for u in units])
    return [dict(zip(names, combo, strict=True)) for combo in zip(*columns, strict=True)]


def _draw(axis: Axis, unit: float) -> Any:
    """The value at `unit` (0 to 1) along an axis: a list's item or a point of a range."""
    if axis.values:
        return axis.values[min(int(unit * len(axis.values)), len(axis.values) - 1)]
    low, high = float(axis.low), float(axis.high)
    if axis.integer:
        low, high = math.ceil(low), math.floor(high)
        if axis.log:
            lo, hi = math.log(low - 0.5 if low > 0.5 else low), math.log(high + 0.5)
            value = round(math.exp(lo + unit * (hi - lo)))
        else:
            value = math.floor(low + unit * (high - low + 1))
        return int(min(max(value, low), high))
    if axis.log:
        return math.exp(math.log(low) + unit * (math.log(high) - math.log(low)))
    return low + unit * (high - low)


def toml_literal(value: Any) -> str:
    """`value` as the text after `KEY=` in `--set`, read back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def with_option(args: Sequence[str], flag: str, value: Any) -> list[str]:
    """`args` with option `flag` set to `value`: its value replaced where it is given,
    appended where not; a boolean adds or removes the switch."""
    out = list(args)
    if isinstance(value, bool):
        out = [a for a in out if a != flag]
        return [*out, flag] if value else out
    text = repr(value) if isinstance(value, float) else str(value)
    for i, arg in enumerate(out):
        if arg == flag and i + 1 < len(out):
            out[i + 1] = text
            return out
        if arg.startswith(flag + "="):
            out[i] = f"{flag}={text}"
            return out
    return [*out, flag, text]


PROGRESS_EVERY = 1000
"""Points checked between two progress reports."""


def _with_points(spec: Spec, progress: Progress | None = None) -> Spec:
    from emu.soc.config import load_config

    command = sweepable()[spec.command]
    points = []
    combinations = _combinations(spec)
    for index, combo in enumerate(combinations):
        if progress is not None and index % PROGRESS_EVERY == 0 and index:
            progress(index, len(combinations), "points checked")
        label = ", ".join(f"{k}={v}" for k, v in combo.items()) or "the only point"
        at = f"{spec.where}: point {index + 1} ({label})"
        args = list(spec.args)
        overrides = list(spec.overrides)
        for axis in spec.axes:
            value = combo[axis.name]
            if axis.kind == "config":
                overrides.append(f"{axis.name}={toml_literal(value)}")
            else:
                args = with_option(args, axis.name, value)
        try:
            resolved = load_config(spec.preset, spec.config_file, overrides)
        except ConfigError as exc:
            raise InputError(f"{at}: {exc}") from None
        try:  # the point's command line, parsed as the command parses it, nothing run
            namespace = command.parse(args)
        except InputError as exc:
            raise InputError(f"{at}: {exc}") from None
        except SystemExit:
            raise InputError(f"{at}: emu {command.name}: -h/--help is not a point") from None
        seed = getattr(namespace, "seed", None)
        argv = [*command.words, *args]
        key = point_key(resolved.to_dict(), spec.command, argv, seed)
        job = {"argv": argv, "preset": spec.preset, "config_text": spec.config_text,
               "overrides": overrides}
        points.append(Point(index, combo, tuple(args), tuple(overrides), seed, key, job))
    return dataclasses.replace(spec, points=tuple(points))

"""A command's report and its JSON envelope, made here and nowhere else.

Every command's `--json` document is `Report.document()`:

    {"command": "pointcloud", "arguments": {...the parsed options...}, "preset": "j5",
     ...the command's results, each key at the top...,
     "provenance": {...}, "config": {...the resolved configuration...},
     "wall_clock": {"wall_s": 1.2}}

`provenance` is what produced the report (`emu.report.document.provenance`: emu's version,
preset, config file, overrides, what they changed, the seed). The results sit at the top
(not under one key) so that every report keeps the keys it had before the envelope; a
scenario's results are its `results` and `stats`. `wall_clock` holds figures of the host's
own time, and what else a run did that the next identical run need not (the points a sweep
took from its store): they differ from run to run, so they are never compared (`emu
compare`), hashed or stored as metrics; `without_wall_clock(doc)` drops them. A command
whose public contract has a wall-clock key at the top (`pointcloud`'s `wall_s`) repeats it
there.

A command that simulates nothing (`list`, `ops`, `zoo list`) has no `preset`, `provenance`
or `config`; `config show`, whose results are the configuration, has no second copy of it
in `config` (`Command.embed_config`). `Report.failed` marks a run that finished but failed
in part (a sweep's points): the command line exits 1 after printing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The keys of the envelope around every command's results.
ENVELOPE = ("command", "arguments", "preset", "provenance", "config", "wall_clock")
WALL_CLOCK = "wall_clock"


@dataclass(frozen=True)
class Report:
    """What one run of a command produced (see the module's docstring)."""

    command: str
    arguments: dict[str, Any]
    preset: str | None
    provenance: dict[str, Any] | None
    config: dict[str, Any] | None
    results: dict[str, Any]
    wall_clock: dict[str, Any] = field(default_factory=dict)
    wall_clock_at_top: tuple[str, ...] = ()
    # What the run has to say beside its results (a frame's points dropped, an input read
    # oddly): one line each, "warning: ..." or "note: ..."; the CLI prints them on stderr.
    messages: tuple[str, ...] = ()
    written: tuple[str, ...] = ()  # the files and folders the run wrote
    # Part of the run failed though it finished (a sweep's failed points, said in
    # `messages`): the command line exits 1 after printing the report.
    failed: bool = False

    def document(self) -> dict[str, Any]:
        """The report as its `--json` document: the one envelope."""
        doc: dict[str, Any] = {"command": self.command, "arguments": self.arguments}
        if self.preset is not None:
            doc["preset"] = self.preset
        doc.update(self.results)
        if self.provenance is not None:
            doc["provenance"] = self.provenance
        if self.config is not None:
            doc["config"] = self.config
        for key in self.wall_clock_at_top:
            doc[key] = self.wall_clock[key]
        doc[WALL_CLOCK] = dict(self.wall_clock)
        return doc

    def __getitem__(self, key: str) -> Any:
        """A result by name (`report["frames"]`), as in the JSON document."""
        return self.results[key]


def without_wall_clock(doc: dict[str, Any]) -> dict[str, Any]:
    """A `--json` document without its wall-clock part: what two runs of one command on one
    input agree on byte for byte."""
    wall = doc.get(WALL_CLOCK, {})
    return {k: v for k, v in doc.items() if k != WALL_CLOCK and k not in wall}


def results_of(doc: dict[str, Any]) -> dict[str, Any]:
    """A `--json` document's results alone: without the envelope (what produced it, the
    configuration) and the wall-clock part."""
    return {k: v for k, v in without_wall_clock(doc).items() if k not in ENVELOPE}


def plain(value: Any) -> Any:
    """`value` as JSON-ready data: tuples as lists, paths as text, mappings as dicts."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)

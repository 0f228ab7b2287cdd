"""The trace recorder: slices and counters on named tracks, in simulated picoseconds.

Components ask for a track by path (`soc.bpu.core0`, `soc.vdsp.core1.idma.ch0`, `host.main`)
and record on it. A flow links slices on different tracks (the API call that submitted a
task to the task's slices on the core that ran it). Recording is off unless a trace was
requested, so an untraced run pays for one attribute test per event. `emu.report.trace`
turns the recording into a Chrome trace-event document for Perfetto.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Flow:
    """A slice's place in a flow (an arrow in Perfetto from one slice to the next of a flow):
    `into` it arrives from the flow's previous slice, `onward` it leaves for the next."""

    flow_id: int
    into: bool
    onward: bool


@dataclass(frozen=True)
class Slice:
    track: int
    name: str
    start_ps: int
    end_ps: int
    args: tuple[tuple[str, Any], ...] = ()
    flow: Flow | None = None


@dataclass(frozen=True)
class CounterSample:
    track: int
    name: str
    at_ps: int
    values: tuple[tuple[str, float], ...]


@dataclass
class Recording:
    """Everything recorded in one run, in recording order."""

    tracks: list[str] = field(default_factory=list)
    slices: list[Slice] = field(default_factory=list)
    counters: list[CounterSample] = field(default_factory=list)
    flows: int = 0  # flow ids handed out: 1..flows


class Track:
    """One timeline (a core, a DMA channel, the DDR, a host thread)."""

    def __init__(self, recorder: TraceRecorder, index: int, path: str) -> None:
        self._recorder = recorder
        self.index = index
        self.path = path

    def slice(self, name: str, start_ps: int, end_ps: int, *, flow: Flow | None = None,
              **args: Any) -> None:
        """Record that `name` occupied this track from `start_ps` to `end_ps`, optionally as
        one link of a flow (the API call that submitted a task, then the task's slices)."""
        if self._recorder.enabled:
            if end_ps < start_ps:
                raise ValueError(f"{self.path}: slice {name!r} ends before it starts")
            self._recorder.recording.slices.append(
                Slice(self.index, name, start_ps, end_ps, tuple(args.items()), flow)
            )

    def counter(self, name: str, at_ps: int, **values: float) -> None:
        """Record the values of a counter (e.g. DDR bandwidth in use) from `at_ps` on."""
        if self._recorder.enabled:
            self._recorder.recording.counters.append(
                CounterSample(self.index, name, at_ps, tuple(values.items()))
            )


class TraceRecorder:
    """Hands out tracks and keeps what is recorded on them."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.recording = Recording()
        self._tracks: dict[str, Track] = {}

    def new_flow(self) -> int:
        """A fresh flow id (1, 2, ... in the order asked for; 0 means none and is returned
        when nothing is recorded)."""
        if not self.enabled:
            return 0
        self.recording.flows += 1
        return self.recording.flows

    def track(self, path: str) -> Track:
        """The track named `path`, created on first use (creation order fixes its id)."""
        found = self._tracks.get(path)
        if found is None:
            found = Track(self, len(self._tracks), path)
            self._tracks[path] = found
            self.recording.tracks.append(path)
        return found

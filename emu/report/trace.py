"""Export a recording as Chrome trace-event JSON, which the Perfetto UI opens.

Tracks are grouped into processes by the first component below the root (`soc.bpu.core0`
goes to process `bpu`, thread `core0`); each track is one thread. A slice that is a link of a
flow carries `bind_id` with `flow_out` (the flow leaves it) and/or `flow_in` (the flow
arrives), so Perfetto draws an arrow from an API call to the task slices it caused.
Timestamps are microseconds with picosecond precision; events are sorted so the file does
not depend on recording order within one instant.
"""

from __future__ import annotations

from typing import Any

from emu.soc.clock import PS_PER_US
from emu.soc.trace import Recording


def _us(ps: int) -> float:
    return ps / PS_PER_US


def _split(path: str) -> tuple[str, str]:
    parts = path.split(".")
    if parts[0] == "soc" and len(parts) > 1:
        parts = parts[1:]
    if len(parts) > 1:
        return parts[0], ".".join(parts[1:])
    return parts[0], parts[0]


def chrome_trace(recording: Recording, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trace-event document (`{"traceEvents": [...]}`) for a recording."""
    return chrome_trace_many([("", recording)], metadata)


def chrome_trace_many(
    runs: list[tuple[str, Recording]], metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One document for several runs (each its own SoC and timeline from 0): the processes
    of a run are named with its prefix, e.g. "dsp2 vdsp"."""
    meta: list[dict[str, Any]] = []
    timed: list[tuple[int, int, int, int, dict[str, Any]]] = []
    first_pid = 1
    flow_base = 0
    for prefix, recording in runs:
        first_pid = _events(recording, prefix, first_pid, flow_base, meta, timed)
        flow_base += recording.flows
    timed.sort(key=lambda item: item[:4])
    doc: dict[str, Any] = {
        "traceEvents": meta + [item[4] for item in timed],
        "displayTimeUnit": "ns",
    }
    if metadata:
        doc["otherData"] = metadata
    return doc


def _events(
    recording: Recording, prefix: str, first_pid: int, flow_base: int,
    meta: list[dict[str, Any]], timed: list[tuple[int, int, int, int, dict[str, Any]]],
) -> int:
    """Append one recording's events (its flow ids shifted past `flow_base`, so the runs of
    one document never share one); returns the next free process id."""
    processes: dict[str, int] = {}
    where: list[tuple[int, int]] = []
    threads_in: dict[int, int] = {}
    for path in recording.tracks:
        process, thread = _split(path)
        if process not in processes:
            pid = first_pid + len(processes)
            processes[process] = pid
            label = f"{prefix} {process}" if prefix else process
            meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                         "args": {"name": label}})
            meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                         "args": {"sort_index": pid}})
        pid = processes[process]
        tid = threads_in.get(pid, 0) + 1
        threads_in[pid] = tid
        where.append((pid, tid))
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                     "args": {"name": thread}})
        meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                     "args": {"sort_index": tid}})

    order_base = len(timed)
    for order, s in enumerate(recording.slices, start=order_base):
        pid, tid = where[s.track]
        event: dict[str, Any] = {"ph": "X", "name": s.name, "pid": pid, "tid": tid,
                                 "ts": _us(s.start_ps), "dur": _us(s.end_ps - s.start_ps)}
        if s.args:
            event["args"] = dict(s.args)
        if s.flow is not None:
            # Flow events bound to the slice itself (the "v2" form Perfetto reads).
            event["bind_id"] = flow_base + s.flow.flow_id
            if s.flow.into:
                event["flow_in"] = True
            if s.flow.onward:
                event["flow_out"] = True
        # Longer slices first at equal start, so enclosing slices precede their children.
        timed.append((s.start_ps, -(s.end_ps - s.start_ps), pid * 10_000 + tid, order, event))
    for order, c in enumerate(recording.counters, start=order_base + len(recording.slices)):
        pid, _ = where[c.track]
        event = {"ph": "C", "name": c.name, "pid": pid, "tid": 0, "ts": _us(c.at_ps),
                 "args": dict(c.values)}
        timed.append((c.at_ps, 0, pid * 10_000, order, event))
    return first_pid + len(processes)

import json

from emu.report.trace import chrome_trace
from emu.soc.trace import TraceRecorder


def _recording():
    rec = TraceRecorder(True)
    core = rec.track("soc.bpu.core0")
    ddr = rec.track("soc.ddr")
    host = rec.track("host.main")
    core.slice("task", 0, 3_000_000, priority=255)
    core.slice("layer", 0, 1_000_000)
    ddr.counter("ddr", 500_000, transfers=1, gb_per_s=12.5)
    host.slice("wait task", 1_000, 3_000_000)
    return rec.recording


def validate_chrome_trace(doc) -> None:
    """The structure Perfetto's JSON importer relies on."""
    assert set(doc) <= {"traceEvents", "displayTimeUnit", "otherData"}
    assert isinstance(doc["traceEvents"], list)
    named_threads = set()
    for event in doc["traceEvents"]:
        assert event["ph"] in {"X", "C", "M"}
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert isinstance(event["name"], str) and event["name"]
        if event["ph"] == "M":
            assert event["name"] in {"process_name", "thread_name", "process_sort_index",
                                     "thread_sort_index"}
            if event["name"] == "thread_name":
                named_threads.add((event["pid"], event["tid"]))
        else:
            assert isinstance(event["ts"], float | int) and event["ts"] >= 0
        if event["ph"] == "X":
            assert event["dur"] >= 0
            assert (event["pid"], event["tid"]) in named_threads
        if event["ph"] == "C":
            assert all(isinstance(v, int | float) for v in event["args"].values())
    _validate_flows(doc)
    _validate_nesting(doc)
    json.dumps(doc, allow_nan=False)


def _validate_nesting(doc) -> None:
    """On every track, two slices are either disjoint or one holds the other: Perfetto drops
    slices that overlap partly."""
    tracks = {}
    for event in doc["traceEvents"]:
        if event["ph"] == "X":
            tracks.setdefault((event["pid"], event["tid"]), []).append(event)
    eps = 1e-6  # 1 ps, against float rounding of the microsecond times
    for where, events in tracks.items():
        open_ends = []
        for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
            end = e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= e["ts"] + eps:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + eps, \
                f"slice {e['name']!r} at {e['ts']} us overlaps its neighbour partly on {where}"
            open_ends.append(end)


def _validate_flows(doc) -> None:
    """Every flow starts on one slice (flow_out only), may step through slices (both) and
    ends on one (flow_in only), each link no earlier than the one before."""
    links = {}
    for event in doc["traceEvents"]:
        if "bind_id" in event:
            assert event["ph"] == "X" and isinstance(event["bind_id"], int)
            links.setdefault(event["bind_id"], []).append(event)
    for flow_id, chain in links.items():
        kinds = [(e.get("flow_in", False), e.get("flow_out", False)) for e in chain]
        assert kinds[0] == (False, True), f"flow {flow_id} does not start with a flow_out"
        assert kinds[-1] == (True, False), f"flow {flow_id} does not end with a flow_in"
        assert all(k == (True, True) for k in kinds[1:-1])
        assert [e["ts"] for e in chain] == sorted(e["ts"] for e in chain)


def test_tracks_become_named_processes_and_threads():
    doc = chrome_trace(_recording(), {"preset": "j5"})
    validate_chrome_trace(doc)
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert sorted(procs.values()) == ["bpu", "ddr", "host"]
    by_name = {v: k for k, v in procs.items()}
    assert (by_name["bpu"], "core0") in threads
    assert (by_name["host"], "main") in threads
    assert doc["otherData"] == {"preset": "j5"}


def test_slices_are_in_microseconds_and_sorted_with_parents_first():
    doc = chrome_trace(_recording())
    timed = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    assert [e["ts"] for e in timed] == sorted(e["ts"] for e in timed)
    task, layer = (e for e in timed if e["ph"] == "X" and e["ts"] == 0)
    assert (task["name"], task["dur"], task["args"]) == ("task", 3.0, {"priority": 255})
    assert (layer["name"], layer["dur"]) == ("layer", 1.0)
    counter = next(e for e in timed if e["ph"] == "C")
    assert counter["ts"] == 0.5 and counter["args"] == {"transfers": 1, "gb_per_s": 12.5}


def test_disabled_recorder_records_nothing():
    rec = TraceRecorder(False)
    rec.track("soc.ddr").slice("x", 0, 1)
    rec.track("soc.ddr").counter("c", 0, v=1.0)
    assert rec.recording.slices == [] and rec.recording.counters == []


def test_flows_link_an_api_call_to_every_piece_of_the_task_it_submitted():
    import emu
    from emu.soc.sched import Stage, Task

    with emu.Session(overrides=["bpu.task_overhead_ps=0", "bpu.cores=1", "cpu.api_call_ps=100"],
                     trace=True) as s:
        main = s.main
        low = main.submit(s.soc.bpu, Task("low", [Stage("a", 5000), Stage("b", 5000)]))
        main.sleep(1000)
        high = main.submit(s.soc.bpu, Task("high", [Stage("c", 100)], priority=255))
        main.wait(low)
        main.wait(high)
    doc = chrome_trace(s.soc.recorder.recording)
    validate_chrome_trace(doc)
    chains = {}
    for e in doc["traceEvents"]:
        if "bind_id" in e:
            chains.setdefault(e["bind_id"], []).append(e["name"])
    # `low` is preempted after its first layer: its flow steps through both pieces.
    assert sorted(chains.values()) == [["submit", "high"], ["submit", "low", "low"]]

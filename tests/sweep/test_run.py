"""Running sweeps: rows in spec order, a failing point recorded while the others run,
stored points reused by any sweep, an unfinished run finished only with --resume, and the
two promises of the store under real processes: a sweep killed with SIGKILL and resumed
loses and recomputes no finished point, and two sweeps writing one store do not corrupt it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import emu.sweep
from emu.cli.main import main
from emu.errors import InputError
from emu.sweep import spec as spec_module
from emu.sweep.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _data(shapes=("8,100", "16,100"), freqs=("400MHz", "1GHz")):
    return {"scenario": {"command": "dsp", "args": ["softmax"],
                         "metrics": {"total": "total_ms", "cycles": "cores.0.kernel_cycles"}},
            "axes": {"mode": "grid", "--shape": list(shapes), "vdsp.freq_hz": list(freqs)}}


def test_rows_come_in_spec_order_and_a_failing_point_does_not_stop_the_sweep(tmp_path):
    data = _data(shapes=("8,100", "4000,100000", "16,100"))  # the middle one: no pool room
    rows = emu.sweep.run(data, workers=0, store=tmp_path / "s.sqlite")
    assert [r["axes"]["--shape"] for r in rows] == ["8,100"] * 2 + ["4000,100000"] * 2 + \
        ["16,100"] * 2
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "error", "ok", "ok"]
    assert "mem.pool_bytes" in rows[2]["error"] and "\n" not in rows[2]["error"]
    assert rows[0]["metrics"]["total"] > rows[1]["metrics"]["total"] > 0  # 400MHz is slower
    assert not any(r["cached"] for r in rows)
    again = emu.sweep.run(data, workers=0, store=tmp_path / "s.sqlite")
    assert all(r["cached"] for r in again)  # the failure is stored too: not run again
    assert [(r["metrics"], r["status"], r["error"]) for r in again] == \
        [(r["metrics"], r["status"], r["error"]) for r in rows]


def test_a_sweep_with_a_failed_point_exits_1_after_its_table(write_spec, tmp_path, capsys):
    path = write_spec('[scenario]\ncommand = "dsp"\nargs = ["softmax"]\n'
                      'metrics = { t = "total_ms" }\n[axes]\n"--shape" = ["8,100", '
                      '"4000,100000"]\n')
    emu.sweep.run(path, workers=0, store=path.with_suffix(".sqlite"))  # the CLI reads them
    assert main(["sweep", "run", str(path), "--quiet"]) == 1
    out, err = capsys.readouterr()
    assert "2 points, 2 from the store" in out
    assert err.startswith("emu: point 2 failed: ") and "mem.pool_bytes" in err
    assert main(["sweep", "run", str(path), "--json", "--quiet"]) == 1
    out, err = capsys.readouterr()
    doc = json.loads(out)  # the contract's keys at the top, in the one envelope
    assert [p["status"] for p in doc["points"]] == ["ok", "error"]
    assert set(doc["points"][0]) == {"axes", "metrics", "status", "error", "key"}
    assert doc["store"] == str(path.with_suffix(".sqlite")) and doc["metrics"] == {"t": "total_ms"}
    assert doc["command"] == "sweep run" and doc["scenario"] == {"command": "dsp",
                                                                 "args": ["softmax"]}
    assert doc["provenance"]["preset"] == doc["preset"] == "j5"  # the spec's base hardware
    assert doc["config"]["vdsp"]["cores"] == 2 and doc["sweep"]["names"] == ["--shape"]
    assert doc["wall_clock"]["points_from_store"] == [1, 2]
    assert err.startswith("emu: point 2 failed: ")


def test_sweep_run_reads_and_expands_its_spec_once(write_spec, monkeypatch, capsys):
    """The envelope's base hardware and the run read the same loaded spec: expanding a
    spec resolves every point's configuration, which a large spec pays for in minutes."""
    from emu.sweep import spec as spec_module

    path = write_spec('[scenario]\ncommand = "dsp"\nargs = ["softmax"]\n'
                      'metrics = { t = "total_ms" }\n[axes]\n"--shape" = ["8,100"]\n')
    loads = []
    real = spec_module.load
    monkeypatch.setattr(spec_module, "load", lambda where, progress=None:
                        loads.append(where) or real(where, progress))
    assert main(["sweep", "run", str(path), "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["points"][0]["status"] == "ok"
    assert loads == [str(path)]


def test_points_stored_by_another_sweep_are_reused(tmp_path):
    store = tmp_path / "s.sqlite"
    first = emu.sweep.run(_data(freqs=("400MHz",)), workers=0, store=store)
    with Store(store) as db:
        before = db.get([r["key"] for r in first])
    data = _data(freqs=("400MHz", "1GHz"))
    data["scenario"]["metrics"] = {"calls": "calls_ms"}  # other metrics, same points
    rows = emu.sweep.run(data, workers=0, store=store)
    assert [r["cached"] for r in rows] == [True, False, True, False]
    assert rows[0]["metrics"]["calls"] > 0
    with Store(store) as db:
        after = db.get([r["key"] for r in first])
    assert after == before  # neither recomputed nor rewritten


class _Flaky:
    """An executor (the protocol of emu.sweep.runner) whose second item's worker dies."""

    def map_unordered(self, fn, items):
        for index, item in reversed(list(enumerate(items))):
            if index == 1:
                yield index, {"status": "error", "error": "worker failed: it died",
                              "transient": True}
            else:
                yield index, fn(item)


def test_a_point_whose_worker_died_is_not_stored_and_runs_again(tmp_path):
    store = tmp_path / "s.sqlite"
    rows = emu.sweep.run(_data(), executor=_Flaky(), store=store)
    assert [r["status"] for r in rows] == ["ok", "error", "ok", "ok"]
    assert rows[1]["error"] == "worker failed: it died"
    with pytest.raises(InputError, match="unfinished run"):
        emu.sweep.run(_data(), workers=0, store=store)
    again = emu.sweep.run(_data(), workers=0, store=store, resume=True)
    assert [r["cached"] for r in again] == [True, False, True, True]
    assert all(r["status"] == "ok" for r in again)


def test_an_unknown_metric_in_a_report_is_the_points_error():
    data = _data(shapes=("8,100",), freqs=("1GHz",))
    data["scenario"]["metrics"] = {"far": "cores.7.compute_ms"}
    rows = emu.sweep.run(data, workers=0)
    assert rows[0]["status"] == "error" and "no '7' at cores" in rows[0]["error"]


def test_an_unfinished_run_is_finished_only_with_resume(tmp_path):
    spec = spec_module.parse(_data())
    store = tmp_path / "s.sqlite"
    with Store(store) as db:  # as a killed run leaves it: begun, one point stored
        db.begin_sweep(spec.key, emu.sweep.describe(spec), [p.key for p in spec.points],
                       [p.axes for p in spec.points])
    with pytest.raises(InputError, match=r"unfinished run of this sweep \(0 of 4 points"):
        emu.sweep.run(spec, workers=0, store=store)
    rows = emu.sweep.run(spec, workers=0, store=store, resume=True)
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert emu.sweep.run(spec, workers=0, store=store)[0]["cached"]  # finished: plain rerun


def test_the_command_line_refuses_a_bad_spec_with_one_line(write_spec, capsys):
    path = write_spec('[scenario]\ncommand = "dsp"\nargs = ["softmax"]\n'
                      'metrics = { t = "total_ms" }\n[axes]\n"vdsp.freq" = [1]\n')
    assert main(["sweep", "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'vdsp.freq': unknown configuration key" in err
    assert not path.with_suffix(".sqlite").exists()
    assert main(["sweep", "run", str(path), "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


SLOW_SPEC = """
[scenario]
command = "dsp"
args = ["softmax", "--shape", "256,1000"]
metrics = { total = "total_ms", calls = "calls_ms" }

[axes]
mode = "grid"
"vdsp.freq_hz" = ["500MHz", "1GHz"]
"--rpcs" = [1, 2, 3, 4]
"""


def _sweep(spec: Path, store: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "emu", "sweep", "run", str(spec),
                             "--store", str(store), "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)


def _stored(store: Path) -> dict[str, tuple[float, int]]:
    try:
        db = sqlite3.connect(store, timeout=30)
        try:
            return {k: (c, r) for k, c, r in db.execute("SELECT key, created, rowid FROM points")}
        finally:
            db.close()
    except sqlite3.OperationalError:  # not created yet
        return {}


def _points(done: subprocess.CompletedProcess | tuple[str, str]) -> list[dict]:
    out = done[0] if isinstance(done, tuple) else done.stdout
    return json.loads(out)["points"]


def test_a_sweep_killed_with_sigkill_resumes_losing_and_recomputing_nothing(write_spec,
                                                                              tmp_path):
    spec = write_spec(SLOW_SPEC)
    store, whole = tmp_path / "killed.sqlite", tmp_path / "whole.sqlite"
    sweep = _sweep(spec, store)
    deadline = time.monotonic() + 120
    while len(_stored(store)) < 2 and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(sweep.pid, signal.SIGKILL)  # the sweep and its workers, mid-run
    sweep.communicate()
    kept = _stored(store)
    assert 2 <= len(kept) < 8, "the kill came too late to test anything"

    refused = _sweep(spec, store).communicate()
    assert "give --resume" in refused[1]
    resumed = _sweep(spec, store, "--resume")
    out, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err
    reference = _sweep(spec, whole)
    ref_out, ref_err = reference.communicate(timeout=180)
    assert reference.returncode == 0, ref_err

    after = _stored(store)
    assert len(after) == 8
    assert {k: after[k] for k in kept} == kept  # finished points were not recomputed
    points, expected = _points((out, err)), _points((ref_out, ref_err))
    assert [(p["axes"], p["metrics"], p["status"]) for p in points] == \
        [(p["axes"], p["metrics"], p["status"]) for p in expected]
    assert all(p["status"] == "ok" for p in points)
    db = sqlite3.connect(store)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


def test_two_sweeps_writing_one_store_at_once(write_spec, tmp_path):
    # Small points (a few seconds per sweep, most of it starting workers): the two sweeps
    # start together and write while both run; what is tested is the store, not the points.
    store = tmp_path / "shared.sqlite"
    quick = SLOW_SPEC.replace('"256,1000"', '"8,100"')
    assert quick != SLOW_SPEC
    one = write_spec(quick.replace('"1GHz"]', '"1GHz", "800MHz"]'), "one.toml")
    two = write_spec(quick.replace('["500MHz", ', '["600MHz", '), "two.toml")
    sweeps = [_sweep(one, store), _sweep(two, store)]
    results = [s.communicate(timeout=180) for s in sweeps]
    assert [s.returncode for s in sweeps] == [0, 0], [r[1] for r in results]
    first, second = (_points(r) for r in results)
    assert len(first) == 12 and len(second) == 8
    assert all(p["status"] == "ok" for p in first + second)
    shared = {p["key"]: p["metrics"] for p in first}
    assert all(shared[p["key"]] == p["metrics"] for p in second if p["key"] in shared)
    db = sqlite3.connect(store)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM points").fetchone()[0] == 16  # 4 shared
    db.close()

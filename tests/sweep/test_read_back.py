"""`emu sweep show|export|plot`: a sweep read back from its store, nothing run."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import emu.sweep
from emu.cli.main import main

SPEC = """
[scenario]
command = "dsp"
args = ["softmax", "--shape", "8,100"]
metrics = { total = "total_ms", cycles = "cores.0.kernel_cycles" }

[axes]
mode = "grid"
"vdsp.freq_hz" = ["400MHz", "1GHz"]
"vdsp.idma.channels" = [1, 2]
"""


@pytest.fixture
def swept(write_spec):
    spec = write_spec(SPEC)
    rows = emu.sweep.run(spec, workers=0, store=spec.with_suffix(".sqlite"))
    assert [r["status"] for r in rows] == ["ok"] * 4
    return spec, rows


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_reads_the_store_and_runs_nothing(swept, capsys):
    spec, rows = swept
    code, out, _ = _run(capsys, "sweep", "show", str(spec), "--json")
    assert code == 0
    doc = json.loads(out)
    assert [p["total"] for p in doc["points"]] == [r["metrics"]["total"] for r in rows]
    assert all(r["cached"] for r in emu.sweep.stored(spec, spec.with_suffix(".sqlite")))
    code, out, _ = _run(capsys, "sweep", "show", str(spec), "--columns", "vdsp.freq_hz,cycles")
    assert code == 0 and "1GHz" in out and "cycles" in out


def test_a_point_not_stored_shows_as_missing(swept, write_spec):
    spec, _ = swept
    more = write_spec(SPEC.replace('["400MHz", "1GHz"]', '["400MHz", "1GHz", "800MHz"]'),
                      "more.toml")
    rows = emu.sweep.stored(more, spec.with_suffix(".sqlite"))
    assert [r["status"] for r in rows] == ["ok"] * 4 + ["missing"] * 2


def test_export_writes_csv_and_plot_writes_each_chart(swept, capsys, tmp_path):
    spec, rows = swept
    out_csv = tmp_path / "points.csv"
    assert _run(capsys, "sweep", "export", str(spec), "-o", str(out_csv))[0] == 0
    table = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert [float(r["total"]) for r in table] == [r["metrics"]["total"] for r in rows]
    charts = {
        "line.png": ["line", "--x", "vdsp.freq_hz", "--y", "total", "--series",
                     "vdsp.idma.channels"],
        "heat.svg": ["heatmap", "--x", "vdsp.freq_hz", "--y", "vdsp.idma.channels",
                     "--metric", "cycles"],
        "front.png": ["pareto", "--a", "total", "--b", "cycles"],
        "fixed.png": ["line", "--x", "vdsp.freq_hz", "--y", "total", "--where",
                      "vdsp.idma.channels=2"],
    }
    for name, argv in charts.items():
        target = tmp_path / name
        code, _, err = _run(capsys, "sweep", "plot", str(spec), *argv, "-o", str(target))
        assert code == 0, err
        first = target.read_bytes()
        assert first.startswith(b"\x89PNG" if name.endswith("png") else b"<?xml")
        _run(capsys, "sweep", "plot", str(spec), *argv, "-o", str(target))
        assert target.read_bytes() == first  # same rows, same bytes


@pytest.mark.parametrize(("argv", "needle"), [
    (["plot", "{spec}", "line", "--x", "vdsp.freq_hz", "-o", "{t}/x.png"], "needs --y"),
    (["plot", "{spec}", "line", "--x", "nope", "--y", "total", "-o", "{t}/x.png"], "nope"),
    (["plot", "{spec}", "line", "--x", "vdsp.freq_hz", "--y", "total", "-o", "{t}/x.gif"],
     ".png or .svg"),
    (["plot", "{spec}", "line", "--x", "vdsp.freq_hz", "--y", "total", "--where",
      "vdsp.idma.channels=7", "-o", "{t}/x.png"], "no point has"),
    (["export", "{spec}", "-o", "{t}/x.xlsx"], ".csv or .parquet"),
    (["show", "{spec}", "--store", "{t}/none.sqlite"], "no such file"),
    (["show", "{spec}", "--columns", "speed"], "unknown column"),
])
def test_bad_read_back_requests_exit_2_with_one_line(swept, capsys, tmp_path, argv, needle):
    spec, _ = swept
    words = [w.replace("{spec}", str(spec)).replace("{t}", str(tmp_path)) for w in argv]
    code, out, err = _run(capsys, "sweep", *words)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "x.gif").exists()


def test_a_store_the_user_may_not_write_is_read_and_left_as_it_was(swept, capsys,
                                                                      monkeypatch):
    # Permission bits do not stop root (these tests may run as root), so the store's
    # os.access answers "not writable" here: it is opened read-only, and the -wal and -shm
    # files SQLite makes for a read-only reader of a WAL store are removed after.
    from emu.sweep import store as store_module

    spec, rows = swept
    path = spec.with_suffix(".sqlite")
    before = sorted(p.name for p in path.parent.iterdir())
    real_access = os.access
    monkeypatch.setattr(store_module.os, "access",
                        lambda p, mode: False if str(p) == str(path) else real_access(p, mode))
    code, out, err = _run(capsys, "sweep", "show", str(spec), "--json")
    assert code == 0, err
    assert [p["total"] for p in json.loads(out)["points"]] == [r["metrics"]["total"]
                                                               for r in rows]
    assert sorted(p.name for p in path.parent.iterdir()) == before


def test_a_store_that_cannot_be_written_fails_the_run_in_one_line(swept, write_spec, capsys,
                                                                  monkeypatch):
    # A new point to store, into a store SQLite may only read (as on a read-only disk).
    from emu.sweep import store as store_module

    spec, _ = swept
    path = spec.with_suffix(".sqlite")
    more = write_spec(SPEC.replace('["400MHz", "1GHz"]', '["400MHz", "1GHz", "800MHz"]'),
                      "more.toml")
    real_connect = store_module.sqlite3.connect

    def read_only(target, **options):
        if str(target) != str(path):
            return real_connect(target, **options)
        return real_connect(path.resolve().as_uri() + "?mode=ro", uri=True, **options)

    monkeypatch.setattr(store_module.sqlite3, "connect", read_only)
    code, out, err = _run(capsys, "sweep", "run", str(more), "--store", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"store {path}" in err and "read-only" in err, err


def test_a_table_name_that_is_no_utf8_is_refused_in_one_line(swept, capsys, tmp_path):
    # Found by the random damage below: SQLite hands the name back, Python fails to decode
    # it (a UnicodeDecodeError, not an SQLite error), and that escaped as a traceback.
    spec, _ = swept
    data = bytearray(spec.with_suffix(".sqlite").read_bytes())
    at = data.find(b"tablepoints")  # the schema's row: type, then the table's name
    assert at > 0
    data[at + len("table")] = 0x80
    store = tmp_path / "damaged.sqlite"
    store.write_bytes(bytes(data))
    code, out, err = _run(capsys, "sweep", "show", str(spec), "--store", str(store))
    assert code == 2 and out == "" and err.count("\n") == 1 and f"store {store}" in err, err


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.integers(0, 1 << 20), st.binary(min_size=1, max_size=64)),
                       min_size=1, max_size=4),
       cut=st.none() | st.integers(0, 1 << 20))
def test_a_store_damaged_anywhere_reads_or_is_refused_in_one_line(swept, capsys, tmp_path,
                                                                  damage, cut):
    # Random bytes written anywhere in a real store, or the file cut short: `sweep show`
    # prints the points it can read or refuses in one line (exit 2), never a traceback.
    spec, _ = swept
    original = spec.with_suffix(".sqlite").read_bytes()
    data = bytearray(original)
    for at, chunk in damage:
        at %= len(data)
        data[at: at + len(chunk)] = chunk
    if cut is not None:
        data = data[: cut % len(data)]
    store = tmp_path / "damaged.sqlite"
    store.write_bytes(bytes(data))
    for extra in ("-wal", "-shm"):
        (tmp_path / f"damaged.sqlite{extra}").unlink(missing_ok=True)
    code, out, err = _run(capsys, "sweep", "show", str(spec), "--store", str(store), "--json")
    if code == 0:
        assert len(json.loads(out)["points"]) == 4
    else:
        assert code == 2 and out == "" and err.count("\n") == 1, err

"""The sweep store: points kept once by key, read back whole, a foreign file refused, and
several processes writing one store at once without losing or corrupting a row."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pytest

from emu.errors import InputError
from emu.sweep.store import Store


def _put(db, key, status="ok", report=None):
    return db.put(key, command="dsp", args=["dsp", "ping"], axes={"a": 1}, config={"x": 1},
                  status=status, metrics={"m": 1}, report=report, error=None, seconds=0.5)


def test_a_point_is_kept_once_and_read_back(tmp_path):
    with Store(tmp_path / "s.sqlite") as db:
        assert _put(db, "k1", report={"total_ms": 1.5, "rows": [1, 2]})
        assert not _put(db, "k1", report={"total_ms": 9.9})  # first come first kept
        _put(db, "k2", status="error")
    with Store(tmp_path / "s.sqlite") as db:
        rows = db.get(["k2", "k1", "k3"])
        assert set(rows) == {"k1", "k2"}
        assert rows["k1"]["report"] == {"total_ms": 1.5, "rows": [1, 2]}
        assert rows["k1"]["args"] == ["dsp", "ping"] and rows["k2"]["report"] is None
        assert db.missing(["k3", "k1", "k3"]) == ["k3"]
        mode = db._db.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_sweeps_are_recorded_and_finished(tmp_path):
    with Store(tmp_path / "s.sqlite") as db:
        db.begin_sweep("s1", {"command": "dsp"}, ["k1", "k2"], [{"a": 1}, {"a": 2}])
        assert db.sweep("s1")["finished"] is None
        db.finish_sweep("s1")
        record = db.sweep("s1")
        assert record["finished"] is not None and record["keys"] == ["k1", "k2"]
        assert [s["spec_key"] for s in db.sweeps()] == ["s1"] and db.sweep("s2") is None


def test_a_file_that_is_not_a_store_is_refused(tmp_path):
    (tmp_path / "text.sqlite").write_text("hello, not a database " * 100)
    with pytest.raises(InputError, match="not a usable SQLite store"):
        Store(tmp_path / "text.sqlite")
    other = sqlite3.connect(tmp_path / "other.sqlite")
    other.execute("CREATE TABLE t (x)")
    other.commit()
    other.close()
    with pytest.raises(InputError, match="not an emu sweep store"):
        Store(tmp_path / "other.sqlite")
    with pytest.raises(InputError, match="is a folder"):
        Store(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        Store(tmp_path / "no" / "s.sqlite")


def _writer(path: str, name: str, count: int) -> None:
    with Store(path) as db:
        for k in range(count):
            _put(db, f"{name}-{k}", report={"k": k})
            _put(db, f"shared-{k}", report={"by": name})


def test_processes_writing_one_store_at_once(tmp_path):
    path = str(tmp_path / "s.sqlite")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(path, f"w{n}", 150)) for n in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    with Store(path) as db:
        assert db._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db._db.execute("SELECT count(*) FROM points").fetchone()[0] == 4 * 150
        rows = db.get([f"w1-{k}" for k in range(150)])
        assert [rows[f"w1-{k}"]["report"]["k"] for k in range(150)] == list(range(150))

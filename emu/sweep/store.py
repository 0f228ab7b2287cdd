"""The sweep store: a SQLite file holding one row per finished point, keyed by its content.

Table `points`: `key` (the point's content hash, `runner.point_key`: resolved
configuration, command, arguments, seed, emu version) as primary key, then `command`,
`args` (JSON), `axes` (JSON, the axes of the sweep that computed it), `config` (JSON, the
resolved configuration), `status` ("ok" or "error"), `metrics` (JSON, those the computing
sweep asked for), `report` (the command's JSON report, zlib-compressed), `error`,
`seconds` (the command's wall time), `emu_version` and `created` (Unix time).

Table `sweeps`: one row per sweep run into the store: `spec_key` (a hash of its points'
keys in order), the `spec` (command, arguments, metrics, hardware, axes, as JSON), `keys`
(JSON list, spec order), `axes` (JSON list of each point's axis values, spec order),
`started` and `finished` (NULL while unfinished). `emu sweep show` and the exports read the
points of a sweep back in spec order from these.

Durability: the file is in WAL mode, and each finished point is committed on its own
(`INSERT OR IGNORE`) the moment its result arrives, so a sweep killed at any moment (SIGKILL
included) loses at most the points still running, and SQLite's journal keeps the file whole.
Several sweeps may write one store at once (`busy_timeout` makes a writer wait for the
other's short transaction); a point both compute is kept once, first come first kept.
"""

from __future__ import annotations

import json
import sqlite3
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emu.errors import InputError

FORMAT = 1  # PRAGMA user_version of a store
BUSY_TIMEOUT_MS = 60_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS points (
    key TEXT PRIMARY KEY,
    command TEXT NOT NULL,
    args TEXT NOT NULL,
    axes TEXT NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL,
    metrics TEXT NOT NULL,
    report BLOB,
    error TEXT,
    seconds REAL,
    emu_version TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sweeps (
    spec_key TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    keys TEXT NOT NULL,
    axes TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL
);
"""


class Store:
    """An open store (`path` a file, or ":memory:" for one that lives as long as the
    object)."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        where = f"store {self.path}"
        if self.path != ":memory:":
            target = Path(self.path)
            if target.is_dir():
                raise InputError(f"{where}: is a folder")
            if not target.parent.is_dir():
                raise InputError(f"{where}: folder {target.parent} does not exist")
        try:
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000,
                                       isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            tables = {row[0] for row in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = self._db.execute("PRAGMA user_version").fetchone()[0]  # read second
            if tables and not {"points", "sweeps"} <= tables:
                raise InputError(f"{where}: a SQLite file, but not an emu sweep store")
            if tables and version != FORMAT:
                raise InputError(f"{where}: a store of format {version}, this emu reads "
                                 f"format {FORMAT}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            if not tables:
                # one transaction: another process opening the new store sees all or none
                self._db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} "
                                       f"PRAGMA user_version = {FORMAT}; COMMIT;")
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{where}: not a usable SQLite store ({exc})") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored points among `keys`, by key (the report decompressed)."""
        found: dict[str, dict[str, Any]] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            chunk = unique[start:start + 500]
            marks = ",".join("?" * len(chunk))
            cursor = self._db.execute(
                f"SELECT key, command, args, axes, config, status, metrics, report, error, "
                f"seconds, emu_version, created, rowid FROM points WHERE key IN ({marks})",
                chunk)
            for row in cursor:
                found[row[0]] = _row(row)
        return found

    def put(self, key: str, *, command: str, args: Sequence[str], axes: dict[str, Any],
            config: dict[str, Any], status: str, metrics: dict[str, Any],
            report: Any, error: str | None, seconds: float | None) -> bool:
        """Store one finished point, committed at once; False if the key was there."""
        from emu import __version__

        blob = None if report is None else zlib.compress(
            json.dumps(report, separators=(",", ":")).encode("utf-8"), 6)
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO points (key, command, args, axes, config, status, metrics, "
            "report, error, seconds, emu_version, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (key, command, json.dumps(list(args)), json.dumps(axes), json.dumps(config),
             status, json.dumps(metrics), blob, error, seconds, __version__, time.time()))
        return cursor.rowcount == 1

    def sweep(self, spec_key: str) -> dict[str, Any] | None:
        """The record of a sweep run into this store, or None."""
        row = self._db.execute("SELECT spec, keys, axes, started, finished FROM sweeps "
                               "WHERE spec_key = ?", (spec_key,)).fetchone()
        if row is None:
            return None
        return {"spec_key": spec_key, "spec": json.loads(row[0]), "keys": json.loads(row[1]),
                "axes": json.loads(row[2]), "started": row[3], "finished": row[4]}

    def sweeps(self) -> list[dict[str, Any]]:
        """Every sweep run into this store, oldest first."""
        keys = [r[0] for r in self._db.execute("SELECT spec_key FROM sweeps ORDER BY started")]
        return [s for s in (self.sweep(k) for k in keys) if s is not None]

    def begin_sweep(self, spec_key: str, spec: dict[str, Any], keys: Sequence[str],
                    axes: Sequence[dict[str, Any]]) -> None:
        """Record that a sweep starts (kept as it was if it ran before)."""
        self._db.execute("INSERT OR IGNORE INTO sweeps (spec_key, spec, keys, axes, started) "
                         "VALUES (?,?,?,?,?)",
                         (spec_key, json.dumps(spec), json.dumps(list(keys)),
                          json.dumps(list(axes)), time.time()))

    def finish_sweep(self, spec_key: str) -> None:
        self._db.execute("UPDATE sweeps SET finished = ? WHERE spec_key = ? AND finished IS "
                         "NULL", (time.time(), spec_key))

    def missing(self, keys: Sequence[str]) -> list[str]:
        """Those of `keys` with no stored point, in order, once each."""
        have = set()
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            chunk = unique[start:start + 500]
            marks = ",".join("?" * len(chunk))
            have |= {r[0] for r in self._db.execute(
                f"SELECT key FROM points WHERE key IN ({marks})", chunk)}
        return [k for k in unique if k not in have]


def _row(row: Sequence[Any]) -> dict[str, Any]:
    report = None if row[7] is None else json.loads(zlib.decompress(row[7]).decode("utf-8"))
    return {"key": row[0], "command": row[1], "args": json.loads(row[2]),
            "axes": json.loads(row[3]), "config": json.loads(row[4]), "status": row[5],
            "metrics": json.loads(row[6]), "report": report, "error": row[8],
            "seconds": row[9], "emu_version": row[10], "created": row[11], "rowid": row[12]}

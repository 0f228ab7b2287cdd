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

A damaged store is an input error, never a traceback: SQLite's own errors (a damaged page,
a file that cannot be written) and a row whose JSON or compressed report does not decode
name the store and, for a row, the point. `read_only` opens a store to read it back
(`show`, `export`, `plot`): nothing is created or written, and a file the user may not
write is opened read-only, its `-wal` and `-shm` files removed after if the open made them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

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


_Method = TypeVar("_Method", bound=Callable[..., Any])


# What SQLite raises on a damaged file: its own errors, and a text value (a table's name, a
# row's key) whose bytes are no UTF-8, which Python's sqlite3 fails to decode.
_DAMAGE = (sqlite3.DatabaseError, UnicodeDecodeError)


def _sql(what: str) -> Callable[[_Method], _Method]:
    """A store method whose SQLite errors become one-line input errors naming the store."""

    def wrap(method: _Method) -> _Method:
        @functools.wraps(method)
        def checked(self: Store, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except _DAMAGE as exc:
                hint = " (is the file or its folder read-only?)" if "readonly" in str(exc) \
                    else " (the file is damaged: remove it or use another store)"
                raise InputError(f"store {self.path}: {what}: {exc}{hint}") from None

        return checked  # type: ignore[return-value]

    return wrap


class Store:
    """An open store (`path` a file, or ":memory:" for one that lives as long as the
    object); `read_only` to read an existing one back (module docstring)."""

    def __init__(self, path: str | Path = ":memory:", *, read_only: bool = False) -> None:
        self.path = str(path)
        self._made: list[Path] = []  # -wal and -shm files a read-only open created
        where = f"store {self.path}"
        if self.path != ":memory:":
            target = Path(self.path)
            if target.is_dir():
                raise InputError(f"{where}: is a folder")
            if not target.parent.is_dir():
                raise InputError(f"{where}: folder {target.parent} does not exist")
            if read_only and not target.is_file():
                raise InputError(f"{where}: no such file (run the sweep first)")
        try:
            self._db = self._connect(read_only)
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            tables = {row[0] for row in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = self._db.execute("PRAGMA user_version").fetchone()[0]  # read second
            if tables and not {"points", "sweeps"} <= tables:
                raise InputError(f"{where}: a SQLite file, but not an emu sweep store")
            if tables and version != FORMAT:
                raise InputError(f"{where}: a store of format {version}, this emu reads "
                                 f"format {FORMAT}")
            if read_only:
                if not tables:
                    raise InputError(f"{where}: an empty SQLite file, not an emu sweep store")
                return
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            if not tables:
                # one transaction: another process opening the new store sees all or none
                self._db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} "
                                       f"PRAGMA user_version = {FORMAT}; COMMIT;")
        except _DAMAGE as exc:
            self.close()
            raise InputError(f"{where}: not a usable SQLite store ({exc})") from None
        except BaseException:  # a refusal above: the connection goes too
            self.close()
            raise

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        """A connection; read-only through SQLite's URI when the user may not write the
        file (a read-write connection cleans its -wal and -shm files up as it closes)."""
        options: dict[str, Any] = {"timeout": BUSY_TIMEOUT_MS / 1000, "isolation_level": None}
        if not read_only or os.access(self.path, os.W_OK):
            return sqlite3.connect(self.path, **options)
        self._made = [p for p in (Path(self.path + "-wal"), Path(self.path + "-shm"))
                      if not p.exists()]
        uri = Path(self.path).resolve().as_uri() + "?mode=ro"
        return sqlite3.connect(uri, uri=True, **options)

    def close(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()
        for made in self._made:  # nobody may write this file: nobody else uses them
            made.unlink(missing_ok=True)
        self._made = []

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @_sql("reading points")
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
                found[row[0]] = _row(row, self.path)
        return found

    @_sql("storing a point")
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

    @_sql("reading a sweep")
    def sweep(self, spec_key: str) -> dict[str, Any] | None:
        """The record of a sweep run into this store, or None."""
        row = self._db.execute("SELECT spec, keys, axes, started, finished FROM sweeps "
                               "WHERE spec_key = ?", (spec_key,)).fetchone()
        if row is None:
            return None
        with _decoding(self.path, f"the record of sweep {spec_key}"):
            return {"spec_key": spec_key, "spec": json.loads(row[0]),
                    "keys": json.loads(row[1]), "axes": json.loads(row[2]),
                    "started": row[3], "finished": row[4]}

    @_sql("reading the sweeps")
    def sweeps(self) -> list[dict[str, Any]]:
        """Every sweep run into this store, oldest first."""
        keys = [r[0] for r in self._db.execute("SELECT spec_key FROM sweeps ORDER BY started")]
        return [s for s in (self.sweep(k) for k in keys) if s is not None]

    @_sql("recording a sweep")
    def begin_sweep(self, spec_key: str, spec: dict[str, Any], keys: Sequence[str],
                    axes: Sequence[dict[str, Any]]) -> None:
        """Record that a sweep starts (kept as it was if it ran before)."""
        self._db.execute("INSERT OR IGNORE INTO sweeps (spec_key, spec, keys, axes, started) "
                         "VALUES (?,?,?,?,?)",
                         (spec_key, json.dumps(spec), json.dumps(list(keys)),
                          json.dumps(list(axes)), time.time()))

    @_sql("recording a sweep")
    def finish_sweep(self, spec_key: str) -> None:
        self._db.execute("UPDATE sweeps SET finished = ? WHERE spec_key = ? AND finished IS "
                         "NULL", (time.time(), spec_key))

    @_sql("reading points")
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


@contextlib.contextmanager
def _decoding(path: str, what: str) -> Iterator[None]:
    """Turn a value of the store that does not decode into an input error naming it."""
    try:
        yield
    except (ValueError, TypeError, zlib.error) as exc:  # JSON and UTF-8 errors are ValueErrors
        raise InputError(f"store {path}: {what} is damaged ({type(exc).__name__}: {exc}); "
                         f"remove the file or use another store") from None


def _row(row: Sequence[Any], path: str) -> dict[str, Any]:
    with _decoding(path, f"point {row[0]}"):
        report = (None if row[7] is None
                  else json.loads(zlib.decompress(row[7]).decode("utf-8")))
        return {"key": row[0], "command": row[1], "args": json.loads(row[2]),
                "axes": json.loads(row[3]), "config": json.loads(row[4]), "status": row[5],
                "metrics": json.loads(row[6]), "report": report, "error": row[8],
                "seconds": row[9], "emu_version": row[10], "created": row[11],
                "rowid": row[12]}

"""A sweep's rows as a text table, a CSV file or a Parquet file.

Every function here takes the rows `emu.sweep.run` returns (and the sweep store gives back):
one dict per point, `{"axes": {name: value}, "metrics": {name: value}, "status", "error",
"key", "cached", "seconds"}`, in the order of the spec. Nothing here runs anything or reads
the store, so the same rows always give the same text and the same bytes.

A column is named by an axis (`vdsp.freq_hz`), a metric (`dsp2_ms`) or one of the row's
own fields (`status`, `error`, `key`, `cached`, `seconds`). A name that is both an axis and
a metric is written `axes.NAME` or `metrics.NAME`; those spellings are accepted for any
name. Without a column list, the columns are every axis, then every metric (in the order
they first appear), then `status`.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from emu.errors import InputError
from emu.report.sweep_plots import names

Row = Mapping[str, Any]
FIELDS = ("status", "error", "key", "cached", "seconds")


def axis_names(rows: Sequence[Row]) -> list[str]:
    """Every axis of the rows, in the order they first appear."""
    return names(rows, "axes")


def metric_names(rows: Sequence[Row]) -> list[str]:
    """Every metric of the rows, in the order they first appear."""
    return names(rows, "metrics")


def default_columns(rows: Sequence[Row]) -> list[str]:
    """The columns shown when none are asked for: axes, metrics, then status."""
    return [*axis_names(rows), *metric_names(rows), "status"]


def select(rows: Sequence[Row], where: Mapping[str, str]) -> list[Row]:
    """The rows whose axes hold the given values, e.g. {"vdsp.tcm.bank_bytes": "128KiB"}
    (as `--where KEY=VALUE` would give them): a value matches as the spec wrote it, or as
    the same number (`1e9` matches 1000000000). One value per axis, as a chart that draws
    one axis against a metric needs the others fixed. Unknown axes, and conditions no row
    meets, raise InputError."""
    names = axis_names(rows)
    out = list(rows)
    for axis, wanted in where.items():
        if axis not in names:
            raise InputError(f"unknown axis {axis!r}: the axes are {_listing(names)}")
        out = [row for row in out if _same((row.get("axes") or {}).get(axis), wanted)]
    if rows and not out:
        shown = ", ".join(f"{axis}={wanted}" for axis, wanted in where.items())
        raise InputError(f"no point has {shown}")
    return out


def resolve_column(rows: Sequence[Row], name: str) -> tuple[str, str]:
    """Where column `name` lives in a row: ("axes", axis), ("metrics", metric) or
    ("field", field). Unknown and ambiguous names raise InputError listing the choices."""
    axes, metrics = axis_names(rows), metric_names(rows)
    section, _, rest = name.partition(".")
    if section in ("axes", "metrics") and rest in (axes if section == "axes" else metrics):
        return section, rest
    found = [where for where, names in (("axes", axes), ("metrics", metrics)) if name in names]
    if len(found) == 2:
        raise InputError(f"column {name!r} is both an axis and a metric: write axes.{name} or "
                         f"metrics.{name}")
    if found:
        return found[0], name
    if name in FIELDS:
        return "field", name
    raise InputError(f"unknown column {name!r}: the axes are {_listing(axes)}; the metrics "
                     f"are {_listing(metrics)}; the fields are {', '.join(FIELDS)}")


def value(row: Row, where: tuple[str, str]) -> Any:
    """The value of the column `resolve_column` found, in one row (None when the row has
    none, e.g. the metrics of a failed point)."""
    section, name = where
    if section == "field":
        return row.get(name)
    return (row.get(section) or {}).get(name)


def records(rows: Sequence[Row], columns: Sequence[str] | None = None
            ) -> tuple[list[str], list[list[Any]]]:
    """The column names and, per row, the values under them (checked names, as given)."""
    names = list(default_columns(rows) if columns is None else columns)
    if not names:
        raise InputError("no columns to show")
    wheres = [resolve_column(rows, name) for name in names]
    return names, [[value(row, where) for where in wheres] for row in rows]


def table(rows: Sequence[Row], columns: Sequence[str] | None = None, title: str = "") -> str:
    """The rows as a plain-text table (`emu.report.table.render`): a missing value shows as
    `-`, an error message in full."""
    names, values = records(rows, columns)
    return records_table(names, values, title)


def records_table(names: Sequence[str], values: Sequence[Sequence[Any]], title: str = "") -> str:
    """`records` as the plain-text table `table` prints."""
    from emu.report.table import render

    return render(list(names), [[_shown(v) for v in line] for line in values], title=title)


def csv_text(rows: Sequence[Row], columns: Sequence[str] | None = None) -> str:
    """The rows as CSV text: a header line, then one line per row. Numbers are written in
    full (the shortest text that reads back as the same float), a missing value as an empty
    field, true/false for flags, and lists or tables as JSON."""
    names, values = records(rows, columns)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    writer.writerows([[_csv_cell(v) for v in line] for line in values])
    return out.getvalue()


def write_csv(rows: Sequence[Row], path: str | Path,
              columns: Sequence[str] | None = None) -> None:
    """Write `csv_text` to `path`, whole or not at all (`write_atomic`)."""
    from emu.report.document import write_atomic

    write_atomic(path, csv_text(rows, columns))


def parquet_bytes(rows: Sequence[Row], columns: Sequence[str] | None = None) -> bytes:
    """The rows as a Parquet file's bytes (pyarrow): a column of numbers, flags or text
    keeps its type; a column that mixes them, or holds lists, is written as text (JSON)."""
    try:  # optional, and without type information: imported by name
        pa = importlib.import_module("pyarrow")
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise InputError("writing Parquet needs pyarrow: install it with pip install "
                         "pyarrow") from None
    names, values = records(rows, columns)
    arrays = []
    for k in range(len(names)):
        column = [line[k] for line in values]
        try:
            if any(isinstance(v, list | dict) for v in column):
                raise TypeError("nested values are written as text")
            arrays.append(pa.array(column))
        except (TypeError, ValueError, pa.ArrowException):
            arrays.append(pa.array([None if v is None else _text(v) for v in column],
                                   type=pa.string()))
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, names=names), buffer)
    return buffer.getvalue()


def write_parquet(rows: Sequence[Row], path: str | Path,
                  columns: Sequence[str] | None = None) -> None:
    """Write `parquet_bytes` to `path`, whole or not at all (`write_atomic`)."""
    from emu.report.document import write_atomic

    data = parquet_bytes(rows, columns)
    write_atomic(path, data)


def _same(item: Any, text: str) -> bool:
    """Whether axis value `item` is what `text` spells: the same text, or the same number."""
    if _text(item) == text:
        return True
    if isinstance(item, int | float) and not isinstance(item, bool):
        try:
            return float(text) == item
        except ValueError:
            return False
    return False


def _listing(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "(none)"


def _shown(item: Any) -> object:
    """A value as a table cell: numbers stay numbers (right-aligned), the rest is text."""
    if item is None:
        return "-"
    if isinstance(item, bool):
        return "yes" if item else "no"
    if isinstance(item, int | float):
        return item
    return _text(item)


def _csv_cell(item: Any) -> str:
    if item is None:
        return ""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, float):
        return repr(item) if math.isfinite(item) else ""
    return _text(item)


def _text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, list | dict | tuple):
        return json.dumps(item, separators=(",", ":"))
    return str(item)

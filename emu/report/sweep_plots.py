"""Charts of a sweep's rows (matplotlib): a metric along one axis, a heat map over two axes, a
Pareto front of two metrics.

The rows are the ones `emu.sweep.run` returns: `{"axes": {...}, "metrics": {...}, ...}` per
point. A point contributes when the metric asked for is a finite number in it (failed
points, whose metrics are missing, are left out). Each chart is returned as the bytes of a
PNG or an SVG file (`fmt`), and the same rows give the same bytes: no date or software
version in the file, fixed SVG element ids, the default style whatever the user's
matplotlibrc says.

An axis whose values are all numbers, or quantities of the hardware key it names
("400MHz" for `vdsp.freq_hz`), is drawn to scale in numeric order and labelled with the
values as the spec wrote them; any other axis is drawn as categories in the order of the
rows.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from emu.errors import InputError

Row = Mapping[str, Any]
FORMATS = ("png", "svg")
# Fixed so repeated runs write identical files: svg.hashsalt seeds the ids of SVG elements
# (random otherwise); fonts become paths, so the file does not depend on installed fonts
# being found the same way by a viewer.
_RC: Any = {"svg.hashsalt": "emu-sweep", "svg.fonttype": "path", "figure.dpi": 100,
       "savefig.dpi": 100}
_LABEL_LIMIT = 40  # points labelled on a Pareto chart before only the front is labelled


def _styled(draw: Callable[..., bytes]) -> Callable[..., bytes]:
    """Run a chart function under matplotlib's default style plus `_RC`, whatever the
    user's matplotlibrc or an earlier caller set, and restore the settings after."""

    @functools.wraps(draw)
    def run(*args: Any, **kwargs: Any) -> bytes:
        try:
            import matplotlib
            import matplotlib.style
        except ImportError:
            raise InputError("sweep charts are drawn with matplotlib: install it with pip "
                             "install 'emu[plot]'") from None
        with matplotlib.style.context("default"), matplotlib.rc_context(_RC):
            return draw(*args, **kwargs)

    return run


@_styled
def line(rows: Sequence[Row], x: str, y: str, series: str | None = None,
         fmt: str = "png", title: str = "") -> bytes:
    """Metric `y` against axis `x`, one line for each value of axis `series` (or a single
    line). Any other axis must hold one value among the rows drawn (filter the rows first),
    or points would pile up on each other."""
    _check_format(fmt)
    _check_axis(rows, x)
    if series is not None:
        _check_axis(rows, series)
        if series == x:
            raise InputError(f"the series axis {series!r} is the x axis too: pick another one")
    points = _numeric_rows(rows, y)
    _check_single(points, [x] if series is None else [x, series], y)
    xs = _Scale(points, x)
    groups: dict[Any, list[tuple[float, float]]] = {}
    for row in points:
        key = None if series is None else _key(row["axes"].get(series))
        groups.setdefault(key, []).append((xs.position(row["axes"].get(x)), row["metrics"][y]))
    order = list(groups) if series is None else _Scale(points, series).ordered(list(groups))
    fig, ax = _figure((7.0, 4.5))
    for key in order:
        pairs = sorted(groups[key])
        label = None if series is None else f"{series} = {_text_of(series, key)}"
        ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o", label=label)
    xs.ticks(ax)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(True, alpha=0.3)
    if series is not None:
        ax.legend(fontsize=8)
    ax.set_title(title or f"{y} against {x}")
    return _save(fig, fmt)


@_styled
def heatmap(rows: Sequence[Row], x: str, y: str, metric: str, fmt: str = "png",
            title: str = "") -> bytes:
    """Metric `metric` over axes `x` (columns) and `y` (rows), each cell coloured and
    annotated with its value; a combination no point measured is left blank."""
    _check_format(fmt)
    _check_axis(rows, x)
    _check_axis(rows, y)
    if x == y:
        raise InputError(f"a heat map needs two different axes, got {x!r} twice")
    points = _numeric_rows(rows, metric)
    _check_single(points, [x, y], metric)
    xs, ys = _Scale(rows, x), _Scale(rows, y)
    columns, lines = xs.ordered(xs.keys), ys.ordered(ys.keys)
    grid = [[math.nan] * len(columns) for _ in lines]
    for row in points:
        i = lines.index(_key(row["axes"].get(y)))
        j = columns.index(_key(row["axes"].get(x)))
        grid[i][j] = float(row["metrics"][metric])
    import numpy as np

    data = np.ma.masked_invalid(np.array(grid, dtype=float))
    fig, ax = _figure((max(5.0, 1.1 * len(columns) + 2.5), max(3.5, 0.6 * len(lines) + 2.0)))
    mesh = ax.pcolormesh(np.arange(len(columns) + 1) - 0.5, np.arange(len(lines) + 1) - 0.5,
                         data, cmap="viridis", shading="flat")
    fig.colorbar(mesh, ax=ax, label=metric)
    low, high = float(data.min()), float(data.max())
    middle = (low + high) / 2
    for i in range(len(lines)):
        for j in range(len(columns)):
            cell = grid[i][j]
            if math.isfinite(cell):
                dark = high > low and cell < middle
                ax.text(j, i, f"{cell:.4g}", ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([_text_of(x, key) for key in columns], rotation=30, ha="right")
    ax.set_yticks(range(len(lines)))
    ax.set_yticklabels([_text_of(y, key) for key in lines])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"{metric} over {x} and {y}")
    return _save(fig, fmt)


def pareto_front(rows: Sequence[Row], a: str, b: str,
                 minimize: tuple[bool, bool] = (True, True)) -> list[int]:
    """The indices (into `rows`) of the points on the Pareto front of metrics `a` and `b`:
    those no other point beats on one metric without being worse on the other. Points
    without both metrics as numbers take no part. Equal points are all on the front."""
    for name in (a, b):
        _check_metric(rows, name)
    sign = (1.0 if minimize[0] else -1.0, 1.0 if minimize[1] else -1.0)
    scored = [(k, sign[0] * float(r["metrics"][a]), sign[1] * float(r["metrics"][b]))
              for k, r in enumerate(rows) if _number(r, a) and _number(r, b)]
    return [k for k, u, v in scored
            if not any(p <= u and q <= v and (p < u or q < v) for _, p, q in scored)]


@_styled
def pareto(rows: Sequence[Row], a: str, b: str, minimize: tuple[bool, bool] = (True, True),
           fmt: str = "png", title: str = "") -> bytes:
    """Every point by metrics `a` (x) and `b` (y), the Pareto front highlighted and joined;
    points are labelled by their axis values (only the front's when there are many)."""
    _check_format(fmt)
    if a == b:
        raise InputError(f"a Pareto chart needs two different metrics, got {a!r} twice")
    front = set(pareto_front(rows, a, b, minimize))
    drawn = [k for k, r in enumerate(rows) if _number(r, a) and _number(r, b)]
    if not drawn:
        raise InputError(f"no point has both {a!r} and {b!r} as numbers")
    fig, ax = _figure((7.5, 5.0))
    rest = [k for k in drawn if k not in front]
    ax.scatter([rows[k]["metrics"][a] for k in rest], [rows[k]["metrics"][b] for k in rest],
               color="0.6", s=20, label="dominated")
    best = sorted(front, key=lambda k: (float(rows[k]["metrics"][a]),
                                        float(rows[k]["metrics"][b])))
    ax.plot([rows[k]["metrics"][a] for k in best], [rows[k]["metrics"][b] for k in best],
            color="tab:red", marker="o", label="Pareto front")
    # Each label is the point's axis values in the order the title names the axes; points
    # at the same spot share one label, a line each.
    axes = names([rows[k] for k in drawn], "axes")
    labels: dict[tuple[float, float], list[int]] = {}
    for k in drawn if len(drawn) <= _LABEL_LIMIT else best:
        labels.setdefault((float(rows[k]["metrics"][a]), float(rows[k]["metrics"][b])),
                          []).append(k)
    for spot, ks in labels.items():
        text = "\n".join(", ".join(_text_of(name, _key((rows[k].get("axes") or {}).get(name)))
                                   for name in axes) for k in ks)
        ax.annotate(text, spot, fontsize=7, xytext=(5, 3), textcoords="offset points",
                    color="tab:red" if any(k in front for k in ks) else "0.3")
    ax.margins(x=0.2, y=0.1)
    goal = {True: "lower is better", False: "higher is better"}
    ax.set_xlabel(f"{a} ({goal[minimize[0]]})")
    ax.set_ylabel(f"{b} ({goal[minimize[1]]})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or f"{b} against {a}: {len(front)} of {len(drawn)} points on the front"
                 + (f"\npoints labelled {', '.join(axes)}" if axes else ""), fontsize=10)
    return _save(fig, fmt)


class _Scale:
    """Where an axis's values go on a chart: to scale when every value is a number or a
    quantity of the hardware key the axis names, else as categories in row order."""

    def __init__(self, rows: Sequence[Row], axis: str) -> None:
        self.axis = axis
        self.keys: list[Any] = []
        for row in rows:
            key = _key((row.get("axes") or {}).get(axis))
            if key not in self.keys:
                self.keys.append(key)
        numbers = [_quantity(axis, key) for key in self.keys]
        self.numbers: dict[Any, float] | None = None
        if all(n is not None for n in numbers):
            self.numbers = {key: float(n) for key, n in zip(self.keys, numbers, strict=True)
                            if n is not None}

    def ordered(self, keys: list[Any]) -> list[Any]:
        """`keys` in numeric order on a numeric scale, else as they are."""
        if self.numbers is None:
            return list(keys)
        numbers = self.numbers
        return sorted(keys, key=lambda key: numbers[key])

    def position(self, raw: Any) -> float:
        key = _key(raw)
        return self.numbers[key] if self.numbers is not None else float(self.keys.index(key))

    def ticks(self, ax: Any) -> None:
        keys = self.ordered(self.keys)
        ax.set_xticks([self.position(key) for key in keys])
        ax.set_xticklabels([_text_of(self.axis, key) for key in keys], rotation=30, ha="right")


def _figure(size: tuple[float, float]) -> tuple[Any, Any]:
    """A new figure outside pyplot (no global state, no GUI backend) and its one plot."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    return fig, fig.add_subplot()


def _save(fig: Any, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes with no date and no software version in them."""
    metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format=fmt, metadata=metadata)
    return buffer.getvalue()


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InputError(f"unknown chart format {fmt!r}: expected png or svg")


def _check_axis(rows: Sequence[Row], axis: str) -> None:
    known = names(rows, "axes")
    if not rows:
        raise InputError("no points to draw")
    if axis not in known:
        raise InputError(f"unknown axis {axis!r}: the sweep's axes are "
                         f"{', '.join(known) or '(none)'}")


def _check_metric(rows: Sequence[Row], metric: str) -> None:
    known = names(rows, "metrics")
    if not rows:
        raise InputError("no points to draw")
    if metric not in known:
        raise InputError(f"unknown metric {metric!r}: the sweep's metrics are "
                         f"{', '.join(known) or '(none)'}")
    if not any(_number(row, metric) for row in rows):
        raise InputError(f"metric {metric!r} has no numeric value in any point")


def _numeric_rows(rows: Sequence[Row], metric: str) -> list[Row]:
    _check_metric(rows, metric)
    return [row for row in rows if _number(row, metric)]


def _check_single(points: Sequence[Row], drawn: Sequence[str], metric: str) -> None:
    """Refuse rows where two points would land on the same spot: another axis varies."""
    seen: dict[tuple[Any, ...], Row] = {}
    for row in points:
        axes = row.get("axes") or {}
        spot = tuple(_key(axes.get(name)) for name in drawn)
        if spot in seen:
            other = seen[spot].get("axes") or {}
            varying = [name for name in axes if name not in drawn
                       and _key(axes.get(name)) != _key(other.get(name))]
            which = ", ".join(varying) if varying else "none (repeated points)"
            where = ", ".join(f"{name}={_text_of(name, key)}"
                              for name, key in zip(drawn, spot, strict=True))
            raise InputError(f"several points of {metric!r} fall on {where}: other axes vary "
                             f"({which}); keep one value of each")
        seen[spot] = row


def names(rows: Sequence[Row], section: str) -> list[str]:
    """The names under `section` ("axes" or "metrics") of the rows, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        for name in row.get(section) or {}:
            seen.setdefault(name, None)
    return list(seen)


def _number(row: Row, metric: str) -> bool:
    item = (row.get("metrics") or {}).get(metric)
    return isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item)


def _key(item: Any) -> Any:
    """A hashable stand-in for an axis value (lists and tables become their text)."""
    if isinstance(item, list | dict):
        return repr(item)
    return item


def _quantity(axis: str, key: Any) -> float | None:
    """An axis value as a number: itself, or the quantity it spells for the hardware key the
    axis names; None when it is neither."""
    if isinstance(key, bool) or key is None:
        return None
    if isinstance(key, int | float):
        return float(key) if math.isfinite(key) else None
    if not isinstance(key, str):
        return None
    from emu.soc.config import schema_fields
    from emu.soc.units import parse_quantity

    for info in schema_fields():
        if info.key == axis and info.unit != "name":
            try:
                return float(parse_quantity(key, info.unit, integer=False))
            except ValueError:
                return None
    try:
        number = float(key)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _text_of(axis: str, key: Any) -> str:
    """An axis value as a label: as the spec wrote it; a bare number of a hardware key
    with its unit."""
    if isinstance(key, int | float) and not isinstance(key, bool):
        from emu.soc.config import schema_fields
        from emu.soc.units import format_quantity

        for info in schema_fields():
            if info.key == axis and info.unit != "name":
                return format_quantity(key, info.unit)
        return f"{key:g}"
    return str(key)

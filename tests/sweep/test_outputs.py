"""A sweep's rows as tables, CSV and charts (emu.sweep.outputs, emu.report.sweep_plots).

The rows are built here in the shape `emu.sweep.run` returns, so nothing is simulated: the
functions are pure and the same rows must give the same text and the same bytes.
"""

from __future__ import annotations

import csv
import io
import sys

import pytest

from emu.errors import InputError
from emu.report import sweep_plots
from emu.sweep import outputs

FREQS = ["400MHz", "648MHz", "1GHz"]
BANKS = ["128KiB", "256KiB"]


def _rows() -> list[dict]:
    """A 3 x 2 grid whose time falls with the clock and the bank size, one failed point."""
    rows = []
    for freq, base in zip(FREQS, [4.0, 3.0, 2.5], strict=True):
        for bank in BANKS:
            ms = base + (0.5 if bank == "128KiB" else 0.0)
            rows.append({"axes": {"vdsp.freq_hz": freq, "vdsp.tcm.bank_bytes": bank},
                         "metrics": {"ms": ms, "mj": 10.0 / ms, "name": "softmax"},
                         "status": "ok", "error": None, "key": f"k{len(rows)}",
                         "cached": False})
    rows.append({"axes": {"vdsp.freq_hz": "2GHz", "vdsp.tcm.bank_bytes": "128KiB"},
                 "metrics": {"ms": None, "mj": None, "name": None}, "status": "error",
                 "error": "emu: error: boom", "key": "k6", "cached": True})
    return rows


def test_table_shows_axes_metrics_and_status_by_default():
    text = outputs.table(_rows(), title="grid")
    lines = text.splitlines()
    assert lines[0] == "grid"
    assert lines[1].split() == ["vdsp.freq_hz", "vdsp.tcm.bank_bytes", "ms", "mj", "name",
                                "status"]
    assert lines[3].split() == ["400MHz", "128KiB", "4.500", "2.222", "softmax", "ok"]
    assert lines[-1].split() == ["2GHz", "128KiB", "-", "-", "-", "error"]


def test_table_takes_chosen_columns_and_qualified_names():
    text = outputs.table(_rows(), ["metrics.ms", "vdsp.freq_hz", "error", "cached"])
    assert text.splitlines()[0].split() == ["metrics.ms", "vdsp.freq_hz", "error", "cached"]
    assert text.splitlines()[-1].split() == ["-", "2GHz", "emu:", "error:", "boom", "yes"]


def test_unknown_and_ambiguous_columns_are_refused():
    with pytest.raises(InputError, match=r"unknown column 'freq'.*vdsp\.freq_hz"):
        outputs.table(_rows(), ["freq"])
    rows = [{"axes": {"x": 1}, "metrics": {"x": 2.0}, "status": "ok"}]
    with pytest.raises(InputError, match=r"both an axis and a metric: write axes\.x"):
        outputs.table(rows, ["x"])
    assert outputs.table(rows, ["axes.x", "metrics.x"]).splitlines()[-1].split() == \
        ["1", "2.000"]


def test_csv_holds_every_value_in_full(tmp_path):
    path = tmp_path / "sweep.csv"
    outputs.write_csv(_rows(), path)
    text = path.read_text("utf-8")
    assert text == outputs.csv_text(_rows())
    table = list(csv.reader(io.StringIO(text)))
    assert table[0] == ["vdsp.freq_hz", "vdsp.tcm.bank_bytes", "ms", "mj", "name", "status"]
    assert table[1] == ["400MHz", "128KiB", "4.5", repr(10 / 4.5), "softmax", "ok"]
    assert float(table[1][3]) == 10 / 4.5  # the float reads back exactly
    assert table[-1] == ["2GHz", "128KiB", "", "", "", "error"]
    assert len(table) == 8


def test_csv_flags_lists_and_quoting():
    rows = [{"axes": {"--impl": "a,b"}, "metrics": {"v": [1, 2]}, "status": "ok",
             "cached": True}]
    text = outputs.csv_text(rows, ["--impl", "v", "cached"])
    assert text == '--impl,v,cached\n"a,b","[1,2]",true\n'


def test_csv_to_a_folder_is_refused(tmp_path):
    with pytest.raises(InputError):
        outputs.write_csv(_rows(), tmp_path)


def test_parquet_without_pyarrow_says_what_it_needs(tmp_path, monkeypatch):
    for name in ("pyarrow", "pyarrow.parquet"):  # as if it were not installed
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(InputError, match="needs pyarrow"):
        outputs.write_parquet(_rows(), tmp_path / "sweep.parquet")
    assert not (tmp_path / "sweep.parquet").exists()


def test_parquet_round_trip(tmp_path):
    import pyarrow.parquet as pq
    path = tmp_path / "sweep.parquet"
    outputs.write_parquet(_rows(), path)
    table = pq.read_table(path).to_pydict()
    assert table["ms"] == [4.5, 4.0, 3.5, 3.0, 3.0, 2.5, None]
    assert table["vdsp.freq_hz"][-1] == "2GHz"


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_charts_are_files_of_their_format_and_repeat_byte_for_byte(fmt):
    rows = _rows()
    charts = {
        "line": lambda: sweep_plots.line(rows, "vdsp.freq_hz", "ms",
                                         series="vdsp.tcm.bank_bytes", fmt=fmt),
        "line, one series": lambda: sweep_plots.line(rows[::2], "vdsp.freq_hz", "ms", fmt=fmt),
        "heatmap": lambda: sweep_plots.heatmap(rows, "vdsp.freq_hz", "vdsp.tcm.bank_bytes",
                                               "ms", fmt=fmt),
        "pareto": lambda: sweep_plots.pareto(rows, "ms", "mj", minimize=(True, False),
                                             fmt=fmt),
    }
    for name, draw in charts.items():
        first, second = draw(), draw()
        assert first == second, name
        if fmt == "png":
            assert first.startswith(b"\x89PNG\r\n\x1a\n"), name
            assert b"Software" not in first, name
        else:
            assert b"<svg" in first[:2000], name
            assert b"<dc:date>" not in first, name
            assert b"Matplotlib v" not in first, name


def test_charts_do_not_depend_on_the_callers_matplotlib_settings():
    matplotlib = pytest.importorskip("matplotlib")
    rows = _rows()
    before = sweep_plots.line(rows, "vdsp.freq_hz", "ms", series="vdsp.tcm.bank_bytes",
                              fmt="svg")
    with matplotlib.rc_context({"lines.linewidth": 7.0, "font.size": 20}):
        during = sweep_plots.line(rows, "vdsp.freq_hz", "ms", series="vdsp.tcm.bank_bytes",
                                  fmt="svg")
    assert during == before
    assert matplotlib.rcParams["svg.hashsalt"] is None  # the chart's settings did not leak


def test_pareto_front():
    rows = _rows()
    # Lower time and more of `mj`: the fastest point beats all the others.
    assert sweep_plots.pareto_front(rows, "ms", "mj", (True, False)) == [5]
    # Lower time and less of `mj` (= 10 / time): a trade-off, every point on the front.
    assert sweep_plots.pareto_front(rows, "ms", "mj") == [0, 1, 2, 3, 4, 5]
    two = [{"axes": {"a": 1}, "metrics": {"x": 1.0, "y": 1.0}},
           {"axes": {"a": 2}, "metrics": {"x": 1.0, "y": 1.0}},
           {"axes": {"a": 3}, "metrics": {"x": 2.0, "y": 1.0}}]
    assert sweep_plots.pareto_front(two, "x", "y") == [0, 1]  # equal points both stay


def test_numeric_axes_are_drawn_to_scale_in_numeric_order():
    scale = sweep_plots._Scale(_rows(), "vdsp.freq_hz")
    assert scale.ordered(["1GHz", "400MHz", "2GHz"]) == ["400MHz", "1GHz", "2GHz"]
    assert scale.position("1GHz") == 1e9
    words = sweep_plots._Scale([{"axes": {"--impl": v}} for v in ["dsp2", "cpu"]], "--impl")
    assert words.position("cpu") == 1.0  # categories keep the rows' order


@pytest.mark.parametrize("draw, message", [
    (lambda r: sweep_plots.line(r, "freq", "ms"), "unknown axis 'freq'.*vdsp.freq_hz"),
    (lambda r: sweep_plots.line(r, "vdsp.freq_hz", "time"), "unknown metric 'time'.*ms, mj"),
    (lambda r: sweep_plots.line(r, "vdsp.freq_hz", "name"), "'name' has no numeric value"),
    (lambda r: sweep_plots.line(r, "vdsp.freq_hz", "ms"),
     "several points of 'ms' fall on vdsp.freq_hz=400MHz.*vary \\(vdsp.tcm.bank_bytes\\)"),
    (lambda r: sweep_plots.line(r, "vdsp.freq_hz", "ms", series="vdsp.freq_hz"),
     "the x axis too"),
    (lambda r: sweep_plots.line(r, "vdsp.freq_hz", "ms", fmt="jpg"), "format 'jpg'"),
    (lambda r: sweep_plots.heatmap(r, "vdsp.freq_hz", "vdsp.freq_hz", "ms"), "two different"),
    (lambda r: sweep_plots.pareto(r, "ms", "ms"), "two different metrics"),
    (lambda r: sweep_plots.pareto(r, "ms", "nope"), "unknown metric 'nope'"),
    (lambda r: sweep_plots.line([], "x", "y"), "no points to draw"),
])
def test_chart_errors_name_the_problem(draw, message):
    with pytest.raises(InputError, match=message):
        draw(_rows())


def test_select_keeps_the_rows_with_the_given_axis_values():
    rows = _rows()
    slow = outputs.select(rows, {"vdsp.tcm.bank_bytes": "128KiB"})
    assert [r["axes"]["vdsp.freq_hz"] for r in slow] == ["400MHz", "648MHz", "1GHz", "2GHz"]
    # One line per clock once the bank size is fixed.
    assert sweep_plots.line(slow, "vdsp.freq_hz", "ms").startswith(b"\x89PNG")
    numbers = [{"axes": {"--points": 30000}}, {"axes": {"--points": 60000}}]
    assert outputs.select(numbers, {"--points": "3e4"}) == numbers[:1]
    with pytest.raises(InputError, match="unknown axis 'bank'"):
        outputs.select(rows, {"bank": "128KiB"})
    with pytest.raises(InputError, match=r"no point has vdsp\.freq_hz=3GHz"):
        outputs.select(rows, {"vdsp.freq_hz": "3GHz"})

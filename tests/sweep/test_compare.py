"""`emu compare` (emu.sweep.compare): one command on two hardware descriptions, every numeric
figure of the two reports side by side."""

from __future__ import annotations

import json

import pytest

import emu.commands
from emu.cli.main import main
from emu.commands.report import ENVELOPE, results_of
from emu.sweep import compare

DSP = ["dsp", "softmax", "--shape", "16,100"]
CLOCKS = ["--a-set", "vdsp.freq_hz=400MHz", "--b-set", "vdsp.freq_hz=1GHz"]


@pytest.fixture(scope="module")
def report():
    """The report of the DSP softmax at 400 MHz (A) and 1 GHz (B)."""
    return emu.commands.run("compare", [*CLOCKS, "--json", "--", *DSP])


@pytest.fixture(scope="module")
def doc(report):
    """Its --json document."""
    return report.document()


def _leaf(doc, path):
    return next(row for row in doc["leaves"] if row["path"] == path)


def test_a_faster_dsp_computes_sooner_and_moves_the_same_bytes(doc):
    compute = _leaf(doc, "cores.0.compute_ms")
    assert compute["differs"] and compute["b"] < compute["a"]
    assert compute["delta"] == pytest.approx(compute["b"] - compute["a"])
    assert compute["ratio"] == pytest.approx(compute["b"] / compute["a"])
    assert compute["ratio"] == pytest.approx(0.4, rel=0.02)  # 400 MHz / 1 GHz
    for path in ("cores.0.idma_in_bytes", "cores.0.idma_out_bytes",
                 "cores.0.kernel_cycles"):
        same = _leaf(doc, path)
        assert not same["differs"] and same["a"] == same["b"] > 0
        assert same["delta"] == 0 and same["ratio"] == 1


def test_the_json_document_holds_both_reports_and_the_differences(doc):
    assert set(results_of(doc)) == {"scenario", "a", "b", "hardware_differences",
                                    "differing", "leaves"}
    assert set(doc) - set(results_of(doc)) == {"command", "arguments", "wall_clock"}
    assert set(ENVELOPE) - set(doc) == {"preset", "provenance", "config"}  # two hardwares
    assert doc["command"] == "compare" and doc["scenario"] == {"command": "dsp",
                                                               "args": DSP[1:]}
    assert doc["arguments"]["a_overrides"] == ["vdsp.freq_hz=400MHz"]
    assert doc["a"]["overrides"] == ["vdsp.freq_hz=400MHz"]
    assert doc["b"]["report"]["provenance"]["overrides"] == ["vdsp.freq_hz=1GHz"]
    assert doc["a"]["report"]["op"] == "softmax"
    assert doc["hardware_differences"] == [{"key": "vdsp.freq_hz", "a": "400 MHz",
                                            "b": "1 GHz"}]
    flags = [row["differs"] for row in doc["leaves"]]
    assert flags == sorted(flags, reverse=True)  # the differing figures first
    assert doc["differing"] == sum(flags) > 0
    assert set(doc["leaves"][0]) == {"path", "a", "b", "delta", "ratio", "differs"}
    json.dumps(doc, allow_nan=False)  # plain JSON


def test_the_text_puts_the_hardware_first_and_marks_what_differs(doc, report):
    text = emu.commands.get("compare").text(report)
    assert text == compare.text(doc)
    lines = text.splitlines()
    assert lines[:4] == ["emu compare -- dsp softmax --shape 16,100",
                         "A: preset j5; --set vdsp.freq_hz=400MHz",
                         "B: preset j5; --set vdsp.freq_hz=1GHz",
                         "hardware: vdsp.freq_hz 400 MHz -> 1 GHz"]
    compute = next(line for line in lines if " cores.0.compute_ms " in line)
    assert compute.startswith("*") and compute.split()[-1] == "0.4"
    same = next(line for line in lines if " cores.0.idma_in_bytes " in line)
    assert same.split() == ["cores.0.idma_in_bytes", "6400", "6400", "0", "1"]
    shorter = compare.text(doc, only_different=True)
    assert " cores.0.idma_in_bytes " not in shorter and " cores.0.compute_ms " in shorter


def test_the_command_line(capsys):
    code = main(["compare", "--set", "ddr.policy=fair", *CLOCKS, "--only-different", "--",
                 *DSP])
    out = capsys.readouterr().out
    assert code == 0
    assert "B: preset j5; --set ddr.policy=fair vdsp.freq_hz=1GHz" in out
    assert "* marks" not in out and "(only those shown)" in out


def test_leaves_pair_numbers_by_path():
    a = {"x": 2, "flag": True, "name": "a", "list": [1.5, 0], "only_a": 1}
    b = {"x": 3, "flag": False, "name": "b", "list": [1.5, 4], "only_b": 7.0}
    rows = {row["path"]: row for row in compare.leaves(a, b)}
    assert set(rows) == {"x", "list.0", "list.1", "only_a", "only_b"}  # numbers only
    assert rows["x"] == {"path": "x", "a": 2, "b": 3, "delta": 1, "ratio": 1.5,
                         "differs": True}
    assert rows["list.1"]["ratio"] is None  # B/A with A = 0
    assert rows["only_a"]["b"] is None and rows["only_a"]["differs"]
    assert [row["path"] for row in compare.leaves(a, b)] == \
        ["x", "list.1", "only_a", "only_b", "list.0"]


@pytest.mark.parametrize("words, message", [
    ([*CLOCKS, *DSP], "give the command to run after `--`"),
    ([*CLOCKS, "--"], "expected a command after `--`"),
    ([*CLOCKS, "--", *DSP, "--json"], "--json is not allowed after `--`"),
    ([*CLOCKS, "--", *DSP, "--set", "vdsp.freq_hz=1GHz"], "--set is not allowed"),
    ([*CLOCKS, "--", *DSP, "--help"], "--help after `--`: .*emu dsp softmax --help"),
    (["--", *DSP], "A and B resolve to the same hardware"),
    (["--a-set", "vdsp.freq_hz=648MHz", "--", *DSP], "A and B resolve to the same hardware"),
    (["--a-set", "vdsp.freq=1GHz", "--", *DSP], "side A: .*vdsp.freq"),
    (["--b-preset", "nope", "--", *DSP], "side B: .*nope"),
    (["--bogus", "--", *DSP], "emu compare: unrecognized arguments: --bogus"),
    ([*CLOCKS, "--", "dsp", "softmax", "--shape", "x"], "side A .*--shape"),
    ([*CLOCKS, "--", "list"], "list takes no hardware: nothing to compare"),
    ([*CLOCKS, "--", "sweep", "run", "x.toml"], "sweep run takes no hardware"),
])
def test_mistakes_are_one_line_and_exit_2(capsys, words, message):
    import re

    assert main(["compare", *words]) == 2
    err = capsys.readouterr().err
    assert err.startswith("emu: error: ") and err.count("\n") == 1
    assert re.search(message, err), err


def test_help(capsys):
    assert main(["compare", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--a-set KEY=VALUE" in out and "-- COMMAND [ARGS ...]" in out


def test_the_contracts_short_form_is_side_a_then_side_b(tmp_path, capsys):
    slow, fast = tmp_path / "slow.toml", tmp_path / "fast.toml"
    slow.write_text('[vdsp]\nfreq_hz = "400MHz"\n')
    fast.write_text('[vdsp]\nfreq_hz = "1GHz"\n')
    runs = {}
    for name, hardware in (
            ("configs", ["--config", str(slow), "--config", str(fast)]),
            ("sets", ["--set", "vdsp.freq_hz=400MHz", "--set=vdsp.freq_hz=1GHz"]),
            ("mixed", ["--config", str(slow), "--set", "vdsp.freq_hz=1GHz"]),
            ("long", ["--a-set", "vdsp.freq_hz=400MHz", "--b-set", "vdsp.freq_hz=1GHz"])):
        assert main(["compare", *hardware, "--json", "--", "dsp", "softmax", "--shape",
                     "16,100"]) == 0
        doc = json.loads(capsys.readouterr().out)
        runs[name] = {d["key"]: (d["a"], d["b"]) for d in doc["hardware_differences"]}
    assert runs["configs"] == runs["sets"] == runs["mixed"] == runs["long"]
    assert list(runs["long"]) == ["vdsp.freq_hz"]

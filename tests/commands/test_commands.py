"""The command layer (emu.commands): every command declared once, run as a library, its
report in the one envelope and the same, byte for byte, when it runs twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import emu.commands
import emu.sweep
from emu.commands import parse
from emu.commands.report import ENVELOPE, Report, results_of, without_wall_clock
from emu.errors import UsageError
from emu.options import Option
from emu.report.document import dumps

# One small run of each command (calibrate runs in tests/cli/test_calibrate_cli.py, on a
# stand-in model: its real targets take minutes). MODEL, ONNX, SPEC and the rest: files a
# fixture makes (SPEC: a two-point sweep, run once there so that its store exists).
SMALL = {
    "pointcloud": ["--model", "pointpillars", "--impl", "dsp2", "--synthetic", "1",
                   "--points", "2000"],
    "dsp": ["softmax", "--shape", "8,64"],
    "dsp cv": ["threshold"],
    "scenario cameras": ["--cameras", "1", "--frames", "2"],
    "scenario perception": ["--cameras", "0", "--seconds", "0.05", "--points", "2000",
                            "--input-size", "32"],  # no camera runs: its model kept small
    "dv run": ["mobilenetv1", "--input-size", "32,32"],
    "perf": ["MODEL", "--frame-count", "2"],
    "infer": ["MODEL", "--input", "INPUT"],
    "compile": ["ONNX", "-o", "OUT", "--int16", "never", "--calib-random", "2"],
    "config show": ["--set", "vdsp.freq_hz=800MHz"],
    "list": [],
    "ops": ["--where", "fold"],
    "zoo list": [],
    "zoo export": ["mobilenetv1", "--input-size", "32", "--classes", "10", "-o", "ZOO"],
    "sweep run": ["SPEC"],  # its points in the store already: no worker starts
    "sweep show": ["SPEC", "--columns", "vdsp.freq_hz,total,status"],
    "sweep export": ["SPEC", "-o", "CSV"],
    "sweep plot": ["SPEC", "line", "--x", "vdsp.freq_hz", "--y", "total", "-o", "SVG"],
    "cc-flags": [],
    "compare": ["--set", "vdsp.freq_hz=400MHz", "--set", "vdsp.freq_hz=1GHz", "--", "dsp",
                "softmax", "--shape", "8,64"],
}
SPEC = """
[scenario]
command = "dsp"
args = ["softmax", "--shape", "8,64"]
metrics = { total = "total_ms" }

[axes]
"vdsp.freq_hz" = ["400MHz", "1GHz"]
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import numpy as np

    from emu.cli.main import main

    folder = tmp_path_factory.mktemp("models")
    onnx, hbm, x = folder / "m.onnx", folder / "m.hbm", folder / "x.npy"
    assert main(["zoo", "export", "mobilenetv2", "--input-size", "32,32", "--classes", "10",
                 "-o", str(onnx)]) == 0
    assert main(["compile", str(onnx), "-o", str(hbm), "--int16", "never", "--quiet"]) == 0
    np.save(x, np.zeros((1, 3, 32, 32), np.float32))
    spec = folder / "sweep.toml"
    spec.write_text(SPEC, "utf-8")
    emu.sweep.run(spec, workers=0, store=spec.with_suffix(".sqlite"))
    return {"MODEL": str(hbm), "ONNX": str(onnx), "INPUT": str(x),
            "OUT": str(folder / "out.hbm"), "ZOO": str(folder / "zoo.onnx"),
            "SPEC": str(spec), "CSV": str(folder / "points.csv"),
            "SVG": str(folder / "total.svg")}


def test_every_command_is_registered_once_and_has_a_small_run_here():
    names = [c.name for c in emu.commands.commands()]
    assert len(names) == len(set(names))
    assert set(names) - {"calibrate"} == set(SMALL)
    for command in emu.commands.commands():
        assert command.run and command.text and command.help and command.description
        if command.sweepable:
            assert command.reports, command.name


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_report_has_the_envelope_and_repeats_byte_for_byte(name, files):
    command = emu.commands.get(name)
    words = [files.get(w, w) for w in SMALL[name]]
    documents = []
    for _ in range(2):
        args = command.parse(words)
        report = command.run(command.resolve(args), args)
        doc = report.document()
        assert doc["command"] == name and isinstance(doc["wall_clock"], dict)
        if command.hardware or command.configure is not None:  # one hardware described
            assert list(doc)[:3] == ["command", "arguments", "preset"]
            assert doc["provenance"]["preset"] == "j5"
            # the configuration, in the envelope or (config show) as the results
            config = doc["config"] if command.embed_config else results_of(doc)
            assert config["bpu"]["cores"] == 2
            assert set(ENVELOPE) - set(doc) == (set() if command.embed_config
                                                else {"config"})
        else:
            assert list(doc)[:2] == ["command", "arguments"]
            assert set(ENVELOPE) - set(doc) == {"preset", "provenance", "config"}
        assert not report.failed
        assert all(Path(path).is_file() for path in report.written)
        assert results_of(doc) and not set(results_of(doc)) & set(ENVELOPE)
        assert command.text(report)
        documents.append(dumps(without_wall_clock(doc)))
    assert documents[0] == documents[1]


def test_the_programmatic_entry_is_the_command_line_s(capsys):
    from emu.cli.main import main

    words = ["softmax", "--shape", "8,64", "--seed", "2"]
    report = emu.commands.run("dsp", words)
    assert main(["dsp", *words, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert without_wall_clock(printed) == without_wall_clock(report.document())
    assert report["cores"] == printed["cores"] and report.provenance["seed"] == 2
    assert report.arguments["shape"] == [8, 64] and report.arguments["op"] == "softmax"
    assert "preset" not in report.arguments  # the hardware is in the provenance


def test_a_bad_command_line_is_one_usage_line_naming_the_command():
    command = emu.commands.get("pointcloud")
    with pytest.raises(UsageError, match=r"^emu pointcloud: argument --synthetic: expected a "
                                         r"whole number from 1 to 1000, got '0'$"):
        command.parse(["--model", "centerpoint", "--synthetic", "0"])
    with pytest.raises(UsageError, match="emu dsp cv: give one operator OP, or --all"):
        emu.commands.get("dsp cv").parse([])


def test_options_are_data_with_their_ranges():
    seed = Option("seed", int, 0, "seed of it", (0, 9))
    assert seed.flag == "--seed" and seed.help_text() == "seed of it (0 to 9, default 0)"
    assert Option("lidar_hz", float, 1.0).flag == "--lidar-hz"
    with pytest.raises(ValueError, match="must hold the default"):
        Option("n", int, 10, "n", (0, 9))
    parser = parse.Parser(prog="emu test")
    parse.add_options(parser, [seed, Option("what", str, None, "a word", flags=("what",),
                                            choices=("a", "b"), required=True)])
    assert vars(parser.parse_args(["b", "--seed", "3"])) == {"seed": 3, "what": "b"}
    with pytest.raises(UsageError, match="expected a whole number from 0 to 9"):
        parser.parse_args(["a", "--seed", "10"])


def test_the_wall_clock_part_is_apart_and_the_contract_s_wall_s_repeated():
    report = Report("pointcloud", {}, "j5", None, None, {"model": "x"}, {"wall_s": 1.5},
                    ("wall_s",))
    doc = report.document()
    assert doc["wall_s"] == doc["wall_clock"]["wall_s"] == 1.5
    assert without_wall_clock(doc) == {"command": "pointcloud", "arguments": {},
                                       "preset": "j5", "model": "x"}

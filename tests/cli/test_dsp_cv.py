"""`emu dsp cv`: one operator on an image file, every operator at once, help and outputs."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from emu.cli.main import main
from emu.commands.report import without_wall_clock
from emu.report.document import dumps
from emu.vdsp.ops import cv
from emu.workloads import images


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_one_operator_on_a_file_writes_opencvs_output_and_reports_the_time_split(
        tmp_path, capsys):
    picture = images.standard()[:100, :130]
    (tmp_path / "in.png").write_bytes(images.png_bytes(picture))
    code, out, err = _run(capsys, "dsp", "cv", "threshold", "--input", str(tmp_path / "in.png"),
                          "--thresh", "99", "--type", "binary_inv", "-o",
                          str(tmp_path / "out.png"), "--json", "--trace",
                          str(tmp_path / "t.json"))
    assert code == 0, err
    doc = json.loads(out)
    for key in ("rpc_ms", "idma_in_ms", "idma_out_ms", "compute_ms", "kernel_cycles",
                "cycles_per_pixel", "idma_in_bytes", "idma_out_bytes",
                "tcm_high_water_bytes", "provenance"):
        assert key in doc, key
    assert doc["values"] == {"thresh": 99.0, "maxval": 255.0, "type": 1}
    assert 0 < doc["compute_ms"] < doc["rpc_ms"]
    written = images.read_image(tmp_path / "out.png")
    assert (written == cv2.threshold(cv.luma(picture), 99, 255, 1)[1]).all()
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "threshold tile 0" in names


def test_reports_are_byte_identical_run_to_run(capsys):
    runs = [_run(capsys, "dsp", "cv", "threshold", "--json")[1] for _ in range(2)]
    # byte for byte once the wall-clock part (the host's time) is taken out
    assert [dumps(without_wall_clock(json.loads(run))) for run in runs] == \
        [dumps(without_wall_clock(json.loads(runs[0])))] * 2


# Golden timings of every CV operator on the standard image (`emu dsp cv --all`): any change
# of a DSP timing formula, the RPC path or the iDMA model shows as a failing test and a diff
# of this file. After a change that moves them on purpose, regenerate it with
#     python -m pytest tests/cli/test_dsp_cv.py -k every_operator --regen-golden
# and say in the commit what moved and why.
GOLDEN = Path(__file__).parent / "golden" / "dsp_cv_timing.json"
TIMED = ("total_ms", "rpc_ms", "compute_ms", "idma_in_ms", "idma_out_ms", "kernel_cycles",
         "bundles", "gather_cycles", "kernel_calls", "idma_in_bytes", "idma_out_bytes",
         "idma_descriptors")


def test_all_reports_every_operator_at_its_golden_timing(capsys, request):
    code, out, err = _run(capsys, "dsp", "cv", "--all", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["op"] for r in doc["operators"]] == [op.name for op in cv.cv_operators()]
    for report in doc["operators"]:
        assert report["kernel_cycles"] > 0 and report["idma_in_bytes"] > 0, report["op"]
    got = {r["op"]: {key: r[key] for key in TIMED} for r in doc["operators"]}
    if request.config.getoption("--regen-golden"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    moved = [f"{op} {key}: {want.get(op, {}).get(key)} -> {value}"
             for op, figures in got.items() for key, value in figures.items()
             if want.get(op, {}).get(key) != value]
    assert not moved, "DSP timing moved (regenerate with --regen-golden if meant):\n" + \
        "\n".join(moved)
    assert got == want
    code, out, _ = _run(capsys, "dsp", "cv", "--all")
    assert code == 0 and all(op.name in out for op in cv.cv_operators())


NN_GOLDEN = Path(__file__).parent / "golden" / "dsp_nn_timing.json"


def test_the_nn_operators_and_a_ping_take_their_golden_timing(capsys, request):
    """`emu dsp OP --json` at its defaults (64 x 1000 int8, one call), as the CV operators
    above: the RPC, the iDMA and the compute of each, pinned."""
    got = {}
    for op in ("softmax", "quantize", "dequantize", "ping"):
        code, out, err = _run(capsys, "dsp", op, "--json")
        assert code == 0, err
        doc = json.loads(out)
        got[op] = {"latency_ms": [r["latency_ms"] for r in doc["rpcs"]],
                   "rpc_overhead_ms": doc["rpc_overhead_ms"], "calls_ms": doc["calls_ms"],
                   "total_ms": doc["total_ms"],
                   "cores": [{k: v for k, v in core.items() if k != "tcm_high_water_bytes"}
                             for core in doc["cores"]]}
    if request.config.getoption("--regen-golden"):
        NN_GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(NN_GOLDEN.read_text()), \
        "DSP timing moved (regenerate with --regen-golden if meant)"


def test_help_lists_the_operators_and_each_operators_options(capsys):
    code, out, _ = _run(capsys, "dsp", "cv", "--help")
    assert code == 0 and all(op.name in out for op in cv.cv_operators())
    code, out, _ = _run(capsys, "dsp", "cv", "threshold", "--help")
    assert code == 0 and "--thresh" in out and "binary_inv" in out


def test_a_float_output_needs_npy(tmp_path, capsys):
    # corner_harris gives float32: a PNG cannot hold it.
    code, _, err = _run(capsys, "dsp", "cv", "corner_harris", "-o", str(tmp_path / "x.png"))
    assert code == 2 and "write it as .npy" in err
    assert not (tmp_path / "x.png").exists()
    code, _, err = _run(capsys, "dsp", "cv", "corner_harris", "-o", str(tmp_path / "x.npy"))
    assert code == 0, err
    picture = cv.luma(images.standard())
    ref = cv2.cornerHarris(picture, 2, 3, 0.04)
    out = np.load(tmp_path / "x.npy")
    assert out.dtype == np.float32 and out.shape == ref.shape

"""`emu calibrate --cross-validate` is wired: parsed, fitted, cross-validated, printed.

The emulator run is replaced by a cheap log-linear stand-in, so this takes well under a
second; the machinery itself is tested in tests/workloads/test_fitting.py.
"""

from __future__ import annotations

import json
import math

import pytest

from emu.cli.main import main
from emu.soc.config import get_path, load_config
from emu.workloads.pointcloud import calibration

# d log(target) / d log(param) of each candidate, rows as calibration.TARGETS then
# calibration.CHECKS (seven point-cloud figures, then the CV round trips): roughly who sees
# what on the board.
_CV = len(calibration.TARGETS) + len(calibration.CHECKS) - 7
EXPONENTS = {
    "cpu.cache_op_cycles": [0.2, 0.1, 0.3, 0.2, 0.0, 0.2, 0.0] + [0.15] * _CV,
    "vdsp.rpc_submit_ps": [0.5, 0.0, 0.6, 0.3, 0.0, 0.3, 0.0] + [0.2] * _CV,
    "vdsp.relay_hop_ps": [0.05, 0.0, 0.1, 0.05, 0.0, 0.05, 0.0] + [0.4 + 0.05 * k
                                                                  for k in range(_CV)],
    "vdsp.idma.bytes_per_cycle": [-0.1, 0.0, -0.2, -0.05, 0.0, -0.05, 0.0] + [-0.05] * _CV,
    "ddr.latency_ps": [0.0, 0.8, 0.0, 0.4, 0.9, 0.4, 0.5] + [0.0] * _CV,
    "vdsp.fdiv_cycles": [0.3, 0.0, 0.1, 0.1, 0.0, 0.1, 0.0] + [0.0] * _CV,
    "cpu.freq_hz": [-0.1, -0.5, -0.1, -0.3, -0.8, -0.3, 0.0] + [-0.1] * _CV,
    "cpu.fpcr_write_cycles": [0.0, 0.0, 0.0, 0.0, 0.6, 0.0, 0.1] + [0.0] * _CV,
}


def _fake_predict(frame_set, preset="j5", overrides=(), config_file=None, progress=None):
    soc = load_config(preset, config_file, overrides).soc
    keys = [p.key for p in calibration.FREE_PARAMETERS]
    logs = [math.log(float(get_path(soc, key))) for key in keys]
    # Each target a product of powers of the free parameters, equal to the measurement
    # (times a small miss) at the preset's values.
    base = [math.log(float(get_path(load_config(preset).soc, key))) for key in keys]
    out = {}
    everything = (*calibration.TARGETS, *calibration.CHECKS)
    for i, t in enumerate(everything):
        exponent = sum(EXPONENTS[key][i] * (lv - b)
                       for key, lv, b in zip(keys, logs, base, strict=True))
        out[t.name] = t.measured * (1.02 + 0.01 * i) * math.exp(exponent)
        if progress is not None:
            progress(i + 1, len(everything), "fake")
    rows = [{"points_read": 300_000, "points_valid": 290_000 + k, "points_kept": 80_000,
             "pillars": 10_000 + k} for k in range(3)]
    return out, {"frames": rows}


@pytest.fixture
def fake_model(monkeypatch):
    calls = []

    def predict(*args, **kwargs):
        calls.append(args)
        return _fake_predict(*args, **kwargs)

    monkeypatch.setattr(calibration, "predict", predict)
    monkeypatch.setattr(calibration, "frames", lambda *a, **k: [])
    return calls


def test_calibrate_without_the_flag_is_unchanged(capsys, fake_model):
    assert main(["calibrate", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["command", "arguments", "preset", "targets", "frame_statistics",
                         "bpu_targets", "provenance", "config", "wall_clock"]  # the envelope
    assert len(fake_model) == 1


def test_cross_validate_json(capsys, fake_model):
    assert main(["calibrate", "--cross-validate", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"targets", "frame_statistics", "fit", "cross_validation", "provenance"} <= set(doc)
    fit = doc["fit"]
    keys = [p.key for p in calibration.FREE_PARAMETERS]
    assert [p["key"] for p in fit["parameters"]] == keys
    total = len(calibration.TARGETS)
    assert fit["targets_independent"] == total - 2 and fit["targets_total"] == total
    assert fit["determination"]["rank"] == len(keys)
    assert len(fit["sensitivity"]["d_log_target_d_log_param"]) == total
    # A check is reported beside the targets, never fitted.
    checks = [t for t in doc["targets"] if not t["fitted"]]
    assert [t["target"] for t in checks] == [t.name for t in calibration.CHECKS]
    folds = {f["target"]: f for f in doc["cross_validation"]}
    assert set(folds) == {t.name for t in calibration.TARGETS}
    stage = "dsp2 dsp_stage1 (mean over frames)"
    assert folds[stage]["independent"]
    assert set(folds[stage]["left_out"]) == {stage, "dsp2 total (mean over frames)",
                                             "dsp2 avg over 16 frames"}
    assert not folds["dsp2 total (mean over frames)"]["independent"]
    # The report's table is the configuration as given: the fit's first run.
    assert doc["targets"][0]["error"] == pytest.approx(0.02, abs=1e-4)
    # One run at the start, one per parameter, the fit's steps, one per fold at most.
    assert len(fake_model) <= 1 + len(keys) + 8 * (1 + len(keys)) + len(folds)


def test_changing_the_free_list_is_all_it_takes(capsys, fake_model, monkeypatch):
    keys = ("cpu.cache_op_cycles", "vdsp.rpc_submit_ps", "ddr.latency_ps", "cpu.freq_hz")
    monkeypatch.setattr(calibration, "FREE_PARAMETERS",
                        tuple(calibration.CANDIDATES[k] for k in keys))
    assert main(["calibrate", "--cross-validate", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["key"] for p in doc["fit"]["parameters"]] == list(keys)
    assert doc["fit"]["sensitivity"]["columns"] == list(keys)
    assert all(set(f["parameters"]) == set(keys) for f in doc["cross_validation"])


def test_cross_validate_text(capsys, fake_model):
    assert main(["calibrate", "--cross-validate", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "J5 calibration, preset j5" in out  # the usual table first
    for needle in ("Free parameters", "Sensitivity d log(target) / d log(parameter)",
                   "Singular values", "condition number", "left-out error",
                   f"{len(calibration.TARGETS) - 2} independent targets",
                   "dependent: its parts are fitted", "(not fitted)"):
        assert needle in out, needle


def test_cross_validate_is_in_the_help(capsys):
    assert main(["calibrate", "--help"]) == 0
    assert "--cross-validate" in capsys.readouterr().out


def test_progress_counts_every_run(fake_model):
    seen, lines = [], []
    run = calibration.run_fit(cross_validate=True,
                              progress=lambda done, total, what: seen.append((done, total, what)),
                              log=lines.append)
    assert seen and all(0 < done <= total for done, total, _ in seen)
    assert [done for done, _, _ in seen] == sorted(done for done, _, _ in seen)
    assert seen[0][2] == "start: fake" and any("leave out" in what for *_, what in seen)
    assert sum(line.startswith("evaluation ") for line in lines) == run.problem.evaluations
    assert run.problem.evaluations == len(fake_model)


def test_the_trace_holds_the_first_frame_through_each_timed_implementation(
        tmp_path, capsys, fake_model, monkeypatch):
    from emu.workloads.pointcloud import runner
    from emu.workloads.pointcloud.params import CENTERPOINT
    from tests.report.test_trace import validate_chrome_trace

    monkeypatch.setattr(calibration, "frames", lambda count=16, seed=0: runner.synthetic(
        CENTERPOINT, count, seed, 3000))  # small frames: the trace's run is a real one
    traces = []
    for k in range(2):
        trace = tmp_path / f"t{k}.json"
        assert main(["calibrate", "--trace", str(trace), "--quiet"]) == 0
        traces.append(trace.read_bytes())
    assert traces[0] == traces[1]
    doc = json.loads(traces[0])
    validate_chrome_trace(doc)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert {name.split()[0] for name in names} == set(calibration.IMPLS)
    assert doc["otherData"]["frame"].startswith("synthetic-0")
    assert main(["calibrate", "--trace", str(tmp_path)]) == 2  # a folder: before any work
    assert len(fake_model) == 2

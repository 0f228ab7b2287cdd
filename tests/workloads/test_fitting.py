"""The fitting machinery on synthetic models with known answers (fast), and on J5 (slow)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from emu.errors import ConfigError
from emu.soc.config import FieldInfo, get_path, load_config
from emu.workloads.pointcloud import calibration, fitting
from emu.workloads.pointcloud.fitting import Bound, FreeParameter


@dataclass(frozen=True)
class T:
    name: str
    measured: float
    tolerance: float = 0.1
    derived_from: tuple[str, ...] = ()


def bound(key, low, high, integer=False, unit="ps"):
    return Bound(key, FieldInfo(key, unit, "", int if integer else float), integer, low, high,
                 "test")


# A log-linear model: log(target_i) = log(C_i) + sum_j S_ij log(p_j).
S = np.array([[1.0, 0.0, 0.5],
              [0.0, 1.0, 0.0],
              [0.3, 0.2, 1.0],
              [-1.0, 0.5, 0.0]])
C = np.array([2.0, 3.0, 5.0, 7.0])
KEYS = ["a", "b", "c"]
TRUE = {"a": 40.0, "b": 2000.0, "c": 7.0}


def loglinear(values, calls=None):
    if calls is not None:
        calls.append(dict(values))
    logp = np.log([values[k] for k in KEYS])
    out = C * np.exp(S @ logp)
    return {f"t{i}": float(v) for i, v in enumerate(out)}


def truth_targets(**offsets):
    exact = loglinear(TRUE)
    return [T(name, value * (1 + offsets.get(name, 0.0))) for name, value in exact.items()]


BOUNDS = [bound("a", 1.0, 1000.0), bound("b", 100.0, 1e5), bound("c", 2.0, 40.0, integer=True)]
START = {"a": 25.0, "b": 3000.0, "c": 10.0}


def test_least_squares_recovers_a_known_solution():
    calls = []
    problem = fitting.Problem(BOUNDS, truth_targets(), lambda v: loglinear(v, calls), START)
    result = fitting.fit(problem)
    assert result.converged
    assert result.values["a"] == pytest.approx(40.0, rel=0.01)
    assert result.values["b"] == pytest.approx(2000.0, rel=0.01)
    assert result.values["c"] == 7.0  # whole, and right
    assert all(float(call["c"]).is_integer() and isinstance(call["c"], int) for call in calls)
    assert result.cost < 1e-3
    # The Jacobian at the solution is the model's exponents, whatever the step was.
    assert np.allclose(result.sensitivity, S, atol=1e-9)
    # Each iteration costs the trial point and one run per parameter.
    assert result.evaluations == len(calls) <= 1 + 3 + result.iterations * 4
    assert sorted(result.moved(problem)) == ["a", "b", "c"]


def test_determination_of_a_well_posed_problem():
    problem = fitting.Problem(BOUNDS, truth_targets(), loglinear, TRUE)
    result = fitting.fit(problem)
    det = fitting.determination(problem, result.sensitivity)
    assert det.rank == 3 and math.isfinite(det.condition)
    expected = np.linalg.svd(S / 0.1, compute_uv=False)
    assert np.allclose(det.singular_values, expected, rtol=1e-6)
    assert not det.poorly_determined
    # The unmoved start is reported as such.
    assert result.moved(problem) == []


def test_rank_deficiency_is_flagged_and_the_step_stays_finite():
    # a and b enter only as a / b: the targets cannot tell them apart.
    def ratio_model(v):
        r = v["a"] / v["b"]
        return {"t0": 3 * r, "t1": 5 * r**2, "t2": 2.0 * v["c"]}

    targets = [T("t0", 3 * 0.05), T("t1", 5 * 0.05**2), T("t2", 14.0)]
    bounds = [bound("a", 1.0, 1000.0), bound("b", 100.0, 1e5),
              bound("c", 2.0, 40.0, integer=True)]
    problem = fitting.Problem(bounds, targets, ratio_model, {"a": 10.0, "b": 100.0, "c": 7.0})
    result = fitting.fit(problem)
    assert result.values["a"] / result.values["b"] == pytest.approx(0.05, rel=0.01)
    det = fitting.determination(problem, result.sensitivity)
    assert det.rank == 2 and det.condition == math.inf
    assert set(det.poorly_determined) == {"a", "b"}
    assert math.isinf(det.spread["a"]) and math.isinf(det.spread["b"])
    assert math.isfinite(det.spread["c"])
    # The undetermined direction is a = b in log space.
    assert abs(det.weakest["a"]) == pytest.approx(abs(det.weakest["b"]), rel=1e-3)
    text = fitting.fit_text(fitting.fit_document(problem, result, det))
    assert "rank 2 of 3" in text and "condition number infinite" in text
    assert "Poorly determined" in text and "not at all" in text


def test_an_iteration_moves_no_parameter_more_than_twofold():
    problem = fitting.Problem(BOUNDS, truth_targets(), loglinear, {**START, "a": 4.0})
    first = fitting.fit(problem, max_iterations=1)
    assert 4.0 < first.values["a"] <= 8.0 * (1 + 1e-9)
    assert fitting.fit(problem).values["a"] == pytest.approx(40.0, rel=0.01)


def test_only_moved_and_determined_parameters_are_labelled_for_writing():
    # a and b only as a / b (not determined one by one), c determined but left unmoved,
    # d determined and moved.
    def model(v):
        return {"t0": v["a"] / v["b"], "t1": 2.0 * v["c"], "t2": 3.0 * v["d"],
                "t3": v["d"] ** 0.05 * v["c"]}

    bounds = [bound("a", 1.0, 1000.0), bound("b", 100.0, 1e5),
              bound("c", 2.0, 40.0, integer=True), bound("d", 1.0, 1e6)]
    targets = [T("t0", 0.05), T("t1", 14.0), T("t2", 3000.0), T("t3", 7.0 * 1000**0.05)]
    problem = fitting.Problem(bounds, targets, model, {"a": 10.0, "b": 100.0, "c": 7.0,
                                                       "d": 800.0})
    result = fitting.fit(problem)
    det = fitting.determination(problem, result.sensitivity)
    assert set(result.moved(problem)) >= {"d"} and "c" not in result.moved(problem)
    labels = calibration.labels_to_write(problem, result, det, "calibrated: fitted by test")
    assert set(labels) == {"d"}, (result.moved(problem), det.spread)
    assert labels["d"] == "calibrated: fitted by test"
    # With a looser target the label says so.
    loose = [*targets[:2], T("t2", 3000.0, tolerance=2.0), T("t3", targets[3].measured,
                                                             tolerance=2.0)]
    problem = fitting.Problem(bounds, loose, model, {"a": 10.0, "b": 100.0, "c": 7.0,
                                                     "d": 800.0})
    result = fitting.fit(problem)
    det = fitting.determination(problem, result.sensitivity)
    assert "poorly determined by the targets (x/÷" in calibration.labels_to_write(
        problem, result, det)["d"]


def test_bounds_are_respected_and_a_clipped_start_is_reported():
    targets = truth_targets()
    bounds = [bound("a", 1.0, 30.0), bound("b", 100.0, 1e5),
              bound("c", 2.0, 40.0, integer=True)]
    calls = []
    problem = fitting.Problem(bounds, targets, lambda v: loglinear(v, calls),
                              {**START, "a": 100.0})
    assert problem.outside == ["a"]
    result = fitting.fit(problem)
    assert result.start["a"] == 30.0  # started clipped
    assert result.values["a"] == pytest.approx(30.0)  # the truth, 40, is out of range
    for call in calls:
        for b in bounds:
            assert b.low <= call[b.key] <= b.high


def test_bounded_step_fixes_the_violating_parameter_and_resolves_the_rest():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    r = np.array([-2.0, -1.0, -3.0])  # unconstrained solution (2, 1)
    step = fitting.bounded_step(a, r, np.array([-1.0, -1.0]), np.array([0.5, 5.0]), 0.0)
    assert step[0] == pytest.approx(0.5)
    # With d0 fixed at 0.5: minimise (d1 - 1)^2 + (d1 - 2.5)^2, so d1 = 1.75.
    assert step[1] == pytest.approx(1.75)


def test_a_whole_parameter_at_its_upper_bound_is_differenced_downwards():
    problem = fitting.Problem([bound("c", 2.0, 7.0, integer=True)],
                              [T("t", 10.0)], lambda v: {"t": 2.0 * v["c"]}, {"c": 7.0})
    lp = problem.predict(problem.x0, "start")
    jac = fitting.jacobian(problem, problem.x0, lp)
    assert jac[0, 0] == pytest.approx(1.0)
    assert set(problem.cache) == {(7.0,), (6.0,)}


def test_cross_validation_predicts_consistent_targets_and_exposes_an_outlier():
    targets = [*truth_targets(t3=0.2)]  # t3 measured 20 % off the model's truth
    calls = []
    problem = fitting.Problem(BOUNDS, targets, lambda v: loglinear(v, calls), START)
    result = fitting.fit(problem)
    before = problem.evaluations
    folds = fitting.cross_validate(problem, result)
    assert problem.evaluations - before <= len(targets)  # one real run a fold at most
    by = {f.target: f for f in folds}
    # Fitted with the rest, t3 looks half as wrong as it is; left out, it shows in full.
    assert abs(by["t3"].fit_error) < 0.2
    assert by["t3"].error == pytest.approx(1 / 1.2 - 1, abs=0.01)
    # The model is exactly log-linear: the linearised refit is the refit.
    for f in folds:
        assert f.linear_error == pytest.approx(f.error, abs=1e-6)
        assert f.independent and f.rank == 3 and f.note == ""


def test_cross_validation_groups_derived_targets():
    def model(v):
        out = loglinear(v)
        return {**out, "sum": out["t0"] + out["t1"]}

    exact = model(TRUE)
    targets = [*truth_targets(), T("sum", exact["sum"], derived_from=("t0", "t1"))]
    problem = fitting.Problem(BOUNDS, targets, model, TRUE)
    assert problem.independent == [0, 1, 2, 3]
    result = fitting.fit(problem)
    folds = {f.target: f for f in fitting.cross_validate(problem, result)}
    assert folds["t0"].left_out == ["t0", "sum"] and folds["t0"].independent
    assert folds["t2"].left_out == ["t2"]
    assert folds["sum"].left_out == ["sum"] and not folds["sum"].independent
    assert "not a test" in folds["sum"].note
    # Without t0 (and the sum), a and c are seen by t2 and t3 only, with b: still rank 3.
    assert folds["t0"].rank == 3
    doc = fitting.fit_document(problem, result, fitting.determination(problem,
                                                                      result.sensitivity),
                               list(folds.values()))
    assert doc["targets_independent"] == 4 and doc["derived_targets"] == {"sum": ["t0", "t1"]}
    text = fitting.cross_validation_text(doc)
    assert "left-out error" in text and "Over the 4 independent targets" in text


def test_an_underdetermined_fold_is_flagged():
    # t0 alone sees a, t1 alone sees b: leaving either out leaves its parameter unseen.
    problem = fitting.Problem(BOUNDS[:2], [T("t0", 80.0), T("t1", 6000.0)],
                              lambda v: {"t0": 2 * v["a"], "t1": 3 * v["b"]}, TRUE)
    result = fitting.fit(problem)
    folds = fitting.cross_validate(problem, result)
    assert [f.rank for f in folds] == [1, 1]
    assert all("underdetermined (rank 1 of 2)" in f.note for f in folds)
    # The unseen parameter stays where the full fit put it: no step along a null direction.
    assert folds[0].values == result.values


def test_resolve_reads_bounds_in_the_parameters_own_unit():
    bounds = fitting.resolve([FreeParameter("vdsp.rpc_submit_ps", "10 us", "1 ms", "r"),
                              FreeParameter("vdsp.fdiv_cycles", "2 cycles", "40 cycles", "r")])
    assert (bounds[0].low, bounds[0].high) == (10e6, 1e9)
    assert bounds[0].integer and bounds[0].info.unit == "ps"
    assert bounds[1].integer and bounds[1].show(13) == "13 cycles"
    with pytest.raises(ConfigError, match="needs its unit"):
        fitting.resolve([FreeParameter("vdsp.rpc_submit_ps", "10000", "2000000", "r")])
    with pytest.raises(ConfigError, match="not a unit of ps"):
        fitting.resolve([FreeParameter("vdsp.rpc_submit_ps", "10 cycles", "1 ms", "r")])
    with pytest.raises(ConfigError, match="no such config key"):
        fitting.resolve([FreeParameter("vdsp.nosuch", "1 us", "1 ms", "r")])
    with pytest.raises(ConfigError, match="increasing"):
        fitting.resolve([FreeParameter("vdsp.rpc_submit_ps", "1 ms", "10 us", "r")])


def test_the_j5_free_parameters_are_few_bounded_and_reasoned():
    bounds = fitting.resolve(calibration.FREE_PARAMETERS)
    assert 1 <= len(bounds) <= 4
    assert [b.key for b in bounds] == list(calibration.FREE)
    assert "cpu.fdiv_cycles" not in calibration.FREE
    independent = [t for t in calibration.TARGETS if not t.derived_from]
    assert len(independent) == 5 + len(calibration.cv_calibration.TARGETS)
    assert len(bounds) < len(independent)
    assert not set(calibration.CHECKS) & set(calibration.TARGETS)
    # Every candidate's range is written in its unit, with a reason, and holds the preset's
    # value (a value outside it means a bound in the wrong unit, or a wrong value).
    resolved = load_config("j5")
    for b in fitting.resolve(list(calibration.CANDIDATES.values())):
        assert len(b.reason) > 40
        assert b.low <= float(get_path(resolved.soc, b.key)) <= b.high, b.key
        assert not resolved.sources[b.key].startswith("documented"), b.key


def test_a_documented_value_is_never_fitted(monkeypatch):
    monkeypatch.setattr(calibration, "FREE_PARAMETERS",
                        (FreeParameter("vdsp.freq_hz", "100 MHz", "2 GHz", "test"),))
    monkeypatch.setattr(calibration, "frames", lambda *a, **k: [])
    with pytest.raises(ConfigError, match="documented"):
        calibration.run_fit()


PRESET_TEXT = """\
# a preset
[vdsp]
fdiv_cycles = { value = "13 cycles", source = "calibrated: provisional estimate" }
rpc_submit_ps = { value = "120 us", source = "calibrated: provisional estimate" }

[ddr]
latency_ps = { value = 100000, source = "calibrated: old fit" }
bw_bytes_per_s = { value = "25.6 GB/s", source = "calibrated: provisional estimate" }
"""


def test_rewrite_labels_only_what_moved():
    values = {"vdsp.fdiv_cycles": 13.2, "vdsp.rpc_submit_ps": 150e6, "ddr.latency_ps": 1e5}
    sources = dict.fromkeys(values, "calibrated: fitted by the test")
    text, changed = fitting.rewrite_preset(PRESET_TEXT, values, sources)
    assert changed == ["vdsp.rpc_submit_ps"]
    lines = text.splitlines()
    assert lines[3] == ('rpc_submit_ps = { value = "150 us", '
                        'source = "calibrated: fitted by the test" }')
    # 13.2 rounds to the 13 cycles already there; 100000 ps is the 100 ns written: unmoved,
    # so value and source stay as they were, byte for byte.
    assert lines[2] == PRESET_TEXT.splitlines()[2]
    assert lines[6] == PRESET_TEXT.splitlines()[6]
    assert text.replace(lines[3], PRESET_TEXT.splitlines()[3]) == PRESET_TEXT
    same, none = fitting.rewrite_preset(PRESET_TEXT, {"vdsp.fdiv_cycles": 13}, sources)
    assert same == PRESET_TEXT and none == []
    with pytest.raises(ConfigError, match=r"no line for cpu\.cache_op_cycles"):
        fitting.rewrite_preset(PRESET_TEXT, {"cpu.cache_op_cycles": 12}, sources)


@pytest.mark.slow
def test_the_j5_targets_see_every_free_parameter():
    """One run at the preset and one per free parameter (a few minutes)."""
    run = calibration.run_fit(max_iterations=0)
    det = run.determination
    assert det.rank == len(run.problem.bounds), (det.singular_values, det.weakest)
    assert np.all(np.any(np.abs(run.result.sensitivity) > 1e-3, axis=0))

import pytest

from emu.workloads.pointcloud import calibration


def test_errors_are_relative_to_the_measurements():
    predicted = {t.name: t.measured * 1.05 for t in (*calibration.TARGETS, *calibration.CHECKS)}
    errors = calibration.errors(predicted)
    assert all(abs(e - 0.05) < 1e-12 for e in errors.values())


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 24 open: the CV pyrUp round trip is 11 % "
                   "short at the fitted preset (README, Calibration); strict, so the day it "
                   "passes this mark must go")
def test_j5_preset_meets_every_calibration_target():
    report = calibration.calibration_report("j5")
    misses = [t for t in report["targets"] if t["fitted"] and not t["within"]]
    assert not misses, misses

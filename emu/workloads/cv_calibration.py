"""The J5 CV sample's RPC round trips (`shared/calibration/j5_cv.md`) as calibration targets.

The board ran the CV sample's programs one after another in one process, the first of them
(bilateralFilter) also the first RPC after the DSP firmware started; each figure is the
sample's "rpc begin" to "rpc finish" window around one hbDSP CV call, which
`emu.workloads.dsp_cv.run_op` reproduces (clean the sources, call, wait, invalidate the
destination). `predict` runs the same sequence in one session: bilateralFilter first (not a
target: the board's first call also started the DSP runtime), then the six operators in the
log's order, each with emu's default parameters.

Inputs, as far as the log tells them and chosen where it does not (the choices are emu's,
written here so a reader can weigh the fit):

- `data/500x480.lena.yuv` is a 500x480 picture; emu takes the grey (Y) plane of its standard
  scene at that size (the Lena picture is not shipped). pyrUp reads it whole; rotate and
  resize read the 160x220 crop at left 200, top 200, copied to its own buffer as the
  sample's "crop roi area" step does.
- `data/input.jpg` has no size in the log; its stride equals its width in bytes, so it is
  one byte a pixel: emu takes the 640x480 grey standard scene (`emu dsp cv`'s default).
- Output sizes: pyrUp doubles the sides; rotate turns 90 degrees clockwise (220x160);
  resize uses emu's default output (400x300).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from emu.runtime import session
from emu.vdsp.ops import cv
from emu.workloads import dsp_cv, images
from emu.workloads.pointcloud.fitting import Target

TOLERANCE = 0.10
_SOURCE = "shared/calibration/j5_cv.md (seed 001, CV sample, relay-server RPC mode)"


@dataclass(frozen=True, kw_only=True)
class CvTarget(Target):
    """A round trip of the log, with the operator and input that make it."""

    op: str
    picture: str  # "lena" (500x480) or "input" (input.jpg)
    roi: bool = False


def _target(label: str, ms: float, op: str, picture: str, roi: bool = False) -> CvTarget:
    return CvTarget(f"cv {label} rpc round trip", ms, "ms", TOLERANCE, _SOURCE, op=op,
                    picture=picture, roi=roi)


# Fitted: the operators whose inputs the log gives (the 500x480 picture and its crop), in
# the order of the board's log.
TARGETS = (
    _target("pyrUp", 0.904, "pyr_up", "lena"),
    _target("resize", 0.649, "resize", "lena", roi=True),
    _target("rotate", 0.553, "rotate", "lena", roi=True),
)
# Reported beside the fit, not fitted: the operators on input.jpg, whose size the log does
# not give (emu assumes 640x480, so their errors say as much about that guess as about the
# model); Canny's time also hangs on the picture's edges (its hysteresis follows them) and
# on thresholds the log does not give either.
CHECKS = (
    _target("Canny", 3.243, "canny", "input"),
    _target("GaussianBlur", 0.483, "gaussian_blur", "input"),
    _target("threshold", 0.476, "threshold", "input"),
)
# The run script calls the sample's programs in the order of their names, as the log shows.
_RUN = sorted((*TARGETS, *CHECKS), key=lambda t: t.op)

LENA = (500, 480)
ROI = (200, 200, 160, 220)  # left, top, width, height
INPUT_JPG = (640, 480)
FIRST = "bilateral_filter"  # the log's first operator: warms the path, not a target


def pictures() -> dict[str, npt.NDArray[np.uint8]]:
    """The grey inputs of the run (see the module docstring)."""
    lena = cv.luma(images.standard_image(*LENA))
    left, top, width, height = ROI
    return {
        "lena": lena,
        "roi": np.ascontiguousarray(lena[top: top + height, left: left + width]),
        "input": cv.luma(images.standard_image(*INPUT_JPG)),
    }


def predict(preset: str = "j5", overrides: Sequence[str] = (), config_file: str | None = None,
            progress: Callable[[int, int, str], None] | None = None,
            ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The emulator's round trip for every target and check (ms), and each operator's
    report, run in the order of the board's log."""
    pics = pictures()
    reports = []
    with session.Session(preset, config_file, overrides):
        first = cv.cv_operator(FIRST)
        assert first is not None
        dsp_cv.run_op(first, [pics["input"]], first.defaults())
        for done, target in enumerate(_RUN):
            op = cv.cv_operator(target.op)
            assert op is not None
            _, report = dsp_cv.run_op(op, [pics["roi" if target.roi else target.picture]],
                                      op.defaults())
            reports.append(report)
            if progress is not None:
                progress(done + 1, len(_RUN), target.name)
    return {t.name: r["rpc_ms"] for t, r in zip(_RUN, reports, strict=True)}, reports

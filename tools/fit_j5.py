"""Fit the unknown J5 parameters to the board measurements, once for the whole SoC.

    python tools/fit_j5.py                     # fit, print the result and its sensitivity
    python tools/fit_j5.py --cross-validate    # ... and leave each target out in turn
    python tools/fit_j5.py --write             # ... and store it in emu/soc/presets/j5.toml

What is free is `FREE` of `emu/workloads/pointcloud/calibration.py`, one list (at most four
keys); `CANDIDATES` there gives each its plausible range, written in its own unit, and the
reason for it (printed by `--list`). Everything else keeps its preset value; a documented
value is never free. The targets are that module's `TARGETS`: seven, of which five are independent
("dsp2 total" and "dsp2 avg over 16 frames" are both the sum of the three dsp2 stages).

The fit (`emu.workloads.pointcloud.fitting`) is Levenberg-Marquardt in log space: residual
log(predicted / measured) / tolerance for every target, a finite-difference Jacobian
d log(target) / d log(parameter) (one run of the targets per free parameter), bounds kept,
whole-number parameters rounded, started from the preset's values; a run of the targets is
the calibration's 16 synthetic frames (seed 0) through cpu and dsp2, 15-30 s. It reports
which parameters moved, the sensitivity matrix at the solution, its singular values, rank and
condition number, and how tightly the targets pin each parameter.

`--write` rewrites only the lines of parameters whose value changed, with the source
"calibrated: fitted by tools/fit_j5.py ..."; a parameter the fit did not move keeps its value
and its source. `emu calibrate --cross-validate` runs the same fit with cross-validation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emu.workloads.pointcloud import calibration, fitting  # noqa: E402

PRESET = ROOT / "emu" / "soc" / "presets" / "j5.toml"


def write(run: calibration.FitRun) -> None:
    labels = calibration.labels_to_write(run.problem, run.result, run.determination)
    text, changed = fitting.rewrite_preset(PRESET.read_text("utf-8"),
                                           {k: run.result.values[k] for k in labels}, labels)
    PRESET.write_text(text, "utf-8")
    moved = run.result.moved(run.problem)
    kept = [k for k in run.problem.keys if k not in changed]
    print(f"wrote {PRESET}: {', '.join(changed) or 'nothing'} relabelled fitted"
          + "".join(f"; {k} kept as it was ("
                    + ("moved but not determined by the targets" if k in moved else "unmoved")
                    + ")" for k in kept))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="store the fit in the preset (moved parameters only)")
    parser.add_argument("--cross-validate", action="store_true",
                        help="leave each target out, refit, predict it (n more runs)")
    parser.add_argument("--list", action="store_true",
                        help="print the free parameters, their ranges and reasons, and stop")
    parser.add_argument("--max-iterations", type=int, default=8)
    parser.add_argument("--max-evals", type=int, default=60)
    args = parser.parse_args()
    bounds = fitting.resolve(calibration.FREE_PARAMETERS)
    for b in bounds:
        print(f"free: {b.key} in {b.show(b.low)} to {b.show(b.high)}: {b.reason}")
    if args.list:
        return
    run = calibration.run_fit(cross_validate=args.cross_validate,
                              max_iterations=args.max_iterations,
                              max_evaluations=args.max_evals,
                              log=lambda line: print(line, flush=True))
    print()
    print(fitting.fit_text(run.document))
    if run.folds is not None:
        print()
        print(fitting.cross_validation_text(run.document))
    moved = run.result.moved(run.problem)
    print("\nmoved:", ", ".join(moved) or "none",
          "| fitted:", " ".join(f"{b.key}={b.show(run.result.values[b.key])}"
                                for b in run.problem.bounds))
    if args.write:
        if not run.result.converged:
            sys.exit("not written: the fit did not converge (raise --max-iterations)")
        write(run)


if __name__ == "__main__":
    main()

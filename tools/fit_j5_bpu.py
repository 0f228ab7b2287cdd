"""Fit the unknown J5 BPU parameters to the compiler's MobileNetV2 estimates, once.

    python tools/fit_j5_bpu.py            # fit, print the parameters, the fit and the check
    python tools/fit_j5_bpu.py --write    # ... and store them in emu/soc/presets/j5.toml

The free parameters and the values each may take are `FREE` of
`emu/workloads/bpu_calibration.py` (granules of the MAC array, the dense and depthwise
efficiencies, the feature-map SRAM, the DDR port, the per-layer fixed cost); the targets
are that module's (the batch-256 per-layer table, the batch-256 and batch-1 totals and DDR
bytes per frame); what is minimised is its `fit_error`. The search is coordinate descent
over those value lists (no scipy): each parameter in turn takes the value that lowers the
error most with the others held, until a whole round changes nothing; it runs from the
preset's values and from `STARTS` random grid points (seed 0) and keeps the best, in
about three minutes. YOLOv8s is not fitted: its error is a prediction.

`--write` rewrites the lines of the parameters whose value changed, with the source
"calibrated: fitted by tools/fit_j5_bpu.py to ...".
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emu.soc.config import SocConfig, load_config  # noqa: E402
from emu.workloads import bpu_calibration as cal  # noqa: E402
from emu.workloads.pointcloud.fitting import rewrite_preset  # noqa: E402

PRESET = ROOT / "emu" / "soc" / "presets" / "j5.toml"
STARTS = 24
SOURCE = ("calibrated: fitted by tools/fit_j5_bpu.py to shared/calibration/j5_bpu.md "
          "(hb_perf, MobileNetV2 32x32 10 classes: batch-256 per-layer table and totals, "
          "batch-1 total)")


def with_values(cfg: SocConfig, values: dict[str, Any]) -> SocConfig:
    fields = {key.removeprefix("bpu."): value for key, value in values.items()}
    return dataclasses.replace(cfg, bpu=dataclasses.replace(cfg.bpu, **fields))


def error(cfg: SocConfig, values: dict[str, Any]) -> float:
    return cal.fit_error(cal.fitted_targets(with_values(cfg, values)))


def descend(cfg: SocConfig, values: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Coordinate descent over `cal.FREE` from `values`."""
    best = error(cfg, values)
    changed = True
    while changed:
        changed = False
        for key, candidates in cal.FREE.items():
            for value in candidates:
                trial = error(cfg, {**values, key: value})
                if trial < best - 1e-12:
                    best, values, changed = trial, {**values, key: value}, True
    return values, best


def fit(cfg: SocConfig, starts: int = STARTS, seed: int = 0) -> tuple[dict[str, Any], float]:
    """The best descent from the preset's values and from `starts` seeded random points of
    the grid (the error has several local minima: granules trade against SRAM size)."""
    rng = random.Random(seed)
    points = [{key: getattr(cfg.bpu, key.removeprefix("bpu.")) for key in cal.FREE}]
    points += [{key: rng.choice(values) for key, values in cal.FREE.items()}
               for _ in range(starts)]
    results = [descend(cfg, point) for point in points]
    return min(results, key=lambda result: result[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fit in the preset")
    args = parser.parse_args()
    cfg = load_config().soc
    print(f"preset: fit error {error(cfg, {}):.4f}")
    values, best = fit(cfg)
    print(f"fitted: fit error {best:.4f}")
    for key, value in values.items():
        print(f"  {key} = {value}")
    fitted = with_values(cfg, values)
    for row in cal.report(fitted):
        print(f"  {row['use']:9} {row['name']:55} target {row['target']:>12} "
              f"model {row['model']:>14} error {row['error']:+.1%}")
    if args.write:
        text, changed = rewrite_preset(PRESET.read_text("utf-8"), values,
                                       dict.fromkeys(values, SOURCE))
        PRESET.write_text(text, "utf-8")
        print(f"wrote {PRESET}: {', '.join(changed) or 'nothing changed'}")


if __name__ == "__main__":
    main()

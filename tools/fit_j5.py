"""Fit the unknown J5 parameters to the board measurements, once for the whole SoC.

    python tools/fit_j5.py            # search, print the result
    python tools/fit_j5.py --write    # ... and store it in emu/soc/presets/j5.toml

The objective is the sum over the targets of `emu.workloads.pointcloud.calibration` of
(relative error / tolerance)**2: every target counts, none is fitted on its own. The search
is a coordinate descent in log space (each parameter tried up and down by a factor that
shrinks when no move helps), started from the preset's current values. The frames are the
calibration's 16 synthetic frames (seed 0), generated once.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emu.soc.config import format_value, load_config, schema_fields  # noqa: E402
from emu.workloads.pointcloud import calibration  # noqa: E402

# (key, integer?, lower bound, upper bound): the unknowns of shared/calibration/j5.md that
# the point-cloud measurements can see.
PARAMETERS = [
    ("cpu.freq_hz", False, 0.8e9, 2.0e9),
    ("cpu.fdiv_cycles", True, 3, 40),
    ("cpu.miss_overlap", True, 1, 16),
    ("ddr.latency_ps", True, 40_000, 400_000),
    ("vdsp.fdiv_cycles", True, 2, 40),
    ("vdsp.rpc_submit_ps", True, 10_000, 2_000_000),
    ("cpu.cache_op_cycles", True, 1, 200),
]
SOURCE = ("calibrated: fitted by tools/fit_j5.py to shared/calibration/j5.md "
          "(CenterPoint, 16 synthetic frames, seed 0)")


def _value(key: str) -> float:
    obj = load_config().soc
    for part in key.split("."):
        obj = getattr(obj, part)
    return float(obj)  # type: ignore[arg-type]


def _overrides(values: dict[str, float]) -> list[str]:
    out = []
    for key, integer, _, _ in PARAMETERS:
        v = values[key]
        out.append(f"{key}={round(v) if integer else v!r}")
    return out


def objective(frames, values: dict[str, float]) -> tuple[float, dict[str, float]]:
    predicted, _ = calibration.predict(frames, overrides=_overrides(values))
    err = calibration.errors(predicted)
    cost = sum((err[t.name] / t.tolerance) ** 2 for t in calibration.TARGETS)
    return cost, err


def fit(max_evals: int) -> dict[str, float]:
    frames = calibration.frames()
    values = {key: _value(key) for key, *_ in PARAMETERS}
    best, err = objective(frames, values)
    evals = 1
    print(f"start: cost {best:.3f}", {k: round(v, 3) for k, v in err.items()}, flush=True)
    step = math.log(1.5)
    while evals < max_evals and step > math.log(1.02):
        moved = False
        for key, integer, low, high in PARAMETERS:
            for direction in (1, -1):
                trial = dict(values)
                v = min(high, max(low, values[key] * math.exp(direction * step)))
                if integer:
                    v = float(round(v))
                if v == values[key]:
                    continue
                trial[key] = v
                cost, trial_err = objective(frames, trial)
                evals += 1
                if cost < best:
                    best, values, err, moved = cost, trial, trial_err, True
                    print(f"eval {evals}: {key} -> {v:g}, cost {best:.3f}", flush=True)
                    break
                if evals >= max_evals:
                    break
        if not moved:
            step /= 2
    print(f"done after {evals} evaluations: cost {best:.3f}")
    for name, e in err.items():
        print(f"  {name:40s} {e:+.1%}")
    return values


def write(values: dict[str, float]) -> None:
    path = ROOT / "emu" / "soc" / "presets" / "j5.toml"
    fields = {info.key: info for info in schema_fields()}
    text = path.read_text()
    section = ""
    lines = []
    for line in text.splitlines():
        header = re.match(r"^\[(.+)\]$", line)
        if header:
            section = header.group(1)
        match = re.match(r"^(\w+) = \{ value = .*\}$", line)
        key = f"{section}.{match.group(1)}" if match else ""
        spec = next((p for p in PARAMETERS if p[0] == key), None)
        if match and spec is not None:
            v = values[key]
            shown = format_value(fields[key], round(v) if spec[1] else v)
            line = f'{match.group(1)} = {{ value = "{shown}", source = "{SOURCE}" }}'
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fit in the preset")
    parser.add_argument("--max-evals", type=int, default=60)
    args = parser.parse_args()
    values = fit(args.max_evals)
    print("fitted:", " ".join(_overrides(values)))
    if args.write:
        write(values)


if __name__ == "__main__":
    main()

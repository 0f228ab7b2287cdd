"""The static estimate (`emu compile --perf`) against the simulated run (`emu perf`, one
thread) for zoo networks at batch 1, one row each: the two latencies and their difference.

Each network is compiled as `tools/zoo_estimates.py` does it (default options, two random
calibration samples) and compared by `emu.workloads.nn_perf.static_and_run_ms` (the run's
steady state: the median of three frames). tests/workloads/test_estimate_vs_run.py checks
the same rows.

    python tools/estimate_vs_run.py [NAME ...] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from emu.nn import compiler, zoo
from emu.soc.config import load_config
from emu.workloads import nn_perf


def row(name: str, overrides: Sequence[str] = ()) -> dict[str, float | str]:
    """{name, static_ms, run_ms, diff}: `diff` is static over run, less one."""
    soc = load_config("j5", None, overrides).soc
    model = compiler.compile_model(zoo.build(name, batch=1), name,
                                   compiler.CompileOptions(calib_random=2), soc)
    static, run = nn_perf.static_and_run_ms(model, "j5", overrides)
    return {"name": name, "static_ms": static, "run_ms": run, "diff": static / run - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="zoo networks (default: all)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="a configuration override, as emu's --set")
    args = parser.parse_args()
    print(f"{'model':<22} {'static ms':>10} {'run ms':>10} {'diff':>8}")
    for name in args.names or zoo.names():
        r = row(name, args.overrides)
        print(f"{r['name']:<22} {r['static_ms']:>10.3f} {r['run_ms']:>10.3f} "
              f"{r['diff']:>+8.1%}", flush=True)


if __name__ == "__main__":
    main()

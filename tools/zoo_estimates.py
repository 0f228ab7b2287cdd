"""The static estimate of every zoo network at its default size, one row each: how many
nodes run on the BPU, how many CPU segments the placement leaves, the latency and the BPU's
share of it, the DDR bytes per frame and the output bytes the BPU hands over.

Compiled with the default options except two calibration samples (`--calib-random 2`, to
be quick; the int16 choices may differ from a sixteen-sample compile). Its use: run it on
two versions of emu (PYTHONPATH pointing at each) and compare the rows, to see which
compiler change moved which network's timing.

    python tools/zoo_estimates.py [NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from emu.nn import compiler, zoo
from emu.soc.config import load_config


def row(name: str) -> dict[str, object]:
    soc = load_config("j5", None, []).soc
    model = compiler.compile_model(zoo.build(name), name,
                                   compiler.CompileOptions(calib_random=2), soc)
    estimate = model.estimate(soc)
    bpu = {n for s in model.segments if s.kind == "bpu" for n in s.nodes}
    dtypes = model.quant.tensor_dtypes()
    leaving = {t for s in model.segments if s.kind == "bpu" for t in s.outputs}
    handed = sum(math.prod(model.graph.tensors[t].shape)
                 * np.dtype(dtypes.get(t, "int8")).itemsize for t in leaving)
    return {"name": name, "bpu_nodes": len(bpu), "nodes": len(model.graph.nodes),
            "cpu_segments": sum(s.kind == "cpu" for s in model.segments),
            "latency_ms": round(estimate.latency_ms, 4),
            "bpu_ms": round(estimate.bpu_ps / 1e9, 4),
            "ddr_mb": round(estimate.ddr_bytes_per_frame / 1e6, 3),
            "bpu_out_kb": round(handed / 1e3, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="zoo networks (default: all)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args()
    header = ("name", "bpu_nodes", "nodes", "cpu_segments", "latency_ms", "bpu_ms", "ddr_mb",
              "bpu_out_kb")
    if not args.json:
        print(" ".join(f"{h:>19}" if k else f"{h:<19}" for k, h in enumerate(header)))
    for name in args.names or zoo.names():
        values = row(name)
        if args.json:
            print(json.dumps(values), flush=True)
        else:
            print(" ".join(f"{values[h]!s:>19}" if k else f"{values[h]!s:<19}"
                           for k, h in enumerate(header)), flush=True)


if __name__ == "__main__":
    main()

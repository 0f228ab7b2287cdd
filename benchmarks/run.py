"""Run every benchmark in this folder (or the ones named) and print their figures.

    python benchmarks/run.py            # all of them
    python benchmarks/run.py des cache  # bench_des.py and bench_cache.py
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The benchmarks import `emu` (installed or not) and the references in `tests/`.
sys.path.insert(0, str(HERE.parent))


def main(argv: list[str]) -> int:
    available = {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}
    chosen = argv or list(available)
    unknown = [name for name in chosen if name not in available]
    if unknown:
        print(f"unknown benchmark {unknown[0]!r} (have: {', '.join(available)})", file=sys.stderr)
        return 2
    for name in chosen:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", available[name])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"== {name}")
        start = time.perf_counter()
        module.main()
        print(f"   ({time.perf_counter() - start:.1f} s wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

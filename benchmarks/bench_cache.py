"""Throughput of the A55 cache model: the numba kernel against the pure-Python reference.

Both run the same stream on the j5 cache hierarchy: every other address walks a 16 MiB
buffer in 8-byte steps (mostly L1D hits, a line fill every eighth access), the rest are
uniform over 256 MiB (mostly DDR reads); 30% are writes; the stream is dealt to the 8
cores in chunks. Run: `python benchmarks/bench_cache.py`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Protocol

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
NUMBA_ADDRESSES = 2_000_000
REFERENCE_ADDRESSES = 200_000
CHUNK_ADDRESSES = 50_000


class CacheModel(Protocol):
    def access(self, core: int, addrs: np.ndarray, is_write: np.ndarray) -> object: ...


def make_stream(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    addrs = np.empty(n, dtype=np.int64)
    strided = np.arange((n + 1) // 2, dtype=np.int64) * 8 % (16 << 20)
    addrs[0::2] = strided
    addrs[1::2] = rng.integers(0, 256 << 20, n // 2)
    return addrs, rng.random(n) < 0.3


def addresses_per_second(
    model: CacheModel, cores: int, addrs: np.ndarray, writes: np.ndarray
) -> float:
    start = time.perf_counter()
    for i, first in enumerate(range(0, addrs.size, CHUNK_ADDRESSES)):
        chunk = slice(first, first + CHUNK_ADDRESSES)
        model.access(i % cores, addrs[chunk], writes[chunk])
    return addrs.size / (time.perf_counter() - start)


def main() -> None:
    sys.path.insert(0, str(REPO_ROOT))
    from emu.mem.cache import CacheHierarchy
    from emu.soc.config import load_config
    from tests.mem.cache_reference import ReferenceHierarchy

    cpu = load_config().soc.cpu
    addrs, writes = make_stream(NUMBA_ADDRESSES)

    model = CacheHierarchy(cpu)
    model.access(0, addrs[:1000], writes[:1000])  # compile (or load from the disk cache)
    model.reset()
    numba_rate = addresses_per_second(model, cpu.cores, addrs, writes)

    reference = ReferenceHierarchy(cpu)
    ref_addrs, ref_writes = addrs[:REFERENCE_ADDRESSES], writes[:REFERENCE_ADDRESSES]
    reference_rate = addresses_per_second(reference, cpu.cores, ref_addrs, ref_writes)

    print(f"numba model:      {numba_rate:,.0f} addresses/s over {addrs.size:,} addresses")
    print(f"python reference: {reference_rate:,.0f} addresses/s over {ref_addrs.size:,} addresses")
    print(f"speed-up:         {numba_rate / reference_rate:.1f}x")


if __name__ == "__main__":
    main()

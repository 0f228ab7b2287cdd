"""NumPy's BLAS products on one thread, so that their bits do not depend on the machine's
thread count.

OpenBLAS shares a product out among its threads differently for different thread counts,
and float sums then round differently: four of five conv-shaped float32 products (such as
64 x 576 times 576 x 1024) gave other bits with `OPENBLAS_NUM_THREADS=2` than with 1, and a
resnet50 compiled under each differed in weight scales, biases and int8 weights. emu's
float work (the zoo's BatchNormalization statistics, calibration, the accuracy check, the
float layers of the reference) must give the same bits in a sweep worker, which has one
BLAS thread, as in the same command run on its own, which has one a core. So every BLAS
product of that work runs on one thread: `matmul`, or any code inside `one_thread()`
(threadpoolctl sets OpenBLAS's thread count and puts it back; about 10 us a call). Another
CPU family may still take other OpenBLAS kernels, and so other bits: the guarantee is for
one machine. Products of integers held in float64 (`emu.nn.kernels`) are exact in any
order and need none of this.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

_controller: list[Any] = []  # threadpoolctl's view of the loaded BLAS, made on first use


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the body with NumPy's BLAS on one thread (as it was, after)."""
    if not _controller:
        from threadpoolctl import ThreadpoolController

        _controller.append(ThreadpoolController())
    with _controller[0].limit(limits=1, user_api="blas"):
        yield


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.matmul(a, b)` on one BLAS thread."""
    with one_thread():
        return np.matmul(a, b)

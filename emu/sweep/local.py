"""Local worker processes for a sweep: `LocalExecutor(workers)`.

A `concurrent.futures.ProcessPoolExecutor` over the `spawn` context: each worker is a new
interpreter (nothing of the caller's state, threads or simulation is inherited) that
imports emu's commands once when it starts, then runs point after point; the compiled
kernels load from numba's cache on a worker's first point. Each worker's BLAS and OpenMP
thread pools are sized to its share of the cores (`threads_per_worker`), so N workers do not
start N pools of one thread a core each. The pool lives until `close()`,
so several sweeps through one executor pay the start-up once. A worker whose parent has died
(the sweep was killed, SIGKILL included) exits by itself within a second instead of waiting
for work forever.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

PARENT_POLL_S = 0.5


# The thread pools of the numerical libraries a worker's NumPy may use (OpenBLAS, MKL,
# OpenMP), sized by these variables when the library loads.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """The BLAS threads each of `workers` processes may use so that together they use the
    machine's cores (`os.cpu_count()`) and no more: a pool of each library's default size
    (one thread a core) in every worker would put two or more threads on each core."""
    return max(1, (cores or os.cpu_count() or 1) // workers)


def _start_worker(parent: int, blas_threads: int) -> None:
    """A worker's initializer: size the numerical libraries' thread pools (before anything
    imports NumPy; a variable the user set is kept), import the commands, watch the
    parent."""
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(blas_threads))
    import emu.commands

    emu.commands.commands()  # loaded once per worker, not once per point

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="emu-sweep-parent-watch", daemon=True).start()


class LocalExecutor:
    """Points on `workers` processes of this machine, results as they finish."""

    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._broken = False

    def _get_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._broken:  # a worker died: that pool takes no more work, start another
            self.close()
            self._broken = False
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(os.getpid(), threads_per_worker(self.workers)))
        return self._pool

    def map_unordered(self, fn: Callable[[Any], Any],
                      items: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        if not items:
            return
        pool = self._get_pool()
        futures = {pool.submit(fn, item): index for index, item in enumerate(items)}
        try:
            for future in concurrent.futures.as_completed(futures):
                index = futures[future]
                try:
                    result = future.result()
                except Exception as exc:  # the worker died or could not run the point
                    if isinstance(exc, concurrent.futures.process.BrokenProcessPool):
                        self._broken = True
                    result = {"status": "error", "transient": True, "seconds": None,
                              "error": f"worker failed: {type(exc).__name__}: {exc}"
                                       .splitlines()[0]}
                yield index, result
        finally:
            for future in futures:
                future.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

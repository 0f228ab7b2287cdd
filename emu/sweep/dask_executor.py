"""Running a sweep's points on a Dask cluster (`emu sweep run --dask ADDRESS | --dask-local N`).

`DaskExecutor` is an executor as `emu.sweep` wants one: `map_unordered(fn, items)` yields
`(index, result)` pairs as the points complete, whichever finishes first, and `close()` lets
the cluster go. Each item becomes one task that calls `fn` (the sweep gives
`emu.sweep.runner.run_point`) in a worker process, so a worker needs emu installed, the same
version as the client: it imports `fn` by name and runs the simulation itself.

A point whose task fails (an exception in `fn`, a worker process that died under it, a
result that could not be sent back) comes out as an error result for that point, in the
shape `run_point` gives one (`status` "error", the message, `seconds`, marked `transient`
as the runner's protocol asks of an executor's own failures), and the sweep goes on: one
bad point, or one lost worker, costs that point and not the sweep.

`dask.distributed` is the optional `sweep` extra; it is imported here only, when an executor
is made, so nothing else in emu needs it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from emu.errors import EmuError, InputError

# How long connecting to a scheduler at `--dask ADDRESS` may take before it is refused.
CONNECT_TIMEOUT_S = 30
MAX_LOCAL_WORKERS = 256
# What a local cluster is started with, in place of Dask defaults that cost a simulation
# dearly (measured on `benchmarks/run.py sweep`, 2 workers on 2 cores):
# - MALLOC_TRIM_THRESHOLD_=65536 in the workers' environment, which also turns off glibc's
#   adaptive mmap threshold: every array above 128 KiB is then a fresh mapping, and a point
#   that allocates its buffers afresh page-faults on every touch of them (119,000 minor
#   faults and 0.32 s of system time a point where a local worker has 5,000 and 0.02 s: 2.6
#   times the wall time);
# - the worker's statistical profiler, which walks the running task's stack every 10 ms
#   (0.253 s a point with it, 0.239-0.246 s without, 0.22 s on a local worker);
# - the cluster's own periodic work, which on a machine whose cores all run points takes
#   its time from them: each server's event-loop health check every 20 ms, the workers' and
#   nannies' memory checks every 100 ms, each server's resource sampling every 500 ms (and
#   its GIL sampling every 1 ms where `gilknocker` is installed), the scheduler's active
#   memory manager every 2 s. With Dask's defaults the cluster's processes other than the
#   points used 14.5 ms of CPU per 0.16 s point, against 1.2 ms for local workers; with
#   the intervals below, 10 ms. The memory checks still run, once a second, so a worker
#   that outgrows its share of memory is still paused, then restarted; a sweep's tasks hold
#   no data for the memory manager to move.
# A cluster at `--dask ADDRESS` is started by its owner, who can do the same in its Dask
# configuration (these keys, and `distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_:
# null`).
CLUSTER_CONFIG = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                  "distributed.worker.profile.enabled": False,
                  "distributed.admin.tick.interval": "1s",
                  "distributed.worker.memory.monitor-interval": "1s",
                  "distributed.admin.system-monitor.interval": "5s",
                  "distributed.admin.system-monitor.gil.enabled": False,
                  "distributed.scheduler.active-memory-manager.start": False}


class DaskExecutor:
    """Run sweep points as tasks on a Dask scheduler: an existing one at `address`
    (`tcp://host:8786`), or a cluster of `local_workers` single-threaded worker processes
    started on this machine for the executor's lifetime. Give exactly one of the two; an
    unreachable address is refused after `connect_timeout_s`."""

    def __init__(self, address: str | None = None, local_workers: int | None = None, *,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        if (address is None) == (local_workers is None):
            raise InputError("a Dask executor takes a scheduler address (--dask ADDRESS) or a "
                             "number of local workers (--dask-local N), not both or neither")
        if local_workers is not None and not 1 <= local_workers <= MAX_LOCAL_WORKERS:
            raise InputError(f"--dask-local {local_workers}: expected a whole number of workers "
                             f"from 1 to {MAX_LOCAL_WORKERS}")
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise InputError("--dask and --dask-local need dask.distributed: install it with "
                             "pip install 'emu[sweep]'") from None
        self._cluster: Any = None
        self._client: Any = None
        if local_workers is not None:
            # One thread a worker: a simulation holds the GIL, so more threads would only
            # take turns. The scheduler's web server (the dashboard, when bokeh is installed)
            # takes a free port, not 8787, which another cluster may hold, on the loopback
            # interface only: other machines cannot reach it (Dask's ":0" listens on all).
            # The workers' own log lines stay quiet below CRITICAL: a failed point is
            # reported as that point's error. The cluster starts as `CLUSTER_CONFIG` says.
            import dask

            try:
                with dask.config.set(CLUSTER_CONFIG):
                    self._cluster = LocalCluster(
                        n_workers=local_workers, threads_per_worker=1, processes=True,
                        dashboard_address="127.0.0.1:0", silence_logs=logging.CRITICAL)
            except Exception as exc:
                raise EmuError(f"--dask-local {local_workers}: the local Dask cluster did not "
                               f"start ({_line(exc)})") from None
            try:
                self._client = Client(self._cluster)
            except BaseException:
                self._cluster.close()
                raise
        else:
            assert address is not None
            try:
                self._client = Client(address, timeout=connect_timeout_s)
            except (OSError, TimeoutError, ValueError) as exc:
                raise InputError(f"--dask {address}: cannot reach a Dask scheduler there "
                                 f"({_line(exc)})") from None

    def map_unordered(self, fn: Callable[[Any], Any],
                      items: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """Submit `fn(item)` for every item and yield `(index of the item, result)` as each
        task completes. A failed task yields an error result instead of raising. Tasks not
        yet done when the caller stops iterating are cancelled."""
        from dask.distributed import as_completed

        if self._client is None:
            raise InputError("this Dask executor is closed")
        batch = uuid.uuid4().hex[:12]  # the task names: unique on a shared scheduler
        index_of: dict[Any, int] = {}
        futures = []
        for index, item in enumerate(items):
            future = self._client.submit(fn, item, key=f"emu-point-{batch}-{index}", pure=False)
            index_of[future.key] = index
            futures.append(future)
        try:
            for future in as_completed(futures):
                index = index_of[future.key]
                try:
                    result = future.result()
                except Exception as exc:  # raised by fn, a dead worker, a lost result
                    result = _failure(exc)
                future.release()
                yield index, result
        finally:
            pending = [f for f in futures if not f.done()]
            if pending:
                self._client.cancel(pending)

    def close(self) -> None:
        """Shut the client down, and the local cluster if this executor started one.
        Closing twice does nothing."""
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        try:
            if client is not None:
                client.close()
        finally:
            if cluster is not None:
                cluster.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _failure(exc: BaseException) -> dict[str, Any]:
    """The error result of a point whose task failed: one line naming what went wrong (a
    worker that died under it shows as KilledWorker). Its run time is unknown: 0. It is
    transient (`emu.sweep.runner`): reported, not stored, so the next run retries it."""
    return {"status": "error", "error": f"on the Dask cluster: {_line(exc)}", "seconds": 0.0,
            "transient": True}


def _line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


if TYPE_CHECKING:  # mypy checks that the class is an executor as emu.sweep.run takes one
    from emu.sweep.runner import Executor

    _CHECK: type[Executor] = DaskExecutor

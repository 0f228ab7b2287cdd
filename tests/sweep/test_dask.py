"""The Dask executor (emu.sweep.dask_executor) on a real local cluster of two worker
processes: a sweep through it gives what the in-process executor gives, and a point whose
task fails, or whose worker dies, becomes that point's error while the others complete."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("dask.distributed")

import emu.sweep
from emu.errors import InputError
from emu.sweep.dask_executor import CLUSTER_CONFIG, DaskExecutor

SPEC = {
    "scenario": {"command": "dsp", "args": ["softmax", "--shape", "16,100"],
                 "metrics": {"compute_ms": "cores.0.compute_ms",
                             "idma_in_bytes": "cores.0.idma_in_bytes"}},
    "axes": {"vdsp.freq_hz": ["400MHz", "1GHz"]},
}


@pytest.fixture(scope="module")
def executor():
    import dask

    # A task whose worker dies fails at once instead of being retried on the next worker.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        ex = DaskExecutor(local_workers=2)
    try:
        yield ex
    finally:
        ex.close()


def _plain(rows):
    """What a sweep's rows say about the simulation (not whether they came from a store)."""
    return [(r["axes"], r["metrics"], r["status"], r["error"], r["key"]) for r in rows]


def test_a_sweep_on_dask_gives_what_the_calling_process_gives(executor):
    on_dask = emu.sweep.run(SPEC, executor=executor)
    here = emu.sweep.run(SPEC, workers=0)
    assert _plain(on_dask) == _plain(here)
    assert [r["status"] for r in on_dask] == ["ok", "ok"]
    slow, fast = (r["metrics"] for r in on_dask)
    assert slow["compute_ms"] > fast["compute_ms"]
    assert slow["idma_in_bytes"] == fast["idma_in_bytes"] == 6400


def test_results_come_with_their_index_and_failures_are_results(executor):
    items = [[("a", 1)], 5, [("c", 3)]]  # dict(5) raises TypeError on the worker
    results = dict(executor.map_unordered(dict, items))
    assert results[0] == {"a": 1} and results[2] == {"c": 3}
    assert results[1]["status"] == "error" and results[1]["transient"] is True
    assert results[1]["error"] == \
        "on the Dask cluster: TypeError: 'int' object is not iterable"


def test_a_worker_that_dies_costs_its_point_only(executor):
    results = dict(executor.map_unordered(os._exit, [3]))
    assert results[0]["status"] == "error"
    assert "KilledWorker" in results[0]["error"]
    # The cluster replaced the worker and goes on.
    assert dict(executor.map_unordered(abs, [-2, -3])) == {0: 2, 1: 3}


def test_the_local_workers_keep_glibcs_allocator_settings(executor):
    """Dask's default MALLOC_TRIM_THRESHOLD_ made every point page-fault its buffers afresh
    (2.6 times the wall time of a point on a local worker); the local cluster's workers start
    without it, as the process that made the cluster has none."""
    assert os.getenv("MALLOC_TRIM_THRESHOLD_") is None
    assert dict(executor.map_unordered(os.getenv, ["MALLOC_TRIM_THRESHOLD_"])) == {0: None}


def test_the_local_workers_run_no_statistical_profiler(executor):
    """Its stack walk every 10 ms slowed each point by about 6 % (emu.sweep.dask_executor)."""
    import dask

    assert dict(executor.map_unordered(dask.config.get,
                                       ["distributed.worker.profile.enabled"])) == {0: False}


def test_the_local_cluster_runs_its_periodic_work_seldom(executor):
    """The cluster's own periodic checks took CPU from the points on a machine whose cores
    all run points (emu.sweep.dask_executor): the workers get the cluster's settings, and
    the scheduler runs no active memory manager."""
    import dask

    keys = [key for key in CLUSTER_CONFIG if "pre-spawn-environ" not in key]
    assert dict(executor.map_unordered(dask.config.get, keys)) == {
        index: CLUSTER_CONFIG[key] for index, key in enumerate(keys)}
    assert executor._cluster.scheduler.extensions["amm"].running is False


def test_the_local_clusters_web_server_listens_on_loopback_only(executor):
    """Dask's default (":0") served the scheduler's pages on every interface."""
    server = executor._cluster.scheduler.http_server
    hosts = {sock.getsockname()[0] for sock in server._sockets.values()}
    assert hosts == {"127.0.0.1"}


def test_close_twice_and_use_after_close():
    ex = DaskExecutor(local_workers=1)
    ex.close()
    ex.close()
    with pytest.raises(InputError, match="closed"):
        list(ex.map_unordered(abs, [1]))


@pytest.mark.parametrize("kwargs, message", [
    ({}, "not both or neither"),
    ({"address": "tcp://127.0.0.1:1", "local_workers": 1}, "not both or neither"),
    ({"local_workers": 0}, "--dask-local 0: expected a whole number of workers"),
    ({"address": "tcp://127.0.0.1:1", "connect_timeout_s": 0.5},
     "--dask tcp://127.0.0.1:1: cannot reach a Dask scheduler"),
])
def test_bad_executors_are_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        DaskExecutor(**kwargs)

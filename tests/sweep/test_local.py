"""The local worker processes of a sweep: their numerical libraries' thread pools share the
machine's cores instead of each taking all of them."""

from __future__ import annotations

import os

import pytest

from emu.sweep.local import THREAD_VARIABLES, LocalExecutor, threads_per_worker


@pytest.mark.parametrize(("workers", "cores", "threads"),
                         [(1, 2, 2), (2, 2, 1), (3, 2, 1), (2, 8, 4), (3, 8, 2), (8, 8, 1)])
def test_each_worker_gets_its_share_of_the_cores(workers, cores, threads):
    assert threads_per_worker(workers, cores) == threads


def test_the_workers_blas_pools_are_sized_before_numpy_loads_and_a_users_setting_is_kept(
        monkeypatch):
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # the user's own choice: kept
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with LocalExecutor(2) as executor:
        seen = dict(executor.map_unordered(os.getenv, list(THREAD_VARIABLES)))
    share = str(threads_per_worker(2))
    assert [seen[k] for k in range(len(THREAD_VARIABLES))] == [
        "3" if name == "MKL_NUM_THREADS" else share for name in THREAD_VARIABLES]

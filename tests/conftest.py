import ctypes
import os
import shutil
import tempfile
import time

import pytest

from emu import jit
from emu.nn import modelcache
from emu.sweep import local

_MODEL_CACHE = pytest.StashKey[str]()

# glibc keeps the heap memory a test freed for later allocations rather than handing it
# back, and with the arenas of its threads, a worker that ran the big networks' tests held
# 2 GiB of which a third was in use. After a test that ran long enough to have used much,
# the worker gives the free memory back (malloc_trim: 3-30 ms); elsewhere nothing is done.
_TRIM_AFTER_S = 0.5
_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started = time.perf_counter()
    yield
    if _malloc_trim is not None and time.perf_counter() - started > _TRIM_AFTER_S:
        _malloc_trim(0)


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true",
                     help="rewrite the golden files from this run instead of checking them")


def pytest_configure(config):
    """The run compiles into a model cache of its own (emu/nn/modelcache.py), empty at the
    start and removed at the end: tests never read or fill the user's cache, and every
    process of the run (pytest-xdist workers, the `emu` commands tests start) shares it;
    so does a libemu_rt a test builds (emu/capi/build.py).

    No command starts a second process to compile kernels aside (emu/jit.py): the run's
    workers keep every core busy already; tests/test_jit_aside.py turns it on where it
    tests it."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller set it up
        return
    _share_blas_threads(config)
    if _whole_suite_in_parallel(config):
        _warm_kernels()
    os.environ[jit.ASIDE_ENV] = "0"
    folder = tempfile.mkdtemp(prefix="emu-test-models-")
    config.stash[_MODEL_CACHE] = folder
    os.environ[modelcache.ENV] = folder
    # libemu_rt, if a test builds it (emu cc-flags), goes there too, not into ~/.cache
    os.environ["EMU_CAPI_DIR"] = os.path.join(folder, "capi")


def _share_blas_threads(config) -> None:
    """On pytest-xdist workers, size NumPy's BLAS thread pools to each worker's share of
    the cores, as emu's sweep workers do (emu/sweep/local.py; a variable the user set is
    kept). A pool of one thread a core in every worker put two threads on each core, which
    spin waiting for each other: the BPU compiles' small matrix products took 2.5 times
    their time on one thread (tests/nn/test_compiler.py's zoo compiles on two processes:
    134 core-seconds, 53 on one thread each). What the tests compute does not change: the
    float work whose bits would depend on the thread count runs on one BLAS thread anyway
    (emu/nn/blas.py)."""
    workers = getattr(config.option, "numprocesses", None)
    if workers:
        for name in local.THREAD_VARIABLES:
            os.environ.setdefault(name, str(local.threads_per_worker(workers)))


def _whole_suite_in_parallel(config) -> bool:
    """Whether this is a run of every test (no paths or only the tests folder) on
    pytest-xdist workers."""
    parallel = getattr(config.option, "numprocesses", None) not in (None, 0)
    tests = os.path.dirname(os.path.abspath(__file__))
    return parallel and all(os.path.abspath(a) == tests for a in config.args)


def _warm_kernels() -> None:
    """Compile the run's kernels in processes that end before the workers start (see
    tests/warmup.py); nothing when the cache has them already."""
    from tests import warmup

    started = time.perf_counter()
    if any([jit.compile_aside("tests.warmup:kernels", [str(part)])
            for part in range(warmup.PARTS)]):
        jit.wait_aside()
        print(f"compiled the kernels in {warmup.PARTS} processes first: "
              f"{time.perf_counter() - started:.0f} s", flush=True)


def pytest_unconfigure(config):
    folder = config.stash.get(_MODEL_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


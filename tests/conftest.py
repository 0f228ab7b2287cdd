import os
import shutil
import tempfile

import pytest

from emu import jit
from emu.nn import modelcache

_MODEL_CACHE = pytest.StashKey[str]()


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true",
                     help="rewrite the golden files from this run instead of checking them")


def pytest_configure(config):
    """The run compiles into a model cache of its own (emu/nn/modelcache.py), empty at the
    start and removed at the end: tests never read or fill the user's cache, and every
    process of the run (pytest-xdist workers, the `emu` commands tests start) shares it.

    No command starts a second process to compile kernels aside (emu/jit.py): the run's
    workers keep every core busy already; tests/test_jit_aside.py turns it on where it
    tests it."""
    os.environ[jit.ASIDE_ENV] = "0"
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller set it up
        return
    folder = tempfile.mkdtemp(prefix="emu-test-models-")
    config.stash[_MODEL_CACHE] = folder
    os.environ[modelcache.ENV] = folder


def pytest_unconfigure(config):
    folder = config.stash.get(_MODEL_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


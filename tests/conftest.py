import os
import shutil
import tempfile

import pytest

from emu.nn import modelcache

_MODEL_CACHE = pytest.StashKey[str]()


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true",
                     help="rewrite the golden files from this run instead of checking them")


def pytest_configure(config):
    """The run compiles into a model cache of its own (emu/nn/modelcache.py), empty at the
    start and removed at the end: tests never read or fill the user's cache, and every
    process of the run (pytest-xdist workers, the `emu` commands tests start) shares it."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller set it up
        return
    folder = tempfile.mkdtemp(prefix="emu-test-models-")
    config.stash[_MODEL_CACHE] = folder
    os.environ[modelcache.ENV] = folder


def pytest_unconfigure(config):
    folder = config.stash.get(_MODEL_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


# The tests that take longest from a cold cache (pytest's `--durations` on 2 cores), each
# taking a large share of one worker. They run first: pytest-xdist hands tests out in
# collection order, so a long test collected last would run alone while the other worker
# idles. Only the order changes; a name missing from the suite is ignored.
LONGEST_FIRST = (
    "tests/cli/test_dsp_cv.py::test_all_reports_every_operator",
    "tests/runtime/test_api_fuzz.py::test_random_api_calls_from_several_threads",
    "tests/test_code_quality.py::test_mypy_is_clean",
    "tests/cli/test_cli.py::test_reports_say_what_produced_them_and_repeat_exactly",
    "tests/cli/test_bad_input.py::test_a_regular_trace_file_is_replaced_and_an_empty_dump",
    "tests/sweep/test_spec.py::test_declared_report_paths_exist_in_the_real_report",
    "tests/sweep/test_run.py::test_a_sweep_killed_with_sigkill_resumes_losing_and_recomputing",
    "tests/sweep/test_readme_example.py::test_the_readme_example_runs_writes_its_plot",
    "tests/nn/test_compiler.py::test_the_readme_bpu_example_runs_and_its_numbers_hold",
    "tests/mem/test_pool.py::test_pool_machine",
    "tests/runtime/test_hbdnn.py::test_the_c_style_two_model_example_runs_and_its_timeline",
)


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        return next((k for k, prefix in enumerate(LONGEST_FIRST)
                     if item.nodeid.startswith(prefix)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the rest keep their order

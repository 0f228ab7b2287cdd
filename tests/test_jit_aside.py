"""A command's later steps compile in a second process (`emu.jit.compile_aside`)."""

import os
import time
from pathlib import Path

import numba
import pytest

from emu import jit
from emu.workloads.pointcloud import runner

HELPER = '''
import os, pathlib, time

def record(folder, *words):
    pathlib.Path(folder, "ran").write_text(" ".join(words) + " " + str(os.getpid()))

def nap(folder):
    pathlib.Path(folder, "started").write_text("")
    for _ in range(1200):  # a minute of work in small steps, as compiling is
        time.sleep(0.05)

def fail(folder):
    raise RuntimeError("a helper that breaks")
'''


@pytest.fixture
def aside(tmp_path, monkeypatch):
    """A cache folder of this test's own (in this process and the helper's) and a module
    of targets the helper can import."""
    (tmp_path / "aside_targets.py").write_text(HELPER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), str(Path(jit.PACKAGE).parent), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(jit.ASIDE_ENV, "1")
    monkeypatch.setattr(numba.config, "CACHE_DIR",
                        str(tmp_path / "cache" / (jit._KEY_PREFIX + jit.cache_key())))
    yield tmp_path
    jit.stop_aside()


def _wait_for(path, seconds=60.0):
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_the_helper_runs_its_target_once_per_cache(aside):
    assert jit.compile_aside("aside_targets:record", [str(aside), "a", "b"])
    _wait_for(aside / "ran")
    words = (aside / "ran").read_text().split()
    assert words[:2] == ["a", "b"] and int(words[2]) != os.getpid()
    marks = Path(numba.config.CACHE_DIR)
    end = time.monotonic() + 60
    while not list(marks.glob("aside-*.done")):
        assert time.monotonic() < end
        time.sleep(0.05)
    jit.stop_aside()
    # Done once for this cache: the same target and arguments start nothing again ...
    assert not jit.compile_aside("aside_targets:record", [str(aside), "a", "b"])
    # ... other arguments do.
    assert jit.compile_aside("aside_targets:record", [str(aside), "c"])


def test_nothing_starts_when_turned_off_on_one_core_or_without_the_jit(aside, monkeypatch):
    monkeypatch.setenv(jit.ASIDE_ENV, "0")
    assert not jit.compile_aside("aside_targets:record", [str(aside)])
    monkeypatch.setenv(jit.ASIDE_ENV, "1")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})
    assert not jit.compile_aside("aside_targets:record", [str(aside)])
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    assert not jit.compile_aside("aside_targets:record", [str(aside)])
    assert not (aside / "ran").exists()


def test_stopping_a_running_helper_leaves_no_mark_and_no_process(aside):
    assert jit.compile_aside("aside_targets:nap", [str(aside)])
    helper = jit._aside[-1]
    _wait_for(aside / "started")
    started = time.monotonic()
    jit.stop_aside()
    # It ended on SIGTERM, quietly (0), not on the SIGKILL that follows if it does not.
    assert helper.returncode == 0 and time.monotonic() - started < jit._STOP_WAIT_S
    assert not list(Path(numba.config.CACHE_DIR).glob("aside-*"))


def test_a_failing_helper_ends_quietly_without_a_mark(aside):
    assert jit.compile_aside("aside_targets:fail", [str(aside)])
    helper = jit._aside[-1]
    assert helper.wait(timeout=60) == 0
    assert not list(Path(numba.config.CACHE_DIR).glob("aside-*"))


def test_pointcloud_hands_the_back_half_of_its_implementations_aside(monkeypatch):
    calls = []
    monkeypatch.setattr(jit, "compile_aside", lambda target, args: calls.append((target, args)))
    frames = runner.synthetic(runner.MODELS["centerpoint"], 1, 0, 2000)
    runner.run("centerpoint", ["cpu", "dsp1", "dsp2"], frames)
    runner.run("centerpoint", ["dsp2", "cpu"], frames)
    runner.run("centerpoint", ["cpu"], frames)
    target = "emu.workloads.pointcloud.runner:warm"
    assert calls == [(target, ["centerpoint", "dsp2"]), (target, ["centerpoint", "cpu"])]


def test_dsp_cv_all_hands_the_back_half_of_the_table_aside(monkeypatch, capsys):
    from emu.cli.main import main
    from emu.vdsp.ops import cv

    calls = []
    monkeypatch.setattr(jit, "compile_aside", lambda target, args: calls.append((target, args)))
    assert main(["dsp", "cv", "--all", "--json"]) == 0
    capsys.readouterr()
    names = [op.name for op in cv.cv_operators()]
    assert calls == [("emu.workloads.dsp_cv:warm", names[len(names) // 2:])]


def test_the_cv_warm_up_runs_the_operators_it_names_and_refuses_others():
    from emu.errors import InputError
    from emu.vdsp.ops import cv
    from emu.workloads import dsp_cv

    dsp_cv.warm(cv.cv_operators()[0].name)
    with pytest.raises(InputError, match="no CV operator 'nothing'"):
        dsp_cv.warm("nothing")

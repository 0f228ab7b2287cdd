"""What the C-program tests share: the compilers, the library built once per test module
into a folder of the module's own, and running a program and its Python equivalent."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import emu
from emu.capi import build, program
from emu.report.document import session_report

CC = shutil.which("cc") or shutil.which("gcc")
CXX = shutil.which("c++") or shutil.which("g++")
ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "c" / "samples"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The library in a folder of this module's own, and a function that builds a C file
    against it."""
    folder = tmp_path_factory.mktemp("capi")
    saved = os.environ.get("EMU_CAPI_DIR")
    os.environ["EMU_CAPI_DIR"] = str(folder / "lib")
    try:
        flags = build.flags().split()

        def compile_c(source: Path, name: str) -> Path:
            exe = folder / name
            subprocess.run([CC, "-O1", "-Wall", "-Werror", str(source), *flags, "-lm", "-o",
                            str(exe)], check=True, capture_output=True, text=True)
            return exe

        yield folder, compile_c
    finally:
        if saved is None:
            os.environ.pop("EMU_CAPI_DIR", None)
        else:
            os.environ["EMU_CAPI_DIR"] = saved


def run(exe, *args, env=None, **kwargs):
    """Run a built program; its CompletedProcess (text)."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=environment, **kwargs)


def python_run(fn):
    """`fn()` run as the main program of a fresh session; its result and the session's
    report as the C library writes it."""
    with emu.Session() as sess:
        result = fn()
        report = json.loads(json.dumps(session_report(sess, "c-program",
                                                      program.results(sess))))
    return result, report

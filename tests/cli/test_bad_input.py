"""Every bad input of the command line ends with exit 2 and one line naming it, found before
any work and with nothing written; Ctrl-C exits 130 leaving no partial output; a closed
stdout ends quietly (issue 9, point 6)."""

import contextlib
import glob
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emu.cli.main import main
from emu.errors import InputError
from emu.report.document import write_atomic

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
ROOT_SKIP = pytest.mark.skipif(
    AS_ROOT, reason="running as root: permission bits do not stop root, so a 0o555 folder "
                    "is writable and emu rightly accepts it")

# Every row fails before any work, so the commands may be any size; these are small.
PC = ["pointcloud", "--model", "pointpillars", "--synthetic", "1", "--points", "3000",
      "--impl", "cpu", "--dump", "{t}/out", "--trace", "{t}/out.json"]
SCENARIO = ["scenario", "cameras", "--frames", "1", "--trace", "{t}/out.json"]
DSP = ["dsp", "ping", "--trace", "{t}/out.json"]
CV = ["dsp", "cv", "threshold", "--trace", "{t}/out.json", "-o", "{t}/out.png"]


SWEEP_SPEC = """
[scenario]
command = "dsp"
args = ["softmax", "--shape", "8,100"]
metrics = { total = "total_ms" }

[axes]
mode = "grid"
"vdsp.freq_hz" = ["400MHz", "1GHz"]
"""
SWEEP_SHOW = ["sweep", "show", "{t}/sweep.toml", "--store"]


def _damaged_stores(folder):
    """Stores of the sweep SWEEP_SPEC that hold its points, each damaged in one way."""
    from emu.sweep import spec as spec_module
    from emu.sweep.store import Store

    spec = spec_module.load(folder / "sweep.toml")
    keys = [p.key for p in spec.points]

    def store(name, damage):
        path = folder / name
        with Store(path) as db:
            db.begin_sweep(spec.key, {}, keys, [p.axes for p in spec.points])
            db.finish_sweep(spec.key)
            for key in keys:
                db.put(key, command="dsp", args=[], axes={}, config={}, status="ok",
                       metrics={"total": 1.0}, report={"total_ms": 1.0}, error=None,
                       seconds=0.1)
            db._db.execute(damage)
        return path

    store("badrow.sqlite", "UPDATE points SET metrics = '{bad' WHERE rowid = 1")
    store("badreport.sqlite", "UPDATE points SET report = x'0102' WHERE rowid = 2")
    store("badsweep.sqlite", "UPDATE sweeps SET keys = '[\"x'")
    page = store("badpage.sqlite", "SELECT 1")
    with open(page, "r+b") as f:  # the points table's root page: 4 KiB of garbage
        f.seek(4096)
        f.write(b"\xa5" * 4096)


def _png_header_only(width, height):
    """A PNG of a few bytes declaring a grey image of `width` x `height` (a decompression
    bomb's header: its data would inflate to the declared size)."""
    import struct
    import zlib

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _relu_model(side):
    """The bytes of an ONNX model whose one Relu takes a (1, 3, side, side) float input."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, side, side])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, side, side])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString()


def _external_outside_model():
    """An ONNX model whose weights are said to be in an external file outside its folder
    (../file, the fixture's regular file)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="../file")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y],
                              [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString()


def _row(argv, needles, marks=()):
    return pytest.param(argv, needles, marks=marks)


BAD_INPUTS = {
    # --trace: only a new file or an existing regular file, in a writable folder.
    "trace-folder": _row([*DSP[:2], "--trace", "{t}/empty"], ["--trace", "{t}/empty", "folder"]),
    "trace-under-a-file": _row([*SCENARIO[:4], "--trace", "{t}/file/t.json"],
                               ["--trace", "{t}/file", "not a folder"]),
    "trace-missing-folder": _row([*DSP[:2], "--trace", "{t}/nowhere/t.json"],
                                 ["--trace", "{t}/nowhere", "does not exist"]),
    "trace-read-only-folder": _row([*DSP[:2], "--trace", "{t}/readonly/t.json"],
                                   ["--trace", "{t}/readonly", "not writable"], ROOT_SKIP),
    "trace-device": _row([*SCENARIO[:4], "--trace", "/dev/null"],
                         ["--trace", "/dev/null", "device"]),
    "trace-fifo": _row([*DSP[:2], "--trace", "{t}/fifo"], ["--trace", "{t}/fifo", "pipe"]),
    "trace-symlink": _row([*PC[:-2], "--trace", "{t}/link"],
                          ["--trace", "{t}/link", "symbolic link"]),
    "trace-dangling-symlink": _row([*DSP[:2], "--trace", "{t}/dangling"],
                                   ["--trace", "{t}/dangling", "symbolic link"]),
    "trace-empty-path": _row([*DSP[:2], "--trace", ""], ["--trace", "empty"]),
    # --dump: only a new folder or an empty one, in a writable folder.
    "dump-file": _row([*PC[:-4], "--dump", "{t}/file"], ["--dump", "{t}/file", "regular file"]),
    "dump-non-empty-folder": _row([*PC[:-4], "--dump", "{t}/full"],
                                  ["--dump", "{t}/full", "not empty"]),
    "dump-symlink": _row([*PC[:-4], "--dump", "{t}/dirlink"],
                         ["--dump", "{t}/dirlink", "symbolic link"]),
    "dump-device": _row([*PC[:-4], "--dump", "/dev/null"], ["--dump", "/dev/null", "device"]),
    "dump-fifo": _row([*PC[:-4], "--dump", "{t}/fifo"], ["--dump", "{t}/fifo", "pipe"]),
    "dump-under-a-file": _row([*PC[:-4], "--dump", "{t}/file/d"],
                              ["--dump", "{t}/file", "not a folder"]),
    "dump-missing-folder": _row([*PC[:-4], "--dump", "{t}/nowhere/d"],
                                ["--dump", "{t}/nowhere", "does not exist"]),
    "dump-read-only-folder": _row([*PC[:-4], "--dump", "{t}/readonly/d"],
                                  ["--dump", "{t}/readonly", "not writable"], ROOT_SKIP),
    "dump-is-the-trace": _row([*PC[:-4], "--dump", "{t}/out", "--trace", "{t}/out"],
                              ["--trace", "{t}/out", "--dump"]),
    # --config: UTF-8 TOML.
    "config-not-utf8": _row(["config", "show", "--config", "{t}/latin1.toml"],
                            ["{t}/latin1.toml", "UTF-8"]),
    "config-not-utf8-before-a-run": _row([*PC, "--config", "{t}/latin1.toml"],
                                         ["{t}/latin1.toml", "UTF-8"]),
    "config-not-toml": _row([*SCENARIO, "--config", "{t}/broken.toml"],
                            ["{t}/broken.toml", "TOML"]),
    # Numbers: whole or finite, within the range the message gives.
    "pointcloud-negative-seed": _row([*PC, "--seed", "-1"], ["--seed", "0 to 4294967295"]),
    "dsp-negative-seed": _row([*DSP, "--seed", "-1"], ["--seed", "0 to 4294967295"]),
    "scenario-negative-seed": _row([*SCENARIO, "--seed=-5"], ["--seed", "0 to 4294967295"]),
    "absurd-seed": _row([*PC, "--seed", str(2**64)], ["--seed", "0 to 4294967295"]),
    "absurd-frame-count": _row([*PC[:4], str(10**12), *PC[5:]], ["--synthetic", "1 to 1000"]),
    "absurd-point-count": _row([*PC, "--points", str(10**12)], ["--points", "1 to 1000000"]),
    "nan-point-count": _row([*PC, "--points", "nan"], ["--points", "1 to 1000000"]),
    "nan-fps": _row([*SCENARIO, "--fps", "nan"], ["--fps", "0.01 to 10000"]),
    "infinite-fps": _row([*SCENARIO, "--fps", "inf"], ["--fps", "0.01 to 10000"]),
    "minus-infinite-fps": _row([*SCENARIO, "--fps=-inf"], ["--fps", "0.01 to 10000"]),
    "overflowing-fps": _row([*SCENARIO, "--fps", "1e400"], ["--fps", "0.01 to 10000"]),
    "absurd-gmacs": _row([*SCENARIO, "--gmacs", "1e300"], ["--gmacs", "0.001 to 10000"]),
    "nan-gmacs": _row([*SCENARIO, "--gmacs", "NaN"], ["--gmacs", "0.001 to 10000"]),
    "absurd-scenario-frames": _row([*SCENARIO, "--frames", str(10**12)],
                                   ["--frames", "1 to 100000"]),
    "negative-scenario-frames": _row([*SCENARIO, "--frames=-1"], ["--frames", "1 to 100000"]),
    "absurd-camera-count": _row([*SCENARIO, "--cameras", "1000000"], ["--cameras", "1 to 64"]),
    "absurd-rpc-count": _row([*DSP, "--rpcs", str(10**9)], ["--rpcs", "1 to 1000"]),
    "priority-out-of-range": _row([*DSP, "--priority", "256"], ["--priority", "0 to 255"]),
    # Operator shapes: sizes, and tensors the pool could hold.
    "shape-with-a-zero": _row([*DSP, "--shape", "0,5"], ["--shape", "0,5"]),
    "shape-of-five-axes": _row([*DSP, "--shape", "1,2,3,4,5"], ["--shape"]),
    "shape-beyond-the-pool": _row(["dsp", "softmax", "--shape", "100000,100000", "--trace",
                                   "{t}/out.json"], ["--shape", "mem.pool_bytes"]),
    # CV operators: the image, the output file and every operator option.
    "cv-missing-image": _row([*CV, "--input", "{t}/nothing.png"], ["{t}/nothing.png",
                                                                   "cannot read"]),
    "cv-not-an-image": _row([*CV, "--input", "{t}/broken.toml"], ["{t}/broken.toml",
                                                                  "unknown image type"]),
    "cv-broken-png": _row([*CV, "--input", "{t}/broken.png"], ["{t}/broken.png", "PNG"]),
    "cv-output-folder": _row([*CV[:5], "-o", "{t}/empty"], ["-o/--output", "{t}/empty",
                                                             "folder"]),
    "cv-unknown-op": _row(["dsp", "cv", "sharpen"], ["OP", "sharpen"]),
    "cv-no-op": _row(["dsp", "cv", "--json"], ["one operator OP, or --all"]),
    "cv-nan-option": _row([*CV, "--thresh", "nan"], ["--thresh"]),
    "cv-bad-choice": _row([*CV, "--type", "otsu"], ["--type", "otsu"]),
    "cv-unknown-option": _row([*CV, "--ksize", "3"], ["unrecognized", "--ksize"]),
    # Options are spelt out: a prefix of an output option would slip past the checks that
    # look for it by name (compare's "no output files" rule among them).
    "abbreviated-option": _row([*DSP[:2], "--tra", "{t}/t.json"], ["unrecognized", "--tra"]),
    "compare-abbreviated-output": _row(
        ["compare", "--set", "vdsp.freq_hz=648MHz", "--set", "vdsp.freq_hz=1GHz", "--",
         *DSP[:2], "--tra", "{t}/t.json"], ["unrecognized", "--tra"]),
    # An output file is never one of the run's inputs, under any name.
    "cv-output-is-the-input": _row([*CV[:3], "--input", "{t}/grey.pgm", "-o", "{t}/grey.pgm"],
                                   ["-o/--output", "is the input", "{t}/grey.pgm"]),
    "compile-output-is-the-model": _row(["compile", "{t}/model.onnx", "-o", "{t}/model.onnx"],
                                        ["-o {t}/model.onnx", "is the input"]),
    "cv-all-with-output": _row(["dsp", "cv", "--all", "-o", "{t}/x.png"], ["--all"]),
    "cv-options-before-cv": _row(["dsp", "--preset", "j5", "cv"], ["after `cv`"]),
    "cv-bad-config": _row([*CV, "--set", "vdsp.tcm.bank_bytes=-1"], ["vdsp.tcm.bank_bytes"]),
    # Sweep stores: a damaged row, page or file is one line naming the store (and the
    # point), for the commands that read a store back and for a run that finds points in it.
    "store-damaged-row": _row([*SWEEP_SHOW, "{t}/badrow.sqlite"],
                              ["store {t}/badrow.sqlite", "point", "is damaged"]),
    "store-damaged-report": _row(["sweep", "export", "{t}/sweep.toml", "--store",
                                  "{t}/badreport.sqlite", "-o", "{t}/out.csv"],
                                 ["store {t}/badreport.sqlite", "point", "is damaged"]),
    "store-damaged-sweep-record": _row(["sweep", "run", "{t}/sweep.toml", "--store",
                                        "{t}/badsweep.sqlite"],
                                       ["store {t}/badsweep.sqlite", "sweep", "is damaged"]),
    "store-damaged-page": _row([*SWEEP_SHOW, "{t}/badpage.sqlite"],
                               ["store {t}/badpage.sqlite", "damaged"]),
    "store-not-sqlite": _row([*SWEEP_SHOW, "{t}/broken.toml"],
                             ["store {t}/broken.toml", "not a usable SQLite store"]),
    "store-empty-file": _row([*SWEEP_SHOW, "{t}/file"], ["store {t}/file", "SQLite"]),
    "store-missing": _row([*SWEEP_SHOW, "{t}/nothing.sqlite"],
                          ["store {t}/nothing.sqlite", "no such file"]),
    # Sizes declared in a file's header are checked before anything is decoded or made.
    "cv-png-bomb": _row([*CV[:3], "--input", "{t}/bomb.png", "-o", "{t}/out.png"],
                        ["{t}/bomb.png", "30000x30000", "pixels"]),
    "compile-huge-declared-input": _row(["compile", "{t}/huge.onnx", "-o", "{t}/huge.hbm"],
                                        ["{t}/huge.onnx", "tensor 'x'", "1 GiB"]),
    "compile-external-data-outside": _row(["compile", "{t}/sub/outside.onnx", "-o",
                                           "{t}/outside.hbm"],
                                          ["{t}/sub/outside.onnx", "external data",
                                           "outside"]),
    "shape-times-rpcs-beyond-the-pool": _row(
        ["dsp", "quantize", "--shape", "512,1024", "--rpcs", "2", "--set",
         "mem.pool_bytes=4MiB"], ["--shape", "--rpcs 2", "mem.pool_bytes"]),
}


@pytest.fixture
def tree(tmp_path):
    """A folder holding one of every kind of thing an output path can meet."""
    (tmp_path / "file").write_text("keep\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.npy").write_text("earlier output\n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "dirlink").symlink_to(tmp_path / "empty")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "readonly").mkdir()
    (tmp_path / "readonly").chmod(0o555)
    (tmp_path / "latin1.toml").write_bytes("[ddr]\n# latence réglée\n".encode("latin-1"))
    (tmp_path / "broken.toml").write_text("[ddr\nlatency_ps = 90\n")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 30)
    (tmp_path / "grey.pgm").write_bytes(b"P5\n8 8\n255\n" + bytes(range(64)))
    (tmp_path / "model.onnx").write_bytes(b"not read: the output is refused first")
    (tmp_path / "sweep.toml").write_text(SWEEP_SPEC)
    (tmp_path / "bomb.png").write_bytes(_png_header_only(30000, 30000))
    (tmp_path / "huge.onnx").write_bytes(_relu_model(32768))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "outside.onnx").write_bytes(_external_outside_model())
    _damaged_stores(tmp_path)
    yield tmp_path
    (tmp_path / "readonly").chmod(0o755)


def _snapshot(root):
    """Every entry under `root` (links not followed): its type, and a file's contents."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            content = Path(path).read_bytes() if stat.S_ISREG(mode) else None
            found[os.path.relpath(path, root)] = (stat.S_IFMT(mode), content)
    return found


@pytest.mark.parametrize(("argv", "needles"), list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tree, capsys, argv, needles):
    before = _snapshot(tree)
    code = main([arg.replace("{t}", str(tree)) for arg in argv])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    for needle in needles:
        assert needle.replace("{t}", str(tree)) in err
    assert _snapshot(tree) == before  # nothing created, replaced or left behind
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


@pytest.mark.parametrize(("option", "name"), [("--trace", "t.json"), ("--dump", "d")])
def test_a_folder_without_write_access_is_refused(tree, capsys, monkeypatch, option, name):
    # The read-only rows above with access(2)'s answer made up, so that this runs as root
    # too (permission bits stop nothing for root).
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path).name != "readonly")
    target = tree / "readonly" / name
    command = DSP[:2] if option == "--trace" else [a.replace("{t}", str(tree)) for a in PC[:-4]]
    code = main([*command, option, str(target)])
    monkeypatch.undo()
    assert (code, capsys.readouterr().err) == (
        2, f"emu: error: {option} {target}: folder {tree / 'readonly'} is not writable\n")


def test_a_regular_trace_file_is_replaced_and_an_empty_dump_folder_filled(tree, capsys):
    code = main(["dsp", "ping", "--trace", str(tree / "file"), "--json"])
    assert code == 0
    assert "traceEvents" in json.loads((tree / "file").read_text())
    code = main([*(a.replace("{t}", str(tree)) for a in PC[:-4]), "--dump", str(tree / "empty"),
                 "--trace", str(tree / "empty" / "trace.json"), "--json"])  # trace in the dump
    assert code == 0
    capsys.readouterr()
    assert sorted(p.name for p in (tree / "empty").iterdir()) == ["synthetic-0", "trace.json"]
    assert (tree / "empty" / "synthetic-0" / "cpu" / "coords.npy").is_file()
    assert not [p for p in tree.iterdir() if p.name.startswith(".")]  # no temporary left


def test_write_atomic_never_replaces_a_link_or_device(tree):
    for target in (tree / "link", tree / "dangling", tree / "fifo", tree / "empty"):
        with pytest.raises(InputError, match="only a regular file is replaced"):
            write_atomic(target, "{}\n")
    assert (tree / "link").is_symlink() and (tree / "file").read_text() == "keep\n"
    assert not [p for p in tree.iterdir() if p.name.startswith(".")]


def _interrupt_at_first_progress(folder, seen):
    """A stand-in for the CLI's progress bar whose callback notes what is in `folder` then,
    and raises Ctrl-C."""
    def callback(done, total, what):
        seen.extend(sorted(os.listdir(folder)))
        raise KeyboardInterrupt

    return lambda args, label: contextlib.nullcontext(callback)


class _OsInterruptedOnRename:
    """`os` for `write_atomic`, but Ctrl-C comes exactly when the finished file would be
    renamed into place."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def replace(src, dst):
        raise KeyboardInterrupt


INTERRUPTED_RUNS = {
    # after the first frame was dumped, into the staged folder
    "pointcloud-mid-run": ([*PC[:4], "2", *PC[5:]], "progress"),
    # in a camera's host thread, inside a simulation step
    "scenario-mid-run": ([*SCENARIO[:3], "2", *SCENARIO[4:]], "progress"),
    "dsp-writing-the-trace": (DSP, "rename"),
}


@pytest.mark.parametrize(("argv", "where"), list(INTERRUPTED_RUNS.values()),
                         ids=list(INTERRUPTED_RUNS))
def test_ctrl_c_exits_130_with_one_line_and_leaves_no_partial_output(
        tmp_path, capsys, monkeypatch, argv, where):
    (tmp_path / "out.json").write_text("an earlier trace\n")  # untouched by a failed run
    seen: list[str] = []
    if where == "progress":
        monkeypatch.setattr("emu.cli.main._progress", _interrupt_at_first_progress(tmp_path, seen))
    else:
        monkeypatch.setattr("emu.files.os", _OsInterruptedOnRename())
    code = main([arg.replace("{t}", str(tmp_path)) for arg in argv])
    monkeypatch.undo()
    out, err = capsys.readouterr()
    assert (code, out, err) == (130, "", "emu: interrupted\n")
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    assert (tmp_path / "out.json").read_text() == "an earlier trace\n"
    if "--dump" in argv:
        assert any(name.startswith(".out.") for name in seen)  # the dump was being written


def test_a_real_ctrl_c_mid_dump_exits_130_and_leaves_nothing(tmp_path):
    # Frames big enough that the run goes on for seconds after its first frame's dump: the
    # interrupt must land mid-run even on a loaded machine.
    argv = [sys.executable, "-m", "emu", *PC[:4], "20", "--points", "60000", *PC[7:]]
    # A shell's background job (`cmd &` in a script) starts with SIGINT ignored, and Python
    # then rightly leaves Ctrl-C ignored: the child gets the default disposition, as a
    # terminal's foreground command has, whatever the test runner inherited.
    proc = subprocess.Popen([arg.replace("{t}", str(tmp_path)) for arg in argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not glob.glob(str(tmp_path / ".out.*" / "synthetic-0")):  # the dump has begun
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (130, "", "emu: interrupted\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("argv", "unbuffered"), [(["list"], False),
                                                  (["config", "show", "--json"], True)])
def test_a_closed_stdout_ends_quietly(argv, unbuffered):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    reader, writer = os.pipe()
    os.close(reader)  # the reader went away before the first line, as `| head -0` does
    try:
        done = subprocess.run([sys.executable, "-m", "emu", *argv], stdout=writer,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("argv", [["list"], ["list", "--json"], ["--help"]])
def test_a_full_stdout_is_one_line_and_exit_1(argv):
    """`> /dev/full`: every write fails with ENOSPC (issue 28: a traceback before)."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "emu", *argv], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (
        1, "emu: failed: cannot write to stdout: No space left on device\n")


def test_a_closed_stdout_in_process_returns_141_silently(monkeypatch, capsys):
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    code = main(["list"])
    monkeypatch.undo()
    assert code == 141
    assert capsys.readouterr().err == ""


def test_a_write_killed_with_sigkill_leaves_a_temporary_the_next_write_removes(tmp_path):
    # A process killed between writing its temporary and renaming it cannot clean up; the
    # next write of the same output removes what dead processes left, not what live ones
    # are writing, and not other hidden files.
    target = tmp_path / "out.json"
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time\n"
         "import emu.files as f\n"
         "f.os = type('Stuck', (), {'__getattr__': lambda s, n: getattr(os, n),\n"
         "    'replace': staticmethod(lambda a, b: (print('written', flush=True),\n"
         "                                          time.sleep(600)))})()\n"
         f"f.replace_file({str(target)!r}, 'x' * 100000)\n"],
        stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    with child.stdout:
        assert child.stdout.readline() == "written\n"
        child.kill()
        child.wait()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(f".out.json.emu-{child.pid}-"), left
    live = tmp_path / f".out.json.emu-{os.getpid()}-mine"  # a writer still running
    live.write_text("in progress")
    other = tmp_path / ".out.json.swp"
    other.write_text("not emu's")
    staged = tmp_path / f".out.json.emu-{child.pid}-dir"  # a killed dump's staging folder
    (staged / "frame").mkdir(parents=True)
    write_atomic(target, "{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out.json", live.name, other.name])
    assert target.read_text() == "{}\n"

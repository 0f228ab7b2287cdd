"""`emu compile`, `emu perf` and `emu infer` on models whose inputs are not 4-D NCHW:
scalars, vectors, 2-D rows (tokens, features), 3-D and 5-D tensors. Each command exits 0,
or 2 with one line; the batch (frames per run) is dimension 0 only of inputs of rank 3 or
more, so `--perf`'s FPS counts a 2-D input as one frame."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emu.cli.main import main
from emu.nn import compiler
from tests.nn.nets import ranked

# (input shape, op, frames per run)
MODELS = {"scalar": ((), "Relu", 1), "vector": ((64,), "Sigmoid", 1),
          "features": ((4, 64), "MatMul", 1), "tokens": ((196, 256), "Gemm", 1),
          "sequences": ((3, 5, 8), "Relu", 3), "volumes": ((2, 2, 3, 4, 4), "Sigmoid", 2),
          "pair": ((6, 7), "Add", 1)}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Each model through `emu compile --perf --json`: name -> (its .hbm, its JSON)."""
    folder = tmp_path_factory.mktemp("ranks")
    found = {}
    for name, (shape, op, _) in MODELS.items():
        source = folder / f"{name}.onnx"
        source.write_bytes(ranked(shape, op).SerializeToString())
        target = folder / f"{name}.hbm"
        (doc,) = _json(["compile", str(source), "-o", str(target), "--calib-random", "2",
                        "--perf"])["models"]
        found[name] = target, doc
    return found


def _json(argv: list[str]) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compile_perf_counts_frames_by_the_batch_rule(name, compiled):
    shape, _, batch = MODELS[name]
    _, doc = compiled[name]
    assert doc["inputs"][0]["shape"] == list(shape)
    assert doc["batch"] == batch  # the [196, 256] tokens: 1, not 196
    assert math.isclose(doc["fps"], batch * 1e3 / doc["latency_ms"], rel_tol=1e-9)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_perf_and_infer_run_a_model_of_any_rank(name, compiled, tmp_path):
    path, _ = compiled[name]
    perf = _json(["perf", str(path), "--frame-count", "3", "--thread-num", "2"])
    assert perf["frames"] == 3 and perf["latency_ms"]["min"] > 0 and perf["fps"] > 0
    assert perf["profile"]["bpu_ms"] > 0
    (model,) = compiler.load_file(path)
    rng = np.random.default_rng(4)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in model.inputs}
    if len(feeds) == 1:
        given = tmp_path / "x.npy"
        np.save(given, next(iter(feeds.values())))
    else:
        given = tmp_path / "x.npz"
        np.savez(given, **feeds)
    out = tmp_path / "out"
    doc = _json(["infer", str(path), "--input", str(given), "--out", str(out)])
    want = model.run(feeds)
    assert [o["shape"] for o in doc["outputs"]] == [list(want[t.name].shape)
                                                    for t in model.outputs]
    for t in model.outputs:
        assert np.array_equal(np.load(out / f"{t.name}.npy"), want[t.name])
    assert doc["simulated"]["latency_ms"] > 0


@pytest.mark.parametrize("name, write, needle", [
    ("features", lambda p: np.save(p, np.zeros((64,), np.float32)),
     "input 'x' has shape (64,); the model takes float32 (4, 64)"),
    ("features", lambda p: np.save(p, np.zeros((1, 4, 64), np.float32)), "has shape (1, 4, 64)"),
    ("scalar", lambda p: np.save(p, np.zeros((1,), np.float32)),
     "has shape (1,); the model takes float32 ()"),
    ("vector", lambda p: np.save(p, np.zeros((64,), np.float64)), "has dtype float64"),
    ("volumes", lambda p: p.write_bytes(b"P5\n4 4\n255\n" + bytes(16)),
     "an image file feeds rgb, bgr or gray models"),
    ("pair", lambda p: np.save(p, np.zeros((6, 7), np.float32)),
     "the model has 2 inputs; give a .npz file keyed by input name"),
    ("pair", lambda p: np.savez(p, x=np.zeros((6, 7), np.float32)), "missing feed for input 'z'"),
    ("tokens", lambda p: np.save(p, np.array([None], dtype=object), allow_pickle=True),
     "Object arrays cannot be loaded"),
    ("tokens", lambda p: np.savez(p, x=np.array([None], dtype=object)),
     "Object arrays cannot be loaded"),
    ("tokens", lambda p: p.write_bytes(b""), "not a .npy/.npz file or PPM/PGM image"),
    ("tokens", lambda p: p.write_bytes(b"PK\x03\x04 truncated"), "not a .npy/.npz file"),
])
def test_infer_refuses_a_bad_input_in_one_line(name, write, needle, compiled, tmp_path,
                                               capsys):
    given = tmp_path / "given.npy"
    write(given)
    if not given.exists():  # np.savez added its suffix
        given = tmp_path / "given.npy.npz"
    assert main(["infer", str(compiled[name][0]), "--input", str(given)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err, err


@pytest.mark.parametrize("shape", [(), (64,), (196, 256)])
def test_compile_batch_refuses_an_input_without_a_batch_dimension(shape, tmp_path, capsys):
    source = tmp_path / "m.onnx"
    source.write_bytes(ranked(shape, "Relu").SerializeToString())
    target = tmp_path / "m.hbm"
    assert main(["compile", str(source), "-o", str(target), "--batch", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{source}: --batch 2: input 'x' has shape" in err, err
    assert "only inputs of rank 3 or more have a batch dimension" in err
    assert not target.exists()

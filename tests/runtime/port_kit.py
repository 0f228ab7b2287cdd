"""What the tests of the ported board programs (examples/ports/) share: the photos they
run on, the ports themselves, NV12 classifiers compiled as the programs' models are, and
the float references the ports' results are held to."""

import importlib
import sys
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np
import pytest

from emu.nn import compiler, reference, zoo
from emu.soc.config import load_config

skimage = pytest.importorskip("skimage", reason="scikit-image (a test extra) ships the photos")
PHOTOS = Path(skimage.__file__).resolve().parent / "data"
PORTS = Path(__file__).resolve().parents[2] / "examples" / "ports"
SIZE = 128  # the classifiers' input: small, to keep the tests fast
CALIBRATION_PHOTOS = ("astronaut.png", "coffee.png", "rocket.jpg", "motorcycle_left.png")


def port(name: str) -> ModuleType:
    """The ported program examples/ports/`name`.py as a module (a port may import another,
    as the programs run from that folder do)."""
    sys.path.insert(0, str(PORTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(PORTS))


def nv12(bgr: np.ndarray) -> np.ndarray:
    """A BGR picture as one NV12 frame (1, H * 3 / 2, W): OpenCV's I420, U and V interleaved."""
    h, w = bgr.shape[:2]
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420).reshape(-1)
    y, u, v = i420[:h * w], i420[h * w:h * w * 5 // 4], i420[h * w * 5 // 4:]
    uv = np.empty(h * w // 2, np.uint8)
    uv[0::2], uv[1::2] = u, v
    return np.concatenate([y, uv]).reshape(1, h * 3 // 2, w)


def photo(name: str) -> np.ndarray:
    """A photo of scikit-image's, BGR, resized to the classifiers' input as the programs do."""
    return cv2.resize(cv2.imread(str(PHOTOS / name), cv2.IMREAD_COLOR), (SIZE, SIZE))


def nv12_classifier(zoo_name: str, folder: Path, int32_scores: bool = False
                    ) -> tuple[Path, compiler.CompiledModel]:
    """Zoo model `zoo_name` for NV12 input at SIZE x SIZE, calibrated on four photos (as the
    programs' models are), written to `folder`/`zoo_name`_nv12.hbm; the file and the model.
    `int32_scores`: the scores handed over as the last layer's int32 accumulators with a
    scale per class (S32, as the OE samples' models give them), else float."""
    name = f"{zoo_name}_nv12"
    calib = folder / f"{name}_calib"
    calib.mkdir()
    for k, picture in enumerate(CALIBRATION_PHOTOS):
        np.save(calib / f"{k}.npy", nv12(photo(picture)))
    onnx_model = zoo.build(zoo_name, (SIZE, SIZE))
    types = tuple((out.name, "int32") for out in onnx_model.graph.output) if int32_scores \
        else ()
    model = compiler.compile_model(
        onnx_model, name,
        compiler.CompileOptions(input_type="nv12", calib_dir=calib, output_types=types),
        load_config("j5", None, []).soc)
    path = folder / f"{name}.hbm"
    path.write_bytes(compiler.dumps([model]))
    return path, model


def assert_float_top5(model: compiler.CompiledModel, bgr: np.ndarray,
                      top: list[tuple[int, float]]) -> None:
    """`top` (class, score) best first is the float model's top five on `bgr`: the same five
    classes (their order may differ: the seeded, untrained weights give close scores, which
    int8 reorders) with scores near the float ones."""
    (name,), (out,) = model.graph.inputs, model.graph.outputs
    logits = reference.run_float(model.graph, {name: nv12(bgr)})[out].reshape(-1)
    want = np.argsort(-logits, kind="stable")[:5]
    assert {i for i, _ in top} == set(want.tolist())
    scores = np.array([s for _, s in top])
    assert np.all(np.diff(scores) <= 0)
    np.testing.assert_allclose(scores, logits[[i for i, _ in top]], rtol=0.1, atol=0.05)


def bilinear_corners(gray: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """A float reference of J5's resizer: bilinear with the corners aligned (output pixel
    i samples source position i * (n - 1) / (m - 1)), rounded at the end."""
    h, w = gray.shape
    ys = np.arange(out_h) * (h - 1) / max(out_h - 1, 1)
    xs = np.arange(out_w) * (w - 1) / max(out_w - 1, 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    g = gray.astype(np.float64)
    top = g[y0][:, x0] * (1 - fx) + g[y0][:, x1] * fx
    bottom = g[y1][:, x0] * (1 - fx) + g[y1][:, x1] * fx
    return np.floor(top * (1 - fy) + bottom * fy + 0.5)

"""Public board programs ported call by call (examples/ports/) run on zoo models compiled
the way the programs' models are, and give what the float model gives."""

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from emu.nn import compiler, execute, zoo
from emu.runtime import session
from emu.soc.config import load_config

skimage = pytest.importorskip("skimage", reason="scikit-image (a test extra) ships the photos")
PHOTOS = Path(skimage.__file__).resolve().parent / "data"
PORTS = Path(__file__).resolve().parents[2] / "examples" / "ports"
SIZE = 128


def _nv12(bgr: np.ndarray) -> np.ndarray:
    """A BGR picture as one NV12 frame (1, H * 3 / 2, W): OpenCV's I420, U and V interleaved."""
    h, w = bgr.shape[:2]
    i420 = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420).reshape(-1)
    y, u, v = i420[:h * w], i420[h * w:h * w * 5 // 4], i420[h * w * 5 // 4:]
    uv = np.empty(h * w // 2, np.uint8)
    uv[0::2], uv[1::2] = u, v
    return np.concatenate([y, uv]).reshape(1, h * 3 // 2, w)


def _photo(name: str) -> np.ndarray:
    return cv2.resize(cv2.imread(str(PHOTOS / name), cv2.IMREAD_COLOR), (SIZE, SIZE))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """MobileNetV1 for NV12 input, calibrated on four photos, as the program's model is."""
    folder = tmp_path_factory.mktemp("port")
    calib = folder / "calib"
    calib.mkdir()
    for k, name in enumerate(("astronaut.png", "coffee.png", "rocket.jpg", "motorcycle_left.png")):
        np.save(calib / f"{k}.npy", _nv12(_photo(name)))
    model = compiler.compile_model(
        zoo.build("mobilenetv1", (SIZE, SIZE)), "mobilenetv1_nv12",
        compiler.CompileOptions(input_type="nv12", calib_dir=calib),
        load_config("j5", None, []).soc)
    path = folder / "mobilenetv1_nv12.hbm"
    path.write_bytes(compiler.dumps([model]))
    return path, model


def test_the_nv12_classifier_port_gives_the_float_models_top5(classifier, capsys):
    sys.path.insert(0, str(PORTS))
    try:
        import cls_perception_nv12 as port
    finally:
        sys.path.pop(0)
    path, model = classifier
    bgr = _photo("chelsea.png")  # a photo calibration did not see
    with session.Session():
        top = port.classify(str(path), bgr, 5)
    assert "DNN runtime version" in capsys.readouterr().out
    (name,), (out,) = model.graph.inputs, model.graph.outputs
    logits = execute.run_float(model.graph, {name: _nv12(bgr)})[out].reshape(-1)
    want = np.argsort(-logits, kind="stable")[:5]
    # the same five classes (their order may differ: the seeded, untrained weights give
    # close scores, which int8 reorders)
    assert {i for i, _ in top} == set(want.tolist())
    scores = np.array([s for _, s in top])
    assert np.all(np.diff(scores) <= 0)
    np.testing.assert_allclose(scores, logits[[i for i, _ in top]], rtol=0.1, atol=0.05)


def _bilinear_corners(gray: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
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


@pytest.mark.parametrize(("crop", "size"), [((300, 437), (224, 224)), ((384, 512), (160, 200)),
                                            ((64, 90), (200, 240))])
def test_the_resize_tutorial_port_scales_as_the_float_bilinear_does(crop, size):
    sys.path.insert(0, str(PORTS))
    try:
        import resize_y as port
    finally:
        sys.path.pop(0)
    gray = cv2.imread(str(PHOTOS / "camera.png"), cv2.IMREAD_GRAYSCALE)[:crop[0], :crop[1]]
    with session.Session() as sess:
        live = sess.soc.pool.live_buffers
        out = port.resize(gray, *size)
        assert sess.soc.pool.live_buffers == live  # both buffers freed, as the program does
    assert out.shape == size and out.dtype == np.uint8
    # J5's 16.16 step and 8-bit weights against exact positions: within two levels
    diff = np.abs(out.astype(np.float64) - _bilinear_corners(gray, *size))
    assert diff.max() <= 2 and diff.mean() < 0.5

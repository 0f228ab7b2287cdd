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

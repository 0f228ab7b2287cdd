"""Public board programs ported call by call (examples/ports/) run on zoo models compiled
the way the programs' models are, and give what the float model gives."""

import cv2
import numpy as np
import pytest

from emu.runtime import session

from .port_kit import PHOTOS, assert_float_top5, bilinear_corners, nv12_classifier, photo, port


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """MobileNetV1 for NV12 input, calibrated on four photos, as the program's model is."""
    return nv12_classifier("mobilenetv1", tmp_path_factory.mktemp("port"))


def test_the_nv12_classifier_port_gives_the_float_models_top5(classifier, capsys):
    cls_perception_nv12 = port("cls_perception_nv12")
    path, model = classifier
    bgr = photo("chelsea.png")  # a photo calibration did not see
    with session.Session():
        top = cls_perception_nv12.classify(str(path), bgr, 5)
    assert "DNN runtime version" in capsys.readouterr().out
    assert_float_top5(model, bgr, top)


@pytest.mark.parametrize(("crop", "size"), [((300, 437), (224, 224)), ((384, 512), (160, 200)),
                                            ((64, 90), (200, 240))])
def test_the_resize_tutorial_port_scales_as_the_float_bilinear_does(crop, size):
    resize_y = port("resize_y")
    gray = cv2.imread(str(PHOTOS / "camera.png"), cv2.IMREAD_GRAYSCALE)[:crop[0], :crop[1]]
    with session.Session() as sess:
        live = sess.soc.pool.live_buffers
        out = resize_y.resize(gray, *size)
        assert sess.soc.pool.live_buffers == live  # both buffers freed, as the program does
    assert out.shape == size and out.dtype == np.uint8
    # J5's 16.16 step and 8-bit weights against exact positions: within two levels
    diff = np.abs(out.astype(np.float64) - bilinear_corners(gray, *size))
    assert diff.max() <= 2 and diff.mean() < 0.5

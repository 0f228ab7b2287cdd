"""Image files: PNG, PGM/PPM and .npy against OpenCV's codecs, errors, the standard image."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from emu.errors import InputError
from emu.workloads import images


def test_the_shipped_standard_image_is_the_generated_one():
    assert (images.standard() == images.standard_image()).all()
    assert images.standard().shape == (480, 640, 3)


@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (33, 64), (480, 640, 3), (3, 2, 3)])
def test_png_written_here_reads_in_opencv_and_back(tmp_path, shape):
    pixels = np.random.default_rng(len(shape)).integers(0, 256, shape, dtype=np.uint8)
    path = tmp_path / "p.png"
    path.write_bytes(images.png_bytes(pixels))
    theirs = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    assert (theirs == (pixels[..., ::-1] if pixels.ndim == 3 else pixels)).all()
    assert (images.read_image(path) == pixels).all()


@pytest.mark.parametrize("level", [0, 1, 9])
@pytest.mark.parametrize("colour", [False, True])
def test_png_from_opencv_reads_here_with_every_filter(tmp_path, level, colour):
    # OpenCV chooses row filters adaptively, so smooth and noisy rows exercise them all.
    base = images.standard()[:90, :120]
    pixels = base if colour else base[..., 1].copy()
    path = tmp_path / "c.png"
    cv2.imwrite(str(path), pixels[..., ::-1] if colour else pixels,
                [cv2.IMWRITE_PNG_COMPRESSION, level])
    assert (images.read_image(path) == pixels).all()


def test_pgm_ppm_and_npy(tmp_path):
    grey = images.standard()[:20, :30, 0].copy()
    rgb = images.standard()[:20, :30]
    for name, pixels in (("g.pgm", grey), ("c.ppm", rgb), ("f.npy", grey.astype(np.float32))):
        path = tmp_path / name
        path.write_bytes(images.image_bytes(pixels, path))
        assert (images.read_image(path) == pixels).all()
    assert (cv2.imread(str(tmp_path / "g.pgm"), cv2.IMREAD_UNCHANGED) == grey).all()


@pytest.mark.parametrize(("content", "needle"), [
    (b"\x89PNG\r\n\x1a\n", "IHDR"),
    (b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR" + b"\0" * 13 + b"\0\0\0\0", "CRC"),
    (b"not an image", "not a PNG"),
])
def test_broken_pngs_are_refused_with_one_line(tmp_path, content, needle):
    path = tmp_path / "b.png"
    path.write_bytes(content)
    with pytest.raises(InputError, match=needle):
        images.read_image(path)


def test_a_16_bit_png_and_a_float_png_output_are_refused(tmp_path):
    path = tmp_path / "deep.png"
    cv2.imwrite(str(path), np.zeros((4, 4), np.uint16))
    with pytest.raises(InputError, match="bit depth 16"):
        images.read_image(path)
    with pytest.raises(InputError, match=r"as \.npy only"):
        images.image_bytes(np.zeros((4, 4), np.float32), tmp_path / "x.png")
    (tmp_path / "odd.txt").write_text("x")
    with pytest.raises(InputError, match="unknown image type"):
        images.read_image(tmp_path / "odd.txt")

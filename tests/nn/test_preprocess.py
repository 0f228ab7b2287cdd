"""Image input types: colour conversion and normalisation against a per-pixel reference."""

import numpy as np
import pytest

from emu.errors import InputError
from emu.nn.imagefiles import read_pnm
from emu.nn.preprocess import ImageInput, parse_values
from tests.nn import kernels_reference as ref

COEF = {k: round(v * 65536) for k, v in
        {"rv": 1.402, "gu": 0.344136, "gv": 0.714136, "bu": 1.772}.items()}


def _clamp(v):
    return min(max(v, 0), 255)


def _rgb_of_yuv(y, u, v):
    """One pixel, Python ints: BT.601 full range, each sum rounded once, halves up."""
    d, e = u - 128, v - 128
    r = y + (COEF["rv"] * e + 32768) // 65536
    g = y - (COEF["gu"] * d + COEF["gv"] * e + 32768) // 65536
    b = y + (COEF["bu"] * d + 32768) // 65536
    return _clamp(r), _clamp(g), _clamp(b)


def _reference_pixels(kind, image):
    """uint8 input -> (N, C, H, W) ints, pixel by pixel."""
    if kind == "nv12":
        n, rows, w = image.shape
        h = rows * 2 // 3
        out = np.zeros((n, 3, h, w), np.int64)
        for b in range(n):
            for i in range(h):
                for j in range(w):
                    base = h + i // 2
                    u = int(image[b, base, (j // 2) * 2])
                    v = int(image[b, base, (j // 2) * 2 + 1])
                    out[b, :, i, j] = _rgb_of_yuv(int(image[b, i, j]), u, v)
        return out
    n, h, w, c = image.shape
    out = np.zeros((n, c, h, w), np.int64)
    for b in range(n):
        for i in range(h):
            for j in range(w):
                px = [int(x) for x in image[b, i, j]]
                if kind == "yuv444":
                    px = list(_rgb_of_yuv(*px))
                elif kind == "bgr":
                    px = px[::-1]
                out[b, :, i, j] = px
    return out


def _image(kind, rng, n=2, h=6, w=10):
    spec = ImageInput(kind, 1 if kind == "gray" else 3, (0.0,) * (1 if kind == "gray" else 3),
                      (1.0,) * (1 if kind == "gray" else 3))
    return rng.integers(0, 256, spec.shape(n, h, w), dtype=np.uint8)


@pytest.mark.parametrize("kind", ["nv12", "rgb", "bgr", "yuv444", "gray"])
def test_pixels_match_the_reference(kind):
    rng = np.random.default_rng(1)
    image = _image(kind, rng)
    channels = 1 if kind == "gray" else 3
    spec = ImageInput(kind, channels, (0.0,) * channels, (1.0,) * channels)
    assert np.array_equal(spec.pixels(image), _reference_pixels(kind, image))


def test_colour_conversion_extremes():
    # grey stays grey; saturated chroma clamps to [0, 255]
    spec = ImageInput("yuv444", 3, (0, 0, 0), (1, 1, 1))
    image = np.array([[[[128, 128, 128], [0, 255, 255], [255, 0, 0], [255, 255, 0]]]],
                     np.uint8)
    got = spec.pixels(image)[0, :, 0, :].T
    assert got[0].tolist() == [128, 128, 128]
    for k in range(1, 4):
        assert got[k].tolist() == list(_rgb_of_yuv(*image[0, 0, k].tolist()))
    assert got.min() >= 0 and got.max() <= 255


@pytest.mark.parametrize("kind", ["nv12", "rgb", "gray"])
def test_codes_follow_the_fixed_point_rule(kind):
    rng = np.random.default_rng(2)
    channels = 1 if kind == "gray" else 3
    mean = tuple(float(m) for m in rng.uniform(0, 255, channels))
    scale = tuple(float(s) for s in rng.uniform(0.004, 0.05, channels))
    spec = ImageInput(kind, channels, mean, scale)
    image = _image(kind, rng, n=1, h=4, w=6)
    out_scale = 0.0173
    got = spec.to_codes(image, out_scale)
    pixels = _reference_pixels(kind, image)
    for c in range(channels):
        m0, n = ref.fixed_point(scale[c] / (256 * out_scale))
        m256 = round(mean[c] * 256)
        for (b, i, j), p in np.ndenumerate(pixels[:, c]):
            want = ref.shift_round((int(p) * 256 - m256) * m0, 31 + n)
            assert got[b, c, i, j] == min(max(want, -128), 127)
    floats = spec.to_float(image)
    want = (pixels - np.array([round(m * 256) / 256 for m in mean]).reshape(1, -1, 1, 1)) \
        * np.array(scale).reshape(1, -1, 1, 1)
    assert np.allclose(floats, want, rtol=1e-6, atol=1e-6) and floats.dtype == np.float32


def test_bad_image_inputs():
    with pytest.raises(InputError, match="must have even sides"):
        ImageInput("nv12", 3, (0,) * 3, (1,) * 3).shape(1, 5, 6)
    with pytest.raises(InputError, match="has 1 channels"):
        ImageInput("rgb", 1, (0,), (1,))
    with pytest.raises(InputError, match="--scale"):
        ImageInput("rgb", 3, (0,) * 3, (1, 0, 1))
    with pytest.raises(InputError, match="--mean"):
        ImageInput("rgb", 3, (0, 0), (1,) * 3)
    with pytest.raises(InputError, match="must be uint8"):
        ImageInput("rgb", 3, (0,) * 3, (1,) * 3).pixels(np.zeros((1, 2, 2, 3), np.float32))
    with pytest.raises(InputError, match="--input-type"):
        ImageInput("jpeg", 3, (0,) * 3, (1,) * 3)
    with pytest.raises(InputError, match="--mean x"):
        parse_values("x", 3, 0.0, "--mean")
    assert parse_values("2", 3, 0.0, "--mean") == (2.0, 2.0, 2.0)
    assert parse_values(None, 1, 1.0, "--scale") == (1.0,)


def test_pnm_reader():
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    data = b"P6\n# a comment\n3 2\n255\n" + pixels.tobytes()
    assert np.array_equal(read_pnm("a.ppm", data), pixels)
    gray = b"P5 3 2 255 " + bytes(range(6))
    assert read_pnm("a.pgm", gray)[..., 0].tolist() == [[0, 1, 2], [3, 4, 5]]
    for bad, message in [(b"P3 1 1 255 0 0 0", "not a binary"),
                         (b"P6 3 2 65535 " + bytes(36), "8-bit"),
                         (b"P6 3 x 255 ", "malformed"),
                         (b"P6 3 2 255 " + bytes(10), "truncated")]:
        with pytest.raises(InputError, match=message):
            read_pnm("bad.ppm", bad)

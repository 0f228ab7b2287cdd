"""`--calib-dir` of pictures: real photos (scikit-image's samples, a test extra) read,
resized and converted for the model's input, and the one-line refusals around them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from emu.errors import InputError
from emu.nn import compiler, imagefiles
from emu.soc.config import load_config
from tests.nn.nets import ranked

skimage = pytest.importorskip("skimage", reason="scikit-image (a test extra) ships the photos")
PHOTOS = Path(skimage.__file__).resolve().parent / "data"
SOC = load_config("j5", None, []).soc


def _fit_reference(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize, half-pixel centres, written out pixel by pixel."""
    in_h, in_w, channels = pixels.shape
    out = np.zeros((height, width, channels))
    for y in range(height):
        sy = min(max((y + 0.5) * in_h / height - 0.5, 0.0), in_h - 1.0)
        y0 = int(np.floor(sy))
        y1, ty = min(y0 + 1, in_h - 1), sy - y0
        for x in range(width):
            sx = min(max((x + 0.5) * in_w / width - 0.5, 0.0), in_w - 1.0)
            x0 = int(np.floor(sx))
            x1, tx = min(x0 + 1, in_w - 1), sx - x0
            for c in range(channels):
                top = pixels[y0, x0, c] * (1 - tx) + pixels[y0, x1, c] * tx
                bottom = pixels[y1, x0, c] * (1 - tx) + pixels[y1, x1, c] * tx
                out[y, x, c] = top * (1 - ty) + bottom * ty
    return out


@pytest.mark.parametrize("size", [(7, 5), (16, 16), (40, 23)])
def test_fit_is_the_bilinear_resize(size):
    pixels = np.random.default_rng(1).integers(0, 256, (13, 17, 3), dtype=np.uint8)
    np.testing.assert_allclose(imagefiles.fit(pixels, *size), _fit_reference(pixels, *size),
                               rtol=0, atol=1e-9)


def test_png_and_jpeg_photos_read_as_rgb():
    astronaut = imagefiles.read_picture(PHOTOS / "astronaut.png")
    rocket = imagefiles.read_picture(PHOTOS / "rocket.jpg")
    camera = imagefiles.read_picture(PHOTOS / "camera.png")
    assert astronaut.shape == (512, 512, 3) and astronaut.dtype == np.uint8
    assert rocket.shape[2] == 3 and camera.shape == (512, 512, 1)
    from PIL import Image

    with Image.open(PHOTOS / "rocket.jpg") as image:
        assert np.array_equal(rocket, np.asarray(image.convert("RGB")))


def _model_file(tmp_path: Path, shape: tuple[int, ...], op: str = "Conv") -> Path:
    path = tmp_path / "m.onnx"
    path.write_bytes(ranked(shape, op).SerializeToString())
    return path


def test_photos_calibrate_a_feature_map_model_as_pixels_over_255(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("astronaut.png", "rocket.jpg", "camera.png"):
        shutil.copy(PHOTOS / name, folder / name)
    model = ranked((1, 3, 24, 32), "Conv")
    options = compiler.CompileOptions(calib_dir=folder)
    found = compiler.calibration_samples(compiler.importer.compile_graph(
        compiler.importer.load(model)), options)
    assert found.description == f"3 pictures in {folder}"
    samples = found.feeds
    assert len(samples) == 3
    first = samples[0]["x"]
    want = imagefiles.fit(imagefiles.read_picture(folder / "astronaut.png"), 24, 32) / 255.0
    np.testing.assert_allclose(first[0], want.transpose(2, 0, 1).astype(np.float32))
    grey = samples[1]["x"][0]  # camera.png: one channel repeated
    assert np.array_equal(grey[0], grey[1]) and np.array_equal(grey[1], grey[2])
    compiled = compiler.compile_model(model, "m", options, SOC)
    assert compiled.options["calibration"] == f"3 pictures in {folder}"


@pytest.mark.parametrize(("files", "shape", "input_type", "needle"), [
    (("astronaut.png", "a.npy"), (1, 3, 8, 8), "featuremap", "holds both arrays"),
    (("astronaut.png",), (1, 64), "featuremap", "needs an N x C x H x W input"),
    (("astronaut.png",), (1, 3, 8, 8), "nv12", "give nv12 samples as .npy files"),
    (("notes.txt",), (1, 3, 8, 8), "featuremap", "no .npy, .npz or picture files"),
    (("broken.png",), (1, 3, 8, 8), "featuremap", "not a PNG file"),
])
def test_bad_picture_folders_are_refused_in_one_line(tmp_path, files, shape, input_type,
                                                     needle):
    folder = tmp_path / "cal"
    folder.mkdir()
    for name in files:
        if name == "a.npy":
            np.save(folder / name, np.zeros(shape, np.float32))
        elif name in ("notes.txt", "broken.png"):
            (folder / name).write_bytes(b"hello")
        else:
            shutil.copy(PHOTOS / name, folder / name)
    model = ranked(shape, "Conv" if len(shape) == 4 else "Gemm")
    with pytest.raises(InputError) as info:
        compiler.compile_model(model, "m", compiler.CompileOptions(
            calib_dir=folder, input_type=input_type), SOC)
    assert needle in str(info.value) and "\n" not in str(info.value)


CALIBRATE = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png")
EVALUATE = ("rocket.jpg", "motorcycle_right.png", "retina.jpg")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "size"), [("mobilenetv3_large", (128, 128)),
                                            ("se_resnet50", (96, 96)), ("yolov5s", (128, 128)),
                                            ("deeplabv3", (64, 64))])
def test_zoo_networks_calibrated_on_photos_match_onnxruntime_on_other_photos(tmp_path, name,
                                                                            size):
    """Each output's Pearson correlation with onnxruntime's (the cosine about onnxruntime's
    mean, which a large constant bias cannot inflate) is at least 0.99 on photos the
    calibration did not see; everything runs on the BPU but what J5's list keeps off it."""
    ort = pytest.importorskip("onnxruntime")
    from emu.nn import execute, zoo

    for photo in CALIBRATE:
        shutil.copy(PHOTOS / photo, tmp_path / photo)
    model = zoo.build(name, size)
    options = compiler.CompileOptions(calib_dir=tmp_path)
    compiled = compiler.compile_model(model, name, options, SOC)
    reasons = [r for s in compiled.segments if s.kind == "cpu" for r in s.reasons]
    assert reasons == ([] if name != "deeplabv3" else
                       ["aspp.3.conv (Conv): dilation (18, 18) exceeds 16"])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    for photo in EVALUATE:
        feeds = compiler.picture_sample(compiled.graph, PHOTOS / photo, options)
        got = compiled.run(feeds)
        for output, want in zip(names, session.run(names, feeds), strict=True):
            centre = float(np.mean(want))
            assert execute.cosine_similarity(got[output] - centre, want - centre) >= 0.99


def _png(width: int, height: int, idat: bytes) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    return (imagefiles.PNG_MAGIC
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def test_pictures_past_the_pixel_bound_or_their_declared_size_are_refused_unread():
    import zlib

    # A header declaring more pixels than emu reads, whatever the data.
    side = 8193
    with pytest.raises(InputError, match=r"8193x8193 = 67,125,249 pixels; emu reads at most"):
        imagefiles.read_png(_png(side, side, zlib.compress(b"\0" * 16)), "big.png")
    # A 16 x 16 grey image whose data inflates to 64 MiB: only its size is inflated.
    bomb = _png(16, 16, zlib.compress(b"\0" * (64 << 20), 1))
    assert len(bomb) < 1 << 20
    with pytest.raises(InputError, match="holds more than its 16x16 pixels"):
        imagefiles.read_png(bomb, "bomb.png")
    # The same header with exactly its data reads.
    exact = _png(16, 16, zlib.compress(bytes(16 * 17)))
    assert imagefiles.read_png(exact, "ok.png").shape == (16, 16)
    with pytest.raises(InputError, match="PGM/PPM image of 9000x9000"):
        imagefiles.read_pnm("big.pgm", b"P5\n9000 9000\n255\n")

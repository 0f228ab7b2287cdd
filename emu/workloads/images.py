"""Image files for the CV operators: PNG, PGM/PPM and .npy in and out, and the standard
test image.

PNG support covers what the operators read and write: 8-bit grey, grey+alpha, RGB and RGBA
(alpha dropped on reading), not interlaced, any of the five row filters on reading; writing
uses filter 0 and zlib level 6, so the same pixels give the same file. Float, int16 and
int32 images (maps, gradients, integrals) go to and from `.npy` only.

The standard test image (`standard_image`) is generated, not downloaded: a 640x480 RGB
scene of smooth gradients, filled and outlined shapes at several angles, thin lines, a
checkerboard, a ring of spokes and a patch of seeded noise, so that every operator has
edges, corners, flat areas and texture to work on. `emu/workloads/data/standard.png` is
that image as a file (a test checks the two agree).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from emu.errors import InputError
from emu.nn.imagefiles import PICTURE_SUFFIXES, PNG_MAGIC, read_picture, read_png

STANDARD_PATH = Path(__file__).resolve().parent / "data" / "standard.png"


def png_bytes(pixels: npt.NDArray[np.uint8]) -> bytes:
    """A PNG file of (H, W) grey or (H, W, 3) RGB uint8 pixels."""
    if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3) or (
            pixels.ndim == 3 and pixels.shape[2] != 3):
        raise ValueError(f"PNG holds (H, W) or (H, W, 3) uint8, got {pixels.dtype} "
                         f"{pixels.shape}")
    height, width = pixels.shape[:2]
    color = 0 if pixels.ndim == 2 else 2
    rows = np.ascontiguousarray(pixels).reshape(height, -1)
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1).tobytes()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    return (PNG_MAGIC + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color, 0,
                                                    0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def read_image(path: Path) -> npt.NDArray:
    """An image file's pixels: PNG / PGM / PPM (and JPEG with Pillow) as uint8, grey as
    (H, W); .npy as stored (2-D or 3-D)."""
    suffix = path.suffix.lower()
    if suffix in PICTURE_SUFFIXES:
        pixels = read_picture(path)
        return np.ascontiguousarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)
    if suffix != ".npy":
        raise InputError(f"{path}: unknown image type {suffix!r} (have .png, .pgm, .ppm, "
                         ".npy, and .jpg with Pillow)")
    import io

    try:
        array = np.load(io.BytesIO(path.read_bytes()), allow_pickle=False)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except (ValueError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy file: {exc}") from None
    if array.ndim not in (2, 3) or min(array.shape) < 1:
        raise InputError(f"{path}: a .npy image is 2-D or 3-D, got shape {array.shape}")
    return np.ascontiguousarray(array)


def image_bytes(pixels: npt.NDArray, path: Path) -> bytes:
    """The file contents of `pixels` for `path`'s type; InputError if the type cannot hold
    them (float images only go to .npy)."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        import io

        out = io.BytesIO()
        np.save(out, np.ascontiguousarray(pixels), allow_pickle=False)
        return out.getvalue()
    if pixels.dtype != np.uint8 or not (pixels.ndim == 2 or pixels.shape[2] == 3):
        raise InputError(f"{path}: a {pixels.dtype} image of shape {pixels.shape} is written "
                         f"as .npy only")
    if suffix == ".png":
        return png_bytes(pixels)
    if suffix in (".pgm", ".ppm"):
        kind = b"P5" if pixels.ndim == 2 else b"P6"
        return kind + f"\n{pixels.shape[1]} {pixels.shape[0]}\n255\n".encode() + \
            pixels.tobytes()
    raise InputError(f"{path}: unknown image type {suffix!r} (have .png, .pgm, .ppm, .npy)")


def standard_image(width: int = 640, height: int = 480) -> npt.NDArray[np.uint8]:
    """The generated RGB test scene (see the module docstring)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    sx, sy = x / width, y / height
    img = np.stack([40 + 150 * sx, 60 + 120 * sy, 180 - 120 * sx * sy], axis=-1)
    # shapes: a disc, a tilted square outline, a triangle, a ring of spokes
    disc = (x - 0.25 * width) ** 2 + (y - 0.35 * height) ** 2 < (0.12 * height) ** 2
    img[disc] = (230, 200, 40)
    c, s = np.cos(0.5), np.sin(0.5)
    u = (x - 0.62 * width) * c + (y - 0.3 * height) * s
    v = -(x - 0.62 * width) * s + (y - 0.3 * height) * c
    half = 0.14 * height
    square = (np.maximum(abs(u), abs(v)) < half) & (np.maximum(abs(u), abs(v)) > half - 6)
    img[square] = (20, 20, 120)
    tri = (y > 0.6 * height) & (y < 0.9 * height) & (abs(x - 0.2 * width) < (y - 0.6 * height))
    img[tri] = (200, 60, 60)
    angle = np.arctan2(y - 0.7 * height, x - 0.65 * width)
    radius = np.hypot(x - 0.65 * width, y - 0.7 * height)
    spokes = (radius < 0.2 * height) & (np.cos(16 * angle) > 0.6)
    img[spokes] = (250, 250, 250)
    checker = ((x // 8 + y // 8) % 2 == 0) & (x > 0.85 * width) & (y < 0.5 * height)
    img[checker] = (10, 10, 10)
    for k in range(5):  # thin lines at several slopes
        line = abs((y - 0.05 * height * k) - (0.3 + 0.2 * k) * x) < 0.7
        img[line & (x < 0.45 * width)] = (255, 255, 255)
    noisy = (x > 0.45 * width) & (y > 0.55 * height) & (x < 0.85 * width)
    noise = np.random.default_rng(5).normal(0.0, 8.0, img.shape)
    img[noisy] += noise[noisy]
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def standard() -> npt.NDArray[np.uint8]:
    """The shipped standard test image (640x480 RGB)."""
    return read_png(STANDARD_PATH.read_bytes(), str(STANDARD_PATH))

"""Image files the compiler and the CV commands read: PNG, binary PGM/PPM, and JPEG through
Pillow when it is installed (the `images` extra), as uint8 pixels.

PNG: 8-bit grey, grey+alpha, RGB and RGBA (alpha dropped), not interlaced, any of the five
row filters. PGM/PPM: binary (P5, P6) with 8-bit samples. `read_picture` gives any of them
as (H, W, C) uint8 with C 1 or 3; `fit` resizes such pixels to a model's input size.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from emu.errors import InputError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PICTURE_SUFFIXES = (".png", ".pgm", ".ppm", ".pnm", ".jpg", ".jpeg")
MAX_PIXELS = 1 << 26
"""The largest picture read, in pixels (8192 x 8192: four 8K frames). Checked against the
header before anything is decoded, so a small file declaring a huge image (a decompression
bomb) is refused at once."""


def _check_pixels(width: int, height: int, where: str, kind: str) -> None:
    if width * height > MAX_PIXELS:
        raise InputError(f"{where}: {kind} of {width}x{height} = {width * height:,} pixels; "
                         f"emu reads at most {MAX_PIXELS:,} (8192 x 8192)")


def _chunks(data: bytes, where: str) -> list[tuple[bytes, bytes]]:
    chunks = []
    at = len(PNG_MAGIC)
    while at < len(data):
        if at + 8 > len(data):
            raise InputError(f"{where}: truncated PNG chunk header at byte {at}")
        length, kind = struct.unpack(">I4s", data[at: at + 8])
        body = data[at + 8: at + 8 + length]
        if len(body) != length or at + 12 + length > len(data):
            raise InputError(f"{where}: truncated PNG chunk {kind!r} at byte {at}")
        (crc,) = struct.unpack(">I", data[at + 8 + length: at + 12 + length])
        if zlib.crc32(kind + body) != crc:
            raise InputError(f"{where}: PNG chunk {kind!r} at byte {at} fails its CRC")
        chunks.append((kind, body))
        at += 12 + length
        if kind == b"IEND":
            break
    return chunks


def _unfilter(raw: bytes, height: int, row: int, bpp: int, where: str) -> npt.NDArray[np.uint8]:
    if len(raw) != height * (row + 1):
        raise InputError(f"{where}: PNG image data holds {len(raw)} B, expected "
                         f"{height * (row + 1)}")
    lines = np.frombuffer(raw, np.uint8).reshape(height, row + 1)
    out = np.zeros((height, row), np.int32)
    prior = np.zeros(row, np.int32)
    for y in range(height):
        kind, line = lines[y, 0], lines[y, 1:].astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prior) & 255
        elif kind in (1, 3, 4):
            cur = np.zeros(row, np.int32)
            for x in range(row):  # left-dependent filters go pixel by pixel
                left = cur[x - bpp] if x >= bpp else 0
                up = prior[x]
                if kind == 1:
                    pred = left
                elif kind == 3:
                    pred = (left + up) // 2
                else:
                    corner = prior[x - bpp] if x >= bpp else 0
                    p = left + up - corner
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                    pred = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                cur[x] = (line[x] + pred) & 255
        else:
            raise InputError(f"{where}: PNG row {y} has unknown filter type {kind}")
        out[y] = cur
        prior = cur
    return out.astype(np.uint8)


def read_png(data: bytes, where: str) -> npt.NDArray[np.uint8]:
    """Pixels of a PNG file: (H, W) grey or (H, W, 3) RGB uint8."""
    if not data.startswith(PNG_MAGIC):
        raise InputError(f"{where}: not a PNG file")
    chunks = _chunks(data, where)
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise InputError(f"{where}: PNG does not start with an IHDR chunk")
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    channels = {0: 1, 4: 2, 2: 3, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace != 0:
        raise InputError(f"{where}: PNG of bit depth {depth}, colour type {color}, interlace "
                         f"{interlace}; only 8-bit grey/RGB(A), not interlaced, is read")
    if not 1 <= width <= 1 << 15 or not 1 <= height <= 1 << 15:
        raise InputError(f"{where}: PNG of {width}x{height}; sides must be 1..32768")
    _check_pixels(width, height, where, "PNG")
    size = height * (1 + width * channels)  # each row: its filter byte, then its samples
    inflate = zlib.decompressobj()
    try:  # no more than the header's size is ever inflated
        raw = inflate.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"),
                                 size + 1)
    except zlib.error as exc:
        raise InputError(f"{where}: PNG image data does not decompress: {exc}") from None
    if len(raw) > size or inflate.unconsumed_tail:
        raise InputError(f"{where}: PNG image data holds more than its {width}x{height} "
                         f"pixels")
    pixels = _unfilter(raw, height, width * channels, channels, where)
    pixels = pixels.reshape(height, width, channels)
    if channels in (2, 4):
        pixels = pixels[:, :, : channels - 1]
    return np.ascontiguousarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)


def read_pnm(path: str, data: bytes) -> np.ndarray:
    """A binary PGM (P5) or PPM (P6) image with 8-bit samples: uint8 (H, W, 1 or 3)."""
    fields: list[bytes] = []
    pos = 0
    while len(fields) < 4:
        while pos < len(data) and data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            end = data.find(b"\n", pos)
            pos = len(data) if end < 0 else end + 1
            continue
        start = pos
        while pos < len(data) and not data[pos:pos + 1].isspace():
            pos += 1
        if start == pos:
            break
        fields.append(data[start:pos])
    pos += 1  # the single whitespace byte before the samples
    if len(fields) < 4 or fields[0] not in (b"P5", b"P6"):
        raise InputError(f"{path}: not a binary PGM/PPM image (P5 or P6)")
    try:
        width, height, maxval = (int(f) for f in fields[1:])
    except ValueError:
        raise InputError(f"{path}: malformed PGM/PPM header") from None
    if maxval != 255 or width <= 0 or height <= 0:
        raise InputError(f"{path}: only 8-bit PGM/PPM images (maxval 255) are read")
    _check_pixels(width, height, path, "PGM/PPM image")
    channels = 3 if fields[0] == b"P6" else 1
    size = width * height * channels
    if len(data) - pos < size:
        raise InputError(f"{path}: truncated image ({len(data) - pos} of {size} sample bytes)")
    samples = np.frombuffer(data, dtype=np.uint8, count=size, offset=pos)
    return samples.reshape(height, width, channels).copy()


def read_picture(path: Path) -> npt.NDArray[np.uint8]:
    """A PNG, PGM/PPM or JPEG file's pixels as (H, W, C) uint8, C 1 (grey) or 3 (RGB)."""
    where = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{where}: cannot read: {exc.strerror}") from None
    suffix = path.suffix.lower()
    if suffix == ".png":
        pixels = read_png(data, where)
    elif suffix in (".pgm", ".ppm", ".pnm"):
        pixels = read_pnm(where, data)
    elif suffix in (".jpg", ".jpeg"):
        pixels = _read_jpeg(data, where)
    else:
        raise InputError(f"{where}: not a picture emu reads ({', '.join(PICTURE_SUFFIXES)})")
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def _read_jpeg(data: bytes, where: str) -> npt.NDArray[np.uint8]:
    try:
        import io

        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise InputError(f"{where}: reading JPEG needs Pillow: pip install 'emu[images]'"
                         ) from None
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            _check_pixels(*image.size, where, "JPEG")
            converted = image.convert("L" if image.mode in ("1", "L", "I;16") else "RGB")
            return np.asarray(converted, np.uint8).copy()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputError(f"{where}: not a readable JPEG ({exc})") from None


def fit(pixels: npt.NDArray[np.uint8], height: int, width: int) -> npt.NDArray[np.float64]:
    """(H, W, C) pixels resized to (height, width, C) by bilinear interpolation with
    half-pixel centres, edges clamped (OpenCV's INTER_LINEAR and ONNX's half_pixel linear
    Resize compute the same), in float64: the source coordinate of output index o is
    (o + 1/2) x in / out - 1/2."""
    out = pixels.astype(np.float64)
    for axis, size in ((0, height), (1, width)):
        length = out.shape[axis]
        coord = np.clip((np.arange(size) + 0.5) * length / size - 0.5, 0, length - 1)
        low = np.floor(coord).astype(np.int64)
        high = np.minimum(low + 1, length - 1)
        frac = (coord - low).reshape((-1, 1, 1) if axis == 0 else (1, -1, 1))
        out = (np.take(out, low, axis=axis) * (1 - frac)
               + np.take(out, high, axis=axis) * frac)
    return out

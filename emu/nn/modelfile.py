"""The compiled-model file (`.hbm`): several models in one self-contained, checked file.

What `emu compile` writes and the runtime reads. A file packs one or more models; each
model is a JSON-able description (`meta`) and named NumPy arrays (weights, biases,
multipliers, constants). Nothing is pickled: a file from anywhere is parsed, never run.

Layout (all integers little-endian):

    offset  size  field
    0       8     magic b"EMU-HBM\\0"
    8       4     format version (uint32, `FORMAT_VERSION`)
    12      4     reserved, 0
    16      8     header length L (uint64)
    24      L     header: UTF-8 JSON {"emu": version, "models": [{"name", "meta",
                  "arrays": {key: [dtype, shape, offset, nbytes]}}]}; offsets count
                  from the start of the payload
    24+L    ...   payload: the arrays' bytes, each starting at a multiple of 64
    end-32  32    SHA-256 of every byte before it

A reader checks, in this order, and refuses with one line naming the file and the
problem: the magic (a foreign file), the version (a file from a newer emu), the length (a
truncated file), the checksum (a corrupted one), then the header's own consistency (every
array inside the payload, a plain numeric dtype, a size that matches its shape).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emu.errors import InputError

MAGIC = b"EMU-HBM\0"
FORMAT_VERSION = 1
ALIGN = 64
_PREFIX = struct.Struct("<8sIIQ")
_DIGEST = 32
# Plain numeric dtypes only: no objects, no structured or byte-order-dependent types.
DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64")


class ModelFileError(InputError):
    """A model file that cannot be used: foreign, from a newer emu, truncated, corrupted."""


@dataclass
class PackedModel:
    """One model of a file: its description and its arrays."""

    name: str
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def dumps(models: Sequence[PackedModel], emu_version: str) -> bytes:
    """The bytes of a file holding `models` (names must be unique and non-empty)."""
    names = [m.name for m in models]
    if not models:
        raise ModelFileError("a model file needs at least one model")
    if len(set(names)) != len(names) or not all(names):
        raise ModelFileError(f"model names must be unique and non-empty, got {names}")
    chunks: list[bytes] = []
    offset = 0
    entries = []
    for model in models:
        table = {}
        for key, array in model.arrays.items():
            data = np.asarray(array)
            dtype = str(data.dtype)
            if dtype not in DTYPES:
                raise ModelFileError(f"model {model.name}: array {key!r} has dtype {dtype}, "
                                     "which a model file cannot hold")
            pad = -offset % ALIGN
            chunks.append(b"\0" * pad)
            offset += pad
            raw = data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes(order="C")
            table[key] = [dtype, list(data.shape), offset, len(raw)]
            chunks.append(raw)
            offset += len(raw)
        entries.append({"name": model.name, "meta": model.meta, "arrays": table})
    try:
        header = json.dumps({"emu": emu_version, "models": entries}, sort_keys=True,
                            allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"a model description is not plain JSON: {exc}") from None
    body = _PREFIX.pack(MAGIC, FORMAT_VERSION, 0, len(header)) + header + b"".join(chunks)
    return body + hashlib.sha256(body).digest()


def loads(data: bytes, where: str) -> list[PackedModel]:
    """The models of a file's bytes (`where` names the file in errors)."""
    if len(data) < len(MAGIC) or data[:len(MAGIC)] != MAGIC:
        raise ModelFileError(f"{where}: not an emu model file (no {MAGIC[:7].decode()} "
                             "header; was it written by `emu compile`?)")
    if len(data) < _PREFIX.size + _DIGEST:
        raise ModelFileError(f"{where}: truncated ({len(data)} bytes)")
    _, version, _, header_len = _PREFIX.unpack_from(data)
    if version != FORMAT_VERSION:
        raise ModelFileError(f"{where}: model file format {version}; this emu reads format "
                             f"{FORMAT_VERSION} (compile the model again with this emu)")
    if _PREFIX.size + header_len + _DIGEST > len(data):
        raise ModelFileError(f"{where}: truncated ({len(data)} bytes, the header alone "
                             f"needs {_PREFIX.size + header_len + _DIGEST})")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise ModelFileError(f"{where}: corrupted or truncated (checksum mismatch)")
    try:
        header = json.loads(body[_PREFIX.size:_PREFIX.size + header_len])
        payload = memoryview(body)[_PREFIX.size + header_len:]
        return [_model(entry, payload) for entry in header["models"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelFileError(f"{where}: inconsistent header ({exc})") from None


def _model(entry: dict[str, Any], payload: memoryview) -> PackedModel:
    arrays = {}
    for key, (dtype, shape, offset, nbytes) in entry["arrays"].items():
        if dtype not in DTYPES:
            raise ValueError(f"array {key!r} has dtype {dtype}")
        shape = tuple(int(s) for s in shape)
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if size != nbytes or offset < 0 or offset + nbytes > len(payload):
            raise ValueError(f"array {key!r} does not fit the payload")
        flat = np.frombuffer(payload[offset:offset + nbytes], dtype=np.dtype(dtype)
                             .newbyteorder("<"))
        arrays[key] = flat.astype(np.dtype(dtype), copy=True).reshape(shape)
    if not isinstance(entry["name"], str) or not isinstance(entry["meta"], dict):
        raise ValueError("a model needs a name and a description")
    return PackedModel(entry["name"], entry["meta"], arrays)

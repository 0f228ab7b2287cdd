"""Compiled models kept on disk, so that a model compiles once and not on every run.

`compile_model` spends nearly all its time importing, calibrating, quantising and checking
accuracy (`emu scenario perception` spent 29 of its 33 s compiling its two models, on every
run). Those steps read the ONNX model, the compile options and the calibration inputs, and
nothing else; the compiler digests exactly those (`key`: the model's bytes, the options,
every file of `--calib-dir`; not where the model was read from, which only names it in
messages and notes) with a digest of emu's own source (every `.py` file of the package: a
change to the importer, the quantiser or anything they call compiles afresh). The hardware
is not in the key: those steps never read it; the function-call cut that does runs after
every lookup, on the session's hardware.

An entry is the compiled model's file (`modelfile.py`, checksummed) with every float weight
kept, so a model read back is the model that was compiled, bit for bit. An entry that cannot
be read back (damaged, truncated, another format) is compiled again and replaced. Entries
are written to a temporary file and renamed into place, so processes compiling the same
model at once never read half an entry. Reading an entry marks it used; after a write, the
least recently used entries go until the folder holds at most `MAX_BYTES`.

Where: the folder `EMU_MODEL_CACHE` names, else `$XDG_CACHE_HOME/emu/models` (`~/.cache` when
that is unset). `EMU_MODEL_CACHE=off` turns the cache off. A folder that cannot be created
or written leaves that compile uncached: compiling never fails because of the cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from emu import jit
from emu.files import replace_file

ENV = "EMU_MODEL_CACHE"
OFF = "off"
MAX_BYTES = 2 * 1024**3  # a policy for the user's disk, not a hardware figure
SUFFIX = ".emu"


def folder() -> Path | None:
    """The cache folder, or None when the cache is off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() == OFF:
        return None
    if value:
        return Path(value)
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".cache") / "emu" / "models"


@functools.cache
def source_digest(package: Path = jit.PACKAGE) -> str:
    """A digest of every Python source of the emu package: paths and contents."""
    return jit.files_digest(sorted(package.rglob("*.py")), package)


def key(*parts: bytes) -> str:
    """The digest of emu's source and `parts` (each length-prefixed, so no two lists of
    parts share a digest)."""
    digest = hashlib.sha256(source_digest().encode())
    for part in parts:
        digest.update(len(part).to_bytes(8, "little") + part)
    return digest.hexdigest()


def folder_digest(where: Path) -> bytes | None:
    """A digest of every file directly in `where` (names and contents), or None when the
    folder cannot be read (the compiler then reports why, uncached)."""
    digest = hashlib.sha256()
    try:
        for path in sorted(where.iterdir()):
            if path.is_file():
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:
        return None
    return digest.digest()


def load(entry_key: str) -> bytes | None:
    """The bytes stored under `entry_key`, or None (no cache, no entry, unreadable)."""
    where = folder()
    if where is None:
        return None
    path = where / (entry_key + SUFFIX)
    try:
        data = path.read_bytes()
        os.utime(path)  # used now: the last to go when the folder is trimmed
    except OSError:
        return None
    return data


def store(entry_key: str, data: bytes) -> None:
    """Keep `data` under `entry_key` (nothing happens when the folder is not writable)."""
    where = folder()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        replace_file(where / (entry_key + SUFFIX), data)
        trim(where, MAX_BYTES)
    except OSError:
        return


def trim(where: Path, max_bytes: int) -> None:
    """Remove the least recently used entries of `where` until it holds `max_bytes` or less."""
    entries = []
    for path in where.glob("*" + SUFFIX):
        if path.name.startswith(".part-"):
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        entries.append((stat.st_mtime_ns, path.name, stat.st_size, path))
    total = sum(size for _, _, size, _ in entries)
    for _, _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size

"""The typed records several CV kernel modules pass to their kernels.

A kernel takes a few of these NamedTuples (numba types each as a tuple of its fields and
compiles one version per field types) instead of a long list of positional integers, and
unpacks them at its top. Records that only one kernel module uses live beside its kernels.
"""

from __future__ import annotations

from typing import NamedTuple


class TileIn(NamedTuple):
    """A tile's source in TCM (first byte `src`, rows `in_pitch` bytes apart) and its size
    in output pixels, `h` x `w`."""

    src: int
    in_pitch: int
    h: int
    w: int


class Inside(NamedTuple):
    """The part of a tile's grid inside the image: rows `row_lo`..`row_hi` - 1, columns
    `col_lo`..`col_hi` - 1."""

    row_lo: int
    row_hi: int
    col_lo: int
    col_hi: int


class TileRows(NamedTuple):
    """A tile's rows in TCM: `rows` rows of `width` (pixels or bytes, as the kernel says)
    read from `src` (rows `in_pitch` bytes apart) and written to `dst` (rows `out_pitch`
    bytes apart)."""

    src: int
    dst: int
    rows: int
    width: int
    in_pitch: int
    out_pitch: int

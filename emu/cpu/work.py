"""The builders of CPU work items for code that streams through memory: every caller that
copies, converts or stores a buffer on the A55s builds its item here.

A vector loop makes the same instructions per vector and a loop step (an ALU op and a
branch) per vector, the branch mispredicted once where the loop exits (`vector_loop`). Its
memory accesses are recorded one per line, as the line is what the caches move: a loop
going through a byte range in address order touches each of its lines once (`Stream`,
`stream_work`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.cpu import ops
from emu.cpu.cluster import CpuWork


@dataclass(frozen=True)
class Stream:
    """A byte range a loop goes through in address order: loads, or stores (`store`).

    `stream_id` is the id of the instruction stream the accesses belong to, what the
    prefetcher tells streams apart by (0-255). Stores write whole lines where the range
    covers them (the store buffer merges a run of stores into the line) unless
    `whole_lines` is False: stores known only by the lines they changed, which may have
    left bytes of each line as they were."""

    start: int
    nbytes: int
    store: bool = False
    stream_id: int = 0
    whole_lines: bool = True

    def __post_init__(self) -> None:
        if self.start < 0 or self.nbytes < 0:
            raise ValueError(f"stream: negative range {self.start}+{self.nbytes}")
        if not 0 <= self.stream_id < 256:
            raise ValueError(f"stream: id {self.stream_id} is not in 0-255")


def vector_loop(vectors: int, *, exits: int = 1,
                **per_vector: float) -> npt.NDArray[np.int64]:
    """The instruction counts of a loop of `vectors` iterations: `per_vector` of each class
    (`emu.cpu.ops` names) per iteration, plus the loop step, an ALU op and a branch per
    iteration, the branch mispredicted at each of the loop's `exits` (once per pass of an
    inner loop run `exits` times). A count per iteration may be a fraction (a store of a
    quarter vector: one store every four iterations); the loop's total is rounded up."""
    by_name = {name: math.ceil(count * vectors) for name, count in per_vector.items()}
    by_name["int"] = by_name.get("int", 0) + vectors
    by_name["branch"] = by_name.get("branch", 0) + vectors
    by_name["mispredict"] = by_name.get("mispredict", 0) + exits
    return ops.counts(**by_name)


def stream_work(name: str, counts: npt.NDArray[np.int64], streams: Sequence[Stream],
                line_bytes: int) -> CpuWork:
    """A work item of instruction `counts` whose accesses go through `streams` one after the
    other, one access per line each stream touches (from the line holding its first
    byte)."""
    if not streams:
        return CpuWork(name, counts)
    addrs, writes, full, ids = [], [], [], []
    for s in streams:
        first = s.start - s.start % line_bytes if s.nbytes else s.start
        lines = np.arange(first, s.start + s.nbytes, line_bytes, dtype=np.int64)
        addrs.append(lines)
        writes.append(np.full(len(lines), s.store))
        full.append(np.full(len(lines), s.store and s.whole_lines)
                    & (lines >= s.start) & (lines + line_bytes <= s.start + s.nbytes))
        ids.append(np.full(len(lines), s.stream_id, np.uint8))
    return CpuWork(name, counts, addrs=np.concatenate(addrs), is_write=np.concatenate(writes),
                   full_line=np.concatenate(full), streams=np.concatenate(ids))


def copy_work(name: str, start: int, nbytes: int, *, store: bool, vector_bytes: int,
              line_bytes: int) -> CpuWork:
    """memcpy of `nbytes` between a buffer at `start` and one outside the simulated address
    space (a host array): per vector a NEON load and a store, and the loop step; the
    accesses are the buffer's, stores when the copy writes it (`store`)."""
    vectors = -(-nbytes // vector_bytes)
    return stream_work(name, vector_loop(vectors, load=1, store=1),
                       [Stream(start, nbytes, store=store)], line_bytes)

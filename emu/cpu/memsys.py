"""What the A55's memory system does with a work item's accesses, beyond the caches.

Two numba kernels around `emu.mem.cache`, both state machines over the access stream in
program order:

`streaming_stores` is the write-streaming detector. A store that fills a whole line (a
memset, a sequential copy) extends a run when its line follows the previous full-line
store's; from the `cpu.write_stream_lines`-th line of a run on, full-line stores go to memory
without a line fill (the cache model's `no_allocate`). Any partial store ends the run.

`classify` sorts the loads by what they cost the in-order core, given each access's
outcome in the caches. The data prefetcher trains on L1 misses per stream (the recorder's
stream id plays the part of the load instruction's address): a miss whose line is the
previous miss's plus the same non-zero stride, at most a page away, was fetched ahead of
time and costs no stall, whatever level served it. The record holds lines, so a constant
byte stride that is not a whole number of lines (400 B: 6.25 lines) shows as steps that
differ by one line; a step within one line of the previous one, in the same direction,
continues the stride. Other loads stall for the level that served them (L2, L3, or DDR: a
dependent load the core must wait for), and so does a read-modify-write (a load and then a
store of the same line, one access of the record). Stores that miss are counted but cost no
stall: the store buffer absorbs them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from emu.jit import njit

N_STREAMS = 256
"""Stream ids are uint8."""

TRAINING_MISSES = 2
"""Misses of a stream before `classify` covers its next ones: the first sets where the stream
is, the second its stride."""

L2_LOADS, L3_LOADS, DDR_LOADS, PREFETCHED_LOADS, STORE_MISSES = range(5)
N_COUNTS = 5


@njit
def streaming_stores(addrs: tuple[npt.NDArray[np.int64], int], is_write: npt.NDArray[np.bool_],
                     full_line: npt.NDArray[np.bool_], threshold: int,
                     out: npt.NDArray[np.bool_]) -> None:
    """Mark in `out` the stores that write-streaming sends to memory without a fill;
    `addrs` = (byte addresses, log2 of the line's bytes)."""
    byte_addrs, line_shift = addrs
    run = 0
    previous = np.int64(-2)
    for i in range(byte_addrs.size):
        out[i] = False
        if not is_write[i]:
            continue
        if not full_line[i]:
            run = 0
            continue
        line = byte_addrs[i] >> line_shift
        run = run + 1 if line == previous + 1 else 1
        previous = line
        out[i] = run >= threshold


@njit
def classify(addrs: tuple[npt.NDArray[np.int64], int], is_store: npt.NDArray[np.bool_],
             streams: npt.NDArray[np.uint8], outcomes: npt.NDArray[np.uint8],
             page_lines: int) -> npt.NDArray[np.int64]:
    """Counts of the loads by cost and of the store misses (indices above), of the accesses
    `addrs` = (byte addresses, log2 of the line's bytes). `is_store` marks the accesses that
    are stores only: a read-modify-write of a line counts as a load."""
    byte_addrs, line_shift = addrs
    counts = np.zeros(N_COUNTS, np.int64)
    last = np.full(N_STREAMS, -1, np.int64)
    stride = np.zeros(N_STREAMS, np.int64)
    for i in range(byte_addrs.size):
        outcome = outcomes[i]
        if is_store[i]:
            if 2 <= outcome <= 4:
                counts[STORE_MISSES] += 1
            continue
        if outcome == 1:
            continue
        s = streams[i]
        line = byte_addrs[i] >> line_shift
        step = line - last[s] if last[s] >= 0 else 0
        covered = (step != 0 and stride[s] != 0 and (step > 0) == (stride[s] > 0)
                   and abs(step - stride[s]) <= 1 and abs(step) <= page_lines)
        stride[s] = step
        last[s] = line
        if covered:
            counts[PREFETCHED_LOADS] += 1
        elif outcome == 2:
            counts[L2_LOADS] += 1
        elif outcome == 3:
            counts[L3_LOADS] += 1
        else:
            counts[DDR_LOADS] += 1
    return counts

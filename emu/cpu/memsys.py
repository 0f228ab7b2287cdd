"""What the A55's memory system does with a work item's accesses, beyond the caches.

Two state machines over the access stream in program order, around `emu.mem.cache`:

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

`run` is what a work item's accesses go through on a core: per access, in one
pass, the detector, the caches (`emu.mem.cache.access_line`), the classifier and the TLBs
(`emu.mem.tlb.translate`). Each is a state machine of its own, so running them access by
access gives what running each over the whole stream in turn gives, without the arrays
between the passes (fresh memory whose pages fault in: a few ms per million accesses).
It reads the accesses packed one row each, as the point-cloud kernels record them
(`pack` lays out separate arrays so): [byte address, flags], flags = WRITE | FULL_LINE |
LOADED | stream id << STREAM_SHIFT. `streaming_stores` and `classify` run the detector and
the classifier alone over separate arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from emu.jit import njit, njit_inline, njit_unmanaged
from emu.mem.cache import CacheHierarchy, access_line
from emu.mem.tlb import L2_HIT, WALK, CoreTlbs, Tlbs, translate
from emu.soc.config import CpuConfig

N_STREAMS = 256
"""Stream ids are uint8."""

TRAINING_MISSES = 2
"""Misses of a stream before `classify` covers its next ones: the first sets where the stream
is, the second its stride."""

L2_LOADS, L3_LOADS, DDR_LOADS, PREFETCHED_LOADS, STORE_MISSES = range(5)
N_COUNTS = 5

# `run`'s counts: the five above, then the accesses by cache outcome (index 4 +
# the outcome, 1 to 5), the DDR write-backs and the TLBs' L2 hits and walks.
L1_HITS, L2_HITS, L3_HITS, DDR_READS, STREAM_WRITES = range(5, 10)
DDR_WRITEBACKS, TLB_L2_HITS, TLB_WALKS = range(10, 13)
N_TOTALS = 13

# A packed access's flags (see the module docstring). LOADED: a store to a line the same
# instruction stream loaded first (a read-modify-write).
WRITE, FULL_LINE, LOADED = 1, 2, 4
STREAM_SHIFT = 8


def pack(addrs: npt.ArrayLike, is_write: npt.ArrayLike | None = None,
         full_line: npt.ArrayLike | None = None, loaded: npt.ArrayLike | None = None,
         streams: npt.ArrayLike | None = None) -> npt.NDArray[np.int64]:
    """Accesses given as separate arrays (missing flags: loads, partial stores, nothing
    loaded first, stream 0), packed as `run` reads them. Addresses must be
    non-negative integers; stream ids are taken modulo 256 (they are uint8)."""
    raw = np.asarray(addrs)
    if raw.size and (raw.dtype == np.bool_ or not np.issubdtype(raw.dtype, np.integer)):
        raise TypeError(f"addrs: expected integer addresses, got dtype {raw.dtype}")
    byte_addrs = raw.reshape(-1).astype(np.int64)
    if byte_addrs.size and int(raw.min()) < 0:
        raise ValueError(f"addrs: addresses must not be negative, got {int(raw.min())}")
    out = np.empty((byte_addrs.size, 2), np.int64)
    out[:, 0] = byte_addrs
    flags = out[:, 1]
    flags[:] = 0
    for array, bit in ((is_write, WRITE), (full_line, FULL_LINE), (loaded, LOADED)):
        if array is not None:
            flags |= np.asarray(array, np.bool_).reshape(-1) * np.int64(bit)
    if streams is not None:
        flags |= np.asarray(streams).reshape(-1).astype(np.uint8).astype(np.int64) << STREAM_SHIFT
    return out


@njit_inline
def _detect(run: int, previous: int, line: int, write: bool, full: bool,
            threshold: int) -> tuple[bool, int, int]:
    """One access through the write-streaming detector: (whether it streams, the run's
    length and its last line after it)."""
    if not write:
        return False, run, previous
    if not full:
        return False, 0, previous
    run = run + 1 if line == previous + 1 else 1
    return run >= threshold, run, line


@njit_inline
def _load_class(line: int, is_store: bool, stream: int, outcome: int,
                prefetcher: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
                page_lines: int) -> int:
    """The count one access adds to (indices above), or -1 for none; trains the prefetcher
    = (each stream's last missed line, its last step)."""
    if is_store:
        return STORE_MISSES if 2 <= outcome <= 4 else -1
    if outcome == 1:
        return -1
    last, stride = prefetcher
    step = line - last[stream] if last[stream] >= 0 else 0
    covered = (step != 0 and stride[stream] != 0 and (step > 0) == (stride[stream] > 0)
               and abs(step - stride[stream]) <= 1 and abs(step) <= page_lines)
    stride[stream] = step
    last[stream] = line
    if covered:
        return PREFETCHED_LOADS
    if outcome == 2:
        return L2_LOADS
    if outcome == 3:
        return L3_LOADS
    return DDR_LOADS




@njit
def streaming_stores(addrs: tuple[npt.NDArray[np.int64], int], is_write: npt.NDArray[np.bool_],
                     full_line: npt.NDArray[np.bool_], threshold: int,
                     out: npt.NDArray[np.bool_]) -> None:
    """Mark in `out` the stores that write-streaming sends to memory without a fill;
    `addrs` = (byte addresses, log2 of the line's bytes)."""
    byte_addrs, line_shift = addrs
    run = 0
    previous = -2  # no line: the first full-line store starts a run
    for i in range(byte_addrs.size):
        out[i], run, previous = _detect(run, previous, byte_addrs[i] >> line_shift,
                                        is_write[i], full_line[i], threshold)


@njit
def classify(addrs: tuple[npt.NDArray[np.int64], int], is_store: npt.NDArray[np.bool_],
             streams: npt.NDArray[np.uint8], outcomes: npt.NDArray[np.uint8],
             page_lines: int) -> npt.NDArray[np.int64]:
    """Counts of the loads by cost and of the store misses (indices above), of the accesses
    `addrs` = (byte addresses, log2 of the line's bytes). `is_store` marks the accesses that
    are stores only: a read-modify-write of a line counts as a load."""
    byte_addrs, line_shift = addrs
    counts = np.zeros(N_COUNTS, np.int64)
    prefetcher = (np.full(N_STREAMS, -1, np.int64), np.zeros(N_STREAMS, np.int64))
    for i in range(byte_addrs.size):
        kind = _load_class(byte_addrs[i] >> line_shift, is_store[i], streams[i], outcomes[i],
                           prefetcher, page_lines)
        if kind >= 0:
            counts[kind] += 1
    return counts


def run(record: npt.NDArray[np.int64], core: int, caches: CacheHierarchy, tlbs: Tlbs,
        cpu: CpuConfig) -> npt.NDArray[np.int64]:
    """Run the packed accesses `record` of `core` through the memory system (`caches` and
    `tlbs` keep their state, the TLBs' clock included); return the counts (indices above)."""
    if not 0 <= core < cpu.cores:
        raise ValueError(f"core: {core} is not a core of this {cpu.cores}-core cluster")
    counts = np.zeros(N_TOTALS, np.int64)
    prefetcher = (np.full(N_STREAMS, -1, np.int64), np.zeros(N_STREAMS, np.int64))
    tlbs.clock = _run_accesses(
        np.ascontiguousarray(record, np.int64), core, caches.kernel_levels(),
        tlbs.core_tlbs(core), tlbs.clock,
        (cpu.line_bytes.bit_length() - 1, cpu.write_stream_lines, tlbs.page_shift,
         cpu.tlb.page_bytes // cpu.line_bytes), (counts, prefetcher))
    return counts


@njit_unmanaged
def _run_accesses(record: npt.NDArray[np.int64], core: int, caches: tuple[Any, Any, Any],
                  tlb: CoreTlbs, tlb_clock: int, policy: tuple[int, int, int, int],
                  out: tuple[npt.NDArray[np.int64],
                             tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]],
                  ) -> int:
    """The packed accesses `record` (module docstring) of `core`, in order, through the
    write-streaming detector, the caches `caches` (`CacheHierarchy.kernel_levels`), the
    classifier and the core's TLBs `tlb` (`Tlbs.core_tlbs`), whose LRU clock is `tlb_clock`;
    `policy` = (log2 of the line's bytes, `cpu.write_stream_lines`, log2
    of the page's bytes, lines a page); `out` = (the counts, zeros before; the prefetcher's
    state, as `classify` starts it). Returns the TLBs' advanced clock."""
    counts, prefetcher = out
    line_shift, threshold, page_shift, page_lines = policy
    run = 0
    previous = -2  # no line: the first full-line store starts a run
    way = -1
    for i in range(record.shape[0]):
        addr = record[i, 0]
        flags = record[i, 1]
        line = addr >> line_shift
        write = (flags & WRITE) != 0
        streams, run, previous = _detect(run, previous, line, write, (flags & FULL_LINE) != 0,
                                         threshold)
        outcome, written = access_line(caches, core, line, write, streams)
        counts[4 + outcome] += 1
        counts[DDR_WRITEBACKS] += written
        kind = _load_class(line, write and (flags & LOADED) == 0,
                           (flags >> STREAM_SHIFT) & (N_STREAMS - 1), outcome, prefetcher,
                           page_lines)
        if kind >= 0:
            counts[kind] += 1
        level, way, tlb_clock = translate(addr >> page_shift, tlb, way, tlb_clock)
        if level == L2_HIT:
            counts[TLB_L2_HITS] += 1
        elif level == WALK:
            counts[TLB_WALKS] += 1
    return tlb_clock

"""What CPU work costs: cycles from op counts and cache-model stalls, DDR from its misses.

Pure functions, no simulation: the cluster in `emu.cpu.cluster` calls them and yields the
result. An A55 is in order, so the cost of a work item is the issue time of its ops, the
divider time of its float divisions, and the stall cycles of loads served beyond L1 (from
`CacheHierarchy.stall_cycles`); the line fills and write-backs that reach DDR are charged by
the DDR model, with the fill latency overlapped `cpu.miss_overlap` misses at a time.

Cache maintenance (hbSysFlushMem) is CPU work too: one maintenance instruction per line of
the range, each `cpu.cache_op_cycles`, after a fixed `cpu.flush_call_cycles` (the system
call and its barriers). What it writes back is DDR traffic like any other, and the barrier
at its end waits for the last write to land (one DDR latency).
"""

from __future__ import annotations

from emu.soc.clock import ceil_div
from emu.soc.config import CpuConfig


def compute_cycles(ops: int, fdivs: int, stall_cycles: int, cpu: CpuConfig) -> int:
    """Core cycles of a work item, excluding the time its DDR traffic takes."""
    if min(ops, fdivs, stall_cycles) < 0:
        raise ValueError(f"negative counts: {ops=}, {fdivs=}, {stall_cycles=}")
    return ceil_div(ops, cpu.issue_width) + fdivs * cpu.fdiv_cycles + stall_cycles


def miss_latency_ps(ddr_reads: int, cpu: CpuConfig, ddr_latency_ps: int) -> int:
    """Latency exposed by line fills from DDR, `miss_overlap` of them in flight at once."""
    return ceil_div(ddr_reads, cpu.miss_overlap) * ddr_latency_ps


def lines_in_range(start: int, nbytes: int, line_bytes: int) -> int:
    """Cache lines that overlap `[start, start + nbytes)`."""
    if start < 0 or nbytes < 0:
        raise ValueError(f"negative range: {start=}, {nbytes=}")
    if nbytes == 0:
        return 0
    return (start + nbytes - 1) // line_bytes - start // line_bytes + 1


def maintenance_cycles(lines: int, cpu: CpuConfig) -> int:
    """Core cycles of one hbSysFlushMem over `lines` lines: the call, then one op per line."""
    if lines < 0:
        raise ValueError(f"negative line count: {lines=}")
    return cpu.flush_call_cycles + lines * cpu.cache_op_cycles


def write_back_latency_ps(lines_written: int, ddr_latency_ps: int) -> int:
    """Latency a maintenance barrier waits for its write-backs: the last one's, if any."""
    return ddr_latency_ps if lines_written else 0

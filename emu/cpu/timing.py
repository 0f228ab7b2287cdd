"""What CPU work costs: cycles from instruction classes, memory events and the DDR.

Pure functions, no simulation: the cluster in `emu.cpu.cluster` calls them and yields the
result. An A55 is in order and dual-issue:

- Issue. A work item's instructions need at least `total / issue_width` cycles, and each
  class at least its count over the pipelines that execute it (integer ALU, load, store,
  FP, branch); the busiest constraint sets the pace. A mispredicted branch costs
  `mispredict_cycles`; a division stalls for `fdiv_cycles` (less the issue slot it takes);
  a write of the FP control register costs `fpcr_write_cycles`.
- Memory (`emu.cpu.memsys` says which access did what). A load that hits L2 or L3 stalls
  for that level's latency; a load that misses to DDR and that the prefetcher did not cover
  stalls for the L3 lookup and then the DDR latency, one miss after the other (the in-order
  core waits for each dependent load). Loads the prefetcher covered cost no stall, and store
  misses none either (the store buffer absorbs them); their lines still move through the
  DDR. A TLB miss stalls for the L2 TLB or a table walk.
- Cache maintenance (hbSysFlushMem): one maintenance instruction per line of the range,
  each `cpu.cache_op_cycles`, after a fixed `cpu.flush_call_cycles` (the system call and its
  barriers). What it writes back is DDR traffic like any other, and the barrier at its end
  waits for the last write to land (one DDR latency).
- The cluster charges a work item's cycles, then its DDR traffic as one transfer (the
  latency the core waits for, then the bytes at the lesser of `cpu.ddr_port_bytes_per_s`
  and the DDR's share), so the two add up.

`cold_pass_ps` and `maintenance_ps` are the same charges without a simulation, for the
static estimate (`emu.nn.estimate`): a work item that streams once through its tensors,
alone on the DDR. Each tensor is one access stream of whole lines: a read stream's first
`memsys.TRAINING_MISSES` misses are demand loads (the prefetcher covers the rest), from
DDR, or from the L3 for a tensor the L3 still holds; every page a stream touches costs a
table walk (an L2 TLB hit for a held tensor), and every line it reads or writes crosses
the DDR once unless held (full-line stores stream to memory without a fill).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from emu.cpu import memsys
from emu.cpu import ops as op
from emu.mem.ddr import solo_transfer_ps
from emu.soc.clock import Clock, ceil_div
from emu.soc.config import CpuConfig, DdrConfig


def issue_cycles(counts: npt.NDArray[np.int64], cpu: CpuConfig) -> int:
    """Core cycles of a work item's instructions, before any memory stall."""
    c = [int(v) for v in counts]
    if len(c) != op.N_CLASSES or min(c) < 0:
        raise ValueError(f"instruction counts: expected {op.N_CLASSES} counts >= 0, got {c}")
    if c[op.MISPREDICT] > c[op.BRANCH]:
        raise ValueError(f"{c[op.MISPREDICT]} mispredicts of {c[op.BRANCH]} branches")
    instructions = sum(c) - c[op.MISPREDICT]
    pace = max(
        ceil_div(instructions, cpu.issue_width),
        ceil_div(c[op.INT], cpu.alu_pipes),
        ceil_div(c[op.LOAD], cpu.load_pipes),
        ceil_div(c[op.STORE], cpu.store_pipes),
        ceil_div(c[op.FP] + c[op.FCVT] + c[op.FDIV], cpu.fp_pipes),
        ceil_div(c[op.BRANCH], cpu.branch_pipes),
    )
    return (pace + c[op.MISPREDICT] * cpu.mispredict_cycles
            + c[op.FDIV] * (cpu.fdiv_cycles - 1) + c[op.FPCR] * cpu.fpcr_write_cycles)


def memory_stall_cycles(l2_loads: int, l3_loads: int, ddr_loads: int, tlb_l2_hits: int,
                        tlb_walks: int, cpu: CpuConfig) -> int:
    """Core cycles loads wait on the caches and the TLBs (the DDR latency is separate)."""
    if min(l2_loads, l3_loads, ddr_loads, tlb_l2_hits, tlb_walks) < 0:
        raise ValueError("negative memory event counts")
    return (l2_loads * cpu.l2.hit_latency_cycles
            + (l3_loads + ddr_loads) * cpu.l3.hit_latency_cycles
            + tlb_l2_hits * cpu.tlb.l2_hit_cycles + tlb_walks * cpu.tlb.walk_cycles)


def ddr_latency_ps(ddr_loads: int, ddr_latency: int) -> int:
    """Latency the core waits for demand loads from DDR: each one's, in turn."""
    if ddr_loads < 0:
        raise ValueError(f"negative count: {ddr_loads=}")
    return ddr_loads * ddr_latency


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


def write_back_latency_ps(lines_written: int, ddr_latency: int) -> int:
    """Latency a maintenance barrier waits for its write-backs: the last one's, if any."""
    return ddr_latency if lines_written else 0


def cold_pass_ps(counts: npt.NDArray[np.int64], reads: Sequence[int], writes: Sequence[int],
                 cpu: CpuConfig, ddr: DdrConfig, warm: Sequence[int] = ()) -> tuple[int, int]:
    """(core time, DDR time) of a work item of instruction `counts` that streams once through
    tensors of `reads` and `writes` bytes, each starting on a page, alone on the DDR (see
    the module docstring): `reads` no cache holds, `warm` reads of tensors the L3 holds
    (their misses stall for the L3, their pages are in the L2 TLB, no DDR)."""
    line = cpu.line_bytes
    page_lines = max(cpu.tlb.page_bytes // line, 1)

    def lines(nbytes: int) -> int:
        return ceil_div(nbytes, line)

    def misses(streams: Sequence[int]) -> int:
        return sum(min(lines(n), memsys.TRAINING_MISSES) for n in streams)

    def pages(streams: Sequence[int]) -> int:
        return sum(ceil_div(lines(n), page_lines) for n in streams)

    demand = misses(reads)
    cycles = issue_cycles(counts, cpu) + memory_stall_cycles(
        0, misses(warm), demand, pages(warm), pages([*reads, *writes]), cpu)
    moved = sum(lines(n) for n in (*reads, *writes)) * line
    return (Clock("cpu", cpu.freq_hz).cycles_to_ps(cycles),
            solo_transfer_ps(moved, ddr, cpu.ddr_port_bytes_per_s,
                             ddr_latency_ps(demand, ddr.latency_ps)))


def maintenance_ps(lines: int, lines_written: int, cpu: CpuConfig,
                   ddr: DdrConfig) -> tuple[int, int]:
    """(core time, DDR time) of one hbSysFlushMem over `lines` lines of which `lines_written`
    are written back, alone on the DDR."""
    return (Clock("cpu", cpu.freq_hz).cycles_to_ps(maintenance_cycles(lines, cpu)),
            solo_transfer_ps(lines_written * cpu.line_bytes, ddr, cpu.ddr_port_bytes_per_s,
                             write_back_latency_ps(lines_written, ddr.latency_ps)))

"""What vector work costs on a vDSP core, in cycles, from the work it did.

A Vision-P6-style core issues one VLIW bundle per cycle. A bundle holds at most
`vliw_slots` operations, of which at most `loads_per_bundle` vector memory operations
(two loads, or one load and one store) and `stores_per_bundle` stores. Gather address ops
take a load's place, scatters a store's. A software-pipelined kernel loop therefore needs at
least as many bundles as its busiest constraint demands.

Beside the slots, the gather/scatter unit fetches the lanes of each op from the TCM
sub-banks: lanes in one sub-bank are served one word per access, so an op costs its
conflict depth (the most distinct words any one sub-bank must serve) times
`gather_access_cycles`. The unit runs in parallel with the slots; the slower of the two
sets the loop's pace. Float division is not pipelined: each vector division stalls issue for
`fdiv_cycles` (less the one cycle its slot accounts for) — which is why replacing a division
by a multiplication with a precomputed reciprocal is a real optimisation.

The TCM bank a kernel works on serves one access of `tcm.access_bytes` per cycle; iDMA
traffic into or out of that bank while the kernel runs takes accesses from it, and each
costs the kernel one memory cycle (at most one per memory op it issues).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from emu.soc.clock import ceil_div
from emu.soc.config import VdspConfig
from emu.vdsp import isa


def bundle_cycles(loads: int, stores: int, alu_ops: int, vdsp: VdspConfig) -> int:
    """Fewest bundles that issue `loads` + `stores` + `alu_ops` vector operations."""
    if min(loads, stores, alu_ops) < 0:
        raise ValueError(f"negative op counts: {loads=}, {stores=}, {alu_ops=}")
    return max(
        ceil_div(loads + stores, vdsp.loads_per_bundle),
        ceil_div(stores, vdsp.stores_per_bundle),
        ceil_div(loads + stores + alu_ops, vdsp.vliw_slots),
    )


@dataclass(frozen=True)
class KernelCycles:
    """The cycles of one kernel call and what set them."""

    bundles: int
    gather_cycles: int
    fdiv_stall_cycles: int
    call_cycles: int
    memory_ops: int
    earlier_cycles: int = 0
    """Cycles of kernels the same tile ran before this one (see `then`)."""

    @property
    def total(self) -> int:
        return (self.earlier_cycles + self.call_cycles + max(self.bundles, self.gather_cycles)
                + self.fdiv_stall_cycles)

    def then(self, later: KernelCycles) -> KernelCycles:
        """This kernel call followed by `later` on the same tile: the cycles add up; what
        bounds the result is what bounds `later`."""
        return replace(later, earlier_cycles=self.total + later.earlier_cycles,
                       memory_ops=self.memory_ops + later.memory_ops)

    @property
    def bound(self) -> str:
        """What limits the loop: 'slots' or 'gather'."""
        return "gather" if self.gather_cycles > self.bundles else "slots"


def bank_conflict_cycles(dma_bytes: int, memory_ops: int, vdsp: VdspConfig) -> int:
    """Cycles a kernel with `memory_ops` vector memory ops loses to `dma_bytes` of iDMA
    traffic in its own TCM bank."""
    if min(dma_bytes, memory_ops) < 0:
        raise ValueError(f"negative counts: {dma_bytes=}, {memory_ops=}")
    return min(ceil_div(dma_bytes, vdsp.tcm.access_bytes), memory_ops)


def table_fill_cycles(entries: int, tables: int, vdsp: VdspConfig) -> int:
    """Cycles of the scalar set-up code that writes `tables` tables of `entries` 32-bit words
    into TCM: per vector of words, one op to assemble it and one store."""
    if min(entries, tables) < 0:
        raise ValueError(f"negative counts: {entries=}, {tables=}")
    vectors = tables * ceil_div(entries, isa.VECTOR_BYTES // 4)
    return bundle_cycles(0, vectors, vectors, vdsp)


def kernel_cycles(counters: npt.NDArray[np.int64], vdsp: VdspConfig) -> KernelCycles:
    """Cycles of a kernel call from the ISA emulation's op counters."""
    c = counters.tolist()  # Python ints
    loads = c[isa.C_LOAD] + c[isa.C_GATHER_A]
    stores = c[isa.C_STORE] + c[isa.C_SCATTER]
    alu = c[isa.C_ALU] + c[isa.C_MUL] + c[isa.C_CVT] + c[isa.C_GATHER_D] + c[isa.C_FDIV]
    conflicts = c[isa.C_GATHER_CONFLICT] + c[isa.C_SCATTER_CONFLICT]
    return KernelCycles(
        bundles=bundle_cycles(loads, stores, alu, vdsp),
        gather_cycles=conflicts * vdsp.gather_access_cycles,
        fdiv_stall_cycles=c[isa.C_FDIV] * (vdsp.fdiv_cycles - 1),
        call_cycles=vdsp.kernel_call_cycles,
        memory_ops=loads + stores,
    )

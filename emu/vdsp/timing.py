"""What vector work costs on a vDSP core, in cycles, from the work it did.

A Vision-P6-style core issues one VLIW bundle per cycle. A bundle holds at most
`vliw_slots` operations, of which at most `loads_per_bundle` vector loads and
`stores_per_bundle` vector stores. A stretch of straight-line vector work therefore needs
at least as many bundles as its busiest constraint demands.
"""

from __future__ import annotations

from emu.soc.clock import ceil_div
from emu.soc.config import VdspConfig


def bundle_cycles(loads: int, stores: int, alu_ops: int, vdsp: VdspConfig) -> int:
    """Fewest bundles that issue `loads` + `stores` + `alu_ops` vector operations."""
    if min(loads, stores, alu_ops) < 0:
        raise ValueError(f"negative op counts: {loads=}, {stores=}, {alu_ops=}")
    return max(
        ceil_div(loads, vdsp.loads_per_bundle),
        ceil_div(stores, vdsp.stores_per_bundle),
        ceil_div(loads + stores + alu_ops, vdsp.vliw_slots),
    )

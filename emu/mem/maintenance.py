"""What CPU cache maintenance on a pool buffer costs (hbSysFlushMem).

Only the CPU has caches. Before an accelerator reads a buffer the CPU wrote, the CPU must
clean it (write dirty lines back); before the CPU reads what an accelerator wrote, it must
invalidate it. Uncached buffers need neither. The cost is a fixed call cost plus a walk
over the buffer at the configured rate.
"""

from __future__ import annotations

from emu.soc.clock import bytes_to_ps
from emu.soc.config import MemConfig


def clean_ps(nbytes: int, mem: MemConfig) -> int:
    return mem.maintenance_call_ps + bytes_to_ps(nbytes, mem.clean_bytes_per_s)


def invalidate_ps(nbytes: int, mem: MemConfig) -> int:
    return mem.maintenance_call_ps + bytes_to_ps(nbytes, mem.invalidate_bytes_per_s)

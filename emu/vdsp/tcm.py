"""The local data RAM (TCM) of one vDSP core: its bytes and an allocator per bank.

The core has `vdsp.tcm.banks` banks of `bank_bytes`, laid out back to back in one byte
array that the ISA emulation reads and writes. The start of every bank is taken by runtime
and tile-manager metadata (`reserved_bytes`); operators allocate tile buffers from the rest,
per bank, aligned to one vector (`isa.VECTOR_BYTES`, as aligned vector loads need). A tile
that does not fit raises `DspError` naming the bank and the free space, which fails the RPC
task that asked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from emu.errors import DspError, PoolError
from emu.mem.pool import CmaPool, PoolBuffer
from emu.soc.component import Component
from emu.soc.config import TcmConfig
from emu.vdsp.isa import VECTOR_BYTES as VECTOR_ALIGN_BYTES


@dataclass(frozen=True)
class TcmBuffer:
    """A buffer in TCM: `offset` is its byte address in the core's TCM array."""

    bank: int
    offset: int
    size_bytes: int
    label: str
    handle: PoolBuffer


class Tcm(Component):
    """All TCM banks of one core."""

    def __init__(self, parent: Component, cfg: TcmConfig, data: npt.NDArray[np.uint8]) -> None:
        super().__init__("tcm", parent)
        if len(data) != cfg.banks * cfg.bank_bytes:
            raise ValueError(f"{self.path}: {len(data)} B of storage for "
                             f"{cfg.banks} banks of {cfg.bank_bytes} B")
        self.cfg = cfg
        self.data = data
        # Metadata sits at the start of each bank; buffers start at the next vector boundary.
        first_free = -(-cfg.reserved_bytes // VECTOR_ALIGN_BYTES) * VECTOR_ALIGN_BYTES
        usable = (cfg.bank_bytes - first_free) // VECTOR_ALIGN_BYTES * VECTOR_ALIGN_BYTES
        if usable <= 0:
            raise DspError(f"{self.path}: no usable bytes left after the reserved metadata")
        self.usable_bytes = usable
        self._banks = [
            CmaPool(usable, VECTOR_ALIGN_BYTES, base_addr=self.bank_base(k) + first_free)
            for k in range(cfg.banks)
        ]

    def bank_base(self, bank: int) -> int:
        return bank * self.cfg.bank_bytes

    def alloc(self, bank: int, size_bytes: int, label: str) -> TcmBuffer:
        """A vector-aligned buffer of `size_bytes` in `bank`, or DspError if it does not fit."""
        if not 0 <= bank < self.cfg.banks:
            raise DspError(f"{self.path}: no TCM bank {bank} (banks 0..{self.cfg.banks - 1})")
        try:
            handle = self._banks[bank].alloc(size_bytes, cached=False, label=label)
        except PoolError as exc:
            raise DspError(f"{self.path}.bank{bank}: tile buffer {label!r} does not fit: "
                           f"{exc}") from None
        self.record_max(f"bank{bank}_high_water_bytes", self._banks[bank].used_bytes)
        return TcmBuffer(bank, handle.phys_addr, size_bytes, label, handle)

    def free(self, buf: TcmBuffer) -> None:
        self._banks[buf.bank].free(buf.handle)

    def free_bytes(self, bank: int) -> int:
        return self._banks[bank].free_bytes

    def bank_of(self, offset: int) -> int:
        return offset // self.cfg.bank_bytes

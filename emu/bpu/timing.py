"""What a network layer costs on a BPU core: MAC cycles and the DDR bytes it must move.

A layer's weights always come from DDR. Its input and output activations stay in the
core's on-chip SRAM when both fit there together with the weights; otherwise they spill
to DDR and are read and written there. Compute and DDR traffic overlap (the core streams
weights while it computes), so the scheduler runs the two side by side and the slower one
sets the layer's time.
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.soc.clock import ceil_div
from emu.soc.config import BpuConfig


@dataclass(frozen=True)
class Layer:
    """One layer of a compiled model: its work and its tensors' sizes."""

    name: str
    macs: int
    weight_bytes: int
    input_bytes: int
    output_bytes: int

    def __post_init__(self) -> None:
        for label in ("macs", "weight_bytes", "input_bytes", "output_bytes"):
            if getattr(self, label) < 0:
                raise ValueError(f"layer {self.name}: {label} must not be negative")


def compute_cycles(layer: Layer, bpu: BpuConfig) -> int:
    return ceil_div(layer.macs, bpu.macs_per_cycle)


def ddr_bytes(layer: Layer, bpu: BpuConfig) -> tuple[int, int]:
    """(bytes read, bytes written) in DDR for one layer."""
    on_chip = layer.weight_bytes + layer.input_bytes + layer.output_bytes
    if on_chip <= bpu.sram_bytes:
        return layer.weight_bytes, 0
    return layer.weight_bytes + layer.input_bytes, layer.output_bytes

"""The DV700's cost model: pure functions of a command's geometry and the `dv` configuration.

A conv command is up to 32 runs executed one after another in the convolution block; an FC
command is one matrix-vector product in the fully connected block. Per run:

- compute: the multiply-accumulates after the device's channel blocking (input and output
  channels padded to `dv.channel_block`; a depthwise run reduces over one channel) times
  the kernel taps for every output of the convolution (a deconvolution convolves its
  zero-inserted input, so it does every tap of every output, zeros included), plus one
  operation per pooled input of the pooling window, over `dv.conv_macs` x `dv.conv_freq_hz`
  x `dv.efficiency_conv`; an FC command's input x output over `dv.fc_macs` x
  `dv.fc_freq_hz` x `dv.efficiency_fc`;
- DDR: the command's input is read once (by the first run), each run reads its packed
  weights, a run whose output goes to external memory (`topo` bit 1) writes it; a run whose
  input and output do not fit in the unified buffer (`dv.ub_bytes`) together is tiled and
  streams both through DDR (a deconvolution's input counts unexpanded: DMP's kernel driver
  sizes the unified buffer's input tiles from it). Tensors count in the device's FP16
  layout (`emu/dv/layout.py`);
- time: the run's fixed cost (`dv.run_overhead_cycles` at its block's clock), then compute and
  DDR side by side at the device's port (`dv.ddr_port_bytes_per_s`), through the shared DDR.

A command list adds `dv.kick_ps` before its first command and `dv.wake_ps` after its last:
what `dmp_dv_cmdlist_get_last_exec_time` reports is kick to the wait's return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from emu.soc.clock import PS_PER_S
from emu.soc.config import DvConfig

FP16_BYTES = 2


@dataclass(frozen=True)
class RunShape:
    """What timing needs of one conv run."""

    in_c: int
    in_h: int
    in_w: int
    out_c: int
    out_h: int
    out_w: int
    kernel: tuple[int, int] = (1, 1)  # (kx, ky); (1, 1) without convolution
    conv: bool = True
    depthwise: bool = False  # conv_enable 3 or 7
    pool_window: tuple[int, int] = (1, 1)  # (px, py) of max/average pooling; (1, 1): none
    weight_bytes: int = 0
    reads_input: bool = False  # the command's input comes from DDR in this run
    to_external: bool = True
    input_element_bytes: int = FP16_BYTES  # 1 for a conv v1 command's 8-bit input


@dataclass(frozen=True)
class Cost:
    """One run or FC command: its fixed cost, compute time and DDR traffic."""

    fixed_ps: int
    compute_ps: int
    ddr_bytes: int
    written_bytes: int


def blocked(channels: int, cfg: DvConfig) -> int:
    """Channels padded to the device's channel block."""
    return math.ceil(channels / cfg.channel_block) * cfg.channel_block


def tensor_bytes(c: int, h: int, w: int) -> int:
    """A (C, H, W) FP16 tensor in the device's layout (`emu/dv/layout.py`: unpadded)."""
    return c * h * w * FP16_BYTES


def _ps(operations: float, per_cycle: float, freq_hz: float, efficiency: float) -> int:
    return math.ceil(operations * PS_PER_S / (per_cycle * freq_hz * efficiency))


def run_cost(run: RunShape, cfg: DvConfig) -> Cost:
    kx, ky = run.kernel
    px, py = run.pool_window
    ops = 0
    if run.conv:
        depth = 1 if run.depthwise else blocked(run.in_c, cfg)
        # before pooling, the convolution's output is pooled down by the window's stride;
        # the MACs are counted on the convolution's own output (out x pool window)
        conv_hw = run.out_h * run.out_w * px * py
        ops += conv_hw * blocked(run.out_c, cfg) * depth * kx * ky
    if (px, py) != (1, 1):
        ops += run.out_h * run.out_w * blocked(run.out_c, cfg) * px * py
    compute = _ps(ops, cfg.conv_macs, cfg.conv_freq_hz, cfg.efficiency_conv) if ops else 0
    in_bytes = tensor_bytes(run.in_c, run.in_h, run.in_w)
    out_bytes = tensor_bytes(run.out_c, run.out_h, run.out_w)
    tiled = in_bytes + out_bytes > cfg.ub_bytes
    loaded = in_bytes * run.input_element_bytes // FP16_BYTES if run.reads_input else in_bytes
    read = run.weight_bytes + (loaded if run.reads_input or tiled else 0)
    written = out_bytes if run.to_external or tiled else 0
    fixed = math.ceil(cfg.run_overhead_cycles * PS_PER_S / cfg.conv_freq_hz)
    return Cost(fixed, compute, read + written, written)


def fc_cost(input_size: int, output_size: int, weight_bytes: int, cfg: DvConfig) -> Cost:
    ops = input_size * output_size
    compute = _ps(ops, cfg.fc_macs, cfg.fc_freq_hz, cfg.efficiency_fc)
    written = output_size * FP16_BYTES
    read = weight_bytes + input_size * FP16_BYTES
    fixed = math.ceil(cfg.run_overhead_cycles * PS_PER_S / cfg.fc_freq_hz)
    return Cost(fixed, compute, read + written, written)

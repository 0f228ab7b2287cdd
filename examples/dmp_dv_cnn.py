"""A C-style dmp_dv program: a tiny CNN on DMP's DV700, written against the driver's API.

The network (seeded weights, input 3x14x14):

    conv 3x3, 16 channels, pad 1 + ReLU + max pool 2x2 stride 2   -> 16x7x7
    depthwise conv 3x3, pad 1 + ReLU                              -> 16x7x7
    conv 1x1, 32 channels + ReLU + global average pool (7x7)      -> 32x1x1
    fully connected, 10 outputs                                   -> 10

The three convolution layers are the three runs of ONE conv command: the first two keep
their outputs in the unified buffer (their topo bits are 0) and the next run reads them
from there; the third writes to external memory (topo bit 2). The FC layer is a second
command. As a board program does it: create the context, read its information, allocate
and map device memory, pack the weights with the driver's packers (a size query first),
write them and the input between sync_start(wr) and sync_end, fill the raw command
structures field by field, add them to a command list, commit, exec, wait, bring the
output to the CPU with sync_start(rd), print it and the exec time, release everything.

    python examples/dmp_dv_cnn.py [--seed S]

The same seed gives the same output, byte for byte.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import emu
from emu.dv.layout import from_device, tensor_bytes, to_device
from emu.runtime.dmp_dv import (
    dmp_dv_buf,
    dmp_dv_cmdlist_add_raw,
    dmp_dv_cmdlist_commit,
    dmp_dv_cmdlist_create,
    dmp_dv_cmdlist_exec,
    dmp_dv_cmdlist_get_last_exec_time,
    dmp_dv_cmdlist_release,
    dmp_dv_cmdlist_wait,
    dmp_dv_cmdraw_conv_v0,
    dmp_dv_cmdraw_fc_v0,
    dmp_dv_context_create,
    dmp_dv_context_get_info,
    dmp_dv_context_get_info_string,
    dmp_dv_context_release,
    dmp_dv_get_last_error_message,
    dmp_dv_get_version_string,
    dmp_dv_info_v0,
    dmp_dv_mem_alloc,
    dmp_dv_mem_map,
    dmp_dv_mem_release,
    dmp_dv_mem_sync_end,
    dmp_dv_mem_sync_start,
    dmp_dv_mem_unmap,
    dmp_dv_pack_conv_weights,
    dmp_dv_pack_fc_weights,
)

C_IN, H, W = 3, 14, 14
C1, C3, N_OUT = 16, 32, 10


def check(rc: int, what: str) -> None:
    """Stop with the driver's message when a call fails (a C program's error path)."""
    if rc != 0:
        raise SystemExit(f"{what} failed ({rc}): {dmp_dv_get_last_error_message()}")


def fp16_bits(value: float) -> int:
    """The FP16 bit pattern of `value` (the command fields that hold FP16 numbers)."""
    return int(np.array([value], np.float16).view(np.uint16)[0])


def pack_conv(n_channels: int, k: int, n_kernels: int, weights: np.ndarray,
              bias: np.ndarray, packed: np.ndarray, offset: int) -> int:
    """Pack one convolution's weights at `offset` of the mapped weight memory; its size."""
    w_bits, b_bits = weights.view(np.uint16), bias.view(np.uint16)
    rc, size = dmp_dv_pack_conv_weights(n_channels, k, k, n_kernels, None, w_bits, b_bits,
                                        None, None, 0)  # no PReLU; the size query
    check(rc, "dmp_dv_pack_conv_weights (size)")
    rc, written = dmp_dv_pack_conv_weights(n_channels, k, k, n_kernels, None, w_bits, b_bits,
                                           None, packed[offset:offset + size], size)
    check(rc, "dmp_dv_pack_conv_weights")
    print(f"  conv {n_kernels}x{n_channels}x{k}x{k}: {written} bytes at offset {offset}")
    return int(written)


def conv_size(n_channels: int, k: int, n_kernels: int) -> int:
    rc, size = dmp_dv_pack_conv_weights(n_channels, k, k, n_kernels, None,
                                        np.zeros(n_kernels * n_channels * k * k, np.uint16),
                                        np.zeros(n_kernels, np.uint16), None, None, 0)
    check(rc, "dmp_dv_pack_conv_weights (size)")
    return int(size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and input")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)

    def fp16(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float16)

    x = fp16(C_IN, H, W)
    w1, b1 = fp16(C1, C_IN, 3, 3, scale=0.3), fp16(C1, scale=0.1)
    w2, b2 = fp16(C1, 1, 3, 3, scale=0.3), fp16(C1, scale=0.1)  # depthwise: one per channel
    w3, b3 = fp16(C3, C1, 1, 1, scale=0.25), fp16(C3, scale=0.1)
    w4, b4 = fp16(N_OUT, C3, scale=0.2), fp16(N_OUT, scale=0.1)

    with emu.Session():
        # --- the context and what the device is -------------------------------------------
        print(f"dmp_dv version {dmp_dv_get_version_string()}")
        ctx = dmp_dv_context_create()
        if ctx is None:
            raise SystemExit(f"dmp_dv_context_create: {dmp_dv_get_last_error_message()}")
        print(dmp_dv_context_get_info_string(ctx))
        info = dmp_dv_info_v0()
        info.size, info.version = dmp_dv_info_v0.SIZE, 0
        check(dmp_dv_context_get_info(ctx, info), "dmp_dv_context_get_info")
        print(f"info v{info.version}: ub_size {info.ub_size}, max_kernel_size "
              f"{info.max_kernel_size}, conv_freq {info.conv_freq} MHz, fc_freq "
              f"{info.fc_freq} MHz, max_fc_vector_size {info.max_fc_vector_size}")

        # --- device memory -------------------------------------------------------------------
        sizes = [conv_size(C_IN, 3, C1), conv_size(1, 3, C1), conv_size(C1, 1, C3)]
        offsets = [0, sizes[0], sizes[0] + sizes[1]]  # each a multiple of 16: even offsets
        rc, fc_size = dmp_dv_pack_fc_weights(C3, 1, 1, N_OUT, 1, 1, None, w4.view(np.uint16),
                                             b4.view(np.uint16), None, 0)
        check(rc, "dmp_dv_pack_fc_weights (size)")
        io_in = dmp_dv_mem_alloc(ctx, tensor_bytes(C_IN, H, W))
        io_mid = dmp_dv_mem_alloc(ctx, tensor_bytes(C3, 1, 1))
        io_out = dmp_dv_mem_alloc(ctx, 2 * N_OUT)
        conv_w = dmp_dv_mem_alloc(ctx, sum(sizes))
        fc_w = dmp_dv_mem_alloc(ctx, fc_size)
        mems = [io_in, io_mid, io_out, conv_w, fc_w]
        if any(m is None for m in mems):
            raise SystemExit(f"dmp_dv_mem_alloc: {dmp_dv_get_last_error_message()}")
        in_map, out_map = dmp_dv_mem_map(io_in), dmp_dv_mem_map(io_out)
        conv_map, fc_map = dmp_dv_mem_map(conv_w), dmp_dv_mem_map(fc_w)
        dmp_dv_mem_map(io_mid)
        assert in_map is not None and out_map is not None
        assert conv_map is not None and fc_map is not None

        # --- weights and input, written to the device between sync_start(wr) and sync_end
        print("packing the weights (FP16):")
        check(dmp_dv_mem_sync_start(conv_w, 0, 1), "dmp_dv_mem_sync_start")
        pack_conv(C_IN, 3, C1, w1, b1, conv_map, offsets[0])
        pack_conv(1, 3, C1, w2, b2, conv_map, offsets[1])  # depthwise: n_channels = 1
        pack_conv(C1, 1, C3, w3, b3, conv_map, offsets[2])
        check(dmp_dv_mem_sync_end(conv_w), "dmp_dv_mem_sync_end")
        check(dmp_dv_mem_sync_start(fc_w, 0, 1), "dmp_dv_mem_sync_start")
        rc, written = dmp_dv_pack_fc_weights(C3, 1, 1, N_OUT, 1, 1, None, w4.view(np.uint16),
                                             b4.view(np.uint16), fc_map, fc_size)
        check(rc, "dmp_dv_pack_fc_weights")
        print(f"  fc {N_OUT}x{C3}: {written} bytes")
        check(dmp_dv_mem_sync_end(fc_w), "dmp_dv_mem_sync_end")
        check(dmp_dv_mem_sync_start(io_in, 0, 1), "dmp_dv_mem_sync_start")
        image = to_device(x)  # the WHC8 layout
        in_map[:image.size] = image
        check(dmp_dv_mem_sync_end(io_in), "dmp_dv_mem_sync_end")

        # --- the conv command: three runs ------------------------------------------------
        conv = dmp_dv_cmdraw_conv_v0()
        conv.input_buf = dmp_dv_buf(io_in, 0)
        conv.output_buf = dmp_dv_buf(io_mid, 0)
        conv.w, conv.h, conv.z, conv.c = W, H, 1, C_IN
        conv.topo = 0b100  # bit i: run i writes to external memory; runs 0, 1 stay in the UB
        conv.output_mode = 0

        run = conv.run[0]  # conv 3x3, 16 channels, pad 1, ReLU, max pool 2x2 stride 2
        run.weight_buf = dmp_dv_buf(conv_w, offsets[0])
        run.m = C1
        run.conv_enable = 1  # dense
        run.p = 3 | 3 << 8  # kernel width | height << 8
        run.pz = 1
        run.conv_pad = 1 | 1 << 8 | 1 << 16 | 1 << 24  # left | right | top | bottom
        run.conv_stride = 1 | 1 << 8  # x | y << 8
        run.conv_dilation = 1 | 1 << 8
        run.rectifi_en = 1  # ReLU
        run.pool_enable = 1  # max
        run.pool_size = 2 | 2 << 8
        run.pool_stride = 2 | 2 << 8
        run.pool_pad = 0

        run = conv.run[1]  # depthwise 3x3, pad 1, ReLU (reads run 0's output in the UB)
        run.weight_buf = dmp_dv_buf(conv_w, offsets[1])
        run.m = C1  # a depthwise run keeps its channels
        run.conv_enable = 3  # depthwise
        run.p = 3 | 3 << 8
        run.pz = 1
        run.conv_pad = 1 | 1 << 8 | 1 << 16 | 1 << 24
        run.conv_stride = 1 | 1 << 8
        run.conv_dilation = 1 | 1 << 8
        run.rectifi_en = 1

        run = conv.run[2]  # conv 1x1, 32 channels, ReLU, global average pool 7x7
        run.weight_buf = dmp_dv_buf(conv_w, offsets[2])
        run.m = C3
        run.conv_enable = 1
        run.p = 1 | 1 << 8
        run.pz = 1
        run.conv_pad = 0
        run.conv_stride = 1 | 1 << 8
        run.conv_dilation = 1 | 1 << 8
        run.rectifi_en = 1
        run.pool_enable = 2  # average: the sum of value * pool_avg_param
        run.pool_size = 7 | 7 << 8
        run.pool_stride = 1 | 1 << 8
        run.pool_avg_param = fp16_bits(1.0 / 49)  # FP16 bits of 1 / (w * h)
        # run[3].m stays 0: the runs end there

        # --- the FC command ----------------------------------------------------------------
        fc = dmp_dv_cmdraw_fc_v0()
        fc.weight_buf = dmp_dv_buf(fc_w, 0)
        fc.input_buf = dmp_dv_buf(io_mid, 0)  # 32x1x1 in WHC8 is the plain vector
        fc.output_buf = dmp_dv_buf(io_out, 0)
        fc.input_size = C3
        fc.output_size = N_OUT
        fc.weight_fmt = 0  # FP16 weights, no quantisation table
        fc.actfunc = 0  # none

        # --- the command list ----------------------------------------------------------------
        cmdlist = dmp_dv_cmdlist_create(ctx)
        if cmdlist is None:
            raise SystemExit(f"dmp_dv_cmdlist_create: {dmp_dv_get_last_error_message()}")
        check(dmp_dv_cmdlist_add_raw(cmdlist, conv), "dmp_dv_cmdlist_add_raw (conv)")
        check(dmp_dv_cmdlist_add_raw(cmdlist, fc), "dmp_dv_cmdlist_add_raw (fc)")
        check(dmp_dv_cmdlist_commit(cmdlist), "dmp_dv_cmdlist_commit")
        exec_id = dmp_dv_cmdlist_exec(cmdlist)
        if exec_id < 0:
            raise SystemExit(f"dmp_dv_cmdlist_exec: {dmp_dv_get_last_error_message()}")
        check(dmp_dv_cmdlist_wait(cmdlist, exec_id), "dmp_dv_cmdlist_wait")

        # --- the output, brought to the CPU --------------------------------------------------
        check(dmp_dv_mem_sync_start(io_out, 1, 0), "dmp_dv_mem_sync_start")
        scores = from_device(out_map, N_OUT, 1, 1).reshape(-1)
        check(dmp_dv_mem_sync_end(io_out), "dmp_dv_mem_sync_end")
        print("outputs:")
        for k, value in enumerate(scores):
            print(f"  [{k}] {float(value):+.5f} (0x{int(value.view(np.uint16)):04x})")
        print(f"dmp_dv_cmdlist_get_last_exec_time: {dmp_dv_cmdlist_get_last_exec_time(cmdlist)} us")

        # --- release everything ------------------------------------------------------------
        dmp_dv_cmdlist_release(cmdlist)
        for mem in mems:
            dmp_dv_mem_unmap(mem)
            dmp_dv_mem_release(mem)
        dmp_dv_context_release(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())

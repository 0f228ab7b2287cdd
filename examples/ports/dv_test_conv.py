"""Port of DMP's `tests/test_conv` (dv-user-driver): convolution, depthwise, dilated,
deconvolution and depthwise deconvolution commands checked against Caffe outputs, call by
call, with its data generator `generate_data.py`.

The C program (`test_conv.cpp`): `main` scans the folder `data`, one sub-folder per input
(`WxHxC_t<tpe>d<deconv>`, tpe 0 a plain convolution, 1 depthwise, > 1 the dilation) and one
file set per layer (`KXxKYxM_padLxTxRxB_strideXxY_act<A>`: `.q.bin` the 256-entry FP16
quantisation table, `.i.bin` the input (CHW), `.w.bin` the weights as table indices,
`.b.bin` the biases, `.prelu.bin` the PReLU slopes, `.o.bin` Caffe's output). Every file
set gives an FP16 configuration and, unless its activation is PReLU, a quantised (Q8) one;
dilated PReLU layers are skipped. It then makes two passes, each shuffling the
configurations and executing them one per command list, then fifty per command list;
`test_conv` does, per configuration: read the files; `dmp_dv_pack_conv_weights` (or
`dmp_dv_pack_dil_weights` for a dilation) once for the size, allocate input/output and
weight memory at random 16-byte offsets, map, `sync_start(0, 1)`, pack (the current
driver's argument order: the PReLU slopes before the output buffer), `sync_end`, write the
input in the device's WHC8 order (the memory first filled with 1000.0), fill a conv v0
command (`conv_enable` 1, 3, 5 or 7; a deconvolution's pads are `k_full - pad - 1`, its
weights rotated by 180 degrees, as generate_data.py writes them) and `add_raw` it; then
commit, exec, wait, and per configuration `sync_start(1, 0)`, compare every output with
Caffe's (`check_err`: within 1e-6, 1e-3 with an activation, when the data are integers;
else a relative bound), keep the output's SHA-256 and compare later runs of the
configuration with it; then release everything and check that no memory (and no file
descriptor) is left.

The port differs only by the mapping rules of docs/porting.md: out-parameters come back
after the status (`rc, weights_size = dmp_dv_pack_conv_weights(...)`), pointers are NumPy
arrays over the mapped memory (an `__fp16 *` is the map's `.view(np.float16)`, pointer
arithmetic a slice), C's `goto L_EXIT` is an exception caught before the clean-up, `main`'s
two halves (scanning the folder, running the passes) are two functions so a test can look
at the configurations.
The element loops that reorder CHW to WHC8 are one slice per block of 8 channels. The
random numbers are Python's (`random.Random`), seeded from the clock as C's `mt19937` is
unless a seed is given. BATCH_MIN / BATCH_MAX are read as in C (default 1); emu's device
runs one sample per command (`input_circular_offset` is not modelled), so only 1 passes.

generate_data.py is ported as `Generator`: the same loops, filters, folder and file names and
NumPy random stream (`numpy.random.seed(1234)` per layer, as `RandomState`), so the input,
weight, bias and table files are those the Python script writes. Caffe is replaced by
`forward`, a function the caller supplies (the test's float64 Caffe-semantics layer), which
gives the `.o.bin` gold output.

Which configurations. The issue asks for "all 650 test_conv configurations"; no run of
generate_data.py gives 650: with no option it writes 90,351 file sets (test_conv loads
179,550 configurations from them), `--square --odd` 16,191 (31,230), `--deconv` 39,698
(78,820), `--dilated` 1,422 (2,844), `--multiple 8` 62,523 (123,894), `--multiple 16`
40,347 (79,542), and the other combinations lie between. So `issue_file_sets()` takes the
default run (all of generate_data.py's features: kernels 1..7 in both directions, strides
1 and 2, dilations 2 and 24, pads "same" and 0, channel counts 1, 3, 9, 64, 65,
depthwise, deconvolution, activations 1..5) and keeps file sets evenly spaced in its
generation order, as many as make test_conv load exactly 650 configurations: 326 file
sets (set i of N = 90,351 at i * N // 326).

    python examples/ports/dv_test_conv.py [LOG]      # in a folder holding `data`
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

import emu
from emu.runtime.dmp_dv import (
    DMP_DV_DEV_CONV,
    dmp_dv_cmdlist_add_raw,
    dmp_dv_cmdlist_commit,
    dmp_dv_cmdlist_create,
    dmp_dv_cmdlist_exec,
    dmp_dv_cmdlist_release,
    dmp_dv_cmdlist_wait,
    dmp_dv_cmdraw_conv_v0,
    dmp_dv_context_create,
    dmp_dv_context_get_info_string,
    dmp_dv_context_release,
    dmp_dv_get_last_error_message,
    dmp_dv_mem_alloc,
    dmp_dv_mem_get_size,
    dmp_dv_mem_get_total_size,
    dmp_dv_mem_map,
    dmp_dv_mem_release,
    dmp_dv_mem_sync_end,
    dmp_dv_mem_sync_start,
    dmp_dv_mem_unmap,
    dmp_dv_pack_conv_weights,
    dmp_dv_pack_dil_weights,
)

FAILED_ADD_RAW = -100
N_T = 6
G_MAX_DIFF_BOUNDS = (0.1, 0.5, 1.0, 5.0, 10.0, 1000000.0)
ISSUE_FILE_SETS = 326  # file sets of the default run giving test_conv 650 configurations


def roundup(a: int) -> int:
    """`a` rounded up to a multiple of 16."""
    n = 16
    d = a % n
    return a + (n - d) if d else a


class _Log:
    """LOG / ERR: the message on stdout (stderr) and in the log file."""

    file: TextIO | None = None

    def __call__(self, message: str, err: bool = False) -> None:
        print(message, end="", file=sys.stderr if err else sys.stdout)
        if self.file is not None:
            self.file.write(message)


LOG = _Log()


def ERR(message: str) -> None:
    LOG(message, err=True)


g_n_fd = -1
g_max_diff = [0.0] * N_T
g_max_diff_y = [0.0] * N_T
g_max_diff_t = [0.0] * N_T


@dataclass
class conv_config:
    """One configuration to test (the C struct; `key` is its `operator<` tuple)."""

    width: int = 0
    height: int = 0
    n_channels: int = 0
    kx: int = 0
    ky: int = 0
    n_kernels: int = 0
    pad_left: int = 0
    pad_top: int = 0
    pad_right: int = 0
    pad_bottom: int = 0
    stride_x: int = 0
    stride_y: int = 0
    activation: int = 0
    tpe: int = 0  # 0 - 2D, 1 - depthwise, > 1 - dilation
    deconv: int = 0  # 0 - convolution, 1 - deconvolution
    batch_size: int = 0
    quantized: bool = False
    hash_set: bool = False
    failed: bool = False
    hash: bytes = b""
    io_mem: Any = None
    weights_mem: Any = None
    io_size: int = 0
    io_offs: int = 0
    weights_offs: int = 0
    io_ptr: np.ndarray | None = None
    caffe_output: np.ndarray | None = None
    pure_ints: bool = False  # only integers were used: the error check is exact

    def key(self) -> tuple[int | bool, ...]:
        return (self.width, self.height, self.n_channels, self.tpe, self.deconv, self.kx,
                self.ky, self.n_kernels, self.pad_left, self.pad_top, self.pad_right,
                self.pad_bottom, self.stride_x, self.stride_y, self.activation, self.quantized)

    def pad_fpga(self) -> int:
        if self.deconv:
            dil = self.tpe & 0xFF if self.tpe & 0xFF else 1
            kw = dil * (self.kx - 1) + 1
            kh = dil * (self.ky - 1) + 1
            pad_lrtb = [kw - self.pad_left - 1, kw - self.pad_right - 1,
                        kh - self.pad_top - 1, kh - self.pad_bottom - 1]
        else:
            pad_lrtb = [self.pad_left, self.pad_right, self.pad_top, self.pad_bottom]
        return pad_lrtb[0] | (pad_lrtb[1] << 8) | (pad_lrtb[2] << 16) | (pad_lrtb[3] << 24)

    def prefix(self) -> str:
        return (f"data/{self.width}x{self.height}x{self.n_channels}_t{self.tpe}d{self.deconv}/"
                f"{self.kx}x{self.ky}x{self.n_kernels}_pad{self.pad_left}x{self.pad_top}x"
                f"{self.pad_right}x{self.pad_bottom}_stride{self.stride_x}x{self.stride_y}"
                f"_act{self.activation}")


def get_conv_out_width(width: int, kx: int, pad_left: int, pad_right: int, stride: int,
                       is_deconv: int) -> int:
    if is_deconv:
        return stride * (width - 1) + kx - pad_left - pad_right
    return (pad_left + width + pad_right - kx) // stride + 1


def check_err(y: np.ndarray, t: np.ndarray, conf: conv_config) -> np.ndarray:
    """0 where the error is acceptable, -1 elsewhere (the C function on whole arrays)."""
    diff = np.abs(y - t)
    if conf.pure_ints:
        dmax = 1.0e-3 if conf.activation else 1.0e-6
        return np.where(diff < dmax, 0, -1)
    p = max(conf.kx, conf.ky) | 1
    n_adds = p * p * conf.n_channels
    ta = np.abs(t)
    dmax = np.where(ta < 0.09, np.float32(0.03), ta * np.float32(0.33))
    if n_adds >= 5 * 5 * 64:
        dmax = dmax * np.sqrt(np.float32(n_adds / (5 * 5 * 64))) * np.float32(1.4)
    return np.where(diff < dmax, 0, -1)


def has_float(x: np.ndarray) -> bool:
    """Whether an FP16 array holds a value that is not an integer."""
    v = x.astype(np.float32)
    with np.errstate(invalid="ignore"):
        return bool(np.any(v != np.trunc(v)))


class _Failed(Exception):
    """The C program's `goto L_EXIT` with `result` as it stands."""


def _read(fnme: str, dtype: Any, n: int, conf: conv_config) -> np.ndarray:
    """fopen / fread / the end-of-file check of one data file."""
    try:
        data = Path(fnme).read_bytes()
    except OSError:
        ERR(f"fopen() failed for {fnme}\n")
        conf.failed = True
        raise _Failed from None
    size = np.dtype(dtype).itemsize
    got = min(len(data) // size, n)
    if got != n:
        ERR(f"fread() returned {got} while expecting {n} for {fnme}\n")
        conf.failed = True
        raise _Failed
    if len(data) > n * size:
        ERR(f"File is bigger than expected: {fnme}\n")
        conf.failed = True
        raise _Failed
    return np.frombuffer(data, dtype=dtype, count=n).copy()


def _kernel_full(conf: conv_config) -> tuple[int, int]:
    if conf.tpe <= 1:
        return conf.kx, conf.ky
    return (conf.kx - 1) * conf.tpe + 1, (conf.ky - 1) * conf.tpe + 1  # tpe > 1: dilation


def _out_size(conf: conv_config) -> tuple[int, int]:
    kxfull, kyfull = _kernel_full(conf)
    return (get_conv_out_width(conf.width, kxfull, conf.pad_left, conf.pad_right,
                               conf.stride_x, conf.deconv),
            get_conv_out_width(conf.height, kyfull, conf.pad_top, conf.pad_bottom,
                               conf.stride_y, conf.deconv))


def _prepare(ctx: Any, cmdlist: Any, conf: conv_config) -> int:
    """The body of the first loop of test_conv for one configuration; 0, or the result."""
    prefix = conf.prefix()
    weights_dim_1 = 1 if conf.tpe == 1 else conf.n_channels
    quant_map = _read(f"{prefix}.q.bin", np.uint16, 256, conf)
    caffe_input = _read(f"{prefix}.i.bin", np.float16,
                        conf.n_channels * conf.height * conf.width, conf)
    conf.pure_ints = not has_float(quant_map.view(np.float16)) and not has_float(caffe_input)
    caffe_weights = _read(f"{prefix}.w.bin", np.uint8,
                          conf.n_kernels * weights_dim_1 * conf.kx * conf.ky, conf)
    caffe_bias = _read(f"{prefix}.b.bin", np.uint16, conf.n_kernels, conf)
    caffe_prelu = None
    if conf.activation == 4:
        caffe_prelu = _read(f"{prefix}.prelu.bin", np.uint16, conf.n_kernels, conf)
    out_width, out_height = _out_size(conf)
    if not conf.hash_set:
        conf.caffe_output = _read(f"{prefix}.o.bin", np.float16,
                                  out_width * out_height * conf.n_kernels, conf)

    cmd = dmp_dv_cmdraw_conv_v0()
    cmd.header.size = dmp_dv_cmdraw_conv_v0.SIZE
    cmd.header.device_type = DMP_DV_DEV_CONV
    cmd.header.version = 0
    cmd.input_circular_offset = conf.batch_size
    cmd.w = conf.width
    cmd.h = conf.height
    cmd.c = conf.n_channels
    cmd.z = 1
    cmd.topo = 1
    run = cmd.run[0]
    run.m = conf.n_kernels
    if conf.deconv:
        run.conv_enable = 7 if conf.tpe == 1 else 5
    else:
        run.conv_enable = 3 if conf.tpe == 1 else 1
    run.conv_dilation = 0 if conf.tpe <= 1 else (conf.tpe & 0xFF) | ((conf.tpe << 8) & 0xFF00)
    run.p = conf.kx | (conf.ky << 8)
    if conf.kx == conf.ky and conf.io_offs & 16:  # both spellings of a square kernel
        run.p = conf.kx
    run.pz = 1
    run.conv_pad = conf.pad_fpga()
    run.conv_stride = conf.stride_x | (conf.stride_y << 8)
    run.actfunc = conf.activation

    in_elements = roundup(conf.batch_size * conf.width * conf.height * conf.n_channels)
    conf.io_size = (in_elements + roundup(conf.batch_size * out_width * out_height
                                          * conf.n_kernels)) * 2
    conf.io_mem = dmp_dv_mem_alloc(ctx, conf.io_offs + conf.io_size)
    if conf.io_mem is None:
        ERR(f"dmp_dv_mem_alloc() failed for {conf.io_offs + conf.io_size} bytes: "
            f"{dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    LOG(f"Allocated {dmp_dv_mem_get_size(conf.io_mem)} ({conf.io_size}(+{conf.io_offs} "
        f"random offset) requested) bytes for input/output\n")
    cmd.input_buf.mem = conf.io_mem
    cmd.input_buf.offs = conf.io_offs
    cmd.output_buf.mem = conf.io_mem
    cmd.output_buf.offs = conf.io_offs + in_elements * 2

    pack = dmp_dv_pack_conv_weights if conf.tpe < 2 else dmp_dv_pack_dil_weights
    n, weights_size = pack(weights_dim_1, conf.kx, conf.ky, conf.n_kernels,
                           quant_map if conf.quantized else None, None, None, caffe_prelu,
                           None, 0)
    if n:
        ERR(f"Weights packing failed: {dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed

    conf.weights_mem = dmp_dv_mem_alloc(ctx, (conf.weights_offs + weights_size) * 2 + 65536)
    if conf.weights_mem is None:
        ERR(f"dmp_dv_mem_alloc() failed for {conf.weights_offs + weights_size} bytes: "
            f"{dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    LOG(f"Allocated {dmp_dv_mem_get_size(conf.weights_mem)} ({weights_size}(+"
        f"{conf.weights_offs} random offset) requested) bytes for weights\n")
    run.weight_buf.mem = conf.weights_mem
    run.weight_buf.offs = conf.weights_offs
    run.weight_fmt = 3 if conf.quantized else 1

    weights = dmp_dv_mem_map(conf.weights_mem)
    if weights is None:
        ERR(f"dmp_dv_mem_map() failed for weights: {dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    if dmp_dv_mem_sync_start(conf.weights_mem, 0, 1):
        ERR(f"dmp_dv_mem_sync_start() failed for weights: "
            f"{dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    weights[:dmp_dv_mem_get_size(conf.weights_mem)] = 0
    weights = weights[conf.weights_offs:]

    if not conf.quantized:  # replace the indices with the values
        caffe_weights = quant_map[caffe_weights]
    n, weights_size = pack(weights_dim_1, conf.kx, conf.ky, conf.n_kernels,
                           quant_map if conf.quantized else None, caffe_weights, caffe_bias,
                           caffe_prelu, weights, weights_size)
    if n:
        ERR(f"Weights packing failed: {dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    if dmp_dv_mem_sync_end(conf.weights_mem):
        ERR(f"dmp_dv_mem_sync_end() failed for weights: {dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    dmp_dv_mem_unmap(conf.weights_mem)

    io = dmp_dv_mem_map(conf.io_mem)
    if io is None:
        ERR(f"dmp_dv_mem_map() failed for input/output: {dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    conf.io_ptr = io.view(np.float16)
    if dmp_dv_mem_sync_start(conf.io_mem, 0, 1):
        ERR(f"dmp_dv_mem_sync_start() failed for input/output: "
            f"{dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    conf.io_ptr[:conf.io_size // 2] = np.float16(1000.0)
    conf.io_ptr = conf.io_ptr[conf.io_offs >> 1:]

    # Caffe's input is stored as channel, height, width; DV's as blocks of at most
    # 8 channels, each as width, height, channel
    chw = caffe_input.reshape(conf.n_channels, conf.height, conf.width)
    o_offs = 0
    for chan_group in range(0, conf.n_channels, 8):
        last_chan = min(chan_group + 8, conf.n_channels)
        block = chw[chan_group:last_chan].transpose(2, 1, 0).reshape(-1)
        conf.io_ptr[o_offs:o_offs + block.size] = block
        o_offs += block.size
    sample = conf.width * conf.height * conf.n_channels
    for i in range(1, conf.batch_size):  # copy the first input to fit the entire batch
        conf.io_ptr[i * sample:(i + 1) * sample] = conf.io_ptr[:sample]
    if dmp_dv_mem_sync_end(conf.io_mem):
        ERR(f"dmp_dv_mem_sync_end() failed for input/output: "
            f"{dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed

    if dmp_dv_cmdlist_add_raw(cmdlist, cmd):
        ERR(f"dmp_dv_cmdlist_add_raw() failed: {dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        return FAILED_ADD_RAW
    return 0


def _compare(conf: conv_config, span: dict[str, list[float]]) -> None:
    """Check one configuration's output after the wait, as the second loop does; `span`
    holds the ranges of Caffe's and the device's values seen by this test_conv."""
    prefix = conf.prefix()
    if dmp_dv_mem_sync_start(conf.io_mem, 1, 0):
        ERR(f"dmp_dv_mem_sync_start() failed for input/output: "
            f"{dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed
    assert conf.io_ptr is not None
    out_width, out_height = _out_size(conf)
    o_offs = roundup(conf.batch_size * conf.width * conf.height * conf.n_channels)
    out_elements = out_height * out_width * conf.n_kernels
    if conf.hash_set:  # check the hash
        got = conf.io_ptr[o_offs:o_offs + conf.batch_size * out_elements].tobytes()
        if hashlib.sha256(got).digest() != conf.hash:
            ERR("Hash differs\n")
            conf.failed = True
            raise _Failed
    else:  # compare with Caffe's output, approximately
        # Caffe's output is stored as channels, height, width; DV's as blocks of at most
        # 8 channels, each as width, height, channel
        assert conf.caffe_output is not None
        caffe = conf.caffe_output.reshape(conf.n_kernels, out_height, out_width)
        max_diff, max_diff_y, max_diff_t = [0.0] * N_T, [0.0] * N_T, [0.0] * N_T
        oo_offs = o_offs
        for chan_group in range(0, conf.n_kernels, 8):
            last_chan = min(chan_group + 8, conf.n_kernels)
            t = caffe[chan_group:last_chan].transpose(2, 1, 0).astype(np.float32)  # x, y, k
            y = conf.io_ptr[oo_offs:oo_offs + t.size].reshape(t.shape).astype(np.float32)
            oo_offs += t.size
            span["caffe"] = [min(span["caffe"][0], float(t.min())),
                             max(span["caffe"][1], float(t.max()))]
            span["dv"] = [min(span["dv"][0], float(y.min())), max(span["dv"][1], float(y.max()))]
            diff = np.abs(y - t)
            bad = check_err(y, t, conf) != 0
            bucket = np.searchsorted(np.array(G_MAX_DIFF_BOUNDS, np.float32), np.abs(t))
            for ii in range(N_T):
                here = ~bad & (bucket == ii)
                if here.any():
                    at = np.unravel_index(np.argmax(np.where(here, diff, -1)), diff.shape)
                    if diff[at] > max_diff[ii]:
                        max_diff[ii], max_diff_y[ii], max_diff_t[ii] = (
                            float(diff[at]), float(y[at]), float(t[at]))
            LOG(f"caffe: [{span['caffe'][0]:.6f}, {span['caffe'][1]:.6f}] dv: "
                f"[{span['dv'][0]:.6f}, {span['dv'][1]:.6f}]\n")
            if not conf.pure_ints:
                for i in range(N_T):
                    LOG(f"t <= {G_MAX_DIFF_BOUNDS[i]:.1f}: max_diff={max_diff[i]:.6f} on "
                        f"y={max_diff_y[i]:.6f} and t={max_diff_t[i]:.6f}\n")
            for i in range(N_T):
                if max_diff[i] > g_max_diff[i]:
                    g_max_diff[i], g_max_diff_y[i], g_max_diff_t[i] = (
                        max_diff[i], max_diff_y[i], max_diff_t[i])
            if bad.any():
                i, j, k = np.unravel_index(np.argmax(np.where(bad, diff, -1)), diff.shape)
                ERR(f"FAILED: failed_diff={diff[i, j, k]:.6f} on y={y[i, j, k]:.6f} and "
                    f"t={t[i, j, k]:.6f} xy=({i}, {j}) chan={chan_group + k} {prefix} "
                    f"{'Q8' if conf.quantized else 'FP16'}\n")
                conf.failed = True
                raise _Failed
        first = conf.io_ptr[o_offs:o_offs + out_elements]
        for i in range(1, conf.batch_size):
            other = conf.io_ptr[o_offs + i * out_elements:o_offs + (i + 1) * out_elements]
            if first.tobytes() != other.tobytes():
                conf.failed = True
                ERR(f"FAILED: batch_size={conf.batch_size} sample={i}: {prefix}\n")
                raise _Failed
        if not conf.failed:  # compute the hash
            output_size = conf.batch_size * out_elements * 2
            if o_offs * 2 + output_size > conf.io_size:
                ERR("Incorrect allocation size for input/output")
                os._exit(-1)
            got = conf.io_ptr[o_offs:o_offs + output_size // 2].tobytes()
            conf.hash = hashlib.sha256(got).digest()
            conf.hash_set = True
    if dmp_dv_mem_sync_end(conf.io_mem):
        ERR(f"dmp_dv_mem_sync_end() failed for input/output: "
            f"{dmp_dv_get_last_error_message()}\n")
        conf.failed = True
        raise _Failed


def _n_fd() -> int:
    try:
        return sum(name.isdigit() for name in os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def _names(confs: list[conv_config]) -> str:
    return "".join(f" {c.prefix()} {'Q8' if c.quantized else 'FP16'}" for c in confs)


def test_conv(confs: list[conv_config]) -> int:
    """Tests convolutional configurations for correctness using data from folder "data"."""
    global g_n_fd
    LOG(f"ENTER: test_conv: {len(confs)} commands:{_names(confs)}\n")
    result = -1
    ctx = cmdlist = None
    try:
        ctx = dmp_dv_context_create()
        if ctx is None:
            ERR(f"dmp_dv_context_create() failed: {dmp_dv_get_last_error_message()}\n")
            raise _Failed
        LOG(f"Successfully created context: {dmp_dv_context_get_info_string(ctx)}\n")
        cmdlist = dmp_dv_cmdlist_create(ctx)
        if cmdlist is None:
            ERR(f"dmp_dv_cmdlist_create() failed: {dmp_dv_get_last_error_message()}\n")
            raise _Failed
        LOG("Created command list\n")

        # Outer loop by configurations to be packed in the single command list
        for conf in confs:
            code = _prepare(ctx, cmdlist, conf)
            if code:
                result = code
                raise _Failed

        if dmp_dv_cmdlist_commit(cmdlist):
            ERR(f"dmp_dv_cmdlist_commit() failed: {dmp_dv_get_last_error_message()}\n")
            _fail_single(confs)
            raise _Failed
        LOG("Commited the command list\n")
        exec_id = dmp_dv_cmdlist_exec(cmdlist)
        if exec_id < 0:
            ERR(f"dmp_dv_cmdlist_exec() failed: {dmp_dv_get_last_error_message()}\n")
            _fail_single(confs)
            raise _Failed
        LOG("Scheduled command list for execution\n")
        LOG("Waiting for completion\n")
        if dmp_dv_cmdlist_wait(cmdlist, exec_id):
            ERR(f"dmp_dv_sync() failed: {dmp_dv_get_last_error_message()}\n")
            _fail_single(confs)
            raise _Failed
        LOG("Execution has completed\n")

        span = {"caffe": [np.inf, -np.inf], "dv": [np.inf, -np.inf]}
        for conf in confs:
            _compare(conf, span)
        result = 0
        LOG("SUCCESS: test_cmdlist\n")
    except _Failed:
        pass
    # L_EXIT
    if not result and confs:
        total_size = dmp_dv_mem_get_total_size()
        if total_size:
            LOG(f"Totally allocated: {total_size} bytes\n")
        else:
            ERR("dmp_dv_mem_get_total_size() returned zero while it shouldn't\n")
            result = -1
    dmp_dv_cmdlist_release(cmdlist)
    for conf in reversed(confs):
        conf.caffe_output = None
        dmp_dv_mem_release(conf.io_mem)
        conf.io_mem = None
        conf.io_ptr = None
        conf.io_size = 0
        dmp_dv_mem_release(conf.weights_mem)
        conf.weights_mem = None
    dmp_dv_context_release(ctx)

    n_fd = _n_fd()
    if g_n_fd == -1:
        g_n_fd = n_fd
    if n_fd != g_n_fd:
        ERR("Inconsistent file descriptor count detected, memory leak is probable\n")
        result = -1
    if dmp_dv_mem_get_total_size():
        ERR(f"Memory leak detected: {dmp_dv_mem_get_total_size()} bytes left\n")
        result = -1
    LOG(f"EXIT{'(FAILED)' if result else ''}: test_conv: {len(confs)} commands, {n_fd} FDs:"
        f"{_names(confs)}\n")
    return result


def _fail_single(confs: list[conv_config]) -> None:
    """A command list of one configuration that fails marks it failed."""
    if len(confs) == 1:
        confs[0].failed = True


def load_configurations(folder: str = "data") -> list[conv_config]:
    """The first half of main: every configuration whose files are in `folder`, in the
    order of the C program's std::set."""
    config_set: dict[tuple[int | bool, ...], conv_config] = {}
    root = Path(folder)
    if not root.is_dir():
        ERR(f'Could not open "{folder}" folder\n')
        return []
    for d in root.iterdir():
        head = _numbers(d.name, 5)
        if head is None or not d.is_dir():
            continue
        for f in d.iterdir():
            tail = _numbers(f.name, 10)
            if tail is None:
                continue
            config = conv_config(*head[:3], *tail[:9], activation=tail[9], tpe=head[3],
                                 deconv=head[4])
            if config.tpe > 1 and config.activation == 4:  # PReLU limitation
                continue
            if config.activation != 4:  # PReLU limitation
                config.quantized = True
                config_set.setdefault(config.key(), config)
                config = dataclasses.replace(config)
            config.quantized = False
            config_set.setdefault(config.key(), config)
    LOG(f"Loaded {len(config_set)} configurations\n")
    return [config_set[k] for k in sorted(config_set)]


def _numbers(name: str, count: int) -> list[int] | None:
    """sscanf of the first `count` numbers of a name whose non-digits became blanks."""
    digits = "".join(ch if ch.isdigit() else " " for ch in name).split()
    return [int(v) for v in digits[:count]] if len(digits) >= count else None


def run_passes(configs: list[conv_config], mt_rand: random.Random, batch_min: int = 1,
               batch_max: int = 1) -> tuple[int, int, int]:
    """The second half of main: two passes, each shuffling the configurations and running
    them one, then fifty, per command list; (n_ok, n_add_raw, n_err). The file descriptor
    count test_conv compares is this run's: the first test_conv takes it afresh, as each
    run of the C program does."""
    global g_n_fd
    g_n_fd = -1
    n_ok = n_err = n_add_raw = 0
    n_passes = 2
    pack_sizes = (1, 50)
    for _ in range(n_passes):
        mt_rand.shuffle(configs)  # randomize the configurations' order
        for pack_size in pack_sizes:
            confs: list[conv_config] = []
            for conf in configs:
                if conf.failed:
                    continue
                conf.io_offs = mt_rand.randint(0, 1024) << 4
                conf.weights_offs = mt_rand.randint(0, 1024) << 4
                batch_size = mt_rand.randint(batch_min, batch_max)
                if conf.batch_size != batch_size:
                    conf.batch_size = batch_size
                    conf.hash_set = False
                confs.append(conf)
                if len(confs) < pack_size:
                    continue
                res = test_conv(confs)
                n_ok, n_add_raw, n_err = _count(res, n_ok, n_add_raw, n_err)
                confs = []
            if confs:
                res = test_conv(confs)
                n_ok, n_add_raw, n_err = _count(res, n_ok, n_add_raw, n_err)
    return n_ok, n_add_raw, n_err


def _count(res: int, n_ok: int, n_add_raw: int, n_err: int) -> tuple[int, int, int]:
    if not res:
        return n_ok + 1, n_add_raw, n_err
    if res == FAILED_ADD_RAW:
        return n_ok, n_add_raw + 1, n_err
    return n_ok, n_add_raw, n_err + 1


def _env_batch(name: str, low: int) -> int:
    value = os.environ.get(name)
    return min(max(int(value) if value else 1, low), 32768)


def main(argv: list[str] | None = None, seed: int | None = None) -> int:
    """Entry point; every message is logged to the file argv[1] too, when given."""
    argv = sys.argv if argv is None else argv
    try:
        LOG.file = open(argv[1] if len(argv) > 1 else os.devnull, "w")  # noqa: SIM115
    except OSError:
        print(f"fopen() failed for {argv[1]}", file=sys.stderr)
        return -1
    try:
        configs = load_configurations()
        mt_rand = random.Random(int(time.time()) if seed is None else seed)
        batch_min = _env_batch("BATCH_MIN", 1)
        batch_max = _env_batch("BATCH_MAX", batch_min)
        n_ok, n_add_raw, n_err = run_passes(configs, mt_rand, batch_min, batch_max)
        for i in range(N_T):
            LOG(f"t <= {G_MAX_DIFF_BOUNDS[i]:.1f}: g_max_diff={g_max_diff[i]:.6f} on "
                f"y={g_max_diff_y[i]:.6f} and t={g_max_diff_t[i]:.6f}\n")
        LOG(f"Tests succeeded: {n_ok}\n")
        LOG(f"Tests failed on dmp_dv_cmdlist_add_raw: {n_add_raw}\n")
        LOG(f"Tests failed to produce correct results: {n_err}\n")
        LOG(f"Number of configurations tested: {len(configs)}\n")
    finally:
        LOG.file.close()
        LOG.file = None
    return n_err


# --- generate_data.py -----------------------------------------------------------------

@dataclass(frozen=True)
class Layer:
    """The arguments of generate_data.py's `generate` (pads left, top, right, bottom)."""

    width: int
    height: int
    n_channels: int
    kx: int
    ky: int
    n_kernels: int
    pad_ltrb: tuple[int, int, int, int]
    stride_xy: tuple[int, int]
    activation: int
    dw: bool
    dil: int
    deconv: bool

    def folder(self) -> str:
        tpe = 1 if self.dw else (0 if self.dil < 2 else self.dil)
        return f"data/{self.width}x{self.height}x{self.n_channels}_t{tpe}d{int(self.deconv)}"

    def prefix(self) -> str:
        return (f"{self.folder()}/{self.kx}x{self.ky}x{self.n_kernels}_pad"
                f"{'x'.join(map(str, self.pad_ltrb))}_stride"
                f"{'x'.join(map(str, self.stride_xy))}_act{self.activation}")

    def out_size(self) -> tuple[int, int]:
        """(ox, oy) of the layer."""
        return (get_conv_out_width(self.width, (self.kx - 1) * self.dil + 1, self.pad_ltrb[0],
                                   self.pad_ltrb[2], self.stride_xy[0], self.deconv),
                get_conv_out_width(self.height, (self.ky - 1) * self.dil + 1, self.pad_ltrb[1],
                                   self.pad_ltrb[3], self.stride_xy[1], self.deconv))


# Caffe's forward pass of one layer: (layer, input CHW, weights in Caffe's shape, bias,
# PReLU slopes) -> output (n_kernels, oy, ox). Convolution weights are (M, C/group, ky, kx),
# Deconvolution weights (C, M/group, ky, kx).
Forward = Callable[[Layer, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


class Generator:
    """generate_data.py: writes the test data under ./data (the options are the script's)."""

    def __init__(self, forward: Forward | None = None, *, float: bool = False,
                 square: bool = False, odd: bool = False, multiple: int = 1,
                 dilated: bool = False, deconv: bool = False, seed: int = 1234,
                 bz: bool = False) -> None:
        self.forward = forward
        self.float = float
        self.square = square
        self.odd = odd
        self.multiple = multiple
        self.dilated = dilated
        self.deconv = deconv
        self.seed = seed
        self.bz = bz

    def __call__(self) -> None:
        for layer in self.layers():
            self.generate(layer)

    def layers(self) -> list[Layer]:
        """Every layer the script generates, in its order, each once."""
        return list(dict.fromkeys(layer for layer in self._calls() if self.valid(layer)))

    def _calls(self) -> Iterator[Layer]:
        if self.dilated:
            for w, kx, dil in itertools.product(range(1, 80), (3, 5, 7), (2, 3, 6, 12, 18, 24)):
                pad = ((kx - 1) * dil + 1) >> 1
                yield Layer(w, w, 256, kx, kx, 16, (pad,) * 4, (1, 1), 0, False, dil, False)
            return
        for deconv in (False, True):
            if deconv or not self.deconv:
                yield from self._deconv_calls(deconv)

    def _pads(self, kx: int, ky: int, dil: int) -> list[tuple[int, int, int, int]]:
        kxfull, kyfull = (kx - 1) * dil + 1, (ky - 1) * dil + 1
        pads = [(kxfull >> 1, kyfull >> 1, kxfull >> 1, kyfull >> 1)]
        if dil == 1 and pads[0] != (0, 0, 0, 0):
            pads.append((0, 0, 0, 0))
        return pads

    def _deconv_calls(self, deconv: bool) -> Iterator[Layer]:
        sizes = (1, 9, 15)
        kxx = (1, 3, 5, 7) if self.odd else (1, 2, 3, 4, 5, 6, 7)
        r = self._roundup
        for kx in kxx:
            for ky in ((kx,) if self.square else kxx):
                for stride, act, x, y, c, m, dw, dil in itertools.product(
                        ((1, 1), (2, 2)), (0,), sizes, sizes, (1, 3, 9, 64, 65),
                        (1, 3, 9, 64, 65), (False, True), (1, 2)):
                    for pad in self._pads(kx, ky, dil):
                        yield Layer(x, y, r(c), kx, ky, r(m), pad, stride, act, dw, dil, deconv)
        for kx in (1, 3, 5, 7):  # activations
            for stride, act, x, y, c, m, dw, dil in itertools.product(
                    ((1, 1), (2, 2)), (1, 2, 3, 4, 5), (1, 9, 15), (1, 9, 15), (1, 65), (1, 65),
                    (False, True), (1, 2)):
                for pad in self._pads(kx, kx, dil):
                    yield Layer(x, y, r(c), kx, kx, r(m), pad, stride, act, dw, dil, deconv)
        yield Layer(128, 64, 64, 3, 3, 32, (1, 1, 1, 1), (2, 2), 0, False, 1, deconv)  # big
        # Dense-ASPP layer with a big dilation
        yield Layer(60, 40, 128, 3, 3, 64, (24,) * 4, (1, 1), 0, False, 24, False)
        for w, kx in itertools.product(range(1, 80), (3, 5, 7)):  # big dilation
            pad = ((kx - 1) * 24 + 1) >> 1
            yield Layer(w, w, 8, kx, kx, 8, (pad,) * 4, (1, 1), 0, False, 24, False)
        for kx in (3, 5, 7):  # big dilation and big input
            pad = ((kx - 1) * 24 + 1) >> 1
            yield Layer(80, 80, 256, kx, kx, 16, (pad,) * 4, (1, 1), 0, False, 24, False)

    def _roundup(self, a: int) -> int:
        d = a % self.multiple
        return a + (self.multiple - d) if d else a

    def valid(self, layer: Layer) -> bool:
        """The checks at the top of the script's `generate`."""
        dil = max(1, layer.dil)
        w, h, (kx, ky), pad = layer.width, layer.height, (layer.kx, layer.ky), layer.pad_ltrb
        if layer.deconv and dil > 1 and max(layer.stride_xy) > 1:
            return False
        if layer.dw and layer.n_kernels != layer.n_channels:
            return False
        if dil > 1 and (layer.dw or layer.activation == 4):
            return False
        if dil > 1 and (pad[0] + w + pad[2] < dil * (kx - 1) + 1
                        or pad[1] + h + pad[3] < dil * (ky - 1) + 1 or kx % 2 == 0
                        or ky % 2 == 0):
            return False
        if dil < 2 and self.dilated:
            return False
        if pad[0] + w + pad[2] < kx or pad[1] + h + pad[3] < ky:
            return False
        ox, oy = layer.out_size()
        if ox < 1 or oy < 1:
            return False
        if layer.deconv:  # the convolution back must give the input's size
            back_x = get_conv_out_width(ox, (kx - 1) * dil + 1, pad[0], pad[2],
                                        layer.stride_xy[0], 0)
            back_y = get_conv_out_width(oy, (ky - 1) * dil + 1, pad[1], pad[3],
                                        layer.stride_xy[1], 0)
            if back_x != w or back_y != h:
                return False
        return True

    def generate(self, layer: Layer) -> None:
        """Write the data files of one layer, the output from `forward`."""
        assert self.forward is not None, "Caffe's role: a forward function is needed"
        Path(layer.folder()).mkdir(parents=True, exist_ok=True)
        prefix = layer.prefix()
        rs = np.random.RandomState(self.seed)
        if self.float:
            values = rs.uniform(-1.0, 1.0, 1001).astype(np.float32)
        else:
            values = np.array([-2.0, -1.0, 1.0, 2.0], dtype=np.float32)
        n_kernels, n_channels = layer.n_kernels, layer.n_channels
        bias = rs.choice(values, n_kernels).astype(np.float16)
        if self.bz:
            bias[:] = 0
        bias.tofile(f"{prefix}.b.bin")
        prelu = rs.choice(values, n_kernels).astype(np.float16)
        inp = rs.choice(values, layer.width * layer.height * n_channels).astype(np.float16)
        inp.tofile(f"{prefix}.i.bin")
        quant = rs.choice(values, 256).astype(np.float16)
        quant[0] = 0
        quant.tofile(f"{prefix}.q.bin")
        weights_dim_1 = 1 if layer.dw else n_channels
        kx, ky = layer.kx, layer.ky
        i_weights = rs.randint(1, 256, kx * ky * weights_dim_1 * n_kernels).astype(np.uint8)
        if layer.deconv:  # the device's kernels: rotated by 180 degrees, (M, C, ky, kx)
            iw = np.rot90(i_weights.reshape((n_kernels, weights_dim_1, ky, kx) if layer.dw
                                            else (weights_dim_1, n_kernels, ky, kx)), 2, (2, 3))
            iw = np.moveaxis(iw, [0, 1, 2, 3], [1, 0, 2, 3]).ravel()
        else:
            iw = i_weights
        iw.tofile(f"{prefix}.w.bin")
        weights = quant[i_weights]
        if layer.deconv and not layer.dw:
            weights = weights.reshape(weights_dim_1, n_kernels, ky, kx)
        else:
            weights = weights.reshape(n_kernels, weights_dim_1, ky, kx)
        if layer.activation == 4:
            prelu.tofile(f"{prefix}.prelu.bin")
        output = self.forward(layer, inp.astype(np.float32).reshape(
            n_channels, layer.height, layer.width), weights.astype(np.float32),
            bias.astype(np.float32), prelu.astype(np.float32))
        ox, oy = layer.out_size()
        assert output.shape == (n_kernels, oy, ox)
        output.astype(np.float16).tofile(f"{prefix}.o.bin")


def issue_file_sets(generator: Generator | None = None) -> list[Layer]:
    """The layers of the issue's 650 configurations (see the module): file sets of the
    default run, evenly spaced in its order."""
    layers = (generator or Generator()).layers()
    n = len(layers)
    return [layers[i * n // ISSUE_FILE_SETS] for i in range(ISSUE_FILE_SETS)]


if __name__ == "__main__":
    with emu.Session():
        sys.exit(main())

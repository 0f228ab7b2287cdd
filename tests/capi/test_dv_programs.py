"""dmp_dv from C: the dv_conv sample's convolution equals the same calls made from Python
(bytes and, to the picosecond, the timeline) and a float64 convolution within FP16's
precision; runs repeat byte for byte; misuse gets the driver's codes."""

import json
from pathlib import Path

import numpy as np
import pytest

from emu.dv import layout
from emu.runtime import dmp_dv as dv
from tests.capi.conftest import CC, SAMPLES, python_run, run

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc or gcc) on this machine")
C, M, H, W, K = 16, 16, 16, 16, 3


def _data(seed):
    """The sample's input, weights and biases (its generator, k / 64 in FP16)."""
    state = seed

    def next_k():
        nonlocal state
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        return (state >> 24) % 65 - 32

    def halves(count, quarter=False):
        ks = [next_k() for _ in range(count)]
        return np.array([int(k / 4) if quarter else k for k in ks], np.float64) / 64

    x = halves(C * H * W).reshape(C, H, W)
    w = halves(M * C * K * K, quarter=True).reshape(M, C, K, K)
    b = halves(M)
    return x, w, b


def _python_conv(seed):
    """The sample's calls made from Python: the output (M, H, W) FP16."""
    x, w, b = _data(seed)
    bits = [a.astype(np.float16).view(np.uint16).reshape(-1) for a in (w, b)]
    ctx = dv.dmp_dv_context_create()
    rc, need = dv.dmp_dv_pack_conv_weights(C, K, K, M, None, *bits, None, None, 0)
    assert rc == 0
    in_mem = dv.dmp_dv_mem_alloc(ctx, 2 * C * H * W)
    out_mem = dv.dmp_dv_mem_alloc(ctx, 2 * M * H * W)
    w_mem = dv.dmp_dv_mem_alloc(ctx, need)
    w_map = dv.dmp_dv_mem_map(w_mem)
    assert dv.dmp_dv_mem_sync_start(w_mem, 0, 1) == 0
    assert dv.dmp_dv_pack_conv_weights(C, K, K, M, None, *bits, None, w_map, need)[0] == 0
    assert dv.dmp_dv_mem_sync_end(w_mem) == 0
    in_map = dv.dmp_dv_mem_map(in_mem)
    assert dv.dmp_dv_mem_sync_start(in_mem, 0, 1) == 0
    in_map[:] = layout.to_device(x.astype(np.float16))
    assert dv.dmp_dv_mem_sync_end(in_mem) == 0
    cmd = dv.dmp_dv_cmdraw_conv_v0()
    cmd.input_buf, cmd.output_buf = dv.dmp_dv_buf(in_mem), dv.dmp_dv_buf(out_mem)
    cmd.topo, cmd.w, cmd.h, cmd.z, cmd.c = 1, W, H, 1, C
    run0 = cmd.run[0]
    run0.weight_buf, run0.conv_pad, run0.m = dv.dmp_dv_buf(w_mem), 0x01010101, M
    run0.conv_enable, run0.p, run0.pz, run0.conv_stride = 1, K | K << 8, 1, 0x0101
    run0.weight_fmt = 1
    cmd.run[0] = run0
    cmdlist = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cmdlist, cmd) == 0
    assert dv.dmp_dv_cmdlist_commit(cmdlist) == 0
    exec_id = dv.dmp_dv_cmdlist_exec(cmdlist)
    assert dv.dmp_dv_cmdlist_wait(cmdlist, exec_id) == 0
    out_map = dv.dmp_dv_mem_map(out_mem)
    assert dv.dmp_dv_mem_sync_start(out_mem, 1, 0) == 0
    out = layout.from_device(out_map, M, H, W).copy()
    dv.dmp_dv_mem_sync_end(out_mem)
    for handle in (w_mem, out_mem, in_mem):
        dv.dmp_dv_mem_release(handle)
    dv.dmp_dv_cmdlist_release(cmdlist)
    dv.dmp_dv_context_release(ctx)
    return out


def _float64_conv(seed):
    x, w, b = _data(seed)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    out = np.empty((M, H, W))
    for m in range(M):
        acc = np.full((H, W), b[m])
        for c in range(C):
            for ky in range(K):
                for kx in range(K):
                    acc += w[m, c, ky, kx] * padded[c, ky:ky + H, kx:kx + W]
        out[m] = acc
    return out


@pytest.mark.parametrize("seed", [1, 77])
def test_the_dv_conv_sample_is_the_python_programs_convolution_and_timeline(built, tmp_path,
                                                                            seed):
    _, compile_c = built
    exe = compile_c(SAMPLES / "dv_conv.c", "dv_conv")
    runs = []
    for k in range(2):
        env = {"EMU_REPORT": str(tmp_path / f"r{k}.json"),
               "EMU_TRACE": str(tmp_path / f"t{k}.json")}
        done = run(exe, tmp_path / f"out{k}.bin", seed, env=env)
        assert done.returncode == 0, done.stderr
        runs.append([done.stdout] + [(tmp_path / f"{n}{k}.{e}").read_bytes()
                                     for n, e in (("r", "json"), ("t", "json"), ("out", "bin"))])
    assert runs[0] == runs[1]  # stdout, report, trace and output, byte for byte
    got = np.frombuffer(runs[0][3], np.float16).reshape(M, H, W)
    out, report = python_run(lambda: _python_conv(seed))
    np.testing.assert_array_equal(got.view(np.uint16), out.view(np.uint16))
    assert json.loads(runs[0][1])["stats"] == report["stats"]
    want = _float64_conv(seed)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=4e-3, atol=4e-3)
    assert "us on the device" in runs[0][0]


def test_misuse_of_dmp_dv_from_c_returns_the_drivers_codes(built):
    _, compile_c = built
    done = run(compile_c(Path(__file__).with_name("dv_misuse.c"), "dv_misuse"))
    assert done.returncode == 0, done.stderr
    got = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    einval = str(dv.EINVAL)
    assert got == {
        "context_null_info": einval, "info_bad_context": einval, "exists_bad_context": "-1",
        "alloc_bad_context": "null", "map_bad_mem": "null", "sync_bad_mem": einval,
        "size_bad_mem": "0", "cmdlist_bad_context": "null", "add_null_cmd": einval,
        "add_bad_version": str(dv.ENOTSUP), "add_short_command": einval,
        "add_unknown_memory": einval, "commit_empty": einval, "exec_bad_list": "negative",
        "wait_bad_id": einval, "pack_zero_dims": einval, "pack_null_size": einval,
        "released_mem_map": "null", "released_mem_sync": einval, "double_release": "ok",
        "info": "0", "info_conv_freq": "positive", "last_error": "set"}

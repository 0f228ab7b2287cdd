"""dmp_dv from C: the dv_conv sample's convolution equals the same calls made from Python
(bytes and, to the picosecond, the timeline) and a float64 convolution within FP16's
precision; the dv_test_conv sample (DMP's test_conv in C) passes on file sets written by the
port's generator, with the port's outputs bit for bit and the timeline of the port's calls
made in the same order; runs repeat byte for byte; misuse gets the driver's codes."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from emu.dv import layout
from emu.runtime import dmp_dv as dv
from tests.capi.conftest import CC, SAMPLES, python_run, run
from tests.runtime.test_port_dv_conv import caffe_forward

PORTS = Path(__file__).resolve().parents[2] / "examples" / "ports"
sys.path.insert(0, str(PORTS))
try:
    import dv_test_conv as port
finally:
    sys.path.pop(0)

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
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr
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
        "released_mem_size": "0", "released_mem_unmap_retain": "ok",
        "pack_small_buffer": einval, "pack_null_weights": einval,
        "exec_uncommitted": "negative", "released_list_commit": einval,
        "released_context_alloc": "null", "released_context_list": "null",
        "null_context_alloc": "null", "null_context_exists": "-1",
        "info": "0", "info_conv_freq": "positive", "last_error": "set"}


# --- dv_test_conv.c -----------------------------------------------------------------------

L = port.Layer
# small file sets covering conv_enable 1, 3, 5 and 7, a dilation, strides 1 and 2, a
# non-square kernel, ReLU, tanh and PReLU (FP16 only): 11 configurations
TEST_CONV_LAYERS = [
    L(9, 9, 3, 3, 3, 9, (1, 1, 1, 1), (1, 1), 0, False, 1, False),
    L(9, 9, 9, 3, 3, 9, (1, 1, 1, 1), (2, 2), 2, True, 1, False),
    L(9, 9, 3, 3, 3, 3, (2, 2, 2, 2), (1, 1), 0, False, 2, False),
    L(9, 9, 3, 3, 3, 3, (1, 1, 1, 1), (2, 2), 0, False, 1, True),
    L(9, 9, 9, 3, 3, 9, (1, 1, 1, 1), (1, 1), 1, True, 1, True),
    L(1, 9, 3, 5, 3, 3, (2, 1, 2, 1), (1, 1), 4, False, 1, False)]
SEED, PASSES = 7, 2
MASK = (1 << 64) - 1


class _Lcg:
    """dv_test_conv.c's random numbers: an MMIX LCG step, the upper 32 bits modulo n."""

    def __init__(self, seed):
        self.state = seed & MASK

    def below(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & MASK
        return (self.state >> 32) % n


def _port_passes(seed, passes):
    """dv_test_conv.c's main with the port's functions: the configurations loaded, shuffled
    and given offsets as the C program does, each pass one then fifty per command list; the
    configurations (sorted) and (n_ok, n_add_raw, n_err). In the folder holding `data`."""
    configs = port.load_configurations()
    order = list(configs)
    rng = _Lcg(seed)
    port.g_n_fd = -1
    counts = (0, 0, 0)
    for _ in range(passes):
        for i in range(len(order) - 1, 0, -1):
            j = rng.below(i + 1)
            order[i], order[j] = order[j], order[i]
        for pack_size in (1, 50):
            confs = []
            for conf in order:
                if conf.failed:
                    continue
                conf.io_offs = rng.below(1025) << 4
                conf.weights_offs = rng.below(1025) << 4
                if conf.batch_size != 1:
                    conf.batch_size, conf.hash_set = 1, False
                confs.append(conf)
                if len(confs) < pack_size:
                    continue
                counts = port._count(port.test_conv(confs), *counts)
                confs = []
            if confs:
                counts = port._count(port.test_conv(confs), *counts)
    return configs, counts


@pytest.fixture(scope="module")
def conv_data(tmp_path_factory):
    """A folder holding `data`: the file sets of TEST_CONV_LAYERS, as the port's generator
    writes them with the float64 Caffe layer as the gold."""
    folder = tmp_path_factory.mktemp("dv_test_conv")
    generator = port.Generator(caffe_forward)
    assert all(generator.valid(layer) for layer in TEST_CONV_LAYERS)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        for layer in TEST_CONV_LAYERS:
            generator.generate(layer)
    return folder


def _lines(stdout):
    """The per-configuration lines: {(name, kind): (result, sha256)}; the totals."""
    rows, totals = {}, {}
    for line in stdout.splitlines():
        if ": " in line:
            label, value = line.rsplit(": ", 1)
            totals[label] = int(value)
        else:
            name, kind, result, digest = line.split()
            rows[name, kind] = (result, digest)
    return rows, totals


def test_the_dv_test_conv_sample_is_the_ports_outputs_and_timeline(built, conv_data,
                                                                   tmp_path, monkeypatch):
    _, compile_c = built
    exe = compile_c(SAMPLES / "dv_test_conv.c", "dv_test_conv")
    runs = []
    for k in range(2):
        env = {"EMU_REPORT": str(tmp_path / f"r{k}.json"),
               "EMU_TRACE": str(tmp_path / f"t{k}.json")}
        done = run(exe, "data", SEED, PASSES, env=env, cwd=conv_data)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        runs.append([done.stdout] + [(tmp_path / f"{n}{k}.json").read_bytes() for n in "rt"])
    assert runs[0] == runs[1]  # stdout, report and trace, byte for byte
    rows, totals = _lines(runs[0][0])
    assert len(rows) == 11 and all(result == "ok" for result, _ in rows.values())
    # each configuration runs once per command list of each pass: 11 + 1 lists a pass
    assert totals == {"Tests succeeded": 24, "Tests failed on dmp_dv_cmdlist_add_raw": 0,
                      "Tests failed to produce correct results": 0,
                      "Number of configurations tested": 11}

    monkeypatch.chdir(conv_data)
    (configs, counts), report = python_run(lambda: _port_passes(SEED, PASSES))
    assert counts == (24, 0, 0)
    want = {(conf.prefix().removeprefix("data/"), "Q8" if conf.quantized else "FP16"):
            ("FAILED" if conf.failed else "ok", conf.hash.hex()) for conf in configs}
    assert rows == want  # the port's outputs, bit for bit, and its verdicts
    assert list(rows) == list(want)  # in the same (sorted) order
    assert json.loads(runs[0][1])["stats"] == report["stats"]


def test_the_dv_test_conv_sample_fails_a_wrong_gold_output(built, conv_data, tmp_path):
    _, compile_c = built
    exe = compile_c(SAMPLES / "dv_test_conv.c", "dv_test_conv")
    wrong = tmp_path / "data"
    for path in (conv_data / "data").rglob("*.bin"):
        target = wrong / path.relative_to(conv_data / "data")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    gold = wrong / "9x9x3_t0d1" / "3x3x3_pad1x1x1x1_stride2x2_act0.o.bin"
    values = np.fromfile(gold, np.float16)
    values[5] += np.float16(1.0)  # one element off by one
    values.tofile(gold)
    done = run(exe, "data", SEED, 1, cwd=tmp_path)
    assert done.returncode == 1
    rows, totals = _lines(done.stdout)
    failed = {key for key, (result, _) in rows.items() if result == "FAILED"}
    assert failed == {("9x9x3_t0d1/3x3x3_pad1x1x1x1_stride2x2_act0", kind)
                      for kind in ("FP16", "Q8")}
    assert totals["Tests failed to produce correct results"] > 0
    assert "FAILED: failed_diff=1.000000" in done.stderr
    missing = run(exe, tmp_path / "nowhere", cwd=tmp_path)
    assert missing.returncode == 1 and "Could not open" in missing.stderr

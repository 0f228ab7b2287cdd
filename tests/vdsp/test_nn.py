import numpy as np
import pytest

from emu.runtime import session
from emu.runtime.hbdsp import (
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM,
    HB_DSP_TASK_FAILED,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import hbSysAllocMem, hbSysMem
from emu.vdsp.ops import nn
from emu.vdsp.ops.tensor_args import MODE_SCALE, MODE_SHIFT, TYPE_F32, TYPE_S8, TYPE_U8, pack
from tests.vdsp import nn_reference as ref


@pytest.fixture(scope="module", autouse=True)
def sess():
    return session.start("j5")


def run_op(cmd, blob, out_bytes):
    """Run one RPC on fresh buffers; (status, output bytes, task handle, simulated ps)."""
    inp, out = hbSysMem(), hbSysMem()
    assert hbSysAllocMem(inp, len(blob)) == 0 and hbSysAllocMem(out, out_bytes) == 0
    inp.virAddr[:] = np.frombuffer(blob, np.uint8)
    ctrl = hbDSPRpcCtrlParam()
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.rpcCmd = cmd
    start = session.current().main.now_ps
    rc, task = hbDSPRpc(inp, out, ctrl)
    assert rc == 0
    rc = hbDSPWaitTaskDone(task, 0)
    return rc, out.virAddr.copy(), task, session.current().main.now_ps - start


def same_floats(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a)
    return (nan == np.isnan(b)).all() and (a.view(np.int32)[~nan] == b.view(np.int32)[~nan]).all()


def quantize_dsp(x, out_dtype, axis=-1, **params):
    out_type = TYPE_S8 if out_dtype == np.int8 else TYPE_U8
    mode = MODE_SHIFT if "shifts" in params else MODE_SCALE
    blob = pack(x, out_type, mode=mode, axis=axis, **params)
    rc, out, task, ps = run_op(nn.CMD_QUANTIZE, blob, x.size)
    assert rc == 0, task.error
    return out.view(out_dtype)[: x.size].reshape(x.shape), ps


def dequantize_dsp(q, axis=-1, **params):
    mode = MODE_SHIFT if "shifts" in params else MODE_SCALE
    blob = pack(q, TYPE_F32, mode=mode, axis=axis, **params)
    rc, out, task, ps = run_op(nn.CMD_DEQUANTIZE, blob, 4 * q.size)
    assert rc == 0, task.error
    return out.view(np.float32).reshape(q.shape), ps


def softmax_dsp(x, axis):
    rc, out, task, ps = run_op(nn.CMD_SOFTMAX, pack(x, TYPE_F32, axis=axis), 4 * x.size)
    assert rc == 0, task.error
    return out.view(np.float32).reshape(x.shape), ps


EDGE = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 127.49, -128.5,
                 -129.0, 1e30, -1e30, np.inf, -np.inf, np.nan, 3.4e38, 1e-45, 254.5, 255.5],
                np.float32)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantize_scale_per_tensor_edges(dtype):
    zp = 0 if dtype == np.int8 else 128
    got, _ = quantize_dsp(EDGE, dtype, scales=[1.0], zero_points=[zp])
    want = ref.quantize(EDGE, dtype, -1, scales=[1.0], zero_points=[zp])
    assert (got == want).all()
    if dtype == np.int8:
        assert got[EDGE == 2.5][0] == 2 and got[EDGE == -2.5][0] == -2  # ties to even
        assert got[np.isnan(EDGE)][0] == 0
        assert got[np.isposinf(EDGE)][0] == 127 and got[np.isneginf(EDGE)][0] == -128


@pytest.mark.parametrize("shape,axis", [((3, 7, 5), 1), ((4, 33), 1), ((10, 3, 2), 0),
                                        ((1000,), 0), ((2, 2, 2, 17), 3)])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantize_and_dequantize_per_axis_random(shape, axis, dtype):
    rng = np.random.default_rng(sum(shape) + axis)
    x = (rng.standard_normal(shape) * 40).astype(np.float32)
    n = shape[axis]
    scales = rng.uniform(0.05, 2.0, n).astype(np.float32)
    zps = rng.integers(-10, 10, n) + (128 if dtype == np.uint8 else 0)
    got, _ = quantize_dsp(x, dtype, axis, scales=scales, zero_points=zps)
    want = ref.quantize(x, dtype, axis, scales=scales, zero_points=zps)
    assert (got == want).all()
    back, _ = dequantize_dsp(got, axis, scales=scales, zero_points=zps)
    assert same_floats(back, ref.dequantize(got, axis, scales=scales, zero_points=zps))


@pytest.mark.parametrize("size", [1, 63, 64, 65, 1000, 100_003])
def test_quantize_shift_and_dequantize_sizes(size):
    rng = np.random.default_rng(size)
    x = rng.uniform(-3, 3, size).astype(np.float32)
    got, _ = quantize_dsp(x, np.int8, shifts=[5])
    assert (got == ref.quantize(x, np.int8, -1, shifts=[5])).all()
    back, _ = dequantize_dsp(got, shifts=[5])
    assert same_floats(back, ref.dequantize(got, -1, shifts=[5]))


def test_dequantize_all_int8_values_with_zero_point():
    q = np.arange(-128, 128, dtype=np.int8)
    got, _ = dequantize_dsp(q, scales=[0.1], zero_points=[3])
    assert same_floats(got, ref.dequantize(q, -1, scales=[0.1], zero_points=[3]))
    u = np.arange(256, dtype=np.uint8)
    got, _ = dequantize_dsp(u, scales=[0.5], zero_points=[128])
    assert same_floats(got, ref.dequantize(u, -1, scales=[0.5], zero_points=[128]))


def _dsp_time(cmd, blob, out_bytes):
    """Time the operator held its DSP core, and the call's time seen by the host."""
    rc, _, task, host_ps = run_op(cmd, blob, out_bytes)
    assert rc == 0, task.error
    return task.task.finished_ps - task.task.started_ps, host_ps


def test_times_scale_with_size():
    rng = np.random.default_rng(0)
    small = rng.standard_normal(10_000).astype(np.float32)
    large = rng.standard_normal(200_000).astype(np.float32)
    for make, out_size in ((lambda x: pack(x, TYPE_S8, mode=MODE_SCALE, scales=[0.05],
                                           zero_points=[0]), 1),
                           (lambda x: pack(x.reshape(-1, 100), TYPE_F32, axis=1), 4)):
        cmd = nn.CMD_QUANTIZE if out_size == 1 else nn.CMD_SOFTMAX
        dsp_small, host_small = _dsp_time(cmd, make(small), out_size * small.size)
        dsp_large, host_large = _dsp_time(cmd, make(large), out_size * large.size)
        # 20 x the data: the core's time grows close to 20 x; the host also pays fixed RPC
        # latencies, so its time grows less but still grows.
        assert 12 * dsp_small < dsp_large < 21 * dsp_small
        assert host_large > host_small


@pytest.mark.parametrize("shape,axis", [((37, 10), 1), ((3, 512), 1), ((2, 1000), 1),
                                        ((5, 40, 3), 1), ((7, 20), 0), ((1, 1), 0),
                                        ((2, 3, 4, 5), 2), ((1, 700), 1)])
def test_softmax_matches_reference_bit_for_bit(shape, axis):
    rng = np.random.default_rng(len(shape) * 100 + shape[axis])
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    got, _ = softmax_dsp(x, axis)
    layout = nn.softmax_layout(x.shape, axis)
    assert same_floats(got, ref.softmax(x, axis, layout))
    exact = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    exact /= exact.sum(axis=axis, keepdims=True)
    assert np.allclose(got, exact, rtol=2e-6, atol=1e-9)


def test_softmax_edge_values():
    x = np.array([[0.0, -np.inf, 1.0, 88.0],
                  [np.nan, 1.0, 2.0, 3.0],
                  [-1e30, 0.0, 0.0, -0.0],
                  [-np.inf, -np.inf, -np.inf, -np.inf]], np.float32)
    got, _ = softmax_dsp(x, 1)
    assert same_floats(got, ref.softmax(x, 1, "rows"))
    assert got[0, 1] == 0.0 and np.isnan(got[1]).all() and np.isnan(got[3]).all()
    assert abs(got[2, 1] - 1 / 3) < 1e-7


def test_bad_inputs_fail_the_task_with_a_message():
    x = np.zeros(16, np.float32)
    rc, _, task, _ = run_op(nn.CMD_SOFTMAX, b"\x00" * 64, 64)
    assert rc == HB_DSP_TASK_FAILED and "header" in task.error
    rc, _, task, _ = run_op(nn.CMD_QUANTIZE, pack(x, TYPE_F32, axis=0), 64)
    assert rc == HB_DSP_TASK_FAILED and "float32 to int8" in task.error
    rc, _, task, _ = run_op(nn.CMD_SOFTMAX, pack(x, TYPE_F32, axis=0), 32)
    assert rc == HB_DSP_TASK_FAILED and "smaller than" in task.error
    blob = pack(x, TYPE_S8, mode=MODE_SHIFT, axis=0, shifts=[40])
    rc, _, task, _ = run_op(nn.CMD_QUANTIZE, blob, 64)
    assert rc == HB_DSP_TASK_FAILED and "0..31" in task.error

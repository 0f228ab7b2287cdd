"""hbDNN's CPU and DSP nodes: plugin layers, DSP segments, HB_DNN_ENABLE_DSP, the CPU work
through the cache model, and the seed's NN sample (MobileNetV1 NV12, Softmax on a DSP)."""

import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import pytest

from emu import sleep_ms
from emu.errors import InputError
from emu.nn import compiler, execute, placement, reference, zoo
from emu.runtime import dnn_tensors, hbsys, session
from emu.runtime import hbdnn as dnn
from emu.runtime.hbdsp import (
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM,
    hbDSPReleaseTask,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import hbSysAllocCachedMem, hbSysFreeMem, hbSysMem
from emu.soc.config import load_config
from emu.vdsp.ops.nn import CMD_SOFTMAX
from emu.vdsp.ops.tensor_args import TYPE_F32, pack
from tests.nn.nets import segmented
from tests.runtime.test_hbdnn import _infer, _tensors

SOC = load_config("j5", None, []).soc
X = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nodes")
    paths = {}
    for name, dsp in (("seg", False), ("segdsp", True)):
        model = compiler.compile_model(segmented(middle=("Softmax",)), name,
                                       compiler.CompileOptions(calib_random=2,
                                                               dsp_softmax=dsp), SOC)
        paths[name] = folder / f"{name}.hbm"
        paths[name].write_bytes(compiler.dumps([model]))
    return paths


@pytest.fixture
def sess():
    yield session.start("j5")


def _run(path, name="seg", x=X):
    rc, packed = dnn.hbDNNInitializeFromFiles([str(path)])
    assert rc == 0
    _, handle = dnn.hbDNNGetModelHandle(packed, name)
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    inputs[0].sysMem[0].virAddr[:x.nbytes] = x.view(np.uint8).reshape(-1)
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0
    rc = dnn.hbDNNWaitTaskDone(task, 0)
    out = outputs[0]
    shape = out.properties.validShape.dims()
    got = out.sysMem[0].virAddr[:4 * int(np.prod(shape))].view(np.float32).reshape(shape).copy()
    assert dnn.hbDNNReleaseTask(task) == 0
    for t in inputs + outputs:
        assert hbSysFreeMem(t.sysMem[0]) == 0
    assert dnn.hbDNNRelease(packed) == 0
    return rc, got, task


def _reference(path, name="seg", x=X):
    (model,) = compiler.load_file(path)
    return model.run({"input": x})["output"] if "output" in model.graph.outputs else \
        model.run({"input": x})[model.graph.outputs[0]]


class _NumpySoftmax:
    """A CPU plugin computing what the built-in op computes; it keeps what it saw."""

    seen: ClassVar[list[np.ndarray]] = []

    def forward(self, bottoms, tops):
        _NumpySoftmax.seen.append(bottoms[0].copy())
        tops[0][...] = reference.softmax(bottoms[0], 1)
        return 0


def test_a_cpu_plugin_computes_the_node_and_is_timed_as_the_cpu_op(sess, models):
    rc, builtin, _ = _run(models["seg"])
    assert rc == 0 and np.array_equal(builtin, _reference(models["seg"]))
    _NumpySoftmax.seen.clear()
    assert dnn.hbDNNRegisterLayerCreator("Softmax", _NumpySoftmax) == 0
    assert dnn.hbDNNRegisterLayerCreator("Softmax", _NumpySoftmax) == dnn.HB_DNN_INVALID_ARGUMENT
    rc, got, task = _run(models["seg"])
    assert rc == 0 and np.array_equal(got, builtin)
    assert len(_NumpySoftmax.seen) == 1 and _NumpySoftmax.seen[0].shape == (1, 8, 16, 16)
    names = [s["name"] for s in task.segments]
    assert "plugin softmax0" in names and "softmax0" in names  # the CPU cost is charged too
    assert dnn.hbDNNUnregisterLayerCreator("Softmax") == 0
    assert dnn.hbDNNUnregisterLayerCreator("Softmax") == dnn.HB_DNN_INVALID_ARGUMENT
    _run(models["seg"])
    assert len(_NumpySoftmax.seen) == 1  # the built-in op again


@pytest.mark.parametrize("forward, message", [
    (lambda self, bottoms, tops: -3, "returned -3"),
    (lambda self, bottoms, tops: 1 / 0, "ZeroDivisionError"),
])
def test_a_failing_plugin_fails_its_task_and_the_runtime_goes_on(sess, models, forward,
                                                                 message):
    layer = type("Broken", (), {"forward": forward})
    assert dnn.hbDNNRegisterLayerCreator("Softmax", layer) == 0
    rc, _, task = _run(models["seg"])
    assert rc == dnn.HB_DNN_RUN_TASK_FAILED and message in task.error
    assert all(s["kind"] != "bpu" or s["segment"] < 2 for s in task.segments)  # stopped
    assert dnn.hbDNNUnregisterLayerCreator("Softmax") == 0
    rc, got, _ = _run(models["seg"])
    assert rc == 0 and np.array_equal(got, _reference(models["seg"]))


@pytest.mark.parametrize("args", [(None, _NumpySoftmax), ("", _NumpySoftmax), ("Softmax", 3),
                                  (7, _NumpySoftmax)])
def test_plugin_registration_misuse(sess, args):
    assert dnn.hbDNNRegisterLayerCreator(*args) == dnn.HB_DNN_INVALID_ARGUMENT
    assert dnn.hbDNNUnregisterLayerCreator(args[0]) == dnn.HB_DNN_INVALID_ARGUMENT


def _dsp_softmax(x):
    """The vDSP softmax operator on `x` (axis 1), through hbDSP directly."""
    blob = pack(np.ascontiguousarray(x, np.float32), TYPE_F32, axis=1)
    src, dst = hbSysMem(), hbSysMem()
    assert hbSysAllocCachedMem(src, len(blob)) == 0 and hbSysAllocCachedMem(dst, x.nbytes) == 0
    src.virAddr[:] = np.frombuffer(blob, np.uint8)
    ctrl = hbDSPRpcCtrlParam()
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
    ctrl.rpcCmd = CMD_SOFTMAX
    rc, task = hbDSPRpc(src, dst, ctrl)
    assert rc == 0 and hbDSPWaitTaskDone(task, 0) == 0 and hbDSPReleaseTask(task) == 0
    out = dst.virAddr[:x.nbytes].view(np.float32).reshape(x.shape).copy()
    hbSysFreeMem(src)
    hbSysFreeMem(dst)
    return out


def test_a_dsp_segment_is_an_rpc_to_the_dsp_and_computes_what_the_dsp_computes(sess, models):
    rc, got, task = _run(models["segdsp"], "segdsp")
    assert rc == 0
    (dsp,) = [s for s in task.segments if s["name"].startswith("dsp ")]
    assert dsp["name"] == "dsp dsp softmax0" and dsp["busy_ps"] > 0
    assert sess.stats()["vdsp"]["tasks_done"] >= 1
    # the same as the float model up to the DSP's exp, and exactly what the DSP gives for
    # the BPU's output
    want = _reference(models["segdsp"], "segdsp")
    assert np.allclose(got, want, rtol=1e-3, atol=1e-3)
    (model,) = compiler.load_file(models["segdsp"])
    ex = execute.Execution(model.quant, {"input": X})
    ex.run_segment(0)
    ex.run_segment(1)
    (node,) = [n for n in model.graph.nodes if n.op == "Softmax"]
    softmax_in = ex.as_float(node.inputs[0])
    ex.set_float(node.outputs[0], _dsp_softmax(softmax_in))
    for k in range(3, len(model.segments)):
        ex.run_segment(k)
    assert np.array_equal(got, ex.outputs()[model.graph.outputs[0]])


def test_hb_dnn_enable_dsp_moves_quantize_dequantize_and_softmax_to_the_dsp(sess, models,
                                                                            monkeypatch):
    rc, on_cpu, cpu_task = _run(models["seg"])
    monkeypatch.setenv("HB_DNN_ENABLE_DSP", "true")
    rc, on_dsp, dsp_task = _run(models["seg"])
    assert rc == 0
    names = [s["name"] for s in dsp_task.segments if s["kind"] != "cache"]
    assert names[0] == "dsp quantize input"
    assert "dsp dsp softmax0" in names
    # the last conv hands over int32 accumulators, which the DSP's dequantize (int8 codes)
    # does not take: the CPU dequantizes them
    (model,) = compiler.load_file(models["seg"])
    assert model.quant.tensor_dtypes()[model.graph.outputs[0]] == "int32"
    assert names[-1].startswith("dequantize")
    assert not any(s["name"].startswith("dsp ") for s in cpu_task.segments)
    # the DSP rounds ties to even and computes exp its own way: within a few output codes
    step = model.quant.tensors[model.graph.outputs[0]].scale
    assert np.abs(on_dsp - on_cpu).max() <= 4 * step


def test_cpu_work_goes_through_the_cache_model(sess, models):
    before = sess.stats()["cpu"]
    _run(models["seg"])
    after = sess.stats()["cpu"]
    # the quantize reads the 3 KiB input and writes its codes; the dequantize reads codes
    # and writes 8 x 16 x 16 floats: at least one access per line of each
    lines = (X.nbytes + X.size + 8 * 16 * 16 * 5) // 64
    assert after["cache_accesses"] - before.get("cache_accesses", 0) >= lines
    assert after["maintenance_ops"] > before.get("maintenance_ops", 0)


def test_the_seeds_nn_sample_prints_its_top5_and_every_segment(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    try:
        import hbdnn_mobilenet_nv12 as example
    finally:
        sys.path.pop(0)
    with session.Session():
        model = example.compile_model(tmp_path)
    runs = []
    for _ in range(2):
        assert example.main(["--model", str(model)]) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1]
    lines = runs[0].splitlines()
    assert lines[0] == "mobilenetv1_nv12: top-5 of 1000 classes (probability)"
    probs = [float(line.split()[-1]) for line in lines[1:6]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
    segments = "\n".join(lines[6:])
    assert "bpu subgraph 0" in segments and "plugin prob" in segments


@pytest.fixture(scope="module")
def nv12_model(tmp_path_factory):
    """A 32 x 40 NV12 model: its rows (40 bytes) are not 16-aligned."""
    model = compiler.compile_model(zoo.build("mobilenetv2", (32, 40), classes=10), "nv",
                                   compiler.CompileOptions(input_type="nv12", calib_random=2),
                                   SOC)
    path = tmp_path_factory.mktemp("nv12") / "nv.hbm"
    path.write_bytes(compiler.dumps([model]))
    return path, model


def test_nv12_inputs_aligned_padded_by_the_runtime_or_in_two_planes(sess, nv12_model):
    path, model = nv12_model
    picture = np.random.default_rng(5).integers(0, 256, (1, 48, 40), dtype=np.uint8)
    want = model.run({model.graph.inputs[0]: picture})[model.graph.outputs[0]]
    rc, packed = dnn.hbDNNInitializeFromFiles([str(path)])
    assert rc == 0
    _, handle = dnn.hbDNNGetModelHandle(packed, "nv")
    _, props = dnn.hbDNNGetInputTensorProperties(handle, 0)
    assert props.tensorType == dnn.HB_DNN_IMG_TYPE_NV12
    assert props.validShape.dims() == (1, 3, 32, 40)
    assert props.alignedShape.dims() == (1, 3, 32, 48)
    assert props.alignedByteSize == 48 * 48 and props.stride == [0] * 8
    aligned = np.zeros((1, 48, 48), np.uint8)
    aligned[:, :, :40] = picture
    cases = {"aligned": (dnn.HB_DNN_IMG_TYPE_NV12, (1, 3, 32, 48), [aligned]),
             "padded by the runtime": (dnn.HB_DNN_IMG_TYPE_NV12, (1, 3, 32, 40), [picture]),
             "two planes": (dnn.HB_DNN_IMG_TYPE_NV12_SEPARATE, (1, 3, 32, 48),
                            [aligned[:, :32], aligned[:, 32:]])}
    for case, (kind, aligned_dims, planes) in cases.items():
        image = dnn.hbDNNTensor()
        image.properties.tensorType = kind
        image.properties.validShape = dnn.hbDNNTensorShape((1, 3, 32, 40))
        image.properties.alignedShape = dnn.hbDNNTensorShape(aligned_dims)
        for mem, plane in zip(image.sysMem, planes, strict=False):
            assert hbSysAllocCachedMem(mem, plane.size) == 0
            mem.virAddr[:] = plane.reshape(-1)
        outputs = _tensors(handle, True)
        rc, task = _infer(handle, [image], outputs)
        assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0, case
        got = outputs[0].sysMem[0].virAddr[:want.nbytes].view(np.float32).reshape(want.shape)
        assert np.array_equal(got, want), case
        assert (task.segments[0]["name"] == "pad input") is (case == "padded by the runtime")
        assert dnn.hbDNNReleaseTask(task) == 0
        if case == "two planes":  # a plane too small for its rows is refused
            image.sysMem[1] = hbSysMem()
            assert hbSysAllocCachedMem(image.sysMem[1], 16 * 48 - 1) == 0
            assert _infer(handle, [image], outputs)[0] == dnn.HB_DNN_INVALID_ARGUMENT


def test_a_released_running_task_stops_at_its_next_function_call(sess, tmp_path):
    model = compiler.compile_model(zoo.build("resnet18", (64, 64)), "r18",
                                   compiler.CompileOptions(calib_random=1,
                                                           max_time_per_fc_us=50), SOC)
    path = tmp_path / "r18.hbm"
    path.write_bytes(compiler.dumps([model]))
    rc, packed = dnn.hbDNNInitializeFromFiles([str(path)])
    _, handle = dnn.hbDNNGetModelHandle(packed, "r18")
    dnn.set_timing_only(packed)
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0
    while task.bpu_task is None or task.bpu_task.started_ps < 0:
        sleep_ms(0.01)
    bpu = task.bpu_task
    calls = len(bpu.stages)
    assert calls > 3
    assert dnn.hbDNNReleaseTask(task) == 0
    sleep_ms(5)
    assert bpu.cancelled and bpu.finished and 1 <= bpu.next_stage < calls
    assert sess.stats()["bpu"]["tasks_cancelled"] == 1
    assert all(s["kind"] != "dequantize" for s in task.segments)


@pytest.mark.parametrize("level, printed", [(None, True), ("3", True), ("4", True),
                                            ("5", False), ("0", False), ("junk", True)])
def test_hb_dnn_log_level_decides_whether_errors_are_printed(sess, monkeypatch, capsys,
                                                             level, printed):
    if level is not None:
        monkeypatch.setenv("HB_DNN_LOG_LEVEL", level)
    assert dnn.hbDNNGetModelNameList(None)[0] == dnn.HB_DNN_INVALID_PACKED_DNN_HANDLE
    err = capsys.readouterr().err
    assert ("hbDNNGetModelNameList: hbDNN: not a live packed handle" in err) is printed
    assert dnn.hbDNNGetVersion() and capsys.readouterr().err == ""  # success: silent


@pytest.mark.parametrize("platform, rc", [
    ("BAYES", 0), ("BERNOULLI2", dnn.HB_DNN_INCOMPATIBLE_MODEL),
    ("BERNOULLI", dnn.HB_DNN_INCOMPATIBLE_MODEL), ("J9", dnn.HB_DNN_INVALID_ARGUMENT)])
def test_the_simulator_platform_variable_is_accepted(sess, models, monkeypatch, platform, rc):
    monkeypatch.setenv("HB_DNN_SIM_PLATFORM", platform)
    got, packed = dnn.hbDNNInitializeFromFiles([str(models["seg"])])
    assert got == rc and (packed is None) is (rc != 0)


def _conv_reference(x, w, b):
    """Slow: int64 sums of a 3x3, pad 1, stride 1 conv plus the bias, loop by loop."""
    n, _, h, width = x.shape
    padded = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, width), np.int64)
    for o in range(w.shape[0]):
        for i in range(h):
            for j in range(width):
                out[:, o, i, j] = (padded[:, :, i:i + 3, j:j + 3]
                                   * w[o].astype(np.int64)).sum(axis=(1, 2, 3)) + b[o]
    return out


def test_output_codes_are_the_final_convs_int32_accumulators_with_per_channel_scales(sess,
                                                                                    tmp_path):
    model = compiler.compile_model(segmented(middle=("Softmax",)), "codes",
                                   compiler.CompileOptions(calib_random=2, output_codes=True),
                                   SOC)
    assert [s.kind for s in model.segments][-1] == "bpu"  # no dequantize on the CPU
    path = tmp_path / "codes.hbm"
    path.write_bytes(compiler.dumps([model]))
    rc, packed = dnn.hbDNNInitializeFromFiles([str(path)])
    _, handle = dnn.hbDNNGetModelHandle(packed, "codes")
    _, props = dnn.hbDNNGetOutputTensorProperties(handle, 0)
    assert props.tensorType == dnn.HB_DNN_TENSOR_TYPE_S32
    assert props.quantiType == dnn.SCALE and props.quantizeAxis == 1
    assert props.scale.scaleLen == 8 and props.scale.zeroPointData == [0] * 8
    assert props.alignedByteSize == 4 * 8 * 16 * 16
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    inputs[0].sysMem[0].virAddr[:X.nbytes] = X.view(np.uint8).reshape(-1)
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
    assert f"dequantize {model.graph.outputs[0]}" not in [s["name"] for s in task.segments]
    got = outputs[0].sysMem[0].virAddr[:props.alignedByteSize].view(np.int32).reshape(
        1, 8, 16, 16)
    (conv,) = [n for n in model.graph.nodes if n.name == "conv1"]
    codes = execute.run(model.quant, {"input": X}, integer=True)
    x = codes[execute.CODES_PREFIX + conv.inputs[0]]
    layer = model.quant.layers["conv1"]
    assert np.array_equal(got, _conv_reference(x, layer.weight, layer.bias))
    # read with its scales it is the float output up to the int8 output's rounding
    scales = np.array(props.scale.scaleData, np.float64).reshape(1, 8, 1, 1)
    floats = model.run({"input": X})[model.graph.outputs[0]]
    step = model.quant.tensors[model.graph.outputs[0]].scale
    assert np.abs(got * scales - floats).max() <= step
    assert dnn.hbDNNReleaseTask(task) == 0


def test_other_outputs_kept_quantised_are_their_codes_with_the_tensor_scale(sess, tmp_path):
    model = compiler.compile_model(zoo.build("mobilenetv2", (32, 32), classes=10), "m",
                                   compiler.CompileOptions(calib_random=2, output_codes=True),
                                   SOC)
    (name,) = model.code_outputs()
    qt = model.quant.tensors[name]
    path = tmp_path / "m.hbm"
    path.write_bytes(compiler.dumps([model]))
    rc, packed = dnn.hbDNNInitializeFromFiles([str(path)])
    _, handle = dnn.hbDNNGetModelHandle(packed, "m")
    _, props = dnn.hbDNNGetOutputTensorProperties(handle, 0)
    kind = {"int8": dnn.HB_DNN_TENSOR_TYPE_S8, "int16": dnn.HB_DNN_TENSOR_TYPE_S16}[qt.dtype]
    assert props.tensorType == kind and props.quantizeAxis == 0
    if props.quantiType == dnn.SHIFT:
        assert 2.0 ** -props.shift.shiftData[0] == qt.scale
    else:
        assert props.quantiType == dnn.SCALE
        assert props.scale.scaleData == [float(np.float32(qt.scale))]
    x = np.random.default_rng(9).standard_normal((1, 3, 32, 32)).astype(np.float32)
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    inputs[0].sysMem[0].virAddr[:x.nbytes] = x.view(np.uint8).reshape(-1)
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
    want = execute.run(model.quant, {model.graph.inputs[0]: x}, integer=True)[
        execute.CODES_PREFIX + name]
    got = outputs[0].sysMem[0].virAddr[:want.nbytes].view(want.dtype).reshape(want.shape)
    assert np.array_equal(got, want)
    assert dnn.hbDNNReleaseTask(task) == 0


@pytest.mark.parametrize("scales, axis, shifts", [([0.25], None, [2]), ([0.5, 2.0**-7], 1, [1, 7]),
                                                  ([0.3], None, None)])
def test_power_of_two_scales_are_described_as_shifts(monkeypatch, scales, axis, shifts):
    monkeypatch.setattr(execute, "output_quantization",
                        lambda quant, name: ("int8", np.array(scales), axis))
    props = dnn.hbDNNTensorProperties()
    model = type("Model", (), {"quant": None})()
    assert dnn_tensors._describe_codes(props, model, "out") == 1
    assert props.quantizeAxis == (axis or 0)
    if shifts is None:
        assert props.quantiType == dnn.SCALE and props.scale.scaleData == [float(np.float32(0.3))]
    else:
        assert props.quantiType == dnn.SHIFT and props.shift.shiftData == shifts
        assert props.shift.shiftLen == len(shifts)


def test_hbdnn_tensors_on_registered_memory(sess, models):
    """A buffer registered with hbSysRegisterMem (memory the application knows by physical
    address) serves as an hbDNN tensor like an allocated one."""
    rc, packed = dnn.hbDNNInitializeFromFiles([str(models["seg"])])
    _, handle = dnn.hbDNNGetModelHandle(packed, "seg")
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    pool = sess.soc.pool
    top = max(addr + size for addr, size in pool.free_blocks)
    registered = hbSysMem()
    registered.phyAddr, registered.memSize = top - (1 << 16), X.nbytes
    assert hbsys.hbSysRegisterMem(registered) == 0
    registered.virAddr[:X.nbytes] = X.view(np.uint8).reshape(-1)
    assert hbSysFreeMem(inputs[0].sysMem[0]) == 0
    inputs[0].sysMem[0] = registered
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
    want = _reference(models["seg"])
    got = outputs[0].sysMem[0].virAddr[:want.nbytes].view(np.float32).reshape(want.shape)
    assert np.array_equal(got, want)
    assert hbsys.hbSysFreeMem(registered) == hbsys.HB_SYS_WRONG_RELEASE
    assert dnn.hbDNNReleaseTask(task) == 0
    assert hbsys.hbSysUnregisterMem(registered) == 0


def test_a_plugin_runs_for_its_time_when_outputs_are_not_computed(sess, models):
    _NumpySoftmax.seen.clear()
    assert dnn.hbDNNRegisterLayerCreator("Softmax", _NumpySoftmax) == 0
    rc, packed = dnn.hbDNNInitializeFromFiles([str(models["seg"])])
    dnn.set_timing_only(packed)
    _, handle = dnn.hbDNNGetModelHandle(packed, "seg")
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
    assert len(_NumpySoftmax.seen) == 1 and not _NumpySoftmax.seen[0].any()  # zeros
    assert "plugin softmax0" in [s["name"] for s in task.segments]
    assert dnn.hbDNNReleaseTask(task) == 0
    assert dnn.hbDNNUnregisterLayerCreator("Softmax") == 0


# Every name the board's hbDNN and hbSys headers declare (seeds 000 and 004), enums and
# typedefs included; the Perfetto variables are not read (README, "The board's APIs").
_HEADERS = """
hbDNNGetVersion hbDNNInitializeFromFiles hbDNNInitializeFromDDR hbDNNRelease
hbDNNGetModelNameList hbDNNGetModelHandle hbDNNGetInputCount hbDNNGetOutputCount
hbDNNGetInputName hbDNNGetOutputName hbDNNGetInputTensorProperties
hbDNNGetOutputTensorProperties hbDNNInfer hbDNNRoiInfer hbDNNWaitTaskDone hbDNNReleaseTask
hbDNNSetTaskDoneCb hbDNNResize hbDNNRegisterLayerCreator hbDNNUnregisterLayerCreator
hbDNNGetErrorDesc hbSysAllocMem hbSysAllocCachedMem hbSysFlushMem hbSysFreeMem hbSysWriteMem
hbSysReadMem hbSysRegisterMem hbSysUnregisterMem hbPackedDNNHandle_t hbDNNHandle_t
hbDNNTaskHandle_t hbDNNTensorLayout hbDNNDataType hbDNNTensorShape hbDNNQuantiShift
hbDNNQuantiScale hbDNNQuantiType hbDNNTensorProperties hbDNNTaskPriority hbDNNTensor hbDNNRoi
hbDNNInferCtrlParam hbBPUCore hbDSPCore hbSysMem hbSysMemFlushFlag hbDNNResizeType
hbDNNResizeCtrlParam hbDNNLayerCreator hbDNNTaskDoneCb HB_DNN_INITIALIZE_INFER_CTRL_PARAM
HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM HB_DNN_VERSION_MAJOR HB_DNN_VERSION_MINOR
HB_DNN_VERSION_PATCH HB_DNN_TENSOR_MAX_DIMENSIONS HB_DNN_LAYOUT_NHWC HB_DNN_LAYOUT_NCHW
HB_DNN_LAYOUT_NONE HB_DNN_IMG_TYPE_NV12_SEPARATE HB_DNN_TENSOR_TYPE_MAX
HB_DNN_PRIORITY_PREEMP HB_BPU_CORE_1 HB_DSP_CORE_1 HB_SYS_MEM_CACHE_CLEAN
HB_DNN_RESIZE_TYPE_BILINEAR HB_DNN_SIM_PLATFORM HB_DNN_LOG_LEVEL HB_DNN_ENABLE_DSP
"""
BOARD_NAMES = _HEADERS.split()


def test_every_name_of_the_boards_headers_exists():
    assert [n for n in BOARD_NAMES if not hasattr(dnn, n) and not hasattr(hbsys, n)] == []
    assert dnn.hbDNNDataType.HB_DNN_TENSOR_TYPE_S32 == dnn.HB_DNN_TENSOR_TYPE_S32 == 14
    assert dnn.hbDNNTensorLayout(2) is dnn.hbDNNTensorLayout.HB_DNN_LAYOUT_NCHW
    assert hbsys.hbSysMemFlushFlag.HB_SYS_MEM_CACHE_CLEAN == hbsys.HB_SYS_MEM_CACHE_CLEAN


def test_an_output_asked_as_int32_is_its_gemms_accumulators_scaled_per_class(sess, tmp_path):
    onnx_model = zoo.build("mobilenetv2", (32, 32), classes=10)
    out = onnx_model.graph.output[0].name
    model = compiler.compile_model(onnx_model, "m", compiler.CompileOptions(
        calib_random=2, output_types=((out, "int32"),)), SOC)
    assert "dequantize" not in [s.kind for s in model.segments]
    found = placement.accumulators(model.graph, model.segments, out)
    assert isinstance(found, placement.Accumulators)
    path = tmp_path / "m.hbm"
    path.write_bytes(compiler.dumps([model]))
    _, packed = dnn.hbDNNInitializeFromFiles([str(path)])
    _, handle = dnn.hbDNNGetModelHandle(packed, "m")
    props = dnn.hbDNNTensorProperties()
    assert dnn.hbDNNGetOutputTensorProperties(props, handle, 0) == 0  # C's form: filled
    assert props.tensorType == dnn.HB_DNN_TENSOR_TYPE_S32 and props.quantiType == dnn.SCALE
    assert props.quantizeAxis == 1 and props.scale.scaleLen == 10
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    inputs[0].sysMem[0].virAddr[:x.nbytes] = x.view(np.uint8).reshape(-1)
    # an output described as float where the model hands over int32: refused, not raised
    outputs[0].properties.tensorType = dnn.HB_DNN_TENSOR_TYPE_F32
    assert _infer(handle, inputs, outputs) == (dnn.HB_DNN_INVALID_ARGUMENT, None)
    outputs[0].properties.tensorType = dnn.HB_DNN_TENSOR_TYPE_S32
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
    got = outputs[0].sysMem[0].virAddr[:40].view(np.int32).reshape(1, 10)
    # slow reference: the int8 input codes times the int8 weights, summed, plus the bias
    source = found.source
    ex = execute.Execution(model.quant, {model.graph.inputs[0]: x})
    for k in range(len(model.quant.segments)):
        ex.run_segment(k)
    codes = ex.codes[source.inputs[0]].astype(np.int64).reshape(-1)
    layer = model.quant.layers[source.name]
    weight = layer.weight.reshape(10, -1).astype(np.int64)
    want = [sum(int(codes[k]) * int(weight[m, k]) for k in range(codes.size))
            + int(layer.bias[m]) for m in range(10)]
    assert got.reshape(-1).tolist() == want
    floats = reference.run_float(model.graph, {model.graph.inputs[0]: x})[out]
    scales = np.array(props.scale.scaleData, np.float64)
    assert execute.cosine_similarity(got * scales, floats) > 0.99
    assert dnn.hbDNNReleaseTask(task) == 0


@pytest.mark.parametrize("types, message", [
    ((("logits", "int4"),), "expected one of float, quantized, int32"),
    ((("logits", "float"), ("logits", "int32")), "given twice"),
    ((("nonesuch", "int32"),), "the model has no output nonesuch"),
])
def test_output_types_are_checked(types, message):
    model = zoo.build("mobilenetv2", (32, 32), classes=10)
    assert [o.name for o in model.graph.output] == ["logits"]
    with pytest.raises(InputError, match=message):
        compiler.compile_model(model, "m", compiler.CompileOptions(
            calib_random=2, output_types=types), SOC)


def test_int32_is_refused_where_no_conv_writes_the_output_and_quantized_off_the_bpu():
    model = segmented(middle=("Softmax",))
    out = model.graph.output[0].name
    with pytest.raises(InputError, match=r"int32 accumulators: .* written by Sigmoid") as info:
        compiler.compile_model(_with_sigmoid(model), "s", compiler.CompileOptions(
            calib_random=2, output_types=((out, "int32"),)), SOC)
    assert "\n" not in str(info.value)
    soft = zoo.build("mobilenetv2", (32, 32), classes=10)
    node = onnx.helper.make_node("Softmax", [soft.graph.output[0].name], ["p"], axis=1)
    soft.graph.node.append(node)
    soft.graph.output[0].name = "p"
    with pytest.raises(InputError, match="p is not written by the BPU"):
        compiler.compile_model(soft, "s", compiler.CompileOptions(
            calib_random=2, output_types=(("p", "quantized"),)), SOC)


def _with_sigmoid(model):
    out = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = [out + "_pre" if o == out else o for o in node.output]
    model.graph.node.append(onnx.helper.make_node("Sigmoid", [out + "_pre"], [out]))
    return model

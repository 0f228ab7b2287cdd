"""emu.dnn: the Pythonic layer computes what the compiled model computes, takes the time the
C calls take, and turns every failure into a DnnError with the board's code."""

import numpy as np
import pytest

import emu
import emu.dnn
from emu.nn import compiler, zoo
from emu.runtime import hbdnn, hbsys
from emu.soc.config import load_config
from tests.nn.nets import segmented

SOC = load_config("j5", None, []).soc


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dnn")
    options = compiler.CompileOptions(calib_random=2)
    made = {"mnv2": compiler.compile_model(zoo.build("mobilenetv2", (32, 32)), "mnv2",
                                           options, SOC),
            "seg": compiler.compile_model(segmented(), "seg", options, SOC),
            "nv12": compiler.compile_model(
                zoo.build("mobilenetv1", (32, 32)), "nv12",
                compiler.CompileOptions(calib_random=2, input_type="nv12"), SOC),
            "codes": compiler.compile_model(
                zoo.build("mobilenetv2", (32, 32)), "codes",
                compiler.CompileOptions(calib_random=2, output_codes=True), SOC)}
    paths = {}
    for name, model in made.items():
        paths[name] = folder / f"{name}.hbm"
        paths[name].write_bytes(compiler.dumps([model]))
    paths["two"] = folder / "two.hbm"
    paths["two"].write_bytes(compiler.dumps([made["mnv2"], made["seg"]]))
    return made, paths


def _c_style(path, x):
    """The same inference with the C names, as a board program writes it: its outputs and
    its latency."""
    rc, packed = hbdnn.hbDNNInitializeFromFiles([str(path)])
    rc, handle = hbdnn.hbDNNGetModelHandle(packed, hbdnn.hbDNNGetModelNameList(packed)[1][0])
    ins, outs = emu.dnn.alloc_tensors(handle, False), emu.dnn.alloc_tensors(handle, True)
    ins[0].sysMem[0].virAddr[:x.nbytes] = x.view(np.uint8).reshape(-1)
    hbsys.hbSysFlushMem(ins[0].sysMem[0], hbsys.HB_SYS_MEM_CACHE_CLEAN)
    ctrl = hbdnn.hbDNNInferCtrlParam()
    start = emu.now_ms()
    rc, task = hbdnn.hbDNNInfer(outs, ins, handle, ctrl)
    assert rc == 0 and hbdnn.hbDNNWaitTaskDone(task, 0) == 0
    latency = emu.now_ms() - start
    got = []
    for tensor in outs:
        hbsys.hbSysFlushMem(tensor.sysMem[0], hbsys.HB_SYS_MEM_CACHE_INVALIDATE)
        got.append(tensor.sysMem[0].virAddr[:tensor.properties.alignedByteSize].copy())
    hbdnn.hbDNNReleaseTask(task)
    emu.dnn.free_tensors(ins + outs)
    hbdnn.hbDNNRelease(packed)
    return got, latency


def test_infer_computes_the_model_and_takes_the_c_calls_time(models):
    made, paths = models
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    with emu.Session():
        with emu.dnn.Model(paths["mnv2"]) as model:
            assert [(i.name, i.shape, i.dtype, i.layout) for i in model.inputs] == \
                [("input", (1, 3, 32, 32), np.float32, "NCHW")]
            result = model.infer(x)
        assert 0 < result.start_ms < result.end_ms
    want = made["mnv2"].run({"input": x})
    assert result.outputs.keys() == want.keys()
    assert model.outputs[0].shape == (1, 1000, 1, 1)  # the scores, 4-D as on the board
    for name, value in want.items():
        assert np.array_equal(result.outputs[name].reshape(value.shape), value), name
    with emu.Session():
        c_outputs, c_latency = _c_style(paths["mnv2"], x)
    assert result.latency_ms == c_latency
    assert c_outputs[0].tobytes() == result.outputs["logits"].tobytes()


def test_submitted_inferences_run_together_and_each_gets_its_own_result(models):
    _, paths = models
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(3)]
    with emu.Session(), emu.dnn.Model(paths["two"], "mnv2") as model:
        alone = [model.infer(x) for x in xs]
        pending = [model.submit(x, core=hbdnn.HB_BPU_CORE_ANY) for x in xs]
        together = [p.wait() for p in reversed(pending)][::-1]
        assert pending[0].wait() is together[0]  # waiting again gives the same result
    for a, b in zip(alone, together, strict=True):
        assert np.array_equal(a.outputs["logits"], b.outputs["logits"])
    # three at once on two cores: the last ends later than one alone would, and sooner
    # than three one after the other (submit does not wait for the inference)
    span = max(r.end_ms for r in together) - min(r.start_ms for r in together)
    assert span > alone[0].latency_ms
    assert span < sum(r.latency_ms for r in alone)


def test_an_nv12_model_takes_the_unpadded_image_and_codes_come_with_their_scale(models):
    made, paths = models
    rng = np.random.default_rng(3)
    with emu.Session():
        with emu.dnn.Model(paths["nv12"]) as model:
            (image,) = model.inputs
            assert image.nv12 and image.dtype == np.uint8 and image.layout == "NCHW"
            frame = rng.integers(0, 256, 32 * 32 * 3 // 2, dtype=np.uint8)
            got = model.infer(frame).outputs
        want = made["nv12"].run({made["nv12"].inputs[0].name: frame.reshape(1, 48, 32)})
        for name, value in want.items():
            assert np.array_equal(got[name].reshape(value.shape), value), name
        with emu.dnn.Model(paths["codes"]) as model:
            (out,) = model.outputs
            assert np.issubdtype(out.dtype, np.integer) and out.scale
            x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
            codes = model.infer(x).outputs[out.name]
        assert codes.dtype == out.dtype and codes.shape == out.shape


@pytest.mark.parametrize(("make", "code"), [
    (lambda p: emu.dnn.Model(p["mnv2"].with_suffix(".missing")), hbdnn.HB_DNN_CAN_NOT_OPEN_FILE),
    (lambda p: emu.dnn.Model(p["two"]), hbdnn.HB_DNN_INVALID_ARGUMENT),
    (lambda p: emu.dnn.Model(p["two"], "nope"), hbdnn.HB_DNN_INVALID_ARGUMENT),
    (lambda p: emu.dnn.Model(p["mnv2"]).infer(np.zeros((1, 3, 32, 31), np.float32)),
     hbdnn.HB_DNN_INVALID_ARGUMENT),
    (lambda p: emu.dnn.Model(p["mnv2"]).infer(np.zeros((1, 3, 32, 32), np.float64)),
     hbdnn.HB_DNN_INVALID_ARGUMENT),
    (lambda p: emu.dnn.Model(p["mnv2"]).infer({"x": np.zeros((1, 3, 32, 32), np.float32)}),
     hbdnn.HB_DNN_INVALID_ARGUMENT),
    (lambda p: emu.dnn.Model(p["mnv2"]).infer([]), hbdnn.HB_DNN_INVALID_ARGUMENT),
])
def test_failures_raise_dnn_error_with_the_boards_code_and_leak_nothing(models, make, code):
    _, paths = models
    with emu.Session() as sess:
        live = sess.soc.pool.live_buffers
        with pytest.raises(emu.dnn.DnnError) as info:
            make(paths)
        assert info.value.code == code
        assert hbdnn.hbDNNGetErrorDesc(code) in str(info.value)
        assert sess.soc.pool.live_buffers == live


def test_a_closed_model_refuses_to_infer(models):
    _, paths = models
    with emu.Session():
        model = emu.dnn.Model(paths["mnv2"])
        model.close()
        model.close()  # twice is harmless
        with pytest.raises(emu.dnn.DnnError) as info:
            model.infer(np.zeros((1, 3, 32, 32), np.float32))
        assert info.value.code == hbdnn.HB_DNN_INVALID_DNN_HANDLE

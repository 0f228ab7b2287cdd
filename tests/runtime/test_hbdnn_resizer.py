"""The BPU's resizer through hbDNN: hbDNNResize, and hbDNNRoiInfer with its batch rounding."""

import numpy as np
import pytest

from emu.nn import compiler, resizer, zoo
from emu.runtime import hbdnn as dnn
from emu.runtime import session
from emu.runtime.hbsys import hbSysAllocCachedMem, hbSysFreeMem
from emu.soc.config import load_config

SOC = load_config("j5", None, []).soc
RNG = np.random.default_rng(11)


@pytest.fixture
def sess():
    yield session.start("j5")


def _image(kind, valid, aligned, data=None):
    """An image tensor in a pool buffer of `aligned`'s bytes, filled with `data` or zeros."""
    tensor = dnn.hbDNNTensor()
    tensor.properties.tensorType = kind
    tensor.properties.validShape = dnn.hbDNNTensorShape(valid)
    tensor.properties.alignedShape = dnn.hbDNNTensorShape(aligned)
    nbytes = int(np.prod(aligned)) // 2 if kind == dnn.HB_DNN_IMG_TYPE_NV12 \
        else int(np.prod(aligned))
    assert hbSysAllocCachedMem(tensor.sysMem[0], nbytes) == 0
    if data is not None:
        tensor.sysMem[0].virAddr[:data.size] = data.reshape(-1)
    return tensor


def _resize(out, src, roi, **ctrl_fields):
    ctrl = dnn.hbDNNResizeCtrlParam()
    assert dnn.HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM(ctrl) == 0
    for key, value in ctrl_fields.items():
        setattr(ctrl, key, value)
    return dnn.hbDNNResize(out, src, roi, ctrl)


@pytest.mark.parametrize("fmt, kind, channels", [
    ("gray", dnn.HB_DNN_IMG_TYPE_Y, 1), ("rgb", dnn.HB_DNN_IMG_TYPE_RGB, 3),
    ("nv12", dnn.HB_DNN_IMG_TYPE_NV12, 1)])
def test_hbdnn_resize_computes_the_resizer_and_runs_on_the_bpu(sess, fmt, kind, channels):
    h, w, wa = 40, 50, 64  # rows of 64 pixels: a 16-byte multiple for every format
    if fmt == "nv12":
        valid, aligned, rows = (1, 3, h, w), (1, 3, h, wa), h * 3 // 2
    else:
        valid, aligned, rows = (1, h, w, channels), (1, h, wa, channels), h
    data = RNG.integers(0, 256, (rows, wa * channels), dtype=np.uint8)
    src = _image(kind, valid, aligned, data)
    dst_valid = (1, 3, 24, 32) if fmt == "nv12" else (1, 24, 32, channels)
    out = _image(kind, dst_valid, dst_valid)
    roi = dnn.hbDNNRoi(4, 6, 43, 37)
    rc, task = _resize(out, src, roi, priority=7)
    assert rc == 0
    assert dnn.hbDNNWaitTaskDone(task, 0) == 0
    want = resizer.resize(data, fmt, w, h, wa * channels, resizer.Roi(4, 6, 43, 37), 32, 24)
    got = out.sysMem[0].virAddr[:want.size]
    assert np.array_equal(got, want.reshape(-1))
    (seg,) = task.segments
    assert seg["kind"] == "bpu" and seg["busy_ps"] > 0
    assert sess.stats()["bpu"]["function_calls"] == 1
    # the whole image when no ROI is given
    rc, task2 = _resize(out, src, None)
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task2, 0) == 0
    whole = resizer.resize(data, fmt, w, h, wa * channels, resizer.Roi(0, 0, w - 1, h - 1),
                           32, 24)
    assert np.array_equal(out.sysMem[0].virAddr[:whole.size], whole.reshape(-1))
    for t in (task, task2):
        assert dnn.hbDNNReleaseTask(t) == 0
    assert hbSysFreeMem(src.sysMem[0]) == 0 and hbSysFreeMem(out.sysMem[0]) == 0


def test_hbdnn_resize_misuse(sess):
    src = _image(dnn.HB_DNN_IMG_TYPE_Y, (1, 32, 32, 1), (1, 32, 32, 1))
    out = _image(dnn.HB_DNN_IMG_TYPE_Y, (1, 8, 8, 1), (1, 8, 8, 1))
    rgb = _image(dnn.HB_DNN_IMG_TYPE_RGB, (1, 8, 8, 3), (1, 8, 16, 3))
    bad = dnn.HB_DNN_INVALID_ARGUMENT
    assert _resize(out, src, dnn.hbDNNRoi(0, 0, 40, 10)) == (bad, None)  # outside the image
    assert _resize(out, src, dnn.hbDNNRoi(0, 0, 31, 31)) == (bad, None)  # 4x down: too far
    assert _resize(out, src, dnn.hbDNNRoi(0, 0, 0, 5)) == (bad, None)  # 1 pixel wide
    assert _resize(rgb, src, None) == (bad, None)  # formats differ
    assert _resize(out, src, None, resizeType=1) == (bad, None)
    assert _resize(out, src, None, priority=256) == (bad, None)
    assert _resize(out, src, "roi") == (bad, None)
    assert dnn.hbDNNResize(out, src, None, None) == (bad, None)
    assert dnn.HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM(None) == bad
    narrow = _image(dnn.HB_DNN_IMG_TYPE_Y, (1, 32, 24, 1), (1, 32, 24, 1))  # stride 24
    assert _resize(out, narrow, None) == (bad, None)
    rc, task = _resize(out, src, dnn.hbDNNRoi(0, 0, 15, 15))
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0 and dnn.hbDNNReleaseTask(task) == 0


@pytest.fixture(scope="module")
def roi_model(tmp_path_factory):
    options = compiler.CompileOptions(input_type="nv12", input_source="resizer", batch=2,
                                      calib_random=2)
    model = compiler.compile_model(zoo.build("mobilenetv2", (32, 32), classes=10), "roi",
                                   options, SOC)
    plain = compiler.compile_model(zoo.build("mobilenetv2", (32, 32), classes=10), "plain",
                                   compiler.CompileOptions(input_type="nv12", calib_random=2),
                                   SOC)
    path = tmp_path_factory.mktemp("roi") / "roi.hbm"
    path.write_bytes(compiler.dumps([model, plain]))
    return path, model


def _roi_infer(handle, images, rois, rows, **ctrl_fields):
    out = dnn.hbDNNTensor()
    out.properties.validShape = dnn.hbDNNTensorShape((rows, 10))
    assert hbSysAllocCachedMem(out.sysMem[0], rows * 10 * 4) == 0
    ctrl = dnn.hbDNNInferCtrlParam()
    dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
    for key, value in ctrl_fields.items():
        setattr(ctrl, key, value)
    rc, task = dnn.hbDNNRoiInfer([out], images, rois, len(rois), handle, ctrl)
    return rc, task, out


def test_roi_infer_rounds_the_output_up_to_the_model_batch(sess, roi_model):
    path, model = roi_model
    rc, packed = dnn.hbDNNInitializeFromFiles([str(path)])
    assert rc == 0
    _, handle = dnn.hbDNNGetModelHandle(packed, "roi")
    sources = [RNG.integers(0, 256, (72, 64), dtype=np.uint8) for _ in range(3)]  # 48 x 64
    images = [_image(dnn.HB_DNN_IMG_TYPE_NV12, (1, 3, 48, 60), (1, 3, 48, 64), s)
              for s in sources]
    boxes = [(0, 0, 59, 47), (10, 4, 41, 35), (20, 8, 59, 47)]
    rois = [dnn.hbDNNRoi(*b) for b in boxes]
    rc, task, out = _roi_infer(handle, images, rois, 4)  # data_batch 3, model_batch 2
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
    got = out.sysMem[0].virAddr[:4 * 10 * 4].view(np.float32).reshape(4, 10)
    crops = [resizer.resize(s, "nv12", 60, 48, 64, resizer.Roi(*b), 32, 32).reshape(48, 32)
             for s, b in zip(sources, boxes, strict=True)]
    name = model.graph.inputs[0]
    first = model.run({name: np.stack(crops[:2])})[model.graph.outputs[0]]
    second = model.run({name: np.stack([crops[2], np.zeros((48, 32), np.uint8)])})
    assert np.array_equal(got[:2], first)
    assert np.array_equal(got[2:], second[model.graph.outputs[0]])  # row 3: not valid data
    # two batch groups, each with one resizer job (its ROIs) in its first function call
    bpu = [s for s in task.segments if s["kind"] == "bpu"]
    assert len(bpu) == 2
    stats = sess.stats()["bpu"]
    assert stats["layer_groups"] == 2 * sum(map(len, model.subgraphs().values())) + 2
    # the resizer fills the model's input on chip: the BPU reads the ROIs (NV12, 1.5 bytes a
    # pixel) where an hbDNNInfer of the model reads its whole input image
    ((_, calls),) = model.calls(SOC)
    alone = sum(cost.ddr_bytes for call in calls for cost in call.costs)
    image = 2 * 48 * 32  # two frames of 32 x 32 NV12: 48 rows of 32 bytes
    roi_bytes = (60 * 48 + 32 * 32 + 40 * 40) * 3 // 2
    moved = sum(n for who, n in sess.soc.ddr.bytes_by_requester.items()
                if who.startswith("soc.bpu."))
    assert moved == 2 * (alone - image) + roi_bytes
    bad = dnn.HB_DNN_INVALID_ARGUMENT
    assert _roi_infer(handle, images, rois, 3)[0] == bad  # rows not rounded up
    assert _roi_infer(handle, images[:2], rois, 2)[0] == bad  # one image per ROI
    assert _roi_infer(handle, images, [*rois[:2], dnn.hbDNNRoi(0, 0, 63, 47)], 4)[0] == bad
    assert _roi_infer(handle, [], [], 2)[0] == bad  # roiCount 0
    _, plain = dnn.hbDNNGetModelHandle(packed, "plain")
    assert _roi_infer(plain, images, rois, 4)[0] == dnn.HB_DNN_API_USE_ERROR
    ctrl = dnn.hbDNNInferCtrlParam()
    dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
    assert dnn.hbDNNInfer([out], images[:1], handle, ctrl) == (dnn.HB_DNN_API_USE_ERROR, None)
    assert dnn.hbDNNReleaseTask(task) == 0


def test_the_input_source_option_is_checked():
    with pytest.raises(Exception, match="--input-source resizer: needs an image"):
        compiler.CompileOptions(input_source="resizer")
    with pytest.raises(Exception, match="--input-source camera"):
        compiler.CompileOptions(input_type="nv12", input_source="camera")


def test_emu_perf_refuses_a_resizer_model_in_one_line(roi_model, capsys):
    # emu perf submits hbDNNInfer, which a resizer-input model refuses; it says so before
    # any frame instead of failing inside a worker thread.
    from emu.cli.main import main

    path, _ = roi_model
    code = main(["perf", str(path), "--model-name", "roi"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "model roi takes its input from the resizer" in err and "--input-source ddr" in err

"""More public board programs ported call by call (examples/ports/): OpenExplorer's
multi-model batch and tensor tutorial, and a multi-threaded classifier in the samples'
style; each gives what the float model or reference gives."""

import cv2
import numpy as np
import pytest

from emu.runtime import session
from emu.runtime.hbdnn import (
    HB_DNN_IMG_TYPE_BGR,
    HB_DNN_IMG_TYPE_NV12,
    HB_DNN_IMG_TYPE_NV12_SEPARATE,
    HB_DNN_IMG_TYPE_RGB,
    HB_DNN_IMG_TYPE_Y,
    HB_DNN_IMG_TYPE_YUV444,
    HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM,
    HB_DNN_LAYOUT_NCHW,
    HB_DNN_LAYOUT_NHWC,
    HB_DNN_PRIORITY_HIGHEST,
    HB_DNN_PRIORITY_LOWEST,
    hbDNNReleaseTask,
    hbDNNResize,
    hbDNNResizeCtrlParam,
    hbDNNTensor,
    hbDNNTensorShape,
    hbDNNWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_MEM_CACHE_INVALIDATE,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
)

from .port_kit import (
    PHOTOS,
    SIZE,
    assert_float_top5,
    bilinear_corners,
    nv12_classifier,
    photo,
    port,
)


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory):
    """ResNet-18 and MobileNetV2 for NV12 input, each in its own file, as the sample's
    GoogLeNet and MobileNetV2 are, their scores S32 with a scale per class as the sample's
    models give them."""
    folder = tmp_path_factory.mktemp("oe_ports")
    return [nv12_classifier(name, folder, int32_scores=True)
            for name in ("resnet18", "mobilenetv2")]


def test_the_multi_model_batch_port_gives_both_float_models_top5(classifiers, capsys):
    multi_model_batch = port("multi_model_batch")
    (path_a, model_a), (path_b, model_b) = classifiers
    # one picture for both, as the sample gives its zebra twice (the seeded, untrained
    # weights give close scores; on this photo int8 keeps both models' top five classes)
    pictures = ("astronaut.png", "astronaut.png")
    with session.Session() as sess:
        live = sess.soc.pool.live_buffers
        top_a, top_b = multi_model_batch.run_multi_model_batch(
            f"{path_a},{path_b}", ",".join(str(PHOTOS / p) for p in pictures), 5, SIZE)
        assert sess.soc.pool.live_buffers == live  # the four buffers freed
    assert_float_top5(model_a, photo(pictures[0]), top_a)
    assert_float_top5(model_b, photo(pictures[1]), top_b)
    out = capsys.readouterr().out
    assert f"googlenet class result id: {top_a[0].id}" in out
    assert f"mobilenetv2 class result id: {top_b[0].id}" in out


def _resized_y(tensor, out_h, out_w):
    """The Y plane of `tensor` (a Y or NV12 image) as the runtime's resizer scales it to
    out_h x out_w: a reader of the tensor's rows that knows only its shapes."""
    props = tensor.properties
    out = hbDNNTensor()
    out.properties.tensorType, out.properties.tensorLayout = props.tensorType, props.tensorLayout
    out.properties.validShape = hbDNNTensorShape((1, props.validShape.dimensionSize[1],
                                                  out_h, out_w))
    out.properties.alignedShape = out.properties.validShape
    assert hbSysAllocCachedMem(out.sysMem[0], out_h * out_w * 3 // 2) == 0
    ctrl = hbDNNResizeCtrlParam()
    HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM(ctrl)
    rc, task = hbDNNResize(out, tensor, None, ctrl)
    assert rc == 0
    assert hbDNNWaitTaskDone(task, 0) == 0 and hbDNNReleaseTask(task) == 0
    hbSysFlushMem(out.sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE)
    y = out.sysMem[0].virAddr[:out_h * out_w].reshape(out_h, out_w).copy()
    assert hbSysFreeMem(out.sysMem[0]) == 0
    return y


def _rows(mem, rows, width, stride):
    """`rows` rows of `width` bytes, `stride` bytes apart, from a tensor's memory."""
    return mem.virAddr[:rows * stride].reshape(rows, stride)[:, :width]


# The tutorial's nine tensors, in its order. Seeds 7 and 12 draw an NV12 image of even
# height and width (108 x 1306, 256 x 1020), which the resizer takes.
_TENSORS = [(HB_DNN_IMG_TYPE_Y, HB_DNN_LAYOUT_NCHW), (HB_DNN_IMG_TYPE_NV12, HB_DNN_LAYOUT_NCHW),
            (HB_DNN_IMG_TYPE_NV12_SEPARATE, HB_DNN_LAYOUT_NCHW)] + [
    (kind, layout) for kind in (HB_DNN_IMG_TYPE_BGR, HB_DNN_IMG_TYPE_RGB, HB_DNN_IMG_TYPE_YUV444)
    for layout in (HB_DNN_LAYOUT_NCHW, HB_DNN_LAYOUT_NHWC)]


@pytest.mark.parametrize("seed", [7, 12])
def test_the_tensor_tutorial_port_lays_out_each_image_as_its_shapes_say(seed, monkeypatch,
                                                                          capsys):
    tensor_example = port("tensor_example")
    # the program's 1920 x 1080 x 3 byte buffer holds a photo
    data = cv2.resize(cv2.imread(str(PHOTOS / "astronaut.png"), cv2.IMREAD_COLOR),
                      (1920, 1080)).reshape(-1)
    drawn, seen = [], []
    prepare, release = tensor_example.prepare_tensor, tensor_example.release_tensor

    def note_the_size(height, width, *args):
        drawn.append((height, width))
        prepare(height, width, *args)

    def check_then_release(tensor):
        props = tensor.properties
        kind, layout = props.tensorType, props.tensorLayout
        valid = tuple(props.validShape.dimensionSize[:props.validShape.numDimensions])
        aligned = tuple(props.alignedShape.dimensionSize[:props.alignedShape.numDimensions])
        nchw = layout == HB_DNN_LAYOUT_NCHW
        h, w = drawn[-1]
        stride = -(-w // 16) * 16
        assert 1 <= h <= 1080 and 1 <= w <= 1920
        if kind == HB_DNN_IMG_TYPE_Y:
            # the valid shape keeps its width after the aligned one (a copy) was widened
            assert valid == (1, 1, h, w) and aligned == (1, 1, h, stride)
            np.testing.assert_array_equal(_rows(tensor.sysMem[0], h, w, stride),
                                          data[:h * w].reshape(h, w))
            out_h, out_w = h // 2 + 1, w // 2 + 1
            diff = np.abs(_resized_y(tensor, out_h, out_w).astype(np.float64)
                          - bilinear_corners(data[:h * w].reshape(h, w), out_h, out_w))
            assert diff.max() <= 2 and diff.mean() < 0.5
        elif kind in (HB_DNN_IMG_TYPE_NV12, HB_DNN_IMG_TYPE_NV12_SEPARATE):
            assert valid == (1, 3, h, w) and aligned == (1, 3, h, stride)
            uv_mem = tensor.sysMem[1] if kind == HB_DNN_IMG_TYPE_NV12_SEPARATE else None
            np.testing.assert_array_equal(_rows(tensor.sysMem[0], h, w, stride),
                                          data[:h * w].reshape(h, w))
            uv = data[h * w:h * w + h // 2 * w].reshape(h // 2, w)
            if uv_mem is None:
                got_uv = tensor.sysMem[0].virAddr[h * stride:h * stride + h // 2 * stride]
                np.testing.assert_array_equal(got_uv.reshape(h // 2, stride)[:, :w], uv)
                out_h, out_w = h // 2 + h // 2 % 2, w // 2 + w // 2 % 2  # even, as NV12 is
                diff = np.abs(_resized_y(tensor, out_h, out_w).astype(np.float64)
                              - bilinear_corners(data[:h * w].reshape(h, w), out_h, out_w))
                assert diff.max() <= 2 and diff.mean() < 0.5
            else:
                np.testing.assert_array_equal(_rows(uv_mem, h // 2, w, stride), uv)
        else:
            pixels = data[:h * w * 3].reshape(h, w, 3)
            got = tensor.sysMem[0].virAddr[:h * w * 3]
            if nchw:
                assert valid == aligned == (1, 3, h, w)
                np.testing.assert_array_equal(got.reshape(3, h, w), pixels.transpose(2, 0, 1))
            else:
                assert valid == aligned == (1, h, w, 3)
                np.testing.assert_array_equal(got.reshape(h, w, 3), pixels)
        seen.append((kind, layout, valid, aligned))
        release(tensor)

    monkeypatch.setattr(tensor_example, "prepare_tensor", note_the_size)
    monkeypatch.setattr(tensor_example, "release_tensor", check_then_release)
    with session.Session() as sess:
        live = sess.soc.pool.live_buffers
        tensor_example.tensor_example(seed, data)
        assert sess.soc.pool.live_buffers == live  # every tensor's memory freed
    assert [(kind, layout) for kind, layout, _, _ in seen] == _TENSORS
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        f"Tensor data type:{kind}, Tensor layout: {layout}, "
        f"shape:{'x'.join(map(str, valid))}, aligned shape:{'x'.join(map(str, aligned))}"
        for kind, layout, valid, aligned in seen]


# Each worker's frames: photos on which int8 keeps its model's top five classes (the
# seeded, untrained weights give close scores).
_WORKER_FRAMES = {"resnet18_nv12": ("chelsea.png", "retina.jpg"),
                  "mobilenetv2_nv12": ("motorcycle_left.png", "ihc.png")}


def _run_threads(multi_thread_cls, model_file, names):
    """The threaded program with one worker per name in `names`: (model, its top fives,
    latencies) per worker, and the program's elapsed simulated ms."""
    workers = [(name, HB_DNN_PRIORITY_HIGHEST if k == 0 else HB_DNN_PRIORITY_LOWEST,
                [photo(p) for p in _WORKER_FRAMES[name]]) for k, name in enumerate(names)]
    with session.Session() as sess:
        live = sess.soc.pool.live_buffers
        args, elapsed_ms = multi_thread_cls.run_workers(model_file, workers, 5)
        assert sess.soc.pool.live_buffers == live  # every worker freed its memory
    return [(name, arg.results, arg.latency_ms) for name, arg in zip(names, args, strict=True)], \
        elapsed_ms


def test_the_threaded_classifier_overlaps_its_workers_and_gives_the_float_top5(classifiers,
                                                                               capsys):
    multi_thread_cls = port("multi_thread_cls")
    models = {model.name: model for _, model in classifiers}
    model_file = ",".join(str(path) for path, _ in classifiers)
    both = ["mobilenetv2_nv12", "resnet18_nv12"]
    runs, elapsed_ms = _run_threads(multi_thread_cls, model_file, both)
    for name, results, latencies in runs:
        assert len(results) == len(latencies) == 2
        for picture, top in zip(_WORKER_FRAMES[name], results, strict=True):
            assert_float_top5(models[name], photo(picture), top)
    assert "all workers done" in capsys.readouterr().out
    # the two threads' inferences overlap in simulated time (J5's two BPU cores): together
    # they take well under the sum of their times alone, and no less than the longer one
    alone_ms = [_run_threads(multi_thread_cls, model_file, [name])[1] for name in both]
    assert max(alone_ms) <= elapsed_ms < 0.8 * sum(alone_ms)
    # the same program gives the same results and the same timeline
    assert _run_threads(multi_thread_cls, model_file, both) == (runs, elapsed_ms)

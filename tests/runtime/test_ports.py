"""Public board programs ported call by call (examples/ports/) run on zoo models compiled
the way the programs' models are, and give what the float model gives."""

import cv2
import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from emu.nn import compiler, execute, reference, zoo
from emu.runtime import session
from emu.soc.config import load_config

from .port_kit import (
    CALIBRATION_PHOTOS,
    PHOTOS,
    assert_float_top5,
    bilinear_corners,
    nv12,
    nv12_classifier,
    photo,
    port,
)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """MobileNetV1 for NV12 input, calibrated on four photos, as the program's model is."""
    return nv12_classifier("mobilenetv1", tmp_path_factory.mktemp("port"))


def test_the_nv12_classifier_port_gives_the_float_models_top5(classifier, capsys):
    cls_perception_nv12 = port("cls_perception_nv12")
    path, model = classifier
    bgr = photo("chelsea.png")  # a photo calibration did not see
    with session.Session():
        top = cls_perception_nv12.classify(str(path), bgr, 5)
    assert "DNN runtime version" in capsys.readouterr().out
    assert_float_top5(model, bgr, top)


@pytest.mark.parametrize(("crop", "size"), [((300, 437), (224, 224)), ((384, 512), (160, 200)),
                                            ((64, 90), (200, 240))])
def test_the_resize_tutorial_port_scales_as_the_float_bilinear_does(crop, size):
    resize_y = port("resize_y")
    gray = cv2.imread(str(PHOTOS / "camera.png"), cv2.IMREAD_GRAYSCALE)[:crop[0], :crop[1]]
    with session.Session() as sess:
        live = sess.soc.pool.live_buffers
        out = resize_y.resize(gray, *size)
        assert sess.soc.pool.live_buffers == live  # both buffers freed, as the program does
    assert out.shape == size and out.dtype == np.uint8
    # J5's 16.16 step and 8-bit weights against exact positions: within two levels
    diff = np.abs(out.astype(np.float64) - bilinear_corners(gray, *size))
    assert diff.max() <= 2 and diff.mean() < 0.5


YOLO_SIZE = 160


def _rdk_yolov8n() -> onnx.ModelProto:
    """YOLOv8n as the RDK model zoo exports it: each head's output transposed to NHWC. The
    box heads are set as a trained head leans: weights 4 times larger, and a bias falling
    by 0.4 a bin, so that the seeded, untrained model gives boxes of a few strides with
    varied sides (not all the mean of 16 bins, wider than the picture)."""
    model = zoo.build("yolov8n", (YOLO_SIZE, YOLO_SIZE))
    graph = model.graph
    writers = {out: node for node in graph.node for out in node.output}
    weights = {init.name: init for init in graph.initializer}
    outputs = list(graph.output)
    del graph.output[:]
    for value in outputs:
        n, c, h, w = (d.dim_value for d in value.type.tensor_type.shape.dim)
        conv = writers[value.name]
        if value.name.startswith("box"):
            weight, bias = weights[conv.input[1]], weights[conv.input[2]]
            weight.CopyFrom(onnx.numpy_helper.from_array(
                onnx.numpy_helper.to_array(weight) * np.float32(4), weight.name))
            ramp = np.tile(np.arange(16, dtype=np.float32) * np.float32(-0.4), 4)
            bias.CopyFrom(onnx.numpy_helper.from_array(
                onnx.numpy_helper.to_array(bias) + ramp, bias.name))
        conv.output[0] = value.name + "_nchw"
        graph.node.append(onnx.helper.make_node("Transpose", [conv.output[0]], [value.name],
                                                perm=[0, 2, 3, 1]))
        graph.output.append(onnx.helper.make_tensor_value_info(
            value.name, onnx.TensorProto.FLOAT, [n, h, w, c]))
    onnx.checker.check_model(model)
    return model


def build_detectors(folder, builds=("rdk", "all_float")):
    """The RDK export compiled as the model zoo's README does: NV12 input, pixels / 255, the
    box outputs' Dequantize removed (int32 accumulators), the class outputs float ("rdk");
    and with every output float ("all_float"). {build: (file, model)} in `folder`."""
    calib = folder / "calib"
    calib.mkdir()
    for k, name in enumerate(CALIBRATION_PHOTOS):
        np.save(calib / f"{k}.npy", nv12(cv2.resize(cv2.imread(str(PHOTOS / name)),
                                                     (YOLO_SIZE, YOLO_SIZE))))
    onnx_model = _rdk_yolov8n()
    soc = load_config("j5", None, []).soc
    kinds = {"rdk": tuple((o.name, "int32" if o.name.startswith("box") else "float")
                          for o in onnx_model.graph.output), "all_float": ()}
    made = {}
    for build in builds:
        model = compiler.compile_model(onnx_model, "yolov8n_nv12", compiler.CompileOptions(
            input_type="nv12", scale=(1 / 255,) * 3, calib_dir=calib,
            output_types=kinds[build]), soc)
        path = folder / f"{build}.hbm"
        path.write_bytes(compiler.dumps([model]))
        made[build] = (path, model)
    return made


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    return build_detectors(tmp_path_factory.mktemp("yolo"))


def mid_threshold(outputs: dict[str, np.ndarray]) -> float:
    """A score threshold halfway between two logits the cells take, with 25 or more cells
    above it, so that a test looks at a few dozen candidates whatever the seeded weights
    give."""
    logits = _cell_boxes(outputs)[1]
    levels = np.unique(logits)[::-1]
    k = next(k for k, v in enumerate(levels) if (logits >= v).sum() >= 25)
    return float(1 / (1 + np.exp(-(levels[k] + levels[k + 1]) / 2)))


def _cell_boxes(outputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every cell's (best class, its logit, box corners in model pixels), stride 8 first:
    the detector's decoding written plainly over whole arrays (DFL as a softmax
    expectation), on float outputs."""
    ids, logits, boxes = [], [], []
    for level, stride in ((3, 8), (4, 16), (5, 32)):
        cls = outputs[f"cls_p{level}"][0].astype(np.float64)
        box = outputs[f"box_p{level}"][0].astype(np.float64)
        h, w = cls.shape[:2]
        bins = np.exp(box.reshape(h, w, 4, 16))
        dist = (bins * np.arange(16)).sum(axis=3) / bins.sum(axis=3)
        ys, xs = np.mgrid[0:h, 0:w] + 0.5
        boxes.append((np.stack([xs - dist[..., 0], ys - dist[..., 1], xs + dist[..., 2],
                                ys + dist[..., 3]], axis=2) * stride).reshape(-1, 4))
        ids.append(cls.argmax(axis=2).reshape(-1))
        logits.append(cls.max(axis=2).reshape(-1))
    return np.concatenate(ids), np.concatenate(logits), np.concatenate(boxes)


def _reference_detections(outputs: dict[str, np.ndarray], threshold: float, nms: float,
                          scale: tuple[float, float]) -> list[tuple[int, np.ndarray]]:
    """`_cell_boxes` above the score threshold, greedy NMS per class, in picture pixels."""
    ids, logits, boxes = _cell_boxes(outputs)
    scores = 1 / (1 + np.exp(-logits))
    kept = []
    for cls_id in np.unique(ids[scores >= threshold]):
        mine = np.flatnonzero((ids == cls_id) & (scores >= threshold))
        chosen: list[np.ndarray] = []
        for k in mine[np.argsort(-scores[mine], kind="stable")]:
            if all(_iou(boxes[k], other) <= nms for other in chosen):
                chosen.append(boxes[k])
        kept += [(int(cls_id), c / np.array([scale[1], scale[0], scale[1], scale[0]]))
                 for c in chosen]
    return kept


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter = width * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def test_the_yolov8_nv12_port_finds_the_boxes_of_its_outputs_and_they_are_the_float_models(
        detector):
    yolo = port("yolov8_detect_nv12")
    path, model = detector["rdk"]
    bgr = cv2.imread(str(PHOTOS / "chelsea.png"))  # 451 x 300, not seen by calibration
    src_h, src_w = bgr.shape[:2]
    feeds = {model.graph.inputs[0]: nv12(cv2.resize(bgr, (YOLO_SIZE, YOLO_SIZE)))}
    floats = reference.run_float(model.graph, feeds)
    ours = execute.run(model.quant, feeds)  # the int8 model's outputs, dequantised
    threshold = mid_threshold(ours)
    with session.Session() as sess:
        live = sess.soc.pool.live_buffers
        rc, found = yolo.detect(str(path), bgr, threshold, 0.7)
        assert sess.soc.pool.live_buffers == live  # the program frees what it allocated
    assert rc == 0
    # 1. The port decodes what the model hands over (float classes, int32 boxes scaled per
    # channel along NHWC's last axis) into the boxes a plain decoding of the same outputs
    # gives: same classes, same places, same count.
    want = _reference_detections(ours, threshold, 0.7, (YOLO_SIZE / src_h, YOLO_SIZE / src_w))
    assert 20 <= len(want) == len(found)
    clip = np.array([src_w, src_h, src_w, src_h], np.float64)
    for cls_id, corners in want:
        corners = np.clip(corners, 0, clip)
        assert max(_iou(corners, np.array(f[2:])) for f in found if f[0] == cls_id) > 0.999
    # 2. Those outputs are the float model's: every cell's box in place (its box head's
    # int32 accumulators lose nothing the int8 features did not), and the class logits
    # within a few int8 steps. (The seeded, untrained class head scores the 80 classes of a
    # cell alike, so which class wins a cell is a near-tie that int8 may flip.)
    _, float_logits, float_boxes = _cell_boxes(floats)
    _, our_logits, our_boxes = _cell_boxes(ours)
    ious = np.array([_iou(a, b) for a, b in zip(float_boxes, our_boxes, strict=True)])
    assert np.quantile(ious, 0.01) > 0.95 and ious.min() > 0.8
    assert np.abs(float_logits - our_logits).max() < 0.2
    top = set(np.argsort(-float_logits)[:30]) & set(np.argsort(-our_logits)[:30])
    assert len(top) >= 24


def test_the_yolov8_port_refuses_a_model_with_float_boxes_as_the_c_program_does(detector,
                                                                                 capsys):
    yolo = port("yolov8_detect_nv12")
    path, _ = detector["all_float"]
    with session.Session():
        rc, found = yolo.detect(str(path), cv2.imread(str(PHOTOS / "chelsea.png")), 0.5, 0.7)
    assert (rc, found) == (-1, [])
    assert "QuantiType is not SCALE" in capsys.readouterr().out


def test_handing_the_boxes_over_as_int32_spares_their_dequantize(detector):
    """The RDK build leaves only the class outputs to the CPU's dequantize: its CPU work is
    less than the all-float build's, by what the box outputs cost."""
    rdk, plain = detector["rdk"][1], detector["all_float"][1]
    soc = load_config("j5", None, []).soc
    cpu = {name: sum(layer.time_ps for layer in model.estimate(soc).layers
                     if layer.where == "cpu")
           for name, model in (("rdk", rdk), ("plain", plain))}
    (kept,) = [s for s in rdk.segments if s.kind == "dequantize"]
    assert set(kept.outputs) == {f"cls_p{k}" for k in (3, 4, 5)}
    assert 0 < cpu["rdk"] < cpu["plain"]

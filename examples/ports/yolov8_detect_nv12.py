"""Port of a public board program: the D-Robotics RDK model zoo's YOLOv8 detector for an NV12
model (`YOLOv8-Detect_YUV420SP`, C++), call by call.

The C++ program: load the model file (`hbDNNInitializeFromFiles`), list the packed models
and take the first (`hbDNNGetModelNameList`, `hbDNNGetModelHandle`); check that the model
has one input, of type HB_DNN_IMG_TYPE_NV12, layout NCHW and a 4-D valid shape (1, 3, H,
W), and six outputs, and find which output is which by its valid shape (NHWC: for each
stride 8, 16 and 32, one (1, H/s, W/s, classes) map of class logits and one (1, H/s, W/s,
4 x REG) map of box distributions); resize the picture to W x H, convert it to NV12
(OpenCV's I420, then the U and V planes interleaved), copy it into cached memory and clean
it; allocate each output's `alignedByteSize`; `hbDNNInfer` with the default control
parameters and `hbDNNWaitTaskDone`. Post-processing per stride: the class map must be float
(quantiType NONE) and the box map int32 codes with a scale per channel (SCALE), else the
program returns -1; invalidate both; per cell, the best class's logit is compared with the
threshold's logit (no sigmoid for cells that fail), the box's four distances are the
expectations of a softmax over REG bins of the dequantised codes (DFL), and the cell gives
the box (x + 0.5 - l, y + 0.5 - t, x + 0.5 + r, y + 0.5 + b) x stride. Then
`cv::dnn::NMSBoxes` per class, boxes scaled back to the picture and clipped; release the
task, free the buffers, release the model. Every call's code is checked as the C program's
macro does; here `check` raises `Failed`, which `detect` turns into the return code.

The model is what the RDK model zoo exports: YOLOv8 with each head's output transposed to
NHWC, compiled for NV12 input with the box outputs' Dequantize removed (emu: `emu compile
--input-type nv12 --output-type box_p3=int32 ...`).

    python examples/ports/yolov8_detect_nv12.py --model-file M.hbm --image PICTURE
"""

from __future__ import annotations

import argparse
import math
import sys

import cv2
import numpy as np

from emu.runtime.hbdnn import (
    HB_DNN_IMG_TYPE_NV12,
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM,
    HB_DNN_LAYOUT_NCHW,
    NONE,
    SCALE,
    hbDNNGetInputCount,
    hbDNNGetInputTensorProperties,
    hbDNNGetModelHandle,
    hbDNNGetModelNameList,
    hbDNNGetOutputCount,
    hbDNNGetOutputTensorProperties,
    hbDNNInfer,
    hbDNNInferCtrlParam,
    hbDNNInitializeFromFiles,
    hbDNNRelease,
    hbDNNReleaseTask,
    hbDNNTensor,
    hbDNNTensorProperties,
    hbDNNWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_CACHE_INVALIDATE,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
)

CLASSES_NUM = 80
REG = 16
STRIDES = (8, 16, 32)
NMS_TOP_K = 300


class Failed(Exception):
    """A call returned a non-zero code (the C macro's early return)."""


def check(value: int, errmsg: str) -> None:
    if value != 0:
        print(f"[ERROR] {errmsg}, error code: {value}", file=sys.stderr)
        raise Failed(value)


def bgr2nv12(bgr: np.ndarray) -> np.ndarray:
    """The program's colour conversion: I420 from OpenCV, then U and V interleaved."""
    height, width = bgr.shape[:2]
    area = height * width
    yuv420p = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_I420).reshape(area * 3 // 2)
    nv12 = np.empty(area * 3 // 2, np.uint8)
    nv12[:area] = yuv420p[:area]
    nv12[area::2] = yuv420p[area:area * 5 // 4]
    nv12[area + 1::2] = yuv420p[area * 5 // 4:]
    return nv12


def detect(model_file: str, bgr: np.ndarray, score_threshold: float = 0.25,
           nms_threshold: float = 0.7) -> tuple[int, list[tuple[int, float, float, float,
                                                                 float, float]]]:
    """(0, detections as (class id, score, x1, y1, x2, y2) in picture pixels), or (the
    failing call's code or -1, [])."""
    found: list[tuple[int, float, float, float, float, float]] = []
    try:
        return _detect(model_file, bgr, score_threshold, nms_threshold, found), found
    except Failed as failure:
        return int(failure.args[0]), []


def _detect(model_file: str, bgr: np.ndarray, score_threshold: float, nms_threshold: float,
            found: list[tuple[int, float, float, float, float, float]]) -> int:
    # 0. load the model
    ret, packed_dnn_handle = hbDNNInitializeFromFiles([model_file], 1)
    check(ret, "hbDNNInitializeFromFiles failed")
    ret, model_name_list, model_count = hbDNNGetModelNameList(packed_dnn_handle)
    check(ret, "hbDNNGetModelNameList failed")
    if model_count > 1:
        print("This model file have more than 1 model, only use model 0.")
    model_name = model_name_list[0]
    ret, dnn_handle = hbDNNGetModelHandle(packed_dnn_handle, model_name)
    check(ret, "hbDNNGetModelHandle failed")
    try:
        return _run(dnn_handle, bgr, score_threshold, nms_threshold, found)
    finally:
        hbDNNRelease(packed_dnn_handle)


def _run(dnn_handle: object, bgr: np.ndarray, score_threshold: float,
         nms_threshold: float, found: list[tuple[int, float, float, float, float, float]]
         ) -> int:
    # 1. the input: one NV12 tensor, NCHW, (1, 3, H, W)
    ret, input_count = hbDNNGetInputCount(dnn_handle)
    check(ret, "hbDNNGetInputCount failed")
    input_properties = hbDNNTensorProperties()
    check(hbDNNGetInputTensorProperties(input_properties, dnn_handle, 0),
          "hbDNNGetInputTensorProperties failed")
    if input_count > 1:
        print("Your Model have more than 1 input, please check!")
        return -1
    if input_properties.tensorType != HB_DNN_IMG_TYPE_NV12:
        print("input tensor type is not HB_DNN_IMG_TYPE_NV12, please check!")
        return -1
    if input_properties.tensorLayout != HB_DNN_LAYOUT_NCHW:
        print("input tensor layout is not HB_DNN_LAYOUT_NCHW, please check!")
        return -1
    if input_properties.validShape.numDimensions != 4:
        print("input tensor validShape.numDimensions is not 4, please check!")
        return -1
    input_h = input_properties.validShape.dimensionSize[2]
    input_w = input_properties.validShape.dimensionSize[3]

    # 2. the outputs: six, found by their valid shapes
    ret, output_count = hbDNNGetOutputCount(dnn_handle)
    check(ret, "hbDNNGetOutputCount failed")
    if output_count != 6:
        print("Your Model's outputs num is not 6, please check!")
        return -1
    order_we_want = []
    for stride in STRIDES:
        order_we_want += [(input_h // stride, input_w // stride, CLASSES_NUM),
                          (input_h // stride, input_w // stride, 4 * REG)]
    order = [0] * 6
    for i in range(6):
        for j in range(6):
            output_properties = hbDNNTensorProperties()
            check(hbDNNGetOutputTensorProperties(output_properties, dnn_handle, j),
                  "hbDNNGetOutputTensorProperties failed")
            h, w, c = output_properties.validShape.dimensionSize[1:4]
            if (h, w, c) == order_we_want[i]:
                order[i] = j
                break
    if sum(order) != 0 + 1 + 2 + 3 + 4 + 5:
        print("Outputs order check FAILED, use default")
        order = list(range(6))

    # 3. preprocess: resize, then BGR to NV12
    src_h, src_w = bgr.shape[:2]
    resize_img = cv2.resize(bgr, (input_w, input_h))
    y_scale, x_scale = input_h / src_h, input_w / src_w
    ynv12 = bgr2nv12(resize_img)

    # 4. tensors: the input in cached memory, cleaned; each output its aligned size
    input_tensor = hbDNNTensor()
    input_tensor.properties = input_properties
    check(hbSysAllocCachedMem(input_tensor.sysMem[0], 3 * input_h * input_w // 2),
          "hbSysAllocCachedMem failed")
    input_tensor.sysMem[0].virAddr[:ynv12.size] = ynv12
    hbSysFlushMem(input_tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN)
    output = [hbDNNTensor() for _ in range(output_count)]
    for i in range(output_count):
        check(hbDNNGetOutputTensorProperties(output[i].properties, dnn_handle, i),
              "hbDNNGetOutputTensorProperties failed")
        check(hbSysAllocCachedMem(output[i].sysMem[0], output[i].properties.alignedByteSize),
              "hbSysAllocCachedMem failed")

    # 5. inference
    infer_ctrl_param = hbDNNInferCtrlParam()
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM(infer_ctrl_param)
    ret, task_handle = hbDNNInfer(output, [input_tensor], dnn_handle, infer_ctrl_param)
    check(ret, "hbDNNInfer failed")
    check(hbDNNWaitTaskDone(task_handle, 0), "hbDNNWaitTaskDone failed")

    # 6. post-process each stride
    conf_thres_raw = -math.log(1 / score_threshold - 1)
    bboxes: list[list[tuple[float, float, float, float]]] = [[] for _ in range(CLASSES_NUM)]
    scores: list[list[float]] = [[] for _ in range(CLASSES_NUM)]
    try:
        for k, stride in enumerate(STRIDES):
            cls_tensor, bbox_tensor = output[order[2 * k]], output[order[2 * k + 1]]
            if cls_tensor.properties.quantiType != NONE:
                print(f"output[order[{2 * k}]] QuantiType is not NONE, please check!")
                return -1
            if bbox_tensor.properties.quantiType != SCALE:
                print(f"output[order[{2 * k + 1}]] QuantiType is not SCALE, please check!")
                return -1
            hbSysFlushMem(cls_tensor.sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE)
            hbSysFlushMem(bbox_tensor.sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE)
            cls_raw = cls_tensor.sysMem[0].virAddr.view(np.float32)
            bbox_raw = bbox_tensor.sysMem[0].virAddr.view(np.int32)
            bbox_scale = np.asarray(bbox_tensor.properties.scale.scaleData, np.float32)
            _decode(cls_raw, bbox_raw, bbox_scale, input_h // stride, input_w // stride,
                    stride, conf_thres_raw, bboxes, scores)

        # 7. NMS per class, boxes back to the picture
        for cls_id in range(CLASSES_NUM):
            if not bboxes[cls_id]:
                continue
            indices = cv2.dnn.NMSBoxes(bboxes[cls_id], scores[cls_id], score_threshold,
                                       nms_threshold, 1.0, NMS_TOP_K)
            for i in np.asarray(indices, np.int64).reshape(-1):
                x, y, w, h = bboxes[cls_id][i]
                x1 = min(max(x / x_scale, 0.0), float(src_w))
                y1 = min(max(y / y_scale, 0.0), float(src_h))
                x2 = min(max((x + w) / x_scale, 0.0), float(src_w))
                y2 = min(max((y + h) / y_scale, 0.0), float(src_h))
                found.append((cls_id, scores[cls_id][i], x1, y1, x2, y2))
    finally:
        # 8. release the task and the memory
        hbDNNReleaseTask(task_handle)
        hbSysFreeMem(input_tensor.sysMem[0])
        for tensor in output:
            hbSysFreeMem(tensor.sysMem[0])
    return 0


def _decode(cls_raw: np.ndarray, bbox_raw: np.ndarray, bbox_scale: np.ndarray, height: int,
            width: int, stride: int, conf_thres_raw: float,
            bboxes: list[list[tuple[float, float, float, float]]],
            scores: list[list[float]]) -> None:
    """One stride's cells, as the C loop walks them (the pointers advance by a cell)."""
    for h in range(height):
        for w in range(width):
            cell = h * width + w
            cur_cls_raw = cls_raw[cell * CLASSES_NUM:(cell + 1) * CLASSES_NUM]
            cur_bbox_raw = bbox_raw[cell * 4 * REG:(cell + 1) * 4 * REG]
            cls_id = 0
            for i in range(1, CLASSES_NUM):
                if cur_cls_raw[i] > cur_cls_raw[cls_id]:
                    cls_id = i
            if cur_cls_raw[cls_id] < conf_thres_raw:
                continue
            score = 1 / (1 + math.exp(-float(cur_cls_raw[cls_id])))
            ltrb = [0.0] * 4
            for i in range(4):
                total = 0.0
                for j in range(REG):
                    index_id = REG * i + j
                    dfl = math.exp(float(cur_bbox_raw[index_id]) * float(bbox_scale[index_id]))
                    ltrb[i] += dfl * j
                    total += dfl
                ltrb[i] /= total
            if ltrb[2] + ltrb[0] <= 0 or ltrb[3] + ltrb[1] <= 0:
                continue
            x1 = (w + 0.5 - ltrb[0]) * stride
            y1 = (h + 0.5 - ltrb[1]) * stride
            x2 = (w + 0.5 + ltrb[2]) * stride
            y2 = (h + 0.5 + ltrb[3]) * stride
            bboxes[cls_id].append((x1, y1, x2 - x1, y2 - y1))
            scores[cls_id].append(score)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-file", required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--score-threshold", type=float, default=0.25)
    parser.add_argument("--nms-threshold", type=float, default=0.7)
    args = parser.parse_args()
    bgr = cv2.imread(args.image, cv2.IMREAD_COLOR)
    if bgr is None:
        print(f"cannot read {args.image}", file=sys.stderr)
        return 2
    from emu.runtime import session

    with session.Session():
        ret, detections = detect(args.model_file, bgr, args.score_threshold,
                                 args.nms_threshold)
    for cls_id, score, x1, y1, x2, y2 in detections:
        print(f"class {cls_id} score {score:.3f} box ({x1:.1f}, {y1:.1f}, {x2:.1f}, {y2:.1f})")
    return 0 if ret == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

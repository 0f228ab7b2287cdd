"""Port of a public board program: the OE advanced sample `run_multi_model_batch`, which
runs two small NV12 classifiers as one task with `hbDNNInferCtrlParam.more`, call by call
in the C program's order and structure.

The C program: `hbDNNInitializeFromFiles` loads the comma-separated model files, the first
two names of `hbDNNGetModelNameList` give the two model handles; `read_image_2_nv12` reads
each picture, resizes it to the input size and converts it to NV12 (`bgr_to_nv12`: OpenCV's
I420, U and V interleaved); `prepare_nv12_tensor` copies input 0's properties into the
tensor, allocates H * W * 3 / 2 bytes of cached memory, copies the frame in and cleans it;
`prepare_tensor` fills each output's properties and allocates `alignedByteSize` bytes. Then
the batch: one `hbDNNInferCtrlParam` initialised once, `more = 1` for the first model onto
a null task handle, `more = 0` for the second onto the same handle, one
`hbDNNWaitTaskDone`; `get_topk_result` invalidates each output and keeps its best scores
over shape[1] * shape[2] * shape[3], applying SHIFT or SCALE; then `hbDNNReleaseTask`,
`hbSysFreeMem` of the four buffers and `hbDNNRelease`. Every call is checked by the C
macro that logs the message and returns the code: here `check`, which raises `Failed`.

The port differs from C only by docs/porting.md's rules, and in one place the note at the
line says: the input size is a parameter (the C program fixes 224 x 224). The scores are
read as int32_t, as the C program does for the sample's models, whose outputs are S32
accumulators with a scale per class (`emu compile --output-type NAME=int32`).

    python examples/ports/multi_model_batch.py --model_file=A.hbm,B.hbm
           --input_file=PICTURE_A,PICTURE_B [--image_size 224]
"""

from __future__ import annotations

import argparse
import heapq
import sys
from typing import NamedTuple

import cv2
import numpy as np

from emu.runtime.hbdnn import (
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM,
    SCALE,
    SHIFT,
    hbDNNGetInputTensorProperties,
    hbDNNGetModelHandle,
    hbDNNGetModelNameList,
    hbDNNGetOutputTensorProperties,
    hbDNNInfer,
    hbDNNInferCtrlParam,
    hbDNNInitializeFromFiles,
    hbDNNRelease,
    hbDNNReleaseTask,
    hbDNNTensor,
    hbDNNWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_CACHE_INVALIDATE,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
)


class Classification(NamedTuple):
    id: int
    score: float


class Failed(Exception):
    """A call returned a non-zero code (HB_CHECK_SUCCESS's early return)."""


def check(ret_code: int, errmsg: str) -> None:
    if ret_code != 0:
        print(f"{errmsg}, error code:{ret_code}", file=sys.stderr)
        raise Failed(ret_code)


def vlog(message: str) -> None:
    """The C program's VLOG(EXAMPLE_DEBUG) lines, on stderr as glog writes them."""
    print(message, file=sys.stderr)


def read_image_2_nv12(image_file: str, yuv_height: int, yuv_width: int
                      ) -> tuple[int, np.ndarray | None]:
    bgr_mat = cv2.imread(image_file, cv2.IMREAD_COLOR)
    if bgr_mat is None:
        vlog("image file not exist!")
        return -1, None
    mat = cv2.resize(bgr_mat, (yuv_width, yuv_height))
    return bgr_to_nv12(mat)


def bgr_to_nv12(bgr_mat: np.ndarray) -> tuple[int, np.ndarray | None]:
    """The picture as an (H * 3 / 2) x W NV12 frame (C's out-parameter `img_nv12`)."""
    height, width = bgr_mat.shape[:2]
    if height % 2 or width % 2:
        vlog("input img height and width must aligned by 2!")
        return -1, None
    yuv = cv2.cvtColor(bgr_mat, cv2.COLOR_BGR2YUV_I420).reshape(-1)
    img_nv12 = np.empty((height * 3 // 2, width), np.uint8)
    ynv12 = img_nv12.reshape(-1)
    uv_height, uv_width = height // 2, width // 2
    y_size = height * width
    ynv12[:y_size] = yuv[:y_size]  # memcpy of the Y plane
    nv12 = ynv12[y_size:]
    u_data = yuv[y_size:y_size + uv_height * uv_width]
    v_data = yuv[y_size + uv_height * uv_width:]
    nv12[0::2], nv12[1::2] = u_data, v_data  # the loop: *nv12++ = *u_data++; *nv12++ = *v_data++
    return 0, img_nv12


def prepare_nv12_tensor(input_tensor: hbDNNTensor, yuv_data: np.ndarray, dnn_handle: object,
                        image_height: int, image_width: int) -> None:
    input_count = 0
    ret, input_properties = hbDNNGetInputTensorProperties(dnn_handle, input_count)
    check(ret, "hbDNNGetInputTensorProperties failed")
    mem = input_tensor.sysMem[0]
    input_tensor.properties = input_properties  # C: a struct copy
    yuv_length = image_height * image_width * 3 // 2  # the input data is already aligned
    check(hbSysAllocCachedMem(mem, yuv_length), "hbSysAllocCachedMem failed")
    mem.virAddr[:yuv_length] = yuv_data.reshape(-1)[:yuv_length]  # memcpy
    check(hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN), "hbSysFlushMem failed")


def prepare_tensor(output: list[hbDNNTensor], dnn_handle: object, output_count: int) -> None:
    for i in range(output_count):
        ret, output[i].properties = hbDNNGetOutputTensorProperties(dnn_handle, i)
        check(ret, "hbDNNGetOutputTensorProperties failed")
        out_aligned_size = output[i].properties.alignedByteSize
        check(hbSysAllocCachedMem(output[i].sysMem[0], out_aligned_size),
              "hbSysAllocCachedMem failed")


def get_topk_result(tensor: hbDNNTensor, top_k: int) -> list[Classification]:
    hbSysFlushMem(tensor.sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE)
    queue: list[tuple[float, int]] = []  # a min-heap of the best top_k, as the C queue
    shape = tensor.properties.validShape.dimensionSize
    data = tensor.sysMem[0].virAddr.view(np.int32)
    shift = tensor.properties.shift.shiftData
    scale = tensor.properties.scale.scaleData
    for i in range(shape[1] * shape[2] * shape[3]):
        if tensor.properties.quantiType == SHIFT:
            score = float(data[i]) / (1 << shift[i])
        elif tensor.properties.quantiType == SCALE:
            score = float(data[i]) * scale[i]
        else:
            score = float(data[i])
        heapq.heappush(queue, (score, i))
        if len(queue) > top_k:
            heapq.heappop(queue)
    return [Classification(i, score) for score, i in sorted(queue, reverse=True)]


def run_multi_model_batch(model_file: str, input_file: str, top_k: int = 1,
                          image_size: int = 224) -> tuple[list[Classification], ...]:
    """The program's body (C's main after the flags): each model's top-k."""
    model_file_names = model_file.split(",")  # C: split(FLAGS_model_file, ',', ...)
    ret, packed_dnn_handle = hbDNNInitializeFromFiles(model_file_names, len(model_file_names))
    check(ret, "hbDNNInitializeFromFiles failed")
    vlog("hbDNNInitializeFromFiles success")

    ret, model_name_list, _model_count = hbDNNGetModelNameList(packed_dnn_handle)
    check(ret, "hbDNNGetModelNameList failed")
    vlog("hbDNNGetModelNameList success")

    ret, dnn_handle_googlenet = hbDNNGetModelHandle(packed_dnn_handle, model_name_list[0])
    check(ret, "hbDNNGetModelHandle failed")
    ret, dnn_handle_mobilenetv2 = hbDNNGetModelHandle(packed_dnn_handle, model_name_list[1])
    check(ret, "hbDNNGetModelHandle failed")
    vlog("hbDNNGetModelHandle success")

    input_file_path = input_file.split(",")
    ret, nv12_mat_googlenet = read_image_2_nv12(input_file_path[0], image_size, image_size)
    check(ret, "read_image_2_nv12 failed")
    ret, nv12_mat_mobilenetv2 = read_image_2_nv12(input_file_path[1], image_size, image_size)
    check(ret, "read_image_2_nv12 failed")
    assert nv12_mat_googlenet is not None and nv12_mat_mobilenetv2 is not None
    vlog("read image to nv12 success")

    input_tensor_googlenet = hbDNNTensor()
    prepare_nv12_tensor(input_tensor_googlenet, nv12_mat_googlenet, dnn_handle_googlenet,
                        image_size, image_size)
    input_tensor_mobilenetv2 = hbDNNTensor()
    prepare_nv12_tensor(input_tensor_mobilenetv2, nv12_mat_mobilenetv2,
                        dnn_handle_mobilenetv2, image_size, image_size)
    vlog("prepare input tensor success")

    output_tensor_googlenet = [hbDNNTensor()]
    prepare_tensor(output_tensor_googlenet, dnn_handle_googlenet, 1)
    output_tensor_mobilenetv2 = [hbDNNTensor()]
    prepare_tensor(output_tensor_mobilenetv2, dnn_handle_mobilenetv2, 1)
    vlog("prepare output tensor success")

    # Small models run briefly next to the cost of scheduling a task: n of them go as one
    # task, the first n - 1 submitted with `more` = 1 and the last with `more` = 0.
    task_handle = None
    infer_ctrl_param = hbDNNInferCtrlParam()
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM(infer_ctrl_param)

    infer_ctrl_param.more = 1
    ret, task_handle = hbDNNInfer(output_tensor_googlenet, [input_tensor_googlenet],
                                  dnn_handle_googlenet, infer_ctrl_param, task_handle)
    check(ret, "hbDNNInfer failed")
    infer_ctrl_param.more = 0
    ret, task_handle = hbDNNInfer(output_tensor_mobilenetv2, [input_tensor_mobilenetv2],
                                  dnn_handle_mobilenetv2, infer_ctrl_param, task_handle)
    check(ret, "hbDNNInfer failed")
    vlog("infer success")

    check(hbDNNWaitTaskDone(task_handle, 0), "hbDNNWaitTaskDone failed")
    vlog("task done")

    top_k_googlenet = get_topk_result(output_tensor_googlenet[0], top_k)
    print(f"googlenet class result id: {top_k_googlenet[0].id}")
    top_k_mobilenetv2 = get_topk_result(output_tensor_mobilenetv2[0], top_k)
    print(f"mobilenetv2 class result id: {top_k_mobilenetv2[0].id}")

    check(hbDNNReleaseTask(task_handle), "hbDNNReleaseTask failed")
    vlog("release task success")

    check(hbSysFreeMem(input_tensor_googlenet.sysMem[0]), "hbSysFreeMem failed")
    check(hbSysFreeMem(input_tensor_mobilenetv2.sysMem[0]), "hbSysFreeMem failed")
    check(hbSysFreeMem(output_tensor_googlenet[0].sysMem[0]), "hbSysFreeMem failed")
    check(hbSysFreeMem(output_tensor_mobilenetv2[0].sysMem[0]), "hbSysFreeMem failed")

    check(hbDNNRelease(packed_dnn_handle), "hbDNNRelease failed")
    return top_k_googlenet, top_k_mobilenetv2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model_file", required=True)
    parser.add_argument("--input_file", required=True)
    parser.add_argument("--image_size", type=int, default=224)
    args = parser.parse_args(argv)
    try:
        run_multi_model_batch(args.model_file, args.input_file, 1, args.image_size)
    except Failed as exc:
        return int(exc.args[0]) or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

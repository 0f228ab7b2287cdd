"""Port of a public board program: an NV12 image classifier (`cls_perception`, the OE
quick-start pattern), call by call in the C program's order and structure.

The C program: `perception_init` loads the model, takes the first name of the packed
file, and `prepare_tensor` queries each tensor's properties, allocates `alignedByteSize`
bytes of cached memory and (inputs) sets `alignedShape = validShape`, so the runtime pads
the NV12 rows; `read_image_2_tensor_as_nv12` converts a BGR picture to I420 with OpenCV
and interleaves U and V into NV12 in the input buffer; `perception_process` cleans the
input, infers on BPU core "any" (0) and waits; `get_topk_result` invalidates the output
and keeps the k best of shape[0] * shape[1] * shape[2] * shape[3] scores, applying the
output's SHIFT or SCALE when it has one; `perception_release` frees everything.

The port differs from C only by docs/porting.md's rules: out-parameters come back after
the status, `virAddr` is a NumPy array, a struct the C code fills through a pointer is
the one the call returns.

    python examples/ports/cls_perception_nv12.py --model MODEL.hbm --image PICTURE [--top-k 5]
"""

from __future__ import annotations

import argparse
import heapq
import sys

import cv2
import numpy as np

from emu.runtime.hbdnn import (
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM,
    SCALE,
    SHIFT,
    hbDNNGetInputCount,
    hbDNNGetInputTensorProperties,
    hbDNNGetModelHandle,
    hbDNNGetModelNameList,
    hbDNNGetOutputCount,
    hbDNNGetOutputTensorProperties,
    hbDNNGetVersion,
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


class ClsPerception:
    """The C program's class, its members and methods under their names."""

    def __init__(self) -> None:
        self.packed_dnn_handle = None
        self.dnn_handle = None
        self.task_handle = None
        self.input_count = self.output_count = 0
        self.input_tensors: list[hbDNNTensor] = []
        self.output_tensors: list[hbDNNTensor] = []
        self.model_height = self.model_width = 0

    def prepare_tensor(self) -> None:
        _, self.input_count = hbDNNGetInputCount(self.dnn_handle)
        _, self.output_count = hbDNNGetOutputCount(self.dnn_handle)
        for tensor, i in zip(self.input_tensors, range(self.input_count), strict=True):
            in_ret, tensor.properties = hbDNNGetInputTensorProperties(self.dnn_handle, i)
            self.model_height = tensor.properties.validShape.dimensionSize[2]
            self.model_width = tensor.properties.validShape.dimensionSize[3]
            alloc_ret = hbSysAllocCachedMem(tensor.sysMem[0], tensor.properties.alignedByteSize)
            tensor.properties.alignedShape = tensor.properties.validShape
            if in_ret or alloc_ret != 0:
                print("hbDNNGetInputTensorProperties/input_hbSysAllocCachedMem failed")
        for tensor, i in zip(self.output_tensors, range(self.output_count), strict=True):
            out_ret, tensor.properties = hbDNNGetOutputTensorProperties(self.dnn_handle, i)
            alloc_ret = hbSysAllocCachedMem(tensor.sysMem[0], tensor.properties.alignedByteSize)
            if out_ret or alloc_ret != 0:
                print("hbDNNGetOutputTensorProperties/output_hbSysAllocCachedMem failed")

    def read_image_2_tensor_as_nv12(self, bgr_mat: np.ndarray, tensor: hbDNNTensor) -> int:
        input_h = tensor.properties.validShape.dimensionSize[2]
        input_w = tensor.properties.validShape.dimensionSize[3]
        if input_h % 2 or input_w % 2:
            print("Input img height and width must be aligned by 2!")
            return -1
        yuv_mat = cv2.cvtColor(bgr_mat, cv2.COLOR_BGR2YUV_I420).reshape(-1)
        data = tensor.sysMem[0].virAddr
        y_size = input_h * input_w
        data[:y_size] = yuv_mat[:y_size]  # memcpy of the Y plane
        uv_size = (input_h // 2) * (input_w // 2)
        u_data = yuv_mat[y_size:y_size + uv_size]
        v_data = yuv_mat[y_size + uv_size:y_size + 2 * uv_size]
        nv12 = data[y_size:y_size + 2 * uv_size]
        nv12[0::2], nv12[1::2] = u_data, v_data  # the loop: *nv12++ = *u++; *nv12++ = *v++
        return 0

    def get_topk_result(self, tensor: hbDNNTensor, top_k: int) -> list[tuple[int, float]]:
        hbSysFlushMem(tensor.sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE)
        shape = tensor.properties.validShape.dimensionSize
        data = tensor.sysMem[0].virAddr.view(np.float32)  # F32 output, as the C code assumes
        shift = tensor.properties.shift.shiftData
        scale = tensor.properties.scale.scaleData
        tensor_len = shape[0] * shape[1] * shape[2] * shape[3]
        queue: list[tuple[float, int]] = []  # a min-heap of the best top_k, as the C queue
        for i in range(tensor_len):
            if tensor.properties.quantiType == SHIFT:
                score = float(data[i]) / (1 << shift[i])
            elif tensor.properties.quantiType == SCALE:
                score = float(data[i]) * scale[i]
            else:
                score = float(data[i])
            heapq.heappush(queue, (score, i))
            if len(queue) > top_k:
                heapq.heappop(queue)
        return [(i, score) for score, i in sorted(queue, reverse=True)]

    def perception_init(self, model_file_name: str) -> None:
        _, self.packed_dnn_handle = hbDNNInitializeFromFiles([model_file_name], 1)
        _, model_name_list, _model_count = hbDNNGetModelNameList(self.packed_dnn_handle)
        _, self.dnn_handle = hbDNNGetModelHandle(self.packed_dnn_handle, model_name_list[0])
        print(f"DNN runtime version: {hbDNNGetVersion()}")
        in_ret, self.input_count = hbDNNGetInputCount(self.dnn_handle)
        out_ret, self.output_count = hbDNNGetOutputCount(self.dnn_handle)
        if in_ret or out_ret != 0:
            print("hbDNNGetInputCount/hbDNNGetOutputCount failed")
        self.input_tensors = [hbDNNTensor() for _ in range(self.input_count)]
        self.output_tensors = [hbDNNTensor() for _ in range(self.output_count)]
        self.prepare_tensor()

    def perception_process(self, mat: np.ndarray) -> None:
        if self.read_image_2_tensor_as_nv12(mat, self.input_tensors[0]) != 0:
            print("read_image_2_tensor_as_nv12 failed")
        for j in range(self.input_count):
            hbSysFlushMem(self.input_tensors[j].sysMem[0], HB_SYS_MEM_CACHE_CLEAN)
        infer_ctrl_param = hbDNNInferCtrlParam()
        HB_DNN_INITIALIZE_INFER_CTRL_PARAM(infer_ctrl_param)
        infer_ctrl_param.bpuCoreId = 0
        infer_ret, self.task_handle = hbDNNInfer(self.output_tensors, self.input_tensors,
                                                 self.dnn_handle, infer_ctrl_param)
        if infer_ret != 0:
            print("hbDNNInfer failed")
        if hbDNNWaitTaskDone(self.task_handle, 0) != 0:
            print("hbDNNWaitTaskDone failed")

    def perception_postprocess(self, top_k: int) -> list[tuple[int, float]]:
        for i in range(self.output_count):
            hbSysFlushMem(self.output_tensors[i].sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE)
        return self.get_topk_result(self.output_tensors[0], top_k)

    def task_release(self) -> None:
        if hbDNNReleaseTask(self.task_handle) != 0:
            print("hbDNNReleaseTask failed")
        self.task_handle = None

    def perception_release(self) -> None:
        for tensor in self.input_tensors + self.output_tensors:
            if hbSysFreeMem(tensor.sysMem[0]) != 0:
                print("hbSysFreeMem failed")
        if hbDNNRelease(self.packed_dnn_handle) != 0:
            print("hbDNNRelease failed")


def classify(model: str, bgr: np.ndarray, top_k: int = 5) -> list[tuple[int, float]]:
    """The program's run on one BGR picture (resized to the model's input): its top-k."""
    perception = ClsPerception()
    perception.perception_init(model)
    mat = cv2.resize(bgr, (perception.model_width, perception.model_height))
    perception.perception_process(mat)
    top = perception.perception_postprocess(top_k)
    perception.task_release()
    perception.perception_release()
    return top


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args(argv)
    bgr = cv2.imread(args.image, cv2.IMREAD_COLOR)
    if bgr is None:
        print(f"cannot read {args.image}", file=sys.stderr)
        return 2
    for rank, (class_id, score) in enumerate(classify(args.model, bgr, args.top_k)):
        print(f"TOP {rank} result id: {class_id} score {score:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

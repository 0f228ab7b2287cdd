"""Port of a public board program: the OE resize tutorial (`resize_y`), which scales a
grey picture with the BPU's resizer through `hbDNNResize`, call by call.

The C program: `prepare_y_tensor` describes the source as an HB_DNN_IMG_TYPE_Y tensor,
NCHW 1 x 1 x H x W, rows 16-byte aligned in `alignedShape`, copies the picture row by row
into cached memory and cleans it; the destination is 1 x 1 x h x w with `alignedShape =
validShape`; `HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM`, `hbDNNResize` without an ROI,
`hbDNNWaitTaskDone`, `hbDNNReleaseTask`; the result is read back as an h x w picture of
the aligned shape and written to a file; both buffers are freed. The C code checks every
return code with a macro that returns it; the port does the same through `check`.

    python examples/ports/resize_y.py --image PICTURE [--resize-height 224]
           [--resize-width 224] [--resized-image 224x224.png]
"""

from __future__ import annotations

import argparse
import sys

import cv2
import numpy as np

from emu.runtime.hbdnn import (
    HB_DNN_IMG_TYPE_Y,
    HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM,
    HB_DNN_LAYOUT_NCHW,
    hbDNNReleaseTask,
    hbDNNResize,
    hbDNNResizeCtrlParam,
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


class Failed(Exception):
    """A call returned a non-zero code (the C macro's early return)."""


def check(ret_code: int, errmsg: str) -> None:
    if ret_code != 0:
        print(f"{errmsg}, error code:{ret_code}", file=sys.stderr)
        raise Failed(ret_code)


def align_16(w: int) -> int:
    return (w + 15) & ~15


def prepare_y_tensor(tensor: hbDNNTensor, image_height: int, image_width: int,
                     image_data: np.ndarray | None = None) -> None:
    """Both of the C program's overloads: with data, the source (rows 16-byte aligned,
    filled and cleaned); without, the destination (aligned = valid)."""
    properties = tensor.properties
    properties.tensorType = HB_DNN_IMG_TYPE_Y
    properties.tensorLayout = HB_DNN_LAYOUT_NCHW
    valid_shape = properties.validShape
    valid_shape.numDimensions = 4
    valid_shape.dimensionSize[:4] = [1, 1, image_height, image_width]
    aligned_shape = properties.alignedShape
    if image_data is None:
        properties.alignedShape = valid_shape  # C: a struct copy
        check(hbSysAllocCachedMem(tensor.sysMem[0], image_height * image_width),
              "hbSysAllocCachedMem failed")
        return
    stride = align_16(image_width)
    aligned_shape.numDimensions = 4
    aligned_shape.dimensionSize[:4] = [1, 1, image_height, stride]
    image_length = (aligned_shape.dimensionSize[1] * aligned_shape.dimensionSize[2]
                    * aligned_shape.dimensionSize[3])
    check(hbSysAllocCachedMem(tensor.sysMem[0], image_length), "hbSysAllocCachedMem failed")
    data0 = tensor.sysMem[0].virAddr
    for h in range(image_height):  # the row-by-row copy into the aligned rows
        data0[h * stride:h * stride + image_width] = image_data[h]
    check(hbSysFlushMem(tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN), "hbSysFlushMem failed")


def resize(gray: np.ndarray, resize_height: int, resize_width: int) -> np.ndarray:
    """The program on one grey picture: the resized picture it writes."""
    input_tensor = hbDNNTensor()
    prepare_y_tensor(input_tensor, gray.shape[0], gray.shape[1], gray)
    output_tensor = hbDNNTensor()
    prepare_y_tensor(output_tensor, resize_height, resize_width)
    ctrl = hbDNNResizeCtrlParam()
    HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM(ctrl)
    rc, task_handle = hbDNNResize(output_tensor, input_tensor, None, ctrl)
    check(rc, "hbDNNResize failed")
    check(hbDNNWaitTaskDone(task_handle, 0), "hbDNNWaitTaskDone failed")
    check(hbDNNReleaseTask(task_handle), "hbDNNReleaseTask failed")
    # The C program reads without an invalidate (the device wrote around its cache); a
    # port that reads CPU memory the device wrote invalidates first, as hbSys requires.
    check(hbSysFlushMem(output_tensor.sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE),
          "hbSysFlushMem failed")
    resized_shape = output_tensor.properties.alignedShape.dimensionSize
    y_mat = output_tensor.sysMem[0].virAddr[:resized_shape[2] * resized_shape[3]].reshape(
        resized_shape[2], resized_shape[3]).copy()
    check(hbSysFreeMem(input_tensor.sysMem[0]), "hbSysFreeMem failed")
    check(hbSysFreeMem(output_tensor.sysMem[0]), "hbSysFreeMem failed")
    return y_mat


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--resize-height", type=int, default=224)
    parser.add_argument("--resize-width", type=int, default=224)
    parser.add_argument("--resized-image", default="224x224.png")
    args = parser.parse_args(argv)
    gray = cv2.imread(args.image, cv2.IMREAD_GRAYSCALE)
    if gray is None:
        print(f"cannot read {args.image}", file=sys.stderr)
        return 2
    try:
        y_mat = resize(gray, args.resize_height, args.resize_width)
    except Failed as exc:
        return int(exc.args[0]) or 1
    cv2.imwrite(args.resized_image, y_mat)
    return 0


if __name__ == "__main__":
    sys.exit(main())

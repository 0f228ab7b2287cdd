"""Port of a public board program: the OE tensor tutorial (`tensor_example`), which prepares
an image tensor of each image type and layout, call by call in the C program's order and
structure.

The C program: for Y, NV12 and NV12_SEPARATE (NCHW) and BGR, RGB and YUV444 (NCHW and
NHWC), `test_fn` draws a random height (up to 1080) and width (up to 1920);
`prepare_tensor` sets the type and layout, a four-dimensional `validShape` of 3 channels
and copies it to `alignedShape` (a struct copy), then per type: Y keeps 1 channel and
widens the aligned rows to a multiple of 16 bytes; NV12 and NV12_SEPARATE widen the
aligned rows the same way (NV12_SEPARATE with a second buffer for the UV rows); each
allocates cached memory for its aligned rows. `prepare_image_data` copies the picture from
one buffer into the tensor (row by row into the aligned rows; NCHW planes from the
interleaved pixels with `nhwc_to_nchw`) and cleans the cache; the shapes are printed and
`release_tensor` frees the memory. The C program checks no return code; neither does the
port.

The port differs from C only by docs/porting.md's rules; C's `std::srand(std::time(
nullptr))` and `std::rand()` are a `random.Random` seeded with the time (or `--seed`)
drawing from 0 to glibc's RAND_MAX, and C's uninitialised 1920 x 1080 x 3 stack buffer is
zeros unless a caller passes the picture bytes.

    python examples/ports/tensor_example.py [--seed N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np

from emu.runtime.hbdnn import (
    HB_DNN_IMG_TYPE_BGR,
    HB_DNN_IMG_TYPE_NV12,
    HB_DNN_IMG_TYPE_NV12_SEPARATE,
    HB_DNN_IMG_TYPE_RGB,
    HB_DNN_IMG_TYPE_Y,
    HB_DNN_IMG_TYPE_YUV444,
    HB_DNN_LAYOUT_NCHW,
    HB_DNN_LAYOUT_NHWC,
    HB_DNN_TENSOR_TYPE_F32,
    HB_DNN_TENSOR_TYPE_S8,
    HB_DNN_TENSOR_TYPE_S32,
    HB_DNN_TENSOR_TYPE_U8,
    HB_DNN_TENSOR_TYPE_U32,
    hbDNNTensor,
)
from emu.runtime.hbsys import (
    HB_SYS_MEM_CACHE_CLEAN,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
)

RAND_MAX = 2**31 - 1  # glibc's
IMAGE_DATA_BYTES = 1920 * 1080 * 3


def ALIGN_16(v: int) -> int:
    return (v + (16 - 1)) // 16 * 16


def tensor_example(seed: int | None = None, image_data: np.ndarray | None = None) -> None:
    """The program's main: one tensor of each type and layout, printed and released."""
    rng = random.Random(time.time_ns() if seed is None else seed)  # std::srand

    def randint_fn(min: int, max: int) -> int:  # C's lambda, its quirk kept: % (max + 1)
        while True:
            random_value = rng.randint(0, RAND_MAX)  # std::rand()
            if random_value < min:
                continue
            return random_value % (max + 1)

    if image_data is None:
        image_data = np.zeros(IMAGE_DATA_BYTES, np.uint8)

    def test_fn(image_data_type: int, layout: int) -> None:
        image_height = randint_fn(16, 1080)
        image_width = randint_fn(16, 1920)
        tensor = hbDNNTensor()
        prepare_tensor(image_height, image_width, image_data_type, layout, tensor)
        prepare_image_data(image_data, tensor)
        valid = tensor.properties.validShape.dimensionSize
        aligned = tensor.properties.alignedShape.dimensionSize
        print(f"Tensor data type:{tensor.properties.tensorType}, "
              f"Tensor layout: {tensor.properties.tensorLayout}, "
              f"shape:{valid[0]}x{valid[1]}x{valid[2]}x{valid[3]}, "
              f"aligned shape:{aligned[0]}x{aligned[1]}x{aligned[2]}x{aligned[3]}")
        release_tensor(tensor)

    test_fn(HB_DNN_IMG_TYPE_Y, HB_DNN_LAYOUT_NCHW)
    test_fn(HB_DNN_IMG_TYPE_NV12, HB_DNN_LAYOUT_NCHW)
    test_fn(HB_DNN_IMG_TYPE_NV12_SEPARATE, HB_DNN_LAYOUT_NCHW)
    test_fn(HB_DNN_IMG_TYPE_BGR, HB_DNN_LAYOUT_NCHW)
    test_fn(HB_DNN_IMG_TYPE_BGR, HB_DNN_LAYOUT_NHWC)
    test_fn(HB_DNN_IMG_TYPE_RGB, HB_DNN_LAYOUT_NCHW)
    test_fn(HB_DNN_IMG_TYPE_RGB, HB_DNN_LAYOUT_NHWC)
    test_fn(HB_DNN_IMG_TYPE_YUV444, HB_DNN_LAYOUT_NCHW)
    test_fn(HB_DNN_IMG_TYPE_YUV444, HB_DNN_LAYOUT_NHWC)


def prepare_tensor(height: int, width: int, image_data_type: int, layout: int,
                   tensor: hbDNNTensor) -> None:
    tensor_property = tensor.properties
    tensor_property.tensorType = image_data_type
    tensor_property.tensorLayout = layout
    _, h_idx, w_idx, c_idx = get_hwc_index(layout)
    tensor_property.validShape.numDimensions = 4
    tensor_property.validShape.dimensionSize[0] = 1
    tensor_property.validShape.dimensionSize[h_idx] = height
    tensor_property.validShape.dimensionSize[w_idx] = width
    tensor_property.validShape.dimensionSize[c_idx] = 3
    tensor_property.alignedShape = tensor_property.validShape  # C: a struct copy
    if image_data_type == HB_DNN_IMG_TYPE_Y:
        tensor_property.validShape.dimensionSize[c_idx] = 1
        stride = ALIGN_16(width)  # rows aligned to 16 bytes
        tensor_property.alignedShape.dimensionSize[w_idx] = stride
        tensor_property.alignedShape.dimensionSize[c_idx] = 1
        hbSysAllocCachedMem(tensor.sysMem[0], height * stride)
    elif image_data_type in (HB_DNN_IMG_TYPE_YUV444, HB_DNN_IMG_TYPE_BGR, HB_DNN_IMG_TYPE_RGB):
        hbSysAllocCachedMem(tensor.sysMem[0], height * width * 3)
    elif image_data_type == HB_DNN_IMG_TYPE_NV12:
        stride = ALIGN_16(width)
        y_length = height * stride
        uv_length = height // 2 * stride
        tensor_property.alignedShape.dimensionSize[w_idx] = stride
        hbSysAllocCachedMem(tensor.sysMem[0], y_length + uv_length)
    elif image_data_type == HB_DNN_IMG_TYPE_NV12_SEPARATE:
        stride = ALIGN_16(width)
        y_length = height * stride
        uv_length = height // 2 * stride
        tensor_property.alignedShape.dimensionSize[w_idx] = stride
        hbSysAllocCachedMem(tensor.sysMem[0], y_length)
        hbSysAllocCachedMem(tensor.sysMem[1], uv_length)
    elif image_data_type in (HB_DNN_TENSOR_TYPE_F32, HB_DNN_TENSOR_TYPE_S32,
                             HB_DNN_TENSOR_TYPE_U32):
        hbSysAllocCachedMem(tensor.sysMem[0], height * width * 4)
    elif image_data_type in (HB_DNN_TENSOR_TYPE_U8, HB_DNN_TENSOR_TYPE_S8):
        hbSysAllocCachedMem(tensor.sysMem[0], height * width)


def _copy_rows(dst: np.ndarray, src: np.ndarray, rows: int, width: int, stride: int) -> None:
    """C's two nested loops `*raw++ = *data++`: `rows` rows of `width` bytes from the packed
    `src` into `dst`'s rows `stride` bytes apart, as one slice assignment."""
    dst[:rows * stride].reshape(rows, stride)[:, :width] = src[:rows * width].reshape(rows, width)


def prepare_image_data(image_data: np.ndarray, tensor: hbDNNTensor) -> None:
    tensor_property = tensor.properties
    image_data_type = tensor_property.tensorType
    layout = tensor_property.tensorLayout
    _, h_idx, w_idx, _c_idx = get_hwc_index(layout)
    image_height = tensor_property.validShape.dimensionSize[h_idx]
    image_width = tensor_property.validShape.dimensionSize[w_idx]
    stride = tensor_property.alignedShape.dimensionSize[w_idx]
    if image_data_type == HB_DNN_IMG_TYPE_Y:
        data0 = tensor.sysMem[0].virAddr
        _copy_rows(data0, image_data, image_height, image_width, stride)
        hbSysFlushMem(tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN)
    elif image_data_type in (HB_DNN_IMG_TYPE_YUV444, HB_DNN_IMG_TYPE_BGR, HB_DNN_IMG_TYPE_RGB):
        if layout == HB_DNN_LAYOUT_NHWC:
            image_length = image_height * stride * 3
            data0 = tensor.sysMem[0].virAddr
            data0[:image_length] = image_data[:image_length]  # memcpy
        else:
            channel_size = image_height * image_width
            mem = tensor.sysMem[0].virAddr
            nhwc_to_nchw(mem[:channel_size], mem[channel_size:channel_size * 2],
                         mem[channel_size * 2:], image_data, image_height, image_width)
        hbSysFlushMem(tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN)
    elif image_data_type == HB_DNN_IMG_TYPE_NV12:
        y_length = image_height * stride
        y = tensor.sysMem[0].virAddr
        _copy_rows(y, image_data, image_height, image_width, stride)
        uv = tensor.sysMem[0].virAddr[y_length:]
        uv_height = image_height // 2
        # C's `data` pointer has moved past the Y rows
        _copy_rows(uv, image_data[image_height * image_width:], uv_height, image_width, stride)
        hbSysFlushMem(tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN)
    elif image_data_type == HB_DNN_IMG_TYPE_NV12_SEPARATE:
        y = tensor.sysMem[0].virAddr
        _copy_rows(y, image_data, image_height, image_width, stride)
        hbSysFlushMem(tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN)
        uv = tensor.sysMem[1].virAddr
        uv_height = image_height // 2
        _copy_rows(uv, image_data[image_height * image_width:], uv_height, image_width, stride)
        hbSysFlushMem(tensor.sysMem[1], HB_SYS_MEM_CACHE_CLEAN)


def nhwc_to_nchw(out_data0: np.ndarray, out_data1: np.ndarray, out_data2: np.ndarray,
                 in_data: np.ndarray, height: int, width: int) -> None:
    """C's loop over the pixels, three bytes to the three planes, as slice assignments."""
    pixels = in_data[:height * width * 3]
    out_data0[:height * width] = pixels[0::3]
    out_data1[:height * width] = pixels[1::3]
    out_data2[:height * width] = pixels[2::3]


def release_tensor(tensor: hbDNNTensor) -> None:
    tensor_type = tensor.properties.tensorType
    if tensor_type in (HB_DNN_IMG_TYPE_Y, HB_DNN_IMG_TYPE_RGB, HB_DNN_IMG_TYPE_BGR,
                       HB_DNN_IMG_TYPE_YUV444, HB_DNN_IMG_TYPE_NV12):
        hbSysFreeMem(tensor.sysMem[0])
    elif tensor_type == HB_DNN_IMG_TYPE_NV12_SEPARATE:
        hbSysFreeMem(tensor.sysMem[0])
        hbSysFreeMem(tensor.sysMem[1])


def get_hwc_index(layout: int) -> tuple[int, int, int, int]:
    """(0, h_idx, w_idx, c_idx); C leaves the three unset for another layout (here 0)."""
    h_idx = w_idx = c_idx = 0
    if layout == HB_DNN_LAYOUT_NHWC:
        h_idx, w_idx, c_idx = 1, 2, 3
    elif layout == HB_DNN_LAYOUT_NCHW:
        c_idx, h_idx, w_idx = 1, 2, 3
    return 0, h_idx, w_idx, c_idx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None,
                        help="the random shapes' seed (default: the time, as the C program)")
    args = parser.parse_args(argv)
    tensor_example(args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tensors of hbDNN calls: what hbDNN says about a model's tensors (`properties`: the
board's `hbDNNTensorProperties`), and the checks of the tensors, images and ROIs a call
hands over, as C would see them (each gives what the task engine needs, or None / an
error code).

A model's tensors may have any rank, 0 (a scalar) to `HB_DNN_TENSOR_MAX_DIMENSIONS`:
`properties` describes each at its rank (layout NCHW for a 4-D feature map, NHWC for an
image, NONE otherwise) and hbDNNInfer takes exactly that shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from emu.mem.pool import PoolBuffer
from emu.nn import execute, preprocess, resizer
from emu.nn.compiler import CompiledModel
from emu.runtime import dnn_segments, session, status
from emu.runtime.dnn_engine import Image, Input
from emu.runtime.hbdnn_types import (
    HB_DNN_IMG_TYPE_BGR,
    HB_DNN_IMG_TYPE_NV12,
    HB_DNN_IMG_TYPE_NV12_SEPARATE,
    HB_DNN_IMG_TYPE_RGB,
    HB_DNN_IMG_TYPE_Y,
    HB_DNN_IMG_TYPE_YUV444,
    HB_DNN_INVALID_ARGUMENT,
    HB_DNN_LAYOUT_NCHW,
    HB_DNN_LAYOUT_NHWC,
    HB_DNN_LAYOUT_NONE,
    HB_DNN_TENSOR_MAX_DIMENSIONS,
    HB_DNN_TENSOR_TYPE_F32,
    HB_DNN_TENSOR_TYPE_F64,
    HB_DNN_TENSOR_TYPE_MAX,
    HB_DNN_TENSOR_TYPE_S8,
    HB_DNN_TENSOR_TYPE_S16,
    HB_DNN_TENSOR_TYPE_S32,
    HB_DNN_TENSOR_TYPE_S64,
    HB_DNN_TENSOR_TYPE_U8,
    SCALE,
    SHIFT,
    hbDNNRoi,
    hbDNNTensor,
    hbDNNTensorProperties,
    hbDNNTensorShape,
)
from emu.runtime.hbsys import buffer_of

_TYPES = {"float32": HB_DNN_TENSOR_TYPE_F32, "uint8": HB_DNN_TENSOR_TYPE_U8,
          "int8": HB_DNN_TENSOR_TYPE_S8, "int16": HB_DNN_TENSOR_TYPE_S16,
          "int32": HB_DNN_TENSOR_TYPE_S32, "float64": HB_DNN_TENSOR_TYPE_F64,
          "int64": HB_DNN_TENSOR_TYPE_S64}
_IMAGE_TYPES = {"nv12": HB_DNN_IMG_TYPE_NV12, "rgb": HB_DNN_IMG_TYPE_RGB,
                "bgr": HB_DNN_IMG_TYPE_BGR, "yuv444": HB_DNN_IMG_TYPE_YUV444,
                "gray": HB_DNN_IMG_TYPE_Y}


def properties(model: CompiledModel, name: str) -> hbDNNTensorProperties:
    """A tensor as hbDNN describes it. Feature maps and outputs are float32 NCHW (the
    compiled model quantises and dequantises on the CPU), images uint8 NHWC; NV12 is
    described as N x 3 x H x W, its rows aligned to 16 bytes in `alignedShape` (H x W_16
    x 3 / 2 bytes per image), strides 0, as on the board. An output of N x C, N the batch
    (a classifier's scores), is described as N x C x 1 x 1, as J5's toolchain makes it (its
    Gemm is a convolution) and the board's samples read it (seed 000: the BPU's shapes are
    four-dimensional); the bytes are the same."""
    tensor = model.graph.tensors[name]
    props = hbDNNTensorProperties()
    input_type = model.options.get("input_type", "featuremap")
    shape = tensor.shape
    if name in model.graph.outputs and len(shape) == 2 and shape[0] == model.batch:
        shape = (*shape, 1, 1)
    itemsize = np.dtype(tensor.dtype).itemsize
    aligned: tuple[int, ...] | None = None
    nv12 = dnn_segments.nv12_dims(model, name)
    if nv12 is not None:
        dims: tuple[int, ...] = nv12
        aligned = (*nv12[:3], preprocess.aligned_width(nv12[3]))
        props.tensorType, props.tensorLayout = HB_DNN_IMG_TYPE_NV12, HB_DNN_LAYOUT_NCHW
    elif name in model.graph.inputs and input_type in _IMAGE_TYPES:
        dims = shape
        props.tensorType, props.tensorLayout = _IMAGE_TYPES[input_type], HB_DNN_LAYOUT_NHWC
    else:
        dims = shape
        props.tensorType = _TYPES.get(tensor.dtype, HB_DNN_TENSOR_TYPE_MAX)
        props.tensorLayout = _layout(model, name, len(shape))
    if name in model.code_outputs():
        itemsize = _describe_codes(props, model, name)
    props.validShape = hbDNNTensorShape(dims)
    props.alignedShape = hbDNNTensorShape(aligned or dims)
    props.alignedByteSize = (math.prod(aligned) // 2 if aligned else math.prod(shape) * itemsize)
    if nv12 is None:
        strides = [itemsize * math.prod(shape[k + 1:]) for k in range(len(shape))]
        props.stride = strides + [0] * (HB_DNN_TENSOR_MAX_DIMENSIONS - len(strides))
    return props


_TO_NHWC = (0, 2, 3, 1)  # the Transpose that turns an N x C x H x W map into N x H x W x C


def _layout(model: CompiledModel, name: str, rank: int) -> int:
    """A feature map's layout label: NHWC for an output a Transpose (0, 2, 3, 1) writes (a
    detector's head exported channels-last), NCHW for any other four-dimensional tensor,
    none otherwise."""
    if rank != 4:
        return HB_DNN_LAYOUT_NONE
    writer = model.graph.producers().get(name) if name in model.graph.outputs else None
    if writer is not None and writer.op == "Transpose" \
            and tuple(writer.attrs.get("perm", ())) == _TO_NHWC:
        return HB_DNN_LAYOUT_NHWC
    return HB_DNN_LAYOUT_NCHW


_CODE_TYPES = {"int8": HB_DNN_TENSOR_TYPE_S8, "int16": HB_DNN_TENSOR_TYPE_S16,
               "int32": HB_DNN_TENSOR_TYPE_S32}


def _describe_codes(props: hbDNNTensorProperties, model: CompiledModel, name: str) -> int:
    """A quantised output's type and quantisation (SHIFT when every scale is a power of
    two, value = code / 2**shift; else SCALE, value = code x scale, zero points 0), per
    channel along `quantizeAxis` or per tensor; returns the code's size in bytes."""
    dtype, scales, axis = execute.output_quantization(model.quant, name)
    props.tensorType = _CODE_TYPES[dtype]
    props.quantizeAxis = 0 if axis is None else axis
    mantissas, exponents = np.frexp(scales)
    if np.all(mantissas == 0.5):
        props.quantiType = SHIFT
        props.shift.shiftLen = len(scales)
        props.shift.shiftData = [int(1 - e) for e in exponents]
    else:
        props.quantiType = SCALE
        props.scale.scaleLen = props.scale.zeroPointLen = len(scales)
        props.scale.scaleData = [float(np.float32(v)) for v in scales]
        props.scale.zeroPointData = [0] * len(scales)
    return np.dtype(dtype).itemsize


def tensor_buffers(tensors: Any, names: Sequence[str], model: CompiledModel,
                   described: Callable[[str], hbDNNTensorProperties],
                   sess: session.Session) -> list[Input] | int:
    """Where each tensor's data is (checked against the model's tensor `described(name)`),
    or an rc."""
    if not isinstance(tensors, list | tuple) or len(tensors) != len(names):
        return HB_DNN_INVALID_ARGUMENT
    found = []
    for tensor, name in zip(tensors, names, strict=True):
        if not isinstance(tensor, hbDNNTensor) or not isinstance(tensor.sysMem, list | tuple) \
                or not tensor.sysMem:
            return HB_DNN_INVALID_ARGUMENT
        wanted = described(name)
        props = tensor.properties
        if not isinstance(props, hbDNNTensorProperties):
            return HB_DNN_INVALID_ARGUMENT
        kind = status.as_int(props.tensorType)
        valid = props.validShape.dims() if isinstance(props.validShape, hbDNNTensorShape) \
            else None
        aligned = props.alignedShape.dims() if isinstance(props.alignedShape,
                                                          hbDNNTensorShape) else None
        separate = kind == HB_DNN_IMG_TYPE_NV12_SEPARATE
        if valid is None or valid != wanted.validShape.dims() or (
                kind != wanted.tensorType
                and not (separate and wanted.tensorType == HB_DNN_IMG_TYPE_NV12)):
            return HB_DNN_INVALID_ARGUMENT
        if aligned not in (wanted.alignedShape.dims(), valid):
            return HB_DNN_INVALID_ARGUMENT
        nv12 = dnn_segments.nv12_dims(model, name)
        pitch = 0 if nv12 is None else aligned[3]  # type: ignore[index]
        if nv12 is None:
            sizes = [wanted.alignedByteSize]
        else:
            n, _, h, _ = nv12
            sizes = [n * h * pitch, n * h * pitch // 2] if separate else [n * h * pitch * 3 // 2]
        planes = [buffer_of(mem, sess) for mem in tensor.sysMem[:len(sizes)]]
        if len(planes) < len(sizes) or any(
                buf is None or buf.size_bytes < size
                for buf, size in zip(planes, sizes, strict=True)):
            return HB_DNN_INVALID_ARGUMENT
        found.append(Input(tuple(b for b in planes if b is not None), pitch))
    return found


def roi_outputs(output: Any, model: CompiledModel, groups: int, sess: session.Session
                 ) -> list[PoolBuffer] | int:
    """The output buffers of hbDNNRoiInfer: float32, each holding the `groups` batch
    groups' outputs one after another along its first dimension (an output with none, a
    scalar, holds one value per group)."""
    names = model.graph.outputs
    if not isinstance(output, list | tuple) or len(output) != len(names):
        return HB_DNN_INVALID_ARGUMENT
    buffers = []
    for tensor, name in zip(output, names, strict=True):
        one = model.graph.tensors[name].shape
        shape = (groups * one[0], *one[1:]) if one else (groups,)
        if not isinstance(tensor, hbDNNTensor) or not isinstance(
                tensor.properties, hbDNNTensorProperties) or not isinstance(
                tensor.properties.validShape, hbDNNTensorShape) \
                or tensor.properties.validShape.dims() != shape \
                or not isinstance(tensor.sysMem, list | tuple) or not tensor.sysMem:
            return HB_DNN_INVALID_ARGUMENT
        buf = buffer_of(tensor.sysMem[0], sess)
        if buf is None or buf.size_bytes < 4 * math.prod(shape):
            return HB_DNN_INVALID_ARGUMENT
        buffers.append(buf)
    return buffers


_RESIZER_FORMATS = {HB_DNN_IMG_TYPE_NV12: "nv12", HB_DNN_IMG_TYPE_Y: "gray",
                    HB_DNN_IMG_TYPE_RGB: "rgb", HB_DNN_IMG_TYPE_BGR: "bgr",
                    HB_DNN_IMG_TYPE_YUV444: "yuv444"}



def image(tensor: Any, sess: session.Session) -> Image | None:
    """An image tensor: NV12 as (1, 3, H, W), the others NHWC (1, H, W, C), and a Y image
    labelled NCHW as (1, 1, H, W), as the board's resize tutorial gives it (one channel:
    the bytes are the same); the row stride is the `alignedShape`'s width (times the bytes
    per pixel)."""
    if not isinstance(tensor, hbDNNTensor) or not isinstance(tensor.properties,
                                                             hbDNNTensorProperties) \
            or not isinstance(tensor.sysMem, list | tuple) or not tensor.sysMem:
        return None
    props = tensor.properties
    fmt = _RESIZER_FORMATS.get(status.as_int(props.tensorType))  # type: ignore[arg-type]
    valid = props.validShape.dims() if isinstance(props.validShape, hbDNNTensorShape) else None
    aligned = props.alignedShape.dims() if isinstance(props.alignedShape,
                                                      hbDNNTensorShape) else None
    if fmt is None or valid is None or aligned is None or len(valid) != 4 \
            or len(aligned) != 4 or valid[0] != 1:
        return None
    channels = 1 if fmt in ("nv12", "gray") else 3
    if fmt == "nv12":
        h, w, wa = valid[2], valid[3], aligned[3]
        same = valid[:3] == aligned[:3] and valid[1] == 3
    elif fmt == "gray" and status.as_int(props.tensorLayout) == HB_DNN_LAYOUT_NCHW:
        h, w, wa = valid[2], valid[3], aligned[3]
        same = valid[:3] == aligned[:3] and valid[1] == 1
    else:
        h, w, wa = valid[1], valid[2], aligned[2]
        same = valid[0:2] == aligned[0:2] and valid[3] == aligned[3] == channels
    if not same or wa < w:
        return None
    buf = buffer_of(tensor.sysMem[0], sess)
    image = None if buf is None else Image(fmt, w, h, wa * channels, buf)
    if image is None or image.buffer.size_bytes < image.rows() * image.stride:
        return None
    return image


def roi(box: Any, image: Image) -> resizer.Roi | None:
    """The ROI an hbDNNRoi gives (None: the whole image), or None if it is not one."""
    if box is None:
        return resizer.Roi(0, 0, image.w - 1, image.h - 1)
    if not isinstance(box, hbDNNRoi):
        return None
    sides = [status.as_int(v, 0, status.INT32_MAX)
             for v in (box.left, box.top, box.right, box.bottom)]
    if any(v is None for v in sides):
        return None
    return resizer.Roi(*(int(v) for v in sides if v is not None))

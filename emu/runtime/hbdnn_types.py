"""hbDNN's header (`hb_dnn.h`, `hb_dnn_status.h`): version, limits, enums, status codes, the
environment variables' names and the structs, as `emu/runtime/hbdnn.py` exports them.

Error codes: the values of the J5 OE's `hb_dnn_status.h` (`HB_DNN_TASK_NUM_EXCEED_LIMIT` =
-6000009 as `shared/calibration/j5_bpu.md` quotes it); `HB_DNN_WRONG_THREAD` and
`HB_DNN_DEADLOCK` are the emulator's own (the board has no such situations).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import cast

from emu.runtime import status
from emu.runtime.cstruct import CStruct
from emu.runtime.hbsys import hbSysMem

HB_DNN_VERSION_MAJOR = 1
HB_DNN_VERSION_MINOR = 1
HB_DNN_VERSION_PATCH = 0
HB_DNN_TENSOR_MAX_DIMENSIONS = 8
MAX_TASKS = 32  # model tasks alive at once (hbDNNInfer's documented limit)
MAX_CHAINED = 255  # models one task may chain with `more`
MAX_DATA_BATCH = 255  # hbDNNRoiInfer's data_batch: [1, 255] (seed 000)

HB_BPU_CORE_ANY = 0
HB_BPU_CORE_0 = 1 << 0
HB_BPU_CORE_1 = 1 << 1
HB_DSP_CORE_ANY = 0
HB_DSP_CORE_0 = 1 << 0
HB_DSP_CORE_1 = 1 << 1

HB_DNN_PRIORITY_LOWEST = 0
HB_DNN_PRIORITY_HIGHEST = 255
HB_DNN_PRIORITY_PREEMP = HB_DNN_PRIORITY_HIGHEST

HB_DNN_LAYOUT_NHWC = 0
HB_DNN_LAYOUT_NCHW = 2
HB_DNN_LAYOUT_NONE = 255

(HB_DNN_IMG_TYPE_Y, HB_DNN_IMG_TYPE_NV12, HB_DNN_IMG_TYPE_NV12_SEPARATE, HB_DNN_IMG_TYPE_YUV444,
 HB_DNN_IMG_TYPE_RGB, HB_DNN_IMG_TYPE_BGR, HB_DNN_TENSOR_TYPE_S4, HB_DNN_TENSOR_TYPE_U4,
 HB_DNN_TENSOR_TYPE_S8, HB_DNN_TENSOR_TYPE_U8, HB_DNN_TENSOR_TYPE_F16, HB_DNN_TENSOR_TYPE_S16,
 HB_DNN_TENSOR_TYPE_U16, HB_DNN_TENSOR_TYPE_F32, HB_DNN_TENSOR_TYPE_S32, HB_DNN_TENSOR_TYPE_U32,
 HB_DNN_TENSOR_TYPE_F64, HB_DNN_TENSOR_TYPE_S64, HB_DNN_TENSOR_TYPE_U64,
 HB_DNN_TENSOR_TYPE_MAX) = range(20)

NONE, SHIFT, SCALE = 0, 1, 2  # hbDNNQuantiType
HB_DNN_RESIZE_TYPE_BILINEAR = 0  # hbDNNResizeType


def _enum(name: str, members: Sequence[str]) -> type[enum.IntEnum]:
    """A C enum's type, its members the module constants of those names."""
    values = globals()
    return cast(type[enum.IntEnum], enum.IntEnum(name, {m: values[m] for m in members}))


# The C enums as types too (the constants above are their values, as in C).
hbDNNTensorLayout = _enum("hbDNNTensorLayout",
                          ("HB_DNN_LAYOUT_NHWC", "HB_DNN_LAYOUT_NCHW", "HB_DNN_LAYOUT_NONE"))
hbDNNDataType = _enum("hbDNNDataType", (
    "HB_DNN_IMG_TYPE_Y", "HB_DNN_IMG_TYPE_NV12", "HB_DNN_IMG_TYPE_NV12_SEPARATE",
    "HB_DNN_IMG_TYPE_YUV444", "HB_DNN_IMG_TYPE_RGB", "HB_DNN_IMG_TYPE_BGR",
    "HB_DNN_TENSOR_TYPE_S4", "HB_DNN_TENSOR_TYPE_U4", "HB_DNN_TENSOR_TYPE_S8",
    "HB_DNN_TENSOR_TYPE_U8", "HB_DNN_TENSOR_TYPE_F16", "HB_DNN_TENSOR_TYPE_S16",
    "HB_DNN_TENSOR_TYPE_U16", "HB_DNN_TENSOR_TYPE_F32", "HB_DNN_TENSOR_TYPE_S32",
    "HB_DNN_TENSOR_TYPE_U32", "HB_DNN_TENSOR_TYPE_F64", "HB_DNN_TENSOR_TYPE_S64",
    "HB_DNN_TENSOR_TYPE_U64", "HB_DNN_TENSOR_TYPE_MAX"))
hbDNNQuantiType = _enum("hbDNNQuantiType", ("NONE", "SHIFT", "SCALE"))
hbDNNTaskPriority = enum.IntEnum("hbDNNTaskPriority", {
    "HB_DNN_PRIORITY_LOWEST": HB_DNN_PRIORITY_LOWEST,
    "HB_DNN_PRIORITY_HIGHEST": HB_DNN_PRIORITY_HIGHEST})  # PREEMP is HIGHEST's alias
hbBPUCore = _enum("hbBPUCore", ("HB_BPU_CORE_ANY", "HB_BPU_CORE_0", "HB_BPU_CORE_1"))
hbDSPCore = _enum("hbDSPCore", ("HB_DSP_CORE_ANY", "HB_DSP_CORE_0", "HB_DSP_CORE_1"))
hbDNNResizeType = _enum("hbDNNResizeType", ("HB_DNN_RESIZE_TYPE_BILINEAR",))

HB_DNN_SUCCESS = status.SUCCESS
HB_DNN_INVALID_ARGUMENT = status.define(-6000001, "hbDNN: invalid argument")
HB_DNN_INVALID_MODEL = status.define(
    -6000002, "hbDNN: invalid model (not an emu model file, truncated, corrupted, or from a "
              "newer emu)")
HB_DNN_MODEL_NUMBER_EXCEED_LIMIT = status.define(-6000003, "hbDNN: too many models")
HB_DNN_INVALID_PACKED_DNN_HANDLE = status.define(
    -6000004, "hbDNN: not a live packed handle of this session (never returned by "
              "hbDNNInitializeFrom*, released, or made in another session)")
HB_DNN_INVALID_DNN_HANDLE = status.define(
    -6000005, "hbDNN: not a live model handle of this session (never returned by "
              "hbDNNGetModelHandle, or its packed handle was released)")
HB_DNN_CAN_NOT_OPEN_FILE = status.define(-6000006, "hbDNN: cannot open the model file")
HB_DNN_OUT_OF_MEMORY = status.define(-6000007, "hbDNN: out of memory")
HB_DNN_TIMEOUT = status.define(-6000008, "hbDNN: the task did not finish within the timeout")
HB_DNN_TASK_NUM_EXCEED_LIMIT = status.define(
    -6000009, f"hbDNN: {MAX_TASKS} model tasks exist already (release finished ones)")
HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT = status.define(-6000010, "hbDNN: too many chained models")
HB_DNN_INVALID_TASK_HANDLE = status.define(
    -6000011, "hbDNN: not a live task handle of this session (never returned by hbDNNInfer, "
              "released, or made in another session)")
HB_DNN_RUN_TASK_FAILED = status.define(-6000012, "hbDNN: the task failed")
HB_DNN_MODEL_IS_RUNNING = status.define(
    -6000013, "hbDNN: a task of a model of this packed handle has not been released")
HB_DNN_INCOMPATIBLE_MODEL = status.define(-6000014, "hbDNN: incompatible model")
HB_DNN_API_USE_ERROR = status.define(
    -6000015, "hbDNN: the call does not fit the model (hbDNNInfer on a model whose input "
              "comes from the resizer, or hbDNNRoiInfer on one whose input does not)")
HB_DNN_WRONG_THREAD = status.define_wrong_thread(-6000101, "hbDNN")
HB_DNN_DEADLOCK = status.define(
    -6000102, "hbDNN: the task can never finish: nothing left in the simulation can run it")


# --- environment variables ---------------------------------------------------------------------

# The board's variables that mean something here. Its Perfetto variables do not: traces come
# from `emu ... --trace` or `Session(trace=True)`.
ENV_LOG_LEVEL = HB_DNN_LOG_LEVEL = "HB_DNN_LOG_LEVEL"
ENV_SIM_PLATFORM = HB_DNN_SIM_PLATFORM = "HB_DNN_SIM_PLATFORM"
ENV_ENABLE_DSP = HB_DNN_ENABLE_DSP = "HB_DNN_ENABLE_DSP"
HB_DNN_LOG_NONE, HB_DNN_LOG_WARNING, HB_DNN_LOG_ERROR, HB_DNN_LOG_FATAL = 0, 3, 4, 5
SIM_PLATFORMS = {"BAYES": True, "BERNOULLI": False, "BERNOULLI2": False}  # J5 is Bayes


# --- structs ---------------------------------------------------------------------------------

class hbDNNTensorShape(CStruct):  # the board's struct names
    """A shape: `numDimensions` sizes in `dimensionSize` (8 slots); 0 dimensions is a
    scalar's shape."""

    ARRAYS = ("dimensionSize",)

    def __init__(self, dims: Sequence[int] = ()) -> None:
        self.dimensionSize = [int(d) for d in dims] + [0] * (HB_DNN_TENSOR_MAX_DIMENSIONS
                                                             - len(dims))
        self.numDimensions = len(dims)

    def dims(self) -> tuple[int, ...] | None:
        """The sizes (() for a scalar), or None when the struct does not hold a valid
        shape."""
        n = status.as_int(self.numDimensions, 0, HB_DNN_TENSOR_MAX_DIMENSIONS)
        if n is None or not isinstance(self.dimensionSize, list | tuple) \
                or len(self.dimensionSize) < n:
            return None
        sizes = [status.as_int(d, 1, status.INT32_MAX) for d in self.dimensionSize[:n]]
        return None if any(s is None for s in sizes) else tuple(int(s) for s in sizes if s)


class hbDNNQuantiShift(CStruct):
    def __init__(self) -> None:
        self.shiftLen = 0
        self.shiftData: list[int] = []


class hbDNNQuantiScale(CStruct):
    def __init__(self) -> None:
        self.scaleLen = 0
        self.scaleData: list[float] = []
        self.zeroPointLen = 0
        self.zeroPointData: list[int] = []


class hbDNNTensorProperties(CStruct):
    """What a model says about one of its tensors."""

    ARRAYS = ("stride",)

    def __init__(self) -> None:
        self.validShape = hbDNNTensorShape()
        self.alignedShape = hbDNNTensorShape()
        self.tensorLayout = HB_DNN_LAYOUT_NONE
        self.tensorType = HB_DNN_TENSOR_TYPE_MAX
        self.shift = hbDNNQuantiShift()
        self.scale = hbDNNQuantiScale()
        self.quantiType = NONE
        self.quantizeAxis = 0
        self.alignedByteSize = 0
        self.stride = [0] * HB_DNN_TENSOR_MAX_DIMENSIONS


class hbDNNTensor(CStruct):
    """A tensor for hbDNNInfer: its memory (`sysMem[0]`; NV12_SEPARATE would use two) and
    its properties."""

    ARRAYS = ("sysMem",)

    def __init__(self) -> None:
        self.sysMem = [hbSysMem() for _ in range(4)]
        self.properties = hbDNNTensorProperties()


class hbDNNInferCtrlParam(CStruct):
    """Control of one inference: core, priority, chaining, the second-level priority."""

    bpuCoreId: int
    dspCoreId: int
    priority: int
    more: int
    customId: int
    reserved1: int
    reserved2: int

    def __init__(self) -> None:
        _infer_defaults(self)


def _infer_defaults(param: hbDNNInferCtrlParam) -> None:
    param.bpuCoreId = HB_BPU_CORE_ANY
    param.dspCoreId = HB_DSP_CORE_ANY
    param.priority = HB_DNN_PRIORITY_LOWEST
    param.more = 0
    param.customId = 0
    param.reserved1 = 0
    param.reserved2 = 0


def HB_DNN_INITIALIZE_INFER_CTRL_PARAM(param: hbDNNInferCtrlParam) -> int:
    """The board's initialiser macro: any core, lowest priority, no chaining, customId 0."""
    if not isinstance(param, hbDNNInferCtrlParam):
        return HB_DNN_INVALID_ARGUMENT
    _infer_defaults(param)
    return HB_DNN_SUCCESS


class hbDNNRoi(CStruct):
    """A region of interest: left, top, right, bottom, right and bottom inclusive."""

    def __init__(self, left: int = 0, top: int = 0, right: int = 0, bottom: int = 0) -> None:
        self.left, self.top, self.right, self.bottom = left, top, right, bottom


class hbDNNResizeCtrlParam(CStruct):
    """Control of one hbDNNResize: core, priority, interpolation."""

    bpuCoreId: int
    priority: int
    resizeType: int
    reserved1: int
    reserved2: int
    reserved3: int
    reserved4: int

    def __init__(self) -> None:
        _resize_defaults(self)


def _resize_defaults(param: hbDNNResizeCtrlParam) -> None:
    param.bpuCoreId = HB_BPU_CORE_ANY
    param.priority = HB_DNN_PRIORITY_LOWEST
    param.resizeType = HB_DNN_RESIZE_TYPE_BILINEAR
    param.reserved1 = param.reserved2 = param.reserved3 = param.reserved4 = 0


def HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM(param: hbDNNResizeCtrlParam) -> int:
    """The board's initialiser macro: any core, lowest priority, bilinear."""
    if not isinstance(param, hbDNNResizeCtrlParam):
        return HB_DNN_INVALID_ARGUMENT
    _resize_defaults(param)
    return HB_DNN_SUCCESS


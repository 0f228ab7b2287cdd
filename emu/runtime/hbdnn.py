"""hbDNN: the board's inference API over compiled models (`emu compile`), C names and all.

    rc, packed = hbDNNInitializeFromFiles(["model.hbm"])
    rc, names, count = hbDNNGetModelNameList(packed)
    rc, dnn = hbDNNGetModelHandle(packed, names[0])
    props = hbDNNTensorProperties(); rc = hbDNNGetInputTensorProperties(props, dnn, 0)
    ... allocate hbSysMem of props.alignedByteSize, fill, hbSysFlushMem(CLEAN) ...
    ctrl = hbDNNInferCtrlParam(); HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
    rc, task = hbDNNInfer(outputs, inputs, dnn, ctrl)      # queued; returns at once
    rc = hbDNNWaitTaskDone(task, 0)                         # 0 or less: until done
    rc = hbDNNReleaseTask(task)

A task runs each model's segments (`emu/nn/placement.py`) where the compiler put them:
`emu/runtime/dnn_tasks.py` says how (BPU subgraphs on the BPU queue by priority, customId
and arrival, function call by function call; CPU items on the runtime's worker threads
through the A55 cache model, with the cache maintenance of every hand-off; DSP nodes as
hbDSP RPCs; plugin layers' `forward` on a worker). Each segment's values are computed when
it ends; when the last one ends the outputs are in the output buffers and the task
completes. Its buffers are pinned in the pool until then.

A model's tensors may have any rank, 0 (a scalar) to `HB_DNN_TENSOR_MAX_DIMENSIONS`:
`_properties` describes each at its rank (layout NCHW for a 4-D feature map, NHWC for an
image, NONE otherwise) and hbDNNInfer takes exactly that shape. No call raises: an
argument of the wrong type, value, shape or rank is an error code, and anything that goes
wrong inside a running task fails the task (`_task_process`: hbDNNWaitTaskDone returns
HB_DNN_RUN_TASK_FAILED).

Also here: `hbDNNRoiInfer` and `hbDNNResize` (the BPU's resizer, `emu/nn/resizer.py`),
plugin layers (`hbDNNRegisterLayerCreator`), NV12 rows aligned to 16 bytes (padded by the
runtime when a tensor's `alignedShape` is its `validShape`), NV12_SEPARATE, quantised
outputs (`emu compile --output-type` / `--output-codes`: SCALE per channel along
`quantizeAxis` or per tensor, SHIFT for powers of two), and the environment variables
`HB_DNN_LOG_LEVEL`, `HB_DNN_ENABLE_DSP`, `HB_DNN_SIM_PLATFORM`.

Error codes: the values of the J5 OE's `hb_dnn_status.h` (`HB_DNN_TASK_NUM_EXCEED_LIMIT` =
-6000009 as `shared/calibration/j5_bpu.md` quotes it); `HB_DNN_WRONG_THREAD` and
`HB_DNN_DEADLOCK` are the emulator's own (the board has no such situations).
"""

from __future__ import annotations

import enum
import functools
import math
import os
import sys
import weakref
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np
import simpy

from emu.errors import InputError
from emu.mem.pool import PoolBuffer
from emu.nn import compiler, execute, layers, preprocess, resizer
from emu.nn.compiler import CompiledModel
from emu.nn.execute import Execution
from emu.runtime import dnn_tasks, session, status
from emu.runtime.cstruct import CStruct
from emu.runtime.hbsys import buffer_of, hbSysMem
from emu.runtime.host import WaitResult
from emu.soc.sched import ANY_CORE, Task

HB_DNN_VERSION_MAJOR = 1
HB_DNN_VERSION_MINOR = 1
HB_DNN_VERSION_PATCH = 0
HB_DNN_TENSOR_MAX_DIMENSIONS = 8
MAX_TASKS = 32  # model tasks alive at once (hbDNNInfer's documented limit)
MAX_CHAINED = 255  # models one task may chain with `more`

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


# --- environment variables and logging ------------------------------------------------------

# The board's variables that mean something here (HB_DNN_ENABLE_DSP: `dnn_tasks`). Its
# Perfetto variables do not: traces come from `emu ... --trace` or `Session(trace=True)`.
ENV_LOG_LEVEL = HB_DNN_LOG_LEVEL = "HB_DNN_LOG_LEVEL"
ENV_SIM_PLATFORM = HB_DNN_SIM_PLATFORM = "HB_DNN_SIM_PLATFORM"
HB_DNN_ENABLE_DSP = dnn_tasks.ENV_ENABLE_DSP
HB_DNN_LOG_NONE, HB_DNN_LOG_WARNING, HB_DNN_LOG_ERROR, HB_DNN_LOG_FATAL = 0, 3, 4, 5
SIM_PLATFORMS = {"BAYES": True, "BERNOULLI": False, "BERNOULLI2": False}  # J5 is Bayes


def log_level() -> int:
    """`HB_DNN_LOG_LEVEL` (0 none, 3 warning, 4 error, 5 fatal; default warning, as the
    board's); an unreadable value counts as the default."""
    value = os.environ.get(ENV_LOG_LEVEL, "").strip()
    return int(value) if value in ("0", "3", "4", "5") else HB_DNN_LOG_WARNING


def _api(refused: Any, name: str | None = None
         ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A C-named function (`status.c_function`) that, as the board's library does, logs a
    failed call's error on stderr, under its C `name` (default: the function's), when the
    log level lets errors through (3 or 4)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        guarded = status.c_function(refused)(fn)
        c_name = name or fn.__name__

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            result = guarded(*args, **kwargs)
            rc = result[0] if isinstance(result, tuple) else result
            if isinstance(rc, int) and rc < 0 and log_level() in (HB_DNN_LOG_WARNING,
                                                                  HB_DNN_LOG_ERROR):
                print(f"[hbDNN] [E] {c_name}: {status.describe(rc)}", file=sys.stderr)
            return result

        return call

    return wrap


def _platform_refuses() -> int | None:
    """`HB_DNN_SIM_PLATFORM`, accepted as the x86 simulator's: BAYES (J5) or unset runs the
    models; BERNOULLI / BERNOULLI2 (XJ2 / XJ3) cannot run a J5 model; anything else is not
    a platform."""
    value = os.environ.get(ENV_SIM_PLATFORM)
    if value is None or SIM_PLATFORMS.get(value.strip()) is True:
        return None
    return HB_DNN_INCOMPATIBLE_MODEL if value.strip() in SIM_PLATFORMS \
        else HB_DNN_INVALID_ARGUMENT


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


# --- handles ---------------------------------------------------------------------------------

class hbPackedDNNHandle:
    """The models of one or more model files, loaded into a session."""

    def __init__(self, sess: session.Session, models: list[CompiledModel]) -> None:
        self.session = sess
        self.models = models
        self.handles = {m.name: hbDNNHandle(self, m) for m in models}
        self.released = False
        self.compute_outputs = True  # see `set_timing_only`

    def __repr__(self) -> str:
        names = ", ".join(m.name for m in self.models)
        return f"<hbPackedDNNHandle [{names}]{' released' if self.released else ''}>"


class hbDNNHandle:
    """One model of a packed handle."""

    def __init__(self, packed: hbPackedDNNHandle, model: CompiledModel) -> None:
        self.packed = packed
        self.model = model
        self.tasks_alive = 0
        self._plan: dnn_tasks.ModelPlan | None = None
        self._described: dict[str, hbDNNTensorProperties] = {}

    def plan(self) -> dnn_tasks.ModelPlan:
        """How the model runs on the session's hardware: worked out once per model."""
        if self._plan is None:
            self._plan = dnn_tasks.plan(self.model, self.packed.session)
        return self._plan

    def described(self, name: str) -> hbDNNTensorProperties:
        """Tensor `name` as hbDNN describes it (`_properties`), worked out once per tensor,
        for the runtime to check tensors against (callers get their own copy)."""
        if name not in self._described:
            self._described[name] = _properties(self.model, name)
        return self._described[name]

    def __repr__(self) -> str:
        return f"<hbDNNHandle {self.model.name!r}>"


class _Entry(NamedTuple):
    """One model of a task: its handle, where its inputs are, its outputs' buffers."""

    dnn: hbDNNHandle
    sources: list[_Input]
    outputs: list[PoolBuffer]
    rois: tuple[tuple[_Image, resizer.Roi] | None, ...] = ()  # hbDNNRoiInfer: per batch slot
    out_offset: int = 0  # hbDNNRoiInfer: which batch group's rows of the outputs it fills

    @property
    def inputs(self) -> list[PoolBuffer]:
        return [source.buffer for source in self.sources]

    @property
    def buffers(self) -> list[PoolBuffer]:
        """Every buffer it uses (pinned while the task lives)."""
        images = [slot[0].buffer for slot in self.rois if slot is not None]
        return [*(b for source in self.sources for b in source.planes), *images,
                *self.outputs]


class hbDNNTask:
    """A task handle returned by hbDNNInfer: one model, or up to `MAX_CHAINED` chained with
    `more`; its figures once it is done."""

    def __init__(self, sess: session.Session, name: str, core: int, priority: int,
                 custom_id: int) -> None:
        self.session = sess
        self.name = name
        self.core, self.priority, self.custom_id = core, priority, custom_id
        self.entries: list[_Entry] = []
        self.open = True  # `more` was set: more models may join before it starts
        self.completed: simpy.Event = sess.soc.env.event()
        self.released = False
        self.cancelled = False
        self.error: str | None = None
        self.submitted_ps = sess.now_ps
        self.finished_ps = -1
        self.segments: list[dict[str, Any]] = []  # per segment: model, kind, times
        self.bpu_task: Task | None = None  # its BPU subgraph on the queue or a core
        self.pinned: list[PoolBuffer] = []  # the buffers it uses, pinned until it ends

    def __repr__(self) -> str:
        return f"<hbDNNTask {self.name!r}{' released' if self.released else ''}>"


_BPU_CORES = {HB_BPU_CORE_ANY: ANY_CORE, HB_BPU_CORE_0: 0, HB_BPU_CORE_1: 1}
_TYPES = {"float32": HB_DNN_TENSOR_TYPE_F32, "uint8": HB_DNN_TENSOR_TYPE_U8,
          "int8": HB_DNN_TENSOR_TYPE_S8, "int16": HB_DNN_TENSOR_TYPE_S16,
          "int32": HB_DNN_TENSOR_TYPE_S32, "float64": HB_DNN_TENSOR_TYPE_F64,
          "int64": HB_DNN_TENSOR_TYPE_S64}
_IMAGE_TYPES = {"nv12": HB_DNN_IMG_TYPE_NV12, "rgb": HB_DNN_IMG_TYPE_RGB,
                "bgr": HB_DNN_IMG_TYPE_BGR, "yuv444": HB_DNN_IMG_TYPE_YUV444,
                "gray": HB_DNN_IMG_TYPE_Y}


_TASKS_ALIVE: weakref.WeakKeyDictionary[session.Session, int] = weakref.WeakKeyDictionary()


def _live_packed(handle: Any, sess: session.Session) -> hbPackedDNNHandle | None:
    if isinstance(handle, hbPackedDNNHandle) and handle.session is sess and not handle.released:
        return handle
    return None


def _live_dnn(handle: Any, sess: session.Session) -> hbDNNHandle | None:
    if isinstance(handle, hbDNNHandle) and _live_packed(handle.packed, sess) is not None:
        return handle
    return None


def _live_task(task: Any, sess: session.Session) -> hbDNNTask | None:
    if isinstance(task, hbDNNTask) and task.session is sess and not task.released:
        return task
    return None


# --- loading ----------------------------------------------------------------------------------

def hbDNNGetVersion() -> str:
    return f"{HB_DNN_VERSION_MAJOR}.{HB_DNN_VERSION_MINOR}.{HB_DNN_VERSION_PATCH}"


def _packed(sess: session.Session, models: list[CompiledModel]) -> tuple[int, Any]:
    refused = _platform_refuses()
    if refused is not None:
        return refused, None
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        return HB_DNN_INVALID_MODEL, None
    return HB_DNN_SUCCESS, hbPackedDNNHandle(sess, models)


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNInitializeFromFiles(modelFileNames: Any, modelFileCount: Any = None
                             ) -> tuple[int, hbPackedDNNHandle | None]:
    """Load every model of the files; returns (rc, packed handle)."""
    sess, thread = session.caller()
    with thread.call("hbDNNInitializeFromFiles"):
        if not isinstance(modelFileNames, list | tuple) or not modelFileNames or not all(
                isinstance(n, str | Path) for n in modelFileNames):
            return HB_DNN_INVALID_ARGUMENT, None
        if modelFileCount is not None and status.as_int(modelFileCount) != len(modelFileNames):
            return HB_DNN_INVALID_ARGUMENT, None
        models: list[CompiledModel] = []
        for name in modelFileNames:
            try:
                readable = Path(name).is_file()
            except OSError:  # a name the file system refuses (too long, ...)
                readable = False
            if not readable:
                return HB_DNN_CAN_NOT_OPEN_FILE, None
            try:
                models += compiler.load_file(name)
            except InputError:
                return HB_DNN_INVALID_MODEL, None
        return _packed(sess, models)


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNInitializeFromDDR(modelData: Any, modelDataLengths: Any, modelDataCount: Any = None
                           ) -> tuple[int, hbPackedDNNHandle | None]:
    """Load every model of the files' bytes already in memory; returns (rc, packed)."""
    sess, thread = session.caller()
    with thread.call("hbDNNInitializeFromDDR"):
        if not isinstance(modelData, list | tuple) or not modelData \
                or not isinstance(modelDataLengths, list | tuple) \
                or len(modelDataLengths) != len(modelData):
            return HB_DNN_INVALID_ARGUMENT, None
        if modelDataCount is not None and status.as_int(modelDataCount) != len(modelData):
            return HB_DNN_INVALID_ARGUMENT, None
        models: list[CompiledModel] = []
        for k, (data, length) in enumerate(zip(modelData, modelDataLengths, strict=True)):
            size = status.as_int(length, 1)
            try:  # a released memoryview has no bytes
                raw = bytes(data) if isinstance(
                    data, bytes | bytearray | memoryview | np.ndarray) else None
            except ValueError:
                raw = None
            if raw is None or size is None or size > len(raw):
                return HB_DNN_INVALID_ARGUMENT, None
            try:
                models += compiler.load_bytes(raw[:size], f"model data {k}")
            except InputError:
                return HB_DNN_INVALID_MODEL, None
        return _packed(sess, models)


@_api(HB_DNN_WRONG_THREAD)
def hbDNNRelease(packedDNNHandle: Any) -> int:
    """Release the models; refused while a task of one of them is not released."""
    sess, thread = session.caller()
    with thread.call("hbDNNRelease"):
        packed = _live_packed(packedDNNHandle, sess)
        if packed is None:
            return HB_DNN_INVALID_PACKED_DNN_HANDLE
        if any(h.tasks_alive for h in packed.handles.values()):
            return HB_DNN_MODEL_IS_RUNNING
        for handle in packed.handles.values():
            if handle._plan is not None:
                dnn_tasks.free_scratch(handle._plan, sess)
        packed.released = True
        return HB_DNN_SUCCESS


# --- model information ---------------------------------------------------------------------

@_api((HB_DNN_WRONG_THREAD, None, None))
def hbDNNGetModelNameList(packedDNNHandle: Any) -> tuple[int, list[str] | None, int | None]:
    """The names of the packed models and their count: C's two out-parameters,
    `modelNameList` and `modelNameCount`, in that order after the status."""
    sess = session.current()
    packed = _live_packed(packedDNNHandle, sess)
    if packed is None:
        return HB_DNN_INVALID_PACKED_DNN_HANDLE, None, None
    names = [m.name for m in packed.models]
    return HB_DNN_SUCCESS, names, len(names)


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNGetModelHandle(packedDNNHandle: Any, modelName: Any) -> tuple[int, hbDNNHandle | None]:
    sess = session.current()
    packed = _live_packed(packedDNNHandle, sess)
    if packed is None:
        return HB_DNN_INVALID_PACKED_DNN_HANDLE, None
    if not isinstance(modelName, str) or modelName not in packed.handles:
        return HB_DNN_INVALID_ARGUMENT, None
    return HB_DNN_SUCCESS, packed.handles[modelName]


def _count(handle: Any, outputs: bool) -> tuple[int, int | None]:
    dnn = _live_dnn(handle, session.current())
    if dnn is None:
        return HB_DNN_INVALID_DNN_HANDLE, None
    return HB_DNN_SUCCESS, len(dnn.model.outputs if outputs else dnn.model.inputs)


def _tensor_at(handle: Any, index: Any, outputs: bool) -> tuple[int, Any, Any]:
    dnn = _live_dnn(handle, session.current())
    if dnn is None:
        return HB_DNN_INVALID_DNN_HANDLE, None, None
    tensors = dnn.model.outputs if outputs else dnn.model.inputs
    k = status.as_int(index, 0, len(tensors) - 1)
    if k is None:
        return HB_DNN_INVALID_ARGUMENT, None, None
    return HB_DNN_SUCCESS, dnn, tensors[k]


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNGetInputCount(dnnHandle: Any) -> tuple[int, int | None]:
    return _count(dnnHandle, outputs=False)


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNGetOutputCount(dnnHandle: Any) -> tuple[int, int | None]:
    return _count(dnnHandle, outputs=True)


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNGetInputName(dnnHandle: Any, inputIndex: Any) -> tuple[int, str | None]:
    rc, _, tensor = _tensor_at(dnnHandle, inputIndex, outputs=False)
    return rc, None if tensor is None else tensor.name


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNGetOutputName(dnnHandle: Any, outputIndex: Any) -> tuple[int, str | None]:
    rc, _, tensor = _tensor_at(dnnHandle, outputIndex, outputs=True)
    return rc, None if tensor is None else tensor.name


def hbDNNGetInputTensorProperties(*args: Any) -> Any:
    """C's `hbDNNGetInputTensorProperties(&properties, dnnHandle, inputIndex)`: called
    `(properties, dnnHandle, inputIndex)` it fills the caller's struct and returns the
    status; called `(dnnHandle, inputIndex)` it returns (status, a new struct or None)."""
    return (_fill_input if len(args) == 3 else _new_input)(*args)


def hbDNNGetOutputTensorProperties(*args: Any) -> Any:
    """As `hbDNNGetInputTensorProperties`, for output `outputIndex`."""
    return (_fill_output if len(args) == 3 else _new_output)(*args)


def _new_properties(dnnHandle: Any, index: Any, outputs: bool
                    ) -> tuple[int, hbDNNTensorProperties | None]:
    rc, dnn, tensor = _tensor_at(dnnHandle, index, outputs=outputs)
    return rc, None if tensor is None else _properties(dnn.model, tensor.name)


def _fill_properties(properties: Any, dnnHandle: Any, index: Any, outputs: bool) -> int:
    if not isinstance(properties, hbDNNTensorProperties):
        return HB_DNN_INVALID_ARGUMENT
    rc, found = _new_properties(dnnHandle, index, outputs)
    if found is not None:
        for name, value in vars(found).items():
            setattr(properties, name, value)
    return rc


_new_input = _api((HB_DNN_WRONG_THREAD, None), "hbDNNGetInputTensorProperties")(
    functools.partial(_new_properties, outputs=False))
_new_output = _api((HB_DNN_WRONG_THREAD, None), "hbDNNGetOutputTensorProperties")(
    functools.partial(_new_properties, outputs=True))
_fill_input = _api(HB_DNN_WRONG_THREAD, "hbDNNGetInputTensorProperties")(
    functools.partial(_fill_properties, outputs=False))
_fill_output = _api(HB_DNN_WRONG_THREAD, "hbDNNGetOutputTensorProperties")(
    functools.partial(_fill_properties, outputs=True))


def _properties(model: CompiledModel, name: str) -> hbDNNTensorProperties:
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
    nv12 = dnn_tasks.nv12_dims(model, name)
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


# --- inference -----------------------------------------------------------------------------

class _Input(NamedTuple):
    """Where an input's data is: its buffer (for NV12_SEPARATE, the Y and the UV plane's),
    and for NV12 the bytes per row (the aligned width, or the valid one when the tensor's
    `alignedShape` was set to its `validShape`: the runtime then pads a copy first)."""

    planes: tuple[PoolBuffer, ...]
    pitch: int = 0

    @property
    def buffer(self) -> PoolBuffer:
        return self.planes[0]


def _tensor_buffers(tensors: Any, names: Sequence[str], dnn: hbDNNHandle,
                    sess: session.Session) -> list[_Input] | int:
    """Where each tensor's data is (checked against the model's tensor), or an rc."""
    model = dnn.model
    if not isinstance(tensors, list | tuple) or len(tensors) != len(names):
        return HB_DNN_INVALID_ARGUMENT
    found = []
    for tensor, name in zip(tensors, names, strict=True):
        if not isinstance(tensor, hbDNNTensor) or not isinstance(tensor.sysMem, list | tuple) \
                or not tensor.sysMem:
            return HB_DNN_INVALID_ARGUMENT
        wanted = dnn.described(name)
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
        nv12 = dnn_tasks.nv12_dims(model, name)
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
        found.append(_Input(tuple(b for b in planes if b is not None), pitch))
    return found


class _Ctrl(NamedTuple):
    core: int
    priority: int
    custom_id: int
    more: int


def _parse_ctrl(ctrl: Any, sess: session.Session) -> _Ctrl | None:
    if not isinstance(ctrl, hbDNNInferCtrlParam):
        return None
    priority = status.as_int(ctrl.priority, HB_DNN_PRIORITY_LOWEST, HB_DNN_PRIORITY_HIGHEST)
    custom_id = status.as_int(ctrl.customId, -(2**63), 2**63 - 1)
    core_id = status.as_int(ctrl.bpuCoreId)
    more = status.as_int(ctrl.more, 0, 1) if not isinstance(ctrl.more, bool) \
        else int(ctrl.more)
    if priority is None or custom_id is None or core_id not in _BPU_CORES or more is None:
        return None
    core = _BPU_CORES[core_id]
    if core >= sess.soc.bpu.cores:
        return None
    return _Ctrl(core, priority, custom_id, more)


def _joined(taskHandle: Any, sess: session.Session) -> hbDNNTask | int | None:
    """The open task `taskHandle` names (None for C's nullptr), or an rc."""
    if taskHandle is None:
        return None
    joined = _live_task(taskHandle, sess)
    if joined is None or not joined.open:
        return HB_DNN_INVALID_TASK_HANDLE
    if len(joined.entries) >= MAX_CHAINED:
        return HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT
    return joined


def _request(sess: session.Session, dnnHandle: Any, inferCtrlParam: Any, taskHandle: Any
             ) -> tuple[hbDNNHandle, _Ctrl, hbDNNTask | None] | int:
    """What hbDNNInfer and hbDNNRoiInfer check first: the model, the control parameters and
    the task to join (None: a new one); or the rc."""
    dnn = _live_dnn(dnnHandle, sess)
    if dnn is None:
        return HB_DNN_INVALID_DNN_HANDLE
    ctrl = _parse_ctrl(inferCtrlParam, sess)
    if ctrl is None:
        return HB_DNN_INVALID_ARGUMENT
    joined = _joined(taskHandle, sess)
    return joined if isinstance(joined, int) else (dnn, ctrl, joined)


def _new_task(sess: session.Session, name: str, ctrl: _Ctrl) -> hbDNNTask | None:
    """A new task handle, or None when `MAX_TASKS` are alive already."""
    if _TASKS_ALIVE.get(sess, 0) >= MAX_TASKS:
        return None
    _TASKS_ALIVE[sess] = _TASKS_ALIVE.get(sess, 0) + 1
    return hbDNNTask(sess, f"{name} #{sess.next_serial()}", ctrl.core, ctrl.priority,
                     ctrl.custom_id)


def _submit(sess: session.Session, call: Any, joined: hbDNNTask | None, ctrl: _Ctrl,
            dnn: hbDNNHandle, entries: list[_Entry]) -> tuple[int, hbDNNTask | None]:
    """Add a model's entries to the joined task or a new one; start it unless `more`."""
    if not dnn_tasks.ensure_scratch(dnn.plan(), sess, dnn.model.name):
        return HB_DNN_OUT_OF_MEMORY, None
    handle = joined or _new_task(sess, dnn.model.name, ctrl)
    if handle is None:
        return HB_DNN_TASK_NUM_EXCEED_LIMIT, None
    for entry in entries:
        handle.entries.append(entry)
        dnn.tasks_alive += 1
        for buf in entry.buffers:
            sess.soc.pool.pin(buf)
            handle.pinned.append(buf)
    if not ctrl.more:
        handle.open = False
        sess.soc.env.process(_task_process(sess, handle, _run(sess, handle, call)))
    return HB_DNN_SUCCESS, handle


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNInfer(output: Any, input: Any, dnnHandle: Any, inferCtrlParam: Any,
               taskHandle: Any = None) -> tuple[int, hbDNNTask | None]:
    """Queue one inference of `dnnHandle` on `input` -> `output` (lists of hbDNNTensor in
    the model's order); returns (rc, task) at once. C's in/out `taskHandle` is the last
    parameter: None (C's nullptr) makes a new task; a task returned by a call with
    `inferCtrlParam.more` set takes this model too, and the task starts with the first
    call whose `more` is 0 (its models then run one after another; up to 255)."""
    sess, thread = session.caller()
    with thread.call("hbDNNInfer") as call:
        request = _request(sess, dnnHandle, inferCtrlParam, taskHandle)
        if isinstance(request, int):
            return request, None
        dnn, ctrl, joined = request
        model = dnn.model
        if model.options.get("input_source", "ddr") == "resizer":
            return HB_DNN_API_USE_ERROR, None
        ins = _tensor_buffers(input, model.graph.inputs, dnn, sess)
        if isinstance(ins, int):
            return ins, None
        found = _tensor_buffers(output, model.graph.outputs, dnn, sess)
        if isinstance(found, int):
            return found, None
        return _submit(sess, call, joined, ctrl, dnn,
                       [_Entry(dnn, ins, [source.buffer for source in found])])


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNRoiInfer(output: Any, input: Any, rois: Any, roiCount: Any, dnnHandle: Any,
                  inferCtrlParam: Any, taskHandle: Any = None
                  ) -> tuple[int, hbDNNTask | None]:
    """Queue an inference of a model whose image input comes from the BPU's resizer
    (`emu compile --input-source resizer`) on `roiCount` regions (`rois`, hbDNNRoi) of
    the images in `input` (one image tensor per ROI, any size: its `validShape` and, for
    the row stride, its `alignedShape`). data_batch = roiCount ROIs run model_batch at a
    time (the model's compiled batch), so each output's first dimension is
    ceil(data_batch / model_batch) x model_batch: the last group's missing slots are
    computed from zeros and hold no valid data, as on the board. (The groups' outputs
    follow one another along the first dimension, so an output whose first dimension is
    not the batch has ceil(data_batch / model_batch) times it; a scalar output has one
    value per group.) Returns (rc, task)."""
    sess, thread = session.caller()
    with thread.call("hbDNNRoiInfer") as call:
        request = _request(sess, dnnHandle, inferCtrlParam, taskHandle)
        if isinstance(request, int):
            return request, None
        dnn, ctrl, joined = request
        model = dnn.model
        fmt = model.options.get("input_type")
        if model.options.get("input_source", "ddr") != "resizer":
            return HB_DNN_API_USE_ERROR, None
        count = status.as_int(roiCount, 1, MAX_DATA_BATCH)
        if count is None or not isinstance(rois, list | tuple) or len(rois) != count \
                or not isinstance(input, list | tuple) or len(input) != count:
            return HB_DNN_INVALID_ARGUMENT, None
        width, height = _input_size(model)
        slots: list[tuple[_Image, resizer.Roi] | None] = []
        for tensor, box in zip(input, rois, strict=True):
            image = _image(tensor, sess)
            if image is None or image.fmt != fmt:
                return HB_DNN_INVALID_ARGUMENT, None
            roi = _roi(box, image)
            if roi is None or resizer.check(image.w, image.h, image.stride, roi, width, height,
                                            image.fmt) is not None:
                return HB_DNN_INVALID_ARGUMENT, None
            slots.append((image, roi))
        batch = model.batch
        groups = -(-count // batch)
        outs = _roi_outputs(output, model, groups, sess)
        if isinstance(outs, int):
            return outs, None
        slots += [None] * (groups * batch - count)
        entries = [_Entry(dnn, [], outs, tuple(slots[g * batch:(g + 1) * batch]), g)
                   for g in range(groups)]
        return _submit(sess, call, joined, ctrl, dnn, entries)


MAX_DATA_BATCH = 255  # hbDNNRoiInfer's data_batch: [1, 255] (seed 000)


def _input_size(model: CompiledModel) -> tuple[int, int]:
    """(W, H) of an image model's input."""
    shape = model.graph.tensors[model.graph.inputs[0]].shape
    if model.options.get("input_type") == "nv12":
        return shape[2], shape[1] * 2 // 3
    return shape[2], shape[1]


def _roi_outputs(output: Any, model: CompiledModel, groups: int, sess: session.Session
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


# --- the resizer ------------------------------------------------------------------------

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


_RESIZER_FORMATS = {HB_DNN_IMG_TYPE_NV12: "nv12", HB_DNN_IMG_TYPE_Y: "gray",
                    HB_DNN_IMG_TYPE_RGB: "rgb", HB_DNN_IMG_TYPE_BGR: "bgr",
                    HB_DNN_IMG_TYPE_YUV444: "yuv444"}


class _Image(NamedTuple):
    """An image in a pool buffer as the resizer reads or writes it."""

    fmt: str
    w: int
    h: int
    stride: int  # bytes per row of a plane
    buffer: PoolBuffer

    def rows(self) -> int:
        return self.h * 3 // 2 if self.fmt == "nv12" else self.h


def _image(tensor: Any, sess: session.Session) -> _Image | None:
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
    image = None if buf is None else _Image(fmt, w, h, wa * channels, buf)
    if image is None or image.buffer.size_bytes < image.rows() * image.stride:
        return None
    return image


def _roi(box: Any, image: _Image) -> resizer.Roi | None:
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


@_api((HB_DNN_WRONG_THREAD, None))
def hbDNNResize(output: Any, input: Any, roi: Any, resizeCtrlParam: Any
                ) -> tuple[int, hbDNNTask | None]:
    """Queue a resize on the BPU's resizer: the `roi` (hbDNNRoi; None: the whole image) of
    the `input` image to the size of the `output` image (same format: NV12, Y, RGB, BGR or
    YUV444), bilinear (`emu/nn/resizer.py`). Returns (rc, task); wait for and release the
    task as for hbDNNInfer (it counts toward the 32 tasks)."""
    sess, thread = session.caller()
    with thread.call("hbDNNResize") as call:
        ctrl = resizeCtrlParam
        if not isinstance(ctrl, hbDNNResizeCtrlParam):
            return HB_DNN_INVALID_ARGUMENT, None
        as_infer = hbDNNInferCtrlParam()
        as_infer.bpuCoreId, as_infer.priority = ctrl.bpuCoreId, ctrl.priority
        parsed = _parse_ctrl(as_infer, sess)
        if parsed is None or status.as_int(ctrl.resizeType) != HB_DNN_RESIZE_TYPE_BILINEAR:
            return HB_DNN_INVALID_ARGUMENT, None
        src, dst = _image(input, sess), _image(output, sess)
        if src is None or dst is None or src.fmt != dst.fmt:
            return HB_DNN_INVALID_ARGUMENT, None
        box = _roi(roi, src)
        if box is None or resizer.check(src.w, src.h, src.stride, box, dst.w, dst.h,
                                        src.fmt) is not None:
            return HB_DNN_INVALID_ARGUMENT, None
        handle = _new_task(sess, "resize", parsed)
        if handle is None:
            return HB_DNN_TASK_NUM_EXCEED_LIMIT, None
        handle.open = False
        for buf in {src.buffer.phys_addr: src.buffer, dst.buffer.phys_addr: dst.buffer}.values():
            sess.soc.pool.pin(buf)
            handle.pinned.append(buf)
        sess.soc.env.process(_task_process(sess, handle,
                                           _run_resize(sess, handle, call, src, box, dst)))
        return HB_DNN_SUCCESS, handle


def _run_resize(sess: session.Session, handle: hbDNNTask, call: Any, src: _Image,
                box: resizer.Roi, dst: _Image) -> Generator[simpy.Event, Any, None]:
    soc = sess.soc
    start = soc.env.now
    job = soc.bpu.model_task(handle.name, [resizer.layer_group("resize", src.fmt, dst.w, dst.h,
                                                               [box])],
                             core=handle.core, priority=handle.priority)
    call.link(job)
    handle.bpu_task = job
    yield soc.bpu.submit(job)
    handle.bpu_task = None
    if job.started_ps >= 0:
        handle.segments.append({"model": 0, "segment": 0, "kind": "bpu", "name": "resize",
                                "start_ps": start, "end_ps": soc.env.now,
                                "busy_ps": job.busy_ps, "pending_ps": job.pending_ps})
    if not handle.cancelled:
        _write_image(dst, _resized(src, box, dst.w, dst.h))


def _resized(src: _Image, box: resizer.Roi, w: int, h: int) -> np.ndarray:
    return resizer.resize(src.buffer.data[:src.rows() * src.stride], src.fmt, src.w, src.h,
                          src.stride, box, w, h)


def _write_image(dst: _Image, pixels: np.ndarray) -> None:
    """The resizer's output (compact rows) into `dst`'s rows of `stride` bytes."""
    rows = pixels.reshape(dst.rows(), -1)
    view = dst.buffer.data[:dst.rows() * dst.stride].reshape(dst.rows(), dst.stride)
    view[:, :rows.shape[1]] = rows


def _task_process(sess: session.Session, handle: hbDNNTask,
                  steps: Generator[simpy.Event, Any, None]
                  ) -> Generator[simpy.Event, Any, None]:
    """A task's simulation process: its `steps`, then it completes. An exception in them
    (an emulator bug) fails the task, so hbDNNWaitTaskDone returns HB_DNN_RUN_TASK_FAILED
    (the error in `handle.error`) instead of raising from whichever call drives the
    simulation at that moment."""
    try:
        yield from steps
    except Exception as exc:
        handle.error = f"{type(exc).__name__}: {exc}"
    for buf in handle.pinned:
        sess.soc.pool.unpin(buf)
    handle.finished_ps = sess.soc.env.now
    handle.completed.succeed()


def _run(sess: session.Session, handle: hbDNNTask, call: Any
         ) -> Generator[simpy.Event, Any, None]:
    """The task's models one after another, each segment by segment (`dnn_tasks`), then
    each model's outputs into its output buffers. Consecutive models of one BPU subgraph
    each (input quantize and output dequantize aside) run as one BPU task, as the board's
    runtime submits models chained with `more` (`dnn_tasks.run_bpu`): their input
    segments first, then the BPU task, then their output segments."""
    linked = False

    def link(task: Task) -> None:
        nonlocal linked
        if not linked:
            call.link(task)
            linked = True

    plugins = dict(_PLUGINS.get(sess, {}))
    groups: list[list[int]] = []
    for number, entry in enumerate(handle.entries):
        if groups and _chainable(entry.dnn.model) and _chainable(
                handle.entries[groups[-1][-1]].dnn.model):
            groups[-1].append(number)
        else:
            groups.append([number])
    for group in groups:
        if handle.cancelled or handle.error:
            break
        runs = [_ModelRun(sess, handle, number, plugins) for number in group]
        if len(runs) == 1:
            yield from runs[0].all(link)
            continue
        for run in runs:
            yield from run.segments(0, run.bpu_index)
        if handle.cancelled or handle.error:
            break
        yield from dnn_tasks.run_bpu(sess, handle, [run.bpu_part() for run in runs], link)
        for run in runs:
            if run.ex is not None and not handle.cancelled and not handle.error:
                run.ex.run_segment(run.bpu_index)
        for run in runs:
            yield from run.segments(run.bpu_index + 1, len(run.model.segments))
            run.finish()


def _chainable(model: CompiledModel) -> bool:
    """Whether a model's BPU work is one subgraph, the CPU doing only the input quantize
    before and the output dequantize after it: what `more` can chain into one BPU task."""
    return [s.kind for s in model.segments if s.kind not in ("quantize", "dequantize")] == \
        ["bpu"]


class _ModelRun:
    """One model of a task as it runs: its inference, buffers and segments."""

    def __init__(self, sess: session.Session, handle: hbDNNTask, number: int,
                 plugins: dict[str, Callable[[], Any]]) -> None:
        self.sess, self.handle, self.number, self.plugins = sess, handle, number, plugins
        self.entry = entry = handle.entries[number]
        self.model = entry.dnn.model
        self.plan = entry.dnn.plan()
        self.ex = _execution(handle, entry)
        self.buffers = {**dict(zip(self.model.graph.inputs, entry.inputs, strict=False)),
                        **dict(zip(self.model.graph.outputs, entry.outputs, strict=True))}
        self.bpu_index = next((k for k, seg in enumerate(self.model.segments)
                               if seg.kind == "bpu"), -1)
        self.padded = False

    def all(self, link: Callable[[Task], None]) -> Generator[simpy.Event, Any, None]:
        """Every segment in order, then the outputs."""
        yield from self.segments(0, len(self.model.segments), link)
        self.finish()

    def segments(self, begin: int, end: int, link: Callable[[Task], None] | None = None
                 ) -> Generator[simpy.Event, Any, None]:
        """Segments `begin` to `end` (a BPU one needs `link`); first of all, the runtime's
        padding of unaligned NV12 inputs."""
        if not self.padded:
            self.padded = True
            if any(source.pitch and source.pitch % preprocess.NV12_WIDTH_ALIGN
                   for source in self.entry.sources):
                yield from self._host(-1)
        for index in range(begin, end):
            if self.handle.cancelled or self.handle.error:
                return
            if self.model.segments[index].kind == "bpu":
                assert link is not None
                # hbDNNRoiInfer: the resizer's jobs run in the model's first function call
                yield from dnn_tasks.run_bpu(self.sess, self.handle, [self._part(index)],
                                             link)
                if self.ex is not None:
                    self.ex.run_segment(index)
                continue
            yield from self._host(index)

    def _host(self, index: int) -> Generator[simpy.Event, Any, None]:
        done = self.sess.soc.env.event()
        dnn_tasks.submit_host_job(self.sess, dnn_tasks.SegmentRun(
            self.sess, self.handle, self.model, self.plan, self.number, index, self.ex,
            self.buffers, self.plugins, done))
        yield done

    def _part(self, index: int) -> dnn_tasks.BpuPart:
        prefix = _resize_jobs(self.model, self.entry) if index == self.bpu_index else []
        return (self.model, self.plan, self.number, index, prefix)

    def bpu_part(self) -> dnn_tasks.BpuPart:
        return self._part(self.bpu_index)

    def finish(self) -> None:
        if self.ex is not None and not self.handle.cancelled and not self.handle.error:
            _write_outputs(self.entry, self.ex)


def _execution(handle: hbDNNTask, entry: _Entry) -> Execution | None:
    """The model's inference from its input buffers as they are now, or None when the
    model is timed only."""
    if not entry.dnn.packed.compute_outputs:
        return None
    model = entry.dnn.model
    feeds = {}
    if entry.rois:  # hbDNNRoiInfer: the resizer's outputs, zeros in the empty slots
        name = model.graph.inputs[0]
        t = model.graph.tensors[name]
        width, height = _input_size(model)
        feeds[name] = np.stack([np.zeros(t.shape[1:], np.uint8) if slot is None else
                                _resized(slot[0], slot[1], width, height).reshape(t.shape[1:])
                                for slot in entry.rois])
    for name, source in zip(model.graph.inputs, entry.sources, strict=False):
        t = model.graph.tensors[name]
        nv12 = dnn_tasks.nv12_dims(model, name)
        if nv12 is None:
            size = math.prod(t.shape) * np.dtype(t.dtype).itemsize
            feeds[name] = source.buffer.data[:size].view(t.dtype).reshape(t.shape).copy()
        else:
            feeds[name] = _nv12_rows(source, *nv12)
    try:
        return Execution(model.quant, feeds)
    except InputError as exc:
        handle.error = str(exc)
        return None


def _nv12_rows(source: _Input, n: int, _c: int, h: int, w: int) -> np.ndarray:
    """An NV12 input as the model reads it, (N, H * 3 / 2, W): from one buffer holding each
    image's Y then UV rows, or (NV12_SEPARATE) from a Y and a UV buffer, rows `pitch` apart."""
    pitch = source.pitch
    if len(source.planes) == 1:
        frames = source.buffer.data[:n * h * pitch * 3 // 2].reshape(n, h * 3 // 2, pitch)
        return frames[:, :, :w].copy()
    y = source.planes[0].data[:n * h * pitch].reshape(n, h, pitch)
    uv = source.planes[1].data[:n * h * pitch // 2].reshape(n, h // 2, pitch)
    return np.concatenate([y[:, :, :w], uv[:, :, :w]], axis=1)


def _write_outputs(entry: _Entry, ex: Execution) -> None:
    model = entry.dnn.model
    codes = model.code_outputs()
    results = ex.outputs()
    for name, buf in zip(model.graph.outputs, entry.outputs, strict=True):
        value = ex.output_codes(name) if name in codes else \
            np.asarray(results[name], np.float32)
        raw = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
        at = entry.out_offset * raw.size  # the batch group's rows (hbDNNRoiInfer)
        buf.data[at:at + raw.size] = raw


def _resize_jobs(model: CompiledModel, entry: _Entry) -> list[Any]:
    """The resizer's layer group for an hbDNNRoiInfer batch group: it reads the group's
    ROIs and fills the model's image input on the way in (`resizer.layer_group`); none
    for hbDNNInfer, whose model need not have an image input."""
    if not entry.rois:
        return []
    width, height = _input_size(model)
    name = model.graph.inputs[0]
    fmt = str(model.options["input_type"])
    image = layers.image_ref(name, fmt, model.graph.tensors[name].shape)
    rois = [slot[1] for slot in entry.rois if slot is not None]
    return [resizer.layer_group("resizer", fmt, width, height, rois, into=image)]


@_api(HB_DNN_WRONG_THREAD)
def hbDNNWaitTaskDone(taskHandle: Any, timeout: Any) -> int:
    """Wait for the task; `timeout` in ms, <= 0 waits until it is done (simulated time)."""
    sess, thread = session.caller()
    handle = _live_task(taskHandle, sess)
    if handle is None:
        return HB_DNN_INVALID_TASK_HANDLE
    wait = status.timeout_ps(timeout)
    if wait is False:
        return HB_DNN_INVALID_ARGUMENT
    result = thread.wait(handle.completed, wait, "hbDNNWaitTaskDone")
    if result is WaitResult.TIMEOUT:
        return HB_DNN_TIMEOUT
    if result is WaitResult.DEADLOCK:
        return HB_DNN_DEADLOCK
    return HB_DNN_RUN_TASK_FAILED if handle.error else HB_DNN_SUCCESS


@_api(HB_DNN_WRONG_THREAD)
def hbDNNReleaseTask(taskHandle: Any) -> int:
    """Release a task: a finished one at once; an unfinished one is cancelled at its next
    segment boundary (its outputs are not written) and its slot freed when it stops."""
    sess, thread = session.caller()
    with thread.call("hbDNNReleaseTask"):
        handle = _live_task(taskHandle, sess)
        if handle is None:
            return HB_DNN_INVALID_TASK_HANDLE
        handle.released = True

        def free(_event: simpy.Event | None = None) -> None:
            _TASKS_ALIVE[sess] -= 1
            for entry in handle.entries:
                entry.dnn.tasks_alive -= 1

        if handle.open:  # chained with `more` and never started: nothing runs
            handle.open = False
            for buf in handle.pinned:
                sess.soc.pool.unpin(buf)
            free()
        elif handle.completed.triggered:
            free()
        else:  # the BPU stops it at its next function-call boundary, the CPU after its node
            handle.cancelled = True
            if handle.bpu_task is not None:
                sess.soc.bpu.cancel(handle.bpu_task)
            handle.completed.callbacks.append(free)
        return HB_DNN_SUCCESS


@_api(HB_DNN_WRONG_THREAD)
def hbDNNSetTaskDoneCb(taskHandle: Any, cb: Any, userdata: Any = None) -> int:
    """Call `cb(taskHandle, status, userdata)` when the task completes, on the session's
    callback thread at the completion's simulated time (at once, there, if it is done)."""
    sess = session.current()
    handle = _live_task(taskHandle, sess)
    if handle is None:
        return HB_DNN_INVALID_TASK_HANDLE
    if not callable(cb):
        return HB_DNN_INVALID_ARGUMENT

    def done() -> None:
        cb(handle, HB_DNN_RUN_TASK_FAILED if handle.error else HB_DNN_SUCCESS, userdata)

    sess.call_when_done(handle.completed, done)
    return HB_DNN_SUCCESS


# --- plugin layers ---------------------------------------------------------------------------

# C's typedefs: the handles are these classes' instances, the callbacks plain callables.
hbPackedDNNHandle_t = hbPackedDNNHandle
hbDNNHandle_t = hbDNNHandle
hbDNNTaskHandle_t = hbDNNTask
hbDNNLayerCreator = Callable[[], Any]  # returns a layer with forward(inputs, outputs) -> int
hbDNNTaskDoneCb = Callable[[hbDNNTask, int, Any], None]  # (task, status, userdata)

_PLUGINS: weakref.WeakKeyDictionary[session.Session, dict[str, Callable[[], Any]]] = \
    weakref.WeakKeyDictionary()


@_api(HB_DNN_WRONG_THREAD)
def hbDNNRegisterLayerCreator(layerType: Any, layerCreator: Any) -> int:
    """Register a plugin layer for the op type `layerType` (an ONNX op name such as
    "Softmax"): every node of that type the compiler left off the BPU is computed by a
    layer `layerCreator()` makes (one per node and model), whose
    `forward(inputs, outputs) -> int` reads float32 arrays and fills `outputs` in place
    (0 = success). It runs on a runtime worker thread and may call hbSys and hbDSP; its
    time is what those calls take, plus the CPU model's cost of the node unless the layer
    has `runs_on = "dsp"`. Tasks submitted after the call use it."""
    sess = session.current()
    if not isinstance(layerType, str) or not layerType or not callable(layerCreator):
        return HB_DNN_INVALID_ARGUMENT
    registry = _PLUGINS.setdefault(sess, {})
    if layerType in registry:
        return HB_DNN_INVALID_ARGUMENT
    registry[layerType] = layerCreator
    return HB_DNN_SUCCESS


@_api(HB_DNN_WRONG_THREAD)
def hbDNNUnregisterLayerCreator(layerType: Any) -> int:
    """Forget the plugin layer of `layerType`; tasks submitted afterwards use the built-in
    op again."""
    sess = session.current()
    registry = _PLUGINS.get(sess, {})
    if not isinstance(layerType, str) or layerType not in registry:
        return HB_DNN_INVALID_ARGUMENT
    del registry[layerType]
    return HB_DNN_SUCCESS


def hbDNNGetErrorDesc(errorCode: int) -> str:
    return status.describe(errorCode)


def set_timing_only(packedDNNHandle: hbPackedDNNHandle, on: bool = True) -> None:
    """The emulator's own switch, not a board API: with `on`, the models of this packed
    handle are timed exactly as before but their outputs are not computed (the output
    buffers keep what they held). `emu perf` uses it, as `hrt_model_exec perf` discards
    the outputs."""
    packedDNNHandle.compute_outputs = not on


__all__ = status.c_names(globals(), "hb", "HB_")

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

This module checks every argument as C would see it and hands plain values to the task
engine (`emu/runtime/dnn_engine.py`), which runs each model's segments where the compiler
put them (BPU subgraphs on the BPU queue by priority, customId and arrival, function call
by function call; CPU items on the runtime's worker threads through the A55 cache model,
with the cache maintenance of every hand-off; DSP nodes as hbDSP RPCs; plugin layers'
`forward` on a worker). The header's names (constants, status codes, structs) are in
`emu/runtime/hbdnn_types.py` and come with this module, as `#include "hb_dnn.h"` gives them.

A model's tensors may have any rank, 0 (a scalar) to `HB_DNN_TENSOR_MAX_DIMENSIONS`:
`dnn_tensors.properties` describes each at its rank (layout NCHW for a 4-D feature map, NHWC for an
image, NONE otherwise) and hbDNNInfer takes exactly that shape. No call raises: an
argument of the wrong type, value, shape or rank is an error code, and anything that goes
wrong inside a running task fails the task (hbDNNWaitTaskDone returns
HB_DNN_RUN_TASK_FAILED).

Also here: `hbDNNRoiInfer` and `hbDNNResize` (the BPU's resizer, `emu/nn/resizer.py`),
plugin layers (`hbDNNRegisterLayerCreator`), NV12 rows aligned to 16 bytes (padded by the
runtime when a tensor's `alignedShape` is its `validShape`), NV12_SEPARATE, quantised
outputs (`emu compile --output-type` / `--output-codes`: SCALE per channel along
`quantizeAxis` or per tensor, SHIFT for powers of two), and the environment variables
`HB_DNN_LOG_LEVEL`, `HB_DNN_ENABLE_DSP`, `HB_DNN_SIM_PLATFORM`.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from emu.errors import InputError
from emu.nn import compiler, resizer
from emu.nn.compiler import CompiledModel
from emu.runtime import dnn_segments, dnn_tensors, session, status
from emu.runtime.dnn_engine import Entry, Image, LoadedModel, TaskState, engine, input_size
from emu.runtime.hbdnn_types import *  # noqa: F403  (the header, as C's #include gives it)
from emu.runtime.hbdnn_types import (
    ENV_LOG_LEVEL,
    ENV_SIM_PLATFORM,
    HB_BPU_CORE_0,
    HB_BPU_CORE_1,
    HB_BPU_CORE_ANY,
    HB_DNN_API_USE_ERROR,
    HB_DNN_CAN_NOT_OPEN_FILE,
    HB_DNN_DEADLOCK,
    HB_DNN_INCOMPATIBLE_MODEL,
    HB_DNN_INVALID_ARGUMENT,
    HB_DNN_INVALID_DNN_HANDLE,
    HB_DNN_INVALID_MODEL,
    HB_DNN_INVALID_PACKED_DNN_HANDLE,
    HB_DNN_INVALID_TASK_HANDLE,
    HB_DNN_LOG_ERROR,
    HB_DNN_LOG_WARNING,
    HB_DNN_MODEL_IS_RUNNING,
    HB_DNN_OUT_OF_MEMORY,
    HB_DNN_PRIORITY_HIGHEST,
    HB_DNN_PRIORITY_LOWEST,
    HB_DNN_RESIZE_TYPE_BILINEAR,
    HB_DNN_RUN_TASK_FAILED,
    HB_DNN_SUCCESS,
    HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT,
    HB_DNN_TASK_NUM_EXCEED_LIMIT,
    HB_DNN_TIMEOUT,
    HB_DNN_VERSION_MAJOR,
    HB_DNN_VERSION_MINOR,
    HB_DNN_VERSION_PATCH,
    HB_DNN_WRONG_THREAD,
    MAX_CHAINED,
    MAX_DATA_BATCH,
    SIM_PLATFORMS,
    hbDNNInferCtrlParam,
    hbDNNResizeCtrlParam,
    hbDNNTensorProperties,
)
from emu.runtime.host import WaitResult
from emu.soc.sched import ANY_CORE

# --- logging ---------------------------------------------------------------------------------

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


# --- handles ---------------------------------------------------------------------------------

class hbPackedDNNHandle:
    """The models of one or more model files, loaded into a session."""

    def __init__(self, sess: session.Session, models: list[CompiledModel]) -> None:
        self.session = sess
        self.models = models
        self.handles = {m.name: hbDNNHandle(self, m) for m in models}
        self.released = False

    def __repr__(self) -> str:
        names = ", ".join(m.name for m in self.models)
        return f"<hbPackedDNNHandle [{names}]{' released' if self.released else ''}>"


class hbDNNHandle(LoadedModel):
    """One model of a packed handle."""

    def __init__(self, packed: hbPackedDNNHandle, model: CompiledModel) -> None:
        super().__init__(packed.session, model)
        self.packed = packed
        self._described: dict[str, hbDNNTensorProperties] = {}

    def described(self, name: str) -> hbDNNTensorProperties:
        """Tensor `name` as hbDNN describes it (`dnn_tensors.properties`), worked out once,
        for the runtime to check tensors against (callers get their own copy)."""
        if name not in self._described:
            self._described[name] = dnn_tensors.properties(self.model, name)
        return self._described[name]

    def __repr__(self) -> str:
        return f"<hbDNNHandle {self.model.name!r}>"


class hbDNNTask(TaskState):
    """A task handle returned by hbDNNInfer: one model, or up to `MAX_CHAINED` chained with
    `more`; its figures once it is done."""

    def __repr__(self) -> str:
        return f"<hbDNNTask {self.name!r}{' released' if self.released else ''}>"


_BPU_CORES = {HB_BPU_CORE_ANY: ANY_CORE, HB_BPU_CORE_0: 0, HB_BPU_CORE_1: 1}


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
    packed = hbPackedDNNHandle(sess, models)
    for handle in packed.handles.values():
        try:  # the whole model is worked out now, so a file whose description cannot be
            # run is refused here rather than failing a later query, inference or task
            handle.plan()
            for name in (*handle.model.graph.inputs, *handle.model.graph.outputs):
                if handle.described(name).alignedByteSize <= 0:
                    return HB_DNN_INVALID_MODEL, None
        except Exception:  # a file is untrusted input: whatever its description breaks
            return HB_DNN_INVALID_MODEL, None
    return HB_DNN_SUCCESS, packed


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
            handle.unload()
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
    return rc, None if tensor is None else dnn_tensors.properties(dnn.model, tensor.name)


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


# --- inference -----------------------------------------------------------------------------

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
    if not engine(sess).admit():
        return None
    return hbDNNTask(sess, f"{name} #{sess.next_serial()}", ctrl.core, ctrl.priority,
                     ctrl.custom_id)


def _submit(sess: session.Session, call: Any, joined: hbDNNTask | None, ctrl: _Ctrl,
            dnn: hbDNNHandle, entries: list[Entry]) -> tuple[int, hbDNNTask | None]:
    """Add a model's entries to the joined task or a new one; start it unless `more`."""
    if not dnn_segments.ensure_scratch(dnn.plan(), sess, dnn.model.name):
        return HB_DNN_OUT_OF_MEMORY, None
    handle = joined or _new_task(sess, dnn.model.name, ctrl)
    if handle is None:
        return HB_DNN_TASK_NUM_EXCEED_LIMIT, None
    engine(sess).add(handle, entries)
    if not ctrl.more:
        engine(sess).start(handle, call)
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
        ins = dnn_tensors.tensor_buffers(input, model.graph.inputs, model, dnn.described, sess)
        if isinstance(ins, int):
            return ins, None
        found = dnn_tensors.tensor_buffers(output, model.graph.outputs, model, dnn.described,
                                           sess)
        if isinstance(found, int):
            return found, None
        return _submit(sess, call, joined, ctrl, dnn,
                       [Entry(dnn, ins, [source.buffer for source in found])])


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
        width, height = input_size(model)
        slots: list[tuple[Image, resizer.Roi] | None] = []
        for tensor, box in zip(input, rois, strict=True):
            image = dnn_tensors.image(tensor, sess)
            if image is None or image.fmt != fmt:
                return HB_DNN_INVALID_ARGUMENT, None
            roi = dnn_tensors.roi(box, image)
            if roi is None or resizer.check(image.w, image.h, image.stride, roi, width, height,
                                            image.fmt) is not None:
                return HB_DNN_INVALID_ARGUMENT, None
            slots.append((image, roi))
        batch = model.batch
        groups = -(-count // batch)
        outs = dnn_tensors.roi_outputs(output, model, groups, sess)
        if isinstance(outs, int):
            return outs, None
        slots += [None] * (groups * batch - count)
        entries = [Entry(dnn, [], outs, tuple(slots[g * batch:(g + 1) * batch]), g)
                   for g in range(groups)]
        return _submit(sess, call, joined, ctrl, dnn, entries)



# --- the resizer ------------------------------------------------------------------------

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
        src, dst = dnn_tensors.image(input, sess), dnn_tensors.image(output, sess)
        if src is None or dst is None or src.fmt != dst.fmt:
            return HB_DNN_INVALID_ARGUMENT, None
        box = dnn_tensors.roi(roi, src)
        if box is None or resizer.check(src.w, src.h, src.stride, box, dst.w, dst.h,
                                        src.fmt) is not None:
            return HB_DNN_INVALID_ARGUMENT, None
        handle = _new_task(sess, "resize", parsed)
        if handle is None:
            return HB_DNN_TASK_NUM_EXCEED_LIMIT, None
        engine(sess).start_resize(handle, call, src, box, dst)
        return HB_DNN_SUCCESS, handle



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
        engine(sess).release(handle)
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
    registry = engine(sess).plugins
    if layerType in registry:
        return HB_DNN_INVALID_ARGUMENT
    registry[layerType] = layerCreator
    return HB_DNN_SUCCESS


@_api(HB_DNN_WRONG_THREAD)
def hbDNNUnregisterLayerCreator(layerType: Any) -> int:
    """Forget the plugin layer of `layerType`; tasks submitted afterwards use the built-in
    op again."""
    sess = session.current()
    registry = engine(sess).plugins
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
    for handle in packedDNNHandle.handles.values():
        handle.compute_outputs = not on


__all__ = status.c_names(globals(), "hb", "HB_")

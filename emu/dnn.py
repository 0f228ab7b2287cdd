"""A Pythonic layer over the C-named hbDNN calls, for scripts rather than line-by-line ports.

    import numpy as np
    import emu.dnn

    with emu.dnn.Model("mnv2.hbm") as model:        # hbDNNInitializeFromFiles, one model
        x = np.zeros(model.inputs[0].shape, model.inputs[0].dtype)
        result = model.infer(x)                     # hbDNNInfer + hbDNNWaitTaskDone
        print(result.latency_ms, result.outputs["logits"].shape)

Everything goes through `emu.runtime.hbdnn` and `hbsys` exactly as a board program does
(tensors in hbSys memory, cache cleans and invalidates, a task per inference), so the
latency is the one the C calls would see. `submit` is the asynchronous form: it returns a
`Pending` whose `wait()` gives the `Result`; several may be in flight, from one thread or
from the host threads of a session. Failures raise `DnnError` with the board's error code
and its description (the C-named calls themselves never raise).

`alloc_tensors` is the one helper that makes a model's input or output tensors with their
hbSys memory, for Python code that otherwise uses the C names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import emu
from emu.errors import UserError
from emu.runtime import hbdnn, hbsys

_DTYPES = {hbdnn.HB_DNN_TENSOR_TYPE_F32: np.float32, hbdnn.HB_DNN_TENSOR_TYPE_F64: np.float64,
           hbdnn.HB_DNN_TENSOR_TYPE_S8: np.int8, hbdnn.HB_DNN_TENSOR_TYPE_U8: np.uint8,
           hbdnn.HB_DNN_TENSOR_TYPE_S16: np.int16, hbdnn.HB_DNN_TENSOR_TYPE_S32: np.int32,
           hbdnn.HB_DNN_TENSOR_TYPE_S64: np.int64, hbdnn.HB_DNN_IMG_TYPE_NV12: np.uint8,
           hbdnn.HB_DNN_IMG_TYPE_Y: np.uint8, hbdnn.HB_DNN_IMG_TYPE_RGB: np.uint8,
           hbdnn.HB_DNN_IMG_TYPE_BGR: np.uint8, hbdnn.HB_DNN_IMG_TYPE_YUV444: np.uint8}
_LAYOUTS = {hbdnn.HB_DNN_LAYOUT_NCHW: "NCHW", hbdnn.HB_DNN_LAYOUT_NHWC: "NHWC",
            hbdnn.HB_DNN_LAYOUT_NONE: "none"}


class DnnError(UserError):
    """An hbDNN or hbSys call failed: `code` is the board's error code (the CLI reports it
    in one line, as any user error)."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: {hbdnn.hbDNNGetErrorDesc(code)} ({code})")
        self.code = code


def _check(code: int, what: str) -> None:
    if code != 0:
        raise DnnError(what, code)


@dataclass(frozen=True)
class TensorInfo:
    """One input or output as hbDNN describes it."""

    name: str
    shape: tuple[int, ...]  # validShape
    dtype: np.dtype[Any]
    layout: str  # "NCHW", "NHWC" or "none"
    nv12: bool  # an NV12 image: give its Y rows then its UV rows, n*h*w*3/2 bytes
    scale: tuple[float, ...] = ()  # codes: value = code x scale (per quantizeAxis if several)


def _info(name: str, props: hbdnn.hbDNNTensorProperties) -> TensorInfo:
    kind = int(props.tensorType)
    scale: tuple[float, ...] = ()
    if props.quantiType == hbdnn.SCALE:
        scale = tuple(float(s) for s in props.scale.scaleData)
    elif props.quantiType == hbdnn.SHIFT:
        scale = tuple(2.0 ** -int(s) for s in props.shift.shiftData)
    return TensorInfo(name, props.validShape.dims() or (), np.dtype(_DTYPES[kind]),
                      _LAYOUTS.get(int(props.tensorLayout), "none"),
                      kind == hbdnn.HB_DNN_IMG_TYPE_NV12, scale)


def _properties(handle: hbdnn.hbDNNHandle, outputs: bool
                ) -> list[tuple[str, hbdnn.hbDNNTensorProperties]]:
    """The name and properties of every input (or output) of the model."""
    count_fn = hbdnn.hbDNNGetOutputCount if outputs else hbdnn.hbDNNGetInputCount
    name_fn = hbdnn.hbDNNGetOutputName if outputs else hbdnn.hbDNNGetInputName
    props_fn = (hbdnn.hbDNNGetOutputTensorProperties if outputs
                else hbdnn.hbDNNGetInputTensorProperties)
    rc, count = count_fn(handle)
    _check(rc, count_fn.__name__)
    found = []
    for k in range(count or 0):
        rc, name = name_fn(handle, k)
        _check(rc, name_fn.__name__)
        rc, props = props_fn(handle, k)
        _check(rc, props_fn.__name__)
        found.append((str(name), props))
    return found


def alloc_tensors(handle: hbdnn.hbDNNHandle, outputs: bool) -> list[hbdnn.hbDNNTensor]:
    """One `hbDNNTensor` per input (or output) of the model, with its properties and
    `alignedByteSize` bytes of cached hbSys memory; free them with `free_tensors`."""
    made: list[hbdnn.hbDNNTensor] = []
    for _, props in _properties(handle, outputs):
        tensor = hbdnn.hbDNNTensor()
        tensor.properties = props
        rc = hbsys.hbSysAllocCachedMem(tensor.sysMem[0], props.alignedByteSize)
        if rc != 0:
            free_tensors(made)
            raise DnnError(f"hbSysAllocCachedMem of {props.alignedByteSize} bytes", rc)
        made.append(tensor)
    return made


def free_tensors(tensors: list[hbdnn.hbDNNTensor]) -> None:
    """Free the memory of tensors `alloc_tensors` made."""
    for tensor in tensors:
        hbsys.hbSysFreeMem(tensor.sysMem[0])


@dataclass(frozen=True)
class Result:
    """One inference: the outputs by name (float, or codes for an output compiled as
    codes, see `TensorInfo.scale`), and its simulated times in milliseconds."""

    outputs: dict[str, np.ndarray]
    start_ms: float
    end_ms: float

    @property
    def latency_ms(self) -> float:
        """From the `hbDNNInfer` call to the return of `hbDNNWaitTaskDone`."""
        return self.end_ms - self.start_ms


class Pending:
    """An inference submitted and not yet waited for."""

    def __init__(self, model: Model, task: Any, inputs: list[hbdnn.hbDNNTensor],
                 outputs: list[hbdnn.hbDNNTensor], start_ms: float) -> None:
        self._model, self._task = model, task
        self._tensors = (inputs, outputs)
        self._start_ms = start_ms
        self._result: Result | None = None

    def wait(self) -> Result:
        """Block (in simulated time) until the inference is done; its result."""
        if self._result is not None:
            return self._result
        inputs, outputs = self._tensors
        try:
            _check(hbdnn.hbDNNWaitTaskDone(self._task, 0), "hbDNNWaitTaskDone")
            end_ms = emu.now_ms()
            values = {}
            for info, tensor in zip(self._model.outputs, outputs, strict=True):
                mem = tensor.sysMem[0]
                _check(hbsys.hbSysFlushMem(mem, hbsys.HB_SYS_MEM_CACHE_INVALIDATE),
                       "hbSysFlushMem")
                assert mem.virAddr is not None  # allocated by alloc_tensors
                nbytes = math.prod(info.shape) * info.dtype.itemsize
                values[info.name] = mem.virAddr[:nbytes].view(info.dtype).reshape(
                    info.shape).copy()
        finally:
            hbdnn.hbDNNReleaseTask(self._task)
            free_tensors(inputs + outputs)
        self._result = Result(values, self._start_ms, end_ms)
        return self._result


class Model:
    """One model of a compiled model file, loaded with hbDNN in the current session."""

    def __init__(self, path: str | Path, name: str | None = None) -> None:
        rc, packed = hbdnn.hbDNNInitializeFromFiles([str(path)])
        _check(rc, f"hbDNNInitializeFromFiles {path}")
        self._packed = packed
        try:
            rc, names, _ = hbdnn.hbDNNGetModelNameList(packed)
            _check(rc, "hbDNNGetModelNameList")
            assert names is not None
            if name is None and len(names) != 1:
                raise DnnError(f"{path} packs {len(names)} models ({', '.join(names)}); "
                               "name one", hbdnn.HB_DNN_INVALID_ARGUMENT)
            self.name = names[0] if name is None else name
            rc, self._handle = hbdnn.hbDNNGetModelHandle(packed, self.name)
            _check(rc, f"hbDNNGetModelHandle {self.name!r}")
            self.inputs = self._describe(False)
            self.outputs = self._describe(True)
        except BaseException:
            hbdnn.hbDNNRelease(packed)
            raise

    def _describe(self, outputs: bool) -> list[TensorInfo]:
        return [_info(name, props) for name, props in _properties(self._handle, outputs)]

    def _feeds(self, inputs: np.ndarray | dict[str, np.ndarray] | list[np.ndarray]
               ) -> list[np.ndarray]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if isinstance(inputs, dict):
            missing = [i.name for i in self.inputs if i.name not in inputs]
            if missing or len(inputs) != len(self.inputs):
                raise DnnError(f"inputs {sorted(inputs)}; the model takes "
                               f"{[i.name for i in self.inputs]}",
                               hbdnn.HB_DNN_INVALID_ARGUMENT)
            inputs = [inputs[i.name] for i in self.inputs]
        if len(inputs) != len(self.inputs):
            raise DnnError(f"{len(inputs)} input(s); the model takes {len(self.inputs)}",
                           hbdnn.HB_DNN_INVALID_ARGUMENT)
        arrays = []
        for info, x in zip(self.inputs, inputs, strict=True):
            x = np.asarray(x)
            # an NV12 image is given as its bytes (Y rows, then UV rows), in any shape
            wanted = (math.prod(info.shape) // 2,) if info.nv12 else info.shape
            if x.dtype != info.dtype or ((x.size,) if info.nv12 else x.shape) != wanted:
                raise DnnError(f"input {info.name!r} is {x.dtype} {x.shape}; the model takes "
                               f"{info.dtype} {wanted}", hbdnn.HB_DNN_INVALID_ARGUMENT)
            arrays.append(np.ascontiguousarray(x))
        return arrays

    def submit(self, inputs: np.ndarray | dict[str, np.ndarray] | list[np.ndarray], *,
               priority: int = hbdnn.HB_DNN_PRIORITY_LOWEST,
               core: int = hbdnn.HB_BPU_CORE_ANY) -> Pending:
        """Start one inference on `inputs` (one array, a list in input order, or a dict
        by input name); `wait()` on what it returns."""
        arrays = self._feeds(inputs)
        ins = alloc_tensors(self._handle, False)
        try:
            outs = alloc_tensors(self._handle, True)
        except DnnError:
            free_tensors(ins)
            raise
        try:
            for tensor, x in zip(ins, arrays, strict=True):
                mem = tensor.sysMem[0]
                assert mem.virAddr is not None  # allocated by alloc_tensors
                if x.nbytes != mem.memSize:  # an NV12 image given unpadded: hbDNN pads it
                    tensor.properties.alignedShape = tensor.properties.validShape
                mem.virAddr[:x.nbytes] = x.view(np.uint8).reshape(-1)
                _check(hbsys.hbSysFlushMem(mem, hbsys.HB_SYS_MEM_CACHE_CLEAN), "hbSysFlushMem")
            ctrl = hbdnn.hbDNNInferCtrlParam()
            hbdnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
            ctrl.priority, ctrl.bpuCoreId = priority, core
            start_ms = emu.now_ms()
            rc, task = hbdnn.hbDNNInfer(outs, ins, self._handle, ctrl)
            _check(rc, "hbDNNInfer")
        except BaseException:
            free_tensors(ins + outs)
            raise
        return Pending(self, task, ins, outs, start_ms)

    def infer(self, inputs: np.ndarray | dict[str, np.ndarray] | list[np.ndarray], *,
              priority: int = hbdnn.HB_DNN_PRIORITY_LOWEST,
              core: int = hbdnn.HB_BPU_CORE_ANY) -> Result:
        """One inference, waited for (see `submit`)."""
        return self.submit(inputs, priority=priority, core=core).wait()

    def close(self) -> None:
        """Release the model (`hbDNNRelease`)."""
        if self._packed is not None:
            _check(hbdnn.hbDNNRelease(self._packed), "hbDNNRelease")
            self._packed = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<emu.dnn.Model {self.name!r}: inputs "
                f"{[(i.name, i.shape) for i in self.inputs]}, outputs "
                f"{[(o.name, o.shape) for o in self.outputs]}>")

"""libemu_rt's exported functions: each takes the C arguments, makes the Python API's
arguments of them, calls the C-named Python function in the calling thread's host thread
(`bridge.Bridge.call`) and writes what it returns where C expects it: structs filled in
place, out-parameters through their pointers, handles as opaque pointers, status codes as
the Python API returns them.

Pointers a program hands in are checked as far as C can be: a NULL where the API needs an
object is the module's INVALID_ARGUMENT; a handle the library never gave out, or one
released, is the Python API's own invalid-handle code (handles are numbers in a table, never
dereferenced); an `hbSysMem` names a pool buffer only if its physical address, size and CPU
pointer are those of a live buffer. A call from a thread that is not the program's (one the
program did not create with pthread_create) returns the module's WRONG_THREAD code.

Memory the program reads and writes in place (`virAddr`) is the pool buffer's own bytes,
the NumPy array the Python API hands out, so a `memcpy` into it is what the runtime reads.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from emu.runtime import hbdnn, hbsys, session
from emu.runtime.hbdnn_types import HB_DNN_TENSOR_MAX_DIMENSIONS

EMU_RT_INVALID_ARGUMENT = -6900001
EMU_RT_WRONG_THREAD = -6900002
MAX_NAMES = 4096  # model files or data blocks one call may name: more is not a real program


NULL: Any = object()  # an export's `refused` or `failed` that is C's NULL pointer


class Export(NamedTuple):
    fn: Callable[..., Any]
    refused: Any  # from a thread that is not the program's (`NULL`, None for a void)
    failed: Any  # when the emulator itself failed (reported on stderr); `NULL`, None
    direct: bool  # needs no session (a version string, an error's text)


_EXPORTS: dict[str, Export] = {}


def export(refused: Any, failed: Any, *, direct: bool = False, name: str | None = None
           ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn` as the C function `name` (default: its own name)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        _EXPORTS[name or fn.__name__] = Export(fn, refused, failed, direct)
        return fn

    return wrap


def exported() -> tuple[str, ...]:
    """The names of the functions the library exports from Python."""
    return tuple(_EXPORTS)


class _Unknown:
    """What a pointer the library never handed out stands for: every API refuses it."""


_UNKNOWN = _Unknown()


class Runtime:
    """The library's state in the process: the bridge to the session, the handle table and
    the C arrays handed to the program (kept for as long as the process lives)."""

    def __init__(self, ffi: Any, lib: Any) -> None:
        self.ffi = ffi
        self.lib = lib
        self._bridge: Any = None
        self._start = threading.Lock()
        self._objects: dict[int, Any] = {}
        self._numbers: dict[int, int] = {}
        self._kept: dict[Any, Any] = {}

    # --- the bridge -------------------------------------------------------------------------

    def bridge(self) -> Any:
        """The bridge, started by the first call (one line and exit status 2 if the
        environment's configuration is refused)."""
        with self._start:
            if self._bridge is None:
                from emu.capi import program
                from emu.capi.bridge import Bridge

                bridge = Bridge(program.make_session, self.lib.emu_set_now, program.finish,
                                self.lib.emu_set_runtime, self.lib.emu_set_callback)
                if bridge.failure is not None:
                    print(f"emu: {bridge.failure}", file=sys.stderr, flush=True)
                    self.lib.emu_exit(2)
                self._bridge = bridge
            return self._bridge

    # --- handles ----------------------------------------------------------------------------

    def pointer(self, obj: Any) -> Any:
        """The opaque pointer that stands for `obj` (the same one every time)."""
        if obj is None:
            return self.ffi.NULL
        key = id(obj)
        number = self._numbers.get(key)
        if number is None:
            number = (len(self._objects) + 1) << 4
            self._numbers[key] = number
            self._objects[number] = obj
        return self.ffi.cast("void *", number)

    def handle(self, pointer: Any) -> Any:
        """The object a handle pointer stands for; one every API refuses if none."""
        return self._objects.get(self.address(pointer), _UNKNOWN)

    def handle_out(self, out: Any, result: tuple[int, Any]) -> int:
        """A call's (status, handle): on success (0) the handle written through the
        out-parameter `out`; the status."""
        rc, handle = result
        if rc == 0:
            out[0] = self.pointer(handle)
        return rc

    def address(self, pointer: Any) -> int:
        return int(self.ffi.cast("uintptr_t", pointer))

    def keep(self, key: Any, make: Callable[[], Any]) -> Any:
        """A C object the program may hold on to: made once per `key`, never freed."""
        found = self._kept.get(key)
        if found is None:
            found = self._kept[key] = make()
        return found

    def string(self, text: str) -> Any:
        return self.keep(("string", text), lambda: self.ffi.new("char[]", text.encode()))

    # --- structs ----------------------------------------------------------------------------

    def mem_in(self, c: Any) -> hbsys.hbSysMem:
        """The Python `hbSysMem` of a C one: `virAddr` is the pool buffer's array when the C
        pointer is that array's, so the Python API's checks decide."""
        mem = hbsys.hbSysMem()
        mem.phyAddr, mem.memSize = int(c.phyAddr), int(c.memSize)
        addr = self.address(c.virAddr)
        buf = session.current().soc.pool.find(mem.phyAddr)
        if addr and buf is not None and buf.alive and buf.phys_addr == mem.phyAddr:
            data = buf.data
            if data.ctypes.data == addr:
                mem.virAddr = data
        return mem

    def mem_out(self, mem: hbsys.hbSysMem, c: Any) -> None:
        c.phyAddr = int(mem.phyAddr)
        c.memSize = int(mem.memSize)
        data = mem.virAddr
        c.virAddr = self.ffi.NULL if data is None else self.ffi.cast("void *", data.ctypes.data)

    def shape_in(self, c: Any) -> hbdnn.hbDNNTensorShape:
        shape = hbdnn.hbDNNTensorShape()
        shape.dimensionSize = [int(c.dimensionSize[i]) for i in range(HB_DNN_TENSOR_MAX_DIMENSIONS)]
        shape.numDimensions = int(c.numDimensions)
        return shape

    def shape_out(self, shape: hbdnn.hbDNNTensorShape, c: Any) -> None:
        for i in range(HB_DNN_TENSOR_MAX_DIMENSIONS):
            c.dimensionSize[i] = int(shape.dimensionSize[i])
        c.numDimensions = int(shape.numDimensions)

    def properties_in(self, c: Any) -> hbdnn.hbDNNTensorProperties:
        """The fields the runtime reads of a tensor the program describes (its shapes,
        layout and type; the quantisation is what the model says, never read back)."""
        props = hbdnn.hbDNNTensorProperties()
        props.validShape = self.shape_in(c.validShape)
        props.alignedShape = self.shape_in(c.alignedShape)
        props.tensorLayout = int(c.tensorLayout)
        props.tensorType = int(c.tensorType)
        props.quantiType = int(c.quantiType)
        props.quantizeAxis = int(c.quantizeAxis)
        props.alignedByteSize = int(c.alignedByteSize)
        props.stride = [int(c.stride[i]) for i in range(HB_DNN_TENSOR_MAX_DIMENSIONS)]
        return props

    def properties_out(self, props: hbdnn.hbDNNTensorProperties, c: Any, key: Any) -> None:
        """Fill the program's struct; the shift, scale and zero-point arrays are the
        library's, alive as long as the process (`key` names them)."""
        self.shape_out(props.validShape, c.validShape)
        self.shape_out(props.alignedShape, c.alignedShape)
        c.tensorLayout = int(props.tensorLayout)
        c.tensorType = int(props.tensorType)
        c.quantiType = int(props.quantiType)
        c.quantizeAxis = int(props.quantizeAxis)
        c.alignedByteSize = int(props.alignedByteSize)
        for i in range(HB_DNN_TENSOR_MAX_DIMENSIONS):
            c.stride[i] = int(props.stride[i])
        c.shift.shiftLen = int(props.shift.shiftLen)
        c.shift.shiftData = self._array((*key, "shift"), "uint8_t[]", props.shift.shiftData)
        c.scale.scaleLen = int(props.scale.scaleLen)
        c.scale.scaleData = self._array((*key, "scale"), "float[]", props.scale.scaleData)
        c.scale.zeroPointLen = int(props.scale.zeroPointLen)
        c.scale.zeroPointData = self._array((*key, "zero"), "int8_t[]",
                                            props.scale.zeroPointData)

    def _array(self, key: Any, ctype: str, values: Any) -> Any:
        items = [v for v in values]
        if not items:
            return self.ffi.NULL
        return self.keep(key, lambda: self.ffi.new(ctype, items))

    def tensor_in(self, c: Any) -> hbdnn.hbDNNTensor:
        tensor = hbdnn.hbDNNTensor()
        tensor.sysMem = [self.mem_in(c.sysMem[i]) for i in range(4)]
        tensor.properties = self.properties_in(c.properties)
        return tensor

    def tensors_in(self, c: Any, count: int) -> list[hbdnn.hbDNNTensor]:
        return [self.tensor_in(c[i]) for i in range(count)]

    def null(self, pointer: Any) -> bool:
        return pointer == self.ffi.NULL

    # --- installing -------------------------------------------------------------------------

    def install(self) -> None:
        """Attach every export to the library's C entry points."""
        for name, entry in _EXPORTS.items():
            options = {} if entry.failed in (None, NULL) else {"error": entry.failed}
            self.ffi.def_extern(name=name, onerror=_reporter(name),
                                **options)(self._entry(name, entry))

    def _entry(self, name: str, entry: Export) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if entry.direct:
                return entry.fn(self, *args)
            tid = self.lib.emu_thread_number()
            bridge = self.bridge() if tid == 0 or self._bridge is not None else None
            on_sim = bridge is not None and threading.get_ident() == bridge.sim_ident
            if bridge is None or (tid < 0 and not on_sim):
                return self.ffi.NULL if entry.refused is NULL else entry.refused
            return bridge.call(tid, lambda: _guarded(name, entry, self, args))

        return call


def _guarded(name: str, entry: Export, runtime: Runtime, args: tuple[Any, ...]) -> Any:
    try:
        return entry.fn(runtime, *args)
    except Exception as exc:  # the emulator's own failure: one line, the call fails
        print(f"emu: internal error in {name}: {type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        return runtime.ffi.NULL if entry.failed is NULL else entry.failed


def _reporter(name: str) -> Callable[..., None]:
    def report(exc_type: Any, exc: Any, _tb: Any) -> None:
        print(f"emu: internal error in {name}: {exc_type.__name__}: {exc}", file=sys.stderr,
              flush=True)

    return report


# --- hbSys ---------------------------------------------------------------------------------

_sys = export(hbsys.HB_SYS_WRONG_THREAD, hbsys.HB_SYS_INVALID_ARGUMENT)  # an hbSys function


def _alloc(rt: Runtime, mem: Any, size: int, fn: Callable[..., int]) -> int:
    if rt.null(mem):
        return hbsys.HB_SYS_INVALID_ARGUMENT
    made = hbsys.hbSysMem()
    rc = fn(made, int(size))
    if rc == hbsys.HB_SYS_SUCCESS:
        rt.mem_out(made, mem)
    return rc


@_sys
def hbSysAllocMem(rt: Runtime, mem: Any, size: int) -> int:
    return _alloc(rt, mem, size, hbsys.hbSysAllocMem)


@_sys
def hbSysAllocCachedMem(rt: Runtime, mem: Any, size: int) -> int:
    return _alloc(rt, mem, size, hbsys.hbSysAllocCachedMem)


def _on_mem(rt: Runtime, mem: Any, fn: Callable[..., int], *rest: Any) -> int:
    if rt.null(mem):
        return hbsys.HB_SYS_INVALID_ARGUMENT
    made = rt.mem_in(mem)
    rc = fn(made, *rest)
    if rc == hbsys.HB_SYS_SUCCESS:
        rt.mem_out(made, mem)
    return rc


@_sys
def hbSysFlushMem(rt: Runtime, mem: Any, flag: int) -> int:
    return _on_mem(rt, mem, hbsys.hbSysFlushMem, int(flag))


@_sys
def hbSysFreeMem(rt: Runtime, mem: Any) -> int:
    return _on_mem(rt, mem, hbsys.hbSysFreeMem)


@_sys
def hbSysRegisterMem(rt: Runtime, mem: Any) -> int:
    if rt.null(mem):
        return hbsys.HB_SYS_INVALID_ARGUMENT
    made = hbsys.hbSysMem()
    made.phyAddr, made.memSize = int(mem.phyAddr), int(mem.memSize)
    rc = hbsys.hbSysRegisterMem(made)
    if rc == hbsys.HB_SYS_SUCCESS:
        rt.mem_out(made, mem)
    return rc


@_sys
def hbSysUnregisterMem(rt: Runtime, mem: Any) -> int:
    return _on_mem(rt, mem, hbsys.hbSysUnregisterMem)


def _host(rt: Runtime, pointer: Any, size: int) -> np.ndarray | None:
    if rt.null(pointer) or size <= 0:
        return None
    return np.frombuffer(rt.ffi.buffer(pointer, size), dtype=np.uint8)


@_sys
def hbSysWriteMem(rt: Runtime, dest: Any, src: Any, size: int) -> int:
    host = _host(rt, src, int(size))
    if rt.null(dest) or host is None:
        return hbsys.HB_SYS_INVALID_ARGUMENT
    return hbsys.hbSysWriteMem(rt.mem_in(dest), host, int(size))


@_sys
def hbSysReadMem(rt: Runtime, dest: Any, src: Any, size: int) -> int:
    host = _host(rt, dest, int(size))
    if rt.null(src) or host is None:
        return hbsys.HB_SYS_INVALID_ARGUMENT
    return hbsys.hbSysReadMem(host, rt.mem_in(src), int(size))


# --- hbDNN ---------------------------------------------------------------------------------

_dnn = export(hbdnn.HB_DNN_WRONG_THREAD, hbdnn.HB_DNN_INVALID_ARGUMENT)  # an hbDNN function
_INVALID = hbdnn.HB_DNN_INVALID_ARGUMENT


@export(refused=0, failed=None, direct=True)
def hbDNNGetVersion(rt: Runtime) -> Any:
    return rt.string(hbdnn.hbDNNGetVersion())


@export(refused=0, failed=None, direct=True)
def hbDNNGetErrorDesc(rt: Runtime, code: int) -> Any:
    return rt.string(hbdnn.hbDNNGetErrorDesc(int(code)))


@_dnn
def hbDNNInitializeFromFiles(rt: Runtime, packed: Any, names: Any, count: int) -> int:
    if rt.null(packed) or rt.null(names) or not 0 < count <= MAX_NAMES:
        return _INVALID
    if any(rt.null(names[i]) for i in range(count)):
        return _INVALID
    files = [os.fsdecode(rt.ffi.string(names[i])) for i in range(count)]
    return rt.handle_out(packed, hbdnn.hbDNNInitializeFromFiles(files, count))


@_dnn
def hbDNNInitializeFromDDR(rt: Runtime, packed: Any, data: Any, lengths: Any,
                           count: int) -> int:
    if rt.null(packed) or rt.null(data) or rt.null(lengths) or not 0 < count <= MAX_NAMES:
        return _INVALID
    blocks, sizes = [], []
    for i in range(count):
        size = int(lengths[i])
        if rt.null(data[i]) or size <= 0:
            return _INVALID
        blocks.append(bytes(rt.ffi.buffer(data[i], size)))
        sizes.append(size)
    return rt.handle_out(packed, hbdnn.hbDNNInitializeFromDDR(blocks, sizes, count))


@_dnn
def hbDNNRelease(rt: Runtime, packed: Any) -> int:
    return hbdnn.hbDNNRelease(rt.handle(packed))


@_dnn
def hbDNNGetModelNameList(rt: Runtime, names: Any, count: Any, packed: Any) -> int:
    if rt.null(names) or rt.null(count):
        return _INVALID
    handle = rt.handle(packed)
    rc, found, number = hbdnn.hbDNNGetModelNameList(handle)
    if rc == hbdnn.HB_DNN_SUCCESS:
        listed = [rt.string(name) for name in found]
        names[0] = rt.keep(("names", id(handle)), lambda: rt.ffi.new("char *[]", listed))
        count[0] = number
    return rc


@_dnn
def hbDNNGetModelHandle(rt: Runtime, dnn: Any, packed: Any, name: Any) -> int:
    if rt.null(dnn) or rt.null(name):
        return _INVALID
    rc, handle = hbdnn.hbDNNGetModelHandle(rt.handle(packed),
                                           rt.ffi.string(name).decode(errors="replace"))
    if rc == hbdnn.HB_DNN_SUCCESS:
        dnn[0] = rt.pointer(handle)
    return rc


def _count_out(rt: Runtime, count: Any, result: tuple[int, Any]) -> int:
    if rt.null(count):
        return _INVALID
    rc, number = result
    if rc == hbdnn.HB_DNN_SUCCESS:
        count[0] = number
    return rc


@_dnn
def hbDNNGetInputCount(rt: Runtime, count: Any, dnn: Any) -> int:
    return _count_out(rt, count, hbdnn.hbDNNGetInputCount(rt.handle(dnn)))


@_dnn
def hbDNNGetOutputCount(rt: Runtime, count: Any, dnn: Any) -> int:
    return _count_out(rt, count, hbdnn.hbDNNGetOutputCount(rt.handle(dnn)))


def _name_out(rt: Runtime, name: Any, result: tuple[int, Any]) -> int:
    if rt.null(name):
        return _INVALID
    rc, text = result
    if rc == hbdnn.HB_DNN_SUCCESS:
        name[0] = rt.string(text)
    return rc


@_dnn
def hbDNNGetInputName(rt: Runtime, name: Any, dnn: Any, index: int) -> int:
    return _name_out(rt, name, hbdnn.hbDNNGetInputName(rt.handle(dnn), int(index)))


@_dnn
def hbDNNGetOutputName(rt: Runtime, name: Any, dnn: Any, index: int) -> int:
    return _name_out(rt, name, hbdnn.hbDNNGetOutputName(rt.handle(dnn), int(index)))


def _properties(rt: Runtime, props: Any, dnn: Any, index: int, outputs: bool) -> int:
    if rt.null(props):
        return _INVALID
    handle = rt.handle(dnn)
    get = hbdnn.hbDNNGetOutputTensorProperties if outputs else \
        hbdnn.hbDNNGetInputTensorProperties
    rc, found = get(handle, int(index))
    if rc == hbdnn.HB_DNN_SUCCESS:
        rt.properties_out(found, props, ("properties", id(handle), outputs, int(index)))
    return rc


@_dnn
def hbDNNGetInputTensorProperties(rt: Runtime, props: Any, dnn: Any, index: int) -> int:
    return _properties(rt, props, dnn, index, outputs=False)


@_dnn
def hbDNNGetOutputTensorProperties(rt: Runtime, props: Any, dnn: Any, index: int) -> int:
    return _properties(rt, props, dnn, index, outputs=True)


def _ctrl_in(c: Any) -> hbdnn.hbDNNInferCtrlParam:
    ctrl = hbdnn.hbDNNInferCtrlParam()
    ctrl.bpuCoreId, ctrl.dspCoreId = int(c.bpuCoreId), int(c.dspCoreId)
    ctrl.priority, ctrl.more, ctrl.customId = int(c.priority), int(c.more), int(c.customId)
    ctrl.reserved1, ctrl.reserved2 = int(c.reserved1), int(c.reserved2)
    return ctrl


def _joined(rt: Runtime, task: Any) -> Any:
    """C's in/out task handle: NULL makes a new task, anything else joins that one."""
    return None if rt.null(task[0]) else rt.handle(task[0])


def _model_io(rt: Runtime, dnn: Any) -> tuple[Any, int, int] | None:
    handle = rt.handle(dnn)
    rc_in, inputs = hbdnn.hbDNNGetInputCount(handle)
    rc_out, outputs = hbdnn.hbDNNGetOutputCount(handle)
    if rc_in != hbdnn.HB_DNN_SUCCESS or rc_out != hbdnn.HB_DNN_SUCCESS:
        return None
    return handle, inputs, outputs


@_dnn
def hbDNNInfer(rt: Runtime, task: Any, output: Any, input: Any, dnn: Any, ctrl: Any) -> int:
    if any(rt.null(p) for p in (task, output, input, ctrl)) or rt.null(output[0]):
        return _INVALID
    io = _model_io(rt, dnn)
    if io is None:
        return hbdnn.HB_DNN_INVALID_DNN_HANDLE
    handle, inputs, outputs = io
    return rt.handle_out(task, hbdnn.hbDNNInfer(
        rt.tensors_in(output[0], outputs), rt.tensors_in(input, inputs), handle,
        _ctrl_in(ctrl), _joined(rt, task)))


def _roi_in(c: Any) -> hbdnn.hbDNNRoi:
    return hbdnn.hbDNNRoi(int(c.left), int(c.top), int(c.right), int(c.bottom))


@_dnn
def hbDNNRoiInfer(rt: Runtime, task: Any, output: Any, input: Any, rois: Any, count: int,
                  dnn: Any, ctrl: Any) -> int:
    if any(rt.null(p) for p in (task, output, input, rois, ctrl)) or rt.null(output[0]):
        return _INVALID
    if not 0 < count <= hbdnn.MAX_DATA_BATCH:
        return _INVALID
    io = _model_io(rt, dnn)
    if io is None:
        return hbdnn.HB_DNN_INVALID_DNN_HANDLE
    handle, _, outputs = io
    return rt.handle_out(task, hbdnn.hbDNNRoiInfer(
        rt.tensors_in(output[0], outputs), rt.tensors_in(input, count),
        [_roi_in(rois[i]) for i in range(count)], count, handle, _ctrl_in(ctrl),
        _joined(rt, task)))


@_dnn
def hbDNNResize(rt: Runtime, task: Any, output: Any, input: Any, roi: Any, ctrl: Any) -> int:
    if any(rt.null(p) for p in (task, output, input, ctrl)):
        return _INVALID
    param = hbdnn.hbDNNResizeCtrlParam()
    param.bpuCoreId, param.priority = int(ctrl.bpuCoreId), int(ctrl.priority)
    param.resizeType = int(ctrl.resizeType)
    box = None if rt.null(roi) else _roi_in(roi)
    return rt.handle_out(task, hbdnn.hbDNNResize(rt.tensor_in(output), rt.tensor_in(input),
                                                 box, param))


@_dnn
def hbDNNWaitTaskDone(rt: Runtime, task: Any, timeout: int) -> int:
    return hbdnn.hbDNNWaitTaskDone(rt.handle(task), int(timeout))


@_dnn
def hbDNNReleaseTask(rt: Runtime, task: Any) -> int:
    return hbdnn.hbDNNReleaseTask(rt.handle(task))


@_dnn
def hbDNNSetTaskDoneCb(rt: Runtime, task: Any, cb: Any, userdata: Any) -> int:
    if rt.null(cb):
        return _INVALID
    handle_pointer = rt.ffi.cast("void *", task)

    def done(_handle: Any, status: int, _userdata: Any) -> None:
        rt.lib.emu_set_callback(1)  # the program's code runs on the simulation thread
        try:
            cb(handle_pointer, status, userdata)
        finally:
            rt.lib.emu_set_callback(0)

    return hbdnn.hbDNNSetTaskDoneCb(rt.handle(task), done, None)


# --- emu's own -----------------------------------------------------------------------------

@export(refused=EMU_RT_WRONG_THREAD, failed=EMU_RT_INVALID_ARGUMENT)
def emuCpuWork(rt: Runtime, cycles: int) -> int:
    sess, thread = session.caller()
    if cycles:
        thread.cpu(sess.soc.cpu.clock.cycles_to_ps(int(cycles)), "emuCpuWork")
    return 0


# --- the hooks shim.c calls -----------------------------------------------------------------

def install_hooks(rt: Runtime) -> None:
    """The Python side of shim.c's thread and exit hooks."""
    ffi = rt.ffi

    @ffi.def_extern(error=-1, onerror=_reporter("pthread_create"))
    def emu_thread_spawn(parent: int) -> int:
        return int(rt.bridge().spawn(parent))

    @ffi.def_extern(onerror=_reporter("a new thread's start"))
    def emu_thread_begin(tid: int) -> None:
        rt.bridge().begin(tid)

    @ffi.def_extern(onerror=_reporter("a thread's end"))
    def emu_thread_end(tid: int) -> None:
        rt.bridge().end(tid)

    @ffi.def_extern(onerror=_reporter("pthread_create"))
    def emu_thread_created(tid: int, pthread: int) -> None:
        rt.bridge().created(tid, pthread)

    @ffi.def_extern(onerror=_reporter("pthread_join"))
    def emu_thread_join(pthread: int, tid: int) -> None:
        rt.bridge().join(pthread, tid)

    @ffi.def_extern(onerror=_reporter("exit"))
    def emu_process_exit(tid: int) -> None:
        rt.bridge().exit(tid)


# The modules whose `export`s the library attaches besides this one's (each API's own).
EXTENSIONS: tuple[str, ...] = ("emu.capi.dsp_calls", "emu.capi.dv_calls")


def start(ffi: Any, lib: Any) -> None:
    """The library's start-up (its init code): every entry point attached."""
    for name in EXTENSIONS:
        importlib.import_module(name)
    runtime = Runtime(ffi, lib)
    runtime.install()
    install_hooks(runtime)

"""The hbDNN C-named API as a contract table (spec/contracts.md, "Python runtime APIs").

One row per call: a valid call returns 0 (and out-parameters of the documented types), a
misuse returns the exact documented error code with None for every out-parameter. Every row
also checks that nothing escaped and that the session still works afterwards: no buffer
leaked or stayed pinned, and a fresh inference gives the very outputs it gave before.
A test at the end fails when `emu.runtime.hbdnn` grows a C-named function without rows.
"""

from __future__ import annotations

import inspect
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import emu
from emu.nn import compiler
from emu.runtime import hbdnn as dnn
from emu.runtime import status
from emu.runtime.hbdsp import hbDSPRpcCtrlParam
from emu.runtime.hbsys import (
    hbSysAllocCachedMem,
    hbSysAllocMem,
    hbSysFreeMem,
    hbSysMem,
)
from emu.soc.config import load_config
from tests.nn.nets import segmented
from tests.runtime.test_hbdnn import _tensors

OVERRIDES = ["cpu.api_call_ps=1000", "bpu.task_overhead_ps=0"]
SOC = load_config("j5", None, OVERRIDES).soc

# Functions the other half of the runtime is adding (issue 12, part two). They may be
# missing; once they exist they need rows (see `pending_rows`).
PENDING = ("hbDNNRoiInfer", "hbDNNResize", "hbDNNRegisterLayerCreator",
           "hbDNNUnregisterLayerCreator")

# How many out-parameters follow the status code; None: the function returns a bare value
# (a status code, or a string for the two that return `const char *` in C).
OUTS: dict[str, int | None] = {
    "hbDNNGetVersion": None, "hbDNNInitializeFromFiles": 1, "hbDNNInitializeFromDDR": 1,
    "hbDNNRelease": None, "hbDNNGetModelNameList": 2, "hbDNNGetModelHandle": 1,
    "hbDNNGetInputCount": 1, "hbDNNGetOutputCount": 1, "hbDNNGetInputName": 1,
    "hbDNNGetOutputName": 1, "hbDNNGetInputTensorProperties": 1,
    "hbDNNGetOutputTensorProperties": 1, "hbDNNInfer": 1, "hbDNNWaitTaskDone": None,
    "hbDNNReleaseTask": None, "hbDNNSetTaskDoneCb": None, "hbDNNGetErrorDesc": None,
    "HB_DNN_INITIALIZE_INFER_CTRL_PARAM": None,
}
STRING_RESULT = ("hbDNNGetVersion", "hbDNNGetErrorDesc")
DEFAULT: Any = object()  # "the module's own" for Ctx.infer_with


def _released(data: bytes) -> memoryview:
    """A view of `data` that no longer gives its bytes."""
    view = memoryview(data)
    view.release()
    return view


def _compile(name: str, seed: int) -> compiler.CompiledModel:
    return compiler.compile_model(segmented(size=8, channels=4, seed=seed, middle=()), name,
                                  compiler.CompileOptions(calib_random=1, seed=seed), SOC)


class Ctx:
    """The module's session and what the rows use: a loaded model, its tensors, an input and
    the output it must give, handles that were released or belong to other sessions."""

    def __init__(self, tmp: Any) -> None:
        models = [_compile("tiny", 0), _compile("tiny2", 1)]
        self.data = compiler.dumps(models)
        self.path = tmp / "tiny.hbm"
        self.path.write_bytes(self.data)
        (tmp / "junk.hbm").write_bytes(b"not a model")
        self.junk = tmp / "junk.hbm"
        self.truncated = tmp / "truncated.hbm"
        self.truncated.write_bytes(self.data[: len(self.data) // 2])
        self.folder = tmp
        self.x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
        reference = compiler.load_bytes(self.data, "reference")[0]
        self.want = np.ascontiguousarray(reference.run({"input": self.x})["conv0.r"])
        self.cleanups: list[Callable[[], Any]] = []
        self.called_back: list[tuple[Any, int, Any]] = []
        # Callbacks the rows run in this process registered: pytest-xdist may run the other
        # rows of this module in another worker, with its own `ctx`.
        self.registered_callbacks = 0
        # Another session, left open underneath this module's one, and a closed one: their
        # handles must be refused here.
        self.other = emu.Session(overrides=OVERRIDES)
        self.other.__enter__()
        self.other_packed, self.other_dnn, self.other_task, self.other_mem = self._foreign()
        self.closed = emu.Session(overrides=OVERRIDES)
        with self.closed:
            self.closed_packed, self.closed_dnn, self.closed_task, self.closed_mem = \
                self._foreign()
        self.sess = emu.Session(overrides=OVERRIDES)
        self.sess.__enter__()
        self.packed = self.load()
        self.dnn = self.handle(self.packed)
        self.ins, self.outs = self.tensors(self.dnn, False), self.tensors(self.dnn, True)
        self.ins[0].sysMem[0].virAddr[: self.x.nbytes] = self.x.view(np.uint8).reshape(-1)
        released = self.load()
        self.released_dnn = self.handle(released)
        assert dnn.hbDNNRelease(released) == 0
        self.released_packed = released
        self.released_task = self.finished_task()
        assert dnn.hbDNNReleaseTask(self.released_task) == 0
        self.baseline_buffers = self.sess.soc.pool.live_buffers

    def _foreign(self) -> tuple[Any, Any, Any, hbSysMem]:
        packed = self.load()
        handle = self.handle(packed)
        ins, outs = self.tensors(handle, False), self.tensors(handle, True)
        rc, task = dnn.hbDNNInfer(outs, ins, handle, self.ctrl())
        assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
        mem = hbSysMem()
        assert hbSysAllocCachedMem(mem, 4096) == 0
        return packed, handle, task, mem

    def close(self) -> None:
        self.sess.__exit__(None, None, None)
        self.other.__exit__(None, None, None)

    # --- helpers the rows call ---------------------------------------------------------

    def load(self) -> Any:
        rc, packed = dnn.hbDNNInitializeFromDDR([self.data], [len(self.data)])
        assert rc == 0
        return packed

    def handle(self, packed: Any, name: str = "tiny") -> Any:
        rc, handle = dnn.hbDNNGetModelHandle(packed, name)
        assert rc == 0
        return handle

    @staticmethod
    def ctrl(**fields: Any) -> dnn.hbDNNInferCtrlParam:
        ctrl = dnn.hbDNNInferCtrlParam()
        assert dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl) == 0
        for key, value in fields.items():
            setattr(ctrl, key, value)
        return ctrl

    def tensors(self, handle: Any, outputs: bool) -> list[dnn.hbDNNTensor]:
        return _tensors(handle, outputs)

    def tensor(self, *, size: int | None = None, mem: Any = None,
               **props: Any) -> dnn.hbDNNTensor:
        """A copy of the input tensor with some properties changed, over a new buffer of
        `size` bytes (default: the right size) or over `mem`."""
        rc, wanted = dnn.hbDNNGetInputTensorProperties(self.dnn, 0)
        assert rc == 0
        for key, value in props.items():
            setattr(wanted, key, value)
        tensor = dnn.hbDNNTensor()
        tensor.properties = wanted
        if mem is None:
            mem = tensor.sysMem[0]
            assert hbSysAllocMem(mem, size or self.x.nbytes) == 0
            self.cleanups.append(lambda: hbSysFreeMem(mem))
        tensor.sysMem[0] = mem
        return tensor

    def freed_tensor(self) -> dnn.hbDNNTensor:
        tensor = self.tensor(mem=hbSysMem())
        assert hbSysAllocMem(tensor.sysMem[0], self.x.nbytes) == 0
        assert hbSysFreeMem(tensor.sysMem[0]) == 0
        return tensor

    def shape(self, dims: Any, count: Any = None) -> dnn.hbDNNTensorShape:
        shape = dnn.hbDNNTensorShape(dims if isinstance(dims, tuple) else ())
        if not isinstance(dims, tuple):
            shape.dimensionSize = dims
            shape.numDimensions = 4
        if count is not None:
            shape.numDimensions = count
        return shape

    def infer(self, **fields: Any) -> tuple[int, Any]:
        rc, task = dnn.hbDNNInfer(self.outs, self.ins, self.dnn, self.ctrl(**fields))
        if rc == 0:
            self.cleanups.append(lambda: self.finish(task))
        return rc, task

    def infer_with(self, *, outs: Any = DEFAULT, ins: Any = DEFAULT, handle: Any = DEFAULT,
                   task: Any = None) -> tuple[int, Any]:
        rc, new = dnn.hbDNNInfer(self.outs if outs is DEFAULT else outs,
                                 self.ins if ins is DEFAULT else ins,
                                 self.dnn if handle is DEFAULT else handle, self.ctrl(), task)
        if rc == 0 and task is None:
            self.cleanups.append(lambda: self.finish(new))
        return rc, new

    def finish(self, task: Any) -> None:
        if not task.released:
            if not task.open:
                assert dnn.hbDNNWaitTaskDone(task, 0) == 0
            assert dnn.hbDNNReleaseTask(task) == 0

    def finished_task(self) -> Any:
        rc, task = dnn.hbDNNInfer(self.outs, self.ins, self.dnn, self.ctrl())
        assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
        self.cleanups.append(lambda: self.finish(task))
        return task

    def running_task(self) -> Any:
        rc, task = self.infer()
        assert rc == 0
        return task

    def open_chain(self, models: int = 1) -> Any:
        rc, task = dnn.hbDNNInfer(self.outs, self.ins, self.dnn, self.ctrl(more=1))
        assert rc == 0
        self.cleanups.append(lambda: self.finish(task))
        for _ in range(models - 1):
            rc, same = dnn.hbDNNInfer(self.outs, self.ins, self.dnn, self.ctrl(more=1), task)
            assert rc == 0 and same is task
        return task

    def fill_task_slots(self) -> None:
        for _ in range(dnn.MAX_TASKS):
            rc, _ = self.infer()
            assert rc == 0

    def new_packed(self, *, running: bool = False) -> Any:
        packed = self.load()
        self.cleanups.append(lambda: dnn.hbDNNRelease(packed))  # runs last
        if running:
            handle = self.handle(packed)
            rc, task = dnn.hbDNNInfer(self.outs, self.ins, handle, self.ctrl(more=1))
            assert rc == 0
            self.cleanups.append(lambda: dnn.hbDNNReleaseTask(task))
        return packed

    def callback(self, task: Any, code: int, userdata: Any) -> None:
        self.called_back.append((task, code, userdata))

    def cleanup(self) -> None:
        while self.cleanups:
            self.cleanups.pop()()
        self.sess.run()
        emu.sleep_ms(1)  # released tasks that were running stop at their next boundary

    def check_still_works(self) -> None:
        """No buffer leaked or stays pinned; a fresh inference gives the same outputs."""
        pool = self.sess.soc.pool
        assert pool.live_buffers == self.baseline_buffers
        for tensor in (*self.ins, *self.outs):
            buf = pool.find(tensor.sysMem[0].phyAddr)
            assert buf is not None and buf.users == 0
        out = self.outs[0].sysMem[0].virAddr
        out[:] = 0
        rc, task = dnn.hbDNNInfer(self.outs, self.ins, self.dnn, self.ctrl())
        assert rc == 0
        assert dnn.hbDNNWaitTaskDone(task, 0) == 0
        assert dnn.hbDNNReleaseTask(task) == 0
        got = out[: self.want.nbytes].view(np.float32).reshape(self.want.shape)
        assert np.array_equal(got, self.want)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Any:
    context = Ctx(tmp_path_factory.mktemp("contract"))
    yield context
    context.close()


@dataclass(frozen=True)
class Row:
    fn: str
    case: str
    call: Callable[[Ctx], Any]
    code: int  # the status code; for the two string functions, ignored
    types: tuple[type, ...] = ()  # the out-parameters' types on success

    @property
    def id(self) -> str:
        return f"{self.fn}-{self.case}"


OK = dnn.HB_DNN_SUCCESS
ARG = dnn.HB_DNN_INVALID_ARGUMENT
PACKED = dnn.HB_DNN_INVALID_PACKED_DNN_HANDLE
DNN = dnn.HB_DNN_INVALID_DNN_HANDLE
TASK = dnn.HB_DNN_INVALID_TASK_HANDLE
USE = dnn.HB_DNN_API_USE_ERROR

NOT_HANDLES: dict[str, Callable[[Ctx], Any]] = {
    "None": lambda c: None, "int": lambda c: 1, "str": lambda c: "handle",
    "object": lambda c: object(), "float": lambda c: 1.5, "list": lambda c: [],
}
BAD_INDICES: dict[str, Any] = {
    "negative": -1, "past-the-end": 1, "huge": 2**63, "huger": 10**30, "float": 0.0,
    "bool": False, "None": None, "str": "0", "numpy-float": np.float32(0),
    "numpy-negative": np.int64(-1),
}
BAD_TIMEOUTS: dict[str, Any] = {
    "str": "1", "None": None, "nan": math.nan, "inf": math.inf, "bool": True, "list": [1],
    "huge": 2**40, "huge-float": 1e30, "object": object(),
}


def _rows() -> list[Row]:
    rows: list[Row] = []

    def add(fn: str, case: str, call: Callable[[Ctx], Any], code: int,
            *types: type) -> None:
        rows.append(Row(fn, case, call, code, types))

    # --- version, error descriptions, the initialiser macro -----------------------------
    add("hbDNNGetVersion", "valid", lambda c: dnn.hbDNNGetVersion(), OK)
    add("hbDNNGetErrorDesc", "known", lambda c: dnn.hbDNNGetErrorDesc(dnn.HB_DNN_TIMEOUT), OK)
    add("hbDNNGetErrorDesc", "success", lambda c: dnn.hbDNNGetErrorDesc(0), OK)
    add("hbDNNGetErrorDesc", "numpy", lambda c: dnn.hbDNNGetErrorDesc(np.int32(ARG)), OK)
    for case, value in (("unknown", -1), ("None", None), ("str", "x"), ("float", 1.5),
                        ("object", object()), ("huge", 10**30)):
        add("hbDNNGetErrorDesc", case, lambda c, v=value: dnn.hbDNNGetErrorDesc(v), OK)
    add("HB_DNN_INITIALIZE_INFER_CTRL_PARAM", "valid",
        lambda c: dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(dnn.hbDNNInferCtrlParam()), OK)
    for case, value in (("None", lambda: None), ("dict", dict), ("int", lambda: 0),
                        ("dsp-ctrl", hbDSPRpcCtrlParam)):
        add("HB_DNN_INITIALIZE_INFER_CTRL_PARAM", case,
            lambda c, v=value: dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(v()), ARG)

    # --- loading --------------------------------------------------------------------------
    def from_files(names: Callable[[Ctx], Any], *count: Any) -> Callable[[Ctx], Any]:
        def call(c: Ctx) -> Any:
            result = dnn.hbDNNInitializeFromFiles(names(c), *count)
            if result[0] == 0:
                c.cleanups.append(lambda: dnn.hbDNNRelease(result[1]))
            return result
        return call

    add("hbDNNInitializeFromFiles", "valid", from_files(lambda c: [str(c.path)]), OK,
        dnn.hbPackedDNNHandle)
    add("hbDNNInitializeFromFiles", "path-object-and-count",
        from_files(lambda c: (c.path,), 1), OK, dnn.hbPackedDNNHandle)
    add("hbDNNInitializeFromFiles", "count-numpy", from_files(lambda c: [str(c.path)],
                                                             np.int64(1)),
        OK, dnn.hbPackedDNNHandle)
    for case, names, code in (
            ("None", lambda c: None, ARG), ("str-not-list", lambda c: str(c.path), ARG),
            ("empty", lambda c: [], ARG), ("int-name", lambda c: [1], ARG),
            ("None-name", lambda c: [None], ARG),
            ("missing", lambda c: [str(c.folder / "missing.hbm")], dnn.HB_DNN_CAN_NOT_OPEN_FILE),
            ("folder", lambda c: [str(c.folder)], dnn.HB_DNN_CAN_NOT_OPEN_FILE),
            ("junk", lambda c: [str(c.junk)], dnn.HB_DNN_INVALID_MODEL),
            ("truncated", lambda c: [str(c.truncated)], dnn.HB_DNN_INVALID_MODEL),
            ("same-models-twice", lambda c: [str(c.path), str(c.path)],
             dnn.HB_DNN_INVALID_MODEL)):
        add("hbDNNInitializeFromFiles", case, from_files(names), code)
    for case, count in (("count-wrong", 2), ("count-str", "1"), ("count-bool", True),
                        ("count-float", 1.0)):
        add("hbDNNInitializeFromFiles", case, from_files(lambda c: [str(c.path)], count), ARG)
    rows.append(Row("hbDNNInitializeFromFiles", "name-too-long",
                    from_files(lambda c: ["x" * 5000 + ".hbm"]),
                    dnn.HB_DNN_CAN_NOT_OPEN_FILE))

    def from_ddr(args: Callable[[Ctx], tuple[Any, ...]]) -> Callable[[Ctx], Any]:
        def call(c: Ctx) -> Any:
            result = dnn.hbDNNInitializeFromDDR(*args(c))
            if result[0] == 0:
                c.cleanups.append(lambda: dnn.hbDNNRelease(result[1]))
            return result
        return call

    add("hbDNNInitializeFromDDR", "valid", from_ddr(lambda c: ([c.data], [len(c.data)])),
        OK, dnn.hbPackedDNNHandle)
    add("hbDNNInitializeFromDDR", "bytearray-numpy-length-count",
        from_ddr(lambda c: ((bytearray(c.data),), [np.int64(len(c.data))], 1)), OK,
        dnn.hbPackedDNNHandle)
    add("hbDNNInitializeFromDDR", "uint8-array",
        from_ddr(lambda c: ([np.frombuffer(c.data, np.uint8)], [len(c.data)])), OK,
        dnn.hbPackedDNNHandle)
    for case, args, code in (
            ("None", lambda c: (None, None), ARG),
            ("bytes-not-list", lambda c: (c.data, [len(c.data)]), ARG),
            ("empty", lambda c: ([], []), ARG),
            ("lengths-mismatch", lambda c: ([c.data], [len(c.data)] * 2), ARG),
            ("lengths-None", lambda c: ([c.data], None), ARG),
            ("length-zero", lambda c: ([c.data], [0]), ARG),
            ("length-negative", lambda c: ([c.data], [-1]), ARG),
            ("length-past-the-end", lambda c: ([c.data], [len(c.data) + 1]), ARG),
            ("length-float", lambda c: ([c.data], [float(len(c.data))]), ARG),
            ("length-bool", lambda c: ([c.data], [True]), ARG),
            ("data-str", lambda c: (["model"], [5]), ARG),
            ("data-None", lambda c: ([None], [5]), ARG),
            ("data-released-view", lambda c: ([_released(c.data)], [len(c.data)]), ARG),
            ("count-wrong", lambda c: ([c.data], [len(c.data)], 2), ARG),
            ("count-str", lambda c: ([c.data], [len(c.data)], "1"), ARG),
            ("junk", lambda c: ([b"junk" * 10], [40]), dnn.HB_DNN_INVALID_MODEL),
            ("short-length", lambda c: ([c.data], [len(c.data) - 5]), dnn.HB_DNN_INVALID_MODEL),
            ("same-models-twice", lambda c: ([c.data, c.data], [len(c.data)] * 2),
             dnn.HB_DNN_INVALID_MODEL)):
        add("hbDNNInitializeFromDDR", case, from_ddr(args), code)

    add("hbDNNRelease", "valid", lambda c: dnn.hbDNNRelease(c.new_packed()), OK)
    add("hbDNNRelease", "twice", lambda c: (dnn.hbDNNRelease(p := c.new_packed()),
                                            dnn.hbDNNRelease(p))[1], PACKED)
    add("hbDNNRelease", "task-alive",
        lambda c: dnn.hbDNNRelease(c.new_packed(running=True)), dnn.HB_DNN_MODEL_IS_RUNNING)
    add("hbDNNRelease", "released", lambda c: dnn.hbDNNRelease(c.released_packed), PACKED)
    add("hbDNNRelease", "model-handle", lambda c: dnn.hbDNNRelease(c.dnn), PACKED)
    add("hbDNNRelease", "other-session", lambda c: dnn.hbDNNRelease(c.other_packed), PACKED)
    add("hbDNNRelease", "closed-session", lambda c: dnn.hbDNNRelease(c.closed_packed), PACKED)
    for case, bad in NOT_HANDLES.items():
        add("hbDNNRelease", case, lambda c, b=bad: dnn.hbDNNRelease(b(c)), PACKED)

    # --- model information ----------------------------------------------------------------
    add("hbDNNGetModelNameList", "valid", lambda c: dnn.hbDNNGetModelNameList(c.packed), OK,
        list, int)
    add("hbDNNGetModelHandle", "valid", lambda c: dnn.hbDNNGetModelHandle(c.packed, "tiny2"),
        OK, dnn.hbDNNHandle)
    bad_packed = {**{k: v for k, v in NOT_HANDLES.items()},
                  "model-handle": lambda c: c.dnn,
                  "released": lambda c: c.released_packed,
                  "other-session": lambda c: c.other_packed,
                  "closed-session": lambda c: c.closed_packed}
    for case, bad in bad_packed.items():
        add("hbDNNGetModelNameList", case, lambda c, b=bad: dnn.hbDNNGetModelNameList(b(c)),
            PACKED)
        add("hbDNNGetModelHandle", case,
            lambda c, b=bad: dnn.hbDNNGetModelHandle(b(c), "tiny"), PACKED)
    for case, name in (("unknown", "nope"), ("None", None), ("int", 0), ("bytes", b"tiny"),
                       ("list", ["tiny"])):
        add("hbDNNGetModelHandle", f"name-{case}",
            lambda c, n=name: dnn.hbDNNGetModelHandle(c.packed, n), ARG)

    bad_dnn = {**{k: v for k, v in NOT_HANDLES.items()},
               "packed-handle": lambda c: c.packed,
               "released": lambda c: c.released_dnn,
               "other-session": lambda c: c.other_dnn,
               "closed-session": lambda c: c.closed_dnn,
               "task": lambda c: c.released_task}
    for fn in ("hbDNNGetInputCount", "hbDNNGetOutputCount"):
        add(fn, "valid", lambda c, f=fn: getattr(dnn, f)(c.dnn), OK, int)
        for case, bad in bad_dnn.items():
            add(fn, case, lambda c, f=fn, b=bad: getattr(dnn, f)(b(c)), DNN)
    for fn, kind in (("hbDNNGetInputName", str), ("hbDNNGetOutputName", str),
                     ("hbDNNGetInputTensorProperties", dnn.hbDNNTensorProperties),
                     ("hbDNNGetOutputTensorProperties", dnn.hbDNNTensorProperties)):
        add(fn, "valid", lambda c, f=fn: getattr(dnn, f)(c.dnn, 0), OK, kind)
        add(fn, "valid-numpy-index", lambda c, f=fn: getattr(dnn, f)(c.dnn, np.uint8(0)),
            OK, kind)
        for case, bad in bad_dnn.items():
            add(fn, case, lambda c, f=fn, b=bad: getattr(dnn, f)(b(c), 0), DNN)
        for case, index in BAD_INDICES.items():
            add(fn, f"index-{case}", lambda c, f=fn, i=index: getattr(dnn, f)(c.dnn, i), ARG)

    # --- inference ------------------------------------------------------------------------
    add("hbDNNInfer", "valid", lambda c: c.infer(), OK, dnn.hbDNNTask)
    for case, fields in (("priority-255", {"priority": 255}),
                         ("priority-numpy", {"priority": np.uint8(200)}),
                         ("core-0", {"bpuCoreId": dnn.HB_BPU_CORE_0}),
                         ("core-1", {"bpuCoreId": dnn.HB_BPU_CORE_1}),
                         ("custom-id-extremes", {"customId": -(2**63)}),
                         ("more-bool", {"more": False})):
        add("hbDNNInfer", case, lambda c, f=fields: c.infer(**f), OK, dnn.hbDNNTask)
    add("hbDNNInfer", "chained", lambda c: c.infer_with(task=c.open_chain()), OK, dnn.hbDNNTask)
    for case, fields in (
            ("priority-256", {"priority": 256}), ("priority--1", {"priority": -1}),
            ("priority-float", {"priority": 1.0}), ("priority-bool", {"priority": True}),
            ("priority-None", {"priority": None}), ("priority-str", {"priority": "1"}),
            ("priority-numpy-256", {"priority": np.int64(256)}),
            ("core-3", {"bpuCoreId": 3}), ("core-4", {"bpuCoreId": 4}),
            ("core--1", {"bpuCoreId": -1}), ("core-float", {"bpuCoreId": 1.0}),
            ("core-bool", {"bpuCoreId": True}), ("core-None", {"bpuCoreId": None}),
            ("core-str", {"bpuCoreId": "0"}),
            ("custom-id-str", {"customId": "x"}), ("custom-id-float", {"customId": 1.5}),
            ("custom-id-2**63", {"customId": 2**63}), ("custom-id-None", {"customId": None}),
            ("more-2", {"more": 2}), ("more--1", {"more": -1}), ("more-str", {"more": "1"}),
            ("more-None", {"more": None}), ("more-float", {"more": 1.0})):
        add("hbDNNInfer", case, lambda c, f=fields: c.infer(**f), ARG)
    for case, ctrl in (("ctrl-None", None), ("ctrl-dict", {}), ("ctrl-int", 0),
                       ("ctrl-dsp", hbDSPRpcCtrlParam())):
        add("hbDNNInfer", case,
            lambda c, k=ctrl: dnn.hbDNNInfer(c.outs, c.ins, c.dnn, k), ARG)
    for case, bad in bad_dnn.items():
        add("hbDNNInfer", f"handle-{case}", lambda c, b=bad: c.infer_with(handle=b(c)), DNN)
    tensor_misuse: dict[str, tuple[Callable[[Ctx], Any], int]] = {
        "inputs-None": (lambda c: dnn.hbDNNInfer(c.outs, None, c.dnn, c.ctrl()), ARG),
        "outputs-None": (lambda c: dnn.hbDNNInfer(None, c.ins, c.dnn, c.ctrl()), ARG),
        "inputs-empty": (lambda c: c.infer_with(ins=[]), ARG),
        "inputs-two": (lambda c: c.infer_with(ins=[*c.ins, *c.ins]), ARG),
        "outputs-empty": (lambda c: c.infer_with(outs=[]), ARG),
        "outputs-tuple-two": (lambda c: c.infer_with(outs=(*c.outs, *c.outs)), ARG),
        "inputs-swapped": (lambda c: c.infer_with(ins=c.outs, outs=c.ins), ARG),
        "tensor-not-a-tensor": (lambda c: c.infer_with(ins=[object()]), ARG),
        "tensor-is-mem": (lambda c: c.infer_with(ins=[c.ins[0].sysMem[0]]), ARG),
        "properties-None": (lambda c: c.infer_with(ins=[_with(c.tensor(), properties=None)]),
                            ARG),
        "sysMem-empty": (lambda c: c.infer_with(ins=[_with(c.tensor(), sysMem=[])]), ARG),
        "sysMem-None": (lambda c: c.infer_with(ins=[_with(c.tensor(), sysMem=None)]), ARG),
        "shape-wrong": (lambda c: c.infer_with(ins=[c.tensor(validShape=c.shape(
            (1, 3, 8, 9)))]), ARG),
        "shape-rank": (lambda c: c.infer_with(ins=[c.tensor(validShape=c.shape(
            (1, 3, 64)))]), ARG),
        "shape-zero-dims": (lambda c: c.infer_with(ins=[c.tensor(validShape=c.shape(
            (1, 3, 8, 8), 0))]), ARG),
        "shape-nine-dims": (lambda c: c.infer_with(ins=[c.tensor(validShape=c.shape(
            (1, 3, 8, 8), 9))]), ARG),
        "shape-count-str": (lambda c: c.infer_with(ins=[c.tensor(validShape=c.shape(
            (1, 3, 8, 8), "4"))]), ARG),
        "shape-sizes-None": (lambda c: c.infer_with(ins=[c.tensor(validShape=c.shape(
            None))]), ARG),
        "shape-sizes-negative": (lambda c: c.infer_with(ins=[c.tensor(validShape=c.shape(
            [1, 3, -8, -8]))]), ARG),
        "shape-None": (lambda c: c.infer_with(ins=[c.tensor(validShape=None)]), ARG),
        "shape-tuple": (lambda c: c.infer_with(ins=[c.tensor(validShape=(1, 3, 8, 8))]),
                        ARG),
        "type-u8": (lambda c: c.infer_with(ins=[c.tensor(
            tensorType=dnn.HB_DNN_TENSOR_TYPE_U8)]), ARG),
        "type-str": (lambda c: c.infer_with(ins=[c.tensor(tensorType="float32")]), ARG),
        "type-None": (lambda c: c.infer_with(ins=[c.tensor(tensorType=None)]), ARG),
        "aligned-padded": (lambda c: c.infer_with(ins=[c.tensor(alignedShape=c.shape(
            (1, 3, 8, 16)), size=2 * c.x.nbytes)]), ARG),
        "nv12-separate-for-a-feature-map": (lambda c: c.infer_with(ins=[c.tensor(
            tensorType=dnn.HB_DNN_IMG_TYPE_NV12_SEPARATE)]), ARG),
        "mem-never-allocated": (lambda c: c.infer_with(ins=[c.tensor(mem=hbSysMem())]), ARG),
        "mem-freed": (lambda c: c.infer_with(ins=[c.freed_tensor()]), ARG),
        "mem-too-small": (lambda c: c.infer_with(ins=[c.tensor(size=c.x.nbytes - 1)]), ARG),
        "mem-other-session": (lambda c: c.infer_with(ins=[c.tensor(mem=c.other_mem)]), ARG),
        "mem-closed-session": (lambda c: c.infer_with(ins=[c.tensor(mem=c.closed_mem)]), ARG),
        "mem-None": (lambda c: c.infer_with(ins=[_with(c.tensor(), sysMem=[None])]), ARG),
        "task-str": (lambda c: c.infer_with(task="task"), TASK),
        "task-finished": (lambda c: c.infer_with(task=c.finished_task()), TASK),
        "task-running": (lambda c: c.infer_with(task=c.running_task()), TASK),
        "task-released": (lambda c: c.infer_with(task=c.released_task), TASK),
        "task-other-session": (lambda c: c.infer_with(task=c.other_task), TASK),
        "task-packed-handle": (lambda c: c.infer_with(task=c.packed), TASK),
        "too-many-tasks": (lambda c: (c.fill_task_slots(), c.infer())[1],
                           dnn.HB_DNN_TASK_NUM_EXCEED_LIMIT),
        "too-many-chained": (lambda c: c.infer_with(task=c.open_chain(dnn.MAX_CHAINED)),
                             dnn.HB_DNN_TASK_BATCH_SIZE_EXCEED_LIMIT),
    }
    for case, (call, code) in tensor_misuse.items():
        add("hbDNNInfer", case, call, code)
    rows.append(Row("hbDNNInfer", "type-array", lambda c: c.infer_with(ins=[c.tensor(
        tensorType=np.array([dnn.HB_DNN_TENSOR_TYPE_F32] * 2))]), ARG))

    # --- waiting, releasing, callbacks ------------------------------------------------------
    bad_tasks = {**{k: v for k, v in NOT_HANDLES.items()},
                 "released": lambda c: c.released_task,
                 "other-session": lambda c: c.other_task,
                 "closed-session": lambda c: c.closed_task,
                 "model-handle": lambda c: c.dnn}
    add("hbDNNWaitTaskDone", "finished", lambda c: dnn.hbDNNWaitTaskDone(c.finished_task(), 0),
        OK)
    add("hbDNNWaitTaskDone", "running-forever",
        lambda c: dnn.hbDNNWaitTaskDone(c.running_task(), -1), OK)
    add("hbDNNWaitTaskDone", "running-long-timeout",
        lambda c: dnn.hbDNNWaitTaskDone(c.running_task(), np.float32(1000)), OK)
    add("hbDNNWaitTaskDone", "running-short-timeout",
        lambda c: dnn.hbDNNWaitTaskDone(c.running_task(), 1e-4), dnn.HB_DNN_TIMEOUT)
    add("hbDNNWaitTaskDone", "open-chain-timeout",
        lambda c: dnn.hbDNNWaitTaskDone(c.open_chain(), 1), dnn.HB_DNN_TIMEOUT)
    add("hbDNNWaitTaskDone", "open-chain-forever",
        lambda c: dnn.hbDNNWaitTaskDone(c.open_chain(), 0), dnn.HB_DNN_DEADLOCK)
    for case, bad in bad_tasks.items():
        add("hbDNNWaitTaskDone", case, lambda c, b=bad: dnn.hbDNNWaitTaskDone(b(c), 0), TASK)
    for case, timeout in BAD_TIMEOUTS.items():
        add("hbDNNWaitTaskDone", f"timeout-{case}",
            lambda c, t=timeout: dnn.hbDNNWaitTaskDone(c.running_task(), t), ARG)

    add("hbDNNReleaseTask", "finished", lambda c: dnn.hbDNNReleaseTask(c.finished_task()), OK)
    add("hbDNNReleaseTask", "running", lambda c: dnn.hbDNNReleaseTask(c.running_task()), OK)
    add("hbDNNReleaseTask", "open-chain", lambda c: dnn.hbDNNReleaseTask(c.open_chain(3)), OK)
    add("hbDNNReleaseTask", "twice",
        lambda c: (dnn.hbDNNReleaseTask(t := c.finished_task()), dnn.hbDNNReleaseTask(t))[1],
        TASK)
    for case, bad in bad_tasks.items():
        add("hbDNNReleaseTask", case, lambda c, b=bad: dnn.hbDNNReleaseTask(b(c)), TASK)

    add("hbDNNSetTaskDoneCb", "running",
        lambda c: dnn.hbDNNSetTaskDoneCb(c.running_task(), c.callback, "data"), OK)
    add("hbDNNSetTaskDoneCb", "finished",
        lambda c: dnn.hbDNNSetTaskDoneCb(c.finished_task(), c.callback), OK)
    for case, bad in bad_tasks.items():
        add("hbDNNSetTaskDoneCb", case,
            lambda c, b=bad: dnn.hbDNNSetTaskDoneCb(b(c), c.callback), TASK)
    for case, cb in (("None", None), ("str", "cb"), ("int", 1), ("object", object())):
        add("hbDNNSetTaskDoneCb", f"cb-{case}",
            lambda c, k=cb: dnn.hbDNNSetTaskDoneCb(c.running_task(), k), ARG)
    return rows


def _with(obj: Any, **fields: Any) -> Any:
    for key, value in fields.items():
        setattr(obj, key, value)
    return obj


def pending_rows() -> list[Row]:
    """Rows for the functions being added (PENDING), once they exist: a misuse row that
    passes None for every parameter (no handle, no tensors: an invalid argument or handle),
    and for the layer-creator pair a valid registration and its removal."""
    rows = []
    for name in PENDING:
        fn = getattr(dnn, name, None)
        if fn is None:
            continue
        arity = len([p for p in inspect.signature(fn).parameters.values()
                     if p.default is inspect.Parameter.empty])
        code = dnn.HB_DNN_INVALID_DNN_HANDLE if name == "hbDNNRoiInfer" else ARG
        rows.append(Row(name, "all-None", lambda c, f=fn, n=arity: f(*[None] * n), code))
    if hasattr(dnn, "hbDNNRegisterLayerCreator") and hasattr(dnn, "hbDNNUnregisterLayerCreator"):
        def register(c: Ctx) -> Any:
            rc = dnn.hbDNNRegisterLayerCreator("EmuTestLayer", lambda: None)
            c.cleanups.append(lambda: dnn.hbDNNUnregisterLayerCreator("EmuTestLayer"))
            return rc

        def unregister(c: Ctx) -> Any:
            assert dnn.hbDNNRegisterLayerCreator("EmuTestLayer2", lambda: None) == 0
            return dnn.hbDNNUnregisterLayerCreator("EmuTestLayer2")

        def twice(c: Ctx) -> Any:
            assert register(c) == 0
            return dnn.hbDNNRegisterLayerCreator("EmuTestLayer", lambda: None)

        for case, args in (("type-empty", ("", lambda: None)), ("type-int", (1, lambda: None)),
                           ("creator-not-callable", ("EmuTestLayer", "creator")),
                           ("creator-None", ("EmuTestLayer", None))):
            rows.append(Row("hbDNNRegisterLayerCreator", case,
                            lambda c, a=args: dnn.hbDNNRegisterLayerCreator(*a), ARG))
        rows += [Row("hbDNNRegisterLayerCreator", "twice", twice, ARG),
                 Row("hbDNNUnregisterLayerCreator", "type-int",
                     lambda c: dnn.hbDNNUnregisterLayerCreator(1), ARG),
                 Row("hbDNNRegisterLayerCreator", "valid", register, OK),
                 Row("hbDNNUnregisterLayerCreator", "valid", unregister, OK),
                 Row("hbDNNUnregisterLayerCreator", "never-registered",
                     lambda c: dnn.hbDNNUnregisterLayerCreator("NoSuchLayer"), ARG)]
    return rows


ROWS = _rows() + pending_rows()
PARAMS = [pytest.param(row, id=row.id) for row in ROWS]


def _check_shape(row: Row, result: Any) -> None:
    outs = OUTS.get(row.fn)
    if row.fn not in OUTS and type(result) is tuple:  # a pending function with out-params
        outs = len(result) - 1
    if row.fn in STRING_RESULT:
        assert isinstance(result, str) and result
        return
    if outs is None:
        assert type(result) is int, f"{row.id}: {result!r} is not a bare status code"
        rc = result
        values: tuple[Any, ...] = ()
    else:
        assert type(result) is tuple and len(result) == 1 + outs, \
            f"{row.id}: {result!r} is not (status, {outs} out-parameters)"
        rc, *rest = result
        values = tuple(rest)
        assert type(rc) is int
    assert rc == row.code, (f"{row.id}: status {rc} ({dnn.hbDNNGetErrorDesc(rc)}), expected "
                            f"{row.code} ({dnn.hbDNNGetErrorDesc(row.code)})")
    if rc == OK:
        assert len(values) == len(row.types)
        for value, kind in zip(values, row.types, strict=True):
            assert isinstance(value, kind), f"{row.id}: {value!r} is not a {kind.__name__}"
    else:
        assert all(v is None for v in values), f"{row.id}: out-parameters {values} on error"


@pytest.mark.parametrize("row", PARAMS)
def test_contract_row(ctx: Ctx, row: Row) -> None:
    try:
        result = row.call(ctx)
        _check_shape(row, result)
        ctx.registered_callbacks += row.fn == "hbDNNSetTaskDoneCb" and row.code == OK
    finally:
        ctx.cleanup()
    ctx.check_still_works()


def test_string_results_say_what_they_describe(ctx: Ctx) -> None:
    assert dnn.hbDNNGetVersion() == (f"{dnn.HB_DNN_VERSION_MAJOR}.{dnn.HB_DNN_VERSION_MINOR}."
                                     f"{dnn.HB_DNN_VERSION_PATCH}")
    unknown = dnn.hbDNNGetErrorDesc(-1)
    assert "unknown" in unknown
    assert dnn.hbDNNGetErrorDesc(np.int32(dnn.HB_DNN_TIMEOUT)) == dnn.hbDNNGetErrorDesc(
        dnn.HB_DNN_TIMEOUT)
    assert "not a status code" in dnn.hbDNNGetErrorDesc("x")


def test_every_error_code_has_its_own_description() -> None:
    codes = {name: value for name, value in vars(dnn).items()
             if name.startswith("HB_DNN_") and type(value) is int and value < 0}
    assert len(codes) >= 16 and len(set(codes.values())) == len(codes)
    unknown = dnn.hbDNNGetErrorDesc(-1)
    texts = {}
    for name, code in codes.items():
        text = dnn.hbDNNGetErrorDesc(code)
        assert isinstance(text, str) and text.strip(), name
        assert text != unknown and text != status.describe(-(10**9)), name
        assert "unknown status code" not in text, name
        texts[name] = text
    assert len(set(texts.values())) == len(texts)  # each says something of its own


def test_the_ctrl_initialiser_resets_every_field() -> None:
    ctrl = dnn.hbDNNInferCtrlParam()
    for key in ("bpuCoreId", "dspCoreId", "priority", "more", "customId", "reserved1",
                "reserved2"):
        setattr(ctrl, key, 7)
    assert dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl) == 0
    assert (ctrl.bpuCoreId, ctrl.priority, ctrl.more, ctrl.customId) == (
        dnn.HB_BPU_CORE_ANY, dnn.HB_DNN_PRIORITY_LOWEST, 0, 0)
    assert (ctrl.dspCoreId, ctrl.reserved1, ctrl.reserved2) == (dnn.HB_DSP_CORE_ANY, 0, 0)


def test_a_second_core_that_the_hardware_lacks_is_an_invalid_argument(ctx: Ctx) -> None:
    with emu.Session(overrides=[*OVERRIDES, "bpu.cores=1"]):
        rc, packed = dnn.hbDNNInitializeFromDDR([ctx.data], [len(ctx.data)])
        assert rc == 0
        _, handle = dnn.hbDNNGetModelHandle(packed, "tiny")
        ins, outs = ctx.tensors(handle, False), ctx.tensors(handle, True)
        ctrl = ctx.ctrl(bpuCoreId=dnn.HB_BPU_CORE_1)
        assert dnn.hbDNNInfer(outs, ins, handle, ctrl) == (ARG, None)
        ctrl.bpuCoreId = dnn.HB_BPU_CORE_0
        rc, task = dnn.hbDNNInfer(outs, ins, handle, ctrl)
        assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
        assert dnn.hbDNNReleaseTask(task) == 0
    ctx.check_still_works()


# Valid calls, as a program would make them; from another OS thread each must be refused.
FOREIGN_CALLS: dict[str, Callable[[Ctx, Any], Any]] = {
    "hbDNNInitializeFromFiles": lambda c, t: dnn.hbDNNInitializeFromFiles([str(c.path)]),
    "hbDNNInitializeFromDDR": lambda c, t: dnn.hbDNNInitializeFromDDR([c.data], [len(c.data)]),
    "hbDNNRelease": lambda c, t: dnn.hbDNNRelease(c.packed),
    "hbDNNGetModelNameList": lambda c, t: dnn.hbDNNGetModelNameList(c.packed),
    "hbDNNGetModelHandle": lambda c, t: dnn.hbDNNGetModelHandle(c.packed, "tiny"),
    "hbDNNGetInputCount": lambda c, t: dnn.hbDNNGetInputCount(c.dnn),
    "hbDNNGetOutputCount": lambda c, t: dnn.hbDNNGetOutputCount(c.dnn),
    "hbDNNGetInputName": lambda c, t: dnn.hbDNNGetInputName(c.dnn, 0),
    "hbDNNGetOutputName": lambda c, t: dnn.hbDNNGetOutputName(c.dnn, 0),
    "hbDNNGetInputTensorProperties": lambda c, t: dnn.hbDNNGetInputTensorProperties(c.dnn, 0),
    "hbDNNGetOutputTensorProperties":
        lambda c, t: dnn.hbDNNGetOutputTensorProperties(c.dnn, 0),
    "hbDNNInfer": lambda c, t: dnn.hbDNNInfer(c.outs, c.ins, c.dnn, c.ctrl()),
    "hbDNNWaitTaskDone": lambda c, t: dnn.hbDNNWaitTaskDone(t, 0),
    "hbDNNReleaseTask": lambda c, t: dnn.hbDNNReleaseTask(t),
    "hbDNNSetTaskDoneCb": lambda c, t: dnn.hbDNNSetTaskDoneCb(t, c.callback),
}


@pytest.mark.parametrize("name", sorted(FOREIGN_CALLS))
def test_calls_from_another_os_thread_are_refused(ctx: Ctx, name: str) -> None:
    call = FOREIGN_CALLS[name]
    task = ctx.finished_task()  # made here; the call itself runs in a plain OS thread
    results: list[Any] = []
    errors: list[BaseException] = []

    def foreign() -> None:
        try:
            results.append(call(ctx, task))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=foreign)
    worker.start()
    worker.join()
    try:
        assert not errors, errors
        (result,) = results
        outs = OUTS[name]
        if outs is None:
            assert result == dnn.HB_DNN_WRONG_THREAD
        else:
            assert result == (dnn.HB_DNN_WRONG_THREAD, *[None] * outs)
        assert not task.released  # the refused release did nothing
    finally:
        ctx.cleanup()
    ctx.check_still_works()


def test_no_task_slot_leaked_and_the_model_releases(ctx: Ctx) -> None:
    """After every row: exactly 32 tasks fit again, and the model can be released."""
    ctx.fill_task_slots()
    assert ctx.infer() == (dnn.HB_DNN_TASK_NUM_EXCEED_LIMIT, None)
    ctx.cleanup()
    assert len(ctx.called_back) == ctx.registered_callbacks
    assert all(code == OK for _, code, _ in ctx.called_back)
    packed = ctx.packed
    for tensor in (*ctx.ins, *ctx.outs):
        assert hbSysFreeMem(tensor.sysMem[0]) == 0
    assert dnn.hbDNNRelease(packed) == 0


def test_every_c_named_function_has_rows() -> None:
    covered = {row.fn for row in ROWS}
    for name in covered:
        assert OUTS.get(name, "missing") != "missing" or name in PENDING, name
    public = {name for name in dir(dnn) if name.startswith("hbDNN")
              and inspect.isfunction(getattr(dnn, name))}  # not the typedefs' aliases
    public.add("HB_DNN_INITIALIZE_INFER_CTRL_PARAM")
    missing = set()
    for name in public - covered:
        if name in PENDING and not hasattr(dnn, name):
            continue
        missing.add(name)
    assert not missing, f"C-named functions without contract rows: {sorted(missing)}"
    # each covered function has a valid row and, with parameters, a misuse row
    for name in covered:
        codes = {row.code for row in ROWS if row.fn == name}
        # hbDNNRoiInfer's valid calls need a resizer model: tests/runtime/test_hbdnn_resizer.py
        assert OK in codes or name in ("hbDNNRoiInfer", "hbDNNResize"), name
        if name not in STRING_RESULT and name != "hbDNNGetVersion":
            assert codes - {OK}, name

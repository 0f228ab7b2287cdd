"""The segments of an hbDNN task that do not run on the BPU, each on one of the runtime's
worker threads (`emu/runtime/dnn_engine.py` runs the task and hands them over), and the
plan of a model's run that they need (its CPU items, its scratch buffer's layout):

- a CPU segment (input quantize, layout conversion, output dequantize, an op the BPU does not
  run) is CPU work done by one of the runtime's worker threads (host threads of the session,
  one per A55 core, as the board's runtime keeps a thread pool): each item of
  `emu.nn.estimate.cpu_items` becomes an A55 work item with its instruction counts and the
  addresses of the tensors it reads and writes, run through the cache model. A hand-off
  pays the cache maintenance it needs, and only that (`estimate.handoffs` says which
  ranges, the estimate charges the same). The board's rule (hbSysMemFlushFlag, seeds 000
  and 004; shared/calibration/j5.md): only the CPU has caches, so the CPU invalidates a
  range before it reads what an accelerator wrote (the BPU's output codes) and cleans a
  range after it writes what an accelerator reads (the codes the quantize and the layout
  conversion hand to the BPU). What the CPU writes for the CPU is not cleaned: the float
  outputs of the dequantize are read by the user's code on the CPU, which sees its own
  caches (a user who hands them to an accelerator cleans them, as the seed's samples clean
  what they pass on), and neither are the float tensors between CPU ops. The model's float
  inputs were written by the user on the CPU: nothing to invalidate;
- a DSP segment (`--dsp-softmax`), and with `HB_DNN_ENABLE_DSP` the quantize and dequantize
  of int8 tensors and the CPU's Softmax nodes, are RPCs to the vDSP operators
  (`emu/vdsp/ops/nn.py`) made by the worker thread through hbDSP, so they queue on the DSP
  cores with everything else and compute what the DSP computes;
- a node whose op type has a plugin layer (`hbDNNRegisterLayerCreator`) runs the plugin's
  `forward` on the worker thread: it may call hbSys and hbDSP (the seed's sample sends
  Softmax to a DSP); unless the layer says `runs_on = "dsp"` it is also charged the CPU
  model's cost of the node.

Function follows time: each segment's values are computed when the segment ends
(`emu.nn.execute.Execution`), so a plugin sees real inputs. The tensors that cross between
segments, and the float weights of the ops the CPU runs, live in a scratch buffer of the
pool per model (allocated on first inference, freed with the model: a model whose CPU ops
carry large weights needs room for them, as on the board), which is where the CPU work's
addresses point.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from emu.cpu import ops as cpu_ops
from emu.cpu.cluster import CLEAN, INVALIDATE, CacheMaintenance, CpuWork
from emu.cpu.work import Stream, stream_work
from emu.errors import PoolError
from emu.mem.pool import PoolBuffer
from emu.nn import estimate as estimate_module
from emu.nn.estimate import CpuItem
from emu.nn.execute import Execution
from emu.nn.graph import Node
from emu.nn.preprocess import NV12_WIDTH_ALIGN, aligned_width
from emu.nn.reference import float_node
from emu.runtime import session
from emu.runtime.hbdnn_types import ENV_ENABLE_DSP
from emu.runtime.hbsys import mem_of
from emu.vdsp.ops import nn as dsp_nn
from emu.vdsp.ops.tensor_args import MODE_NONE, MODE_SCALE, TYPE_F32, TYPE_S8, pack

if TYPE_CHECKING:
    from emu.nn.compiler import CompiledModel
    from emu.runtime.dnn_engine import TaskState
    from emu.runtime.host import HostThread

_TRUE = ("1", "true", "on", "yes")


def dsp_enabled() -> bool:
    """Whether `HB_DNN_ENABLE_DSP` asks for quantize, dequantize and Softmax on a DSP."""
    return os.environ.get(ENV_ENABLE_DSP, "").strip().lower() in _TRUE


@dataclass
class ModelPlan:
    """What running a model needs, worked out once per model and session."""

    cpu_items: dict[int, list[CpuItem]]
    subgraphs: dict[int, list[Any]]
    resident: bool
    slots: dict[tuple[str, int], int]  # (tensor, bytes) -> offset in the scratch buffer
    scratch_bytes: int
    nodes: dict[str, Node]
    pads: dict[str, CpuItem]  # per NV12 input whose width is not aligned: the padding copy
    scratch: PoolBuffer | None = None
    layers: dict[str, Any] = field(default_factory=dict)  # plugin instances by node name


def plan(model: CompiledModel, sess: session.Session) -> ModelPlan:
    soc = sess.config
    dtypes = model.quant.tensor_dtypes()
    boundary = estimate_module.bpu_boundary(model.segments)
    items = {k: estimate_module.cpu_items(model.graph, seg, soc.cpu, dtypes, boundary)
             for k, seg in enumerate(model.segments)
             if seg.kind in ("quantize", "dequantize", "cpu")}
    slots: dict[tuple[str, int], int] = {}
    offset = 0
    line = soc.cpu.line_bytes
    pads = {}
    for name in model.graph.inputs:
        dims = nv12_dims(model, name)
        if dims is not None and dims[3] % NV12_WIDTH_ALIGN:
            n, _, h, w = dims
            compact, padded = n * h * w * 3 // 2, n * h * aligned_width(w) * 3 // 2
            pads[name] = CpuItem(f"pad {name}", "pad", estimate_module.COPY,
                                 -(-padded // soc.cpu.vector_bytes), ((name, compact),),
                                 ((name, padded),))
    for part in (*items.values(), list(pads.values())):
        for item in part:
            for tensor, nbytes in (*item.reads, *item.writes):
                if _user_tensor(model, tensor, nbytes) or (tensor, nbytes) in slots:
                    continue
                slots[tensor, nbytes] = offset
                offset += -(-nbytes // line) * line
    return ModelPlan(items, model.subgraphs(), model.weights_resident(soc), slots, offset,
                     {n.name: n for n in model.graph.nodes}, pads)


def nv12_dims(model: CompiledModel, name: str) -> tuple[int, int, int, int] | None:
    """(N, 3, H, W) of an NV12 model input, None for any other tensor."""
    if name not in model.graph.inputs or model.options.get("input_type") != "nv12":
        return None
    n, rows, width = model.graph.tensors[name].shape
    return n, 3, rows * 2 // 3, width


def _user_tensor(model: CompiledModel, tensor: str, nbytes: int) -> bool:
    """Whether (tensor, bytes) is a model input or output in float32: the user's buffer."""
    graph = model.graph
    if tensor not in graph.inputs and tensor not in graph.outputs:
        return False
    t = graph.tensors[tensor]
    return nbytes == math.prod(t.shape) * np.dtype(t.dtype).itemsize


def ensure_scratch(model_plan: ModelPlan, sess: session.Session, name: str) -> bool:
    """Allocate the model's scratch buffer if it has none; False when the pool is full."""
    if model_plan.scratch is None and model_plan.scratch_bytes:
        try:
            model_plan.scratch = sess.soc.pool.alloc(model_plan.scratch_bytes, cached=True,
                                                     label=f"hbDNN {name} scratch")
        except PoolError:
            return False
    return True


def free_scratch(model_plan: ModelPlan, sess: session.Session) -> None:
    if model_plan.scratch is not None:
        sess.soc.pool.free(model_plan.scratch)
        model_plan.scratch = None


# --- one segment on a worker thread ----------------------------------------------------------

class SegmentRun:
    """A CPU or DSP segment of one model of a task, run on a worker thread."""

    def __init__(self, sess: session.Session, task: TaskState, model: CompiledModel,
                 model_plan: ModelPlan, number: int, index: int, ex: Execution | None,
                 buffers: dict[str, PoolBuffer], plugins: dict[str, Callable[[], Any]],
                 done: simpy.Event) -> None:
        self.sess, self.task, self.model, self.plan = sess, task, model, model_plan
        self.number, self.index, self.ex = number, index, ex
        self.buffers, self.plugins, self.done = buffers, plugins, done
        self.thread: HostThread = sess.main  # the worker thread that runs it, once it runs

    def __call__(self) -> None:
        self.thread = self.sess.thread()
        try:
            if self.index < 0:  # before the model: pad the unaligned NV12 inputs
                for item in self.plan.pads.values():
                    self._cpu(item)
                return
            self._run()
        except Exception as exc:  # a plugin's bug fails the task, not the worker
            self.task.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done.succeed()

    def _record(self, what: str, kind: str, start: int) -> None:
        self.task.segments.append({"model": self.number, "segment": self.index, "kind": kind,
                                   "name": what, "start_ps": start, "end_ps": self.thread.now_ps,
                                   "busy_ps": self.thread.now_ps - start, "pending_ps": 0})

    def _address(self, tensor: str, nbytes: int) -> int:
        if _user_tensor(self.model, tensor, nbytes):
            return self.buffers[tensor].phys_addr
        assert self.plan.scratch is not None
        return self.plan.scratch.phys_addr + self.plan.slots[tensor, nbytes]

    def _cpu(self, item: CpuItem) -> None:
        line = self.sess.config.cpu.line_bytes
        spans = [(t, b, False) for t, b in item.reads] + [(t, b, True) for t, b in item.writes]
        # Each slot owns its padding to whole lines, so every line a store touches is
        # written whole (a view touches no memory: no spans).
        work = stream_work(item.name, item.op_counts(), [
            Stream(self._address(t, b), -(-b // line) * line, store=w, stream_id=k % 256)
            for k, (t, b, w) in enumerate(spans)], line)
        start = self.thread.now_ps
        self.thread.cpu(work, item.name)
        self._record(item.name, item.op if item.op in ("quantize", "dequantize", "layout", "pad")
                     else "cpu", start)

    def _maintain(self, op: str, ranges: list[tuple[int, int]]) -> None:
        start = self.thread.now_ps
        for base, nbytes in ranges:
            self.thread.cpu(CpuWork(f"cache {op}", cpu_ops.counts(),
                                    maintenance=CacheMaintenance(op, base, nbytes)),
                            f"cache {op}")
        if ranges:
            self._record(f"cache {op}", "cache", start)

    def _run(self) -> None:
        segment = self.model.segments[self.index]
        items = self.plan.cpu_items.get(self.index, [])
        to_dsp = dsp_enabled() and segment.kind in ("quantize", "dequantize") and all(
            t in self.model.quant.tensors and self.model.quant.tensors[t].dtype == "int8"
            and t not in self.model.quant.wide_outputs() for t in segment.inputs)
        if segment.kind == "dsp" or to_dsp:
            self._dsp_segment()
            return
        invalidate, clean = estimate_module.handoffs(items)
        self._maintain(INVALIDATE, [(self._address(t, b), b) for t, b in invalidate])
        if segment.kind == "cpu":
            nodes = set(segment.nodes)
            first = next(k for k, item in enumerate(items) if item.name in nodes)
            last = max(k for k, item in enumerate(items) if item.name in nodes)
            for item in items[:first]:  # the BPU's codes to floats in NCHW
                self._cpu(item)
            self._cpu_nodes(segment.nodes, {item.name: item for item in items[first:last + 1]})
            for item in items[last + 1:]:  # and back
                self._cpu(item)
        else:
            for item in items:
                self._cpu(item)
            if self.ex is not None:
                self.ex.run_segment(self.index)
        self._maintain(CLEAN, [(self._address(t, b), b) for t, b in clean])

    def _cpu_nodes(self, names: tuple[str, ...], by_node: dict[str, CpuItem]) -> None:
        ex = self.ex
        for name in names:
            node = self.plan.nodes[name]
            creator = self.plugins.get(node.op)
            layer = None
            if creator is not None:
                layer = self.plan.layers.get(name)
                if layer is None:
                    layer = self.plan.layers[name] = creator()
            if layer is None and node.op == "Softmax" and dsp_enabled():
                self._dsp_node(node)
                continue
            if layer is None or getattr(layer, "runs_on", "cpu") != "dsp":
                self._cpu(by_node[name])
            if ex is None:  # timed only: a plugin still runs (on zeros) for its time
                if layer is not None:
                    self._forward(layer, node, [
                        np.zeros(self.model.graph.tensors[n].shape, np.float32)
                        for n in node.inputs if n])
                continue
            ins = ex.node_inputs(node)
            if layer is None:
                outs = float_node(ex.graph, node, ins)
            else:
                outs = self._forward(layer, node, ins)
            for out_name, value in zip(node.outputs, outs, strict=True):
                ex.set_float(out_name, value)

    def _forward(self, layer: Any, node: Node, ins: list[Any]) -> list[np.ndarray]:
        graph = self.model.graph
        start = self.thread.now_ps
        tops = [np.zeros(graph.tensors[o].shape, np.float32) for o in node.outputs]
        rc = layer.forward([np.asarray(x) for x in ins], tops)
        self._record(f"plugin {node.name}", "plugin", start)
        if rc != 0:
            raise RuntimeError(f"plugin layer {node.op!r} ({node.name}) returned {rc}")
        return tops

    # --- the DSP -------------------------------------------------------------------------

    def _dsp_segment(self) -> None:
        segment = self.model.segments[self.index]
        if segment.kind == "dsp":
            for name in segment.nodes:
                self._dsp_node(self.plan.nodes[name])
            return
        quant = self.model.quant
        for tensor in segment.inputs:
            scale = quant.tensors[tensor].scale
            shape = self.model.graph.tensors[tensor].shape
            dims, _ = _dsp_dims(shape)
            ex = self.ex
            if segment.kind == "quantize":
                x = ex.as_float(tensor) if ex is not None else np.zeros(shape, np.float32)
                blob = pack(np.ascontiguousarray(x, np.float32).reshape(dims), TYPE_S8,
                            mode=MODE_SCALE, scales=[scale], zero_points=[0])
                out = self._rpc(dsp_nn.CMD_QUANTIZE, blob, math.prod(shape), tensor, "quantize")
                if ex is not None:
                    ex.codes[tensor] = out.view(np.int8).reshape(shape).copy()
            else:
                q = ex.as_codes(tensor) if ex is not None else np.zeros(shape, np.int8)
                blob = pack(np.ascontiguousarray(q, np.int8).reshape(dims), TYPE_F32,
                            mode=MODE_SCALE, scales=[scale], zero_points=[0])
                out = self._rpc(dsp_nn.CMD_DEQUANTIZE, blob, 4 * math.prod(shape), tensor,
                                "dequantize")
                if ex is not None:
                    ex.set_float(tensor, out.view(np.float32).reshape(shape).copy())

    def _dsp_node(self, node: Node) -> None:
        ex = self.ex
        shape = self.model.graph.tensors[node.inputs[0]].shape
        x = ex.node_inputs(node)[0] if ex is not None else np.zeros(shape, np.float32)
        dims, axis = _dsp_dims(shape, node.attrs.get("axis", -1))
        blob = pack(np.ascontiguousarray(x, np.float32).reshape(dims), TYPE_F32,
                    mode=MODE_NONE, axis=axis)
        out = self._rpc(dsp_nn.CMD_SOFTMAX, blob, 4 * math.prod(shape), node.name, "dsp")
        if ex is not None:
            ex.set_float(node.outputs[0], out.view(np.float32).reshape(shape).copy())

    def _rpc(self, cmd: int, blob: bytes, out_bytes: int, what: str, kind: str) -> np.ndarray:
        """One operator on a DSP through hbDSP, as the board's runtime calls it; its output.
        The runtime's own buffers: the tensor is where the previous segment left it, so
        only the header written by the CPU costs a clean."""
        from emu.runtime import hbdsp

        pool = self.sess.soc.pool
        inp = pool.alloc(len(blob), cached=True, label=f"hbDNN {what} DSP input")
        out = pool.alloc(out_bytes, cached=True, label=f"hbDNN {what} DSP output")
        try:
            start = self.thread.now_ps
            inp.data[:len(blob)] = np.frombuffer(blob, np.uint8)
            self._maintain(CLEAN, [(inp.phys_addr, min(len(blob), 256))])
            ctrl = hbdsp.hbDSPRpcCtrlParam()
            hbdsp.HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
            ctrl.rpcCmd = cmd
            ctrl.priority = self.task.priority
            rc, task = hbdsp.hbDSPRpc(mem_of(inp), mem_of(out), ctrl)
            if rc != 0 or task is None:
                raise RuntimeError(f"hbDSPRpc for {what}: {hbdsp.hbDSPGetErrorDesc(rc)}")
            rc = hbdsp.hbDSPWaitTaskDone(task, 0)
            hbdsp.hbDSPReleaseTask(task)
            if rc != 0:
                raise RuntimeError(f"DSP {kind} of {what}: {hbdsp.hbDSPGetErrorDesc(rc)}")
            self._record(f"dsp {kind} {what}", kind if kind != "dsp" else "dsp", start)
            return out.data[:out_bytes].copy()
        finally:
            pool.free(inp)
            pool.free(out)


def _dsp_dims(shape: tuple[int, ...], axis: int = 0) -> tuple[tuple[int, ...], int]:
    """`shape` and an `axis` of it as the DSP operators take them (1 to 4 dimensions): a
    scalar as one element; above 4 dimensions, those before the axis folded into one and
    those after it into another, so that an operator along the axis (Softmax) still runs
    along it."""
    if not shape:
        return (1,), 0
    axis %= len(shape)
    if len(shape) <= 4:
        return shape, axis
    return (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])), 1

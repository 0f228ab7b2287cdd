"""The hbDNN task engine: what a session's hbDNN tasks are and how they run (`hbdnn.py` is
the C-named API in front of it, which validates the arguments and hands over plain values).

A session's hbDNN state is one `DnnEngine` in the session's `dnn` slot (made on first use,
dropped when the session closes): the tasks alive, the plugin layers registered, and the
runtime's worker threads (host threads of the session, one per A55 core, as the board's
runtime keeps a thread pool) with the queue of jobs they take.

A task (`TaskState`) runs its models one after another; each model's segments
(`emu/nn/placement.py`) in order, each where the compiler put it: a BPU subgraph as a task
on the BPU cores' queue (`emu/bpu/cores.py`: the task's priority, customId and core, its
function calls as the compiler cut them; models chained with `more` whose BPU work is one
subgraph each as one BPU task), every other segment on a worker thread
(`emu/runtime/dnn_segments.py`: CPU items through the A55 cache model with the cache
maintenance of every hand-off, DSP nodes as hbDSP RPCs, plugin layers' `forward`). Each
segment's values are computed when it ends (`emu.nn.execute.Execution`); when the last one
ends the outputs are in the output buffers and the task completes. Its buffers are pinned
in the pool until then. Anything that raises inside a running task (an emulator bug) fails
the task (`TaskState.error`) rather than the call that happens to drive the simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import simpy

from emu.bpu import timing
from emu.bpu.timing import LayerGroup
from emu.errors import InputError
from emu.mem.pool import PoolBuffer
from emu.nn import layers, preprocess, resizer
from emu.nn.compiler import CompiledModel
from emu.nn.execute import Execution
from emu.runtime import dnn_segments, session
from emu.runtime.dnn_segments import ModelPlan
from emu.runtime.hbdnn_types import MAX_TASKS
from emu.soc.sched import ANY_CORE, PRIORITY_LOWEST, CoreSlot, Stage, StageBody, Task

PluginCreator = Callable[[], Any]  # a plugin layer's factory: a layer with forward(ins, outs)


class LoadedModel:
    """A compiled model loaded into a session: how it runs there (its plan, worked out once)
    and how many unreleased tasks use it."""

    def __init__(self, sess: session.Session, model: CompiledModel) -> None:
        self.session = sess
        self.model = model
        self.tasks_alive = 0
        self.compute_outputs = True  # False: timed only (`hbdnn.set_timing_only`)
        self._plan: ModelPlan | None = None

    def plan(self) -> ModelPlan:
        """How the model runs on the session's hardware: worked out once per model."""
        if self._plan is None:
            self._plan = dnn_segments.plan(self.model, self.session)
        return self._plan

    def unload(self) -> None:
        """Free what running the model holds in the pool (its scratch buffer)."""
        if self._plan is not None:
            dnn_segments.free_scratch(self._plan, self.session)


class Input(NamedTuple):
    """Where an input's data is: its buffer (for NV12_SEPARATE, the Y and the UV plane's),
    and for NV12 the bytes per row (the aligned width, or the valid one when the tensor's
    `alignedShape` was set to its `validShape`: the runtime then pads a copy first)."""

    planes: tuple[PoolBuffer, ...]
    pitch: int = 0

    @property
    def buffer(self) -> PoolBuffer:
        return self.planes[0]


class Image(NamedTuple):
    """An image in a pool buffer as the resizer reads or writes it."""

    fmt: str
    w: int
    h: int
    stride: int  # bytes per row of a plane
    buffer: PoolBuffer

    def rows(self) -> int:
        return self.h * 3 // 2 if self.fmt == "nv12" else self.h


class Entry(NamedTuple):
    """One model of a task: the model, where its inputs are, its outputs' buffers."""

    dnn: LoadedModel
    sources: list[Input]
    outputs: list[PoolBuffer]
    rois: tuple[tuple[Image, resizer.Roi] | None, ...] = ()  # hbDNNRoiInfer: per batch slot
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


class TaskState:
    """One hbDNN task (the API's task handle is one): its models, where it stands, its
    figures once it is done."""

    def __init__(self, sess: session.Session, name: str, core: int, priority: int,
                 custom_id: int) -> None:
        self.session = sess
        self.name = name
        self.core, self.priority, self.custom_id = core, priority, custom_id
        self.entries: list[Entry] = []
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


class DnnEngine:
    """hbDNN's state in one session: the tasks alive, the plugin layers, the worker threads."""

    def __init__(self, sess: session.Session) -> None:
        self.session = sess
        self.tasks_alive = 0
        self.plugins: dict[str, PluginCreator] = {}
        self._jobs: simpy.Store | None = None  # the workers' queue, once they are started

    def admit(self) -> bool:
        """Count one more task alive; False (nothing counted) when `MAX_TASKS` are."""
        if self.tasks_alive >= MAX_TASKS:
            return False
        self.tasks_alive += 1
        return True

    def add(self, task: TaskState, entries: Sequence[Entry]) -> None:
        """Models for `task` to run, their buffers pinned until it ends."""
        pool = self.session.soc.pool
        for entry in entries:
            task.entries.append(entry)
            entry.dnn.tasks_alive += 1
            for buf in entry.buffers:
                pool.pin(buf)
                task.pinned.append(buf)

    def start(self, task: TaskState, call: Any) -> None:
        """Close the task to more models and start running it (`call`: the API call that
        submitted it, linked to its BPU task in traces)."""
        task.open = False
        self._process(task, _run(self.session, task, call))

    def start_resize(self, task: TaskState, call: Any, src: Image, box: resizer.Roi,
                     dst: Image) -> None:
        """Run a task that is one resize of `box` of `src` into `dst` on the BPU's resizer."""
        task.open = False
        pool = self.session.soc.pool
        for buf in {src.buffer.phys_addr: src.buffer, dst.buffer.phys_addr: dst.buffer}.values():
            pool.pin(buf)
            task.pinned.append(buf)
        self._process(task, _run_resize(self.session, task, call, src, box, dst))

    def release(self, task: TaskState) -> None:
        """Release a task: a finished one at once; an unfinished one is cancelled at its
        next segment boundary (the BPU stops it at its next function-call boundary, the CPU
        after its node) and its slot freed when it stops."""
        task.released = True

        def free(_event: simpy.Event | None = None) -> None:
            self.tasks_alive -= 1
            for entry in task.entries:
                entry.dnn.tasks_alive -= 1

        if task.open:  # chained with `more` and never started: nothing runs
            task.open = False
            for buf in task.pinned:
                self.session.soc.pool.unpin(buf)
            free()
        elif task.completed.triggered:
            free()
        else:
            task.cancelled = True
            if task.bpu_task is not None:
                self.session.soc.bpu.cancel(task.bpu_task)
            task.completed.callbacks.append(free)

    def submit_host_job(self, job: Callable[[], None]) -> None:
        """Run `job` on one of the runtime's worker threads (started on first use, one per
        A55 core); jobs wait in arrival order for a free worker."""
        if self._jobs is None:
            self._jobs = simpy.Store(self.session.soc.env)
            for k in range(self.session.config.cpu.cores):
                self.session.start_daemon(_serve, (self.session, self._jobs),
                                          f"hbDNN.worker{k}", ANY_CORE, PRIORITY_LOWEST)
        self._jobs.put(job)

    def _process(self, task: TaskState, steps: Generator[simpy.Event, Any, None]) -> None:
        self.session.soc.env.process(_task_process(self.session, task, steps))


def engine(sess: session.Session) -> DnnEngine:
    """The session's hbDNN engine (made on first use)."""
    if sess.dnn is None:
        sess.dnn = DnnEngine(sess)
    return sess.dnn


def _serve(sess: session.Session, jobs: simpy.Store) -> None:
    """A worker thread: the jobs of the queue, one after another."""
    thread = sess.thread()
    while True:
        job = thread.idle_until(jobs.get())
        job()


def input_size(model: CompiledModel) -> tuple[int, int]:
    """(W, H) of an image model's input."""
    shape = model.graph.tensors[model.graph.inputs[0]].shape
    if model.options.get("input_type") == "nv12":
        return shape[2], shape[1] * 2 // 3
    return shape[2], shape[1]


def _run_resize(sess: session.Session, handle: TaskState, call: Any, src: Image,
                box: resizer.Roi, dst: Image) -> Generator[simpy.Event, Any, None]:
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


def _resized(src: Image, box: resizer.Roi, w: int, h: int) -> np.ndarray:
    return resizer.resize(src.buffer.data[:src.rows() * src.stride], src.fmt, src.w, src.h,
                          src.stride, box, w, h)


def _write_image(dst: Image, pixels: np.ndarray) -> None:
    """The resizer's output (compact rows) into `dst`'s rows of `stride` bytes."""
    rows = pixels.reshape(dst.rows(), -1)
    view = dst.buffer.data[:dst.rows() * dst.stride].reshape(dst.rows(), dst.stride)
    view[:, :rows.shape[1]] = rows


def _task_process(sess: session.Session, handle: TaskState,
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


def _run(sess: session.Session, handle: TaskState, call: Any
         ) -> Generator[simpy.Event, Any, None]:
    """The task's models one after another, each segment by segment, then each model's
    outputs into its output buffers. Consecutive models of one BPU subgraph each (input
    quantize and output dequantize aside) run as one BPU task, as the board's runtime
    submits models chained with `more` (`run_bpu`): their input segments first, then the
    BPU task, then their output segments."""
    linked = False

    def link(task: Task) -> None:
        nonlocal linked
        if not linked:
            call.link(task)
            linked = True

    plugins = dict(engine(sess).plugins)
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
        yield from run_bpu(sess, handle, [run.bpu_part() for run in runs], link)
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

    def __init__(self, sess: session.Session, handle: TaskState, number: int,
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
                yield from run_bpu(self.sess, self.handle, [self._part(index)],
                                             link)
                if self.ex is not None:
                    self.ex.run_segment(index)
                continue
            yield from self._host(index)

    def _host(self, index: int) -> Generator[simpy.Event, Any, None]:
        done = self.sess.soc.env.event()
        engine(self.sess).submit_host_job(dnn_segments.SegmentRun(
            self.sess, self.handle, self.model, self.plan, self.number, index, self.ex,
            self.buffers, self.plugins, done))
        yield done

    def _part(self, index: int) -> BpuPart:
        prefix = _resize_jobs(self.model, self.entry) if index == self.bpu_index else []
        return (self.model, self.plan, self.number, index, prefix)

    def bpu_part(self) -> BpuPart:
        return self._part(self.bpu_index)

    def finish(self) -> None:
        if self.ex is not None and not self.handle.cancelled and not self.handle.error:
            _write_outputs(self.entry, self.ex)


def _execution(handle: TaskState, entry: Entry) -> Execution | None:
    """The model's inference from its input buffers as they are now, or None when the
    model is timed only."""
    if not entry.dnn.compute_outputs:
        return None
    model = entry.dnn.model
    feeds = {}
    if entry.rois:  # hbDNNRoiInfer: the resizer's outputs, zeros in the empty slots
        name = model.graph.inputs[0]
        t = model.graph.tensors[name]
        width, height = input_size(model)
        feeds[name] = np.stack([np.zeros(t.shape[1:], np.uint8) if slot is None else
                                _resized(slot[0], slot[1], width, height).reshape(t.shape[1:])
                                for slot in entry.rois])
    for name, source in zip(model.graph.inputs, entry.sources, strict=False):
        t = model.graph.tensors[name]
        nv12 = dnn_segments.nv12_dims(model, name)
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


def _nv12_rows(source: Input, n: int, _c: int, h: int, w: int) -> np.ndarray:
    """An NV12 input as the model reads it, (N, H * 3 / 2, W): from one buffer holding each
    image's Y then UV rows, or (NV12_SEPARATE) from a Y and a UV buffer, rows `pitch` apart."""
    pitch = source.pitch
    if len(source.planes) == 1:
        frames = source.buffer.data[:n * h * pitch * 3 // 2].reshape(n, h * 3 // 2, pitch)
        return frames[:, :, :w].copy()
    y = source.planes[0].data[:n * h * pitch].reshape(n, h, pitch)
    uv = source.planes[1].data[:n * h * pitch // 2].reshape(n, h // 2, pitch)
    return np.concatenate([y[:, :, :w], uv[:, :, :w]], axis=1)


def _write_outputs(entry: Entry, ex: Execution) -> None:
    model = entry.dnn.model
    codes = model.code_outputs()
    results = ex.outputs()
    for name, buf in zip(model.graph.outputs, entry.outputs, strict=True):
        value = ex.output_codes(name) if name in codes else \
            np.asarray(results[name], np.float32)
        raw = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
        at = entry.out_offset * raw.size  # the batch group's rows (hbDNNRoiInfer)
        buf.data[at:at + raw.size] = raw


def _resize_jobs(model: CompiledModel, entry: Entry) -> list[Any]:
    """The resizer's layer group for an hbDNNRoiInfer batch group: it reads the group's
    ROIs and fills the model's image input on the way in (`resizer.layer_group`); none
    for hbDNNInfer, whose model need not have an image input."""
    if not entry.rois:
        return []
    width, height = input_size(model)
    name = model.graph.inputs[0]
    fmt = str(model.options["input_type"])
    image = layers.image_ref(name, fmt, model.graph.tensors[name].shape)
    rois = [slot[1] for slot in entry.rois if slot is not None]
    return [resizer.layer_group("resizer", fmt, width, height, rois, into=image)]


def _bpu_task(sess: session.Session, task: TaskState, model: CompiledModel,
              model_plan: ModelPlan, number: int, index: int,
              prefix: Sequence[LayerGroup] = ()) -> Task:
    """BPU subgraph `index` of a task's model as a task for the BPU queue: its function
    calls as the compiler cut them, `prefix` (the resizer's layer groups) in the first."""
    layers = [*prefix, *model_plan.subgraphs[index]]
    spans = model.function_calls.get(index)
    if prefix and spans is not None:
        spans = timing.with_prefix(spans, len(prefix))
    return sess.soc.bpu.model_task(
        f"{task.name} m{number} bpu{index}", layers, spans=spans,
        resident_weights=model_plan.resident, core=task.core, priority=task.priority,
        custom_id=task.custom_id)


BpuPart = tuple["CompiledModel", ModelPlan, int, int, Sequence[LayerGroup]]


def run_bpu(sess: session.Session, task: TaskState, parts: Sequence[BpuPart],
            link: Callable[[Any], None]) -> Generator[simpy.Event, Any, None]:
    """BPU subgraphs of a task's models as one task on the BPU queue, each part (model,
    plan, model number, segment index, prefix: the resizer's layer groups, run in the
    first function call) its function calls as the compiler cut them. Several parts run
    back to back, as the board's runtime submits models chained with `more`: the core
    starts the task once (`bpu.task_overhead_ps`) and the CPU hears of it once, at the
    end. Each part's figures go into the task's report."""
    soc = sess.soc
    start = soc.env.now
    spans: list[list[int]] = []
    stages: list[Stage] = []
    for model, model_plan, number, index, prefix in parts:
        mark = [-1, -1]
        spans.append(mark)
        part = _bpu_task(sess, task, model, model_plan, number, index, prefix).stages
        part[0] = replace(part[0], body=_marked(part[0].body, mark, 0))
        part[-1] = replace(part[-1], body=_marked(part[-1].body, mark, 1))
        stages += part
    name = f"{task.name} bpu" if len(parts) > 1 else \
        f"{task.name} m{parts[0][2]} bpu{parts[0][3]}"
    bpu_task = Task(name, stages, priority=task.priority, custom_id=task.custom_id,
                    core=task.core)
    link(bpu_task)
    task.bpu_task = bpu_task
    yield soc.bpu.submit(bpu_task)
    task.bpu_task = None
    if bpu_task.started_ps < 0:  # released while it waited: it never ran
        return
    for k, ((_, _, number, index, _), (first, last)) in enumerate(
            zip(parts, spans, strict=True)):
        if first < 0:  # the task stopped (released or failed) before this model
            break
        # the first part holds the wait in the queue and the task's start on the core
        began = start if k == 0 else first
        ended = soc.env.now if last < 0 or k == len(parts) - 1 else last
        pending = bpu_task.pending_ps if k == 0 else 0
        task.segments.append({
            "model": number, "segment": index, "kind": "bpu", "name": f"bpu subgraph {index}",
            "start_ps": began, "end_ps": ended,
            "busy_ps": bpu_task.busy_ps if len(parts) == 1 else ended - began - pending,
            "pending_ps": pending})


def _marked(body: int | StageBody, mark: list[int], which: int) -> StageBody:
    """A stage body that notes when it starts (`which` 0) or ends (1) in `mark`."""
    def run(slot: CoreSlot) -> Generator[simpy.Event, Any, Any]:
        if which == 0 and mark[0] < 0:
            mark[0] = slot.env.now
        if isinstance(body, int):
            rest = None
            yield slot.env.timeout(body)
        else:
            rest = yield from body(slot)
        if which == 1 and rest is None:
            mark[1] = slot.env.now
        return rest
    return run

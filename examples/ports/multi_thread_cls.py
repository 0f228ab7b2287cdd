"""A multi-threaded board program in the style of the OE samples (written for emu, not a
port of a public file): worker threads classify their own streams of frames at the same
time, each with one of the packed models, at its own task priority and BPU core, and the
main thread joins them and prints what each frame gave and how long its inference took.

The program as a board engineer writes it in C: `main` loads the comma-separated model
files with `hbDNNInitializeFromFiles`, takes a model handle per worker by name, fills a
`WorkerArg` per worker and starts each with `pthread_create(&tid, NULL, infer_worker,
&arg)`, then `pthread_join`s them in order. `infer_worker` prepares its input tensor (input
0's properties, `alignedShape = validShape` so the runtime pads the NV12 rows, cached
memory for the frame) and its output tensors (`prepare_tensor`), and per frame converts the
picture to NV12 into the input, cleans it, submits it with `hbDNNInfer` (its priority and
core in the `hbDNNInferCtrlParam`), waits, releases the task, takes the top k and the
frame's latency from a monotonic clock; it frees its memory and returns its status in the
`WorkerArg`. The sample helpers (`check`, `bgr_to_nv12`, `prepare_tensor`,
`get_topk_result`) are those of the multi-model batch sample (multi_model_batch.py).

Under docs/porting.md's rules `pthread_create` is the session's `spawn`, `pthread_join`
its `join`, and the monotonic clock `emu.now_ms()`: the threads run in simulated time.

    python examples/ports/multi_thread_cls.py --model_file=A.hbm,B.hbm
           --worker MODEL_NAME:PRIORITY:PICTURE[,PICTURE...] [--worker ...] [--top_k 1]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import cv2
import numpy as np
from multi_model_batch import (
    Classification,
    Failed,
    bgr_to_nv12,
    check,
    get_topk_result,
    prepare_tensor,
    vlog,
)

import emu
from emu.runtime import session
from emu.runtime.hbdnn import (
    HB_BPU_CORE_ANY,
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM,
    hbDNNGetInputTensorProperties,
    hbDNNGetModelHandle,
    hbDNNGetModelNameList,
    hbDNNGetOutputCount,
    hbDNNInfer,
    hbDNNInferCtrlParam,
    hbDNNInitializeFromFiles,
    hbDNNRelease,
    hbDNNReleaseTask,
    hbDNNTensor,
    hbDNNWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_MEM_CACHE_CLEAN,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
)


@dataclass
class WorkerArg:
    """What `pthread_create` hands a worker (its `void *arg`) and what it fills in."""

    name: str
    dnn_handle: object
    frames: list[np.ndarray]  # BGR pictures
    priority: int
    bpu_core_id: int = HB_BPU_CORE_ANY
    top_k: int = 1
    results: list[list[Classification]] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    ret: int = 0


def infer_worker(arg: WorkerArg) -> None:
    try:
        classify_frames(arg)
    except Failed as exc:  # the C worker returns the failed call's code through `arg`
        arg.ret = int(exc.args[0])


def classify_frames(arg: WorkerArg) -> None:
    input_tensor = hbDNNTensor()
    ret, input_tensor.properties = hbDNNGetInputTensorProperties(arg.dnn_handle, 0)
    check(ret, "hbDNNGetInputTensorProperties failed")
    input_tensor.properties.alignedShape = input_tensor.properties.validShape
    model_h = input_tensor.properties.validShape.dimensionSize[2]
    model_w = input_tensor.properties.validShape.dimensionSize[3]
    yuv_length = model_h * model_w * 3 // 2
    check(hbSysAllocCachedMem(input_tensor.sysMem[0], yuv_length), "hbSysAllocCachedMem failed")
    ret, output_count = hbDNNGetOutputCount(arg.dnn_handle)
    check(ret, "hbDNNGetOutputCount failed")
    output_tensors = [hbDNNTensor() for _ in range(output_count)]
    prepare_tensor(output_tensors, arg.dnn_handle, output_count)

    for frame in arg.frames:
        ret, nv12 = bgr_to_nv12(cv2.resize(frame, (model_w, model_h)))
        check(ret, "bgr_to_nv12 failed")
        assert nv12 is not None
        input_tensor.sysMem[0].virAddr[:yuv_length] = nv12.reshape(-1)  # memcpy
        check(hbSysFlushMem(input_tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN),
              "hbSysFlushMem failed")
        infer_ctrl_param = hbDNNInferCtrlParam()
        HB_DNN_INITIALIZE_INFER_CTRL_PARAM(infer_ctrl_param)
        infer_ctrl_param.priority = arg.priority
        infer_ctrl_param.bpuCoreId = arg.bpu_core_id
        start_ms = emu.now_ms()
        ret, task_handle = hbDNNInfer(output_tensors, [input_tensor], arg.dnn_handle,
                                      infer_ctrl_param)
        check(ret, "hbDNNInfer failed")
        check(hbDNNWaitTaskDone(task_handle, 0), "hbDNNWaitTaskDone failed")
        arg.latency_ms.append(emu.now_ms() - start_ms)
        check(hbDNNReleaseTask(task_handle), "hbDNNReleaseTask failed")
        arg.results.append(get_topk_result(output_tensors[0], arg.top_k))

    check(hbSysFreeMem(input_tensor.sysMem[0]), "hbSysFreeMem failed")
    for tensor in output_tensors:
        check(hbSysFreeMem(tensor.sysMem[0]), "hbSysFreeMem failed")


def run_workers(model_file: str, workers: list[tuple[str, int, list[np.ndarray]]],
                top_k: int = 1) -> tuple[list[WorkerArg], float]:
    """The program's body: `workers` as (model name, priority, frames), each a thread; the
    workers' arguments as they filled them, and the ms from the first `pthread_create` to
    the last `pthread_join`."""
    model_file_names = model_file.split(",")
    ret, packed_dnn_handle = hbDNNInitializeFromFiles(model_file_names, len(model_file_names))
    check(ret, "hbDNNInitializeFromFiles failed")
    ret, model_name_list, _model_count = hbDNNGetModelNameList(packed_dnn_handle)
    check(ret, "hbDNNGetModelNameList failed")
    vlog(f"models: {', '.join(model_name_list or [])}")

    args = []
    for k, (model_name, priority, frames) in enumerate(workers):
        ret, dnn_handle = hbDNNGetModelHandle(packed_dnn_handle, model_name)
        check(ret, "hbDNNGetModelHandle failed")
        args.append(WorkerArg(f"worker{k}", dnn_handle, frames, priority, top_k=top_k))

    board = session.current()
    start_ms = emu.now_ms()
    threads = [board.spawn(infer_worker, arg, name=arg.name) for arg in args]  # pthread_create
    for thread in threads:
        board.join(thread)  # pthread_join
    elapsed_ms = emu.now_ms() - start_ms

    for arg in args:
        check(arg.ret, f"{arg.name} failed")
        for frame, (top, latency) in enumerate(zip(arg.results, arg.latency_ms, strict=True)):
            print(f"{arg.name} frame {frame}: class {top[0].id} score {top[0].score:.6f}, "
                  f"{latency:.3f} ms")
    print(f"all workers done in {elapsed_ms:.3f} ms")
    check(hbDNNRelease(packed_dnn_handle), "hbDNNRelease failed")
    return args, elapsed_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model_file", required=True)
    parser.add_argument("--worker", action="append", required=True,
                        help="MODEL_NAME:PRIORITY:PICTURE[,PICTURE...], one per thread")
    parser.add_argument("--top_k", type=int, default=1)
    args = parser.parse_args(argv)
    workers = []
    for spec in args.worker:
        model_name, priority, pictures = spec.split(":", 2)
        frames = [cv2.imread(p, cv2.IMREAD_COLOR) for p in pictures.split(",")]
        if any(frame is None for frame in frames):
            print(f"cannot read a picture of {pictures}", file=sys.stderr)
            return 2
        workers.append((model_name, int(priority), frames))
    try:
        with emu.Session():
            run_workers(args.model_file, workers, args.top_k)
    except Failed as exc:
        return int(exc.args[0]) or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A C-style hbDNN application: two models in one packed file, inferred from 8 threads.

As a board program written against hbDNN does it: load the packed file, list its models,
query every input and output tensor, and let 8 host threads (alternating the two models,
any BPU core) each allocate their tensors with hbSys, fill the input, clean the cache,
infer, wait, invalidate, read the outputs and check them, release the task; at the end
free the buffers and release the models. The model file is compiled first from the zoo
(MobileNetV2 and ResNet-18 at 64x64) unless `--model` names one.

    python examples/hbdnn_two_models.py [--model FILE.hbm] [--frames 4] [--report R.json]
                                        [--trace T.json]

Same arguments, same output, report and trace, byte for byte.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import emu
from emu.nn import compiler, zoo
from emu.report.document import dumps, session_report, write_atomic
from emu.report.trace import chrome_trace
from emu.runtime.hbdnn import (
    HB_BPU_CORE_ANY,
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM,
    hbDNNGetInputCount,
    hbDNNGetInputName,
    hbDNNGetInputTensorProperties,
    hbDNNGetModelHandle,
    hbDNNGetModelNameList,
    hbDNNGetOutputCount,
    hbDNNGetOutputName,
    hbDNNGetOutputTensorProperties,
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
    HB_SYS_MEM_CACHE_INVALIDATE,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
)
from emu.soc.clock import PS_PER_MS
from emu.soc.config import load_config

THREADS = 8


def compile_models(folder: Path) -> Path:
    """MobileNetV2 and ResNet-18 at 64x64 in one packed file."""
    soc = load_config().soc
    options = compiler.CompileOptions(calib_random=4)
    models = [compiler.compile_model(zoo.build(name, (64, 64)), name, options, soc)
              for name in ("mobilenetv2", "resnet18")]
    path = folder / "two_models.hbm"
    path.write_bytes(compiler.dumps(models))
    return path


def tensors(dnn: object, outputs: bool) -> list[hbDNNTensor]:
    """One hbDNNTensor per input (or output), its memory allocated with hbSys."""
    rc, count = (hbDNNGetOutputCount if outputs else hbDNNGetInputCount)(dnn)
    assert rc == 0
    made = []
    for k in range(count):
        rc, props = (hbDNNGetOutputTensorProperties if outputs
                     else hbDNNGetInputTensorProperties)(dnn, k)
        assert rc == 0
        tensor = hbDNNTensor()
        tensor.properties = props
        assert hbSysAllocCachedMem(tensor.sysMem[0], props.alignedByteSize) == 0
        made.append(tensor)
    return made


def worker(k: int, dnn: object, reference: compiler.CompiledModel, frames: int,
           done: list[dict]) -> None:
    """Thread k: `frames` inferences of its model on its own random inputs."""
    inputs, outputs = tensors(dnn, False), tensors(dnn, True)
    ctrl = hbDNNInferCtrlParam()
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
    ctrl.bpuCoreId = HB_BPU_CORE_ANY
    rng = np.random.default_rng(k)
    for frame in range(frames):
        x = rng.standard_normal(reference.inputs[0].shape).astype(np.float32)
        inputs[0].sysMem[0].virAddr[:x.nbytes] = x.view(np.uint8).reshape(-1)
        hbSysFlushMem(inputs[0].sysMem[0], HB_SYS_MEM_CACHE_CLEAN)
        ctrl.customId = frame
        start = emu.now_ms()
        rc, task = hbDNNInfer(outputs, inputs, dnn, ctrl)
        assert rc == 0, rc
        assert hbDNNWaitTaskDone(task, 0) == 0
        latency = emu.now_ms() - start
        want = reference.run({reference.inputs[0].name: x})
        for tensor, meta in zip(outputs, reference.outputs, strict=True):
            hbSysFlushMem(tensor.sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE)
            size = int(np.prod(meta.shape)) * 4
            got = tensor.sysMem[0].virAddr[:size].view(np.float32).reshape(meta.shape)
            assert np.array_equal(got, want[meta.name]), f"thread {k} frame {frame}"
        bpu = [s for s in task.segments if s["kind"] == "bpu"]
        done.append({"thread": k, "model": reference.name, "frame": frame,
                     "latency_ms": round(latency, 6),
                     "queued_ms": round(sum(s["pending_ps"] for s in bpu) / PS_PER_MS, 6),
                     "finished_ms": round(task.finished_ps / PS_PER_MS, 6)})
        assert hbDNNReleaseTask(task) == 0
    for tensor in inputs + outputs:
        assert hbSysFreeMem(tensor.sysMem[0]) == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", help="a packed file of two models (default: compile)")
    parser.add_argument("--frames", type=int, default=4, help="inferences per thread")
    parser.add_argument("--report", help="write the session's JSON report here")
    parser.add_argument("--trace", help="write a Perfetto trace of the run here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(args.model) if args.model else compile_models(Path(folder))
        references = {m.name: m for m in compiler.load_file(path)}
        done: list[dict] = []
        with emu.Session(trace=args.trace is not None) as s:
            rc, packed = hbDNNInitializeFromFiles([str(path)])
            assert rc == 0, rc
            rc, names, count = hbDNNGetModelNameList(packed)
            assert rc == 0 and count == len(names) == 2, names
            handles = []
            for name in names:
                rc, dnn = hbDNNGetModelHandle(packed, name)
                assert rc == 0
                _, inputs = hbDNNGetInputCount(dnn)
                _, outputs = hbDNNGetOutputCount(dnn)
                first_in, first_out = hbDNNGetInputName(dnn, 0)[1], hbDNNGetOutputName(dnn, 0)[1]
                print(f"model {name}: {inputs} input(s) ({first_in}), {outputs} output(s) "
                      f"({first_out})")
                handles.append(dnn)
            for k in range(THREADS):
                dnn, name = handles[k % 2], names[k % 2]
                s.spawn(worker, k, dnn, references[name], args.frames, done, name=f"infer{k}")
            s.run()
            assert hbDNNRelease(packed) == 0
            elapsed = emu.now_ms()
    cores = s.stats()["bpu"]
    print(f"{len(done)} inferences from {THREADS} threads in {elapsed:.3f} ms simulated; "
          f"BPU utilisation per core {cores['utilisation']}")
    for k in range(THREADS):
        mine = [d for d in done if d["thread"] == k]
        worst = max(d["latency_ms"] for d in mine)
        print(f"  infer{k} ({mine[0]['model']}): worst latency {worst:.3f} ms, last done at "
              f"{mine[-1]['finished_ms']:.3f} ms")
    if args.report:
        write_atomic(args.report, dumps(session_report(
            s, "examples/hbdnn_two_models.py", {"inferences": done})))
    if args.trace:
        write_atomic(args.trace, dumps(chrome_trace(s.soc.recorder.recording)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What chaining models with hbDNN's `more` saves: two NV12 classifiers (MobileNetV2 and
ResNet-18 at 128 x 128) from one host thread, as one chained task, as two tasks on one BPU
core, and as two tasks free to use both cores; at the preset's BPU task start
(`bpu.task_overhead_ps`) and with none, which shows what the chaining saves is that start.

    python benchmarks/run.py more

Simulated times, from submitting the first model to the last wait returning.
"""

from __future__ import annotations

from typing import Any

import emu
from emu.nn import compiler, zoo
from emu.runtime import hbdnn as dnn
from emu.runtime.hbsys import hbSysAllocMem

NAMES = ("mobilenetv2", "resnet18")
MODES = ("chained with more", "two tasks, one core", "two tasks, any core")


def _tensors(handle: Any) -> tuple[list[Any], list[Any]]:
    made: list[list[Any]] = []
    for outputs in (False, True):
        count = (dnn.hbDNNGetOutputCount if outputs else dnn.hbDNNGetInputCount)(handle)[1]
        group = []
        for k in range(count):
            tensor = dnn.hbDNNTensor()
            describe = (dnn.hbDNNGetOutputTensorProperties if outputs
                        else dnn.hbDNNGetInputTensorProperties)
            assert describe(tensor.properties, handle, k) == 0
            assert hbSysAllocMem(tensor.sysMem[0], tensor.properties.alignedByteSize) == 0
            group.append(tensor)
        made.append(group)
    return made[0], made[1]


def _run(data: bytes, mode: str, overrides: list[str]) -> float:
    with emu.Session(overrides=overrides):
        rc, packed = dnn.hbDNNInitializeFromDDR([data], [len(data)])
        assert rc == 0
        handles = [dnn.hbDNNGetModelHandle(packed, name)[1] for name in NAMES]
        io = [_tensors(handle) for handle in handles]
        start = emu.now_ms()
        tasks: list[Any] = []
        chained = None
        for k, handle in enumerate(handles):
            ctrl = dnn.hbDNNInferCtrlParam()
            dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
            inputs, outputs = io[k]
            if mode == MODES[0]:
                ctrl.more = int(k < len(handles) - 1)
                rc, chained = dnn.hbDNNInfer(outputs, inputs, handle, ctrl, chained)
            else:
                if mode == MODES[1]:
                    ctrl.bpuCoreId = dnn.HB_BPU_CORE_0
                rc, task = dnn.hbDNNInfer(outputs, inputs, handle, ctrl)
                tasks.append(task)
            assert rc == 0
        for task in tasks or [chained]:
            assert dnn.hbDNNWaitTaskDone(task, 0) == 0
        return emu.now_ms() - start


def main() -> None:
    soc = emu.Session().config
    data = compiler.dumps([
        compiler.compile_model(zoo.build(name, (128, 128)), name, compiler.CompileOptions(
            input_type="nv12", calib_random=2), soc) for name in NAMES])
    preset = soc.bpu.task_overhead_ps / 1e6
    for label, overrides in ((f"task start {preset:g} us (preset)", []),
                             ("task start 0", ["bpu.task_overhead_ps=0"])):
        times = {mode: _run(data, mode, overrides) for mode in MODES}
        print(f"   {label}: " + ", ".join(f"{mode} {ms:.3f} ms" for mode, ms in times.items()))


if __name__ == "__main__":
    main()

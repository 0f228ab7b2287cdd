"""The board's NN sample, end to end: MobileNetV1 on an NV12 image, Softmax as a DSP plugin.

What the J5 sample does, step by step in the C API's order:

1. the model: MobileNetV1 224x224 from the zoo with a Softmax after its classifier, compiled
   for NV12 input (`emu compile --input-type nv12`); the compiler leaves the Softmax to the
   CPU, as J5's toolchain does;
2. the plugin: `hbDNNRegisterLayerCreator("Softmax", ...)` gives that node to a layer whose
   `forward` sends it to a vDSP core by `hbDSPRpc` (the DSP's softmax operator), waits, and
   reads the result back;
3. the image: a 224x224 NV12 picture (a PNM file given with `--image`, or a generated one),
   written to an hbSys buffer and cleaned from the cache;
4. inference: `hbDNNInfer`, `hbDNNWaitTaskDone`, invalidate the output, read it;
5. the top-5 classes and their probabilities, and every segment of the task with its
   simulated time (quantize and layout work, cache maintenance, the BPU subgraph, the
   plugin's DSP call);
6. everything released.

    python examples/hbdnn_mobilenet_nv12.py [--image PICTURE.ppm] [--model FILE.hbm]

The classifier's weights are the zoo's (seeded, not trained), so the classes mean nothing;
the point is the path, the numbers it computes and the time each step takes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

import emu
from emu.nn import compiler, preprocess, zoo
from emu.runtime.hbdnn import (
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM,
    hbDNNGetInputTensorProperties,
    hbDNNGetModelHandle,
    hbDNNGetModelNameList,
    hbDNNGetOutputTensorProperties,
    hbDNNInfer,
    hbDNNInferCtrlParam,
    hbDNNInitializeFromFiles,
    hbDNNRegisterLayerCreator,
    hbDNNRelease,
    hbDNNReleaseTask,
    hbDNNTensor,
    hbDNNUnregisterLayerCreator,
    hbDNNWaitTaskDone,
)
from emu.runtime.hbdsp import (
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM,
    hbDSPReleaseTask,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_CACHE_INVALIDATE,
    hbSysAllocCachedMem,
    hbSysFlushMem,
    hbSysFreeMem,
    hbSysMem,
)
from emu.vdsp.ops.nn import CMD_SOFTMAX
from emu.vdsp.ops.tensor_args import TYPE_F32, pack

SIZE = 224


def compile_model(folder: Path) -> Path:
    """MobileNetV1 224 with a Softmax on its logits, compiled for NV12 input."""
    model = zoo.build("mobilenetv1", (SIZE, SIZE))
    logits = model.graph.output[0].name
    model.graph.node.append(helper.make_node("Softmax", [logits], ["prob"], name="prob",
                                             axis=1))
    (out,) = model.graph.output
    prob = onnx.ValueInfoProto()
    prob.CopyFrom(out)
    prob.name = "prob"
    model.graph.output.pop()
    model.graph.output.append(prob)
    options = compiler.CompileOptions(input_type="nv12", calib_random=2)
    compiled = compiler.compile_model(model, "mobilenetv1_nv12", options,
                                      emu.Session().config)
    path = folder / "mobilenetv1_nv12.hbm"
    path.write_bytes(compiler.dumps([compiled]))
    return path


class SoftmaxOnDsp:
    """A plugin layer: Softmax along the classes, computed by a vDSP core."""

    runs_on = "dsp"  # its time is its DSP call; the CPU only packs the header

    def forward(self, bottoms: list[np.ndarray], tops: list[np.ndarray]) -> int:
        x = np.ascontiguousarray(bottoms[0], np.float32)
        blob = pack(x, TYPE_F32, axis=1)
        src, dst = hbSysMem(), hbSysMem()
        if hbSysAllocCachedMem(src, len(blob)) or hbSysAllocCachedMem(dst, x.nbytes):
            return -1
        src.virAddr[:len(blob)] = np.frombuffer(blob, np.uint8)
        hbSysFlushMem(src, HB_SYS_MEM_CACHE_CLEAN)
        ctrl = hbDSPRpcCtrlParam()
        HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
        ctrl.rpcCmd = CMD_SOFTMAX
        rc, task = hbDSPRpc(src, dst, ctrl)
        if rc == 0:
            rc = hbDSPWaitTaskDone(task, 0)
            hbDSPReleaseTask(task)
        if rc == 0:
            hbSysFlushMem(dst, HB_SYS_MEM_CACHE_INVALIDATE)
            tops[0][...] = dst.virAddr[:x.nbytes].view(np.float32).reshape(x.shape)
        hbSysFreeMem(src)
        hbSysFreeMem(dst)
        return rc


def nv12_picture(path: str | None) -> np.ndarray:
    """A 224x224 NV12 image: a PNM file's centre (resized by sampling), or a generated
    scene; RGB -> YUV BT.601 full range, chroma averaged over 2x2 blocks."""
    if path is not None:
        rgb = preprocess.read_pnm(path, Path(path).read_bytes())
        if rgb.ndim == 2:
            rgb = np.repeat(rgb[:, :, None], 3, axis=2)
        rows = np.linspace(0, rgb.shape[0] - 1, SIZE).round().astype(int)
        cols = np.linspace(0, rgb.shape[1] - 1, SIZE).round().astype(int)
        rgb = rgb[rows][:, cols].astype(np.int64)
    else:
        yy, xx = np.mgrid[0:SIZE, 0:SIZE]
        rgb = np.stack([(xx * 255) // SIZE, (yy * 255) // SIZE,
                        ((xx - 112) ** 2 + (yy - 112) ** 2 < 60 ** 2) * 200], axis=2)
    r, g, b = (rgb[:, :, k].astype(np.int64) for k in range(3))
    y = (77 * r + 150 * g + 29 * b + 128) >> 8
    u = ((-43 * r - 85 * g + 128 * b + 128) >> 8) + 128
    v = ((128 * r - 107 * g - 21 * b + 128) >> 8) + 128
    u2 = u.reshape(SIZE // 2, 2, SIZE // 2, 2).mean(axis=(1, 3)).round()
    v2 = v.reshape(SIZE // 2, 2, SIZE // 2, 2).mean(axis=(1, 3)).round()
    uv = np.stack([u2, v2], axis=2).reshape(SIZE // 2, SIZE)
    return np.clip(np.concatenate([y, uv]), 0, 255).astype(np.uint8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", help="a PPM/PGM picture (default: a generated one)")
    parser.add_argument("--model", help="the compiled model (default: compile it first)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, emu.Session():
        model = args.model or str(compile_model(Path(tmp)))
        return run(model, nv12_picture(args.image))


def run(model_file: str, picture: np.ndarray) -> int:
    assert hbDNNRegisterLayerCreator("Softmax", SoftmaxOnDsp) == 0
    rc, packed = hbDNNInitializeFromFiles([model_file])
    if rc != 0:
        print(f"cannot load {model_file}: {rc}", file=sys.stderr)
        return 1
    _, names, _ = hbDNNGetModelNameList(packed)
    _, dnn = hbDNNGetModelHandle(packed, names[0])
    tensors: list[list[hbDNNTensor]] = [[], []]
    for side, query in enumerate((hbDNNGetInputTensorProperties,
                                  hbDNNGetOutputTensorProperties)):
        tensor = hbDNNTensor()
        _, tensor.properties = query(dnn, 0)
        assert hbSysAllocCachedMem(tensor.sysMem[0], tensor.properties.alignedByteSize) == 0
        tensors[side].append(tensor)
    (image,), (output,) = tensors
    image.sysMem[0].virAddr[:picture.size] = picture.reshape(-1)
    hbSysFlushMem(image.sysMem[0], HB_SYS_MEM_CACHE_CLEAN)
    ctrl = hbDNNInferCtrlParam()
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
    start = emu.now_ms()
    rc, task = hbDNNInfer([output], [image], dnn, ctrl)
    assert rc == 0, rc
    assert hbDNNWaitTaskDone(task, 0) == 0
    took = emu.now_ms() - start
    hbSysFlushMem(output.sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE)
    classes = output.properties.validShape.dimensionSize[1]
    prob = output.sysMem[0].virAddr[:4 * classes].view(np.float32)
    print(f"{names[0]}: top-5 of {classes} classes (probability)")
    for rank, k in enumerate(np.argsort(-prob, kind="stable")[:5], 1):
        print(f"  {rank}. class {k:4d}  {prob[k]:.6f}")
    print(f"inference {took:.3f} ms simulated; segment by segment, from the hbDNNInfer call:")
    print_segments(task, start)
    assert hbDNNReleaseTask(task) == 0
    for tensor in (image, output):
        assert hbSysFreeMem(tensor.sysMem[0]) == 0
    assert hbDNNRelease(packed) == 0
    assert hbDNNUnregisterLayerCreator("Softmax") == 0
    return 0


def print_segments(task: Any, start_ms: float) -> None:
    """Each item of the task (the emulator's report of it): when, and how long it took."""
    for seg in task.segments:
        begin, end = seg["start_ps"] / 1e9 - start_ms, seg["end_ps"] / 1e9 - start_ms
        queued = f", queued {seg['pending_ps'] / 1e9:.3f}" if seg["pending_ps"] else ""
        print(f"  {seg['name']:28s} {begin:7.3f} .. {end:7.3f} ms  "
              f"({seg['busy_ps'] / 1e9:.3f} ms{queued})")


if __name__ == "__main__":
    sys.exit(main())

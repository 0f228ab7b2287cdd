"""Running the DSP's CV operators from tests, and comparing them with OpenCV."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from emu.runtime.session import Session
from emu.vdsp.ops import cv
from emu.workloads import dsp_cv, images

BORDER_MODES = [value for _, value in cv.BORDERS]


def run_cv(name: str, inputs: list[np.ndarray], *, overrides: tuple[str, ...] = (),
           core: str = "any", **values: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """Operator `name` on `inputs` in a fresh session (defaults for values not given): its
    output and report."""
    op = cv.cv_operator(name)
    assert op is not None, name
    with Session("j5", overrides=list(overrides)):
        return dsp_cv.run_op(op, inputs, {**op.defaults(), **values}, core=core)


def gray(height: int = 480, width: int = 640) -> np.ndarray:
    """The standard test image's grey, cropped or tiled to height x width."""
    base = cv.luma(images.standard())
    reps = (-(-height // base.shape[0]), -(-width // base.shape[1]))
    return np.ascontiguousarray(np.tile(base, reps)[:height, :width])


def rgb(height: int = 480, width: int = 640) -> np.ndarray:
    base = images.standard()
    reps = (-(-height // base.shape[0]), -(-width // base.shape[1]), 1)
    return np.ascontiguousarray(np.tile(base, reps)[:height, :width])


def noise(height: int, width: int, seed: int = 0, channels: int = 1) -> np.ndarray:
    shape = (height, width) if channels == 1 else (height, width, channels)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


SIZES = [(1, 1), (1, 17), (17, 1), (5, 63), (7, 64), (9, 65), (33, 130)]
"""Small edge shapes (height, width): single pixels, single rows and columns, widths around
one vector."""
LARGE = (480, 640)
"""Larger than the 256 KiB of TCM both banks hold."""


def assert_same(out: np.ndarray, ref: np.ndarray, what: str = "") -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype, (what, out.shape, ref.shape,
                                                                 out.dtype, ref.dtype)
    bad = np.argwhere(out != ref)
    assert len(bad) == 0, (f"{what}: {len(bad)} of {out.size} values differ, first at "
                           f"{bad[0].tolist()}: {out[tuple(bad[0])]} vs {ref[tuple(bad[0])]}")


def opencv_dispatches(feature: str) -> bool:
    """Whether cv2 runs its code for CPU `feature` ("AVX2", "AVX512-SKX") on this host.
    OpenCV's float operators order their sums, and fuse multiply-adds, by the code they
    dispatch to; the operators that follow OpenCV's order follow it for the x86 host with
    AVX-512 these tests were written on, and on other hosts meet the documented bound."""
    return f"*{feature}" in cv2.getCPUFeaturesLine().split()


def assert_within_one(out: np.ndarray, ref: np.ndarray, what: str = "",
                      share: float = 0.001) -> None:
    """The documented bound of float operators: at most 1 apart, on at most `share` of the
    values."""
    assert out.shape == ref.shape and out.dtype == ref.dtype, what
    diff = np.abs(out.astype(np.int64) - ref.astype(np.int64))
    assert diff.max(initial=0) <= 1, (what, int(diff.max(initial=0)))
    assert np.count_nonzero(diff) <= max(1, int(ref.size * share)), (what,
                                                                       np.count_nonzero(diff))


def run_preempted(name: str, img: np.ndarray, at_ps: int | None,
                  **values: Any) -> tuple[np.ndarray, int, int]:
    """Operator `name` on the uint8 grey `img` (defaults, then `values`) on core 0 of a SoC
    with little free TCM (many tiles); at `at_ps` a priority-255 task takes the core between
    two tiles and overwrites its whole TCM. The output, the end time and the preemptions."""
    from emu.chip import Soc
    from emu.soc.config import load_config
    from emu.soc.sched import Stage, Task
    from emu.vdsp import ops
    from emu.vdsp.ops import image_args

    op = cv.cv_operator(name)
    assert op is not None
    chosen = {**op.defaults(), **values}
    soc = Soc(load_config(overrides=["vdsp.tcm.reserved_bytes=110KiB"])).build()
    h, w = img.shape
    width, height, _, etype, _ = op.output(
        [image_args.Image(w, h, 1, image_args.TYPE_U8, w, 0)], chosen)
    size = image_args.DTYPES[etype].itemsize
    src = soc.pool.alloc(img.nbytes, cached=False)
    src.data[:] = img.reshape(-1)
    out = soc.pool.alloc(width * height * size, cached=False)
    block = soc.pool.alloc(image_args.ARGS_BYTES, cached=False)
    block.data[:] = np.frombuffer(image_args.pack(
        [image_args.Image(w, h, 1, image_args.TYPE_U8, w, src.phys_addr)],
        image_args.Image(width, height, 1, etype, width * size, out.phys_addr),
        op.encode(chosen)), np.uint8)
    core = soc.vdsp.hw[0]
    body = ops.lookup(op.cmd)
    assert body is not None

    def stage(slot: Any) -> Any:
        return (yield from body.run(core, slot, block, out))

    def scribble(slot: Any) -> Any:
        core.tcm.data[:] = 0x77
        yield slot.env.timeout(1000)

    task = Task(name, [Stage(name, stage)], core=0)
    soc.vdsp.submit(task)
    if at_ps is not None:
        def later() -> Any:
            yield soc.env.timeout(at_ps)
            soc.vdsp.submit(Task("urgent", [Stage("urgent", scribble)], priority=255, core=0))

        soc.env.process(later())
    soc.run()
    assert task.error is None, task.error
    result = out.data[: width * height * size].view(image_args.DTYPES[etype])
    return result.reshape(height, width).copy(), task.finished_ps, task.preemptions

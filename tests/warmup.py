"""The kernels a whole parallel test run compiles, compiled first in processes that end.

numba keeps what it needs to link and inline a kernel it compiled (its LLVM modules, type
information) for as long as the process lives, several times what a kernel loaded from the
disk cache takes: `emu dsp cv --all` ends at 600 MiB after compiling its kernels and at
160 MiB after loading them. A test worker that compiled most of emu's kernels held over
2 GiB. So a whole-suite run under pytest-xdist first compiles the kernels of the point-cloud
implementations and of the CV operators in two processes of their own
(`emu.jit.compile_aside`, once per cache), and its workers load them.
"""

from __future__ import annotations

PARTS = 2


def kernels(part: str) -> None:
    """Part `part` (0 or 1) of the work: part 0 the point-cloud implementations and every
    fourth CV operator, part 1 the other CV operators (about equal compile times)."""
    from emu.vdsp.ops import cv
    from emu.workloads import dsp_cv
    from emu.workloads.pointcloud import runner

    index = int(part)
    if index == 0:
        runner.warm("centerpoint", "cpu", "dsp1", "dsp2")
    names = [op.name for op in cv.cv_operators()]
    dsp_cv.warm(*[name for k, name in enumerate(names) if (k % 4 == 0) == (index == 0)])

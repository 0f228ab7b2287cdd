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

FIRST_PART_MODULES = ("cv_features", "cv_color", "cv_rank", "cv_pixel")
"""The CV operator modules (`emu.vdsp.ops.<module>`) compiled by part 0 with the point-cloud
implementations; part 1 compiles the others. Whole modules, so that kernels their operators
share (`warp_tile` serves three) compile once: a split by operator compiled warp_tile in
both processes. Alone from an empty cache these took, in seconds: point cloud 30, features
43, colour 8, rank 7, pixel 5 (part 0: 93); warp 25, geometry 24, stats 21, filters 14,
bilateral 13 (part 1: 97)."""


def kernels(part: str) -> None:
    """Part `part` (0 or 1) of the work (see FIRST_PART_MODULES)."""
    from emu.vdsp.ops import cv
    from emu.workloads import dsp_cv
    from emu.workloads.pointcloud import runner

    first = int(part) == 0
    if first:
        runner.warm("centerpoint", "cpu", "dsp1", "dsp2")
    dsp_cv.warm(*[op.name for op in cv.cv_operators()
                  if (op.run.__module__.rsplit(".", 1)[-1] in FIRST_PART_MODULES) == first])

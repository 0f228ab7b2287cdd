"""What-ifs on the headline job move the stages that depend on them, the right way, and only
those.

One small CenterPoint frame (20,000 points, seed 0) through cpu, dsp1 and dsp2, on the
preset and on legal non-default hardware: line size, TCM size, iDMA channels, clocks, DDR.
Stages group as the CPU's (every `cpu_*` stage: they run on the A55 alone) and the DSP's
(`dsp_stage1`, `dsp_stage2`: the RPC round trip, the operator, and the CPU's cache
maintenance around it). A change to the DSP must leave every CPU stage exactly as it was; a
change to the CPU must leave the DSP's own work (its kernel cycles) exactly as it was.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

import pytest

import emu
from emu.workloads.pointcloud import runner
from emu.workloads.pointcloud.impls import IMPLS, Preprocessor
from emu.workloads.pointcloud.params import CENTERPOINT

POINTS = 20_000


@functools.cache
def measure(overrides: tuple[str, ...]) -> dict[str, list[int]]:
    """Each group's stage times, in a fixed order, and the DSP's kernel cycles per impl."""
    frame = runner.synthetic(CENTERPOINT, 1, seed=0, points=POINTS)[0]
    groups: dict[str, list[int]] = {"cpu": [], "dsp": [], "dsp_kernel_cycles": []}
    for impl in IMPLS:
        with emu.Session("j5", overrides=overrides) as sess:
            pre = Preprocessor(CENTERPOINT)
            pre.load(frame.points)
            stages = pre.run(impl).stages_ps
            tree = sess.stats()["vdsp"]
            groups["dsp_kernel_cycles"].append(
                sum(tree[f"core{c}"].get("kernel_cycles", 0) for c in range(2)))
        for stage, ps in sorted(stages.items()):
            groups["cpu" if stage.startswith("cpu_") else "dsp"].append(ps)
    return groups


def _all(rel: Callable[[int, int], bool]) -> Callable[[list[int], list[int]], bool]:
    return lambda after, before: all(rel(a, b) for a, b in zip(after, before, strict=True))


SAME = _all(operator.eq)
LESS = _all(operator.lt)
MORE = _all(operator.gt)
NO_MORE = _all(operator.le)
NO_LESS = _all(operator.ge)


def CHANGED(after: list[int], before: list[int]) -> bool:
    return after != before


def MORE_SOMEWHERE(after: list[int], before: list[int]) -> bool:
    return NO_LESS(after, before) and CHANGED(after, before)


# override: {group: expected relation of the new times to the preset's}
CASES = {
    "cpu.freq_hz=2GHz": {"cpu": LESS, "dsp": LESS, "dsp_kernel_cycles": SAME},
    "cpu.line_bytes=32": {"cpu": CHANGED, "dsp": MORE, "dsp_kernel_cycles": SAME},
    "cpu.line_bytes=128": {"cpu": CHANGED, "dsp": LESS, "dsp_kernel_cycles": SAME},
    "cpu.l3.size_bytes=4MiB": {"cpu": NO_MORE, "dsp_kernel_cycles": SAME},
    "vdsp.freq_hz=800MHz": {"cpu": SAME, "dsp": LESS, "dsp_kernel_cycles": SAME},
    # TCM size sets the tile size. Bigger tiles mean fewer kernel calls and descriptors (so
    # the kernel cycles cannot grow), but a longer first load and last store that nothing
    # overlaps: on a small frame a stage's time can go either way (with 32 KiB of 128 left,
    # stage 1 gets faster and stage 2 slower), so only the kernel cycles have a direction.
    "vdsp.tcm.bank_bytes=256KiB": {"cpu": SAME, "dsp": CHANGED, "dsp_kernel_cycles": NO_MORE},
    "vdsp.tcm.reserved_bytes=96KiB": {"cpu": SAME, "dsp": CHANGED,
                                      "dsp_kernel_cycles": NO_LESS},
    "vdsp.idma.channels=1": {"cpu": SAME, "dsp": NO_LESS, "dsp_kernel_cycles": SAME},
    "vdsp.idma.channels=2": {"cpu": SAME, "dsp": NO_LESS, "dsp_kernel_cycles": SAME},
    "vdsp.idma.bytes_per_cycle=8": {"cpu": SAME, "dsp": MORE, "dsp_kernel_cycles": SAME},
    "ddr.bw_bytes_per_s=4GB/s": {"cpu": MORE, "dsp": MORE, "dsp_kernel_cycles": SAME},
    # A stage whose loads all hit on chip or were prefetched waits on no DDR latency.
    "ddr.latency_ps=300ns": {"cpu": MORE_SOMEWHERE, "dsp": MORE, "dsp_kernel_cycles": SAME},
}


@pytest.mark.parametrize("override", list(CASES))
def test_a_what_if_moves_what_depends_on_it_and_nothing_else(override):
    before, after = measure(()), measure((override,))
    for group, expected in CASES[override].items():
        assert expected(after[group], before[group]), (
            f"{override}: {group} went from {before[group]} to {after[group]}")


def test_the_channel_what_if_changes_the_dsp_stages_at_all():
    # NO_LESS above also holds if the channel count were ignored; it is not.
    assert measure(("vdsp.idma.channels=1",))["dsp"] != measure(())["dsp"]

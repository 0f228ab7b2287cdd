"""Golden timings: every change in simulated time of the headline workload is a visible diff.

CenterPoint and PointPillars preprocessing of one small synthetic frame each (the full
models, 20,000 points, seed 0) through cpu, dsp1 and dsp2 on the `j5` preset; the time of
every stage, in picoseconds, must equal `golden/pointcloud_timing.json`. After a change that
moves simulated time on purpose, regenerate the file with

    python -m pytest tests/workloads/test_golden_timing.py --regen-golden

and say in the commit which stage moved, by how much and why.
"""

import json
from pathlib import Path

import emu
from emu.workloads.pointcloud import runner
from emu.workloads.pointcloud.impls import IMPLS, Preprocessor
from emu.workloads.pointcloud.params import MODELS

GOLDEN = Path(__file__).parent / "golden" / "pointcloud_timing.json"
POINTS = 20_000


def stage_times() -> dict:
    times: dict = {}
    for model, params in sorted(MODELS.items()):
        frame = runner.synthetic(params, 1, seed=0, points=POINTS)[0]
        times[model] = {}
        for impl in IMPLS:
            with emu.Session("j5"):
                pre = Preprocessor(params)
                pre.load(frame.points)
                result = pre.run(impl)
            times[model][impl] = {"pillars": result.pillars, "stages_ps": result.stages_ps,
                                  "total_ps": result.total_ps}
    return times


def test_stage_times_equal_the_golden_file(request):
    got = stage_times()
    if request.config.getoption("--regen-golden"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    moved = [f"{model} {impl} {stage}: {want[model][impl]['stages_ps'].get(stage)} -> {ps} ps"
             for model, impls in got.items() for impl, entry in impls.items()
             for stage, ps in entry["stages_ps"].items()
             if want.get(model, {}).get(impl, {}).get("stages_ps", {}).get(stage) != ps]
    assert not moved, "simulated time moved (regenerate with --regen-golden if meant):\n" + \
        "\n".join(moved)
    assert got == want

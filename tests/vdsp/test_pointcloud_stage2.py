"""DSP stage 2 (operators 0x902, 0x903) works on the pillars used only.

The operators are driven directly, as the host drives them: a parameter block that names the
pillars used, then the voxel buffer. The records of unused pillars hold values that would
show in the output if they were read, and the output buffer starts as garbage: the features
must still be complete, the used pillars' part encoded (or copied) and the rest zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import emu
from emu.errors import DspError
from emu.runtime import hbdsp, hbsys
from emu.vdsp.ops import pointcloud as dsp_ops
from emu.workloads.pointcloud.params import CENTERPOINT, POINTPILLARS, PillarParams

# The two layouts (slot-major CenterPoint, pillar-major PointPillars) with P not a multiple
# of the 64-record tile group.
MODELS = {
    "centerpoint": CENTERPOINT.with_overrides(max_pillars=300, max_points_per_pillar=20),
    "pointpillars": POINTPILLARS.with_overrides(max_pillars=150, max_points_per_pillar=7),
}
# Little TCM left: tiles of one slot row, of a few slot rows and of pieces of a row.
SMALL_TCM = ("vdsp.tcm.reserved_bytes=120KiB",)


@dataclass
class Run:
    """One stage-2 call's output and what the DSP did for it."""

    features: np.ndarray
    kernel_cycles: int
    bytes_in: int
    bytes_out: int


def _records(params: PillarParams, encode: bool, rng: np.random.Generator) -> np.ndarray:
    """P x K records of `dims` values in the layout of the voxel buffer: encodable floats,
    empty (NaN) slots among them, or int8 values; none of them quantises to all zeros."""
    shape = (params.max_pillars * params.max_points_per_pillar, params.dims)
    if not encode:
        values = rng.integers(-128, 127, shape, np.int8, endpoint=True)
        return np.where(values == 0, np.int8(1), values)
    box = [(params.back, params.front), (params.right, params.left),
           (params.bottom, params.top), (params.lower, params.upper), (0.1, 0.5)]
    lows, highs = np.array(box[:params.dims], np.float32).T
    values = rng.uniform(lows, highs, shape).astype(np.float32)
    values[rng.random(shape[0]) < 0.3] = np.nan
    return values


def _expected(params: PillarParams, records: np.ndarray, used: int) -> np.ndarray:
    """features planes [c, record] of the records of pillars < used; zero elsewhere."""
    p, k = params.max_pillars, params.max_points_per_pillar
    index = np.arange(p * k)
    pillar = index % p if params.slot_major else index // k
    if records.dtype == np.int8:
        planes = records.T.copy()
    else:
        lows = np.array([params.back, params.right, params.bottom, params.lower], np.float32)
        highs = np.array([params.front, params.left, params.top, params.upper], np.float32)
        encoded = records.copy()
        scale = np.float32(params.scale)
        with np.errstate(invalid="ignore"):
            encoded[:, :4] = ((records[:, :4] - lows) / (highs - lows)) / scale
            encoded[:, 4:] = records[:, 4:] / scale
            q = np.rint(encoded)
        planes = np.where(np.isnan(q), 0, np.clip(q, -128, 127)).astype(np.int8).T.copy()
    planes[:, pillar >= used] = 0
    return planes


def _alloc(nbytes: int, sess: emu.Session) -> hbsys.PoolBuffer:
    mem = hbsys.hbSysMem()
    assert hbsys.hbSysAllocMem(mem, nbytes) == hbsys.HB_SYS_SUCCESS
    buf = hbsys.buffer_of(mem, sess)
    assert buf is not None
    return buf


def _stage2(params: PillarParams, records: np.ndarray, used: int,
            overrides: tuple[str, ...] = (), count: int | None = None) -> Run:
    """Operator 0x903 (float records) or 0x902 (int8 records) on a fresh SoC, `used` pillars
    used; `count` replaces the record count P x K of the parameter block."""
    encode = records.dtype == np.float32
    pk = params.max_pillars * params.max_points_per_pillar
    with emu.Session("j5", overrides=overrides) as sess:
        inp = _alloc(dsp_ops.HEADER_BYTES + records.nbytes, sess)
        out = _alloc(params.dims * pk, sess)
        inp.data[:dsp_ops.HEADER_BYTES] = dsp_ops.header(params, pk if count is None else count,
                                                         used)
        inp.data[dsp_ops.HEADER_BYTES:] = records.view(np.uint8).reshape(-1)
        out.data[:] = 0x5A
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        hbdsp.HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
        ctrl.rpcCmd = (dsp_ops.CMD_STAGE2_ENCODE_TRANSPOSE if encode
                       else dsp_ops.CMD_STAGE2_TRANSPOSE)
        rc, task = hbdsp.hbDSPRpc(hbsys.mem_of(inp), hbsys.mem_of(out), ctrl)
        assert rc == 0 and task is not None
        done = hbdsp.hbDSPWaitTaskDone(task, 0)
        error = task.error
        hbdsp.hbDSPReleaseTask(task)
        if done != 0:
            raise DspError(error)
        features = out.data.view(np.int8).reshape(params.dims, pk).copy()
        tree = sess.stats()["vdsp"]
    cores = [tree[f"core{c}"] for c in range(2)]
    channels = [ch for core in cores for ch in core["idma"].values()]
    return Run(features, sum(core.get("kernel_cycles", 0) for core in cores),
               sum(ch.get("bytes_in", 0) for ch in channels),
               sum(ch.get("bytes_out", 0) for ch in channels))


def _counts(params: PillarParams) -> list[int]:
    p = params.max_pillars
    return sorted({0, 1, 2, 63, 64, 65, 127, 129, p // 2, p - 1, p,
                   *np.random.default_rng(p).integers(0, p, 3).tolist()})


@pytest.mark.parametrize("encode", [True, False], ids=["encode", "transpose"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_only_the_used_pillars_are_read_and_the_rest_of_the_output_is_zero(model, encode):
    params = MODELS[model]
    records = _records(params, encode, np.random.default_rng(7))
    for used in _counts(params):
        got = _stage2(params, records, used)
        assert np.array_equal(got.features, _expected(params, records, used)), used


@pytest.mark.parametrize("encode", [True, False], ids=["encode", "transpose"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_small_tiles_cut_the_used_pillars_into_rows_and_pieces_of_rows(model, encode):
    params = MODELS[model]
    records = _records(params, encode, np.random.default_rng(8))
    p = params.max_pillars
    for used in sorted({1, 65, 100, min(250, p), p - 1}):
        got = _stage2(params, records, used, SMALL_TCM)
        assert np.array_equal(got.features, _expected(params, records, used)), used


@pytest.mark.parametrize("encode", [True, False], ids=["encode", "transpose"])
def test_stage_2_work_grows_with_the_pillars_used_not_with_the_pillars_allowed(encode):
    params = MODELS["centerpoint"]
    k = params.max_points_per_pillar
    record = 4 * params.dims if encode else params.dims
    records = _records(params, encode, np.random.default_rng(9))
    runs = {used: _stage2(params, records, used) for used in (0, 64, 150, 300)}
    for used, run in runs.items():
        assert run.bytes_in == used * k * record  # the input DMA moves the used records only
        assert run.bytes_out == params.dims * params.max_pillars * k  # the output is complete
    cycles = [run.kernel_cycles for _, run in sorted(runs.items())]
    assert cycles == sorted(set(cycles))  # strictly more compute for more pillars used
    assert cycles[0] < cycles[-1] / 3  # an empty frame costs a fraction of a full one
    # Four times the pillars allowed, the same pillars used: the same input and far less
    # than four times the compute (the extra output is zero-filled, one store a vector).
    wide = params.with_overrides(max_pillars=4 * params.max_pillars)
    run = _stage2(wide, _records(wide, encode, np.random.default_rng(10)), 150)
    assert run.bytes_in == runs[150].bytes_in
    assert run.kernel_cycles < 2 * runs[150].kernel_cycles


@pytest.mark.parametrize(("used", "count"), [(301, None), (10, 299 * 20)])
def test_a_pillar_count_or_record_count_that_does_not_fit_is_refused(used, count):
    params = MODELS["centerpoint"]
    records = _records(params, False, np.random.default_rng(1))
    with pytest.raises(DspError, match="do not fit P=300, K=20"):
        _stage2(params, records, used, count=count)


def test_a_version_1_block_is_refused_not_read_as_no_pillars_used():
    params = MODELS["pointpillars"]
    block = dsp_ops.header(params, params.max_pillars * params.max_points_per_pillar, 5)
    block.view("<u4")[1] = 1
    with pytest.raises(DspError, match="EMPC v2"):
        dsp_ops._parse(block, "pointcloud stage 2")


@pytest.mark.parametrize("slot_major", [True, False])
def test_tiles_cover_the_records_of_a_pillar_range_exactly_once(slot_major):
    rng = np.random.default_rng(3)
    for _ in range(200):
        p, k = int(rng.integers(1, 400)), int(rng.integers(1, 30))
        first = int(rng.integers(0, p + 1))
        end = int(rng.integers(first, p + 1))
        capacity = 64 * int(rng.integers(1, 40))
        region = dsp_ops.pillar_records(first, end, p, k, slot_major)
        covered = np.zeros(p * k, np.int64)
        for block in dsp_ops._blocks(region, capacity):
            assert block.rows * -(-block.cols // 64) * 64 <= capacity
            for start in block.starts():
                covered[start: start + block.cols] += 1
        index = np.arange(p * k)
        pillar = index % p if slot_major else index // k
        assert np.array_equal(covered, ((pillar >= first) & (pillar < end)).astype(np.int64))


def test_a_preemptor_that_scribbles_over_the_tcm_leaves_the_output_intact():
    """Zero-fill tiles store their zeros afresh: after a priority-255 task has had the core
    (and written over its TCM) between two tiles, the rest of the output is still right."""
    from emu.chip import Soc
    from emu.soc.config import load_config
    from emu.soc.sched import Stage, Task
    from emu.vdsp import ops

    params = MODELS["centerpoint"]
    pk = params.max_pillars * params.max_points_per_pillar
    records = _records(params, False, np.random.default_rng(4))
    want = _expected(params, records, 65)

    def run(at_ps: int | None) -> tuple[np.ndarray, int, int]:
        soc = Soc(load_config(overrides=list(SMALL_TCM))).build()
        inp = soc.pool.alloc(dsp_ops.HEADER_BYTES + records.nbytes, cached=False)
        out = soc.pool.alloc(params.dims * pk, cached=False)
        inp.data[:dsp_ops.HEADER_BYTES] = dsp_ops.header(params, pk, 65)
        inp.data[dsp_ops.HEADER_BYTES:] = records.view(np.uint8).reshape(-1)
        core = soc.vdsp.hw[0]
        op = ops.lookup(dsp_ops.CMD_STAGE2_TRANSPOSE)
        assert op is not None

        def stage2(slot):
            return (yield from op.run(core, slot, inp, out))

        def scribble(slot):
            core.tcm.data[:] = 0x77
            yield slot.env.timeout(1000)

        low = Task("stage 2", [Stage("stage 2", stage2)], core=0)
        soc.vdsp.submit(low)
        if at_ps is not None:
            def later():
                yield soc.env.timeout(at_ps)
                soc.vdsp.submit(Task("urgent", [Stage("urgent", scribble)], priority=255,
                                     core=0))

            soc.env.process(later())
        soc.run()
        assert low.error is None
        return out.data.view(np.int8).reshape(params.dims, pk), low.finished_ps, \
            low.preemptions

    features, end_ps, _ = run(None)
    assert np.array_equal(features, want)
    preempted = 0
    for at_ps in np.linspace(0, end_ps, 16, dtype=np.int64).tolist():
        features, _, preemptions = run(at_ps)
        assert np.array_equal(features, want), at_ps
        preempted += preemptions
    assert preempted >= 8

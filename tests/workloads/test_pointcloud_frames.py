"""Frames of different sizes in a row, as the board's sample runs them, equal the reference.

A `Preprocessor` keeps its buffers from frame to frame, and the DSP schemes clear only the
pillars the previous frame used before voxelising (stage 2 reads only the pillars used):
a small frame after a big one, an empty one, and a big one after a small one must each come
out exactly as the literal reference says, with exactly the pillar counts asked for.
"""

from __future__ import annotations

import numpy as np
import pytest

import emu
from emu.workloads.pointcloud.impls import IMPLS, Preprocessor
from emu.workloads.pointcloud.params import CENTERPOINT, POINTPILLARS, PillarParams
from tests.workloads.pointcloud_reference import preprocess

# Room for counts on both sides of the 64-record tile group; P is not a multiple of it.
SMALL = {
    "centerpoint": CENTERPOINT.with_overrides(max_pillars=200, max_points_per_pillar=5,
                                              max_input_points=5000),
    "pointpillars": POINTPILLARS.with_overrides(max_pillars=150, max_points_per_pillar=7,
                                                max_input_points=5000),
}


def _frame(params: PillarParams, cells: int, rng: np.random.Generator) -> np.ndarray:
    """Points in exactly `cells` distinct cells (in shuffled order), one to K + 2 of them per
    cell, so some pillars are full and drop points; intensity and time vary."""
    chosen = rng.choice(params.x_len * params.y_len, cells, replace=False)
    per_cell = rng.integers(1, params.max_points_per_pillar + 3, cells)
    idx = np.repeat(chosen % params.x_len, per_cell)
    idy = np.repeat(chosen // params.x_len, per_cell)
    n = len(idx)
    points = np.zeros((n, params.dims), np.float32)
    points[:, 0] = params.back + (idx + rng.uniform(0.2, 0.8, n)) * params.x_scale
    points[:, 1] = params.right + (idy + rng.uniform(0.2, 0.8, n)) * params.y_scale
    points[:, 2] = rng.uniform(params.bottom + 0.1, params.top - 0.1, n)
    points[:, 3] = rng.uniform(params.lower, params.upper, n)
    if params.dims == 5:
        points[:, 4] = rng.choice(np.array([0, 0.05, 0.45], np.float32), n)
    return points[rng.permutation(n)]


def _sizes(params: PillarParams) -> list[int]:
    """Cells of consecutive frames: more than P (the last pillar overflows), small, empty,
    and back up, with pillar counts on and around the 64-record tile group, a random one."""
    p = params.max_pillars
    rng = np.random.default_rng(p)
    return [p + 20, 1, 0, 65, p - 1, 3, 64, int(rng.integers(2, p)), 63, p]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("model", sorted(SMALL))
def test_frames_big_then_small_then_big_each_equal_the_reference(model, impl):
    params = SMALL[model]
    rng = np.random.default_rng(11)
    with emu.Session("j5"):
        pre = Preprocessor(params)
        for size in _sizes(params):
            points = _frame(params, size, rng)
            want = preprocess(points, params)
            assert want["pillars"] == min(size, params.max_pillars)
            pre.load(points)
            got = pre.run(impl)
            assert np.array_equal(got.features, want["features"]), size
            assert np.array_equal(got.coords, want["coords"]), size
            assert (got.pillars, got.valid, got.kept) == (
                want["pillars"], want["valid"], want["kept"]), size


@pytest.mark.parametrize("model", sorted(SMALL))
def test_a_dsp_frame_clears_only_the_pillars_the_previous_frame_used(model, monkeypatch):
    """The CPU's clear of the voxel buffer covers the last frame's pillars, all of them
    before the first frame."""
    params = SMALL[model]
    rng = np.random.default_rng(12)
    big, small = _frame(params, params.max_pillars, rng), _frame(params, 2, rng)
    for impl in ("dsp1", "dsp2"):
        cleared: list[list[int]] = []  # bytes of voxel buffer each frame clears
        with emu.Session("j5"):
            pre = Preprocessor(params)
            memset = pre._memset

            def spy(buf, start, nbytes, value, pre=pre, memset=memset, cleared=cleared):
                if buf is pre.float_voxels or buf is pre.int8_voxels:
                    cleared[-1].append(nbytes)
                memset(buf, start, nbytes, value)

            monkeypatch.setattr(pre, "_memset", spy)
            for points in (big, small, small, big):
                cleared.append([])
                pre.load(points)
                pre.run(impl)
        record = params.dims * (1 if impl == "dsp2" else 4)
        everything = params.max_pillars * params.max_points_per_pillar * record
        two = 2 * params.max_points_per_pillar * record
        assert [sum(frame) for frame in cleared] == [everything, everything, two, two], impl


@pytest.mark.parametrize("model", sorted(SMALL))
def test_one_preprocessor_switching_implementations_frame_by_frame(model):
    # cpu and dsp1 share the float voxel buffer with different layouts and empty values,
    # and every implementation shares the tables: each hand-over must leave nothing behind.
    params = SMALL[model]
    rng = np.random.default_rng(5)
    order = ["cpu", "dsp1", "cpu", "dsp2", "dsp1", "dsp1", "cpu", "dsp2", "cpu"]
    with emu.Session("j5"):
        pre = Preprocessor(params)
        for impl, cells in zip(order, _sizes(params), strict=False):
            points = _frame(params, cells, rng)
            pre.load(points)
            got = pre.run(impl)
            want = preprocess(points, params)
            assert np.array_equal(got.features, want["features"]), (impl, cells)
            assert np.array_equal(got.coords, want["coords"]), (impl, cells)

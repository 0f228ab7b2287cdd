"""Edge cases of the pillar preprocessing (shared/spec/pointcloud.md §2-§4), every
implementation against the independent reference (`pointcloud_reference.py`), bit for bit.

Each case is built so that it exercises what its name says; the builder's claim is checked
on the reference's counts first, so a case that stopped reaching its edge fails instead of
passing quietly. P and K are small (P not a multiple of the DSP's 64-record tile group) so
that overflowing pillars takes a few dozen points.

Where the spec is silent the reference decides, and so do these tests: a NaN intensity or
time quantises to 0 and +-inf to the int8 limits (the DSP conversion's rule); see the
reference's docstring.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import emu
from emu.workloads.pointcloud.impls import IMPLS, Preprocessor
from emu.workloads.pointcloud.params import CENTERPOINT, POINTPILLARS, PillarParams
from tests.workloads.pointcloud_reference import preprocess

f32 = np.float32
SMALL = {
    "centerpoint": CENTERPOINT.with_overrides(max_pillars=40, max_points_per_pillar=3,
                                              max_input_points=2000),
    "pointpillars": POINTPILLARS.with_overrides(max_pillars=40, max_points_per_pillar=5,
                                                max_input_points=2000),
}


def _point(p: PillarParams, x: float, y: float, z: float, r: float = 0.5,
           t: float = 0.05) -> list[float]:
    return [x, y, z, r, t][: p.dims]


def _centre(p: PillarParams) -> tuple[np.float32, np.float32, np.float32]:
    """A point well inside the box, in the middle of a cell."""
    x = f32(p.back) + f32(p.x_scale) * f32(p.x_len // 2 + 0.5)
    y = f32(p.right) + f32(p.y_scale) * f32(p.y_len // 2 + 0.5)
    return x, y, f32((p.bottom + p.top) / 2)


def _up(v: float) -> np.float32:
    return np.nextafter(f32(v), f32(np.inf))


def _down(v: float) -> np.float32:
    return np.nextafter(f32(v), f32(-np.inf))


def _array(rows: list[list[float]], p: PillarParams) -> np.ndarray:
    return np.array(rows, dtype=np.float32).reshape(-1, p.dims)


# --- the cases: (points, what the reference's result must show) ----------------------------


def empty(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    return _array([], p), lambda want: want["pillars"] == 0 and want["valid"] == 0


def one_point(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    return _array([_point(p, *_centre(p))], p), lambda want: want["kept"] == 1


def one_point_outside(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    x, y, _ = _centre(p)
    return _array([_point(p, x, y, p.top)], p), lambda want: want["valid"] == 0


def range_faces(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    """Each coordinate exactly on both faces of the box (invalid: the range is open), one
    float32 step inside (valid, unless float32 rounding puts it past the grid), one outside."""
    centre = _centre(p)
    rows = []
    for axis, (low, high) in enumerate(((p.back, p.front), (p.right, p.left),
                                        (p.bottom, p.top))):
        for v in (low, high, _up(low), _down(high), _down(low), _up(high)):
            xyz = list(centre)
            xyz[axis] = v
            rows.append(_point(p, *xyz))
    # all six faces at once, and the corners one step inside
    rows.append(_point(p, p.back, p.right, p.bottom))
    rows.append(_point(p, p.front, p.left, p.top))
    rows.append(_point(p, _up(p.back), _up(p.right), _up(p.bottom)))
    rows.append(_point(p, _down(p.front), _down(p.left), _down(p.top)))
    return _array(rows, p), lambda want: 0 < want["valid"] < len(rows)


def cell_boundaries(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    """Points exactly on the cell edges (as float32 computes them, and as the nearest float32
    to the exact edge), and one step either side: trunc((x - back) / x_scale) in float32
    decides the cell."""
    _, _, z = _centre(p)
    rows = []
    for k in (0, 1, 2, 7, p.x_len // 2, p.x_len - 1):
        for x in {f32(p.back) + f32(k) * f32(p.x_scale), f32(p.back + k * p.x_scale)}:
            for dx in (_down, f32, _up):
                j = (k * 5 + 3) % p.y_len
                y = f32(p.right + j * p.y_scale)
                for dy in (_down, f32, _up):
                    rows.append(_point(p, dx(x), dy(y), z))
    # some edges have points in both cells (not all: float32 rounding moves some points
    # across, e.g. CenterPoint's x = -1e-45 lands in cell 256, as x = 0.0 does)
    return _array(rows, p), lambda want: len(set(want["coords"][0, 0, :, 3]) - {-1}) > 6


def crowded_cell(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    """Three times K points in one cell, each with its own intensity (slot order shows)."""
    x, y, z = _centre(p)
    n = 3 * p.max_points_per_pillar
    r = np.linspace(p.lower, p.upper, n)
    rows = [_point(p, x, y, z + f32(0.01) * k, float(r[k]), 0.05 * k) for k in range(n)]
    return _array(rows, p), lambda want: (want["pillars"], want["kept"]) == (
        1, p.max_points_per_pillar)


def exactly_p_cells(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    points = _cells(p, p.max_pillars, per_cell=2)
    return points, lambda want: want["pillars"] == p.max_pillars and want["kept"] == len(
        points)


def more_cells_than_p(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    """P + 9 distinct cells, then more points of early and of overflowed cells: pillar P-1
    collects the overflow, fills up and drops; its coords are the last new cell's."""
    cells = _cells(p, p.max_pillars + 9, per_cell=1)
    again = np.concatenate([cells[:3], cells[-4:], cells[-9:-7]])
    again[:, 3] = f32(p.upper)
    points = np.concatenate([cells, again])
    return points, lambda want: (want["pillars"] == p.max_pillars
                                 and want["kept"] < want["valid"] == len(points))


def nan_and_inf(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    """NaN and +-inf in each value: a coordinate makes the point invalid (spec §2); intensity
    and time are not range-tested and quantise (NaN to 0, inf to the limits), as do huge
    finite values and -0.0."""
    x, y, z = _centre(p)
    rows = []
    for value in (np.nan, np.inf, -np.inf, 3e38, -3e38, -0.0):
        for d in range(p.dims):
            row = _point(p, x + f32(d * p.x_scale), y, z)
            row[d] = value
            rows.append(row)
    # x, y or z NaN, +-inf or +-3e38: 15 invalid points; -0.0 is outside when back is 0.0
    invalid = 15 + (p.back == 0.0)
    return _array(rows, p), lambda want: want["valid"] == len(rows) - invalid


def input_cap(p: PillarParams) -> tuple[np.ndarray, Callable[[dict], bool]]:
    """More points than max input points: the ones past the cap are never read."""
    points = _cells(p, 30, per_cell=1)
    cap = p.max_input_points
    return np.concatenate([points] * (cap // len(points) + 2)), \
        lambda want: want["valid"] == cap


def _cells(p: PillarParams, cells: int, per_cell: int) -> np.ndarray:
    """`per_cell` points in each of `cells` distinct cells spread over the grid, in cell
    order, each point in the middle part of its cell."""
    k = np.arange(cells)
    idx = (k * 37) % p.x_len
    idy = (k * 53 + k // p.x_len) % p.y_len
    rows = []
    for j in range(per_cell):
        for a, b in zip(idx, idy, strict=True):
            rows.append(_point(p, p.back + (a + 0.3 + 0.1 * j) * p.x_scale,
                               p.right + (b + 0.6) * p.y_scale, 0.1 * j - 0.5,
                               p.lower + (p.upper - p.lower) * (a % 7) / 7, 0.05 * j))
    return _array(rows, p)


CASES = [empty, one_point, one_point_outside, range_faces, cell_boundaries, crowded_cell,
         exactly_p_cells, more_cells_than_p, nan_and_inf, input_cap]


def _check(got, want, label) -> None:
    assert np.array_equal(got.features, want["features"]), label
    assert np.array_equal(got.coords, want["coords"]), label
    assert (got.pillars, got.valid, got.kept) == (
        want["pillars"], want["valid"], want["kept"]), label


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("model", sorted(SMALL))
def test_every_edge_case_equals_the_reference(model, impl):
    """All cases in one run of one preprocessor (a fresh one would hide state carried from
    frame to frame; `test_each_case_alone` covers the other side)."""
    params = SMALL[model]
    with emu.Session("j5"):
        pre = Preprocessor(params)
        for case in CASES:
            points, reaches = case(params)
            want = preprocess(points, params)
            assert reaches(want), f"{case.__name__} does not reach its edge"
            pre.load(points)
            _check(pre.run(impl), want, case.__name__)


@pytest.mark.parametrize("model", sorted(SMALL))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_each_case_alone(model, case):
    """Each case on a fresh preprocessor, every implementation in turn on it."""
    params = SMALL[model]
    points, _ = case(params)
    want = preprocess(points, params)
    with emu.Session("j5"):
        for impl in IMPLS:
            pre = Preprocessor(params)
            pre.load(points)
            _check(pre.run(impl), want, impl)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("model", sorted(SMALL))
def test_an_overflowed_frame_then_tiny_ones(model, impl):
    """A frame with more distinct cells than P, then frames of its overflowed cells only,
    one point of one, nothing, and one point of a cell the big frame gave its own pillar:
    each comes out as the reference gives it alone (the per-frame reset after an
    overflowed frame sets the whole cell table back)."""
    params = SMALL[model]
    big, _ = more_cells_than_p(params)
    overflowed = big[params.max_pillars: params.max_pillars + 9]
    frames = [big, overflowed, overflowed[-1:], big[:0], big[:1], big, big[-1:]]
    with emu.Session("j5"):
        pre = Preprocessor(params)
        for k, points in enumerate(frames):
            want = preprocess(points, params)
            pre.load(points)
            _check(pre.run(impl), want, k)
        assert want["pillars"] == 1


def test_the_run_stops_when_an_implementation_counts_otherwise(monkeypatch):
    """The report's counts come from the grid before any implementation runs; each
    implementation's own counts must equal them."""
    from emu.errors import EmuError
    from emu.workloads import lidar
    from emu.workloads.pointcloud import runner

    params = SMALL["pointpillars"]
    points, _ = crowded_cell(params)
    frame = runner.Frame("crowd", points, 0, params.dims)
    count = lidar.grid_occupancy
    monkeypatch.setattr(runner, "MODELS", {"pointpillars": params})
    report, _ = runner.run("pointpillars", ["dsp2"], [frame])
    assert report["frames"][0]["points_dropped_max_points_per_pillar"] == len(points) - 5
    monkeypatch.setattr(lidar, "grid_occupancy",
                        lambda *a: count(*a)._replace(kept=count(*a).kept - 1))
    with pytest.raises(EmuError, match=r"dsp2 counts .* disagree"):
        runner.run("pointpillars", ["dsp2"], [frame])


@pytest.mark.slow  # the literal reference takes seconds per frame at these sizes (~15 s all)
@pytest.mark.parametrize(("params", "points"), [(POINTPILLARS, 30_000), (CENTERPOINT, 60_000)],
                         ids=["pointpillars", "centerpoint"])
def test_the_full_models_on_a_frame_with_more_cells_than_their_pillars(params, points):
    """The models' own P and K (the DSP's tiles over 40,000 / 12,000 pillars): points spread
    over the whole box open more cells than P, one cell holds 500; then a 7-point frame."""
    rng = np.random.default_rng(3)
    cloud = np.zeros((points, params.dims), np.float32)
    for axis, (low, high) in enumerate(((params.back, params.front),
                                        (params.right, params.left),
                                        (params.bottom, params.top),
                                        (params.lower, params.upper))):
        cloud[:, axis] = rng.uniform(low, high, points)
    cloud[points // 2: points // 2 + 500] = cloud[0]
    frames = [cloud, cloud[:7]]
    wants = [preprocess(frame, params) for frame in frames]
    assert wants[0]["pillars"] == params.max_pillars and wants[0]["kept"] < wants[0]["valid"]
    with emu.Session("j5"):
        pre = Preprocessor(params)
        for impl in IMPLS:
            for frame, want in zip(frames, wants, strict=True):
                pre.load(frame)
                _check(pre.run(impl), want, (impl, len(frame)))

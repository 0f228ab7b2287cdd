import os

import numpy as np
import pytest

from emu.errors import InputError
from emu.workloads import lidar
from emu.workloads.lidar import (
    HDL32E,
    HDL64E,
    Box,
    Material,
    Scene,
    draw_scene,
    grid_occupancy,
    kitti_frame,
    load_bin,
    nuscenes_frame,
    synthetic_frames,
    write_bin,
)
from emu.workloads.pointcloud.params import CENTERPOINT, POINTPILLARS
from tests.workloads.pointcloud_reference import preprocess

# CenterPoint's range and pillar size (spec §1).
BOX_XY_M, BOX_Z_M, PILLAR_M = 51.2, (-5.0, 3.0), 0.2


@pytest.fixture(scope="module")
def centerpoint_frames():
    return synthetic_frames("centerpoint", 8, 0, None)


def in_box(points):
    x, y, z = points[:, 0], points[:, 1], points[:, 2]
    return ((np.abs(x) < BOX_XY_M) & (np.abs(y) < BOX_XY_M)
            & (z > BOX_Z_M[0]) & (z < BOX_Z_M[1]))


def occupied_cells(points):
    kept = points[in_box(points)]
    ix = np.floor((kept[:, 0] + BOX_XY_M) / PILLAR_M).astype(np.int64)
    iy = np.floor((kept[:, 1] + BOX_XY_M) / PILLAR_M).astype(np.int64)
    return len(np.unique(ix * 512 + iy))


# ----- files -------------------------------------------------------------------------------


def test_write_then_load_round_trips_exact_bytes(tmp_path):
    points = np.random.default_rng(1).normal(size=(1000, 5)).astype(np.float32)
    path = tmp_path / "cloud.bin"
    write_bin(path, points)
    assert path.read_bytes() == points.astype("<f4").tobytes()
    loaded = load_bin(path, 5, 300_000)
    assert loaded.points.dtype == np.float32 and loaded.points.flags.c_contiguous
    assert loaded.points.tobytes() == points.tobytes()
    assert (loaded.points_read, loaded.points_dropped, loaded.name) == (1000, 0, "cloud")
    assert os.listdir(tmp_path) == ["cloud.bin"]  # no temporary file left behind


def test_size_not_a_whole_number_of_points_names_the_file_and_sizes(tmp_path):
    path = tmp_path / "torn.bin"
    path.write_bytes(np.zeros(5 * 10 + 3, dtype="<f4").tobytes())  # 212 bytes
    with pytest.raises(InputError) as err:
        load_bin(path, 5, 300_000)
    message = str(err.value)
    assert "torn.bin" in message and "212" in message and "20" in message
    assert "\n" not in message


@pytest.mark.parametrize(("name", "columns"), [
    ("n015-2018-07-24-11-22-45+0800__LIDAR_TOP__1532402927647951.pcd.bin", 5),
    ("SCAN.PCD.BIN", 5), ("000001.bin", "model"), ("cloud.pcd.bin.bin", "model"),
    ("x.pcd", None), ("points.npy", None), ("bin", None)])
def test_file_columns_come_from_the_format_the_name_gives(name, columns):
    if columns is None:
        with pytest.raises(InputError, match="--columns"):
            lidar.file_columns(name)
    else:  # "model": a plain .bin holds the model's values a point (spec §2)
        assert lidar.file_columns(f"/data/{name}")[0] == (None if columns == "model"
                                                          else columns)


def test_implausible_times_spot_a_4_value_file_read_as_5():
    rng = np.random.default_rng(0)
    five = np.column_stack([rng.uniform(-50, 50, (500, 3)), rng.uniform(0, 255, 500),
                            rng.uniform(0, 0.5, 500)]).astype(np.float32)
    assert lidar.implausible_times(five) == 0.0
    four = np.column_stack([rng.uniform(-50, 50, (500, 2)), rng.uniform(-2.5, 0.5, 500),
                            rng.uniform(0, 1, 500)]).astype(np.float32)
    misread = four.reshape(-1)[: 400 * 5].reshape(400, 5)
    assert lidar.implausible_times(misread) > 0.5
    assert lidar.implausible_times(four) == 0.0  # 4 values: no t to judge
    nan_t = five.copy()
    nan_t[:, 4] = np.nan
    assert lidar.implausible_times(nan_t) == 1.0


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"missing\.bin"):
        load_bin(tmp_path / "missing.bin", 4, 150_000)
    with pytest.raises(InputError, match="cannot read"):
        load_bin(tmp_path, 4, 150_000)  # a folder


def test_only_the_first_max_points_are_kept_and_the_rest_counted(tmp_path):
    points = np.arange(4 * 25, dtype=np.float32).reshape(25, 4)
    write_bin(tmp_path / "k.bin", points)
    loaded = load_bin(tmp_path / "k.bin", 4, 10)
    assert (loaded.points_read, loaded.points_dropped) == (10, 15)
    np.testing.assert_array_equal(loaded.points, points[:10])
    assert load_bin(tmp_path / "k.bin", 4, 0).points.shape == (0, 4)


def test_nan_and_inf_are_kept_as_stored(tmp_path):
    points = np.array([[np.nan, 1, 2, 3], [np.inf, -np.inf, 0, 1]], dtype=np.float32)
    write_bin(tmp_path / "n.bin", points)
    loaded = load_bin(tmp_path / "n.bin", 4, 100)
    assert loaded.points.tobytes() == points.tobytes()


def test_failed_write_leaves_no_file(tmp_path):
    with pytest.raises(InputError, match="cannot write"):
        write_bin(tmp_path / "absent" / "x.bin", np.zeros((3, 4), np.float32))
    with pytest.raises(InputError, match="2-D"):
        write_bin(tmp_path / "x.bin", np.zeros(12, np.float32))
    assert os.listdir(tmp_path) == []


# ----- synthetic frames: shape, determinism ------------------------------------------------


def test_same_seed_same_bytes_different_seed_differs():
    a = nuscenes_frame(np.random.default_rng(7))
    b = nuscenes_frame(7)
    c = nuscenes_frame(8)
    assert a.tobytes() == b.tobytes()
    assert a.shape != c.shape or a.tobytes() != c.tobytes()


def test_frame_i_does_not_depend_on_count(centerpoint_frames):
    (name, cloud), = synthetic_frames("centerpoint", 3, 0, None)[2:]
    assert name == "synthetic-2"
    assert cloud.tobytes() == centerpoint_frames[2][1].tobytes()
    assert synthetic_frames("centerpoint", 2, 1, None)[1][1].tobytes() != cloud.tobytes()


def test_centerpoint_frames_have_exactly_the_requested_points(centerpoint_frames):
    for i, (name, cloud) in enumerate(centerpoint_frames):
        assert name == f"synthetic-{i}"
        assert cloud.shape == (300_000, 5) and cloud.dtype == np.float32
        assert cloud.flags.c_contiguous and np.isfinite(cloud).all()
    for points in (120_000, 380_000):  # thinned, padded with echoes
        assert nuscenes_frame(3, points).shape == (points, 5)


def test_unknown_model_and_bad_arguments_are_input_errors():
    with pytest.raises(InputError, match="pointnet"):
        synthetic_frames("pointnet", 1, 0, None)
    with pytest.raises(InputError):
        synthetic_frames("centerpoint", 1, -1, None)
    with pytest.raises(InputError):
        nuscenes_frame(0, points=0)


# ----- synthetic frames: what a LiDAR engineer checks --------------------------------------


def test_keyframe_points_lie_on_the_32_beams(centerpoint_frames):
    for _, cloud in centerpoint_frames[:3]:
        key = cloud[cloud[:, 4] == 0]
        elevation = np.degrees(np.arctan2(key[:, 2], np.hypot(key[:, 0], key[:, 1])))
        beams = np.sort(HDL32E.elevations_deg)
        nearest = np.abs(elevation[:, None] - beams[None, :]).min(axis=1)
        assert np.quantile(nearest, 0.99) < 0.05
        # Every beam that looks down at the road within range shows up as a histogram peak.
        counts = np.bincount(np.abs(elevation[:, None] - beams[None, :]).argmin(axis=1),
                             minlength=32)
        assert (counts[beams < -1.0] > 200).all()
        # Between two beams there is nothing.
        gaps = (beams[:-1] + beams[1:]) / 2
        assert (np.abs(elevation[:, None] - gaps[None, :]).min(axis=1) > 0.3).mean() > 0.99


def test_kitti_frame_has_64_rings_and_the_usual_size():
    cloud = kitti_frame(11)
    assert cloud.dtype == np.float32 and cloud.shape[1] == 4
    assert 100_000 <= len(cloud) <= 135_000
    assert cloud[:, 3].min() >= 0.0 and cloud[:, 3].max() <= 1.0
    elevation = np.degrees(np.arctan2(cloud[:, 2], np.hypot(cloud[:, 0], cloud[:, 1])))
    rings = np.array(HDL64E.elevations_deg)
    nearest = np.abs(elevation[:, None] - rings[None, :])
    assert np.quantile(nearest.min(axis=1), 0.99) < 0.05
    # Ring by ring, top ring first: the ring index never decreases along the file.
    assert (np.diff(nearest.argmin(axis=1)) >= 0).mean() > 0.999
    assert kitti_frame(11, 150_000).shape == (150_000, 4)
    assert kitti_frame(11, 50_000).shape == (50_000, 4)


def test_ground_is_at_minus_sensor_height(centerpoint_frames):
    for _, cloud in centerpoint_frames:
        near = cloud[(np.hypot(cloud[:, 0], cloud[:, 1]) < 20) & (cloud[:, 2] < -1.0)]
        z = near[:, 2]
        road = z[np.abs(z + 1.84) < 0.1]
        assert len(road) > 0.4 * len(z)
        assert abs(np.median(road) + 1.84) < 0.02


def test_time_lag_keyframe_first_then_sweeps_in_order(centerpoint_frames):
    for _, cloud in centerpoint_frames:
        lag = cloud[:, 4]
        assert lag[0] == 0 and (np.diff(lag) >= 0).all()
        values = np.unique(lag)
        assert len(values) == 10
        np.testing.assert_allclose(values, np.arange(10) * 0.05, atol=0.003)


def test_intensity_is_integer_valued_in_0_255(centerpoint_frames):
    for _, cloud in centerpoint_frames:
        intensity = cloud[:, 3]
        assert intensity.min() >= 0 and intensity.max() <= 255
        assert (intensity == np.round(intensity)).all()
        assert 3 <= np.median(intensity) <= 40  # mostly dark road, a few bright returns
        assert (intensity > 150).any()


def test_static_walls_line_up_across_sweeps_and_moving_cars_smear(monkeypatch):
    # A wall along the road 6 m to the left of its centre, a wall across it 40 m ahead, a
    # car driving ahead at 10 m/s; the ego drives at 12 m/s and turns slightly.
    scene = Scene(road_half_width_m=5.0, kerb_height_m=0.15, sidewalk_width_m=2.0,
                  lane_lines=(), crosswalk_x_m=None, ego_y_m=-2.0, ego_heading_rad=0.0,
                  ego_speed_mps=12.0, ego_yaw_rate_rps=0.08, miss_rate=0.0,
                  boxes=(Box(0.0, 6.5, 0.0, 4.0, 300.0, 1.0),
                         Box(40.5, 0.0, 0.0, 4.0, 1.0, 30.0),
                         Box(15.0, 1.5, 0.2, 1.5, 4.5, 1.8, vx_mps=10.0)))
    monkeypatch.setattr(lidar, "draw_scene", lambda rng: scene)
    cloud = nuscenes_frame(0, points=None)
    # nuScenes LIDAR_TOP: x right, y forward. The wall face is 8 m to the left of the ego.
    wall = cloud[(cloud[:, 0] < -7.0) & (cloud[:, 2] > -1.0) & (np.abs(cloud[:, 1]) < 30)]
    sweeps = np.round(wall[:, 4] / 0.05).astype(int)
    assert set(sweeps) == set(range(10))
    across = cloud[(cloud[:, 1] > 35.0) & (np.abs(cloud[:, 0]) < 5.0)]
    across_sweeps = np.round(across[:, 4] / 0.05).astype(int)
    for s in range(10):
        assert abs(np.median(wall[sweeps == s, 0]) + 8.0) < 0.02
        assert abs(np.median(across[across_sweeps == s, 1]) - 40.0) < 0.02
    car = cloud[(np.abs(cloud[:, 0] + 3.5) < 1.5) & (cloud[:, 1] > 5) & (cloud[:, 1] < 30)
                & (cloud[:, 2] > -1.6)]
    front = [car[np.round(car[:, 4] / 0.05) == s, 1].max() for s in (0, 9)]
    # The car was 10 m/s x 0.45 s further back in the oldest sweep.
    assert front[0] - front[1] == pytest.approx(4.5, abs=0.3)


def test_frames_vary_like_real_ones(centerpoint_frames):
    cells = [occupied_cells(cloud) for _, cloud in centerpoint_frames]
    assert max(cells) >= 1.5 * min(cells)
    in_range = [int(in_box(cloud).sum()) for _, cloud in centerpoint_frames]
    assert min(in_range) > 200_000


# ----- synthetic frames against published dataset statistics -----------------------------
#
# docs/synthetic_frames.md gives the sources and the generator's statistics before and after
# it was adjusted. The frame set is the calibration's: 16 frames, seed 0. The tolerances
# around each published figure are ours and are stated with it.

STATS_FRAMES, STATS_SEED = 16, 0

# nuScenes sweeps hold about 34,500 points (nuscenes-devkit issue #820, "34,500 points per
# LiDAR scan"; issue #796, "all LiDAR scans are around 35000 points"): 32 beams x 1080
# (+-10) points per ring (nuscenes.org, data collection). Ours: the set's mean within 15 %,
# every frame within 25 %.
NUSCENES_POINTS_PER_SWEEP = 34_500
# KITTI's HDL-64E captures about 100k points per revolution (cvlibs.net, KITTI sensor
# setup). Ours: within 30 %.
KITTI_POINTS_PER_SCAN = 100_000
# PointPillars (Lang et al., CVPR 2019, section 2.1): at 0.16 m pillars an HDL-64E cloud
# has 6k-9k non-empty pillars in the KITTI range, ~97 % of the grid empty; the model keeps
# at most 12,000 (second.pytorch, configs/pointpillars/car/xyres_16.config). Ours: the
# set's mean and median inside 6k-9k, every frame above 4k (the band's lower edge / 1.5)
# and within the 12,000 budget.
KITTI_PILLARS = (6_000, 9_000)
KITTI_PILLAR_BUDGET = 12_000
# KITTI (Geiger et al., CVPR 2012, abstract): up to 15 cars and 30 pedestrians are visible
# per image. Counted here in the camera's horizontal field of view (+-40.7 deg, 1242 px at
# a 721 px focal length) within 80 m, hidden or not.
KITTI_MOST_CARS, KITTI_MOST_PEDESTRIANS = 15, 30
CAMERA_HALF_FOV_DEG, CAMERA_RANGE_M = 40.7, 80.0


@pytest.fixture(scope="module")
def calibration_set():
    return [cloud for _, cloud in synthetic_frames("centerpoint", STATS_FRAMES, STATS_SEED,
                                                   None)]


@pytest.fixture(scope="module")
def kitti_set():
    return [cloud for _, cloud in synthetic_frames("pointpillars", STATS_FRAMES, STATS_SEED,
                                                   None)]


def _frame_rng(i):
    # The generator of frame i of the set, as synthetic_frames makes it.
    return np.random.default_rng(np.random.SeedSequence(STATS_SEED, spawn_key=(i,)))


def test_grid_occupancy_counts_as_the_preprocessing_does():
    rng = np.random.default_rng(5)
    for params, dims in ((CENTERPOINT, 5), (POINTPILLARS, 4)):
        points = rng.normal(0.0, 3.0, (3000, dims)).astype(np.float32)
        points[::5, :2] *= 0.05  # crowded cells, to fill pillars past their point limit
        points[:, 0] += 0.0 if params is CENTERPOINT else 3.0
        points[7, 1], points[8, 0] = np.nan, np.inf
        for max_pillars in (params.max_pillars, 60):  # room for all, and running out
            small = params.with_overrides(max_pillars=max_pillars, max_points_per_pillar=4,
                                          max_input_points=2500)
            expected = preprocess(points, small)
            counted = grid_occupancy(points, small)
            assert (counted.valid, counted.pillars, counted.kept) == (
                expected["valid"], expected["pillars"], expected["kept"])
            # without a pillar cap: a pillar for every cell of the grid
            uncapped = preprocess(points, small.with_overrides(
                max_pillars=small.x_len * small.y_len))
            assert (counted.cells, counted.kept_uncapped) == (
                uncapped["pillars"], uncapped["kept"])
        assert counted.cells > counted.pillars and counted.kept_uncapped > counted.kept


def test_nuscenes_sweeps_hold_about_the_published_number_of_points():
    per_sweep = np.array([len(nuscenes_frame(_frame_rng(i), points=None))
                          for i in range(STATS_FRAMES)]) / lidar.NUSCENES_SWEEPS
    assert abs(per_sweep.mean() / NUSCENES_POINTS_PER_SWEEP - 1) <= 0.15
    assert (np.abs(per_sweep / NUSCENES_POINTS_PER_SWEEP - 1) <= 0.25).all()


def test_centerpoint_frames_fit_the_models_pillar_budget(calibration_set):
    occupancy = [grid_occupancy(cloud, CENTERPOINT) for cloud in calibration_set]
    # No frame opens more cells than the model has pillars, so none loses points to the
    # shared last pillar; and most points fall inside the 51.2 m range.
    assert max(o.cells for o in occupancy) < CENTERPOINT.max_pillars
    assert min(o.valid for o in occupancy) > 0.85 * CENTERPOINT.max_input_points


def test_kitti_frames_have_the_published_points_and_pillars(kitti_set):
    points = np.array([len(cloud) for cloud in kitti_set])
    assert (np.abs(points / KITTI_POINTS_PER_SCAN - 1) <= 0.30).all()
    occupancy = [grid_occupancy(cloud, POINTPILLARS) for cloud in kitti_set]
    pillars = np.array([o.pillars for o in occupancy])
    low, high = KITTI_PILLARS
    assert low <= pillars.mean() <= high
    assert low <= np.median(pillars) <= high
    assert pillars.min() >= low / 1.5
    assert max(o.cells for o in occupancy) < KITTI_PILLAR_BUDGET
    cells = POINTPILLARS.x_len * POINTPILLARS.y_len
    assert 1 - pillars.mean() / cells >= 0.95  # "~97 % sparsity"


def _in_camera_view(box, ego_y_m):
    x, y = box.x_m, box.y_m - ego_y_m
    return (x > 0 and np.hypot(x, y) < CAMERA_RANGE_M
            and abs(np.degrees(np.arctan2(y, x))) < CAMERA_HALF_FOV_DEG)


def test_scenes_are_no_busier_than_kitti_reports():
    for i in range(STATS_FRAMES):
        scene = draw_scene(_frame_rng(i))
        seen = [b for b in scene.boxes if _in_camera_view(b, scene.ego_y_m)]
        cars = [b for b in seen if b.material == Material.VEHICLE_BODY and b.length_m < 5.0]
        people = [b for b in seen if b.material == Material.SOLID
                  and 1.5 <= b.top_m - b.bottom_m <= 2.0
                  and 0.4 <= b.length_m <= 0.75 and 0.4 <= b.width_m <= 0.65]
        assert len(cars) <= KITTI_MOST_CARS, i
        assert len(people) <= KITTI_MOST_PEDESTRIANS, i

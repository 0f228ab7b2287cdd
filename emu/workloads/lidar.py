"""Point-cloud input for the CenterPoint (nuScenes) and PointPillars (KITTI) preprocessing.

Two halves:

- **Files.** `load_bin` reads a raw little-endian float32 `.bin` (no header, `dims` values
  per point) exactly as the board does, keeping only the first `max_points` points and
  saying how many it dropped; a file whose size is not a whole number of points is refused
  rather than silently truncated (spec §2). `file_columns` tells the values
  per point from a file's name where the name fixes it (`*.pcd.bin`); any other `.bin`
  holds the model's (spec §2), and `implausible_times` spots a 4-value file read as 5.
  `write_bin` writes one atomically.
- **Synthetic frames.** A small ray caster scans a randomly drawn street scene with a
  spinning LiDAR model, so that the preprocessing sees what real frames look like: beam
  rings on the ground, dense vertical structures, shadows behind objects, dropouts, ten
  merged sweeps with ego motion. `nuscenes_frame`, `kitti_frame` and `synthetic_frames`
  are the entry points; `draw_scene` and `scan` are public so a test or a study can fix a
  scene and vary one thing. `grid_occupancy` counts what a frame gives a pillar model
  (valid points, pillars, kept points), to compare the frames with published dataset
  statistics (docs/synthetic_frames.md).

The scene (world frame: x along the road, y to the left, z up, road surface at z = 0):

- a straight road of 2-6 lanes, each 3.0-3.7 m wide, two-way or (20 %) one-way, with
  painted lane lines (dashed dividers, solid edge and centre lines), kerbs 0.10-0.18 m
  high, sidewalks 1.5-5 m wide and flat terrain beyond them at kerb height;
- on each side independently: nothing (10 %), a fence or noise barrier 1-3 m high (20 %),
  a row of buildings at the back of the sidewalk (45 %) or set back 5-20 m (25 %);
  buildings are 8-45 m long with gaps (side streets), 4-25 m high, and their upper-floor
  windows swallow most beams (glass);
- 0-40 vehicles (cars as a lower body plus a cabin; vans; trucks and buses), parked along
  the kerb or driving in their lane's direction at 0-14 m/s; in 5 % of the scenes a bus or
  truck drives or stands right beside the ego vehicle;
- 0-15 pedestrians on the sidewalks, or (15 % of scenes) a crowd of 12-30 on and around a
  zebra crossing 7-15 m ahead while the ego vehicle waits;
- 0-24 poles (street lights, sign posts with retro-reflective plates);
- vegetation clutter: 0-40 bushes and street trees whose foliage is porous (a beam stops
  after an exponentially distributed free path inside it, or passes through);
- the ego vehicle: in a lane of its direction, stopped (at every crowd, and in 15 % of the
  other scenes) or at 2-16 m/s, small heading error and yaw rate.

Sensor model: every beam of every azimuth step is a ray; the nearest of the road, kerb,
sidewalk and the objects' boxes (yawed, moving objects at their position at the sweep's
time) wins. A return needs enough signal: reflectivity x cos(incidence) x (100 m / range)^2,
with log-normal fading, above a threshold, so dark surfaces at grazing angles fade out at
50-70 m; beyond the maximum range, into the sky or through glass there is no return; on top
of that a few per cent of returns are missed at random. The range carries 2 cm (1 sigma)
Gaussian noise. The intensity grows with reflectivity and incidence, falls with range for
the HDL-32E (raw intensity, an integer 0-255 as nuScenes stores it) and not for the
HDL-64E (KITTI's calibrated reflectance in [0, 1], two decimals); retro-reflective licence
plates and signs saturate.

Point order follows the sensors' files: nuScenes stores each sweep column by column (all
32 lasers of one firing, in firing order), KITTI ring by ring; the rotation is clockwise
seen from above and starts behind the vehicle. Output frames are the sensors' own:
nuScenes LIDAR_TOP is x right, y forward, z up; KITTI velodyne is x forward, y left, z up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from emu.errors import InputError
from emu.files import replace_file

if TYPE_CHECKING:
    from emu.workloads.pointcloud.params import PillarParams

# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------

_FLOAT_BYTES = 4
# Values per point by file name. nuScenes' LIDAR_TOP files (`*.pcd.bin`) hold x, y, z,
# intensity and the ring index; any other `.bin` holds the model's values per point (spec §2:
# nuScenes merged-sweep `.bin` files 5, KITTI velodyne `.bin` files 4), so its name does not
# fix its count: None. The name is all a raw float32 file says about its format.
FILE_COLUMNS: tuple[tuple[str, int | None, str], ...] = (
    (".pcd.bin", 5, "nuScenes .pcd.bin"), (".bin", None, ".bin"))


def file_columns(path: str | os.PathLike[str]) -> tuple[int | None, str]:
    """The values per point of a point file by its name (None: the model's), and the format
    that says so. Raises `InputError` for a name no format claims."""
    name = Path(path).name.lower()
    for suffix, columns, what in FILE_COLUMNS:
        if name.endswith(suffix):
            return columns, what
    known = ", ".join(f"{suffix} {columns or 'as the model'}"
                      for suffix, columns, _ in FILE_COLUMNS)
    raise InputError(f"{path}: cannot tell the values per point from the name ({known}); "
                     f"give --columns N")


def implausible_times(points: np.ndarray) -> float:
    """The share of points whose 5th value, read as a nuScenes sweep time t, lies outside
    -1..1 s (merged sweeps span about half a second): high when a 4-value file is read as 5
    values a point, whose 5th column then walks through other points' coordinates."""
    if points.shape[1] < 5 or not len(points):
        return 0.0
    t = points[:, 4]
    return float(np.count_nonzero(~(np.abs(t) <= 1.0)) / len(t))


@dataclass(frozen=True, eq=False)
class LoadedCloud:
    """The points kept from one `.bin` file and what was left out."""

    points: np.ndarray  # float32 [points_read, dims], C-contiguous, values as stored
    points_read: int  # points kept (at most the cap)
    points_dropped: int  # points in the file beyond the cap
    name: str  # file stem, to name the frame in reports


def load_bin(path: str | os.PathLike[str], dims: int, max_points: int) -> LoadedCloud:
    """Read a raw little-endian float32 point file, keeping its first `max_points` points.

    NaN and infinite values are kept as stored: the preprocessing decides they are invalid.
    Raises `InputError` for a missing or unreadable file, or one whose size is not a
    multiple of `4 * dims` bytes.
    """
    if dims < 1:
        raise InputError(f"values per point must be at least 1, got {dims}")
    if max_points < 0:
        raise InputError(f"max points must not be negative, got {max_points}")
    path = Path(path)
    record_bytes = _FLOAT_BYTES * dims
    try:
        with path.open("rb") as f:
            size_bytes = os.fstat(f.fileno()).st_size
            if size_bytes % record_bytes:
                raise InputError(
                    f"{path}: size {size_bytes} bytes is not a multiple of {record_bytes} "
                    f"(float32 x {dims} values per point)")
            points_in_file = size_bytes // record_bytes
            keep = min(points_in_file, max_points)
            values = np.fromfile(f, dtype="<f4", count=keep * dims)
    except OSError as e:
        raise InputError(f"{path}: cannot read point file: {e.strerror or e}") from e
    if values.size != keep * dims:
        raise InputError(f"{path}: file shrank while being read "
                         f"(expected {keep * dims} values, got {values.size})")
    points = np.ascontiguousarray(values.astype(np.float32, copy=False).reshape(keep, dims))
    return LoadedCloud(points=points, points_read=keep,
                       points_dropped=points_in_file - keep, name=path.stem)


def write_bin(path: str | os.PathLike[str], points: np.ndarray) -> None:
    """Write points [n, dims] as a raw little-endian float32 file, atomically.

    The data goes to a temporary file in the same folder, which then replaces `path`, so a
    failure never leaves a partial file behind.
    """
    path = Path(path)
    if np.ndim(points) != 2:
        raise InputError(f"{path}: points must be a 2-D array [n, dims], "
                         f"got shape {np.shape(points)}")
    data = np.ascontiguousarray(points, dtype="<f4")
    try:
        replace_file(path, data.tobytes())
    except OSError as e:
        raise InputError(f"{path}: cannot write point file: {e.strerror or e}") from e


# ---------------------------------------------------------------------------------------
# Sensors
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lidar:
    """A spinning LiDAR: its lasers, its azimuth resolution, its mounting, its output."""

    name: str
    elevations_deg: tuple[float, ...]  # one per laser, in the order a column is stored
    azimuth_steps: int  # firings per revolution
    height_m: float  # optical centre above the road
    max_range_m: float
    range_noise_m: float  # 1 sigma, along the ray
    column_major: bool  # files store column by column (nuScenes) or ring by ring (KITTI)
    intensity_full_scale: float  # value of a saturated return: 255 (raw) or 1 (reflectance)
    intensity_step: float  # resolution the file stores intensity with
    intensity_falloff_m: float | None  # raw intensity is down by sqrt(2) at this range
    intensity_gamma: float  # response curve: 1 linear (raw), 0.5 compressive (calibrated)


def _hdl32e_firing_order() -> tuple[float, ...]:
    # HDL-32E lasers are evenly spread over -30.67..+10.67 deg and fire interleaved: laser 0
    # is the lowest, laser 1 the 17th lowest, laser 2 the 2nd lowest, and so on.
    ascending = np.linspace(-30.67, 10.67, 32)
    order = np.ravel(np.column_stack([np.arange(16), np.arange(16, 32)]))
    return tuple(float(round(e, 3)) for e in ascending[order])


def _hdl64e_rings() -> tuple[float, ...]:
    # HDL-64E: an upper block of 32 lasers at 1/3 deg spacing and a lower block of 32 at
    # ~1/2 deg spacing; KITTI files hold the rings from the top one down.
    upper = np.linspace(2.0, -8.33, 32)
    lower = np.linspace(-8.83, -24.8, 32)
    return tuple(float(round(e, 3)) for e in np.concatenate([upper, lower]))


HDL32E = Lidar(name="HDL-32E", elevations_deg=_hdl32e_firing_order(), azimuth_steps=1080,
               height_m=1.84, max_range_m=100.0, range_noise_m=0.02, column_major=True,
               intensity_full_scale=255.0, intensity_step=1.0, intensity_falloff_m=40.0,
               intensity_gamma=1.0)
HDL64E = Lidar(name="HDL-64E", elevations_deg=_hdl64e_rings(), azimuth_steps=2000,
               height_m=1.73, max_range_m=120.0, range_noise_m=0.02, column_major=False,
               intensity_full_scale=1.0, intensity_step=0.01, intensity_falloff_m=None,
               intensity_gamma=0.5)

NUSCENES_SWEEPS = 10
NUSCENES_SWEEP_PERIOD_S = 0.05  # HDL-32E at 20 Hz
NUSCENES_POINTS = 300_000

# A return is detected when reflectivity * cos(incidence) * (_SIGNAL_REF_M / range)^2, with
# log-normal fading, exceeds _SIGNAL_MIN: a 20 % diffuse target head-on reaches ~100 m,
# asphalt at the grazing angle of a far ring fades out between 50 and 70 m.
_SIGNAL_REF_M = 100.0
_SIGNAL_MIN = 0.01
_SIGNAL_FADING_SIGMA = 0.5
_INTENSITY_NOISE_SIGMA = 0.25
_RETRO_REFLECTIVITY = 4.0  # licence plates and signs: far brighter than any diffuse surface
_PLATE_HALF_WIDTH_M = 0.26  # a 520 mm EU plate
_PLATE_HEIGHT_M = (0.25, 0.40)  # above the bottom of the vehicle body
_FACADE_BAY_M, _FACADE_WINDOW_M = 3.0, (0.8, 2.2)  # window columns along a facade
_FLOOR_M, _FLOOR_WINDOW_M = 3.2, (0.9, 2.4)  # window rows up a facade, above the ground floor
_GLASS_LOSS = 0.7  # share of beams into a window that return nothing


# ---------------------------------------------------------------------------------------
# Scenes
# ---------------------------------------------------------------------------------------


class Material(IntEnum):
    """What a box is made of, where that changes how beams return from it."""

    SOLID = 0  # opaque, diffuse
    VEHICLE_BODY = 1  # carries a retro-reflective licence plate front and back
    BUILDING = 2  # upper-floor windows swallow most beams
    FOLIAGE = 3  # porous: beams stop after a random free path or pass through


class Box(NamedTuple):
    """An upright box, yawed about z, moving at a constant velocity (world frame, at the
    keyframe's time)."""

    x_m: float  # centre
    y_m: float
    bottom_m: float
    top_m: float
    length_m: float  # along its heading
    width_m: float
    yaw_rad: float = 0.0
    vx_mps: float = 0.0
    vy_mps: float = 0.0
    material: int = Material.SOLID
    reflectivity: float = 0.3  # diffuse reflectivity at the laser's wavelength
    free_path_m: float = 0.0  # mean free path inside FOLIAGE


class LaneLine(NamedTuple):
    y_m: float
    dashed: bool


@dataclass(frozen=True)
class Scene:
    """A street scene at the keyframe's time and how the ego vehicle moves through it."""

    road_half_width_m: float
    kerb_height_m: float
    sidewalk_width_m: float
    lane_lines: tuple[LaneLine, ...]
    crosswalk_x_m: tuple[float, float] | None  # zebra stripes across the road, x range
    ego_y_m: float  # ego position at the keyframe is (0, ego_y_m)
    ego_heading_rad: float
    ego_speed_mps: float
    ego_yaw_rate_rps: float
    miss_rate: float  # fraction of returns lost at random
    boxes: tuple[Box, ...]


_ASPHALT = 0.08
_PAINT = 0.55
_KERB = 0.30
_CONCRETE = 0.25
_TERRAIN = 0.15
_GLASS = 0.06
_PAINT_HALF_WIDTH_M = 0.075
_DASH_M, _DASH_PERIOD_M = 3.0, 9.0

# How often each kind of scene comes up and how busy it is. docs/synthetic_frames.md
# compares the frames with published nuScenes and KITTI statistics and says why these
# values: a crowd stays within the 30 pedestrians KITTI reports as its most per image; a
# bus or truck right beside the ego, crowds and wide-open roadsides made the frames' pillar
# counts spread far beyond the 6k-9k PointPillars reports for KITTI.
_CROWD_SHARE = 0.15  # scenes with a crowd on a zebra crossing ahead; the ego waits
_CROWD_PEOPLE = (12, 30)  # people in such a crowd, on the crossing and beside it
_STOPPED_SHARE = 0.15  # other scenes where the ego stands (jam, red light)
_SIDE_MODES = {"open": 0.10, "fence": 0.20, "near": 0.45, "far": 0.25}  # each roadside
_SETBACK_M = {"near": (0.0, 2.0), "far": (5.0, 20.0)}  # facade line behind the sidewalk
_BESIDE_SHARE = 0.05  # scenes with a bus or truck right beside the ego
_VEHICLES_MAX = 40  # vehicles drawn at random along the road, 0 to this many


def _as_generator(rng: np.random.Generator | int) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def draw_scene(rng: np.random.Generator | int) -> Scene:
    """A random street scene, as described in the module docstring."""
    rng = _as_generator(rng)
    lanes = int(rng.integers(2, 7))
    lane_width = float(rng.uniform(3.0, 3.7))
    half = lanes * lane_width / 2
    lane_y = [-half + lane_width * (i + 0.5) for i in range(lanes)]
    one_way = rng.random() < 0.2
    lane_dir = [1 if one_way or y <= 0 else -1 for y in lane_y]
    lines = [LaneLine(-half + 0.3, False), LaneLine(half - 0.3, False)]
    for i in range(1, lanes):
        lines.append(LaneLine(-half + lane_width * i, lane_dir[i] == lane_dir[i - 1]))
    kerb = float(rng.uniform(0.10, 0.18))
    sidewalk = float(rng.uniform(1.5, 5.0))
    ego_lane = int(rng.choice([i for i in range(lanes) if lane_dir[i] > 0]))
    ego_y = lane_y[ego_lane] + float(rng.normal(0, 0.15))

    crowd = rng.random() < _CROWD_SHARE
    # Waiting at the crossing, or in a jam, at a light.
    stopped = crowd or rng.random() < _STOPPED_SHARE
    ego_speed = 0.0 if stopped else float(rng.uniform(2.0, 16.0))
    crosswalk = None
    if crowd:
        start = float(rng.uniform(7.0, 15.0))
        crosswalk = (start, start + float(rng.uniform(3.0, 5.0)))

    boxes: list[Box] = []
    facade = {side: _draw_side(rng, side, half, sidewalk, kerb, boxes) for side in (1, -1)}
    _draw_vegetation(rng, half, sidewalk, facade, boxes)
    _draw_poles(rng, half, boxes)
    _draw_vehicles(rng, lane_y, lane_dir, lane_width, ego_lane, ego_speed, crosswalk, boxes)
    _draw_pedestrians(rng, half, sidewalk, kerb, ego_y, crosswalk, boxes)
    return Scene(road_half_width_m=half, kerb_height_m=kerb, sidewalk_width_m=sidewalk,
                 lane_lines=tuple(lines), crosswalk_x_m=crosswalk, ego_y_m=ego_y,
                 ego_heading_rad=float(rng.normal(0, 0.015)), ego_speed_mps=ego_speed,
                 ego_yaw_rate_rps=float(np.clip(rng.normal(0, 0.04), -0.1, 0.1)),
                 miss_rate=float(rng.uniform(0.01, 0.05)), boxes=tuple(boxes))


def _draw_side(rng: np.random.Generator, side: int, half: float, sidewalk: float,
               kerb: float, boxes: list[Box]) -> float | None:
    """Buildings or a fence along one side; returns how far out the facade line is."""
    mode = rng.choice(list(_SIDE_MODES), p=list(_SIDE_MODES.values()))
    edge = half + sidewalk
    if mode == "open":
        return None
    if mode == "fence":
        y = edge + float(rng.uniform(0.0, 1.0))
        boxes.append(Box(0.0, side * (y + 0.15), 0.0, kerb + float(rng.uniform(1.0, 3.0)),
                         300.0, 0.3, reflectivity=float(rng.uniform(0.2, 0.4))))
        return y
    line = edge + float(rng.uniform(*_SETBACK_M[str(mode)]))
    x = -150.0 - float(rng.uniform(0.0, 10.0))
    while x < 150.0:
        length = float(rng.uniform(8.0, 45.0))
        if rng.random() < 0.3:
            x += float(rng.uniform(4.0, 20.0))  # a side street or a gap between buildings
        depth = float(rng.uniform(8.0, 20.0))
        y = line + float(rng.uniform(0.0, 1.0)) + depth / 2
        boxes.append(Box(x + length / 2, side * y, 0.0, kerb + float(rng.uniform(4.0, 25.0)),
                         length, depth, material=Material.BUILDING,
                         reflectivity=float(rng.uniform(0.15, 0.5))))
        x += length
    return line


def _draw_vegetation(rng: np.random.Generator, half: float, sidewalk: float,
                     facade: dict[int, float | None], boxes: list[Box]) -> None:
    clutter = float(rng.uniform(0.0, 1.0))
    for _ in range(round(clutter * 40)):
        side = int(rng.choice([1, -1]))
        x = float(rng.uniform(-80.0, 80.0))
        line = facade[side]
        room = 25.0 if line is None else line - half - sidewalk - 0.5
        if room > 1.5 and rng.random() < 0.6:
            size = float(rng.uniform(1.0, 4.0))
            y = half + sidewalk + float(rng.uniform(0.5, room - 0.5))
            boxes.append(Box(x, side * y, 0.0, float(rng.uniform(0.6, 2.5)), size,
                             size * float(rng.uniform(0.6, 1.0)), float(rng.uniform(0, 3)),
                             material=Material.FOLIAGE, reflectivity=0.4,
                             free_path_m=float(rng.uniform(0.2, 0.6))))
            continue
        # A street tree on the sidewalk by the kerb: trunk and a crown that may overhang.
        y = side * (half + 0.7)
        crown = float(rng.uniform(3.0, 6.0))
        base = float(rng.uniform(2.5, 3.5))
        boxes.append(Box(x, y, 0.0, base + 0.5, 0.35, 0.35, reflectivity=0.25))
        boxes.append(Box(x, y, base, base + float(rng.uniform(3.0, 6.0)), crown, crown,
                         float(rng.uniform(0, 3)), material=Material.FOLIAGE,
                         reflectivity=0.45, free_path_m=float(rng.uniform(0.3, 0.8))))


def _draw_poles(rng: np.random.Generator, half: float, boxes: list[Box]) -> None:
    for _ in range(int(rng.integers(0, 25))):
        x = float(rng.uniform(-80.0, 80.0))
        y = float(rng.choice([1, -1])) * (half + float(rng.uniform(0.3, 0.8)))
        if rng.random() < 0.3:
            top = float(rng.uniform(2.2, 3.0))
            boxes.append(Box(x, y, 0.0, top, 0.08, 0.08, reflectivity=0.3))
            boxes.append(Box(x - 0.06, y, top - 0.7, top, 0.04, 0.7,
                             reflectivity=_RETRO_REFLECTIVITY))
        else:
            boxes.append(Box(x, y, 0.0, float(rng.uniform(3.5, 9.0)), 0.25, 0.25,
                             reflectivity=0.3))


# Length, width and height ranges (m) of the vehicles drawn at random.
_VEHICLE_SIZES_M = {
    "car": ((4.2, 4.9), (1.75, 1.95), (1.4, 1.65)),
    "van": ((5.0, 6.0), (1.95, 2.1), (1.9, 2.4)),
    "truck": ((8.0, 12.0), (2.45, 2.55), (3.0, 3.8)),
}


def _draw_vehicles(rng: np.random.Generator, lane_y: list[float], lane_dir: list[int],
                   lane_width: float, ego_lane: int, ego_speed: float,
                   crosswalk: tuple[float, float] | None, boxes: list[Box]) -> None:
    # Footprints taken so far along x per lane, as (centre, half length, speed): vehicles
    # must not overlap each other, the ego vehicle's path or the crossing over the sweeps.
    taken: list[list[tuple[float, float, float]]] = [[] for _ in lane_y]
    taken[ego_lane].append((0.0, 2.5, ego_speed))
    blocked = (crosswalk[0] - 1.0, crosswalk[1] + 1.0) if crosswalk else None
    outer = {0, len(lane_y) - 1}

    def place(lane: int, x: float, half_len: float, speed: float) -> bool:
        reach = half_len + 0.5 * abs(speed) + 1.0  # 0.45 s of motion and a 1 m gap
        for cx, ch, cs in taken[lane]:
            if abs(x - cx) < reach + ch + 0.5 * abs(cs):
                return False
        if blocked and x + reach > blocked[0] and x - reach < blocked[1]:
            return False
        taken[lane].append((x, half_len, speed))
        return True

    if rng.random() < _BESIDE_SHARE:
        neighbours = [i for i in (ego_lane - 1, ego_lane + 1) if 0 <= i < len(lane_y)]
        if neighbours:
            lane = int(rng.choice(neighbours))
            length = float(rng.uniform(10.0, 14.0))
            speed = (ego_speed if lane_dir[lane] > 0 else -float(rng.uniform(0.0, 8.0)))
            x = float(rng.uniform(-5.0, 5.0))
            if place(lane, x, length / 2, speed):
                _add_vehicle(rng, boxes, x, lane_y[lane], lane_dir[lane], speed, length, 2.55,
                             float(rng.uniform(3.0, 3.8)), "bus")

    for _ in range(int(rng.integers(0, _VEHICLES_MAX + 1))):
        lane = int(rng.integers(0, len(lane_y)))
        kind = str(rng.choice(list(_VEHICLE_SIZES_M), p=[0.77, 0.15, 0.08]))
        length, width, height = (float(rng.uniform(lo, hi)) for lo, hi in _VEHICLE_SIZES_M[kind])
        parked = lane in outer and lane != ego_lane and rng.random() < 0.5
        moving = not parked and crosswalk is None and rng.random() < 0.85
        speed = lane_dir[lane] * float(rng.uniform(1.0, 14.0)) if moving else 0.0
        y = lane_y[lane] + (float(np.sign(lane_y[lane])) * 0.6 if parked
                            else float(rng.normal(0, 0.2)))
        # Parked or drifting, a vehicle stays inside its lane.
        y = float(np.clip(y, lane_y[lane] - (lane_width - width) / 2,
                          lane_y[lane] + (lane_width - width) / 2))
        for _attempt in range(3):
            x = float(rng.uniform(-80.0, 80.0))
            if place(lane, x, length / 2, speed):
                _add_vehicle(rng, boxes, x, y, lane_dir[lane], speed, length, width, height,
                             kind)
                break


def _add_vehicle(rng: np.random.Generator, boxes: list[Box], x: float, y: float,
                 direction: int, speed: float, length: float, width: float, height: float,
                 kind: str) -> None:
    yaw = (0.0 if direction > 0 else np.pi) + float(rng.normal(0, 0.02))
    cos_yaw, sin_yaw = float(np.cos(yaw)), float(np.sin(yaw))
    vx, vy = abs(speed) * cos_yaw, abs(speed) * sin_yaw
    paint = float(rng.uniform(0.05, 0.6))  # from black to white paint
    if kind == "car":
        body_top = 0.95
        boxes.append(Box(x, y, 0.2, body_top, length, width, yaw, vx, vy,
                         Material.VEHICLE_BODY, paint))
        back = 0.05 * length  # the cabin sits slightly to the rear
        boxes.append(Box(x - back * cos_yaw, y - back * sin_yaw, body_top, height,
                         0.55 * length, 0.9 * width, yaw, vx, vy, Material.SOLID, _GLASS))
    else:
        bottom = 0.25 if kind == "van" else 0.4
        boxes.append(Box(x, y, bottom, height, length, width, yaw, vx, vy,
                         Material.VEHICLE_BODY, paint))


def _draw_pedestrians(rng: np.random.Generator, half: float, sidewalk: float, kerb: float,
                      ego_y: float, crosswalk: tuple[float, float] | None,
                      boxes: list[Box]) -> None:
    people: list[tuple[float, float, float]] = []  # x, y, heading (nan when standing)
    for _ in range(int(rng.integers(0, 16))):
        y = float(rng.choice([1, -1])) * (half + float(rng.uniform(0.3, sidewalk - 0.3)))
        heading = float(rng.choice([0.0, np.pi])) if rng.random() < 0.7 else np.nan
        people.append((float(rng.uniform(-60.0, 60.0)), y, heading))
    if crosswalk:
        x0, x1 = crosswalk
        for _ in range(int(rng.integers(_CROWD_PEOPLE[0], _CROWD_PEOPLE[1] + 1))):
            if rng.random() < 0.6:
                heading = float(rng.choice([np.pi / 2, -np.pi / 2]))
                people.append((float(rng.uniform(x0, x1)), float(rng.uniform(-half, half)),
                               heading))
            else:
                y = float(rng.choice([1, -1])) * (half + float(rng.uniform(0.3, sidewalk)))
                people.append((float(rng.uniform(x0 - 6.0, x1 + 6.0)), y, np.nan))
    for x, y, heading in people:
        if abs(x) < 3.0 and abs(y - ego_y) < 1.8:
            continue
        speed = 0.0 if np.isnan(heading) else float(rng.uniform(1.0, 1.6))
        yaw = float(rng.uniform(0, 2 * np.pi)) if np.isnan(heading) else heading
        boxes.append(Box(x, y, kerb if abs(y) > half else 0.0,
                         (kerb if abs(y) > half else 0.0) + float(rng.uniform(1.55, 1.9)),
                         float(rng.uniform(0.45, 0.7)), float(rng.uniform(0.45, 0.6)), yaw,
                         speed * float(np.cos(yaw)), speed * float(np.sin(yaw)),
                         reflectivity=float(rng.uniform(0.15, 0.5))))


# ---------------------------------------------------------------------------------------
# Ray casting
# ---------------------------------------------------------------------------------------


class Scan(NamedTuple):
    """Returns of one or more sweeps, merged into the keyframe's sensor frame.

    Coordinates use the vehicle convention (x forward, y left, z up, origin at the sensor);
    the frame functions turn them into each dataset's own convention.
    """

    xyz: np.ndarray  # float64 [n, 3]
    intensity: np.ndarray  # float64 [n], in [0, 1] of the sensor's full scale
    sweep: np.ndarray  # int64 [n], 0 = keyframe
    origins: np.ndarray  # float64 [sweeps, 3], each sweep's sensor position


class _Rays(NamedTuple):
    """Directions of one sweep's rays, laser by column, in the world frame."""

    cos_el: np.ndarray  # [lasers]
    sin_el: np.ndarray
    cos_az: np.ndarray  # [columns], world azimuth
    sin_az: np.ndarray
    az0: float  # world azimuth of column 0; column c points at az0 - c * step


def _ego_poses(scene: Scene, lags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ego (x, y, heading) at each lag before the keyframe: constant speed and yaw rate."""
    v, w, h0 = scene.ego_speed_mps, scene.ego_yaw_rate_rps, scene.ego_heading_rad
    heading = h0 - w * lags
    if abs(w) < 1e-9:
        x = -v * lags * np.cos(h0)
        y = -v * lags * np.sin(h0)
    else:
        x = v / w * (np.sin(heading) - np.sin(h0))
        y = -v / w * (np.cos(heading) - np.cos(h0))
    return x, scene.ego_y_m + y, heading


def scan(scene: Scene, lidar: Lidar, rng: np.random.Generator | int,
         lags_s: np.ndarray | None = None) -> Scan:
    """Scan `scene` once per lag (seconds before the keyframe; default one sweep, lag 0).

    The first lag is the keyframe's: every sweep's returns come back in its sensor frame.
    """
    rng = _as_generator(rng)
    lags = np.zeros(1) if lags_s is None else np.asarray(lags_s, dtype=np.float64)
    table = np.array(scene.boxes, dtype=np.float64).reshape(-1, len(Box._fields))
    xs, ys, headings = _ego_poses(scene, lags)
    elev = np.radians(np.array(lidar.elevations_deg))
    step = 2 * np.pi / lidar.azimuth_steps
    columns = np.arange(lidar.azimuth_steps)
    # The keyframe's sensor frame: world points are rotated by minus its heading.
    c0, s0 = np.cos(headings[0]), np.sin(headings[0])
    parts_xyz, parts_int, parts_sweep, origins = [], [], [], []
    for sweep, (lag, ox, oy, heading) in enumerate(zip(lags, xs, ys, headings, strict=True)):
        # Each revolution starts behind the vehicle, at an arbitrary phase of the encoder.
        az0 = float(heading + np.pi + rng.uniform(0.0, step))
        az = az0 - columns * step
        rays = _Rays(np.cos(elev), np.sin(elev), np.cos(az), np.sin(az), az0)
        xyz, intensity = _sweep(scene, table, lidar, rays, float(lag), float(ox), float(oy),
                                rng)
        rel_x, rel_y = xyz[:, 0] - xs[0], xyz[:, 1] - ys[0]
        local = np.column_stack([c0 * rel_x + s0 * rel_y, -s0 * rel_x + c0 * rel_y,
                                 xyz[:, 2] - lidar.height_m])
        parts_xyz.append(local)
        parts_int.append(intensity)
        parts_sweep.append(np.full(len(local), sweep, dtype=np.int64))
        origins.append((c0 * (ox - xs[0]) + s0 * (oy - ys[0]),
                        -s0 * (ox - xs[0]) + c0 * (oy - ys[0]), 0.0))
    return Scan(np.concatenate(parts_xyz), np.concatenate(parts_int),
                np.concatenate(parts_sweep), np.array(origins, dtype=np.float64))


def _sweep(scene: Scene, table: np.ndarray, lidar: Lidar, rays: _Rays, lag: float,
           ox: float, oy: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One revolution from (ox, oy): world points and intensities, in file order."""
    lasers, cols = len(rays.cos_el), len(rays.cos_az)
    dx = rays.cos_el[:, None] * rays.cos_az[None, :]
    dy = rays.cos_el[:, None] * rays.sin_az[None, :]
    dz = np.broadcast_to(rays.sin_el[:, None], (lasers, cols))
    h = lidar.height_m
    t, reflectivity, cos_inc = _cast_ground(scene, ox, oy, h, dx.ravel(), dy.ravel(),
                                            dz.ravel())
    if len(table):
        _cast_boxes(table, lag, ox, oy, lidar, rays, t, reflectivity, cos_inc, rng)

    n = lasers * cols
    with np.errstate(divide="ignore", invalid="ignore"):
        signal = reflectivity * cos_inc * (_SIGNAL_REF_M / t) ** 2
    fading = np.exp(_SIGNAL_FADING_SIGMA * rng.standard_normal(n))
    valid = ((t <= lidar.max_range_m) & (signal * fading > _SIGNAL_MIN)
             & (rng.random(n) >= scene.miss_rate))
    r = t + lidar.range_noise_m * rng.standard_normal(n)
    falloff = (1.0 if lidar.intensity_falloff_m is None
               else 1.0 / np.sqrt(1.0 + (np.minimum(t, 1e3) / lidar.intensity_falloff_m) ** 2))
    raw = reflectivity * (0.2 + 0.8 * cos_inc) * falloff
    intensity = np.clip(raw ** lidar.intensity_gamma
                        * np.exp(_INTENSITY_NOISE_SIGMA * rng.standard_normal(n)), 0.0, 1.0)

    ray = np.arange(n).reshape(lasers, cols)
    order = ray.T.ravel() if lidar.column_major else ray.ravel()
    keep = order[valid[order]]
    rk = r[keep]
    xyz = np.column_stack([ox + rk * dx.ravel()[keep], oy + rk * dy.ravel()[keep],
                           h + rk * dz.ravel()[keep]])
    return xyz, intensity[keep]


def _cast_ground(scene: Scene, ox: float, oy: float, h: float, dx: np.ndarray,
                 dy: np.ndarray, dz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distance to the road, kerb faces, sidewalks and terrain, with reflectivity and
    cos(incidence); inf where a ray never comes down."""
    half = scene.road_half_width_m
    with np.errstate(divide="ignore", invalid="ignore"):
        down = dz < 0
        t_road = np.where(down, -h / dz, np.inf)
        x_road, y_road = ox + t_road * dx, oy + t_road * dy
        on_road = np.abs(y_road) <= half
        t_top = np.where(down, (scene.kerb_height_m - h) / dz, np.inf)
        y_top = oy + t_top * dy
        beyond = np.abs(y_top) > half  # already past the kerb line at kerb height
        t_kerb = (np.copysign(half, dy) - oy) / dy
    t = np.where(on_road, t_road, np.where(beyond, t_top, t_kerb))
    t = np.where(down, t, np.inf)
    cos_inc = np.where(on_road | beyond, -dz, np.abs(dy))
    outside = np.where(np.abs(y_top) <= half + scene.sidewalk_width_m, _CONCRETE, _TERRAIN)
    reflectivity = np.where(on_road, _ASPHALT, np.where(beyond, outside, _KERB))

    paint = np.zeros(len(t), dtype=bool)
    x_road, y_road = np.where(on_road, x_road, 0.0), np.where(on_road, y_road, np.inf)
    dash = np.mod(x_road, _DASH_PERIOD_M) < _DASH_M
    for line in scene.lane_lines:
        near = np.abs(y_road - line.y_m) < _PAINT_HALF_WIDTH_M
        paint |= near & dash if line.dashed else near
    if scene.crosswalk_x_m is not None:
        x0, x1 = scene.crosswalk_x_m
        stripe = np.mod(np.where(on_road, y_road, 0.0), 1.0) < 0.5
        paint |= (x_road >= x0) & (x_road <= x1) & stripe
    reflectivity = np.where(paint, _PAINT, reflectivity)
    return t, reflectivity, cos_inc


def _cast_boxes(table: np.ndarray, lag: float, ox: float, oy: float, lidar: Lidar,
                rays: _Rays, t_best: np.ndarray, reflectivity: np.ndarray,
                cos_inc: np.ndarray, rng: np.random.Generator) -> None:
    """Intersect the rays with every box; where a box is nearer than what the ray hit so
    far, it wins (t_best, reflectivity and cos_inc are updated in place).

    Each box is tested only against the rays of its angular window (the columns between its
    extreme corner azimuths, the lasers between its extreme elevations), so the cost follows
    the number of rays that can hit it, not lasers x columns x boxes.
    """
    cols = len(rays.cos_az)
    step = 2 * np.pi / cols
    h = lidar.height_m
    (x, y, bottom, top, length, width, yaw, vx, vy, material, rho, free_path) = table.T
    cx, cy = x - vx * lag, y - vy * lag
    cyaw, syaw = np.cos(yaw), np.sin(yaw)
    hl, hw, hh = length / 2, width / 2, (top - bottom) / 2
    # The sensor in each box's own frame.
    qx = cyaw * (ox - cx) + syaw * (oy - cy)
    qy = -syaw * (ox - cx) + cyaw * (oy - cy)
    qz = h - (bottom + top) / 2
    d_min = np.hypot(np.maximum(np.abs(qx) - hl, 0), np.maximum(np.abs(qy) - hw, 0))
    d_max = np.hypot(np.abs(qx) + hl, np.abs(qy) + hw)
    inside = d_min == 0

    # Azimuth window: corner bearings relative to the bearing of the centre.
    u = np.array([1, 1, -1, -1])[None, :] * hl[:, None]
    v = np.array([1, -1, 1, -1])[None, :] * hw[:, None]
    corner_x = cx[:, None] + cyaw[:, None] * u - syaw[:, None] * v - ox
    corner_y = cy[:, None] + syaw[:, None] * u + cyaw[:, None] * v - oy
    centre = np.arctan2(cy - oy, cx - ox)
    rel = np.mod(np.arctan2(corner_y, corner_x) - centre[:, None] + np.pi, 2 * np.pi) - np.pi
    col_first = np.floor((rays.az0 - centre - rel.max(axis=1)) / step).astype(np.int64)
    col_count = np.ceil((rel.max(axis=1) - rel.min(axis=1)) / step).astype(np.int64) + 2
    col_first = np.where(inside, 0, col_first)
    col_count = np.where(inside, cols, np.minimum(col_count, cols))

    # Elevation window, from the nearest and farthest horizontal distances.
    z_top, z_bottom = top - h, bottom - h
    el_hi = np.arctan2(z_top, np.where(z_top > 0, d_min, d_max))
    el_lo = np.arctan2(z_bottom, np.where(z_bottom > 0, d_max, d_min))
    elev = np.arctan2(rays.sin_el, rays.cos_el)
    by_elev = np.argsort(elev, kind="stable")
    sorted_el = elev[by_elev]
    laser_first = np.searchsorted(sorted_el, el_lo - 1e-4, side="left")
    laser_count = np.searchsorted(sorted_el, el_hi + 1e-4, side="right") - laser_first

    live = np.flatnonzero((d_min < lidar.max_range_m) & (laser_count > 0))
    pairs = col_count[live] * laser_count[live]
    if not pairs.sum():
        return
    box = np.repeat(live, pairs)
    k = np.arange(int(pairs.sum())) - np.repeat(np.cumsum(pairs) - pairs, pairs)
    col = np.mod(col_first[box] + k // laser_count[box], cols)
    laser = by_elev[laser_first[box] + k % laser_count[box]]

    # Ray directions in each box's frame, then the slab test.
    ca = rays.cos_az[col] * cyaw[box] + rays.sin_az[col] * syaw[box]
    sa = rays.sin_az[col] * cyaw[box] - rays.cos_az[col] * syaw[box]
    d = (rays.cos_el[laser] * ca, rays.cos_el[laser] * sa, rays.sin_el[laser])
    o = (qx[box], qy[box], qz[box])
    half = (hl[box], hw[box], hh[box])
    near_t, far_t = [], []
    with np.errstate(divide="ignore", invalid="ignore"):
        for axis in range(3):
            inv = 1.0 / d[axis]
            a, b = (-half[axis] - o[axis]) * inv, (half[axis] - o[axis]) * inv
            near_t.append(np.minimum(a, b))
            far_t.append(np.maximum(a, b))
    t_near = np.maximum(np.maximum(near_t[0], near_t[1]), near_t[2])
    t_far = np.minimum(np.minimum(far_t[0], far_t[1]), far_t[2])
    hit = (t_near <= t_far) & (t_near > 0)
    face = np.where(near_t[0] >= near_t[1], np.where(near_t[0] >= near_t[2], 0, 2),
                    np.where(near_t[1] >= near_t[2], 1, 2))
    cos_hit = np.abs(np.choose(face, d))
    t = t_near

    # Foliage: the beam stops after an exponential free path inside, or passes through.
    porous = np.flatnonzero(hit & (material[box] == Material.FOLIAGE))
    if len(porous):
        depth = rng.exponential(free_path[box[porous]])
        t = t.copy()
        t[porous] = t_near[porous] + depth
        hit[porous] = depth < t_far[porous] - t_near[porous]
        cos_hit[porous] = rng.uniform(0.2, 1.0, len(porous))

    ray = laser * cols + col
    hits = np.flatnonzero(hit)
    np.minimum.at(t_best, ray[hits], t[hits])
    win = hits[t[hits] == t_best[ray[hits]]]
    wbox, wray, wt = box[win], ray[win], t[win]
    w_rho = rho[wbox].copy()
    # Where on its box each winning ray landed, for plates and windows.
    lx = o[0][win] + wt * d[0][win]
    ly = o[1][win] + wt * d[1][win]
    z = bottom[wbox] + hh[wbox] + o[2][win] + wt * d[2][win]
    above_bottom = z - bottom[wbox]
    plate = ((material[wbox] == Material.VEHICLE_BODY) & (face[win] == 0)
             & (np.abs(ly) < _PLATE_HALF_WIDTH_M)
             & (above_bottom > _PLATE_HEIGHT_M[0]) & (above_bottom < _PLATE_HEIGHT_M[1]))
    w_rho[plate] = _RETRO_REFLECTIVITY
    bay = np.mod(np.where(face[win] == 0, ly, lx), _FACADE_BAY_M)
    floor = np.mod(z, _FLOOR_M)
    window = ((material[wbox] == Material.BUILDING) & (face[win] != 2) & (z > _FLOOR_M)
              & (bay > _FACADE_WINDOW_M[0]) & (bay < _FACADE_WINDOW_M[1])
              & (floor > _FLOOR_WINDOW_M[0]) & (floor < _FLOOR_WINDOW_M[1]))
    through_glass = window & (rng.random(len(win)) < _GLASS_LOSS)
    reflectivity[wray] = w_rho
    cos_inc[wray] = cos_hit[win]
    t_best[wray[through_glass]] = np.inf


# ---------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------


def _exact_count(scan_: Scan, points: int | None, rng: np.random.Generator,
                 range_noise_m: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Thin or pad the scan to exactly `points` returns, keeping the file order.

    Too many: a uniformly random subset is kept, in order. Too few: randomly chosen returns
    get a second echo (as a dual-return sensor reports), placed right after the first one,
    at a fresh range-noise draw along the same ray and with fresh intensity fading.
    """
    n = len(scan_.xyz)
    xyz, intensity, sweep = scan_.xyz, scan_.intensity, scan_.sweep
    if points is None or points == n:
        return xyz, intensity, sweep
    if n == 0:
        raise InputError("the synthetic scan produced no points to sample from")
    if points < n:
        index = np.sort(rng.choice(n, size=points, replace=False))
        return xyz[index], intensity[index], sweep[index]
    extra = rng.choice(n, size=points - n, replace=points - n > n)
    index = np.sort(np.concatenate([np.arange(n), extra]), kind="stable")
    echo = np.flatnonzero(np.r_[False, index[1:] == index[:-1]])
    xyz, intensity, sweep = xyz[index], intensity[index].copy(), sweep[index]
    ray = xyz[echo] - scan_.origins[sweep[echo]]
    ray /= np.maximum(np.linalg.norm(ray, axis=1, keepdims=True), 1e-9)
    xyz[echo] += ray * (range_noise_m * rng.standard_normal(len(echo)))[:, None]
    fading = np.exp(_INTENSITY_NOISE_SIGMA * rng.standard_normal(len(echo)))
    intensity[echo] = np.clip(intensity[echo] * fading, 0.0, 1.0)
    return xyz, intensity, sweep


def _quantise_intensity(intensity: np.ndarray, lidar: Lidar) -> np.ndarray:
    levels = lidar.intensity_full_scale / lidar.intensity_step
    return np.round(intensity * levels) * lidar.intensity_step


def _check_points(points: int | None) -> None:
    if points is not None and points < 1:
        raise InputError(f"points per frame must be at least 1, got {points}")


def nuscenes_frame(rng: np.random.Generator | int,
                   points: int | None = NUSCENES_POINTS) -> np.ndarray:
    """A nuScenes-style CenterPoint input: ten merged HDL-32E sweeps, float32 [points, 5].

    Columns x, y, z (m, LIDAR_TOP frame of the keyframe: x right, y forward, z up),
    intensity (integer-valued, 0-255) and the sweep's time lag (s): 0 for the keyframe,
    then about 0.05, 0.10, ... 0.45. Each older sweep was scanned from where the ego vehicle
    was at its time, with moving objects where they were, and transformed into the
    keyframe's frame, so static structure lines up and moving objects smear. Points are in
    sweep order, keyframe first, each sweep in its file order.

    The sweeps are concatenated and then made exactly `points` long (None: as many as the
    scan produced): a uniformly random subset keeps its order when there are too many;
    randomly chosen returns get a dual-return echo right after them when there are too few.
    """
    _check_points(points)
    rng = _as_generator(rng)
    scene = draw_scene(rng)
    # Sweeps come at 20 Hz from a free-running clock: a slightly off period and jitter.
    period = NUSCENES_SWEEP_PERIOD_S * float(rng.uniform(0.996, 1.004))
    lags = np.arange(NUSCENES_SWEEPS) * period
    lags[1:] += rng.uniform(-3e-4, 3e-4, NUSCENES_SWEEPS - 1)
    merged = scan(scene, HDL32E, rng, lags)
    xyz, intensity, sweep = _exact_count(merged, points, rng, HDL32E.range_noise_m)
    out = np.empty((len(xyz), 5), dtype=np.float32)
    out[:, 0] = -xyz[:, 1]  # vehicle (x forward, y left) -> LIDAR_TOP (x right, y forward)
    out[:, 1] = xyz[:, 0]
    out[:, 2] = xyz[:, 2]
    out[:, 3] = _quantise_intensity(intensity, HDL32E)
    out[:, 4] = lags[sweep]
    return out


def kitti_frame(rng: np.random.Generator | int, points: int | None = None) -> np.ndarray:
    """A KITTI-style PointPillars input: one HDL-64E sweep, float32 [n, 4].

    Columns x, y, z (m, velodyne frame: x forward, y left, z up) and reflectance in [0, 1]
    (two decimals). With `points` None, n is whatever survives the dropouts (typically
    100k-130k); otherwise exactly `points`, thinned or padded as `nuscenes_frame` does.
    Points are ring by ring, top ring first.
    """
    _check_points(points)
    rng = _as_generator(rng)
    scene = draw_scene(rng)
    xyz, intensity, _ = _exact_count(scan(scene, HDL64E, rng), points, rng,
                                     HDL64E.range_noise_m)
    out = np.empty((len(xyz), 4), dtype=np.float32)
    out[:, :3] = xyz
    out[:, 3] = _quantise_intensity(intensity, HDL64E)
    return out


MODELS = ("centerpoint", "pointpillars")


def synthetic_frames(model: str, count: int, seed: int,
                     points: int | None) -> list[tuple[str, np.ndarray]]:
    """`count` synthetic input frames for `model`, named "synthetic-<i>".

    Frame i comes from the i-th child of `SeedSequence(seed)`, so it is the same whatever
    `count` is. CenterPoint frames are nuScenes-like (`points` None means 300,000);
    PointPillars frames are KITTI-like (`points` None means as scanned).
    """
    if model not in MODELS:
        raise InputError(f"unknown point-cloud model {model!r}: expected one of "
                         f"{', '.join(MODELS)}")
    if count < 0:
        raise InputError(f"frame count must not be negative, got {count}")
    if seed < 0:
        raise InputError(f"seed must not be negative, got {seed}")
    _check_points(points)
    frames = []
    for i in range(count):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,)))
        if model == "centerpoint":
            cloud = nuscenes_frame(rng, NUSCENES_POINTS if points is None else points)
        else:
            cloud = kitti_frame(rng, points)
        frames.append((f"synthetic-{i}", cloud))
    return frames


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------


class GridOccupancy(NamedTuple):
    """What one frame gives a pillar model: the counts the preprocessing reports."""

    valid: int  # points inside the model's range, each in a grid cell
    pillars: int  # non-empty cells, at most the model's max pillars
    kept: int  # points written into pillars, at most max points per pillar each
    cells: int  # non-empty cells, not capped: what the frame would need
    kept_uncapped: int  # points kept if every cell had a pillar of its own (no max pillars)


def grid_occupancy(points: np.ndarray, params: PillarParams) -> GridOccupancy:
    """Count the valid points, pillars and kept points of `points` on the grid of `params`.

    Follows the preprocessing's rules (spec §3) in float32: a point is valid when
    back < x < front, right < y < left and bottom < z < top and its cell index is inside
    the grid; cells become pillars in the order their first point comes, and once the
    pillars run out every further cell shares the last one; a pillar keeps its first
    max-points-per-pillar points. Only the first `max_input_points` points count, as the
    board reads no more. `kept_uncapped` is what the pillars would keep with no limit on
    their number, so the points lost to each limit can be told apart. A plain NumPy count,
    for statistics and reports; it does not time anything.
    """
    f32 = np.float32
    cloud = np.asarray(points)[: params.max_input_points]
    x, y, z = (cloud[:, k].astype(f32, copy=False) for k in range(3))
    with np.errstate(invalid="ignore"):
        inside = ((f32(params.back) < x) & (x < f32(params.front))
                  & (f32(params.right) < y) & (y < f32(params.left))
                  & (f32(params.bottom) < z) & (z < f32(params.top)))
        ix = ((x[inside] - f32(params.back)) / f32(params.x_scale)).astype(np.int64)
        iy = ((y[inside] - f32(params.right)) / f32(params.y_scale)).astype(np.int64)
    on_grid = (ix < params.x_len) & (iy < params.y_len)
    cell = ix[on_grid] * params.y_len + iy[on_grid]
    _, first, count = np.unique(cell, return_index=True, return_counts=True)
    count = count[np.argsort(first, kind="stable")]  # in the order pillars are opened
    last, per_pillar = params.max_pillars - 1, params.max_points_per_pillar
    kept = int(np.minimum(count[:last], per_pillar).sum())
    if len(count) > last:
        kept += min(per_pillar, int(count[last:].sum()))
    return GridOccupancy(valid=len(cell), pillars=min(len(count), params.max_pillars),
                         kept=kept, cells=len(count),
                         kept_uncapped=int(np.minimum(count, per_pillar).sum()))

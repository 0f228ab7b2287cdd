"""Throughput of the vDSP ISA emulation: a point-cloud feature kernel written with the numba
ops of `emu.vdsp.isa`, against plain NumPy doing the same arithmetic on whole arrays.

The kernel is the inner loop of a point-pillars preprocessing step on one vDSP core. Points
are 5 float32 values (x, y, z, r, t) stored back to back in the TCM; per 16 points it gathers
each dimension, computes the pillar index (y cell << 16) + x cell by subtract, multiply and
truncate, marks points outside the box with -1 (unordered compares, mask logic, select),
quantises x, y, z, r to int8 and packs them into one int32 (round, clamp, interleaves),
quantises t, and scatters the three int32 results per point. Both versions must give the
same output before anything is timed. Run: `python benchmarks/bench_isa.py`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu.jit import njit
from emu.vdsp import isa

POINTS = 6_000
VECTORS = POINTS // 16
POINT_BYTES = 20
OUTPUT_BYTES = 12  # pillar index, packed xyzr, quantised t: one int32 each
INPUT_BASE = 0
OUTPUT_BASE = 131_072  # the second TCM bank
KERNEL_REPEATS = 200
NUMPY_REPEATS = 200

# back, front, right, left, bottom, top (metres); 1 / cell size in x and y (1 / metres);
# mean and 1 / scale of x, y, z, r; scale of t.
PARAMS = np.array(
    [-51.2, 51.2, -51.2, 51.2, -5.0, 3.0, 5.0, 5.0,
     0.0, 0.0, -1.0, 0.5, 2.5, 2.5, 25.0, 200.0, 100.0],
    dtype=np.float32,
)


@njit
def _quantise_to_int8(
    ctx: isa.Context,
    dim: npt.NDArray[np.float32],
    mean: npt.NDArray[np.float32],
    inv_scale: npt.NDArray[np.float32],
    low: npt.NDArray[np.int32],
    high: npt.NDArray[np.int32],
) -> npt.NDArray[np.int32]:
    """round((dim - mean) * inv_scale), clamped to the int8 range, in int32 lanes."""
    rounded = isa.round_f32_i32(ctx, isa.mul_f32(ctx, isa.sub_f32(ctx, dim, mean), inv_scale))
    return isa.min_i32(ctx, isa.max_i32(ctx, rounded, low), high)


@njit
def _feature_kernel(ctx: isa.Context, vectors: int, params: npt.NDArray[np.float32]) -> None:
    lane_in = (np.arange(16) * POINT_BYTES).astype(np.uint32)
    lane_out = (np.arange(16) * OUTPUT_BYTES).astype(np.uint32)
    back, front = isa.splat_f32(ctx, params[0]), isa.splat_f32(ctx, params[1])
    right, left = isa.splat_f32(ctx, params[2]), isa.splat_f32(ctx, params[3])
    bottom, top = isa.splat_f32(ctx, params[4]), isa.splat_f32(ctx, params[5])
    inv_cell_x, inv_cell_y = isa.splat_f32(ctx, params[6]), isa.splat_f32(ctx, params[7])
    mean_x, mean_y = isa.splat_f32(ctx, params[8]), isa.splat_f32(ctx, params[9])
    mean_z, mean_r = isa.splat_f32(ctx, params[10]), isa.splat_f32(ctx, params[11])
    inv_x, inv_y = isa.splat_f32(ctx, params[12]), isa.splat_f32(ctx, params[13])
    inv_z, inv_r = isa.splat_f32(ctx, params[14]), isa.splat_f32(ctx, params[15])
    t_scale = isa.splat_f32(ctx, params[16])
    minus_one = isa.splat_i32(ctx, -1)
    low, high = isa.splat_i32(ctx, -128), isa.splat_i32(ctx, 127)
    for i in range(vectors):
        src = INPUT_BASE + i * 16 * POINT_BYTES
        x = isa.gather_d(ctx, isa.gather_a_f32(ctx, src, lane_in))
        y = isa.gather_d(ctx, isa.gather_a_f32(ctx, src + 4, lane_in))
        z = isa.gather_d(ctx, isa.gather_a_f32(ctx, src + 8, lane_in))
        r = isa.gather_d(ctx, isa.gather_a_f32(ctx, src + 12, lane_in))
        t = isa.gather_d(ctx, isa.gather_a_f32(ctx, src + 16, lane_in))

        idx = isa.trunc_f32_i32(ctx, isa.mul_f32(ctx, isa.sub_f32(ctx, x, back), inv_cell_x))
        idy = isa.trunc_f32_i32(ctx, isa.mul_f32(ctx, isa.sub_f32(ctx, y, right), inv_cell_y))
        pillar = isa.add_i32(ctx, isa.sll_i32(ctx, idy, 16), idx)
        skip = isa.or_b(ctx, isa.ule_f32(ctx, x, back), isa.ule_f32(ctx, front, x))
        skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, y, right))
        skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, left, y))
        skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, z, bottom))
        skip = isa.or_b(ctx, skip, isa.ule_f32(ctx, top, z))
        pillar = isa.mov_t(ctx, minus_one, pillar, skip)

        qx = _quantise_to_int8(ctx, x, mean_x, inv_x, low, high)
        qy = _quantise_to_int8(ctx, y, mean_y, inv_y, low, high)
        qz = _quantise_to_int8(ctx, z, mean_z, inv_z, low, high)
        qr = _quantise_to_int8(ctx, r, mean_r, inv_r, low, high)
        xyzr = isa.interleave_even_i16(
            ctx, isa.interleave_even_i8(ctx, qx, qy), isa.interleave_even_i8(ctx, qz, qr)
        )
        qt = isa.round_f32_i32(ctx, isa.mul_f32(ctx, t, t_scale))

        dst = OUTPUT_BASE + i * 16 * OUTPUT_BYTES
        isa.scatter_i32(ctx, pillar, dst, lane_out)
        isa.scatter_i32(ctx, xyzr, dst + 4, lane_out)
        isa.scatter_i32(ctx, qt, dst + 8, lane_out)
    isa.scatter_w(ctx)


def numpy_features(
    points: npt.NDArray[np.float32], params: npt.NDArray[np.float32]
) -> npt.NDArray[np.int32]:
    """The same arithmetic on whole float32 columns; rows of (pillar, xyzr, t) as int32."""
    x, y, z, r, t = (points[:, d] for d in range(5))
    back, front, right, left, bottom, top, inv_cell_x, inv_cell_y = params[:8]
    idx = np.trunc((x - back) * inv_cell_x).astype(np.int32)
    idy = np.trunc((y - right) * inv_cell_y).astype(np.int32)
    inside = (x > back) & (front > x) & (y > right) & (left > y) & (z > bottom) & (top > z)
    out = np.empty((points.shape[0], 3), np.int32)
    out[:, 0] = np.where(inside, (idy << 16) + idx, -1)
    packed = np.zeros(points.shape[0], np.uint32)
    for d, dim in enumerate((x, y, z, r)):
        q = np.clip(np.rint((dim - params[8 + d]) * params[12 + d]), -128, 127).astype(np.int32)
        packed |= (q.astype(np.uint32) & 0xFF) << (8 * d)
    out[:, 1] = packed.view(np.int32)
    out[:, 2] = np.rint(t * params[16]).astype(np.int32)
    return out


def make_points(seed: int = 0) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    points = np.empty((POINTS, 5), np.float32)
    points[:, :2] = rng.uniform(-60, 60, (POINTS, 2))
    points[:, 2] = rng.uniform(-6, 4, POINTS)
    points[:, 3] = rng.uniform(0, 1, POINTS)
    points[:, 4] = rng.uniform(0, 0.5, POINTS)
    return points


def main() -> None:
    points = make_points()
    ctx = isa.make_context(262_144, 131_072, 4, 4)
    ctx.tcm[INPUT_BASE : INPUT_BASE + points.nbytes] = points.reshape(-1).view(np.uint8)

    _feature_kernel(ctx, VECTORS, PARAMS)  # compile (or load from the disk cache)
    emulated = ctx.tcm[OUTPUT_BASE : OUTPUT_BASE + POINTS * OUTPUT_BYTES].view(np.int32)
    if ctx.fault[0]:
        raise RuntimeError(f"the emulated kernel faulted: {isa.describe_fault(ctx.fault)}")
    if not np.array_equal(emulated.reshape(-1, 3), numpy_features(points, PARAMS)):
        raise RuntimeError("the emulated kernel and NumPy disagree")

    isa.reset_counters(ctx)
    start = time.perf_counter()
    for _ in range(KERNEL_REPEATS):
        _feature_kernel(ctx, VECTORS, PARAMS)
    kernel_s = time.perf_counter() - start

    start = time.perf_counter()
    for _ in range(NUMPY_REPEATS):
        numpy_features(points, PARAMS)
    numpy_s = time.perf_counter() - start

    counts = dict(zip(isa.COUNTER_NAMES, ctx.counters.tolist(), strict=True))
    conflicts = ("gather_conflict", "scatter_conflict")
    ops_per_vector = sum(n for name, n in counts.items() if name not in conflicts) / (
        KERNEL_REPEATS * VECTORS
    )
    kernel_vectors_s = KERNEL_REPEATS * VECTORS / kernel_s
    numpy_vectors_s = NUMPY_REPEATS * VECTORS / numpy_s
    per_vector = ", ".join(
        f"{name} {n / (KERNEL_REPEATS * VECTORS):.1f}" for name, n in counts.items() if n
    )
    print(f"kernel: {POINTS:,} points = {VECTORS} vectors, {ops_per_vector:.1f} ops/vector")
    print(f"  per vector: {per_vector}")
    print(
        f"numba ISA emulation: {kernel_vectors_s:,.0f} vectors/s, "
        f"{kernel_vectors_s * ops_per_vector:,.0f} emulated ops/s"
    )
    print(
        f"plain NumPy:         {numpy_vectors_s:,.0f} vectors/s "
        f"(= {numpy_vectors_s * ops_per_vector:,.0f} ops/s of the same work)"
    )
    print(f"NumPy / emulation:   {numpy_vectors_s / kernel_vectors_s:.1f}x")


if __name__ == "__main__":
    main()

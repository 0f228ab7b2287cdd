import numpy as np
import pytest

from emu.cpu import ops
from emu.runtime import session
from emu.workloads.pointcloud.impls import IMPLS, Preprocessor
from emu.workloads.pointcloud.params import CENTERPOINT, POINTPILLARS
from tests.workloads.pointcloud_reference import preprocess

# Small grids and limits keep the DSP's stage 2 (P x K records) quick; the arithmetic and
# every rule are the same as with the full models, which the last tests run.
SMALL = {
    "centerpoint": CENTERPOINT.with_overrides(max_pillars=64, max_points_per_pillar=4,
                                              max_input_points=5000),
    "pointpillars": POINTPILLARS.with_overrides(max_pillars=48, max_points_per_pillar=6,
                                                max_input_points=5000),
}


def check_all(points, params):
    """Every implementation equals the literal reference; returns the reference result."""
    want = preprocess(points, params)
    session.start("j5")
    pre = Preprocessor(params)
    pre.load(points)
    for impl in IMPLS:
        got = pre.run(impl)
        assert np.array_equal(got.features, want["features"]), impl
        assert np.array_equal(got.coords, want["coords"]), impl
        assert (got.pillars, got.valid, got.kept) == (
            want["pillars"], want["valid"], want["kept"]), impl
        assert got.total_ps > 0
    return want


def _cloud(params, rng, n):
    pts = np.zeros((n, params.dims), np.float32)
    pts[:, 0] = rng.uniform(params.back - 2, params.front + 2, n)
    pts[:, 1] = rng.uniform(params.right - 2, params.left + 2, n)
    pts[:, 2] = rng.uniform(params.bottom - 1, params.top + 1, n)
    pts[:, 3] = rng.uniform(params.lower - 10, params.upper + 10, n)
    if params.dims == 5:
        pts[:, 4] = rng.choice(np.float32([0, 0.05, 0.45, 2.0]), n)
    return pts


@pytest.mark.parametrize("model", ["centerpoint", "pointpillars"])
def test_random_cloud_with_overflowing_pillars(model):
    params = SMALL[model]
    points = _cloud(params, np.random.default_rng(1), 3000)
    want = check_all(points, params)
    assert want["pillars"] == params.max_pillars  # more unique cells than P: overflow


@pytest.mark.parametrize("model", ["centerpoint", "pointpillars"])
def test_boundary_planes_nan_inf_and_a_crowded_pillar(model):
    p = SMALL[model]
    f = np.float32
    rows = []
    for x in (p.back, p.front, np.nextafter(f(p.back), f(1e9)), np.nextafter(f(p.front), f(-1e9)),
              f(p.back) + f(p.x_scale), (f(p.back) + f(p.front)) / 2):
        for y in (p.right, p.left, np.nextafter(f(p.right), f(1e9)),
                  np.nextafter(f(p.left), f(-1e9)), f(p.right) + f(p.y_scale)):
            for z in (p.bottom, p.top, np.nextafter(f(p.top), f(-1e9)), 0.0):
                rows.append([x, y, z] + [0.5] * (p.dims - 3))
    special = [np.nan, np.inf, -np.inf]
    for value in special:
        for d in range(p.dims):
            row = [0.3, 0.3, 0.1] + [0.2] * (p.dims - 3)
            row[d] = value
            rows.append(row)
    crowd = [[1.01, 1.01, 0.0] + [0.7] * (p.dims - 3)] * (p.max_points_per_pillar + 5)
    points = np.array(rows + crowd, dtype=np.float32)
    want = check_all(points, p)
    assert want["kept"] < want["valid"]  # the crowded pillar dropped points


@pytest.mark.parametrize("model", ["centerpoint", "pointpillars"])
def test_empty_input_and_all_points_invalid(model):
    p = SMALL[model]
    empty = check_all(np.zeros((0, p.dims), np.float32), p)
    assert empty["pillars"] == 0 and not empty["features"].any()
    invalid = np.full((100, p.dims), np.nan, np.float32)
    invalid[50:, 0] = p.front + 1
    want = check_all(invalid, p)
    assert want["valid"] == 0 and (want["coords"][0, 0, :, 1:] == -1).all()


def test_full_models_on_small_synthetic_frames():
    from emu.workloads import lidar

    for params in (CENTERPOINT, POINTPILLARS):
        (_, points), = lidar.synthetic_frames(params.name, 1, 3, 4000)
        check_all(points, params)


def test_a_stream_buffer_sized_too_small_is_reported_not_overrun():
    from emu.workloads.pointcloud import cpu_kernels as ck
    from emu.workloads.pointcloud.impls import _Stream

    stream = _Stream()
    stream.reset(2)  # a new stream: exactly two entries of room
    assert len(stream.record) == 2
    last = np.full((1, 2), -1, np.int64)
    rec = (0, 0, 0)
    for line in range(3):  # three distinct lines: the third finds the buffer full
        rec = ck._touch(stream.record, last, rec, 0, 64 * line, False, 6)
    assert rec == (2, 0, 1)  # (entries, merged, overflow)
    stream.stats[ck.ENTRIES], stream.stats[ck.OVERFLOW] = rec[0], rec[2]
    with pytest.raises(RuntimeError, match="sized too small"):
        stream.work("voxelize")


def _memset_reference(start: int, nbytes: int, line_bytes: int, vector_bytes: int):
    """One store per vector; one entry per line the bytes touch, in order, marked full where
    every byte of the line is set."""
    lines: list[int] = []
    for byte in range(start, start + nbytes):
        if not lines or lines[-1] != byte // line_bytes * line_bytes:
            lines.append(byte // line_bytes * line_bytes)
    full = [start <= line and line + line_bytes <= start + nbytes for line in lines]
    return lines, full, -(-nbytes // vector_bytes)


@pytest.mark.parametrize(("start", "nbytes", "line_bytes", "vector_bytes"), [
    (0, 0, 64, 16), (0, 1, 64, 16), (4096, 4096, 64, 16), (4100, 1000, 32, 8),
    (63, 2, 64, 16), (1 << 20, 777, 128, 64), (12, 500, 16, 16),
])
def test_memset_stream_records_one_entry_per_line_and_one_store_per_vector(
        start, nbytes, line_bytes, vector_bytes):
    from emu.workloads.pointcloud import cpu_kernels as ck

    record = np.zeros((nbytes // line_bytes + 2, 2), np.int64)
    stats = np.zeros(ck.N_STATS, np.int64)
    ck.memset_stream(start, nbytes, record, stats, line_bytes.bit_length() - 1, vector_bytes)
    lines, full, stores = _memset_reference(start, nbytes, line_bytes, vector_bytes)
    n = int(stats[ck.ENTRIES])
    flags = record[:n, 1]
    assert record[:n, 0].tolist() == lines and ((flags & ck.WRITE) != 0).all()
    assert ((flags & ck.FULL_LINE) != 0).tolist() == full
    assert stats[ops.STORE] == stores and stats[ops.BRANCH] == -(-stores // 4)
    assert stats[ck.MERGED] == max(0, stores - len(lines))


@pytest.mark.parametrize("model", ["centerpoint", "pointpillars"])
def test_a_frame_after_one_that_ran_out_of_pillars_starts_from_clear_tables(model):
    """Frames run one after another on one preprocessor (as `emu pointcloud` runs a list of
    frames): after a frame with more distinct cells than P, whose extra cells all went to
    pillar P-1, each next frame still gives what the reference gives for it alone."""
    params = SMALL[model]
    rng = np.random.default_rng(5)
    full = _cloud(params, rng, 3000)
    assert preprocess(full, params)["pillars"] == params.max_pillars
    # a frame whose cells the full frame overflowed into pillar P-1, then one point
    after = [full[1500:1600], full[2900:2901]]
    session.start("j5")
    pre = Preprocessor(params)
    for impl in IMPLS:
        for points in (full, *after):
            pre.load(points)
            got = pre.run(impl)
            want = preprocess(points, params)
            assert np.array_equal(got.coords, want["coords"]), impl
            assert np.array_equal(got.features, want["features"]), impl
            assert got.pillars == want["pillars"], impl


def _touch_reference(accesses, line_shift):
    """Entries as the recorder keeps them: an access to the line its stream touched last
    joins that entry (a store makes it a store), any other opens one; an entry opened by a
    load stays marked as loaded."""
    entries: list[list] = []  # [line address, stream, write, loaded]
    last: dict[int, int] = {}
    for stream, addr, write in accesses:
        line = addr >> line_shift
        i = last.get(stream)
        if i is not None and entries[i][0] == line << line_shift:
            entries[i][2] |= write
            continue
        last[stream] = len(entries)
        entries.append([line << line_shift, stream, write, not write])
    return entries


@pytest.mark.parametrize("seed", range(6))
def test_the_access_record_keeps_a_load_then_store_of_a_line_as_a_read_modify_write(seed):
    from emu.workloads.pointcloud import cpu_kernels as ck

    rng = np.random.default_rng(seed)
    n = 300
    accesses = [(int(s), int(a), bool(w)) for s, a, w in zip(
        rng.integers(0, 3, n), rng.integers(0, 6, n) * 40, rng.random(n) < 0.5, strict=True)]
    record = np.zeros((n, 2), np.int64)
    last = np.full((3, 2), -1, np.int64)  # [line, entry] of each stream's last access
    rec = (0, 0, 0)  # (entries, merged, overflow)
    for stream, addr, write in accesses:
        rec = ck._touch(record, last, rec, stream, addr, write, 6)
    want = _touch_reference(accesses, 6)
    k, merged, overflow = rec
    flags = record[:k, 1]
    got = [[int(record[i, 0]), int(flags[i] >> 8), bool(flags[i] & ck.WRITE),
            bool(flags[i] & ck.LOADED)] for i in range(k)]
    assert got == want and merged == n - k and overflow == 0



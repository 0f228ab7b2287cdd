"""The resizer (`emu.nn.resizer`) equals a slow per-pixel reference bit for bit, accepts
exactly the jobs the hbDNN documents allow, and times as a BPU layer group."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.bpu import timing
from emu.errors import InputError
from emu.nn import compiler, importer, layers, placement, zoo
from emu.nn.resizer import (
    FORMATS,
    STEP_MAX,
    Roi,
    check,
    layer_group,
    resize,
    scale_step,
)
from emu.soc.config import load_config

PIXEL_BYTES = {"gray": 1, "nv12": 1, "rgb": 3, "bgr": 3, "yuv444": 3}


# ---- the reference: the module docstring's rule, one pixel and channel at a time ------------

def ref_step(src_len, dst_len):
    if dst_len == 1:
        return 0
    return ((src_len - 1) * 65536 + (dst_len - 1) // 2) // (dst_len - 1)


def ref_taps(src_len, dst_len, i):
    pos = i * ref_step(src_len, dst_len)
    near = min(pos >> 16, src_len - 1)
    far = min(near + 1, src_len - 1)
    return near, far, (pos >> 8) & 255


def ref_plane(data, base, stride, pixel_bytes, channel, left, top, width, height, out_w,
              out_h):
    """One channel of one plane, ROI (left, top, width, height) -> out_w x out_h, as lists."""
    def p(y, x):
        return data[base + (top + y) * stride + (left + x) * pixel_bytes + channel]

    out = []
    for oy in range(out_h):
        y0, y1, fy = ref_taps(height, out_h, oy)
        row = []
        for ox in range(out_w):
            x0, x1, fx = ref_taps(width, out_w, ox)
            total = (p(y0, x0) * (256 - fx) * (256 - fy) + p(y0, x1) * fx * (256 - fy)
                     + p(y1, x0) * (256 - fx) * fy + p(y1, x1) * fx * fy + 32768)
            row.append(total >> 16)
        out.append(row)
    return out


def reference(image, fmt, src_w, src_h, stride, roi, dst_w, dst_h):
    data = [int(b) for b in np.asarray(image).reshape(-1)]
    left, top = roi.left, roi.top
    width, height = roi.right - roi.left + 1, roi.bottom - roi.top + 1
    if fmt == "gray":
        return np.array(ref_plane(data, 0, stride, 1, 0, left, top, width, height, dst_w,
                                  dst_h), dtype=np.uint8)
    if fmt == "nv12":
        luma = ref_plane(data, 0, stride, 1, 0, left, top, width, height, dst_w, dst_h)
        u, v = (ref_plane(data, src_h * stride, stride, 2, c, left // 2, top // 2,
                          width // 2, height // 2, dst_w // 2, dst_h // 2) for c in (0, 1))
        out = [b for row in luma for b in row]
        for y in range(dst_h // 2):
            for x in range(dst_w // 2):
                out += [u[y][x], v[y][x]]
        return np.array(out, dtype=np.uint8)
    planes = [ref_plane(data, 0, stride, 3, c, left, top, width, height, dst_w, dst_h)
              for c in range(3)]
    return np.array(planes, dtype=np.uint8).transpose(1, 2, 0)


# ---- helpers ----------------------------------------------------------------------------------

def buffer_bytes(fmt, src_h, stride):
    return (src_h * 3 // 2 if fmt == "nv12" else src_h) * stride


def random_image(rng, fmt, src_h, stride):
    """Random bytes everywhere, the padding past each row too (the resizer must not read it)."""
    return rng.integers(0, 256, buffer_bytes(fmt, src_h, stride), dtype=np.uint8)


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def agree(image, fmt, src_w, src_h, stride, roi, dst_w, dst_h):
    job = (image, fmt, src_w, src_h, stride, roi, dst_w, dst_h)
    out = resize(*job)
    assert same(out, reference(*job)), job[1:]
    return out


def crop(image, fmt, src_h, stride, roi):
    """The ROI's bytes in the output layout of `fmt` (what an identity resize gives)."""
    rows = image.reshape(-1, stride)
    x0, x1, y0, y1 = roi.left, roi.right + 1, roi.top, roi.bottom + 1
    if fmt == "gray":
        return rows[y0:y1, x0:x1]
    if fmt == "nv12":
        uv = rows[src_h + y0 // 2:src_h + y1 // 2, x0:x1]
        return np.concatenate((rows[y0:y1, x0:x1].reshape(-1), uv.reshape(-1)))
    return rows[y0:y1, 3 * x0:3 * x1].reshape(y1 - y0, x1 - x0, 3)


# ---- fixed inputs -----------------------------------------------------------------------------

def test_gradient_gray():
    w, h, stride = 40, 30, 48
    rows = np.zeros((h, stride), dtype=np.uint8)
    rows[:, :w] = (np.arange(w)[None, :] * 5 + np.arange(h)[:, None] * 3) % 256
    out = agree(rows.reshape(-1), "gray", w, h, stride, Roi(3, 2, 34, 27), 17, 13)
    assert out.shape == (13, 17)
    # a linear ramp stays monotone across each row (away from the wrap at 256)
    assert (np.diff(out[:3].astype(int), axis=1) >= 0).all()


def test_constant_image_stays_constant():
    for fmt in FORMATS:
        image = np.full(buffer_bytes(fmt, 20, 64), 77, dtype=np.uint8)
        out = resize(image, fmt, 20, 20, 64, Roi(2, 4, 17, 15), 36, 10)
        assert (out == 77).all(), fmt


CASES = [
    # fmt, src_w, src_h, stride, roi, dst_w, dst_h
    ("gray", 37, 23, 48, Roi(1, 2, 35, 21), 19, 11),
    ("gray", 37, 23, 48, Roi(0, 0, 36, 22), 50, 31),
    ("gray", 5, 3, 16, Roi(0, 0, 4, 2), 3, 2),
    ("gray", 100, 9, 112, Roi(7, 1, 98, 8), 24, 3),
    ("rgb", 29, 17, 96, Roi(3, 1, 27, 16), 13, 9),
    ("bgr", 21, 19, 128, Roi(0, 0, 20, 18), 33, 27),
    ("yuv444", 15, 11, 48, Roi(4, 3, 12, 10), 7, 6),
    ("nv12", 40, 24, 48, Roi(2, 4, 37, 21), 16, 10),
    ("nv12", 18, 14, 32, Roi(0, 0, 17, 13), 30, 22),
    ("nv12", 64, 32, 64, Roi(10, 2, 59, 29), 14, 8),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}-{c[5]}x{c[6]}")
def test_random_images(case):
    fmt, src_w, src_h, stride = case[:4]
    rng = np.random.default_rng(src_w)
    agree(random_image(rng, fmt, src_h, stride), *case)


def test_output_shapes_and_types():
    rng = np.random.default_rng(1)
    assert resize(random_image(rng, "gray", 8, 16), "gray", 8, 8, 16, Roi(0, 0, 7, 7), 6,
                  4).shape == (4, 6)
    assert resize(random_image(rng, "rgb", 8, 32), "rgb", 8, 8, 32, Roi(0, 0, 7, 7), 6,
                  4).shape == (4, 6, 3)
    nv12 = resize(random_image(rng, "nv12", 8, 16), "nv12", 8, 8, 16, Roi(0, 0, 7, 7), 6, 4)
    assert nv12.shape == (6 * 4 * 3 // 2,) and nv12.dtype == np.uint8


# ---- edges ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_roi_of_two_by_two(fmt):
    rng = np.random.default_rng(2)
    image = random_image(rng, fmt, 10, 48)
    for dst in ((2, 2), (8, 8), (6, 4)):
        agree(image, fmt, 12, 10, 48, Roi(4, 6, 5, 7), *dst)


@pytest.mark.parametrize("fmt", FORMATS)
def test_roi_is_the_whole_image(fmt):
    rng = np.random.default_rng(3)
    image = random_image(rng, fmt, 18, 64)
    agree(image, fmt, 20, 18, 64, Roi(0, 0, 19, 17), 12, 10)


@pytest.mark.parametrize("fmt", FORMATS)
def test_output_of_the_roi_size_is_the_crop(fmt):
    """step is exactly 65536 when dst == roi size, so every weight is 0: an exact copy."""
    rng = np.random.default_rng(4)
    stride, src_h = 80, 22
    image = random_image(rng, fmt, src_h, stride)
    roi = Roi(2, 4, 15, 19)
    assert scale_step(roi.width, roi.width) == 65536
    out = agree(image, fmt, 26, src_h, stride, roi, roi.width, roi.height)
    assert same(out, crop(image, fmt, src_h, stride, roi))


@pytest.mark.parametrize("fmt", FORMATS)
def test_upscale_four_times(fmt):
    rng = np.random.default_rng(5)
    image = random_image(rng, fmt, 16, 64)
    agree(image, fmt, 20, 16, 64, Roi(2, 2, 13, 9), 48, 32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_downscale_next_to_the_step_limit(fmt):
    """roi 60 -> 16 (59 < 4 * 15): step 257775, the most shrinking a 16-sample output takes."""
    rng = np.random.default_rng(6)
    image = random_image(rng, fmt, 64, 208)
    roi = Roi(2, 2, 61, 61)
    assert scale_step(60, 16) == 257775
    agree(image, fmt, 64, 64, 208, roi, 16, 16)


def test_largest_downscale_of_the_widest_roi():
    rng = np.random.default_rng(7)
    image = random_image(rng, "gray", 4, 4096)
    out = agree(image, "gray", 4096, 4, 4096, Roi(0, 0, 4095, 3), 1025, 2)
    assert out.shape == (2, 1025)


def test_output_wider_than_the_step_reaches():
    """From 131073 outputs on, the rounded step can overshoot the ROI: the taps stay on its
    last sample."""
    rng = np.random.default_rng(8)
    image = random_image(rng, "gray", 2, 16)
    roi = Roi(3, 0, 4, 1)
    dst_w = 131073
    assert (dst_w - 1) * scale_step(2, dst_w) >> 16 == 2
    out = agree(image, "gray", 16, 2, 16, roi, dst_w, 2)
    rows = image.reshape(2, 16)
    assert (out[:, -1] == rows[:, 4]).all()


# ---- property ---------------------------------------------------------------------------------

@st.composite
def jobs(draw):
    fmt = draw(st.sampled_from(FORMATS))
    unit = 2 if fmt == "nv12" else 1
    src_w = unit * draw(st.integers(2 // unit, 24 // unit))
    src_h = unit * draw(st.integers(2 // unit, 20 // unit))
    row = src_w * PIXEL_BYTES[fmt]
    stride = 16 * draw(st.integers(-(-row // 16), -(-row // 16) + 2))
    left = unit * draw(st.integers(0, (src_w - 2) // unit))
    top = unit * draw(st.integers(0, (src_h - 2) // unit))
    right = left + unit * draw(st.integers(2 // unit, (src_w - left) // unit)) - 1
    bottom = top + unit * draw(st.integers(2 // unit, (src_h - top) // unit)) - 1
    roi = Roi(left, top, right, bottom)
    dst_w, dst_h = (unit * draw(output_units(size, unit)) for size in (roi.width, roi.height))
    seed = draw(st.integers(0, 2**32 - 1))
    return fmt, src_w, src_h, stride, roi, dst_w, dst_h, seed


def output_units(roi_len, unit):
    """Output lengths, in units, from the most shrinking the step limit allows (roi_len - 1
    < 4 * (out - 1)) up to 3x the ROI."""
    least = -(-((roi_len - 1) // 4 + 2) // unit)
    return st.integers(least, max(least, 3 * roi_len // unit))


@settings(max_examples=50, deadline=None)
@given(jobs())
def test_resize_equals_the_reference(job):
    fmt, src_w, src_h, stride, roi, dst_w, dst_h, seed = job
    assert check(src_w, src_h, stride, roi, dst_w, dst_h, fmt) is None
    image = random_image(np.random.default_rng(seed), fmt, src_h, stride)
    agree(image, fmt, src_w, src_h, stride, roi, dst_w, dst_h)


# ---- limits -----------------------------------------------------------------------------------

BASE = {"src_w": 64, "src_h": 32, "stride": 64, "roi": Roi(0, 0, 63, 31), "dst_w": 32,
        "dst_h": 16, "fmt": "gray"}
NV12 = {**BASE, "fmt": "nv12"}
WIDE = {**BASE, "src_w": 4096, "stride": 4096, "roi": Roi(0, 0, 4095, 31), "dst_w": 1025}
TALL = {**BASE, "src_h": 5000, "roi": Roi(0, 0, 63, 4095), "dst_h": 1025}


def job(base=None, **changes):
    return {**(base or BASE), **changes}


LIMITS = [
    (job(), None),
    (job(fmt="jpeg"), "format 'jpeg'"),
    # ROI size
    (job(roi=Roi(5, 0, 5, 31)), "roi width 1 outside 2..4096"),
    (job(roi=Roi(5, 0, 6, 31), dst_w=2), None),
    (job(roi=Roi(5, 4, 6, 4)), "roi height 1 outside 2..4096"),
    (job(roi=Roi(5, 4, 6, 5), dst_h=2), None),
    (job(roi=Roi(9, 0, 3, 31)), "roi width -5"),
    (WIDE, None),
    (job(WIDE, roi=Roi(0, 0, 4096, 31)), "roi width 4097 outside 2..4096"),
    (TALL, None),
    (job(TALL, roi=Roi(0, 0, 63, 4096)), "roi height 4097 outside 2..4096"),
    # the image
    (job(src_w=0), "image width 0 outside 1..4096"),
    (job(src_w=1), "roi"),  # width 1 is allowed, but no ROI fits in it
    (job(src_w=4097, stride=4112), "image width 4097 outside 1..4096"),
    (job(src_h=0), "image height 0"),
    (job(stride=8, src_w=8, roi=Roi(0, 0, 7, 31), dst_w=8), "stride 8 outside 16..131072"),
    (job(stride=16, src_w=16, roi=Roi(0, 0, 15, 31), dst_w=8), None),
    (job(stride=24, src_w=20, roi=Roi(0, 0, 19, 31), dst_w=8), "stride 24 is not a multiple"),
    (job(stride=131072), None),
    (job(stride=131088), "stride 131088 outside 16..131072"),
    (job(stride=48), "stride 48 is shorter than a row of 64 bytes"),
    (job(fmt="rgb", stride=176), "stride 176 is shorter than a row of 192 bytes"),
    (job(fmt="rgb", stride=192), None),
    # the ROI inside the image
    (job(roi=Roi(-1, 0, 62, 31)), "not inside the 64x32 image"),
    (job(roi=Roi(0, -2, 63, 29)), "not inside"),
    (job(roi=Roi(1, 0, 64, 31)), "not inside"),
    (job(roi=Roi(0, 1, 63, 32)), "not inside"),
    # the output
    (job(dst_w=1), "output width 1 below 2"),
    (job(dst_h=1), "output height 1 below 2"),
    (job(roi=Roi(0, 0, 3, 3), dst_w=2, dst_h=2), None),
    # step: accepted exactly when roi - 1 < 4 * (output - 1)
    (job(roi=Roi(0, 0, 4, 31), dst_w=2), "horizontal step 262144 outside 0..262143"),
    (job(roi=Roi(0, 0, 63, 4), dst_h=2), "vertical step 262144 outside 0..262143"),
    (job(WIDE, dst_w=1024), "horizontal step 262336"),
    (job(roi=Roi(0, 0, 59, 31), dst_w=16), None),
    (job(roi=Roi(0, 0, 60, 31), dst_w=16), "horizontal step 262144"),
    (job(roi=Roi(0, 0, 1, 1), dst_w=4096, dst_h=9000), None),
    # NV12 alignment
    (NV12, None),
    (job(NV12, src_w=63, roi=Roi(0, 0, 61, 31)), "nv12 image size 63x32 is odd"),
    (job(NV12, src_h=31, roi=Roi(0, 0, 63, 29)), "nv12 image size 64x31 is odd"),
    (job(NV12, roi=Roi(1, 0, 62, 31)), "nv12 roi (1, 0)-(62, 31) does not cover whole"),
    (job(NV12, roi=Roi(0, 3, 63, 30)), "left and top must be even, right and bottom odd"),
    (job(NV12, roi=Roi(0, 0, 62, 31)), "does not cover whole chroma samples"),
    (job(NV12, roi=Roi(0, 0, 63, 30)), "does not cover whole chroma samples"),
    (job(NV12, roi=Roi(2, 2, 5, 5)), None),
    (job(NV12, dst_w=31), "nv12 output width 31 is odd"),
    (job(NV12, dst_h=15), "nv12 output height 15 is odd"),
    (job(NV12, dst_w=2, dst_h=2, roi=Roi(0, 0, 3, 3)), None),
]


@pytest.mark.parametrize(("args", "expected"), LIMITS)
def test_check_limits(args, expected):
    problem = check(**args)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem, problem
        assert "\n" not in problem


def test_step_limit_is_a_downscale_below_four():
    """The docstring's reading of 0 <= step <= 262143, checked for every ROI length."""
    for src in range(2, 4097):
        smallest = (src - 1) // 4 + 2  # the least dst_len with src - 1 < 4 * (dst_len - 1)
        assert scale_step(src, smallest) <= STEP_MAX, src
        if smallest > 2:
            assert scale_step(src, smallest - 1) > STEP_MAX, src
    assert scale_step(2, 10**6) == 0


def test_resize_refuses_what_check_refuses():
    image = np.zeros(64 * 32, dtype=np.uint8)
    with pytest.raises(InputError, match=r"roi width 1 outside 2\.\.4096"):
        resize(image, "gray", 64, 32, 64, Roi(0, 0, 0, 31), 8, 8)


def test_resize_refuses_a_bad_buffer():
    with pytest.raises(InputError, match="takes 3072 bytes, the buffer has 3071"):
        resize(np.zeros(3071, dtype=np.uint8), "nv12", 64, 32, 64, Roi(0, 0, 63, 31), 32,
               16)
    with pytest.raises(InputError, match="uint8"):
        resize(np.zeros(64 * 32, dtype=np.int16), "gray", 64, 32, 64, Roi(0, 0, 63, 31), 32,
               16)


# ---- timing -----------------------------------------------------------------------------------

DDR = load_config("j5", None, ()).soc.ddr


@pytest.fixture(scope="module")
def bpu():
    return load_config("j5", None, ()).soc.bpu


def test_layer_group_reads_the_rois_and_writes_the_output_at_their_real_bytes(bpu):
    roi, other = Roi(10, 20, 109, 69), Roi(0, 0, 31, 15)  # 100 x 50, 32 x 16
    nv12 = layer_group("r", "nv12", 64, 32, [roi, other])
    assert nv12.op_class == "resize" and nv12.leaves
    assert sum(ref.bytes for ref in nv12.inputs) == (100 * 50 + 32 * 16) * 3 // 2
    assert nv12.output.bytes == 2 * 64 * 32 * 3 // 2
    (cost,) = timing.layer_costs([nv12], bpu, DDR)  # packed, whatever the BPU's granules
    assert cost.read_bytes == (100 * 50 + 32 * 16) * 3 // 2
    assert cost.written_bytes == 2 * 64 * 32 * 3 // 2
    rgb = layer_group("r", "rgb", 64, 32, [roi])
    assert sum(ref.bytes for ref in rgb.inputs) == 100 * 50 * 3
    assert rgb.output.bytes == 64 * 32 * 3
    gray = layer_group("r", "gray", 64, 32, [roi])
    assert sum(ref.bytes for ref in gray.inputs) == 100 * 50
    with pytest.raises(InputError, match="format 'jpeg'"):
        layer_group("r", "jpeg", 64, 32, [roi])
    with pytest.raises(InputError, match="at least one ROI"):
        layer_group("r", "rgb", 64, 32, [])


@pytest.mark.parametrize("fmt", ["nv12", "rgb"])
def test_a_model_reads_only_the_rois_through_the_resizer(fmt, bpu):
    """hbDNNRoiInfer: the resizer fills the model's input on chip, its first layer reads
    it there; DDR sees the ROIs at their bytes."""
    graph = importer.compile_graph(importer.load(
        zoo.build("mobilenetv2", input_size=(32, 32), batch=2, classes=10)))
    graph = compiler.add_preprocess(graph, compiler.CompileOptions(input_type=fmt))
    (segment,) = [s for s in placement.place(graph) if s.kind == "bpu"]
    model = layers.layer_groups(graph, segment)
    name = graph.inputs[0]
    image = layers.image_ref(name, fmt, graph.tensors[name].shape)
    rois = [Roi(0, 0, 99, 49), Roi(2, 2, 33, 33)]  # 100 x 50, 32 x 32
    job = layer_group("resizer", fmt, 32, 32, rois, into=image)
    assert job.output == model[0].inputs[0] == image and not job.leaves
    plain, through = (timing.layer_costs(layer_list, bpu, DDR)
                      for layer_list in (model, [job, *model]))
    pixels = 100 * 50 + 32 * 32
    roi_bytes = pixels * 3 // 2 if fmt == "nv12" else pixels * 3
    assert (through[0].read_bytes, through[0].written_bytes) == (roi_bytes, 0)
    assert plain[0].read_bytes == image.bytes and through[1].read_bytes == 0
    assert [c.ddr_bytes for c in through[2:]] == [c.ddr_bytes for c in plain[1:]]


@pytest.mark.parametrize("fmt", ["nv12", "rgb"])
def test_layer_group_time_grows_with_the_output(fmt, bpu):
    roi = Roi(0, 0, 511, 511)
    times = []
    for size in (128, 256, 512, 1024):
        group = layer_group("resize", fmt, size, size, [roi])
        assert timing.split_function_calls([group], bpu, DDR, max_time_ps=1) == [(0, 1)]
        (call,) = timing.function_calls([group], bpu, DDR)
        assert call.costs[0].written_bytes > 0 and call.costs[0].read_bytes > 0
        times.append(call.time_ps)
    assert times[0] > 0
    assert times == sorted(times) and len(set(times)) == len(times)

"""dmp_dv end to end: memory, sync, conv and FC commands executed exactly and timed."""

import numpy as np
import pytest

import emu
from emu.dv import compute, layout
from emu.runtime import dmp_dv as dv

RNG = np.random.default_rng(4)


@pytest.fixture
def ctx():
    with emu.Session():
        context = dv.dmp_dv_context_create()
        assert context is not None
        yield context
        dv.dmp_dv_context_release(context)


def _mem(ctx, data: np.ndarray | None = None, size: int | None = None):
    nbytes = data.size if data is not None else size
    mem = dv.dmp_dv_mem_alloc(ctx, nbytes)
    view = dv.dmp_dv_mem_map(mem)
    if data is not None:
        assert dv.dmp_dv_mem_sync_start(mem, 0, 1) == 0
        view[:data.size] = data
        assert dv.dmp_dv_mem_sync_end(mem) == 0
    return mem, view


def _fp16(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float16)


def _conv_command(ctx, x, weights, bias, *, kernel, pad=0, stride=1, actfunc=0, dilation=1,
                  pack=dv.dmp_dv_pack_conv_weights):
    c, h, w = x.shape
    m = weights.shape[0]
    inp, _ = _mem(ctx, layout.to_device(x))
    rc, size = pack(c, kernel, kernel, m, None, weights.view(np.uint16), bias.view(np.uint16),
                    None, None, 0)
    assert rc == 0 and size > 0
    packed = np.zeros(size, np.uint8)
    assert pack(c, kernel, kernel, m, None, weights.view(np.uint16), bias.view(np.uint16),
                None, packed, size) == (0, size)
    wmem, _ = _mem(ctx, packed)
    oh = (h + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    out, view = _mem(ctx, size=layout.tensor_bytes(m, oh, ow))
    cmd = dv.dmp_dv_cmdraw_conv_v0()
    cmd.input_buf, cmd.output_buf = dv.dmp_dv_buf(inp, 0), dv.dmp_dv_buf(out, 0)
    cmd.w, cmd.h, cmd.z, cmd.c, cmd.topo = w, h, 1, c, 1
    run = cmd.run[0]
    run.weight_buf = dv.dmp_dv_buf(wmem, 0)
    run.m, run.conv_enable, run.p, run.pz = m, 1, kernel | kernel << 8, 1
    run.conv_pad = pad * 0x01010101
    run.conv_stride = stride | stride << 8
    run.conv_dilation = dilation | dilation << 8
    run.actfunc = actfunc
    return cmd, out, view, (m, oh, ow)


def _run_one(ctx, cmd, out, view, shape):
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
    assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
    dv.dmp_dv_cmdlist_release(cl)
    assert dv.dmp_dv_mem_sync_start(out, 1, 0) == 0
    got = layout.from_device(view, *shape).copy()
    assert dv.dmp_dv_mem_sync_end(out) == 0
    return got


@pytest.mark.parametrize(("channels", "kernel", "dilation"), [(9, 3, 2), (70, 2, 3), (3, 5, 2)])
def test_a_dilated_conv_reads_weights_packed_by_the_dilated_packer(ctx, channels, kernel,
                                                                   dilation):
    x = _fp16((channels, 13, 11))
    weights, bias = _fp16((10, channels, kernel, kernel), 0.3), _fp16((10,), 0.1)
    want = compute.run_conv(x, [compute.ConvRun(
        m=10, kernel=(kernel, kernel), pads=(1, 1, 1, 1), dilation=(dilation, dilation),
        weights=weights, bias=bias)])[0]
    got = _run_one(ctx, *_conv_command(ctx, x, weights, bias, kernel=kernel, pad=1,
                                       dilation=dilation, pack=dv.dmp_dv_pack_dil_weights))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    # the same weights in the undilated layout (in memory large enough for the dilated
    # one) mean something else to the device
    cmd, out, view, shape = _conv_command(ctx, x, weights, bias, kernel=kernel, pad=1,
                                          dilation=dilation)
    undilated = dv.dmp_dv_mem_map(cmd.run[0].weight_buf.mem)
    _, need = dv.dmp_dv_pack_dil_weights(channels, kernel, kernel, 10, None,
                                         weights.view(np.uint16), bias.view(np.uint16), None,
                                         None, 0)
    padded = np.zeros(max(need, undilated.size), np.uint8)
    padded[:undilated.size] = undilated
    cmd.run[0].weight_buf = dv.dmp_dv_buf(_mem(ctx, padded)[0], 0)
    assert not np.array_equal(_run_one(ctx, cmd, out, view, shape).view(np.uint16),
                              want.view(np.uint16))


def test_the_total_size_counts_the_live_memory_of_this_session(ctx):
    before = dv.dmp_dv_mem_get_total_size()
    a, b = dv.dmp_dv_mem_alloc(ctx, 1000), dv.dmp_dv_mem_alloc(ctx, 5000)
    assert dv.dmp_dv_mem_get_total_size() == \
        before + dv.dmp_dv_mem_get_size(a) + dv.dmp_dv_mem_get_size(b)
    with emu.Session():  # another program's memory is not this one's
        assert dv.dmp_dv_mem_get_total_size() == 0
    dv.dmp_dv_mem_release(a)
    assert dv.dmp_dv_mem_get_total_size() == before + dv.dmp_dv_mem_get_size(b)
    dv.dmp_dv_mem_release(b)
    assert dv.dmp_dv_mem_get_total_size() == before


def test_a_conv_command_computes_what_the_device_computes_and_is_timed(ctx):
    x = _fp16((9, 12, 10))
    weights, bias = _fp16((5, 9, 3, 3), 0.3), _fp16((5,), 0.1)
    cmd, out, view, shape = _conv_command(ctx, x, weights, bias, kernel=3, pad=1, actfunc=6)
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0
    assert dv.dmp_dv_cmdlist_commit(cl) == 0
    first = dv.dmp_dv_cmdlist_exec(cl)
    second = dv.dmp_dv_cmdlist_exec(cl)
    assert 0 <= first < second
    assert dv.dmp_dv_cmdlist_wait(cl, first) == 0 and dv.dmp_dv_cmdlist_wait(cl, second) == 0
    want = compute.run_conv(x, [compute.ConvRun(m=5, kernel=(3, 3), pads=(1, 1, 1, 1),
                                                weights=weights, bias=bias, actfunc=6)])[0]
    assert dv.dmp_dv_mem_sync_start(out, 1, 0) == 0
    got = layout.from_device(view, *shape)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert dv.dmp_dv_mem_sync_end(out) == 0
    # kick to the wait's return: at least the kick, the run and the wake-up
    us = dv.dmp_dv_cmdlist_get_last_exec_time(cl)
    cfg = emu.runtime.session.current().config.dv
    assert us * 1_000_000 >= cfg.kick_ps + cfg.wake_ps
    dv.dmp_dv_cmdlist_release(cl)


def test_cpu_writes_without_sync_do_not_reach_the_device(ctx):
    x = _fp16((8, 4, 4))
    weights, bias = _fp16((8, 8, 1, 1)), _fp16((8,))
    cmd, out, view, shape = _conv_command(ctx, x, weights, bias, kernel=1)
    inp_view = dv.dmp_dv_mem_map(cmd.input_buf.mem)
    inp_view[:] = 0  # not synced: the device still reads x
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
    assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
    dv.dmp_dv_mem_sync_start(out, 1, 0)
    want = compute.run_conv(x, [compute.ConvRun(m=8, weights=weights, bias=bias)])[0]
    assert np.array_equal(layout.from_device(view, *shape).view(np.uint16),
                          want.view(np.uint16))


def test_an_fc_command(ctx):
    x = _fp16((40,))
    weights, bias = _fp16((7, 40), 0.2), _fp16((7,))
    rc, size = dv.dmp_dv_pack_fc_weights(40, 1, 1, 7, 1, 1, None, weights.view(np.uint16),
                                         bias.view(np.uint16), None, 0)
    assert rc == 0
    packed = np.zeros(size, np.uint8)
    assert dv.dmp_dv_pack_fc_weights(40, 1, 1, 7, 1, 1, None, weights.view(np.uint16),
                                      bias.view(np.uint16), packed, size)[0] == 0
    wmem, _ = _mem(ctx, packed)
    inp, _ = _mem(ctx, x.view(np.uint8))
    out, view = _mem(ctx, size=14)
    cmd = dv.dmp_dv_cmdraw_fc_v0()
    cmd.weight_buf, cmd.input_buf = dv.dmp_dv_buf(wmem, 0), dv.dmp_dv_buf(inp, 0)
    cmd.output_buf = dv.dmp_dv_buf(out, 0)
    cmd.input_size, cmd.output_size, cmd.actfunc = 40, 7, 1
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
    assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
    dv.dmp_dv_mem_sync_start(out, 1, 0)
    want = compute.run_fc(x, weights, bias, 1)
    assert np.array_equal(view.view(np.uint16), want.view(np.uint16))


def test_info_version_and_misuse(ctx):
    info = dv.dmp_dv_info_v0()
    assert dv.dmp_dv_context_get_info(ctx, info) == 0
    assert (info.ub_size, info.max_kernel_size, info.conv_freq, info.max_fc_vector_size) == (
        512 << 10, 7, 333, 16384)
    assert dv.dmp_dv_get_version_string().startswith("7.0.")
    assert dv.dmp_dv_fpga_device_exists(ctx, dv.DMP_DV_DEV_CONV) == 1
    assert dv.dmp_dv_fpga_device_exists(ctx, 4) == 0
    assert dv.dmp_dv_fpga_device_exists(None, 1) == -1
    assert dv.dmp_dv_mem_alloc(None, 16) is None
    assert "context" in dv.dmp_dv_get_last_error_message()
    assert dv.dmp_dv_mem_get_size(None) == 0
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_commit(cl) == dv.EINVAL  # nothing to run
    assert dv.dmp_dv_cmdlist_add_raw(cl, None) == dv.EINVAL
    bad = dv.dmp_dv_cmdraw_conv_v0()
    bad.header.version = 7
    assert dv.dmp_dv_cmdlist_add_raw(cl, bad) == dv.ENOTSUP
    bad.header.version, bad.header.size = 0, 12
    assert dv.dmp_dv_cmdlist_add_raw(cl, bad) == dv.EINVAL
    assert dv.dmp_dv_cmdlist_exec(cl) < 0
    assert dv.dmp_dv_cmdlist_wait(cl, 99) == dv.EINVAL
    x = _fp16((8, 4, 4))
    cmd, *_ = _conv_command(ctx, x, _fp16((8, 8, 3, 3)), _fp16((8,)), kernel=3)
    cmd.run[0].p = 9 | 9 << 8
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == dv.EINVAL  # kernel 9 > 7
    assert "kernel" in dv.dmp_dv_get_last_error_message()
    for fn in (dv.dmp_dv_context_release, dv.dmp_dv_mem_release, dv.dmp_dv_cmdlist_release,
               dv.dmp_dv_context_retain, dv.dmp_dv_mem_retain, dv.dmp_dv_cmdlist_retain):
        assert fn(None) is None and fn(3) is None


def test_a_v1_command_reads_8_bit_input_through_its_table_and_swaps_to_bgr(ctx):
    codes = RNG.integers(0, 256, (3, 6, 5), dtype=np.uint8)
    table = (np.arange(256) / 64 - 2).astype(np.float16)
    weights, bias = _fp16((4, 3, 1, 1)), _fp16((4,))
    x = table[codes][[2, 1, 0]]  # what the device computes on: FP16, channels swapped
    v0, out, view, shape = _conv_command(ctx, x, weights, bias, kernel=1)
    image = np.empty(codes.size, np.uint8)
    image[layout.element_index(3, 6, 5)] = codes
    inp, _ = _mem(ctx, image)
    tab, _ = _mem(ctx, table.view(np.uint8))
    cmd = dv.dmp_dv_cmdraw_conv_v1()
    cmd.conv_cmd = v0
    cmd.conv_cmd.input_buf = dv.dmp_dv_buf(inp, 0)
    cmd.u8tofp16_table, cmd.to_bgr = dv.dmp_dv_buf(tab, 0), 1
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
    assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
    dv.dmp_dv_mem_sync_start(out, 1, 0)
    want = compute.run_conv(x, [compute.ConvRun(m=4, weights=weights, bias=bias)])[0]
    assert np.array_equal(layout.from_device(view, *shape).view(np.uint16),
                          want.view(np.uint16))


JUNK = [None, 0, -1, 3.5, "ctx", b"x", np.zeros(4, np.uint8), object(), True, 2**70]


def test_no_junk_argument_makes_a_function_raise(ctx):
    """Every C-named function with every junk value in every position: the C error value,
    never an exception, and the session still works afterwards."""
    mem = dv.dmp_dv_mem_alloc(ctx, 64)
    cl = dv.dmp_dv_cmdlist_create(ctx)
    other = emu.Session()
    with other:
        foreign = dv.dmp_dv_context_create()
    names = [n for n in dir(dv) if n.startswith("dmp_dv_") and callable(getattr(dv, n))
             and not isinstance(getattr(dv, n), type)]
    assert len(names) >= 25
    import inspect

    for name in names:
        fn = getattr(dv, name)
        arity = len(inspect.signature(fn).parameters)
        valid = {"ctx": ctx, "mem": mem, "cmdlist": cl}
        for position in range(arity):
            for junk in [*JUNK, foreign]:
                args = [valid.get(p, 1) for p in inspect.signature(fn).parameters]
                args[position] = junk
                fn(*args)  # must not raise
    assert dv.dmp_dv_mem_get_size(mem) >= 64
    assert dv.dmp_dv_context_get_info_string(ctx).startswith("DV700")


def _device_times(overrides, *shapes):
    """Each conv command's time on the device (ps), one command per (c, m, side, k)."""
    with emu.Session(overrides=overrides):
        ctx = dv.dmp_dv_context_create()
        cl = dv.dmp_dv_cmdlist_create(ctx)
        for c, m, side, k in shapes:
            cmd, *_ = _conv_command(ctx, _fp16((c, side, side)), _fp16((m, c, k, k)),
                                    _fp16((m,)), kernel=k, pad=k // 2)
            assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0
        dv.dmp_dv_cmdlist_commit(cl)
        assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
        return [t for _, t in dv.command_times_ps(cl)]


def test_doubling_the_conv_clock_halves_compute_bound_commands_only():
    shapes = [(128, 128, 14, 3), (8, 8, 64, 1)]  # many MACs per byte; few
    fixed = ["dv.run_overhead_cycles=0", "ddr.latency_ps=0"]
    slow = _device_times([*fixed, "dv.conv_freq_hz=150MHz"], *shapes)
    fast = _device_times([*fixed, "dv.conv_freq_hz=300MHz"], *shapes)
    assert abs(slow[0] - 2 * fast[0]) <= 2  # compute-bound: half the time
    assert slow[1] == fast[1]  # DDR-bound: the bytes decide


def test_a_run_kept_in_the_unified_buffer_moves_no_ddr_bytes(ctx):
    x = _fp16((16, 20, 20))
    w1, b1 = _fp16((16, 16, 1, 1)), _fp16((16,))
    cmd, *_ = _conv_command(ctx, x, w1, b1, kernel=1)
    cmd.output_buf = dv.dmp_dv_buf(_mem(ctx, size=2 * layout.tensor_bytes(16, 20, 20))[0], 0)
    wmem = cmd.run[0].weight_buf.mem
    cmd.run[1].weight_buf = dv.dmp_dv_buf(wmem, 0)
    for field in ("m", "conv_enable", "p", "pz", "conv_stride"):
        setattr(cmd.run[1], field, getattr(cmd.run[0], field))

    def moved(topo: int) -> int:
        cmd.topo = topo
        cl = dv.dmp_dv_cmdlist_create(ctx)
        assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
        def dv_bytes() -> int:
            by = emu.runtime.session.current().stats()["ddr"]["bytes_by_requester"]
            return sum(v for k, v in by.items() if ".dv." in k)

        before = dv_bytes()
        assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
        return dv_bytes() - before

    # run 0 to the UB, run 1 to DDR, against both to DDR: one output less moved
    assert moved(0b11) - moved(0b10) == layout.tensor_bytes(16, 20, 20)


def _contract_rows(ctx):
    """(function, case, call, expected) for every C-named function: valid and misuse."""
    mem = dv.dmp_dv_mem_alloc(ctx, 64)
    dead = dv.dmp_dv_mem_alloc(ctx, 64)
    dv.dmp_dv_mem_release(dead)
    cl = dv.dmp_dv_cmdlist_create(ctx)
    info = dv.dmp_dv_info_v0()
    w = np.zeros(8 * 8 * 9, np.uint16)
    b = np.zeros(8, np.uint16)
    return [
        ("dmp_dv_context_create", "valid", lambda: type(dv.dmp_dv_context_create()).__name__,
         "dmp_dv_context"),
        ("dmp_dv_context_release", "NULL", lambda: dv.dmp_dv_context_release(None), None),
        ("dmp_dv_context_retain", "NULL", lambda: dv.dmp_dv_context_retain(None), None),
        ("dmp_dv_context_get_info_string", "NULL",
         lambda: dv.dmp_dv_context_get_info_string(None), ""),
        ("dmp_dv_context_get_info", "valid", lambda: dv.dmp_dv_context_get_info(ctx, info), 0),
        ("dmp_dv_context_get_info", "not a struct",
         lambda: dv.dmp_dv_context_get_info(ctx, {}), dv.EINVAL),
        ("dmp_dv_context_get_info", "NULL ctx",
         lambda: dv.dmp_dv_context_get_info(None, info), dv.EINVAL),
        ("dmp_dv_mem_alloc", "zero size", lambda: dv.dmp_dv_mem_alloc(ctx, 0), None),
        ("dmp_dv_mem_alloc", "too big", lambda: dv.dmp_dv_mem_alloc(ctx, 1 << 40), None),
        ("dmp_dv_mem_alloc", "float size", lambda: dv.dmp_dv_mem_alloc(ctx, 8.0), None),
        ("dmp_dv_mem_release", "released", lambda: dv.dmp_dv_mem_release(dead), None),
        ("dmp_dv_mem_retain", "NULL", lambda: dv.dmp_dv_mem_retain(None), None),
        ("dmp_dv_mem_map", "released", lambda: dv.dmp_dv_mem_map(dead), None),
        ("dmp_dv_mem_map", "valid", lambda: dv.dmp_dv_mem_map(mem).size, 64),
        ("dmp_dv_mem_unmap", "NULL", lambda: dv.dmp_dv_mem_unmap(None), None),
        ("dmp_dv_mem_sync_start", "valid", lambda: dv.dmp_dv_mem_sync_start(mem, 1, 1), 0),
        ("dmp_dv_mem_sync_start", "flag not an int",
         lambda: dv.dmp_dv_mem_sync_start(mem, "rd", 0), dv.EINVAL),
        ("dmp_dv_mem_sync_start", "released",
         lambda: dv.dmp_dv_mem_sync_start(dead, 1, 0), dv.EINVAL),
        ("dmp_dv_mem_sync_end", "valid", lambda: dv.dmp_dv_mem_sync_end(mem), 0),
        ("dmp_dv_mem_sync_end", "twice", lambda: dv.dmp_dv_mem_sync_end(mem), 0),
        ("dmp_dv_mem_sync_end", "NULL", lambda: dv.dmp_dv_mem_sync_end(None), dv.EINVAL),
        ("dmp_dv_mem_get_size", "valid", lambda: dv.dmp_dv_mem_get_size(mem) >= 64, True),
        ("dmp_dv_mem_get_size", "released", lambda: dv.dmp_dv_mem_get_size(dead), 0),
        ("dmp_dv_mem_get_total_size", "live memory only",
         lambda: dv.dmp_dv_mem_get_total_size() >= dv.dmp_dv_mem_get_size(mem) >= 64, True),
        ("dmp_dv_cmdlist_create", "NULL", lambda: dv.dmp_dv_cmdlist_create(None), None),
        ("dmp_dv_cmdlist_release", "NULL", lambda: dv.dmp_dv_cmdlist_release(None), None),
        ("dmp_dv_cmdlist_retain", "NULL", lambda: dv.dmp_dv_cmdlist_retain(None), None),
        ("dmp_dv_cmdlist_add_raw", "not a command",
         lambda: dv.dmp_dv_cmdlist_add_raw(cl, 5), dv.EINVAL),
        ("dmp_dv_cmdlist_add_raw", "NULL list",
         lambda: dv.dmp_dv_cmdlist_add_raw(None, dv.dmp_dv_cmdraw_fc_v0()), dv.EINVAL),
        ("dmp_dv_cmdlist_add_raw", "FC without buffers",
         lambda: dv.dmp_dv_cmdlist_add_raw(cl, dv.dmp_dv_cmdraw_fc_v0()), dv.EINVAL),
        ("dmp_dv_cmdlist_commit", "empty", lambda: dv.dmp_dv_cmdlist_commit(cl), dv.EINVAL),
        ("dmp_dv_cmdlist_exec", "not committed", lambda: dv.dmp_dv_cmdlist_exec(cl) < 0, True),
        ("dmp_dv_cmdlist_wait", "unknown id", lambda: dv.dmp_dv_cmdlist_wait(cl, 5),
         dv.EINVAL),
        ("dmp_dv_cmdlist_wait", "negative id", lambda: dv.dmp_dv_cmdlist_wait(cl, -1),
         dv.EINVAL),
        ("dmp_dv_cmdlist_get_last_exec_time", "none yet",
         lambda: dv.dmp_dv_cmdlist_get_last_exec_time(cl), 0),
        ("dmp_dv_pack_conv_weights", "size query",
         lambda: dv.dmp_dv_pack_conv_weights(8, 3, 3, 8, None, w, b, None, None, 0)[0], 0),
        ("dmp_dv_pack_conv_weights", "kernel 0",
         lambda: dv.dmp_dv_pack_conv_weights(8, 0, 3, 8, None, w, b, None, None, 0),
         (dv.EINVAL, 0)),
        ("dmp_dv_pack_conv_weights", "buffer too small",
         lambda: dv.dmp_dv_pack_conv_weights(8, 3, 3, 8, None, w, b, None,
                                             np.zeros(4, np.uint8), 4), (dv.EINVAL, 0)),
        ("dmp_dv_pack_conv_weights", "too few weights",
         lambda: dv.dmp_dv_pack_conv_weights(8, 3, 3, 8, None, w[:5], b, None,
                                             np.zeros(4096, np.uint8), 4096), (dv.EINVAL, 0)),
        # Sizes are checked before anything is allocated: 2^20 channels is past the
        # command's 16-bit field; 65535 x 65535 7x7 kernels would not fit the memory pool.
        ("dmp_dv_pack_conv_weights", "2^20 channels",
         lambda: dv.dmp_dv_pack_conv_weights(1 << 20, 3, 3, 8, None, w, b, None, None, 0),
         (dv.EINVAL, 0)),
        ("dmp_dv_pack_conv_weights", "2^20 kernels",
         lambda: dv.dmp_dv_pack_conv_weights(8, 3, 3, 1 << 20, None, w, b, None, None, 0),
         (dv.EINVAL, 0)),
        ("dmp_dv_pack_conv_weights", "past the pool",
         lambda: dv.dmp_dv_pack_conv_weights(65535, 7, 7, 65535, None, w, b, None, None, 0),
         (dv.EINVAL, 0)),
        ("dmp_dv_pack_dil_weights", "past the pool",
         lambda: dv.dmp_dv_pack_dil_weights(65535, 7, 7, 65535, None, w, b, None, None, 0),
         (dv.EINVAL, 0)),
        ("dmp_dv_pack_fc_weights", "past the pool",
         lambda: dv.dmp_dv_pack_fc_weights(16384, 1, 1, 65535, 1, 1, None, w, b, None, 0),
         (dv.EINVAL, 0)),
        ("dmp_dv_pack_dil_weights", "size query",
         lambda: dv.dmp_dv_pack_dil_weights(8, 3, 3, 8, None, w, b, None, None, 0)[0], 0),
        ("dmp_dv_pack_dil_weights", "kernel 8",
         lambda: dv.dmp_dv_pack_dil_weights(8, 8, 3, 8, None, w, b, None, None, 0),
         (dv.EINVAL, 0)),
        ("dmp_dv_pack_dil_weights", "too few slopes",
         lambda: dv.dmp_dv_pack_dil_weights(8, 3, 3, 8, None, w, b, b[:3],
                                            np.zeros(8192, np.uint8), 8192), (dv.EINVAL, 0)),
        ("dmp_dv_pack_fc_weights", "size query",
         lambda: dv.dmp_dv_pack_fc_weights(8, 1, 1, 8, 1, 1, None, w[:64], b, None, 0)[0], 0),
        ("dmp_dv_pack_fc_weights", "negative",
         lambda: dv.dmp_dv_pack_fc_weights(-8, 1, 1, 8, 1, 1, None, w, b, None, 0),
         (dv.EINVAL, 0)),
        ("dmp_dv_get_version_string", "valid",
         lambda: dv.dmp_dv_get_version_string().split(".")[0], "7"),
        ("dmp_dv_get_last_error_message", "valid",
         lambda: isinstance(dv.dmp_dv_get_last_error_message(), str), True),
        ("dmp_dv_fpga_device_exists", "FC", lambda: dv.dmp_dv_fpga_device_exists(ctx, 2), 1),
        ("dmp_dv_fpga_device_exists", "NULL", lambda: dv.dmp_dv_fpga_device_exists(None, 1),
         -1),
    ]


def test_the_contract_table(ctx):
    rows = _contract_rows(ctx)
    for name, case, call, expected in rows:
        assert call() == expected, (name, case)
    named = {n for n in dir(dv) if n.startswith("dmp_dv_") and callable(getattr(dv, n))
             and not isinstance(getattr(dv, n), type)}
    assert named == {name for name, *_ in rows}, named ^ {name for name, *_ in rows}
    assert dv.dmp_dv_mem_alloc(ctx, 64) is not None  # still working


def test_reference_counts_keep_handles_alive_until_the_last_release():
    with emu.Session() as sess:
        ctx = dv.dmp_dv_context_create()
        mem = dv.dmp_dv_mem_alloc(ctx, 1024)
        dv.dmp_dv_context_release(ctx)  # the memory still holds the context
        assert dv.dmp_dv_mem_alloc(ctx, 16) is not None
        dv.dmp_dv_mem_retain(mem)
        dv.dmp_dv_mem_release(mem)
        assert dv.dmp_dv_mem_get_size(mem) >= 1024  # one reference left
        live_before = sess.soc.pool.live_buffers
        dv.dmp_dv_mem_release(mem)
        assert dv.dmp_dv_mem_get_size(mem) == 0 and dv.dmp_dv_mem_map(mem) is None
        assert sess.soc.pool.live_buffers == live_before - 1


def test_memory_an_execution_uses_is_not_freed_before_it_ends(ctx):
    cmd, out, view, _ = _conv_command(ctx, _fp16((8, 32, 32)), _fp16((8, 8, 3, 3)),
                                      _fp16((8,)), kernel=3, pad=1)
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
    exec_id = dv.dmp_dv_cmdlist_exec(cl)
    dv.dmp_dv_mem_release(out)  # while the device may still write it
    assert "in use" in dv.dmp_dv_get_last_error_message()
    assert dv.dmp_dv_cmdlist_wait(cl, exec_id) == 0
    dv.dmp_dv_mem_sync_start(out, 1, 0)
    assert view.any()  # the output landed in memory that was never handed to anyone else
    dv.dmp_dv_mem_release(out)
    assert dv.dmp_dv_mem_get_size(out) == 0


def test_the_device_appears_in_the_trace_with_each_command():
    from emu.report.trace import chrome_trace

    with emu.Session(trace=True) as sess:
        ctx = dv.dmp_dv_context_create()
        cmd, *_ = _conv_command(ctx, _fp16((8, 8, 8)), _fp16((8, 8, 3, 3)), _fp16((8,)),
                                kernel=3, pad=1)
        cl = dv.dmp_dv_cmdlist_create(ctx)
        assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
        assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
        events = chrome_trace(sess.soc.recorder.recording)["traceEvents"]
        (ran,) = dv.command_times_ps(cl)
    (command,) = [e for e in events if e.get("name") == "dmp_dv exec 0 conv v0"]
    assert round(command["dur"] * 1_000_000) == ran[1]  # trace microseconds, model ps



def test_the_cache_model_decides_what_the_device_sees_of_unsynced_cpu_writes(ctx):
    from emu.runtime.hbsys import hbSysAllocCachedMem, hbSysMem, hbSysReadMem

    x = _fp16((8, 4, 4))
    weights, bias = _fp16((8, 8, 1, 1)), _fp16((8,))
    cmd, out, view, shape = _conv_command(ctx, x, weights, bias, kernel=1)
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0

    def result() -> np.ndarray:
        assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
        dv.dmp_dv_mem_sync_start(out, 1, 0)
        got = layout.from_device(view, *shape).copy()
        dv.dmp_dv_mem_sync_end(out)
        return got

    def conv(z: np.ndarray) -> np.ndarray:
        return compute.run_conv(z, [compute.ConvRun(m=8, weights=weights, bias=bias)])[0]

    inp = cmd.input_buf.mem
    y = _fp16((8, 4, 4))
    dv.dmp_dv_mem_map(inp)[:] = layout.to_device(y)  # no sync: the lines stay dirty
    assert np.array_equal(result().view(np.uint16), conv(x).view(np.uint16))
    # reading 4 MiB of other memory evicts them: written back, the device reads them
    big = hbSysMem()
    assert hbSysAllocCachedMem(big, 4 << 20) == 0
    assert hbSysReadMem(np.zeros(4 << 20, np.uint8), big, 4 << 20) == 0
    assert np.array_equal(result().view(np.uint16), conv(y).view(np.uint16))


def test_an_invalidate_drops_cpu_writes_not_yet_written_back(ctx):
    mem, view = _mem(ctx, np.full(256, 7, np.uint8))
    view[:] = 9  # not cleaned
    assert dv.dmp_dv_mem_sync_start(mem, 1, 0) == 0
    assert (view == 7).all()  # the device's memory, as after an invalidate on the board
    assert dv.dmp_dv_mem_sync_end(mem) == 0


def test_quantised_conv_weights_through_the_api(ctx):
    """weight_fmt 3: 8-bit indices into a 256-entry FP16 table, packed with quant_map."""
    x = _fp16((9, 6, 6))
    table = _fp16((256,), 0.2)
    index = RNG.integers(0, 256, (4, 9, 3, 3), dtype=np.uint8)
    bias = _fp16((4,))
    inp, _ = _mem(ctx, layout.to_device(x))
    rc, size = dv.dmp_dv_pack_conv_weights(9, 3, 3, 4, table.view(np.uint16), index,
                                           bias.view(np.uint16), None, None, 0)
    assert rc == 0
    packed = np.zeros(size, np.uint8)
    assert dv.dmp_dv_pack_conv_weights(9, 3, 3, 4, table.view(np.uint16), index,
                                       bias.view(np.uint16), None, packed, size) == (0, size)
    wmem, _ = _mem(ctx, packed)
    out, view = _mem(ctx, size=layout.tensor_bytes(4, 6, 6))
    cmd = dv.dmp_dv_cmdraw_conv_v0()
    cmd.input_buf, cmd.output_buf = dv.dmp_dv_buf(inp, 0), dv.dmp_dv_buf(out, 0)
    cmd.w, cmd.h, cmd.z, cmd.c, cmd.topo = 6, 6, 1, 9, 1
    run = cmd.run[0]
    run.weight_buf, run.weight_fmt = dv.dmp_dv_buf(wmem, 0), 3
    run.m, run.conv_enable, run.p, run.pz, run.conv_pad = 4, 1, 3 | 3 << 8, 1, 0x01010101
    cl = dv.dmp_dv_cmdlist_create(ctx)
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
    assert dv.dmp_dv_cmdlist_wait(cl, dv.dmp_dv_cmdlist_exec(cl)) == 0
    dv.dmp_dv_mem_sync_start(out, 1, 0)
    want = compute.run_conv(x, [compute.ConvRun(m=4, kernel=(3, 3), pads=(1, 1, 1, 1),
                                                weights=table[index], bias=bias)])[0]
    assert np.array_equal(layout.from_device(view, 4, 6, 6).view(np.uint16),
                          want.view(np.uint16))


def test_deconvolution_commands_size_their_output_and_refuse_what_the_driver_refuses(ctx):
    x = _fp16((3, 5, 4))
    weights, bias = _fp16((6, 3, 4, 4), 0.3), _fp16((6,), 0.1)
    cmd, _, _, _ = _conv_command(ctx, x, weights, bias, kernel=4, pad=2, stride=2)
    cmd.run[0].conv_enable = 5
    oh, ow = 2 * 4 + 1 + 2 * 2 - 3, 2 * 3 + 1 + 2 * 2 - 3  # the zero-inserted input, stride 1
    out, view = _mem(ctx, size=layout.tensor_bytes(6, oh, ow))
    cmd.output_buf = dv.dmp_dv_buf(out, 0)
    want = compute.run_conv(x, [compute.ConvRun(
        m=6, conv_enable=5, kernel=(4, 4), pads=(2, 2, 2, 2), stride=(2, 2), weights=weights,
        bias=bias)])[0]
    assert want.shape == (6, oh, ow)
    got = _run_one(ctx, cmd, out, view, (6, oh, ow))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    cl = dv.dmp_dv_cmdlist_create(ctx)
    cmd.run[0].conv_dilation = 0x0202  # dilated deconvolutions have stride 1
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == dv.EINVAL
    assert "stride 1" in dv.dmp_dv_get_last_error_message()
    cmd.run[0].conv_dilation, cmd.run[0].conv_enable = 0, 7  # depthwise: m must be c
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == dv.EINVAL
    cmd.run[0].conv_enable = 6
    assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == dv.EINVAL
    dv.dmp_dv_cmdlist_release(cl)


def test_a_closed_session_that_used_dmp_dv_is_freed():
    """dmp_dv's state of a session (its last error message, its execution ids) lives in the
    session's one `dmp_dv` slot, not in module-level tables keyed by session: once the
    session is closed and dropped nothing keeps it alive, and a new session starts afresh."""
    import gc
    import weakref

    def run() -> weakref.ref:
        with emu.Session() as sess:
            ctx = dv.dmp_dv_context_create()
            assert dv.dmp_dv_mem_alloc(None, 16) is None  # an error message to keep
            cmd, *_ = _conv_command(ctx, _fp16((8, 4, 4)), _fp16((8, 8, 1, 1)), _fp16((8,)),
                                    kernel=1)
            cl = dv.dmp_dv_cmdlist_create(ctx)
            assert dv.dmp_dv_cmdlist_add_raw(cl, cmd) == 0 and dv.dmp_dv_cmdlist_commit(cl) == 0
            assert [dv.dmp_dv_cmdlist_exec(cl), dv.dmp_dv_cmdlist_exec(cl)] == [0, 1]
            assert dv.dmp_dv_cmdlist_wait(cl, 1) == 0
            dv.dmp_dv_cmdlist_release(cl)
            dv.dmp_dv_context_release(ctx)
            assert sess.dmp_dv is not None and sess.dmp_dv.next_exec_id == 2
            assert "context" in sess.dmp_dv.last_error
        return weakref.ref(sess)

    ref = run()
    gc.collect()
    assert ref() is None
    with emu.Session():
        assert dv.dmp_dv_get_last_error_message() == ""

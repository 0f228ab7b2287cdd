import numpy as np
import pytest

from emu.chip import Soc
from emu.errors import DspError
from emu.soc.config import load_config
from emu.vdsp.idma import Descriptor, Endpoint, linear


def _soc(depth: int = 32):
    cfg = load_config(overrides=["vdsp.freq_hz=1e9", "vdsp.idma.bytes_per_cycle=1",
                                 "vdsp.idma.descriptor_latency_cycles=100", "ddr.latency_ps=0",
                                 "ddr.bw_bytes_per_s=1e12", f"vdsp.idma.queue_depth={depth}"])
    return Soc(cfg, trace=True).build()


def _ddr(soc, nbytes, pitch=0):
    buf = soc.pool.alloc(nbytes, cached=False)
    return buf, Endpoint(buf.data, 0, pitch, in_tcm=False, name="ddr")


def _tcm(core, offset, pitch=0):
    return Endpoint(core.tcm.data, offset, pitch, in_tcm=True, name="tcm")


def _down_then_up(soc, core, down, up):
    """Run descriptor `down` on channel 0, then `up` on channel 1."""

    def proc():
        done = yield from core.channels[0].copy(down)
        yield done
        done = yield from core.channels[1].copy(up)
        yield done

    soc.env.process(proc())
    soc.run()


def test_descriptors_run_in_order_and_a_full_queue_blocks_the_submitter():
    soc = _soc(depth=2)
    core = soc.vdsp.hw[0]
    channel = core.channels[0]
    _, src = _ddr(soc, 900, pitch=450)
    accepted: list[int] = []
    finished: list[int] = []

    def submitter():
        for k in range(4):
            desc = Descriptor(f"d{k}", src, _tcm(core, 64 * 1024, 450), rows=2, row_bytes=450)
            done = yield from channel.copy(desc)
            accepted.append(soc.env.now)
            done.callbacks.append(lambda _ev: finished.append(soc.env.now))

    soc.env.process(submitter())
    soc.run()
    # Each descriptor: 100 cycles + 900 B at 1 B/cycle = 1 us at 1 GHz.
    assert finished == [1_000_000, 2_000_000, 3_000_000, 4_000_000]
    # Queue of 2: d0 is taken at once, d1 and d2 wait in the queue, d3 waits for a slot.
    assert accepted == [0, 0, 0, 1_000_000]
    assert channel.counters == {"descriptors": 4, "bytes_in": 3600, "busy_in_ps": 4_000_000}


def test_submitters_blocked_on_a_full_queue_get_in_in_the_order_they_came():
    soc = _soc(depth=1)
    core = soc.vdsp.hw[0]
    channel = core.channels[0]
    _, src = _ddr(soc, 900)
    order: list[str] = []

    def submitter(name, delay_ps):
        yield soc.env.timeout(delay_ps)
        desc = linear(name, src, _tcm(core, 0), 900)
        done = yield from channel.copy(desc)
        done.callbacks.append(lambda _ev: order.append(name))

    # a is served at once and b fills the queue; c, then d, then e wait for a slot.
    for name, delay in (("a", 0), ("b", 0), ("c", 10), ("d", 20), ("e", 30)):
        soc.env.process(submitter(name, delay))
    soc.run()
    assert order == ["a", "b", "c", "d", "e"]
    assert soc.env.now == 5_000_000


def test_the_bytes_have_landed_when_the_submitter_resumes():
    soc = _soc()
    core = soc.vdsp.hw[0]
    buf, src = _ddr(soc, 256)
    buf.data[:] = np.arange(256)
    seen = []

    def proc():
        done = yield from core.channels[0].copy(linear("in", src, _tcm(core, 512), 256))
        yield done
        seen.append(core.tcm.data[512: 512 + 256].copy())

    soc.env.process(proc())
    soc.run()
    assert np.array_equal(seen[0], np.arange(256, dtype=np.uint8))


def test_two_d_descriptor_moves_a_strided_block_for_real():
    soc = _soc()
    core = soc.vdsp.hw[1]
    buf, _ = _ddr(soc, 10 * 100)
    buf.data[:] = np.arange(1000) % 251
    image = buf.data.reshape(10, 100)
    # Rows 0..9, bytes 20..35 of each (a 16-wide column block), packed in TCM.
    src = Endpoint(buf.data, 20, 100, in_tcm=False, name="ddr")
    down = Descriptor("in", src, _tcm(core, 4096, 16), rows=10, row_bytes=16)
    back_buf, _ = _ddr(soc, 1000)
    up = Descriptor("out", _tcm(core, 4096, 16),
                    Endpoint(back_buf.data, 20, 100, in_tcm=False, name="ddr"), rows=10,
                    row_bytes=16)
    _down_then_up(soc, core, down, up)
    assert (core.tcm.data[4096: 4096 + 160].reshape(10, 16) == image[:, 20:36]).all()
    assert (back_buf.data.reshape(10, 100)[:, 20:36] == image[:, 20:36]).all()
    assert back_buf.data.reshape(10, 100)[:, :20].sum() == 0
    assert soc.ddr.counters == {"bytes_read": 160, "bytes_written": 160, "transfers": 2}


@pytest.mark.parametrize("pitch", [0, 7, 100])
def test_one_row_descriptor_moves_exactly_its_bytes_whatever_the_pitch(pitch):
    # One row is a plain slice copy (pitches do not matter for it); the bytes around it in
    # TCM and DDR stay as they were, in both directions.
    soc = _soc()
    core = soc.vdsp.hw[0]
    buf, _ = _ddr(soc, 300)
    buf.data[:] = np.arange(300) % 253
    core.tcm.data[8000:8200] = 7
    down = Descriptor("in", Endpoint(buf.data, 33, pitch, in_tcm=False, name="ddr"),
                      _tcm(core, 8050, pitch), rows=1, row_bytes=97)
    back_buf, _ = _ddr(soc, 300)
    up = linear("out", _tcm(core, 8050), Endpoint(back_buf.data, 101, 0, in_tcm=False,
                                                   name="ddr"), 97)
    _down_then_up(soc, core, down, up)
    assert (core.tcm.data[8050:8147] == buf.data[33:130]).all()
    assert (core.tcm.data[8000:8050] == 7).all() and (core.tcm.data[8147:8200] == 7).all()
    assert (back_buf.data[101:198] == buf.data[33:130]).all()
    assert back_buf.data[:101].sum() == 0 and back_buf.data[198:].sum() == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": 0, "row_bytes": 1}, "rows >= 1"),
        ({"rows": 2, "row_bytes": 200}, "pitch 100 is smaller"),
        ({"rows": 11, "row_bytes": 100}, "outside its 1000 B"),
    ],
)
def test_bad_descriptors_are_refused(kwargs, message):
    soc = _soc()
    core = soc.vdsp.hw[0]
    _, src = _ddr(soc, 1000, pitch=100)
    with pytest.raises(DspError, match=message):
        Descriptor("d", src, _tcm(core, 0, 2048), **kwargs)
    with pytest.raises(DspError, match="one side must be TCM"):
        linear("d", src, src, 10)

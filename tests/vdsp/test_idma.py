import pytest

from emu.soc.builder import Soc
from emu.soc.config import load_config
from emu.vdsp.idma import Descriptor


def _soc(depth: int):
    cfg = load_config(overrides=["vdsp.freq_hz=1e9", "vdsp.idma.bytes_per_cycle=1",
                                 "vdsp.idma.descriptor_latency_cycles=100", "ddr.latency_ps=0",
                                 "ddr.bw_bytes_per_s=1e12", f"vdsp.idma.queue_depth={depth}"])
    return Soc(cfg, trace=True).build()


def test_descriptors_run_in_order_and_a_full_queue_blocks_the_submitter():
    soc = _soc(depth=2)
    channel = soc.vdsp.hw[0].channels[0]
    accepted: list[int] = []
    finished: list[int] = []

    def submitter():
        for k in range(4):
            done = yield from channel.copy(Descriptor(f"d{k}", rows=2, row_bytes=450,
                                                      to_tcm=True))
            accepted.append(soc.env.now)
            done.callbacks.append(lambda _ev: finished.append(soc.env.now))

    soc.env.process(submitter())
    soc.run()
    # Each descriptor: 100 cycles + 900 B at 1 B/cycle = 1 us at 1 GHz.
    assert finished == [1_000_000, 2_000_000, 3_000_000, 4_000_000]
    # Queue of 2: d0 is taken at once, d1 and d2 wait in the queue, d3 waits for a slot.
    assert accepted == [0, 0, 0, 1_000_000]
    assert channel.counters == {"descriptors": 4, "bytes_in": 3600}


def test_bad_descriptors_are_refused():
    with pytest.raises(ValueError, match="rows"):
        Descriptor("d", rows=0, row_bytes=1, to_tcm=True)

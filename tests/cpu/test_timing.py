import numpy as np
import pytest

import emu
from emu.cpu import ops, timing
from emu.cpu.cluster import CLEAN, CacheMaintenance, CpuWork
from emu.soc.config import load_config

CPU = load_config(overrides=["cpu.issue_width=2", "cpu.alu_pipes=2", "cpu.load_pipes=1",
                             "cpu.store_pipes=1", "cpu.fp_pipes=2", "cpu.branch_pipes=1",
                             "cpu.fdiv_cycles=13", "cpu.mispredict_cycles=8",
                             "cpu.fpcr_write_cycles=5"]).soc.cpu


def test_dual_issue_paces_a_balanced_mix():
    # 100 ALU ops, 50 loads, 50 stores: 200 instructions at 2 a cycle; no pipe is busier.
    assert timing.issue_cycles(ops.counts(int=100, load=50, store=50), CPU) == 100


def test_the_busiest_pipe_sets_the_pace():
    # 90 loads on the one load pipe outlast 100 instructions at 2 a cycle.
    assert timing.issue_cycles(ops.counts(int=10, load=90), CPU) == 90
    assert timing.issue_cycles(ops.counts(store=7), CPU) == 7
    assert timing.issue_cycles(ops.counts(fp=9, fcvt=1), CPU) == 5
    assert timing.issue_cycles(ops.counts(branch=6, int=2), CPU) == 6


def test_divisions_mispredicts_and_fpcr_writes_add_their_stalls():
    base = timing.issue_cycles(ops.counts(int=20, branch=10), CPU)
    assert base == 15
    assert timing.issue_cycles(ops.counts(int=20, branch=10, mispredict=3), CPU) == 15 + 24
    assert timing.issue_cycles(ops.counts(int=20, fdiv=2), CPU) == 11 + 2 * 12
    assert timing.issue_cycles(ops.counts(int=20, fpcr=4), CPU) == 12 + 4 * 5


def test_replacing_divisions_by_multiplications_is_cheaper():
    assert (timing.issue_cycles(ops.counts(fp=100), CPU)
            < timing.issue_cycles(ops.counts(fdiv=100), CPU))


def test_memory_stalls_and_ddr_latency():
    stalls = timing.memory_stall_cycles(3, 2, 1, 4, 5, CPU)
    assert stalls == (3 * CPU.l2.hit_latency_cycles + 3 * CPU.l3.hit_latency_cycles
                      + 4 * CPU.tlb.l2_hit_cycles + 5 * CPU.tlb.walk_cycles)
    assert timing.ddr_latency_ps(7, 100_000) == 700_000


def test_bad_counts_are_refused():
    with pytest.raises(ValueError):
        timing.issue_cycles(ops.counts(branch=1, mispredict=2), CPU)
    with pytest.raises(ValueError):
        ops.counts(load=-1)
    with pytest.raises(ValueError):
        ops.counts(vector=1)
    with pytest.raises(ValueError):
        timing.memory_stall_cycles(-1, 0, 0, 0, 0, CPU)


@pytest.mark.parametrize("overrides", [[], ["ddr.bw_bytes_per_s=2GB/s", "cpu.freq_hz=1GHz"]])
def test_the_static_cost_of_a_cold_streaming_pass_is_what_the_cluster_charges(overrides):
    """One read stream (3 pages and a bit) and one write stream of whole lines on an idle,
    cold SoC: the estimate's formula gives the simulated time to the picosecond."""
    counts = ops.counts(load=3300, store=800, fp=9000, int=3300, branch=3300, mispredict=1)
    with emu.Session(overrides=overrides) as s:
        cpu, ddr = s.config.cpu, s.config.ddr
        read, written = 13_000, 3_200  # bytes, from the starts of pages 0 and 16
        addrs = np.concatenate([np.arange(0, read, cpu.line_bytes),
                                np.arange(65_536, 65_536 + written, cpu.line_bytes)])
        is_write = np.arange(len(addrs)) >= -(-read // cpu.line_bytes)
        s.main.cpu(CpuWork("pass", counts, addrs=addrs.astype(np.int64), is_write=is_write,
                           full_line=is_write, streams=is_write.astype(np.uint8)), "pass")
        core, moved = timing.cold_pass_ps(counts, [read], [written], cpu, ddr)
        assert s.main.now_ps == core + moved


def test_the_static_cost_of_a_maintenance_call_is_what_the_cluster_charges():
    with emu.Session() as s:
        cpu, ddr = s.config.cpu, s.config.ddr
        s.main.cpu(CpuWork("clean", ops.counts(), maintenance=CacheMaintenance(
            CLEAN, 4096, 10_000)), "clean")  # nothing is cached: nothing to write back
        core, moved = timing.maintenance_ps(-(-10_000 // cpu.line_bytes), 0, cpu, ddr)
        assert (s.main.now_ps, moved) == (core, 0)


def test_a_read_modify_write_of_a_cold_line_waits_for_it_and_a_plain_store_does_not():
    """Scattered counters (`count[i] += 1`): the record has one access a line, loaded first
    and then stored. The load's miss stalls the in-order core as any dependent load does; the
    same accesses as plain stores go to the store buffer and cost no stall. Both dirty the
    lines (the same DDR traffic)."""
    lines = np.arange(0, 64 * 4096 * 7, 4096 * 7, dtype=np.int64)  # no stride the prefetcher
    rng = np.random.default_rng(3)                                  # could learn: shuffled
    addrs = rng.permutation(lines)
    stores = np.ones(len(addrs), np.bool_)

    def run(loaded):
        with emu.Session() as s:
            s.main.cpu(CpuWork("counts", ops.counts(load=64, store=64, int=64), addrs=addrs,
                               is_write=stores, loaded=loaded), "counts")
            return s.main.now_ps, dict(s.soc.cpu.counters), s.config.ddr.latency_ps

    rmw_ps, rmw, latency_ps = run(stores)
    store_ps, plain, _ = run(None)
    assert rmw["loads_from_ddr"] == len(addrs) and plain["loads_from_ddr"] == 0
    assert plain["store_misses"] == len(addrs) and rmw.get("store_misses", 0) == 0
    assert rmw["ddr_line_reads"] == plain["ddr_line_reads"] == len(addrs)
    assert rmw_ps > store_ps + len(addrs) * latency_ps // 2

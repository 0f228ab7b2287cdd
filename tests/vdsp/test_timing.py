import numpy as np
import pytest

from emu.jit import njit
from emu.soc.config import load_config
from emu.vdsp import isa
from emu.vdsp.timing import bundle_cycles, kernel_cycles

VDSP = load_config(overrides=["vdsp.fdiv_cycles=8", "vdsp.gather_access_cycles=1",
                              "vdsp.kernel_call_cycles=0", "vdsp.tcm.sub_banks=8",
                              "vdsp.tcm.sub_bank_width_bytes=4"]).soc.vdsp


def _ctx():
    return isa.make_context(2 * 128 * 1024, 128 * 1024, 8, 4)


def _counters(**counts):
    c = np.zeros(isa.N_COUNTERS, np.int64)
    for name, value in counts.items():
        c[isa.COUNTER_NAMES.index(name)] = value
    return c


def test_bundles_are_bound_by_the_busiest_constraint():
    # 5 slots; two memory ops per bundle, at most one of them a store.
    assert bundle_cycles(loads=10, stores=0, alu_ops=0, vdsp=VDSP) == 5
    assert bundle_cycles(loads=0, stores=10, alu_ops=0, vdsp=VDSP) == 10
    assert bundle_cycles(loads=10, stores=10, alu_ops=0, vdsp=VDSP) == 10
    assert bundle_cycles(loads=2, stores=1, alu_ops=20, vdsp=VDSP) == 5
    assert bundle_cycles(loads=0, stores=0, alu_ops=0, vdsp=VDSP) == 0
    with pytest.raises(ValueError):
        bundle_cycles(-1, 0, 0, VDSP)


def test_kernel_cycles_from_counters():
    k = kernel_cycles(_counters(load=100, store=50, alu=300, fdiv=10, gather_conflict=40), VDSP)
    assert (k.bundles, k.gather_cycles, k.fdiv_stall_cycles) == (92, 40, 70)
    assert k.total == 92 + 70 and k.bound == "slots" and k.memory_ops == 150
    g = kernel_cycles(_counters(gather_a=10, gather_d=10, gather_conflict=160), VDSP)
    assert g.bound == "gather" and g.total == 160


@njit
def _divide(ctx, n, s):
    for i in range(n):
        x = isa.load_f32(ctx, 64 * (i % 64))
        isa.store(ctx, isa.fdiv_f32(ctx, x, isa.splat_f32(ctx, s)), 8192 + 64 * (i % 64))


@njit
def _reciprocal(ctx, n, s):
    r = isa.frecip_f32(ctx, isa.splat_f32(ctx, s))
    for i in range(n):
        x = isa.load_f32(ctx, 64 * (i % 64))
        isa.store(ctx, isa.mul_f32(ctx, x, r), 8192 + 64 * (i % 64))


def test_replacing_divisions_by_reciprocal_multiplications_saves_cycles():
    costs = []
    for kernel in (_divide, _reciprocal):
        ctx = _ctx()
        kernel(ctx, 1000, np.float32(3.0))
        costs.append(kernel_cycles(ctx.counters, VDSP).total)
    assert costs[1] < costs[0]


@njit
def _gather(ctx, offsets, n):
    for _ in range(n):
        isa.gather_d(ctx, isa.gather_a_f32(ctx, 0, offsets))


def test_a_gather_hitting_one_sub_bank_costs_more_than_one_spread_across_them():
    costs = []
    # Consecutive words spread over the 8 sub-banks; a 32-byte stride puts all 16 lanes in one.
    for stride in (4, 32):
        ctx = _ctx()
        _gather(ctx, (np.arange(16) * stride).astype(np.uint32), 100)
        costs.append(kernel_cycles(ctx.counters, VDSP).total)
    assert costs[1] > costs[0]
    assert costs == [200, 1600]

from collections.abc import Generator
from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.mem.ddr import POLICIES, Ddr, solo_transfer_ps
from emu.soc.config import DDR_POLICIES, load_config
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder
from tests.mem import ddr_reference


class CountingEnv(Sim):
    """Counts the events the simulation processes."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        super().step()


def _ddr(bw: str = "1e12", latency: str = "100", policy: str = "fair",
         ) -> tuple[CountingEnv, Ddr]:
    cfg = load_config(overrides=[f"ddr.bw_bytes_per_s={bw}", f"ddr.latency_ps={latency}",
                                 f"ddr.policy={policy}"]).soc.ddr
    env = CountingEnv()
    return env, Ddr("ddr", None, env, cfg, TraceRecorder(True))


def _run(env, ddr, jobs) -> dict[str, int]:
    """jobs: (name, start_ps, nbytes, cap or None); returns finish times."""
    finished: dict[str, int] = {}

    def job(name, start, nbytes, cap) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(start)
        yield ddr.transfer(nbytes, name, cap_bytes_per_s=cap)
        finished[name] = env.now

    for name, start, nbytes, cap in jobs:
        env.process(job(name, start, nbytes, cap))
    env.run()
    return finished


def test_a_transfer_alone_takes_latency_plus_bytes_over_bandwidth():
    env, ddr = _ddr(bw="25.6 GB/s", latency="100 ns")
    finished = _run(env, ddr, [("a", 0, 1_000_000, None)])
    # 1e6 B / 25.6e9 B/s = 39.0625 us, plus 100 ns.
    assert finished == {"a": 100_000 + 39_062_500}


@pytest.mark.parametrize("nbytes, cap", [(1_000_000, None), (777_777, 3e9), (1, 1e12), (0, None)])
def test_the_static_formula_is_what_a_lone_transfer_takes(nbytes, cap):
    env, ddr = _ddr(bw="25.6 GB/s", latency="100 ns")
    finished = _run(env, ddr, [("a", 0, nbytes, cap)])
    assert solo_transfer_ps(nbytes, ddr.cfg, cap) == (finished["a"] if nbytes else 0)


def test_two_equal_concurrent_transfers_each_take_twice_the_solo_time():
    env, ddr = _ddr()
    solo = _run(*_ddr(), [("a", 0, 10_000, None)])["a"]
    both = _run(env, ddr, [("a", 0, 10_000, None), ("b", 0, 10_000, None)])
    assert solo == 100 + 10_000
    assert both == {"a": 100 + 20_000, "b": 100 + 20_000}


def test_late_arrival_shares_from_when_it_arrives():
    env, ddr = _ddr()
    # a, b flow from 100 at 1/2 B/ps each; c joins at 600 (after its latency), then 1/3
    # each until a and b end at 2850; c then runs alone: 3000 - 750 B left at 1 B/ps.
    finished = _run(env, ddr, [("a", 0, 1000, None), ("b", 0, 1000, None),
                               ("c", 500, 3000, None)])
    assert finished == {"a": 2850, "b": 2850, "c": 5100}
    assert ddr.counters["bytes_read"] == 5000
    assert ddr.stats()["busy_ps"] == 5000


def test_capped_requester_keeps_its_cap_and_leaves_the_rest():
    env, ddr = _ddr()
    # DDR 1 B/ps; a is capped at 0.25 B/ps, so b gets 0.75 B/ps.
    finished = _run(env, ddr, [("a", 0, 1000, 0.25e12), ("b", 0, 3000, None)])
    assert finished == {"a": 100 + 4000, "b": 100 + 4000}


def test_in_order_serves_the_oldest_transfer_first():
    env, ddr = _ddr(policy="in_order")
    # a arrived first and takes the whole 1 B/ps until 1100; b then takes it all until
    # 2100; c (capped at 0.25 B/ps, arriving last) gets nothing before that, then 2000 ps.
    finished = _run(env, ddr, [("a", 0, 1000, None), ("b", 10, 1000, None),
                               ("c", 20, 500, 0.25e12)])
    assert finished == {"a": 1100, "b": 2100, "c": 4100}


def test_in_order_lets_a_capped_oldest_transfer_leave_the_rest():
    env, ddr = _ddr(policy="in_order")
    finished = _run(env, ddr, [("a", 0, 1000, 0.25e12), ("b", 0, 3000, None)])
    assert finished == {"a": 100 + 4000, "b": 100 + 4000}


def test_the_policy_names_the_config_accepts_are_the_registered_ones():
    assert set(DDR_POLICIES) == set(POLICIES)


def test_zero_byte_transfer_costs_only_latency():
    env, ddr = _ddr()
    assert _run(env, ddr, [("z", 0, 0, None)]) == {"z": 100}


def test_negative_size_is_refused():
    _, ddr = _ddr()
    with pytest.raises(ValueError, match="negative transfer size"):
        ddr.transfer(-1, "x")


def test_event_count_does_not_grow_with_bytes():
    counts = []
    for nbytes in (10**3, 10**6, 10**9):
        env, ddr = _ddr()
        _run(env, ddr, [(f"t{i}", 37 * i, nbytes, None) for i in range(8)])
        counts.append(env.steps)
    assert counts[0] == counts[1] == counts[2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 20_000),
                          st.one_of(st.none(), st.sampled_from([0.1e12, 0.5e12]))),
                min_size=1, max_size=12), st.sampled_from(sorted(POLICIES)))
def test_bytes_are_conserved_and_no_transfer_beats_its_own_limit(jobs, policy):
    env, ddr = _ddr(policy=policy)
    named = [(f"j{i}", start, nbytes, cap) for i, (start, nbytes, cap) in enumerate(jobs)]
    finished = _run(env, ddr, named)
    assert len(finished) == len(jobs)
    assert ddr.counters["bytes_read"] == sum(n for _, n, _ in jobs)
    assert ddr.stats()["bytes_by_requester"] == {name: n for name, _, n, _ in named}
    for name, start, nbytes, cap in named:
        rate = min(1.0, cap / 1e12) if cap else 1.0
        assert finished[name] >= start + 100 + nbytes / rate - 1e-6
    # The DDR never moves more than 1 B/ps: busy time covers every byte.
    assert ddr.stats()["busy_ps"] >= sum(n for _, n, _ in jobs)
    assert ddr.in_flight == 0


# Caps whose bytes per picosecond are not dyadic fractions, and a bandwidth that is not
# either: the exact arithmetic must find common denominators for all of them.
_ODD_CAPS = [0.1e12, 0.5e12, 3e9, 1e12 / 3, 7.77e11, 2.5e11 / 7]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 20_000),
                          st.one_of(st.none(), st.sampled_from(_ODD_CAPS))),
                min_size=1, max_size=14),
       st.sampled_from(sorted(POLICIES)), st.sampled_from(["1e12", "25.6e9", "3.3e11"]),
       st.sampled_from(["0", "100"]))
def test_finish_times_and_bandwidth_trace_equal_an_exact_fraction_model(jobs, policy, bw,
                                                                        latency):
    env, ddr = _ddr(bw=bw, latency=latency, policy=policy)
    recorder = TraceRecorder(True)
    ddr = Ddr("ddr", None, env, ddr.cfg, recorder)
    named = [(f"j{i}", start, nbytes, cap) for i, (start, nbytes, cap) in enumerate(jobs)]
    finished = _run(env, ddr, named)
    expected, samples = ddr_reference.simulate(jobs, float(bw), int(latency), policy)
    assert [finished[name] for name, *_ in named] == expected
    # The counter after the last change at each instant (changes at one instant may come
    # in either order).
    recorded: dict[int, tuple[int, float]] = {}
    for sample in recorder.recording.counters:
        values = dict(sample.values)
        recorded[sample.at_ps] = (values["transfers"], values["gb_per_s"])
    assert recorded == samples


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 20_000),
                          st.one_of(st.none(), st.sampled_from(_ODD_CAPS)), st.booleans()),
                min_size=1, max_size=12, unique_by=lambda job: job[0]),
       st.sampled_from(sorted(POLICIES)))
def test_a_request_delayed_at_the_ddr_equals_one_made_later(jobs, policy):
    """`transfer(delay_ps=d)` now is the transfer made d ps later (an iDMA descriptor's
    set-up), for the oldest-first order too: some jobs wait and call, the others call at
    once with their start as the delay; the finish times are the reference's. (Starts are
    distinct: requests reaching the DDR at one instant are ordered as they were made.)"""
    env, ddr = _ddr(policy=policy)
    finished: dict[int, int] = {}

    def job(i, start, nbytes, cap, delayed) -> Generator[simpy.Event, Any, None]:
        if not delayed:
            yield env.timeout(start)
        yield ddr.transfer(nbytes, f"j{i}", cap_bytes_per_s=cap,
                           delay_ps=start if delayed else 0)
        finished[i] = env.now

    for i, spec in enumerate(jobs):
        env.process(job(i, *spec))
    env.run()
    expected, _ = ddr_reference.simulate([spec[:3] for spec in jobs], 1e12, 100, policy)
    assert [finished[i] for i in range(len(jobs))] == expected


def test_many_transfers_with_odd_caps_in_flight_at_once_stay_exact():
    # 20 transfers in flight need lcm(1..20) in the unit's denominator.
    jobs = [(3 * i, 1000 + 37 * i, _ODD_CAPS[i % len(_ODD_CAPS)] if i % 3 else None)
            for i in range(20)]
    for policy in sorted(POLICIES):
        env, ddr = _ddr(bw="25.6e9", policy=policy)
        finished = _run(env, ddr, [(f"j{i}", *job) for i, job in enumerate(jobs)])
        expected, _ = ddr_reference.simulate(jobs, 25.6e9, 100, policy)
        assert [finished[f"j{i}"] for i in range(len(jobs))] == expected

import pytest
import simpy

from emu.soc.sim import Sim


def test_a_cancelled_timer_neither_fires_nor_moves_the_clock():
    env = Sim()
    fired = []
    stale = env.timeout(1_000)
    stale.callbacks.append(lambda _e: fired.append("stale"))
    live = env.timeout(10)
    live.callbacks.append(lambda _e: fired.append("live"))
    env.cancel(stale)
    env.run()
    assert fired == ["live"] and env.now == 10
    assert env.peek() == simpy.core.Infinity


def test_cancel_ignores_events_that_are_not_waiting_in_the_queue():
    env = Sim()
    done = env.timeout(5)
    env.run()
    env.cancel(done)  # processed already
    env.cancel(env.event())  # never scheduled
    later = env.timeout(3)
    env.run()
    assert later.processed and env.now == 8


def test_cancelled_timers_behind_the_head_are_dropped_when_they_reach_it():
    env = Sim()
    order = []
    timers = {t: env.timeout(t) for t in (1, 2, 3)}
    for t, timer in timers.items():
        timer.callbacks.append(lambda _e, t=t: order.append(t))
    env.cancel(timers[2])
    env.run()
    assert order == [1, 3] and env.now == 3
    with pytest.raises(simpy.core.EmptySchedule):
        env.step()

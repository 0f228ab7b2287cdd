"""The shared DDR: one bandwidth model every block's traffic flows through.

A transfer waits the DDR latency, then its bytes flow at a rate the DDR assigns. With the
`fair` policy the bandwidth is shared max-min fairly among the transfers in flight: each
gets an equal share, except that a requester capped below its share (a port narrower than
the DDR) keeps its cap and leaves the rest to the others. With `in_order` the oldest
transfer takes all it can and later ones share what is left, in arrival order. A transfer
alone therefore takes `latency + bytes / min(bandwidth, cap)`; two equal transfers started
together each take about twice the solo bandwidth time (fair), and every byte asked for is
moved exactly once.

The model is event-driven on arrivals and departures only: rates are recomputed when a
transfer starts or ends, and the next completion is scheduled directly, so the number of
simulation events grows with the number of transfers, never with the bytes moved. All
arithmetic is exact; completion instants round up to the next whole picosecond.

Exact without `fractions.Fraction` (whose every operation normalises through a gcd, the
model's main cost on a busy frame): bytes and rates are whole numbers of a unit, 1/`scale`
of a byte, with `scale` a multiple of every denominator they need. A rate is the DDR's
bandwidth, a port's cap, or what is left of the bandwidth after some caps split among at
most n transfers in flight, so `scale` = (the common denominator of the bandwidth and the
caps, in bytes per picosecond) x lcm(1..n) keeps each one whole; it grows, and every
amount held is rescaled with it, when a transfer with a new cap arrives or more are in
flight than ever before. Whole units give the same instants, counters and trace values
as fractions would: the same exact quantities, only written over a common denominator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from math import gcd, lcm
from typing import Any

import simpy

from emu.soc.clock import PS_PER_S, ceil_div
from emu.soc.component import Component
from emu.soc.config import DdrConfig
from emu.soc.sim import Sim
from emu.soc.trace import TraceRecorder


@dataclass
class _Flow:
    """A transfer in flight; amounts in units of 1/scale byte (see the module docstring)."""

    flow_id: int
    arrival_ps: int
    """When the request reached the DDR (its latency starts then); with `flow_id`, the
    order of age."""
    requester: str
    nbytes: int
    write: bool
    remaining: int
    cap: int | None
    """The requester's port limit in units per picosecond; None when uncapped."""
    cap_bytes_per_ps: Fraction | None
    done: simpy.Event
    rate: int = 0


def _share_fairly(total: int, flows: list[_Flow]) -> None:
    """Max-min fair rates (water-filling): capped flows keep their cap, the rest split.
    Each split is a whole number of units: `total` and the caps are whole multiples of
    lcm(1..len(flows)) units (see the module docstring)."""
    left = total
    pending = sorted(flows, key=lambda f: (f.cap is None, f.cap or 0, f.flow_id))
    for position, flow in enumerate(pending):
        share = left // (len(pending) - position)
        flow.rate = share if flow.cap is None or flow.cap >= share else flow.cap
        left -= flow.rate


def _share_in_order(total: int, flows: list[_Flow]) -> None:
    """First come, first served: each transfer in arrival order takes all it can (its cap)
    of what the earlier ones left."""
    left = total
    for flow in sorted(flows, key=lambda f: (f.arrival_ps, f.flow_id)):
        flow.rate = left if flow.cap is None or flow.cap >= left else flow.cap
        left -= flow.rate


# Bandwidth-sharing policies by name; `emu list` prints them.
POLICIES: dict[str, tuple[Callable[[int, list[_Flow]], None], str]] = {
    "fair": (_share_fairly, "max-min fair sharing among transfers in flight (per-port caps)"),
    "in_order": (_share_in_order, "first come, first served: the oldest transfer in flight "
                                  "takes all it can, later ones what is left"),
}


def solo_transfer_ps(nbytes: int, cfg: DdrConfig, cap_bytes_per_s: float | None = None,
                     latency_ps: int | None = None) -> int:
    """How long `Ddr.transfer` takes with nothing else in flight: the latency (`latency_ps`,
    default the DDR's), then the bytes at the lesser of the DDR's bandwidth and the
    requester's cap. The static estimate's DDR time; the simulation gives the same alone."""
    if nbytes < 0:
        raise ValueError(f"negative transfer size {nbytes}")
    if not nbytes:
        return 0
    rate = Fraction(cfg.bw_bytes_per_s)
    if cap_bytes_per_s is not None:
        rate = min(rate, Fraction(cap_bytes_per_s))
    wait_ps = cfg.latency_ps if latency_ps is None else latency_ps
    return wait_ps + ceil_div(nbytes * PS_PER_S, rate)


@lru_cache(maxsize=64)
def _bytes_per_ps(bytes_per_s: float) -> Fraction:
    """A rate in bytes per picosecond, exactly; a requester passes the same cap on every
    transfer, so it is converted once."""
    return Fraction(bytes_per_s) / PS_PER_S


@lru_cache(maxsize=64)
def _lcm_up_to(n: int) -> int:
    """lcm(1, 2, ..., n): a multiple of every count of transfers a bandwidth is split among."""
    return lcm(*range(1, n + 1))


class Ddr(Component):
    """The DDR as a shared, latency-plus-bandwidth resource."""

    def __init__(
        self, name: str, parent: Component | None, env: Sim, cfg: DdrConfig,
        recorder: TraceRecorder,
    ) -> None:
        super().__init__(name, parent)
        if cfg.policy not in POLICIES:
            raise ValueError(f"{self.path}: unknown DDR policy {cfg.policy!r}")
        self.env = env
        self.cfg = cfg
        self._share = POLICIES[cfg.policy][0]
        bw_bytes_per_ps = Fraction(cfg.bw_bytes_per_s) / PS_PER_S
        # Units: 1/scale byte. `_denominators` is the common denominator of the bandwidth
        # and every cap seen, `_most_flows` the most transfers in flight so far; the
        # scale is their product's multiple lcm(1..most) (see the module docstring).
        self._denominators = bw_bytes_per_ps.denominator
        self._most_flows = 1
        self._scale = self._denominators
        self._bw_units_per_ps = bw_bytes_per_ps.numerator
        self._flows: list[_Flow] = []
        self._next_id = 0
        self._timer: simpy.Event | None = None  # when the next flow would finish
        self._last_ps: int = env.now
        self._busy_since: int | None = None
        self._recorder = recorder
        self._track = recorder.track(self.path)
        self.busy_ps = 0
        self.bytes_by_requester: dict[str, int] = {}

    def alongside(self, compute_ps: int, nbytes: int, requester: str, *, written: int = 0,
                  cap_bytes_per_s: float | None = None) -> simpy.Event:
        """An accelerator's step: `compute_ps` of computing and its `nbytes` of DDR traffic
        (`written` of them writes) side by side, in one flow at the requester's port; the
        event fires when both are done."""
        compute = self.env.timeout(compute_ps)
        if not nbytes:
            return compute
        moved = self.transfer(nbytes, requester, written=written,
                              cap_bytes_per_s=cap_bytes_per_s)
        return self.env.all_of([compute, moved])

    def transfer(
        self, nbytes: int, requester: str, *, write: bool = False, written: int | None = None,
        cap_bytes_per_s: float | None = None, latency_ps: int | None = None,
        done: simpy.Event | None = None, delay_ps: int = 0,
    ) -> simpy.Event:
        """Move `nbytes` for `requester`; the returned event fires when the last byte lands.

        The bytes are reads, or writes if `write`; a mix (a CPU's line fills and write-backs)
        gives the count of written ones in `written`. `cap_bytes_per_s` is the requester's
        own port limit; `latency_ps` replaces the DDR latency when the requester knows
        better (e.g. several misses in a row). `done`, an untriggered event, is the one to
        fire instead of a new one (a requester that handed it out before the transfer began).
        `delay_ps` is the requester's own time before its request reaches the DDR (a DMA
        descriptor's set-up): one timer for both waits, where the requester would otherwise
        wait for its own and then call.
        """
        if nbytes < 0:
            raise ValueError(f"{self.path}: negative transfer size {nbytes} from {requester}")
        if written is None:
            written = nbytes if write else 0
        if not 0 <= written <= nbytes:
            raise ValueError(f"{self.path}: {written} written bytes of a {nbytes} B transfer")
        if done is None:
            done = self.env.event()
        cap = None if cap_bytes_per_s is None else _bytes_per_ps(cap_bytes_per_s)
        flow = _Flow(self._next_id, self.env.now + delay_ps, requester, nbytes, write, 0, None,
                     cap, done)
        self._next_id += 1
        self.count("transfers")
        if write or written:
            self.count("bytes_written", written)
        if not write:
            self.count("bytes_read", nbytes - written)
        self.bytes_by_requester[requester] = self.bytes_by_requester.get(requester, 0) + nbytes
        wait_ps = delay_ps + (self.cfg.latency_ps if latency_ps is None else latency_ps)
        if wait_ps == 0:
            self._admit(flow)
        else:
            self.env.timeout(wait_ps).callbacks.append(lambda _ev: self._admit(flow))
        return done

    @property
    def in_flight(self) -> int:
        return len(self._flows)

    def _admit(self, flow: _Flow) -> None:
        if flow.nbytes == 0:
            flow.done.succeed()
            return
        self._advance()
        self._flows.append(flow)
        exact = flow.cap_bytes_per_ps
        if exact is not None and self._denominators % exact.denominator:
            self._denominators = lcm(self._denominators, exact.denominator)
        self._most_flows = max(self._most_flows, len(self._flows))
        self._rescale(self._denominators * _lcm_up_to(self._most_flows))
        flow.remaining = flow.nbytes * self._scale
        if exact is not None:
            flow.cap = exact.numerator * (self._scale // exact.denominator)
        self._reschedule()

    def _rescale(self, needed: int) -> None:
        """Make the unit fine enough that `needed` divides the scale, converting every amount
        held (an exact multiplication: the old scale divides the new one)."""
        if self._scale % needed == 0:
            return
        factor = needed // gcd(self._scale, needed)
        self._scale *= factor
        self._bw_units_per_ps *= factor
        for flow in self._flows:
            flow.remaining *= factor
            flow.rate *= factor
            if flow.cap is not None:
                flow.cap *= factor

    def _advance(self) -> None:
        """Apply the progress every flow made at its rate since the last change."""
        now = self.env.now
        elapsed = now - self._last_ps
        if elapsed:
            for flow in self._flows:
                flow.remaining -= flow.rate * elapsed
        self._last_ps = now

    def _reschedule(self) -> None:
        if self._timer is not None:
            self.env.cancel(self._timer)  # the rates changed: it no longer holds
            self._timer = None
        now = self.env.now
        if not self._flows:
            if self._busy_since is not None:
                self.busy_ps += now - self._busy_since
                self._busy_since = None
            self._track.counter("ddr", now, transfers=0, gb_per_s=0.0)
            return
        if self._busy_since is None:
            self._busy_since = now
        self._share(self._bw_units_per_ps, self._flows)
        if self._recorder.enabled:
            # Integer true division rounds correctly, as float() of the exact fraction does.
            gb_per_s = sum(f.rate for f in self._flows) * PS_PER_S / (self._scale * 10**9)
            self._track.counter("ddr", now, transfers=len(self._flows), gb_per_s=gb_per_s)
        # A policy may leave a flow nothing for now (in_order); it waits for the next change.
        wait = min(-(-f.remaining // f.rate) for f in self._flows if f.rate > 0)
        self._timer = self.env.timeout(max(wait, 0))
        self._timer.callbacks.append(self._on_timer)

    def _on_timer(self, _event: simpy.Event) -> None:
        self._timer = None
        self._advance()
        finished = [f for f in self._flows if f.remaining <= 0]
        self._flows = [f for f in self._flows if f.remaining > 0]
        self._reschedule()
        for flow in finished:
            flow.done.succeed()

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        busy = self.busy_ps
        if self._busy_since is not None:
            busy += self.env.now - self._busy_since
        out["busy_ps"] = busy
        out["bytes_by_requester"] = dict(sorted(self.bytes_by_requester.items()))
        return out

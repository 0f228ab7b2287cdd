"""A slow, obviously exact model of the DDR's bandwidth sharing, in `fractions.Fraction`.

`emu.mem.ddr.Ddr` keeps bytes and rates as whole numbers over a growing common denominator
and runs as SimPy callbacks; this model steps from one arrival or completion to the next
with plain fractions, so the two can be compared on any set of transfers.
"""

from __future__ import annotations

from fractions import Fraction

PS_PER_S = 10**12


def _rates(policy: str, total: Fraction, flows: list[list]) -> list[Fraction]:
    """The rate of each flow ([flow_id, remaining, cap or None]), in `flows` order."""
    rates: dict[int, Fraction] = {}
    left = total
    if policy == "fair":
        # Water-filling: the lowest caps first, each flow the lesser of its cap and an
        # equal split of what is left.
        pending = sorted(flows, key=lambda f: (f[2] is None, f[2] or 0, f[0]))
        for position, (flow_id, _, cap) in enumerate(pending):
            share = left / (len(pending) - position)
            rates[flow_id] = share if cap is None or cap >= share else cap
            left -= rates[flow_id]
    else:  # in_order: the oldest takes all it can
        for flow_id, _, cap in sorted(flows, key=lambda f: f[0]):
            rates[flow_id] = left if cap is None or cap >= left else cap
            left -= rates[flow_id]
    return [rates[f[0]] for f in flows]


def simulate(jobs: list[tuple[int, int, float | None]], bw_bytes_per_s: float,
             latency_ps: int, policy: str
             ) -> tuple[list[int], dict[int, tuple[int, float]]]:
    """Finish instant of each job (start_ps, nbytes, cap in bytes/s or None), and the DDR
    counter after all changes at each instant a transfer arrived or left: (transfers in
    flight, GB/s in use). Transfers are numbered by start, then by position in `jobs`."""
    total = Fraction(bw_bytes_per_s) / PS_PER_S
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i][0], i))
    arrivals = sorted((jobs[i][0] + latency_ps, flow_id, i) for flow_id, i in enumerate(order))
    finish = [0] * len(jobs)
    samples: dict[int, tuple[int, float]] = {}
    active: list[list] = []  # [flow_id, remaining bytes, cap in bytes/ps], per job index
    owner: dict[int, int] = {}
    now = 0
    while arrivals or active:
        rates = _rates(policy, total, active) if active else []
        candidates = [now + max(-(-f[1] // r), 0)
                      for f, r in zip(active, rates, strict=True) if r > 0]
        if arrivals:
            candidates.append(arrivals[0][0])
        then = min(candidates)
        for flow, rate in zip(active, rates, strict=True):
            flow[1] -= rate * (then - now)
        now = then
        changed = False
        for flow in [f for f in active if f[1] <= 0]:
            finish[owner[flow[0]]] = now
            active.remove(flow)
            changed = True
        while arrivals and arrivals[0][0] == now:
            _, flow_id, i = arrivals.pop(0)
            _, nbytes, cap = jobs[i]
            if nbytes == 0:
                finish[i] = now
                continue
            owner[flow_id] = i
            active.append([flow_id, Fraction(nbytes),
                           None if cap is None else Fraction(cap) / PS_PER_S])
            changed = True
        if changed:
            in_use = sum(_rates(policy, total, active), Fraction(0)) if active else Fraction(0)
            samples[now] = (len(active), float(in_use * PS_PER_S / 10**9))
    return finish, samples

"""Calibration's histogram, percentile and KL divergence (emu/nn/quantize.py), restated
slowly and plainly: Python loops over values and bins, no prefix sums, no vectorisation.

The histogram is built in one go over the final range (the smallest power of two above the
largest magnitude), which the one-pass, growing-range `quantize.Histogram` must equal bin
for bin whatever the order and the chunks it was fed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

from emu.nn.quantize import HISTOGRAM_BINS, KL_LEVELS, KL_MIN_KEPT


def power_of_two_above(value: float) -> float:
    """The smallest power of two strictly above `value` (> 0), by doubling and halving."""
    top = 1.0
    while top <= value:
        top *= 2.0
    while top / 2.0 > value:
        top /= 2.0
    return top


def histogram(values: Iterable[float]) -> tuple[list[int], float]:
    """(counts, top) of the positive finite magnitudes among `values`, HISTOGRAM_BINS bins
    over [0, top); ([0] * bins, 0.0) when there are none."""
    kept = [float(v) for v in values if math.isfinite(v) and v > 0]
    counts = [0] * HISTOGRAM_BINS
    if not kept:
        return counts, 0.0
    top = power_of_two_above(max(kept))
    for value in kept:
        counts[math.floor(value / top * HISTOGRAM_BINS)] += 1
    return counts, top


def percentile(counts: list[int], top: float, percent: float) -> float:
    """The upper edge of the bin where the running count first reaches ceil(percent / 100 x
    total), the percent taken as written (exact decimal)."""
    total = sum(counts)
    if total == 0:
        return 0.0
    rank = max(1, math.ceil(Fraction(repr(float(percent))) * total / 100))
    running = 0
    for index, count in enumerate(counts):
        running += count
        if running >= rank:
            return (index + 1) * top / HISTOGRAM_BINS
    raise AssertionError("unreachable: the running count ends at the total")


def kl_divergence(counts: list[int], kept: int) -> float:
    """KL(P || Q) for keeping `kept` bins, as TensorRT's entropy calibration builds P and Q:
    P the first `kept` bins with every count above added to the last of them; Q those bins
    merged into KL_LEVELS groups (group g: bins floor(g kept / L) to floor((g + 1) kept / L)
    - 1), each group's count spread evenly over the group's bins that were nonzero."""
    p = [float(c) for c in counts[:kept]]
    p[-1] += float(sum(counts[kept:]))
    q = [0.0] * kept
    for g in range(KL_LEVELS):
        lo, hi = g * kept // KL_LEVELS, (g + 1) * kept // KL_LEVELS
        group = sum(float(counts[j]) for j in range(lo, hi))
        nonzero = [j for j in range(lo, hi) if counts[j] > 0]
        for j in nonzero:
            q[j] = group / len(nonzero)
    total_p, total_q = sum(p), sum(q)
    if total_q == 0:
        return math.inf
    divergence = 0.0
    for pj, qj in zip(p, q, strict=True):
        if pj > 0:
            if qj == 0:
                return math.inf
            divergence += pj / total_p * math.log((pj / total_p) / (qj / total_q))
    return divergence


def kl_threshold(counts: list[int], top: float) -> float:
    """The clip of least divergence: candidates from the bin of the KL_MIN_KEPT percentile
    (or KL_LEVELS, if more) to the last nonzero bin, the larger on a tie; a histogram using
    at most KL_LEVELS bins keeps them all."""
    width = top / HISTOGRAM_BINS
    used = 0
    for index, count in enumerate(counts):
        if count > 0:
            used = index + 1
    if used <= KL_LEVELS:
        return used * width
    first = max(KL_LEVELS, round(percentile(counts, top, KL_MIN_KEPT) / width))
    best, least = used, math.inf
    for kept in range(first, used + 1):
        divergence = kl_divergence(counts[:used], kept)
        if divergence <= least:
            best, least = kept, divergence
    return best * width

"""Slow, obviously-correct references for `emu.vdsp.isa`, one lane at a time.

Integers are Python ints wrapped by hand; floats are numpy float32 scalars, so every
operation is rounded to float32 once; memory is a `bytearray` with the fault rules written
out as plain `if`s. Only the counter indices and fault codes are taken from the module under
test: they are names, not behaviour.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from emu.vdsp import isa


def wrap(value: int, bits: int) -> int:
    """`value` modulo 2**bits, as a signed `bits`-bit integer."""
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


def f32(x: float) -> np.float32:
    return np.float32(x)


def fmin(x: np.float32, y: np.float32) -> np.float32:
    """IEEE 754-2019 minimum: NaN if either is NaN; -0 is below +0."""
    if math.isnan(x):
        return x
    if math.isnan(y):
        return y
    if x == y == 0:
        return x if math.copysign(1.0, x) < 0 else y
    return x if x < y else y


def fmax(x: np.float32, y: np.float32) -> np.float32:
    """IEEE 754-2019 maximum: NaN if either is NaN; +0 is above -0."""
    if math.isnan(x):
        return x
    if math.isnan(y):
        return y
    if x == y == 0:
        return x if math.copysign(1.0, x) > 0 else y
    return x if x > y else y


def to_i32(x: float, rounding: str) -> int:
    """float -> int32 by `rounding` ('trunc', 'even' or 'floor'), saturating, NaN -> 0."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return 2**31 - 1 if x > 0 else -(2**31)
    # Python's round() of a float rounds half to even.
    if rounding == "floor":
        value = math.floor(x)
    else:
        value = math.trunc(x) if rounding == "trunc" else round(x)
    return min(max(value, -(2**31)), 2**31 - 1)


def saturate(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


def srar(x: int, count: int) -> int:
    """Rounding arithmetic shift right, exact: (x + 2**(count - 1)) >> count; x for count 0."""
    return x if count == 0 else (x + (1 << (count - 1))) >> count


# Whole-vector references of the ops for computer-vision kernels: vectors come in as lists
# of Python numbers (lane 0 first) and go out as lists (or one number for a reduction).


def absdiff(a: Sequence[int], b: Sequence[int]) -> list[int]:
    return [abs(x - y) for x, y in zip(a, b, strict=True)]


def avg_round(a: Sequence[int], b: Sequence[int]) -> list[int]:
    return [(x + y + 1) // 2 for x, y in zip(a, b, strict=True)]


def add_saturating(a: Sequence[int], b: Sequence[int], low: int, high: int) -> list[int]:
    return [saturate(x + y, low, high) for x, y in zip(a, b, strict=True)]


def sub_saturating(a: Sequence[int], b: Sequence[int], low: int, high: int) -> list[int]:
    return [saturate(x - y, low, high) for x, y in zip(a, b, strict=True)]


def abs_wrapping(a: Sequence[int], bits: int) -> list[int]:
    return [wrap(abs(x), bits) for x in a]


def mul_widening(a: Sequence[int], b: Sequence[int], a_first: int, b_first: int, lanes: int,
                 bits: int) -> list[int]:
    """a[a_first + i] * b[b_first + i] for i < lanes, wrapped to `bits`."""
    return [wrap(a[a_first + i] * b[b_first + i], bits) for i in range(lanes)]


def mul_accumulate(acc: Sequence[int], a: Sequence[int], b: Sequence[int], a_first: int,
                   b_first: int, bits: int) -> list[int]:
    """acc[i] + a[a_first + i] * b[b_first + i], wrapped to `bits`."""
    return [wrap(acc[i] + a[a_first + i] * b[b_first + i], bits) for i in range(len(acc))]


def mul_accumulate_f32(acc: Sequence[float], a: Sequence[float], b: Sequence[float]
                       ) -> list[np.float32]:
    """acc + a * b with the product rounded to float32 before the sum (not fused)."""
    return [f32(f32(z) + f32(f32(x) * f32(y))) for z, x, y in zip(acc, a, b, strict=True)]


def fused_multiply_add_f32(acc: Sequence[float], a: Sequence[float], b: Sequence[float]
                           ) -> list[np.float32]:
    """acc + a * b computed exactly (fractions) and rounded once to the nearest float32,
    ties to the even significand; infinities and NaN as IEEE arithmetic gives them."""
    from fractions import Fraction

    out = []
    for z, x, y in zip(acc, a, b, strict=True):
        x32, y32, z32 = f32(x), f32(y), f32(z)
        if not all(math.isfinite(v) for v in (x32, y32, z32)):
            out.append(f32(np.float64(z32) + np.float64(x32) * np.float64(y32)))
            continue
        exact = Fraction(float(z32)) + Fraction(float(x32)) * Fraction(float(y32))
        guess = f32(float(exact))
        candidates = [guess, np.nextafter(guess, f32(np.inf)), np.nextafter(guess, f32(-np.inf))]
        finite = [c for c in candidates if math.isfinite(c)]
        best = min(finite, key=lambda c: (abs(Fraction(float(c)) - exact),
                                          int(np.array(c, np.float32).view(np.int32)) & 1))
        if abs(exact) >= Fraction(float(np.finfo(np.float32).max)) + Fraction(2) ** 103:
            best = f32(math.copysign(math.inf, exact))
        out.append(best)
    return out


def shift_rounding(a: Sequence[int], count: int) -> list[int]:
    return [srar(x, count) for x in a]


def pack_rounding(a: Sequence[int], b: Sequence[int], count: int, low: int, high: int
                  ) -> list[int]:
    return [saturate(srar(x, count), low, high) for x in list(a) + list(b)]


def shuffle(table: Sequence[int], idx: Sequence[int]) -> list[int]:
    return [table[i % 64] for i in idx]


def select2(a: Sequence[int], b: Sequence[int], idx: Sequence[int]) -> list[int]:
    both = list(a) + list(b)
    return [both[i % 128] for i in idx]


def interleave(a: Sequence[int], b: Sequence[int], half: int) -> list[int]:
    """Lanes of the low (half 0) or high (half 1) halves of a and b, alternating, a's first."""
    n = len(a) // 2
    out: list[int] = []
    for x, y in zip(a[half * n : (half + 1) * n], b[half * n : (half + 1) * n], strict=True):
        out += [x, y]
    return out


def deinterleave(a: Sequence[int], b: Sequence[int], odd: int) -> list[int]:
    return list(a[odd::2]) + list(b[odd::2])


def tree_sum_f32(values: Sequence[float]) -> np.float32:
    """Sum of a power-of-two number of lanes: lane i plus lane i + half, halving each step."""
    level = [f32(v) for v in values]
    while len(level) > 1:
        half = len(level) // 2
        level = [f32(level[i] + level[i + half]) for i in range(half)]
    return level[0]


def tree_max_f32(values: Sequence[float]) -> np.float32:
    level = [f32(v) for v in values]
    while len(level) > 1:
        half = len(level) // 2
        level = [fmax(level[i], level[i + half]) for i in range(half)]
    return level[0]


def conflict_depth(
    addresses: Sequence[int], bank_bytes: int, sub_banks: int, width_bytes: int
) -> int:
    """Most distinct words any one sub-bank of any bank is asked for."""
    words: defaultdict[tuple[int, int], set[int]] = defaultdict(set)
    for address in addresses:
        word = address // width_bytes
        words[(address // bank_bytes, word % sub_banks)].add(word)
    return max(len(s) for s in words.values())


class ReferenceCore:
    """TCM, counters and first fault of one core, with the memory ops written out plainly."""

    def __init__(self, tcm_bytes: int, bank_bytes: int, sub_banks: int, width_bytes: int):
        self.tcm = bytearray(tcm_bytes)
        self.geometry = (bank_bytes, sub_banks, width_bytes)
        self.counters = [0] * isa.N_COUNTERS
        self.fault = (isa.FAULT_NONE, 0, 0, 0)

    def _fault(self, code: int, address: int, op_id: int, lane: int) -> None:
        if self.fault[0] == isa.FAULT_NONE:
            self.fault = (code, address, op_id, lane)

    def _ok(self, address: int, nbytes: int, alignment: int, op_id: int, lane: int) -> bool:
        if address % alignment:
            self._fault(isa.FAULT_MISALIGNED, address, op_id, lane)
            return False
        if address < 0 or address + nbytes > len(self.tcm):
            self._fault(isa.FAULT_OUT_OF_TCM, address, op_id, lane)
            return False
        return True

    def load(self, address: int, aligned: bool) -> bytes:
        self.counters[isa.C_LOAD] += 1
        op_id = isa.OP_LOAD if aligned else isa.OP_LOADU
        if not self._ok(address, 64, 64 if aligned else 1, op_id, -1):
            return bytes(64)
        return bytes(self.tcm[address : address + 64])

    def store(self, data: bytes, address: int, nbytes: int, op_id: int) -> None:
        self.counters[isa.C_STORE] += 1
        alignment = 64 if op_id == isa.OP_STORE else 1
        if self._ok(address, nbytes, alignment, op_id, -1):
            self.tcm[address : address + nbytes] = data[:nbytes]

    def _lanes_ok(self, base: int, offsets: Sequence[int], size: int, op_id: int) -> bool:
        for lane, offset in enumerate(offsets):
            if not 0 <= offset < 65536:
                self._fault(isa.FAULT_OUT_OF_WINDOW, base + offset, op_id, lane)
                return False
            if not self._ok(base + offset, size, size, op_id, lane):
                return False
        return True

    def gather(self, base: int, offsets: Sequence[int], size: int, op_id: int) -> list[bytes]:
        """The bytes of each lane's element (all zero after a fault)."""
        self.counters[isa.C_GATHER_A] += 1
        if not self._lanes_ok(base, offsets, size, op_id):
            return [bytes(size)] * len(offsets)
        addresses = [base + o for o in offsets]
        self.counters[isa.C_GATHER_CONFLICT] += conflict_depth(addresses, *self.geometry)
        return [bytes(self.tcm[a : a + size]) for a in addresses]

    def scatter(
        self, elements: Sequence[bytes], base: int, offsets: Sequence[int], op_id: int
    ) -> None:
        self.counters[isa.C_SCATTER] += 1
        size = len(elements[0])
        if not self._lanes_ok(base, offsets, size, op_id):
            return
        for element, offset in zip(elements, offsets, strict=True):
            self.tcm[base + offset : base + offset + size] = element
        addresses = [base + o for o in offsets]
        self.counters[isa.C_SCATTER_CONFLICT] += conflict_depth(addresses, *self.geometry)

"""The 512-bit SIMD instruction set of one vDSP core, as numba functions kernels call in a loop.

A DSP kernel is written as an `@njit` Python function that calls the ops below the way the
C code of a Vision-P6 kernel calls IVP intrinsics. Every op computes exactly what the DSP
would and adds the work it did to the core's counters; `vdsp/timing.py` turns counts into
cycles. Every op is itself compiled with `emu.jit.njit`, so the same function is called from
a kernel (compiled code calling compiled code) and from plain Python (tests, notebooks). That
is why the ops do not sit behind validating Python wrappers: a kernel calls them directly. Argument
types are checked by numba when it compiles the caller; vector sizes are checked at run
time (ValueError) wherever a wrong size would otherwise touch memory out of bounds, and
every op checks that its vectors have its lane count.

Machine context. The first argument of every op is a `Context` (a numba structure reference
whose fields Python reads as attributes), made by `make_context`:
  - `tcm`: uint8[tcm_bytes], the core's local data RAM, all banks back to back; ISA
    addresses are byte offsets into it;
  - `counters`: int64[N_COUNTERS], indexed by the `C_*` constants below;
  - `fault`: int64[4] = [code, byte_address, op_id, lane] of the FIRST memory fault
    (code `FAULT_NONE` = 0 while there was none; lane is -1 for whole-vector ops);
  - `geometry`: int64[5] = [bank_bytes, sub_banks, sub_bank_width_bytes, log2(width),
    log2(bank_bytes / width)];
  - `scratch`: int64 working space of the gather and scatter ops (lane words and
    per-sub-bank counts);
  - `tcm_i8`, `tcm_i16`, `tcm_i32`, `tcm_f32`: the TCM seen as elements of each gather and
    scatter size (views of `tcm`, made once rather than per op).

Vectors are 1-D numpy arrays of 64 bytes, lanes in little-endian order: f32/i32/u32 have
16 lanes, i16/u16 32 and i8/u8 64. Masks are bool arrays with one entry per lane. The `as_*`
bitcasts reinterpret the same 64 bytes; like C casts between vector types they are not
instructions, so they take no context and count nothing.

Destination registers. Every op that produces a vector takes an optional last argument
`out`: without it the op returns a new array; with it the op writes its result into `out`
and returns it. `out` must have the op's lane type and count (another type is a numba typing
error, another count a ValueError). Kernels make their registers once (`np.empty(16,
np.float32)`, ...) and pass them in their loops, as C code names vector variables: an op
then allocates nothing, which makes it several times cheaper to emulate. For lane-wise ops
and the interleaves `out` may be one of the inputs (`add_i32(ctx, a, b, out=a)`); the ops
that move lanes between halves (packs, unpacks) need an `out` of their own.

Memory faults. A load, store, gather or scatter that would leave the TCM, break its
alignment rule or leave the 64 KiB gather/scatter window records a fault (only the first
fault is kept) and then does no memory access at all: a faulting load or gather returns
zeros, a faulting store writes nothing, and a faulting scatter writes no lane. The op is
still counted, as the core still issued it. Kernels run on; the caller checks `fault[0]`
and reports `describe_fault(fault)`. Per access the checks run in this order: window
(gather/scatter), alignment, TCM bounds; a gather or scatter checks its lanes in lane order.

Sub-bank conflicts. Each TCM bank is split into `sub_banks` sub-banks interleaved every
`sub_bank_width_bytes`; address a lies in word a // width, in sub-bank word % sub_banks of
bank a // bank_bytes. A sub-bank serves one word per round and lanes on the same word share
it, so a gather or scatter needs as many rounds as the most distinct words any one sub-bank
is asked for: its conflict depth, added to C_GATHER_CONFLICT or C_SCATTER_CONFLICT (nothing
when the op faults). 16 consecutive float32 lanes over 8 sub-banks of 4 bytes: depth 2; 16
lanes in one sub-bank: 16; 16 lanes on one address: 1.

Semantic choices (ours where the hardware documentation is silent):
  - float32 arithmetic is IEEE binary32 with round-to-nearest-even, as numpy float32,
    including infinities, NaN and signed zeros; division by zero gives inf or NaN.
  - `min_f32`/`max_f32` (and `rmax_f32`) follow IEEE 754-2019 minimum/maximum: a NaN in
    either lane gives NaN (the first operand's NaN if both are), and -0.0 < +0.0.
  - float -> int32 conversions saturate to [-2**31, 2**31 - 1] (so +-inf give the limits)
    and turn NaN into 0.
  - shift counts are a scalar >= 0 (a negative count raises ValueError); a count >= the
    lane width gives 0 for the logical shifts and sign fill (0 or -1) for the arithmetic one.
  - integer add, sub and mul wrap (mul keeps the low bits); packs saturate.
  - `radd_f32` adds in a fixed pairwise tree: step 1 forms lanes i + (i + 8) for i < 8,
    step 2 forms i + (i + 4) for i < 4 of those, step 3 i + (i + 2), step 4 lane 0 + lane 1,
    each sum rounded to float32. A reduction counts one C_ALU per tree step (4 for 16 lanes).
  - a scatter writes its lanes in lane order, so when lanes collide the last lane wins.

Kernels in other modules inline these ops when numba compiles them, and numba's disk cache
of such a kernel is keyed on the kernel's own file only: after editing this module, delete
the stale `__pycache__/*.nbi`/`*.nbc` of the kernels (or touch their files).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numba
import numpy as np
import numpy.typing as npt
from numba.core import types
from numba.experimental import structref

from emu.jit import njit, njit_ieee, njit_inline

F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
U32 = npt.NDArray[np.uint32]
I16 = npt.NDArray[np.int16]
U16 = npt.NDArray[np.uint16]
I8 = npt.NDArray[np.int8]
U8 = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]
_Lane = TypeVar("_Lane", bound=np.generic)
_Vec = npt.NDArray[_Lane]
_Int = int | np.integer[Any]
"""A scalar integer argument: kernels pass Python ints and numpy integers alike."""
_Float = float | np.floating[Any]

VECTOR_BYTES = 64
"""Bytes in one vector register (512 bits)."""
WINDOW_BYTES = 65536
"""Gather and scatter offsets must be below this: the 64 KiB window above the base address."""

C_LOAD = 0
"""Vector loads (aligned, unaligned)."""
C_STORE = 1
"""Vector stores (aligned, unaligned, partial)."""
C_ALU = 2
"""Integer and float add/sub/min/max/abs/neg, compares, mask logic, shifts, moves, selects,
interleaves, broadcasts, and one per step of a horizontal reduction."""
C_MUL = 3
"""Integer and float multiplies."""
C_FDIV = 4
"""Float divisions and reciprocals, one per vector op."""
C_CVT = 5
"""Conversions between float and int, rounding to integral, saturating packs, widening
unpacks."""
C_GATHER_A = 6
"""Gather address phases (one per gather op)."""
C_GATHER_D = 7
"""Gather drains (one per op that moves a gather register into a vector)."""
C_SCATTER = 8
"""Scatter ops."""
C_GATHER_CONFLICT = 9
"""Sum over gather ops of each op's sub-bank conflict depth (see `_conflict_depth`)."""
C_SCATTER_CONFLICT = 10
"""Sum over scatter ops of each op's sub-bank conflict depth."""
N_COUNTERS = 11
"""Length of the counters array."""

COUNTER_NAMES = (
    "load",
    "store",
    "alu",
    "mul",
    "fdiv",
    "cvt",
    "gather_a",
    "gather_d",
    "scatter",
    "gather_conflict",
    "scatter_conflict",
)
"""Name of each counter, by index, for reports."""

FAULT_NONE = 0
"""No fault so far (fault[0] of a clean context)."""
FAULT_OUT_OF_TCM = 1
"""The access runs before the start or past the end of the TCM."""
FAULT_OUT_OF_WINDOW = 2
"""A gather or scatter offset is not in [0, WINDOW_BYTES)."""
FAULT_MISALIGNED = 3
"""An aligned vector access is not on a 64-byte boundary, or a gather/scatter element is
not aligned to its own size."""

# Which memory op faulted, as recorded in fault[2].
OP_LOAD = 1
OP_LOADU = 2
OP_STORE = 3
OP_STOREU = 4
OP_STORE_PARTIAL = 5
OP_GATHER32 = 6
OP_GATHER16 = 7
OP_GATHER8 = 8
OP_SCATTER32 = 9
OP_SCATTER16 = 10
OP_SCATTER8 = 11

_OP_NAMES = {
    OP_LOAD: "aligned load",
    OP_LOADU: "unaligned load",
    OP_STORE: "aligned store",
    OP_STOREU: "unaligned store",
    OP_STORE_PARTIAL: "partial store",
    OP_GATHER32: "32-bit gather",
    OP_GATHER16: "16-bit gather",
    OP_GATHER8: "8-bit gather",
    OP_SCATTER32: "32-bit scatter",
    OP_SCATTER16: "16-bit scatter",
    OP_SCATTER8: "8-bit scatter",
}
_ELEMENT_BYTES = {
    OP_GATHER32: 4,
    OP_GATHER16: 2,
    OP_GATHER8: 1,
    OP_SCATTER32: 4,
    OP_SCATTER16: 2,
    OP_SCATTER8: 1,
}

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_MAX_LANES = VECTOR_BYTES
"""The most lanes a vector op has (64 int8 lanes): room for the lane words in `scratch`."""
_REDUCE_STEPS_16 = 4
"""Tree steps of a 16-lane horizontal reduction: log2(16)."""


@structref.register
class ContextType(types.StructRef):
    """The numba type of `Context`."""

    def preprocess_fields(self, fields: Any) -> tuple[tuple[str, Any], ...]:
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


_CONTEXT_FIELDS = (
    "tcm", "counters", "fault", "geometry", "scratch", "tcm_i8", "tcm_i16", "tcm_i32", "tcm_f32"
)


class Context(structref.StructRefProxy):
    """The state of one core that ops read and update; see the module docstring.

    One reference-counted object rather than a tuple of arrays: a compiled op that numba does
    not inline into its kernel then pays one reference-count update for the whole context,
    not one per array in it. Python reads the fields as attributes (read-only properties,
    added below; the arrays they give share the context's memory).
    """

    tcm: U8
    counters: npt.NDArray[np.int64]
    fault: npt.NDArray[np.int64]
    geometry: npt.NDArray[np.int64]
    scratch: npt.NDArray[np.int64]
    tcm_i8: I8
    tcm_i16: I16
    tcm_i32: I32
    tcm_f32: F32


class _PlainContext:
    """The context as a plain Python object, for runs with NUMBA_DISABLE_JIT=1: numba's
    structure proxy needs compiled code to create and read it."""

    __slots__ = _CONTEXT_FIELDS

    def __init__(self, *fields: npt.NDArray[Any]) -> None:
        for name, value in zip(_CONTEXT_FIELDS, fields, strict=True):
            setattr(self, name, value)


def _field_property(index: int) -> property:
    def read(ctx: Context) -> npt.NDArray[Any]:
        return _fields(ctx)[index]

    return property(read)


for _index, _name in enumerate(_CONTEXT_FIELDS):
    setattr(Context, _name, _field_property(_index))


structref.define_proxy(Context, ContextType, list(_CONTEXT_FIELDS))


@njit
def _fields(ctx: Context) -> tuple[U8, npt.NDArray[np.int64], npt.NDArray[np.int64],
                                   npt.NDArray[np.int64], npt.NDArray[np.int64], I8, I16, I32,
                                   F32]:
    return (ctx.tcm, ctx.counters, ctx.fault, ctx.geometry, ctx.scratch, ctx.tcm_i8,
            ctx.tcm_i16, ctx.tcm_i32, ctx.tcm_f32)


def make_context(
    tcm_bytes: int, bank_bytes: int, sub_banks: int, sub_bank_width_bytes: int
) -> Context:
    """A core with a zeroed TCM of `tcm_bytes` (whole banks of `bank_bytes`), zero counters
    and no fault.

    Each bank has `sub_banks` sub-banks interleaved every `sub_bank_width_bytes`. Bank size,
    sub-bank count and width must be powers of two, as in hardware that decodes them from
    address bits; it also lets the gather kernels use shifts and masks instead of 64-bit
    divisions, their costliest step. The width must be at least 4, so that an aligned gather
    element (at most 4 bytes) lies in one sub-bank word, and a bank must hold whole rounds of
    sub-bank words, so that a word never straddles two banks.
    """
    named = {
        "tcm_bytes": tcm_bytes,
        "bank_bytes": bank_bytes,
        "sub_banks": sub_banks,
        "sub_bank_width_bytes": sub_bank_width_bytes,
    }
    for name, value in named.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"{name}: expected an integer, got {value!r}")
        if value < 1:
            raise ValueError(f"{name}: must be positive, got {value}")
    if tcm_bytes % bank_bytes:
        raise ValueError(
            f"tcm_bytes: {tcm_bytes} is not a whole number of {bank_bytes}-byte banks"
        )
    for name in ("bank_bytes", "sub_banks", "sub_bank_width_bytes"):
        if named[name] & (named[name] - 1):
            raise ValueError(f"{name}: must be a power of two, got {named[name]}")
    if sub_bank_width_bytes < 4:
        raise ValueError(
            f"sub_bank_width_bytes: must be at least 4 (the widest gather element), "
            f"got {sub_bank_width_bytes}"
        )
    round_bytes = sub_banks * sub_bank_width_bytes
    if bank_bytes % round_bytes:
        raise ValueError(
            f"bank_bytes: {bank_bytes} is not a multiple of sub_banks x sub_bank_width_bytes "
            f"= {round_bytes}"
        )
    tcm = np.zeros(int(tcm_bytes), dtype=np.uint8)
    width_shift = int(sub_bank_width_bytes).bit_length() - 1
    words_per_bank_shift = int(bank_bytes).bit_length() - 1 - width_shift
    geometry = [bank_bytes, sub_banks, sub_bank_width_bytes, width_shift, words_per_bank_shift]
    make = _PlainContext if numba.config.DISABLE_JIT else Context  # type: ignore[attr-defined]
    return make(  # type: ignore[return-value]
        tcm,
        np.zeros(N_COUNTERS, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        np.array(geometry, dtype=np.int64),
        np.zeros(_MAX_LANES + int(sub_banks), dtype=np.int64),
        tcm.view(np.int8),
        tcm.view(np.int16),
        tcm.view(np.int32),
        tcm.view(np.float32),
    )


def reset_counters(ctx: Context) -> None:
    """Set every counter back to zero (the TCM and the fault record are left alone)."""
    ctx.counters[:] = 0


def clear_fault(ctx: Context) -> None:
    """Forget the recorded fault, so that the next one is recorded."""
    ctx.fault[:] = 0


def describe_fault(fault: Sequence[int] | npt.NDArray[np.int64]) -> str:
    """A one-line message for a fault record `[code, byte_address, op_id, lane]`."""
    if len(fault) != 4:
        raise ValueError(f"fault: expected 4 entries [code, address, op, lane], got {len(fault)}")
    code, address, op_id, lane = (int(v) for v in fault)
    if code == FAULT_NONE:
        return "no fault"
    op = _OP_NAMES.get(op_id, f"op {op_id}")
    where = f"{op} lane {lane}" if lane >= 0 else op
    at = f"TCM byte 0x{address:X}" if address >= 0 else f"TCM byte {address}"
    if code == FAULT_OUT_OF_TCM:
        return f"{where} at {at}: the access runs outside the TCM"
    if code == FAULT_OUT_OF_WINDOW:
        return (
            f"{where} at {at}: its offset from the base is outside the 64 KiB window "
            f"(offsets must be below {WINDOW_BYTES})"
        )
    if code == FAULT_MISALIGNED:
        alignment = _ELEMENT_BYTES.get(op_id, VECTOR_BYTES)
        return f"{where} at {at}: the address is not a multiple of {alignment} bytes"
    return f"{where} at {at}: unknown fault code {code}"


# --- bookkeeping ---------------------------------------------------------------------------


@njit_inline
def _tick(ctx: Context, counter: int, n: int) -> None:
    ctx.counters[counter] += n


@njit_inline
def _record_fault(
    fault: npt.NDArray[np.int64], code: int, address: int, op_id: int, lane: int
) -> None:
    if fault[0] == FAULT_NONE:
        fault[0] = code
        fault[1] = address
        fault[2] = op_id
        fault[3] = lane


@njit_inline
def _access_ok(ctx: Context, address: int, nbytes: int, alignment: int, op_id: int) -> bool:
    """Whether a whole-vector op may access `nbytes` at `address` (`alignment` a power of
    two); records the fault when not."""
    if address & (alignment - 1):
        _record_fault(ctx.fault, FAULT_MISALIGNED, address, op_id, -1)
        return False
    if address < 0 or address + nbytes > ctx.tcm.size:
        _record_fault(ctx.fault, FAULT_OUT_OF_TCM, address, op_id, -1)
        return False
    return True


@njit_inline
def _check_size(vec: _Vec[Any], size: int) -> None:
    """Reject a vector (or its byte view, or an offsets vector) of the wrong size for the op,
    before a kernel loop could read or write past its end."""
    if vec.size != size:
        raise ValueError("a vector or offsets operand has the wrong number of lanes for this op")


# --- bitcasts ------------------------------------------------------------------------------


@njit
def as_f32(vec: _Vec[Any]) -> F32:
    """The same 64 bytes as float32[16] (a C cast to xb_vecN_2xf32; counts nothing)."""
    return vec.copy().view(np.float32)


@njit
def as_i32(vec: _Vec[Any]) -> I32:
    """The same 64 bytes as int32[16] (a C cast to xb_vecN_2x32v; counts nothing)."""
    return vec.copy().view(np.int32)


@njit
def as_u32(vec: _Vec[Any]) -> U32:
    """The same 64 bytes as uint32[16] (a C cast to xb_vecN_2x32Uv; counts nothing)."""
    return vec.copy().view(np.uint32)


@njit
def as_i16(vec: _Vec[Any]) -> I16:
    """The same 64 bytes as int16[32] (a C cast to xb_vecNx16; counts nothing)."""
    return vec.copy().view(np.int16)


@njit
def as_u16(vec: _Vec[Any]) -> U16:
    """The same 64 bytes as uint16[32] (a C cast to xb_vecNx16U; counts nothing)."""
    return vec.copy().view(np.uint16)


@njit
def as_i8(vec: _Vec[Any]) -> I8:
    """The same 64 bytes as int8[64] (a C cast to xb_vec2Nx8; counts nothing)."""
    return vec.copy().view(np.int8)


@njit
def as_u8(vec: _Vec[Any]) -> U8:
    """The same 64 bytes as uint8[64] (a C cast to xb_vec2Nx8U; counts nothing)."""
    return vec.copy().view(np.uint8)


# --- broadcasts ----------------------------------------------------------------------------


@njit
def splat_f32(ctx: Context, x: _Float, out: F32 | None = None) -> F32:
    """16 lanes of float32(x), like the replicate behind `(xb_vecN_2xf32)x`. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(out, 16)
    value = np.float32(x)
    for i in range(16):
        out[i] = value
    return out


@njit
def splat_i32(ctx: Context, x: _Int, out: I32 | None = None) -> I32:
    """16 lanes of x (which must fit int32), like `(xb_vecN_2x32v)x`. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(out, 16)
    for i in range(16):
        out[i] = x
    return out


@njit
def splat_i16(ctx: Context, x: _Int, out: I16 | None = None) -> I16:
    """32 lanes of x (which must fit int16), like `(xb_vecNx16)x`. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(out, 32)
    for i in range(32):
        out[i] = x
    return out


@njit
def splat_i8(ctx: Context, x: _Int, out: I8 | None = None) -> I8:
    """64 lanes of x (which must fit int8), like `(xb_vec2Nx8)x`. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(64, np.int8)
    _check_size(out, 64)
    for i in range(64):
        out[i] = x
    return out


# --- vector loads and stores ---------------------------------------------------------------


@njit_inline
def _load(ctx: Context, address: _Int, alignment: int, op_id: int, out: _Vec[_Lane]
          ) -> _Vec[_Lane]:
    """The 64 bytes at `address` in `out`, or zeros after recording a fault. C_LOAD."""
    _tick(ctx, C_LOAD, 1)
    raw = out.view(np.uint8)
    _check_size(raw, VECTOR_BYTES)
    start = int(address)
    if not _access_ok(ctx, start, VECTOR_BYTES, alignment, op_id):
        for i in range(VECTOR_BYTES):
            raw[i] = 0
        return out
    tcm = ctx.tcm
    for i in range(VECTOR_BYTES):
        raw[i] = tcm[start + i]
    return out


@njit_inline
def _store(
    ctx: Context, vec: _Vec[Any], address: _Int, nbytes: _Int, alignment: int, op_id: int
) -> None:
    """Write the first `nbytes` bytes of `vec` at `address`, unless that faults. C_STORE."""
    _tick(ctx, C_STORE, 1)
    raw = vec.view(np.uint8)
    _check_size(raw, VECTOR_BYTES)
    start = int(address)
    length = int(nbytes)
    if _access_ok(ctx, start, length, alignment, op_id):
        tcm = ctx.tcm
        for i in range(length):
            tcm[start + i] = raw[i]


@njit
def load_f32(ctx: Context, address: _Int, out: F32 | None = None) -> F32:
    """Aligned load of float32[16], like IVP_LVN_2XF32_I. Faults unless address % 64 == 0."""
    if out is None:
        out = np.empty(16, np.float32)
    return _load(ctx, address, VECTOR_BYTES, OP_LOAD, out)


@njit
def load_i32(ctx: Context, address: _Int, out: I32 | None = None) -> I32:
    """Aligned load of int32[16], like IVP_LVN_2X32_I."""
    if out is None:
        out = np.empty(16, np.int32)
    return _load(ctx, address, VECTOR_BYTES, OP_LOAD, out)


@njit
def load_u32(ctx: Context, address: _Int, out: U32 | None = None) -> U32:
    """Aligned load of uint32[16], like IVP_LVN_2X32U_I."""
    if out is None:
        out = np.empty(16, np.uint32)
    return _load(ctx, address, VECTOR_BYTES, OP_LOAD, out)


@njit
def load_i16(ctx: Context, address: _Int, out: I16 | None = None) -> I16:
    """Aligned load of int16[32], like IVP_LVNX16_I."""
    if out is None:
        out = np.empty(32, np.int16)
    return _load(ctx, address, VECTOR_BYTES, OP_LOAD, out)


@njit
def load_u16(ctx: Context, address: _Int, out: U16 | None = None) -> U16:
    """Aligned load of uint16[32], like IVP_LVNX16U_I."""
    if out is None:
        out = np.empty(32, np.uint16)
    return _load(ctx, address, VECTOR_BYTES, OP_LOAD, out)


@njit
def load_i8(ctx: Context, address: _Int, out: I8 | None = None) -> I8:
    """Aligned load of int8[64], like IVP_LV2NX8_I."""
    if out is None:
        out = np.empty(64, np.int8)
    return _load(ctx, address, VECTOR_BYTES, OP_LOAD, out)


@njit
def load_u8(ctx: Context, address: _Int, out: U8 | None = None) -> U8:
    """Aligned load of uint8[64], like IVP_LV2NX8U_I."""
    if out is None:
        out = np.empty(64, np.uint8)
    return _load(ctx, address, VECTOR_BYTES, OP_LOAD, out)


@njit
def loadu_f32(ctx: Context, address: _Int, out: F32 | None = None) -> F32:
    """Unaligned load of float32[16] from any byte address, like the aligning IVP_LAN_2XF32_IP
    (one op: the valign priming load is not modelled)."""
    if out is None:
        out = np.empty(16, np.float32)
    return _load(ctx, address, 1, OP_LOADU, out)


@njit
def loadu_i32(ctx: Context, address: _Int, out: I32 | None = None) -> I32:
    """Unaligned load of int32[16], like IVP_LAN_2X32_IP."""
    if out is None:
        out = np.empty(16, np.int32)
    return _load(ctx, address, 1, OP_LOADU, out)


@njit
def loadu_u32(ctx: Context, address: _Int, out: U32 | None = None) -> U32:
    """Unaligned load of uint32[16], like IVP_LAN_2X32U_IP."""
    if out is None:
        out = np.empty(16, np.uint32)
    return _load(ctx, address, 1, OP_LOADU, out)


@njit
def loadu_i16(ctx: Context, address: _Int, out: I16 | None = None) -> I16:
    """Unaligned load of int16[32], like IVP_LANX16_IP."""
    if out is None:
        out = np.empty(32, np.int16)
    return _load(ctx, address, 1, OP_LOADU, out)


@njit
def loadu_u16(ctx: Context, address: _Int, out: U16 | None = None) -> U16:
    """Unaligned load of uint16[32], like IVP_LANX16U_IP."""
    if out is None:
        out = np.empty(32, np.uint16)
    return _load(ctx, address, 1, OP_LOADU, out)


@njit
def loadu_i8(ctx: Context, address: _Int, out: I8 | None = None) -> I8:
    """Unaligned load of int8[64], like IVP_LA2NX8_IP."""
    if out is None:
        out = np.empty(64, np.int8)
    return _load(ctx, address, 1, OP_LOADU, out)


@njit
def loadu_u8(ctx: Context, address: _Int, out: U8 | None = None) -> U8:
    """Unaligned load of uint8[64], like IVP_LA2NX8U_IP."""
    if out is None:
        out = np.empty(64, np.uint8)
    return _load(ctx, address, 1, OP_LOADU, out)


@njit
def store(ctx: Context, vec: _Vec[Any], address: _Int) -> None:
    """Aligned store of any 64-byte vector, like IVP_SVN_2XF32_I / IVP_SV2NX8_I. C_STORE.

    Faults unless address % 64 == 0."""
    _store(ctx, vec, address, VECTOR_BYTES, VECTOR_BYTES, OP_STORE)


@njit
def storeu(ctx: Context, vec: _Vec[Any], address: _Int) -> None:
    """Unaligned store of any 64-byte vector at any byte address, like the aligning
    IVP_SAN_2XF32_IP (one op; the valign buffering is not modelled). C_STORE."""
    _store(ctx, vec, address, VECTOR_BYTES, 1, OP_STOREU)


@njit
def store_partial(ctx: Context, vec: _Vec[Any], address: _Int, nbytes: _Int) -> None:
    """Store the first `nbytes` (0..64) bytes of `vec` at any byte address, for the tail of a
    buffer, like the IVP_SAPOS*_FP flush of an aligning store. C_STORE."""
    if nbytes < 0 or nbytes > VECTOR_BYTES:
        raise ValueError("store_partial: nbytes must be in 0..64")
    _store(ctx, vec, address, nbytes, 1, OP_STORE_PARTIAL)


# --- gather and scatter --------------------------------------------------------------------


@njit
def _record_lane_fault(
    ctx: Context, start: int, offsets: _Vec[Any], element_bytes: int, op_id: int
) -> None:
    """Record the fault of the first invalid lane (the checks of the module docstring, in
    their order). Only called once a gather or scatter is known to fault."""
    tcm_bytes = ctx.tcm.size
    for lane in range(offsets.size):
        offset = int(offsets[lane])
        address = start + offset
        if offset < 0 or offset >= WINDOW_BYTES:
            code = FAULT_OUT_OF_WINDOW
        elif address & (element_bytes - 1):
            code = FAULT_MISALIGNED
        elif address < 0 or address + element_bytes > tcm_bytes:
            code = FAULT_OUT_OF_TCM
        else:
            continue
        _record_fault(ctx.fault, code, address, op_id, lane)
        return


@njit_inline
def _lanes_ok(
    ctx: Context, start: int, offsets: _Vec[Any], element_bytes: int, op_id: int
) -> bool:
    """Whether every lane address start + offsets[lane] is valid; if not, the fault of the
    first invalid lane is recorded. The common case is one branch-free pass over the lanes."""
    highest = ctx.tcm.size - element_bytes - start  # the largest offset inside the TCM
    bad = False
    for lane in range(offsets.size):
        offset = int(offsets[lane])
        bad |= (
            (offset < 0)
            | (offset >= WINDOW_BYTES)
            | ((start + offset) & (element_bytes - 1) != 0)
            | (start + offset < 0)
            | (offset > highest)
        )
    if bad:
        _record_lane_fault(ctx, start, offsets, element_bytes, op_id)
    return not bad


@njit_inline
def _conflict_depth(ctx: Context, start: int, offsets: _Vec[Any]) -> int:
    """How many rounds the sub-banks need to serve the (valid) lane addresses
    start + offsets of one gather or scatter.

    A sub-bank serves one word (address // width) per round; lanes on the same word share
    it. The depth is the largest number of distinct words any one sub-bank of any bank must
    serve. Sub-bank of an address: (address // width) % sub_banks, within its bank.
    Works in `scratch`: the lanes' words, sorted, then the per-sub-bank counts after them.
    """
    scratch = ctx.scratch
    geometry = ctx.geometry
    sub_banks = geometry[1]
    width_shift = geometry[3]
    words_per_bank_shift = geometry[4]
    lanes = offsets.size
    # Sorted words put lanes on one word side by side and the banks in order. Lanes usually
    # come in address order already; otherwise an insertion sort orders them.
    out_of_order = False
    previous = -1
    for lane in range(lanes):
        word = (start + int(offsets[lane])) >> width_shift
        scratch[lane] = word
        out_of_order |= word < previous
        previous = word
    if out_of_order:
        for i in range(1, lanes):
            word = scratch[i]
            j = i - 1
            while j >= 0 and scratch[j] > word:
                scratch[j + 1] = scratch[j]
                j -= 1
            scratch[j + 1] = word
    depth = 0
    bank = -1
    previous = -1
    for i in range(lanes):
        word = scratch[i]
        if word >> words_per_bank_shift != bank:
            bank = word >> words_per_bank_shift
            for k in range(sub_banks):
                scratch[_MAX_LANES + k] = 0
        served = _MAX_LANES + (word & (sub_banks - 1))
        count = scratch[served] + (word != previous)  # lanes on one word share its round
        scratch[served] = count
        depth += count > depth  # a count grows by at most one, past depth at most by one
        previous = word
    return depth


@njit_inline
def _gather(
    ctx: Context,
    elements: _Vec[Any],
    base: _Int,
    offsets: _Vec[Any],
    out: _Vec[_Lane],
    op_id: int,
) -> _Vec[_Lane]:
    """Fill `out` (one lane per offset) from the TCM seen as `elements` (a view of it whose
    element size is the gather's): lane i from TCM byte base + offsets[i]; zeros on a fault.
    C_GATHER_A, and the conflict depth in C_GATHER_CONFLICT."""
    lanes = VECTOR_BYTES // max(elements.itemsize, 2)
    _check_size(offsets, lanes)
    _check_size(out, lanes)
    _tick(ctx, C_GATHER_A, 1)
    start = int(base)
    if not _lanes_ok(ctx, start, offsets, elements.itemsize, op_id):
        for lane in range(out.size):
            out[lane] = 0
        return out
    # Each lane address is a multiple of the element size (checked), so `elements` holds
    # lane i at address // element_bytes.
    shift = elements.itemsize >> 1  # 1 -> 0, 2 -> 1, 4 -> 2
    for lane in range(out.size):
        out[lane] = elements[(start + int(offsets[lane])) >> shift]
    _tick(ctx, C_GATHER_CONFLICT, _conflict_depth(ctx, start, offsets))
    return out


@njit_inline
def _scatter(
    ctx: Context,
    elements: _Vec[Any],
    values: _Vec[Any],
    base: _Int,
    offsets: _Vec[Any],
    op_id: int,
) -> None:
    """Write lane i of `values` to TCM byte base + offsets[i] into the TCM seen as `elements`
    (a view of it whose element size is the scatter's; narrower elements keep the low bits),
    in lane order; nothing at all when any lane faults. C_SCATTER, and the conflict depth
    in C_SCATTER_CONFLICT."""
    lanes = VECTOR_BYTES // max(elements.itemsize, 2)
    _check_size(offsets, lanes)
    _check_size(values, lanes)
    _tick(ctx, C_SCATTER, 1)
    start = int(base)
    if not _lanes_ok(ctx, start, offsets, elements.itemsize, op_id):
        return
    shift = elements.itemsize >> 1
    for lane in range(values.size):
        elements[(start + int(offsets[lane])) >> shift] = values[lane]
    _tick(ctx, C_SCATTER_CONFLICT, _conflict_depth(ctx, start, offsets))


@njit
def gather_a_f32(ctx: Context, base: _Int, offsets: U32, out: F32 | None = None) -> F32:
    """Address phase of a 16-lane float32 gather, like IVP_GATHERAN_2XF32: lane i reads the
    float32 at TCM byte base + offsets[i]. Returns the gather register. C_GATHER_A, plus the
    conflict depth in C_GATHER_CONFLICT."""
    if out is None:
        out = np.empty(16, np.float32)
    return _gather(ctx, ctx.tcm_f32, base, offsets, out, OP_GATHER32)


@njit
def gather_a_i32(ctx: Context, base: _Int, offsets: U32, out: I32 | None = None) -> I32:
    """Address phase of a 16-lane int32 gather, like IVP_GATHERAN_2X32."""
    if out is None:
        out = np.empty(16, np.int32)
    return _gather(ctx, ctx.tcm_i32, base, offsets, out, OP_GATHER32)


@njit
def gather_a_i16(ctx: Context, base: _Int, offsets: U16, out: I16 | None = None) -> I16:
    """Address phase of a 32-lane int16 gather, like IVP_GATHERANX16 (uint16 offsets)."""
    if out is None:
        out = np.empty(32, np.int16)
    return _gather(ctx, ctx.tcm_i16, base, offsets, out, OP_GATHER16)


@njit
def gather_a_i8(ctx: Context, base: _Int, offsets: U16, out: I16 | None = None) -> I16:
    """Address phase of a 32-lane byte gather, each byte sign-extended into a 16-bit lane,
    like IVP_GATHERANX8S (uint16 offsets)."""
    if out is None:
        out = np.empty(32, np.int16)
    return _gather(ctx, ctx.tcm_i8, base, offsets, out, OP_GATHER8)


@njit
def gather_a_u8(ctx: Context, base: _Int, offsets: U16, out: U16 | None = None) -> U16:
    """Address phase of a 32-lane byte gather, each byte zero-extended into a 16-bit lane,
    like IVP_GATHERANX8U (uint16 offsets)."""
    if out is None:
        out = np.empty(32, np.uint16)
    return _gather(ctx, ctx.tcm, base, offsets, out, OP_GATHER8)


@njit
def gather_d(
    ctx: Context, gather_register: _Vec[_Lane], out: _Vec[_Lane] | None = None
) -> _Vec[_Lane]:
    """Drain a gather register into a vector of the same type, like IVP_GATHERDN_2XF32 /
    IVP_GATHERDNX16. C_GATHER_D."""
    _tick(ctx, C_GATHER_D, 1)
    if out is None:
        out = np.empty_like(gather_register)
    _check_size(out, gather_register.size)
    for i in range(out.size):
        out[i] = gather_register[i]
    return out


@njit
def gather_d_lo_i8(ctx: Context, gather_register: _Vec[Any], out: I8 | None = None) -> I8:
    """The 32 gathered bytes of an 8-bit gather in bytes 0..31 of an int8[64], bytes 32..63
    zero, like IVP_GATHERD2NX8_L. C_GATHER_D."""
    _tick(ctx, C_GATHER_D, 1)
    _check_size(gather_register, 32)
    if out is None:
        out = np.empty(64, np.int8)
    _check_size(out, 64)
    for i in range(32):
        out[i] = gather_register[i]  # keeps the low byte
        out[32 + i] = 0
    return out


@njit
def gather_d_hi_i8(
    ctx: Context, vec: I8, gather_register: _Vec[Any], out: I8 | None = None
) -> I8:
    """`vec` (int8[64]) with bytes 32..63 replaced by the 32 gathered bytes of an 8-bit
    gather, like IVP_GATHERD2NX8_H; that instruction updates its vector in place, which is
    `out=vec` here. C_GATHER_D."""
    _tick(ctx, C_GATHER_D, 1)
    _check_size(gather_register, 32)
    low = vec.view(np.int8)
    _check_size(low, 64)
    if out is None:
        out = np.empty(64, np.int8)
    _check_size(out, 64)
    for i in range(32):
        out[i] = low[i]
        out[32 + i] = gather_register[i]  # keeps the low byte
    return out


@njit
def scatter_f32(ctx: Context, vec: F32, base: _Int, offsets: U32) -> None:
    """Write lane i of float32[16] `vec` to TCM byte base + offsets[i], lanes in order, like
    IVP_SCATTERN_2XF32. C_SCATTER, plus the conflict depth in C_SCATTER_CONFLICT."""
    _check_size(vec, 16)
    _scatter(ctx, ctx.tcm_f32, vec, base, offsets, OP_SCATTER32)


@njit
def scatter_i32(ctx: Context, vec: I32, base: _Int, offsets: U32) -> None:
    """Write lane i of int32[16] `vec` to TCM byte base + offsets[i], like IVP_SCATTERN_2X32."""
    _check_size(vec, 16)
    _scatter(ctx, ctx.tcm_i32, vec, base, offsets, OP_SCATTER32)


@njit
def scatter_i16(ctx: Context, vec: I16, base: _Int, offsets: U16) -> None:
    """Write lane i of int16[32] `vec` to TCM byte base + offsets[i], like IVP_SCATTERNX16."""
    _check_size(vec, 32)
    _scatter(ctx, ctx.tcm_i16, vec, base, offsets, OP_SCATTER16)


@njit
def scatter_i8(ctx: Context, vec: I16, base: _Int, offsets: U16) -> None:
    """Write the low byte of lane i of 16-bit `vec` (32 lanes) to TCM byte base + offsets[i],
    like IVP_SCATTERNX8U."""
    _check_size(vec, 32)
    _scatter(ctx, ctx.tcm_i8, vec, base, offsets, OP_SCATTER8)


@njit
def scatter_w(ctx: Context) -> None:
    """Wait until every scatter has reached the TCM, like IVP_SCATTERW.

    Scatters here write at once, so this has no effect on the data; it counts nothing,
    because its cost is waiting for the scatters already counted in C_SCATTER.
    """


# --- integer arithmetic --------------------------------------------------------------------
# --- integer arithmetic --------------------------------------------------------------------


@njit
def add_i32(ctx: Context, a: I32, b: I32, out: I32 | None = None) -> I32:
    """a + b, wrapping, like IVP_ADDN_2X32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] + b[i]
    return out


@njit
def sub_i32(ctx: Context, a: I32, b: I32, out: I32 | None = None) -> I32:
    """a - b, wrapping, like IVP_SUBN_2X32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] - b[i]
    return out


@njit
def mul_i32(ctx: Context, a: I32, b: I32, out: I32 | None = None) -> I32:
    """Low 32 bits of a * b, like IVP_PACKLN_2X64W(IVP_MULN_2X32(a, b)). C_MUL."""
    _tick(ctx, C_MUL, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] * b[i]
    return out


@njit
def min_i32(ctx: Context, a: I32, b: I32, out: I32 | None = None) -> I32:
    """Signed lane minimum, like IVP_MINN_2X32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = min(a[i], b[i])
    return out


@njit
def max_i32(ctx: Context, a: I32, b: I32, out: I32 | None = None) -> I32:
    """Signed lane maximum, like IVP_MAXN_2X32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = max(a[i], b[i])
    return out


@njit
def add_i16(ctx: Context, a: I16, b: I16, out: I16 | None = None) -> I16:
    """a + b, wrapping, like IVP_ADDNX16. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = a[i] + b[i]
    return out


@njit
def sub_i16(ctx: Context, a: I16, b: I16, out: I16 | None = None) -> I16:
    """a - b, wrapping, like IVP_SUBNX16. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = a[i] - b[i]
    return out


@njit
def mul_i16(ctx: Context, a: I16, b: I16, out: I16 | None = None) -> I16:
    """Low 16 bits of a * b, like IVP_MULNX16PACKL. C_MUL."""
    _tick(ctx, C_MUL, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = a[i] * b[i]
    return out


@njit
def min_i16(ctx: Context, a: I16, b: I16, out: I16 | None = None) -> I16:
    """Signed lane minimum, like IVP_MINNX16. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = min(a[i], b[i])
    return out


@njit
def max_i16(ctx: Context, a: I16, b: I16, out: I16 | None = None) -> I16:
    """Signed lane maximum, like IVP_MAXNX16. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = max(a[i], b[i])
    return out


# --- shifts --------------------------------------------------------------------------------


@njit_inline
def _check_shift(count: _Int) -> None:
    if count < 0:
        raise ValueError("shift count must not be negative")


@njit
def sll_i32(ctx: Context, a: I32, count: _Int, out: I32 | None = None) -> I32:
    """Logical shift left by a scalar count (0 when count >= 32), like IVP_SLLN_2X32. C_ALU."""
    _check_shift(count)
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(a, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = (np.int64(a[i]) << count) if count < 32 else 0  # keeps the low 32 bits
    return out


@njit
def srl_i32(ctx: Context, a: I32, count: _Int, out: I32 | None = None) -> I32:
    """Logical shift right (0 when count >= 32), like IVP_SRLN_2X32. C_ALU."""
    _check_shift(count)
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(a, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = ((np.int64(a[i]) & 0xFFFFFFFF) >> count) if count < 32 else 0
    return out


@njit
def sra_i32(ctx: Context, a: I32, count: _Int, out: I32 | None = None) -> I32:
    """Arithmetic shift right (sign fill when count >= 32), like IVP_SRAN_2X32. C_ALU."""
    _check_shift(count)
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(a, 16)
    _check_size(out, 16)
    shift = min(count, 31)
    for i in range(16):
        out[i] = np.int64(a[i]) >> shift
    return out


@njit
def sll_i16(ctx: Context, a: I16, count: _Int, out: I16 | None = None) -> I16:
    """Logical shift left (0 when count >= 16), like IVP_SLLNX16. C_ALU."""
    _check_shift(count)
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = (np.int64(a[i]) << count) if count < 16 else 0  # keeps the low 16 bits
    return out


@njit
def srl_i16(ctx: Context, a: I16, count: _Int, out: I16 | None = None) -> I16:
    """Logical shift right (0 when count >= 16), like IVP_SRLNX16. C_ALU."""
    _check_shift(count)
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = ((np.int64(a[i]) & 0xFFFF) >> count) if count < 16 else 0
    return out


@njit
def sra_i16(ctx: Context, a: I16, count: _Int, out: I16 | None = None) -> I16:
    """Arithmetic shift right (sign fill when count >= 16), like IVP_SRANX16. C_ALU."""
    _check_shift(count)
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 32)
    _check_size(out, 32)
    shift = min(count, 15)
    for i in range(32):
        out[i] = np.int64(a[i]) >> shift
    return out


# --- float arithmetic ----------------------------------------------------------------------


@njit
def add_f32(ctx: Context, a: F32, b: F32, out: F32 | None = None) -> F32:
    """a + b in float32, like IVP_ADDN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] + b[i]
    return out


@njit
def sub_f32(ctx: Context, a: F32, b: F32, out: F32 | None = None) -> F32:
    """a - b in float32, like IVP_SUBN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] - b[i]
    return out


@njit
def mul_f32(ctx: Context, a: F32, b: F32, out: F32 | None = None) -> F32:
    """a * b in float32, like IVP_MULN_2XF32. C_MUL."""
    _tick(ctx, C_MUL, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] * b[i]
    return out


@njit_ieee
def fdiv_f32(ctx: Context, a: F32, b: F32, out: F32 | None = None) -> F32:
    """a / b in float32 (x / 0 is +-inf, 0 / 0 NaN), like IVP_DIVN_2XF32. C_FDIV."""
    _tick(ctx, C_FDIV, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] / b[i]
    return out


@njit_ieee
def frecip_f32(ctx: Context, a: F32, out: F32 | None = None) -> F32:
    """The correctly rounded float32 1 / a: a division (C_FDIV), like IVP_DIVN_2XF32 with a
    numerator of 1, done once so that a loop can multiply (C_MUL) instead of divide."""
    _tick(ctx, C_FDIV, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(out, 16)
    one = np.float32(1.0)
    for i in range(16):
        out[i] = one / a[i]
    return out


@njit_inline
def _fminmax(a: F32, b: F32, take_max: bool, out: F32) -> F32:
    """IEEE 754-2019 minimum or maximum per lane into `out`: NaN wins, and -0.0 < +0.0."""
    _check_size(b, a.size)
    _check_size(out, a.size)
    for i in range(a.size):
        x = a[i]
        y = b[i]
        if x != x:
            out[i] = x
        elif y != y:
            out[i] = y
        elif x == y:
            # Only the zeros compare equal with different bits: pick by sign.
            out[i] = y if np.signbit(x) == take_max else x
        elif (x > y) == take_max:
            out[i] = x
        else:
            out[i] = y
    return out


@njit
def min_f32(ctx: Context, a: F32, b: F32, out: F32 | None = None) -> F32:
    """Lane minimum, like IVP_MINN_2XF32; NaN if either lane is NaN, min(-0, +0) = -0. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    return _fminmax(a, b, False, out)


@njit
def max_f32(ctx: Context, a: F32, b: F32, out: F32 | None = None) -> F32:
    """Lane maximum, like IVP_MAXN_2XF32; NaN if either lane is NaN, max(-0, +0) = +0. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    return _fminmax(a, b, True, out)


@njit
def abs_f32(ctx: Context, a: F32, out: F32 | None = None) -> F32:
    """|a| (clears the sign, also of -0.0), like IVP_ABSN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = np.abs(a[i])
    return out


@njit
def neg_f32(ctx: Context, a: F32, out: F32 | None = None) -> F32:
    """-a (flips the sign, also of zeros), like IVP_NEGN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = -a[i]
    return out


# --- horizontal reductions -----------------------------------------------------------------


@njit_inline
def _pairwise_sum(a: npt.NDArray[Any]) -> Any:
    """Sum of a power-of-two number of lanes by the tree in the module docstring, in the
    lane type (float32 rounding, or int32 wrapping)."""
    partial = a
    half = a.size // 2
    while half > 0:
        partial = partial[:half] + partial[half : 2 * half]
        half //= 2
    return partial[0]


@njit
def radd_f32(ctx: Context, a: F32) -> np.float32:
    """Sum of the 16 lanes by the fixed pairwise tree, like IVP_RADDN_2XF32. 4 x C_ALU."""
    _check_size(a, 16)
    _tick(ctx, C_ALU, _REDUCE_STEPS_16)
    return _pairwise_sum(a)


@njit
def rmax_f32(ctx: Context, a: F32) -> np.float32:
    """Largest of the 16 lanes, NaN if any lane is NaN, +0 over -0, like IVP_RMAXN_2XF32.
    4 x C_ALU."""
    _check_size(a, 16)
    _tick(ctx, C_ALU, _REDUCE_STEPS_16)
    partial = a
    half = 8
    while half > 0:
        partial = _fminmax(partial[:half], partial[half : 2 * half], True,
                           np.empty(half, np.float32))
        half //= 2
    return partial[0]


@njit
def radd_i32(ctx: Context, a: I32) -> np.int32:
    """Sum of the 16 lanes modulo 2**32 (wrapping), like IVP_RADDN_2X32. 4 x C_ALU."""
    _check_size(a, 16)
    _tick(ctx, C_ALU, _REDUCE_STEPS_16)
    return _pairwise_sum(a)


@njit
def rmax_i32(ctx: Context, a: I32) -> np.int32:
    """Largest of the 16 signed lanes, like IVP_RMAXN_2X32. 4 x C_ALU."""
    _check_size(a, 16)
    _tick(ctx, C_ALU, _REDUCE_STEPS_16)
    return a.max()


# --- compares and mask logic ---------------------------------------------------------------


@njit
def lt_f32(ctx: Context, a: F32, b: F32, out: Mask | None = None) -> Mask:
    """Ordered a < b (false if either is NaN), like IVP_OLTN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] < b[i]
    return out


@njit
def le_f32(ctx: Context, a: F32, b: F32, out: Mask | None = None) -> Mask:
    """Ordered a <= b (false if either is NaN), like IVP_OLEN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] <= b[i]
    return out


@njit
def eq_f32(ctx: Context, a: F32, b: F32, out: Mask | None = None) -> Mask:
    """Ordered a == b (false if either is NaN; -0 == +0), like IVP_OEQN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] == b[i]
    return out


@njit
def ult_f32(ctx: Context, a: F32, b: F32, out: Mask | None = None) -> Mask:
    """Unordered a < b (true if either is NaN), like IVP_ULTN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = not a[i] >= b[i]
    return out


@njit
def ule_f32(ctx: Context, a: F32, b: F32, out: Mask | None = None) -> Mask:
    """Unordered a <= b (true if either is NaN), like IVP_ULEN_2XF32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = not a[i] > b[i]
    return out


@njit
def lt_i32(ctx: Context, a: I32, b: I32, out: Mask | None = None) -> Mask:
    """Signed a < b, like IVP_LTN_2X32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] < b[i]
    return out


@njit
def le_i32(ctx: Context, a: I32, b: I32, out: Mask | None = None) -> Mask:
    """Signed a <= b, like IVP_LEN_2X32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] <= b[i]
    return out


@njit
def eq_i32(ctx: Context, a: I32, b: I32, out: Mask | None = None) -> Mask:
    """a == b, like IVP_EQN_2X32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = a[i] == b[i]
    return out


@njit
def ltu_i32(ctx: Context, a: I32, b: I32, out: Mask | None = None) -> Mask:
    """a < b with both read as unsigned 32-bit, like IVP_LTUN_2X32. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(16, np.bool_)
    _check_size(a, 16)
    _check_size(b, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = (a[i] & 0xFFFFFFFF) < (b[i] & 0xFFFFFFFF)
    return out


@njit
def lt_i16(ctx: Context, a: I16, b: I16, out: Mask | None = None) -> Mask:
    """Signed a < b, like IVP_LTNX16. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.bool_)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = a[i] < b[i]
    return out


@njit
def le_i16(ctx: Context, a: I16, b: I16, out: Mask | None = None) -> Mask:
    """Signed a <= b, like IVP_LENX16. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.bool_)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = a[i] <= b[i]
    return out


@njit
def eq_i16(ctx: Context, a: I16, b: I16, out: Mask | None = None) -> Mask:
    """a == b, like IVP_EQNX16. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.bool_)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = a[i] == b[i]
    return out


@njit
def ltu_i16(ctx: Context, a: I16, b: I16, out: Mask | None = None) -> Mask:
    """a < b with both read as unsigned 16-bit, like IVP_LTUNX16. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(32, np.bool_)
    _check_size(a, 32)
    _check_size(b, 32)
    _check_size(out, 32)
    for i in range(32):
        out[i] = (a[i] & 0xFFFF) < (b[i] & 0xFFFF)
    return out


@njit
def and_b(ctx: Context, m: Mask, n: Mask, out: Mask | None = None) -> Mask:
    """m and n, like IVP_ANDBN_2. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty_like(m)
    _check_size(n, m.size)
    _check_size(out, m.size)
    for i in range(m.size):
        out[i] = m[i] and n[i]
    return out


@njit
def or_b(ctx: Context, m: Mask, n: Mask, out: Mask | None = None) -> Mask:
    """m or n, like IVP_ORBN_2. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty_like(m)
    _check_size(n, m.size)
    _check_size(out, m.size)
    for i in range(m.size):
        out[i] = m[i] or n[i]
    return out


@njit
def not_b(ctx: Context, m: Mask, out: Mask | None = None) -> Mask:
    """not m, like IVP_NOTBN_2. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty_like(m)
    _check_size(out, m.size)
    for i in range(m.size):
        out[i] = not m[i]
    return out


# --- selects and interleaves ---------------------------------------------------------------


@njit
def mov_t(
    ctx: Context, a: _Vec[_Lane], b: _Vec[_Lane], mask: Mask, out: _Vec[_Lane] | None = None
) -> _Vec[_Lane]:
    """Lane-wise `a if mask else b` for any vector type (i32, f32, i8, ...), like
    IVP_MOVN_2X32T(a, b, mask) / IVP_MOV2NX8T. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty_like(b)
    _check_size(b, a.size)
    _check_size(mask, a.size)
    _check_size(out, a.size)
    for i in range(a.size):
        out[i] = a[i] if mask[i] else b[i]
    return out


@njit
def interleave_even_i8(
    ctx: Context, a: _Vec[_Lane], b: _Vec[Any], out: _Vec[_Lane] | None = None
) -> _Vec[_Lane]:
    """Bytes 2k of a and b, interleaved: result byte 2k = a byte 2k, byte 2k + 1 = b byte 2k,
    like IVP_SEL2NX8I(b, a, IVP_SELI_8B_INTERLEAVE_1_EVEN). Keeps the type of `a`. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty_like(a)
    a_bytes = a.view(np.uint8)
    b_bytes = b.view(np.uint8)
    out_bytes = out.view(np.uint8)
    _check_size(a_bytes, VECTOR_BYTES)
    _check_size(b_bytes, VECTOR_BYTES)
    _check_size(out_bytes, VECTOR_BYTES)
    for k in range(0, VECTOR_BYTES, 2):
        even = a_bytes[k]
        odd = b_bytes[k]  # both read before the pair is written: `out` may be `a` or `b`
        out_bytes[k] = even
        out_bytes[k + 1] = odd
    return out


@njit
def interleave_even_i16(
    ctx: Context, a: _Vec[_Lane], b: _Vec[Any], out: _Vec[_Lane] | None = None
) -> _Vec[_Lane]:
    """Halfwords 2k of a and b, interleaved: result halfword 2k = a halfword 2k, halfword
    2k + 1 = b halfword 2k, like IVP_SELNX16I(b, a, IVP_SELI_16B_INTERLEAVE_1_EVEN). Keeps the
    type of `a`. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty_like(a)
    a_halves = a.view(np.uint16)
    b_halves = b.view(np.uint16)
    out_halves = out.view(np.uint16)
    _check_size(a_halves, 32)
    _check_size(b_halves, 32)
    _check_size(out_halves, 32)
    for k in range(0, 32, 2):
        even = a_halves[k]
        odd = b_halves[k]
        out_halves[k] = even
        out_halves[k + 1] = odd
    return out


# --- conversions ---------------------------------------------------------------------------


@njit_inline
def _to_i32_saturating(a: F32, half_to_even: bool, out: I32) -> I32:
    """int32 of each lane into `out`, rounded toward zero or half to even, saturating at the
    int32 limits; NaN gives 0."""
    _check_size(a, 16)
    _check_size(out, 16)
    for i in range(16):
        x = a[i]
        if x != x:
            out[i] = 0
        elif x >= 2147483648.0:
            out[i] = _INT32_MAX
        elif x <= -2147483648.0:
            out[i] = _INT32_MIN
        elif half_to_even:
            out[i] = int(np.rint(x))
        else:
            out[i] = int(x)
    return out


@njit
def trunc_f32_i32(ctx: Context, a: F32, out: I32 | None = None) -> I32:
    """Round toward zero to int32, saturating, NaN -> 0, like IVP_TRUNCN_2XF32(a, 0). C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(16, np.int32)
    return _to_i32_saturating(a, False, out)


@njit
def firint_f32(ctx: Context, a: F32, out: F32 | None = None) -> F32:
    """Round to an integral float32, ties to even (the reset rounding mode), like
    IVP_FIRINTN_2XF32. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = np.rint(a[i])
    return out


@njit
def round_f32_i32(ctx: Context, a: F32, out: I32 | None = None) -> I32:
    """Round half to even to int32, saturating, NaN -> 0. On the DSP this is two instructions,
    IVP_FIRINTN_2XF32 then IVP_TRUNCN_2XF32, so it counts 2 x C_CVT."""
    _tick(ctx, C_CVT, 2)
    if out is None:
        out = np.empty(16, np.int32)
    return _to_i32_saturating(a, True, out)


@njit
def cvt_i32_f32(ctx: Context, a: I32, out: F32 | None = None) -> F32:
    """int32 to the nearest float32 (ties to even), like IVP_FLOATN_2X32(a, 0). C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(16, np.float32)
    _check_size(a, 16)
    _check_size(out, 16)
    for i in range(16):
        out[i] = np.float32(a[i])
    return out


@njit_inline
def _pack_saturating(
    a: _Vec[Any], b: _Vec[Any], low: int, high: int, out: _Vec[_Lane]
) -> _Vec[_Lane]:
    """Lanes of a then lanes of b, each clamped to [low, high], into `out` (which must not
    share memory with a or b)."""
    n = a.size
    _check_size(b, n)
    _check_size(out, 2 * n)
    for i in range(n):
        out[i] = min(max(a[i], low), high)
        out[n + i] = min(max(b[i], low), high)
    return out


@njit
def pack_i32_i16(ctx: Context, a: I32, b: I32, out: I16 | None = None) -> I16:
    """Two int32[16] into one int16[32] (a's lanes first), saturating to int16, like the
    saturating narrow of the IVP_PACKVR family with shift 0. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(a, 16)
    return _pack_saturating(a, b, -32768, 32767, out)


@njit
def pack_i16_i8(ctx: Context, a: I16, b: I16, out: I8 | None = None) -> I8:
    """Two int16[32] into one int8[64] (a's lanes first), saturating to int8. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(64, np.int8)
    _check_size(a, 32)
    return _pack_saturating(a, b, -128, 127, out)


@njit
def pack_i16_u8(ctx: Context, a: I16, b: I16, out: U8 | None = None) -> U8:
    """Two int16[32] into one uint8[64] (a's lanes first), saturating to 0..255, like the
    unsigned-saturating IVP_PACKVRU family. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(64, np.uint8)
    _check_size(a, 32)
    return _pack_saturating(a, b, 0, 255, out)


@njit_inline
def _unpack(source: _Vec[Any], first: int, out: _Vec[_Lane]) -> _Vec[_Lane]:
    """Lanes first.. of `source` (a 64-byte vector seen as narrow lanes), widened into the
    lanes of `out` (which must not share memory with it)."""
    _check_size(source, 2 * out.size)
    for i in range(out.size):
        out[i] = source[first + i]
    return out


@njit
def unpack_lo_i8_i16(ctx: Context, vec: _Vec[Any], out: I16 | None = None) -> I16:
    """Bytes 0..31 of a 64-byte vector, sign-extended into int16[32], like IVP_UNPKS2NX8_0.
    C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(out, 32)
    return _unpack(vec.view(np.int8), 0, out)


@njit
def unpack_hi_i8_i16(ctx: Context, vec: _Vec[Any], out: I16 | None = None) -> I16:
    """Bytes 32..63, sign-extended into int16[32], like IVP_UNPKS2NX8_1. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(out, 32)
    return _unpack(vec.view(np.int8), 32, out)


@njit
def unpack_lo_u8_i16(ctx: Context, vec: _Vec[Any], out: I16 | None = None) -> I16:
    """Bytes 0..31, zero-extended into int16[32] (0..255), like IVP_UNPKU2NX8_0. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(out, 32)
    return _unpack(vec.view(np.uint8), 0, out)


@njit
def unpack_hi_u8_i16(ctx: Context, vec: _Vec[Any], out: I16 | None = None) -> I16:
    """Bytes 32..63, zero-extended into int16[32] (0..255), like IVP_UNPKU2NX8_1. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(32, np.int16)
    _check_size(out, 32)
    return _unpack(vec.view(np.uint8), 32, out)


@njit
def unpack_lo_i16_i32(ctx: Context, vec: _Vec[Any], out: I32 | None = None) -> I32:
    """Halfwords 0..15 of a 64-byte vector, sign-extended into int32[16], like
    IVP_UNPKSNX16_0. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(out, 16)
    return _unpack(vec.view(np.int16), 0, out)


@njit
def unpack_hi_i16_i32(ctx: Context, vec: _Vec[Any], out: I32 | None = None) -> I32:
    """Halfwords 16..31, sign-extended into int32[16], like IVP_UNPKSNX16_1. C_CVT."""
    _tick(ctx, C_CVT, 1)
    if out is None:
        out = np.empty(16, np.int32)
    _check_size(out, 16)
    return _unpack(vec.view(np.int16), 16, out)

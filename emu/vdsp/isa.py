"""The 512-bit SIMD instruction set of one vDSP core, as numba functions kernels call in a loop.

A DSP kernel is written as an `@njit` Python function that calls the ops below the way the
C code of a Vision-P6 kernel calls IVP intrinsics. Every op computes exactly what the DSP
would and adds the work it did to the core's counters; `vdsp/timing.py` turns counts into
cycles. Every op is itself compiled with `emu.jit.njit_op`, so the same function is called
from a kernel (LLVM inlines it there) and from plain Python (tests, notebooks). That is why
the ops do not sit behind validating Python wrappers: a kernel calls them directly. Argument
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
error, another count a ValueError). Kernels make their registers once (`np.empty(LANES_32,
np.float32)`, ...) and pass them in their loops, as C code names vector variables: an op
then allocates nothing, which makes it several times cheaper to emulate. For lane-wise ops
and the interleaves `out` may be one of the inputs (`add_i32(ctx, a, b, out=a)`); the ops
that move lanes between halves (packs, unpacks, widening multiplies) need an `out` of their
own. The shuffles and selects (`shfl_u8`, `sel_u8`) and the permutes (`interleave_lo_*`,
`deinterleave_*`) copy their inputs first, so `out` may be any input; `out` may be `acc`
for the multiply-accumulates. Called from Python without `out`, an op makes the new array
in Python and runs its compiled form with a destination (`emu.jit.njit_op`'s `new_out`),
so tests and notebooks compile one version per argument types, not two.

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
  - integer add, sub, abs and mul wrap (mul keeps the low bits; |INT_MIN| = INT_MIN); the
    `adds`/`subs` ops and packs saturate. Multiply-accumulates wrap in the accumulator
    type; `mula_f32` rounds the product to float32 and then the sum (not fused).
  - the rounding shifts (`srar_*`, and `packr_*` before they saturate) compute
    (a + 2**(count - 1)) >> count exactly, in wider integers; count 0 leaves a, a count
    >= the lane width gives 0.
  - every reduction (`radd_*`, `rmax_*`, `rmin_*`) combines lanes in a fixed pairwise tree,
    lane i with lane i + half, halving each step (`radd_i16` sums in int32). So
    `radd_f32` adds in a fixed pairwise tree: step 1 forms lanes i + (i + 8) for i < 8,
    step 2 forms i + (i + 4) for i < 4 of those, step 3 i + (i + 2), step 4 lane 0 + lane 1,
    each sum rounded to float32. A reduction counts one C_ALU per tree step (4 for 16 lanes,
    5 for 32, 6 for 64).
  - a scatter writes its lanes in lane order, so when lanes collide the last lane wins.

How ops are defined. Ops that differ only in lane type, lane count, counter and per-lane
expression are rows of the tables below, each built by one factory per op shape (`_binary`,
`_compare`, `_unary`, `_shift`, `_pack`, `_reduce`, ...) and carrying its own docstring.

Kernels in other modules inline these ops when numba compiles them; `emu.jit` keys the disk
cache on this module's source too, so an edit here recompiles them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt
from numba.core import types
from numba.experimental import structref

from emu.jit import njit, njit_inline, njit_op

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
LANES_32 = VECTOR_BYTES // 4
"""Lanes of a register of 32-bit elements (int32, uint32, float32)."""
LANES_16 = VECTOR_BYTES // 2
"""Lanes of a register of 16-bit elements."""
LANES_8 = VECTOR_BYTES
"""Lanes of a register of 8-bit elements."""
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
        # The arrays are views of the context's memory and no op replaces one, so they are
        # fetched once per proxy: a call into compiled code that boxes nine arrays costs
        # about 4 us, and a core reads its counters and fault record after every kernel.
        try:
            fields = ctx._field_arrays  # type: ignore[attr-defined]
        except AttributeError:
            fields = ctx._field_arrays = _fields(ctx)  # type: ignore[attr-defined]
        return fields[index]

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


@njit
def _new_context(tcm: U8, counters: npt.NDArray[np.int64], fault: npt.NDArray[np.int64],
                 geometry: npt.NDArray[np.int64], scratch: npt.NDArray[np.int64],
                 views: tuple[I8, I16, I32, F32]) -> Context:
    # Made in a cached kernel: the proxy's constructor called from Python is compiled
    # afresh in every process (numba does not cache it), about 0.7 s each time.
    tcm_i8, tcm_i16, tcm_i32, tcm_f32 = views
    return Context(tcm, counters, fault, geometry, scratch, tcm_i8, tcm_i16, tcm_i32, tcm_f32)


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
    fields = (
        tcm,
        np.zeros(N_COUNTERS, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        np.array(geometry, dtype=np.int64),
        np.zeros(_MAX_LANES + int(sub_banks), dtype=np.int64),
    )
    views = (tcm.view(np.int8), tcm.view(np.int16), tcm.view(np.int32), tcm.view(np.float32))
    if numba.config.DISABLE_JIT:  # type: ignore[attr-defined]
        return _PlainContext(*fields, *views)  # type: ignore[return-value]
    return _new_context(*fields, views)


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


# --- how ops are made ----------------------------------------------------------------------
#
# Most ops differ only in lane type, lane count, counter and the expression computed per
# lane. Each such family has one factory below that builds the op from those parameters, and
# every op is one row of a table further down: its name, its parameters and its docstring.
# The factory's inner function is compiled with `emu.jit` (cached on disk like any kernel;
# lane count, dtype and counter are closure constants that numba freezes into the code) and
# the per-lane expression is a small `_lane_fn` helper that numba copies into the op.
# Each factory returns a Protocol type for its op shape, so that mypy checks the callers of
# every table row as it would a hand-written function.

_In = TypeVar("_In", contravariant=True)
_In2 = TypeVar("_In2", contravariant=True)
_Out = TypeVar("_Out")
_OutCo = TypeVar("_OutCo", covariant=True)
_X = TypeVar("_X", contravariant=True)
_L = TypeVar("_L", bound=np.generic)
_L2 = TypeVar("_L2", bound=np.generic)
_L3 = TypeVar("_L3", bound=np.generic)
_Kernel = TypeVar("_Kernel", bound=Callable[..., Any])


class _CastOp(Protocol[_OutCo]):
    def __call__(self, vec: _Vec[Any]) -> _OutCo: ...


class _SplatOp(Protocol[_X, _Out]):
    def __call__(self, ctx: Context, x: _X, out: _Out | None = None) -> _Out: ...


class _LoadOp(Protocol[_Out]):
    def __call__(self, ctx: Context, address: _Int, out: _Out | None = None) -> _Out: ...


class _StoreOp(Protocol):
    def __call__(self, ctx: Context, vec: _Vec[Any], address: _Int) -> None: ...


class _GatherOp(Protocol[_In, _Out]):
    def __call__(self, ctx: Context, base: _Int, offsets: _In, out: _Out | None = None
                 ) -> _Out: ...


class _ScatterOp(Protocol[_In, _In2]):
    def __call__(self, ctx: Context, vec: _In, base: _Int, offsets: _In2) -> None: ...


class _UnaryOp(Protocol[_In, _Out]):
    def __call__(self, ctx: Context, a: _In, out: _Out | None = None) -> _Out: ...


class _BinaryOp(Protocol[_In, _Out]):
    def __call__(self, ctx: Context, a: _In, b: _In, out: _Out | None = None) -> _Out: ...


class _MaskOp(Protocol):
    def __call__(self, ctx: Context, m: Mask, n: Mask, out: Mask | None = None) -> Mask: ...


class _WideningOp(Protocol[_In, _In2, _Out]):
    def __call__(self, ctx: Context, a: _In, b: _In2, out: _Out | None = None) -> _Out: ...


class _AccumulateOp(Protocol[_In, _In2, _Out]):
    def __call__(self, ctx: Context, acc: _Out, a: _In, b: _In2, out: _Out | None = None
                 ) -> _Out: ...


class _ShiftOp(Protocol[_Out]):
    def __call__(self, ctx: Context, a: _Out, count: _Int, out: _Out | None = None
                 ) -> _Out: ...


class _PackShiftOp(Protocol[_In, _Out]):
    def __call__(self, ctx: Context, a: _In, b: _In, count: _Int, out: _Out | None = None
                 ) -> _Out: ...


class _UnpackOp(Protocol[_Out]):
    def __call__(self, ctx: Context, vec: _Vec[Any], out: _Out | None = None) -> _Out: ...


class _ReduceOp(Protocol[_In, _OutCo]):
    def __call__(self, ctx: Context, a: _In) -> _OutCo: ...


class _ByteOrderOp(Protocol):
    def __call__(self, ctx: Context, a: _Vec[_Lane], b: _Vec[Any],
                 out: _Vec[_Lane] | None = None) -> _Vec[_Lane]: ...


def _lane_fn(helper: _Kernel) -> _Kernel:
    """`njit_inline` for a helper that factories capture in their closures.

    numba keys a cached closure on a pickle of the values it captures, and pickles a
    compiled function with a random per-process id: the cache would then never be hit.
    A helper's id is therefore made from its name, the same in every process. A captured
    helper's code is pickled with the compiled functions it calls, so those need this too."""
    compiled = njit_inline(helper)
    set_uuid = getattr(compiled, "_set_uuid", None)  # absent under NUMBA_DISABLE_JIT=1
    if set_uuid is not None:
        set_uuid(str(uuid.uuid5(uuid.NAMESPACE_URL, f"{__name__}.{helper.__qualname__}")))
    return compiled


def _make(op: Callable[..., Any], name: str, doc: str, ieee: bool = False,
          new_out: Callable[..., Any] | None = None) -> Any:
    """Name, document and compile the inner function of a factory as the public op `name`
    (the name also keys its disk cache, one index per op); `new_out` as for `njit_op`."""
    op.__name__ = name
    op.__qualname__ = name
    op.__doc__ = doc
    return njit_op(op, ieee=ieee, new_out=new_out)


def _new(lanes: int, dtype: type[Any]) -> Callable[..., Any]:
    """`new_out` (`njit_op`) of an op whose omitted `out` is `np.empty(lanes, dtype)`."""
    return lambda *_args: np.empty(lanes, dtype)


def _like(index: int) -> Callable[..., Any]:
    """`new_out` (`njit_op`) of an op whose omitted `out` is `np.empty_like` of its
    argument `index` (0 is the context)."""
    return lambda *args: np.empty_like(args[index])


def _op_making(new_out: Callable[..., Any]) -> Callable[[_Kernel], _Kernel]:
    """`njit_op` with `new_out`, for a hand-written op with a destination."""
    return lambda kernel: njit_op(kernel, new_out=new_out)


def _lanes(dtype: type[np.generic]) -> int:
    return VECTOR_BYTES // np.dtype(dtype).itemsize


def _limits(dtype: type[Any]) -> tuple[int, int]:
    """Smallest and largest value of an integer lane type ((0, 0) for the others)."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    return 0, 0


def _bitcast(name: str, dtype: type[_L], doc: str) -> _CastOp[_Vec[_L]]:
    def op(vec: _Vec[Any]) -> _Vec[Any]:
        return vec.copy().view(dtype)

    return cast(_CastOp[_Vec[_L]], _make(op, name, doc))


def _splat(name: str, dtype: type[Any], lane: Callable[..., Any], doc: str) -> Any:
    """`lane(x)` in every lane. C_ALU."""
    lanes = _lanes(dtype)

    def op(ctx: Context, x: Any, out: _Vec[Any] | None = None) -> _Vec[Any]:
        _tick(ctx, C_ALU, 1)
        if out is None:
            out = np.empty(lanes, dtype)
        _check_size(out, lanes)
        value = lane(x)
        for i in range(lanes):
            out[i] = value
        return out

    return _make(op, name, doc, new_out=_new(lanes, dtype))


def _splat_int(name: str, dtype: type[_L], doc: str) -> _SplatOp[_Int, _Vec[_L]]:
    """x (which must fit the lane type) in every lane. C_ALU."""
    return cast(_SplatOp[_Int, _Vec[_L]], _splat(name, dtype, _same, doc))


def _splat_float(name: str, dtype: type[_L], doc: str) -> _SplatOp[_Float, _Vec[_L]]:
    """float32(x) in every lane. C_ALU."""
    return cast(_SplatOp[_Float, _Vec[_L]], _splat(name, dtype, _to_f32, doc))


def _load_op(name: str, dtype: type[_L], alignment: int, op_id: int, doc: str
             ) -> _LoadOp[_Vec[_L]]:
    lanes = _lanes(dtype)

    def op(ctx: Context, address: _Int, out: _Vec[Any] | None = None) -> _Vec[Any]:
        if out is None:
            out = np.empty(lanes, dtype)
        return _load(ctx, address, alignment, op_id, out)

    return cast(_LoadOp[_Vec[_L]], _make(op, name, doc, new_out=_new(lanes, dtype)))


def _store_op(name: str, alignment: int, op_id: int, doc: str) -> _StoreOp:
    def op(ctx: Context, vec: _Vec[Any], address: _Int) -> None:
        _store(ctx, vec, address, VECTOR_BYTES, alignment, op_id)

    return cast(_StoreOp, _make(op, name, doc))


def _gather_op(name: str, elements: Callable[..., Any], dtype: type[_L], offsets: type[_L2],
               op_id: int, doc: str) -> _GatherOp[_Vec[_L2], _Vec[_L]]:
    """Address phase of a gather from the TCM seen as `elements(ctx)`, into `dtype` lanes
    (the offsets' type is for the caller's types only)."""
    lanes = _lanes(dtype)

    def op(ctx: Context, base: _Int, offsets: _Vec[Any], out: _Vec[Any] | None = None
           ) -> _Vec[Any]:
        if out is None:
            out = np.empty(lanes, dtype)
        return _gather(ctx, elements(ctx), base, offsets, out, op_id)

    return cast(_GatherOp[_Vec[_L2], _Vec[_L]],
                _make(op, name, doc, new_out=_new(lanes, dtype)))


def _scatter_op(name: str, elements: Callable[..., Any], dtype: type[_L], offsets: type[_L2],
                op_id: int, doc: str) -> _ScatterOp[_Vec[_L], _Vec[_L2]]:
    lanes = _lanes(dtype)

    def op(ctx: Context, vec: _Vec[Any], base: _Int, offsets: _Vec[Any]) -> None:
        _check_size(vec, lanes)
        _scatter(ctx, elements(ctx), vec, base, offsets, op_id)

    return cast(_ScatterOp[_Vec[_L], _Vec[_L2]], _make(op, name, doc))


def _lanewise2(name: str, dtype: type[Any], out_dtype: type[Any], counter: int,
               lane: Callable[..., Any], doc: str, ieee: bool = False) -> Any:
    """lane(out, i, a[i], b[i], low, high) stores lane i, with (low, high) the limits of the
    input lane type, for every lane of `dtype`. One `counter`."""
    lanes = _lanes(dtype)
    low, high = _limits(dtype)

    def op(ctx: Context, a: _Vec[Any], b: _Vec[Any], out: _Vec[Any] | None = None
           ) -> _Vec[Any]:
        _tick(ctx, counter, 1)
        if out is None:
            out = np.empty(lanes, out_dtype)
        _check_size(a, lanes)
        _check_size(b, lanes)
        _check_size(out, lanes)
        for i in range(lanes):
            lane(out, i, a[i], b[i], low, high)
        return out

    return _make(op, name, doc, ieee, new_out=_new(lanes, out_dtype))


def _binary(name: str, dtype: type[_L], counter: int, lane: Callable[..., Any], doc: str,
            ieee: bool = False) -> _BinaryOp[_Vec[_L], _Vec[_L]]:
    """A lane-wise op of two vectors of `dtype` into a third."""
    return cast(_BinaryOp[_Vec[_L], _Vec[_L]],
                _lanewise2(name, dtype, dtype, counter, lane, doc, ieee))


def _compare(name: str, dtype: type[_L], lane: Callable[..., Any], doc: str
             ) -> _BinaryOp[_Vec[_L], Mask]:
    """A lane-wise compare of two vectors of `dtype` into a mask. C_ALU."""
    return cast(_BinaryOp[_Vec[_L], Mask], _lanewise2(name, dtype, np.bool_, C_ALU, lane, doc))


def _unary(name: str, dtype: type[_L], out_dtype: type[_L2], counter: int, ticks: int,
           lane: Callable[..., Any], doc: str, ieee: bool = False
           ) -> _UnaryOp[_Vec[_L], _Vec[_L2]]:
    """lane(out, i, a[i]) stores lane i into `out_dtype` lanes; `ticks` of `counter`."""
    lanes = _lanes(dtype)

    def op(ctx: Context, a: _Vec[Any], out: _Vec[Any] | None = None) -> _Vec[Any]:
        _tick(ctx, counter, ticks)
        if out is None:
            out = np.empty(lanes, out_dtype)
        _check_size(a, lanes)
        _check_size(out, lanes)
        for i in range(lanes):
            lane(out, i, a[i])
        return out

    return cast(_UnaryOp[_Vec[_L], _Vec[_L2]],
                _make(op, name, doc, ieee, new_out=_new(lanes, out_dtype)))


def _mask_logic(name: str, lane: Callable[..., Any], doc: str) -> _MaskOp:
    """lane(out, i, m[i], n[i]) stores lane i, for masks of any lane count. C_ALU."""

    def op(ctx: Context, m: Mask, n: Mask, out: Mask | None = None) -> Mask:
        _tick(ctx, C_ALU, 1)
        if out is None:
            out = np.empty_like(m)
        _check_size(n, m.size)
        _check_size(out, m.size)
        for i in range(m.size):
            lane(out, i, m[i], n[i])
        return out

    return cast(_MaskOp, _make(op, name, doc, new_out=_like(1)))


def _widening(name: str, dtype: type[_L], b_dtype: type[_L2], out_dtype: type[_L3],
              a_first: int, b_first: int, doc: str
              ) -> _WideningOp[_Vec[_L], _Vec[_L2], _Vec[_L3]]:
    """out[i] = a[a_first + i] * b[b_first + i] into `out_dtype` lanes (keeping the low
    bits). C_MUL."""
    lanes, a_lanes, b_lanes = _lanes(out_dtype), _lanes(dtype), _lanes(b_dtype)

    def op(ctx: Context, a: _Vec[Any], b: _Vec[Any], out: _Vec[Any] | None = None
           ) -> _Vec[Any]:
        _tick(ctx, C_MUL, 1)
        if out is None:
            out = np.empty(lanes, out_dtype)
        _check_size(a, a_lanes)
        _check_size(b, b_lanes)
        _check_size(out, lanes)
        for i in range(lanes):
            out[i] = _product(a[a_first + i], b[b_first + i])
        return out

    return cast(_WideningOp[_Vec[_L], _Vec[_L2], _Vec[_L3]],
                _make(op, name, doc, new_out=_new(lanes, out_dtype)))


def _accumulating(name: str, dtype: type[_L], b_dtype: type[_L2], acc_dtype: type[_L3],
                  a_first: int, b_first: int, doc: str, lane: Callable[..., Any] | None = None
                  ) -> _AccumulateOp[_Vec[_L], _Vec[_L2], _Vec[_L3]]:
    """out[i] = acc[i] + a[a_first + i] * b[b_first + i] in `acc_dtype` lanes: integers wrap,
    float32 rounds the product and then the sum; or `lane(acc[i], a[..], b[..])`. C_MUL.
    `out` may be `acc`."""
    combine = _multiply_add if lane is None else lane
    lanes, a_lanes, b_lanes = _lanes(acc_dtype), _lanes(dtype), _lanes(b_dtype)

    def op(ctx: Context, acc: _Vec[Any], a: _Vec[Any], b: _Vec[Any],
           out: _Vec[Any] | None = None) -> _Vec[Any]:
        _tick(ctx, C_MUL, 1)
        if out is None:
            out = np.empty(lanes, acc_dtype)
        _check_size(acc, lanes)
        _check_size(a, a_lanes)
        _check_size(b, b_lanes)
        _check_size(out, lanes)
        for i in range(lanes):
            out[i] = combine(acc[i], a[a_first + i], b[b_first + i])
        return out

    return cast(_AccumulateOp[_Vec[_L], _Vec[_L2], _Vec[_L3]],
                _make(op, name, doc, new_out=_new(lanes, acc_dtype)))


def _shift(name: str, dtype: type[_L], lane: Callable[..., Any], doc: str
           ) -> _ShiftOp[_Vec[_L]]:
    """out[i] = lane(a[i], count, bits) for a scalar count >= 0 (ValueError if negative).
    C_ALU."""
    lanes = _lanes(dtype)
    bits = 8 * np.dtype(dtype).itemsize

    def op(ctx: Context, a: _Vec[Any], count: _Int, out: _Vec[Any] | None = None
           ) -> _Vec[Any]:
        _check_shift(count)
        _tick(ctx, C_ALU, 1)
        if out is None:
            out = np.empty(lanes, dtype)
        _check_size(a, lanes)
        _check_size(out, lanes)
        for i in range(lanes):
            out[i] = lane(a[i], count, bits)
        return out

    return cast(_ShiftOp[_Vec[_L]], _make(op, name, doc, new_out=_new(lanes, dtype)))


def _pack(name: str, dtype: type[_L], out_dtype: type[_L2], doc: str
          ) -> _BinaryOp[_Vec[_L], _Vec[_L2]]:
    """Lanes of a then of b, saturated to `out_dtype`. C_CVT."""
    lanes = _lanes(dtype)
    bits = 8 * np.dtype(dtype).itemsize
    low, high = _limits(out_dtype)

    def op(ctx: Context, a: _Vec[Any], b: _Vec[Any], out: _Vec[Any] | None = None
           ) -> _Vec[Any]:
        _tick(ctx, C_CVT, 1)
        if out is None:
            out = np.empty(2 * lanes, out_dtype)
        _check_size(a, lanes)
        return _pack_saturating(a, b, 0, bits, low, high, out)

    return cast(_BinaryOp[_Vec[_L], _Vec[_L2]],
                _make(op, name, doc, new_out=_new(2 * lanes, out_dtype)))


def _pack_rounding(name: str, dtype: type[_L], out_dtype: type[_L2], doc: str
                   ) -> _PackShiftOp[_Vec[_L], _Vec[_L2]]:
    """Lanes of a then of b, each shifted right by `count` with rounding (`_srar`), then
    saturated to `out_dtype`. C_CVT."""
    lanes = _lanes(dtype)
    bits = 8 * np.dtype(dtype).itemsize
    low, high = _limits(out_dtype)

    def op(ctx: Context, a: _Vec[Any], b: _Vec[Any], count: _Int,
           out: _Vec[Any] | None = None) -> _Vec[Any]:
        _check_shift(count)
        _tick(ctx, C_CVT, 1)
        if out is None:
            out = np.empty(2 * lanes, out_dtype)
        _check_size(a, lanes)
        return _pack_saturating(a, b, count, bits, low, high, out)

    return cast(_PackShiftOp[_Vec[_L], _Vec[_L2]],
                _make(op, name, doc, new_out=_new(2 * lanes, out_dtype)))


def _unpack_op(name: str, source: type[np.generic], first: int, out_dtype: type[_L], doc: str
               ) -> _UnpackOp[_Vec[_L]]:
    """Lanes first.. of any 64-byte vector seen as `source` lanes, widened. C_CVT."""
    lanes = _lanes(out_dtype)

    def op(ctx: Context, vec: _Vec[Any], out: _Vec[Any] | None = None) -> _Vec[Any]:
        _tick(ctx, C_CVT, 1)
        if out is None:
            out = np.empty(lanes, out_dtype)
        _check_size(out, lanes)
        return _unpack(vec.view(source), first, out)

    return cast(_UnpackOp[_Vec[_L]], _make(op, name, doc, new_out=_new(lanes, out_dtype)))


def _reduce(name: str, dtype: type[_L], acc_dtype: type[_L2], lane: Callable[..., Any],
            doc: str) -> _ReduceOp[_Vec[_L], _L2]:
    """All lanes combined by `lane` in the pairwise tree of the module docstring (lane i with
    lane i + half, halving each step), in `acc_dtype`. One C_ALU per tree step."""
    lanes = _lanes(dtype)
    steps = lanes.bit_length() - 1

    def op(ctx: Context, a: _Vec[Any]) -> Any:
        _check_size(a, lanes)
        _tick(ctx, C_ALU, steps)
        partial = np.empty(lanes, acc_dtype)
        for i in range(lanes):
            partial[i] = a[i]
        half = lanes // 2
        while half > 0:
            for i in range(half):
                lane(partial, i, partial[i], partial[i + half], 0, 0)
            half //= 2
        return partial[0]

    return cast(_ReduceOp[_Vec[_L], _L2], _make(op, name, doc))


def _byte_order(name: str, view: type[np.generic], doc: str) -> _ByteOrderOp:
    """Elements 2k of a and b, interleaved (a's first), with the vectors seen as `view`
    elements; keeps the type of `a`. C_ALU."""
    lanes = _lanes(view)

    def op(ctx: Context, a: _Vec[Any], b: _Vec[Any], out: _Vec[Any] | None = None
           ) -> _Vec[Any]:
        _tick(ctx, C_ALU, 1)
        if out is None:
            out = np.empty_like(a)
        a_elements = a.view(view)
        b_elements = b.view(view)
        out_elements = out.view(view)
        _check_size(a_elements, lanes)
        _check_size(b_elements, lanes)
        _check_size(out_elements, lanes)
        for k in range(0, lanes, 2):
            even = a_elements[k]
            odd = b_elements[k]  # both read before the pair is written: `out` may be a or b
            out_elements[k] = even
            out_elements[k + 1] = odd
        return out

    return cast(_ByteOrderOp, _make(op, name, doc, new_out=_like(1)))


def _permute2(name: str, dtype: type[_L], source: Callable[..., Any], doc: str
              ) -> _BinaryOp[_Vec[_L], _Vec[_L]]:
    """out[i] = (a ++ b)[source(i, lanes)], from copies of a and b, so `out` may be either.
    C_ALU."""
    lanes = _lanes(dtype)

    def op(ctx: Context, a: _Vec[Any], b: _Vec[Any], out: _Vec[Any] | None = None
           ) -> _Vec[Any]:
        _tick(ctx, C_ALU, 1)
        if out is None:
            out = np.empty(lanes, dtype)
        _check_size(a, lanes)
        _check_size(b, lanes)
        _check_size(out, lanes)
        both = np.empty(2 * lanes, dtype)
        for i in range(lanes):
            both[i] = a[i]
            both[lanes + i] = b[i]
        for i in range(lanes):
            out[i] = both[source(i, lanes)]
        return out

    return cast(_BinaryOp[_Vec[_L], _Vec[_L]], _make(op, name, doc, new_out=_new(lanes, dtype)))


# --- per-lane expressions ------------------------------------------------------------------
# Lane-wise helpers store lane i themselves: binary ones as (out, i, x, y, low, high), with
# the limits of the input lane type that only the saturating ones use; unary ones as
# (out, i, x). Storing in each branch, rather than returning a value, is what lets LLVM
# turn a branchy lane (min_f32, the float -> int conversions) into vector selects.
# Shift helpers return (x, count, bits) -> value, splat ones x -> value.


@_lane_fn
def _add(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x + y


@_lane_fn
def _sub(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x - y


@_lane_fn
def _mul(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x * y


@_lane_fn
def _fdiv(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x / y


@_lane_fn
def _min(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = min(x, y)


@_lane_fn
def _max(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = max(x, y)


@_lane_fn
def _and(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x & y


@_lane_fn
def _or(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x | y


@_lane_fn
def _xor(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x ^ y


@_lane_fn
def _adds(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = min(max(np.int64(x) + np.int64(y), low), high)


@_lane_fn
def _subs(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = min(max(np.int64(x) - np.int64(y), low), high)


@_lane_fn
def _absdiff(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = abs(np.int64(x) - np.int64(y))


@_lane_fn
def _avg_round(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = (np.int64(x) + np.int64(y) + 1) >> 1


@_lane_fn
def _fmin(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    """IEEE 754-2019 minimum: NaN wins (x's first), and -0.0 < +0.0. A store in each branch,
    as LLVM turns those (not a returned value) into vector selects."""
    if x != x:
        out[i] = x
    elif y != y:
        out[i] = y
    elif x == y:  # only the zeros compare equal with different bits: pick by sign
        out[i] = x if np.signbit(x) else y
    elif x < y:
        out[i] = x
    else:
        out[i] = y


@_lane_fn
def _fmax(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    """IEEE 754-2019 maximum: NaN wins (x's first), and +0.0 > -0.0."""
    if x != x:
        out[i] = x
    elif y != y:
        out[i] = y
    elif x == y:
        out[i] = y if np.signbit(x) else x
    elif x > y:
        out[i] = x
    else:
        out[i] = y


@_lane_fn
def _lt(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x < y


@_lane_fn
def _le(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x <= y


@_lane_fn
def _eq(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = x == y


@_lane_fn
def _ult(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = not x >= y


@_lane_fn
def _ule(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    out[i] = not x > y


@_lane_fn
def _ltu(out: Any, i: int, x: Any, y: Any, low: int, high: int) -> None:
    """x < y with both read as unsigned: high - low is the all-ones mask of the lane."""
    out[i] = (x & (high - low)) < (y & (high - low))


@_lane_fn
def _both(out: Any, i: int, x: bool, y: bool) -> None:
    out[i] = x and y


@_lane_fn
def _either(out: Any, i: int, x: bool, y: bool) -> None:
    out[i] = x or y


@_lane_fn
def _product(x: Any, y: Any) -> Any:
    return x * y


@_lane_fn
def _multiply_add(acc: Any, x: Any, y: Any) -> Any:
    return acc + _product(x, y)


@_lane_fn
def _fused_multiply_add(acc: Any, x: Any, y: Any) -> np.float32:
    """acc + x * y rounded once to float32 (ties to even). The float64 product of two
    float32 is exact; the float64 sum s is off the true value by e (an exact two-sum), which
    only matters when s falls exactly halfway between two float32: then e says which way."""
    p = np.float64(x) * np.float64(y)
    c = np.float64(acc)
    s = p + c
    r = np.float32(s)
    if not np.isfinite(s) or np.float64(r) == s:
        return r
    back = s - p
    e = (p - (s - back)) + (c - back)
    if e == 0.0:
        return r
    if np.float64(r) < s:
        low, high = r, np.nextafter(r, np.float32(np.inf))
    else:
        low, high = np.nextafter(r, np.float32(-np.inf)), r
    if s == (np.float64(low) + np.float64(high)) * 0.5:
        return high if e > 0.0 else low
    return r


@_lane_fn
def _same(x: Any) -> Any:
    return x


@_lane_fn
def _to_f32(x: Any) -> np.float32:
    return np.float32(x)


@_lane_fn
def _fabs(out: Any, i: int, x: Any) -> None:
    out[i] = np.abs(x)


@_lane_fn
def _neg(out: Any, i: int, x: Any) -> None:
    out[i] = -x


@_lane_fn
def _iabs(out: Any, i: int, x: Any) -> None:
    out[i] = -np.int64(x) if x < 0 else np.int64(x)


@_lane_fn
def _rint(out: Any, i: int, x: Any) -> None:
    out[i] = np.rint(x)


@_lane_fn
def _recip(out: Any, i: int, x: Any) -> None:
    out[i] = np.float32(1.0) / x


@_lane_fn
def _cvt_f32(out: Any, i: int, x: Any) -> None:
    out[i] = np.float32(x)


@_lane_fn  # a deterministic id also for the helpers that call it (see `_lane_fn`)
def _to_i32_saturating(out: Any, i: int, x: Any, mode: int) -> None:
    """out[i] = int32 of a float lane rounded toward zero (mode 0), half to even (1) or down
    (2), saturating at the int32 limits; NaN gives 0. A store in each branch, as LLVM
    vectorises those (not a returned value)."""
    if x != x:
        out[i] = 0
    elif x >= 2147483648.0:
        out[i] = _INT32_MAX
    elif x <= -2147483648.0:
        out[i] = _INT32_MIN
    elif mode == 1:
        out[i] = int(np.rint(x))
    elif mode == 2:
        out[i] = int(np.floor(x))
    else:
        out[i] = int(x)


@_lane_fn
def _trunc_i32(out: Any, i: int, x: Any) -> None:
    _to_i32_saturating(out, i, x, 0)


@_lane_fn
def _round_i32(out: Any, i: int, x: Any) -> None:
    _to_i32_saturating(out, i, x, 1)


@_lane_fn
def _floor_i32(out: Any, i: int, x: Any) -> None:
    _to_i32_saturating(out, i, x, 2)


@njit_inline
def _check_shift(count: _Int) -> None:
    if count < 0:
        raise ValueError("shift count must not be negative")


@_lane_fn
def _sll(x: Any, count: Any, bits: int) -> Any:
    return (np.int64(x) << count) if count < bits else 0  # the store keeps the low bits


@_lane_fn
def _srl(x: Any, count: Any, bits: int) -> Any:
    return ((np.int64(x) & ((1 << bits) - 1)) >> count) if count < bits else 0


@_lane_fn
def _sra(x: Any, count: Any, bits: int) -> Any:
    return np.int64(x) >> min(count, bits - 1)


@_lane_fn
def _srar(x: Any, count: Any, bits: int) -> Any:
    """(x + 2**(count - 1)) >> count, exactly (in int64): x for count 0, and 0 once count
    reaches the lane width."""
    if count == 0:
        return np.int64(x)
    if count >= bits:
        return np.int64(0)
    return (np.int64(x) + (np.int64(1) << (count - 1))) >> count


@njit_inline
def _pack_saturating(
    a: _Vec[Any], b: _Vec[Any], count: Any, bits: int, low: int, high: int, out: _Vec[_Lane]
) -> _Vec[_Lane]:
    """Lanes of a then lanes of b, each shifted right with rounding by `count` and clamped
    to [low, high], into `out` (which must not share memory with a or b)."""
    n = a.size
    _check_size(b, n)
    _check_size(out, 2 * n)
    for i in range(n):
        out[i] = min(max(_srar(a[i], count, bits), low), high)
        out[n + i] = min(max(_srar(b[i], count, bits), low), high)
    return out


@njit_inline
def _unpack(source: _Vec[Any], first: int, out: _Vec[_Lane]) -> _Vec[_Lane]:
    """Lanes first.. of `source` (a 64-byte vector seen as narrow lanes), widened into the
    lanes of `out` (which must not share memory with it)."""
    _check_size(source, 2 * out.size)
    for i in range(out.size):
        out[i] = source[first + i]
    return out


@_lane_fn
def _interleave_lo(i: int, lanes: int) -> int:
    return (i >> 1) + (i & 1) * lanes


@_lane_fn
def _interleave_hi(i: int, lanes: int) -> int:
    return (lanes >> 1) + (i >> 1) + (i & 1) * lanes


@_lane_fn
def _even(i: int, lanes: int) -> int:
    return 2 * i


@_lane_fn
def _odd(i: int, lanes: int) -> int:
    return 2 * i + 1


@_lane_fn
def _tcm_f32(ctx: Context) -> F32:
    return ctx.tcm_f32


@_lane_fn
def _tcm_i32(ctx: Context) -> I32:
    return ctx.tcm_i32


@_lane_fn
def _tcm_i16(ctx: Context) -> I16:
    return ctx.tcm_i16


@_lane_fn
def _tcm_i8(ctx: Context) -> I8:
    return ctx.tcm_i8


@_lane_fn
def _tcm_u8(ctx: Context) -> U8:
    return ctx.tcm


# --- bitcasts ------------------------------------------------------------------------------

as_f32 = _bitcast("as_f32", np.float32,
                  "The same 64 bytes as float32[16] (a C cast to xb_vecN_2xf32; counts nothing).")
as_i32 = _bitcast("as_i32", np.int32,
                  "The same 64 bytes as int32[16] (a C cast to xb_vecN_2x32v; counts nothing).")
as_u32 = _bitcast("as_u32", np.uint32,
                  "The same 64 bytes as uint32[16] (a C cast to xb_vecN_2x32Uv; counts nothing).")
as_i16 = _bitcast("as_i16", np.int16,
                  "The same 64 bytes as int16[32] (a C cast to xb_vecNx16; counts nothing).")
as_u16 = _bitcast("as_u16", np.uint16,
                  "The same 64 bytes as uint16[32] (a C cast to xb_vecNx16U; counts nothing).")
as_i8 = _bitcast("as_i8", np.int8,
                 "The same 64 bytes as int8[64] (a C cast to xb_vec2Nx8; counts nothing).")
as_u8 = _bitcast("as_u8", np.uint8,
                 "The same 64 bytes as uint8[64] (a C cast to xb_vec2Nx8U; counts nothing).")


# --- broadcasts ----------------------------------------------------------------------------

splat_f32 = _splat_float("splat_f32", np.float32,
                         "16 lanes of float32(x), like the replicate behind "
                         "`(xb_vecN_2xf32)x`. C_ALU.")
splat_i32 = _splat_int("splat_i32", np.int32,
                       "16 lanes of x (which must fit int32), like `(xb_vecN_2x32v)x`. C_ALU.")
splat_i16 = _splat_int("splat_i16", np.int16,
                       "32 lanes of x (which must fit int16), like `(xb_vecNx16)x`. C_ALU.")
splat_i8 = _splat_int("splat_i8", np.int8,
                      "64 lanes of x (which must fit int8), like `(xb_vec2Nx8)x`. C_ALU.")
splat_u8 = _splat_int("splat_u8", np.uint8,
                      "64 lanes of x (which must fit uint8), like `(xb_vec2Nx8U)x`. C_ALU.")


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

# Aligned loads fault unless address % 64 == 0; unaligned loads take any byte address (one
# op each: the valign priming load of the aligning IVP_LA* loads is not modelled). C_LOAD.
load_f32 = _load_op("load_f32", np.float32, VECTOR_BYTES, OP_LOAD,
                    "Aligned load of float32[16], like IVP_LVN_2XF32_I. Faults unless "
                    "address % 64 == 0. C_LOAD.")
load_i32 = _load_op("load_i32", np.int32, VECTOR_BYTES, OP_LOAD,
                    "Aligned load of int32[16], like IVP_LVN_2X32_I. C_LOAD.")
load_u32 = _load_op("load_u32", np.uint32, VECTOR_BYTES, OP_LOAD,
                    "Aligned load of uint32[16], like IVP_LVN_2X32U_I. C_LOAD.")
load_i16 = _load_op("load_i16", np.int16, VECTOR_BYTES, OP_LOAD,
                    "Aligned load of int16[32], like IVP_LVNX16_I. C_LOAD.")
load_u16 = _load_op("load_u16", np.uint16, VECTOR_BYTES, OP_LOAD,
                    "Aligned load of uint16[32], like IVP_LVNX16U_I. C_LOAD.")
load_i8 = _load_op("load_i8", np.int8, VECTOR_BYTES, OP_LOAD,
                   "Aligned load of int8[64], like IVP_LV2NX8_I. C_LOAD.")
load_u8 = _load_op("load_u8", np.uint8, VECTOR_BYTES, OP_LOAD,
                   "Aligned load of uint8[64], like IVP_LV2NX8U_I. C_LOAD.")
loadu_f32 = _load_op("loadu_f32", np.float32, 1, OP_LOADU,
                     "Unaligned load of float32[16] from any byte address, like the aligning "
                     "IVP_LAN_2XF32_IP (one op: the valign priming load is not modelled). "
                     "C_LOAD.")
loadu_i32 = _load_op("loadu_i32", np.int32, 1, OP_LOADU,
                     "Unaligned load of int32[16], like IVP_LAN_2X32_IP. C_LOAD.")
loadu_u32 = _load_op("loadu_u32", np.uint32, 1, OP_LOADU,
                     "Unaligned load of uint32[16], like IVP_LAN_2X32U_IP. C_LOAD.")
loadu_i16 = _load_op("loadu_i16", np.int16, 1, OP_LOADU,
                     "Unaligned load of int16[32], like IVP_LANX16_IP. C_LOAD.")
loadu_u16 = _load_op("loadu_u16", np.uint16, 1, OP_LOADU,
                     "Unaligned load of uint16[32], like IVP_LANX16U_IP. C_LOAD.")
loadu_i8 = _load_op("loadu_i8", np.int8, 1, OP_LOADU,
                    "Unaligned load of int8[64], like IVP_LA2NX8_IP. C_LOAD.")
loadu_u8 = _load_op("loadu_u8", np.uint8, 1, OP_LOADU,
                    "Unaligned load of uint8[64], like IVP_LA2NX8U_IP. C_LOAD.")

store = _store_op("store", VECTOR_BYTES, OP_STORE,
                  "Aligned store of any 64-byte vector, like IVP_SVN_2XF32_I / IVP_SV2NX8_I. "
                  "C_STORE.\n\n    Faults unless address % 64 == 0.")
storeu = _store_op("storeu", 1, OP_STOREU,
                   "Unaligned store of any 64-byte vector at any byte address, like the "
                   "aligning IVP_SAN_2XF32_IP (one op; the valign buffering is not modelled). "
                   "C_STORE.")


@njit_op
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


@njit_op  # as `_conflict_depth`, its only caller
def _strided_depth(start: int, offsets: _Vec[Any], sub_banks: int, width_shift: int,
                   words_per_bank_shift: int) -> int:
    """The conflict depth of `_conflict_depth` when the offsets step by a fixed d >= 0 bytes,
    a whole number of sub-bank words, and the lanes stay in one bank; 0 when they do not.

    The lanes then ask for the words w + i * s (s = d / width) of one bank. With s = 0 they
    share one word: depth 1. Otherwise every word is distinct and lane i is in sub-bank
    (w + i * s) % sub_banks, which repeats every p = sub_banks / gcd(s, sub_banks) lanes
    and differs within those p; so a sub-bank serves at most ceil(lanes / p) of them. With
    sub_banks a power of two, gcd(s, sub_banks) is the lowest set bit of s % sub_banks, or
    sub_banks when that is 0."""
    lanes = offsets.size
    step = int(offsets[1]) - int(offsets[0])
    if step < 0 or step & ((1 << width_shift) - 1):
        return 0
    regular = True
    for lane in range(2, lanes):
        regular &= int(offsets[lane]) - int(offsets[lane - 1]) == step
    if not regular:
        return 0
    first = (start + int(offsets[0])) >> width_shift
    stride = step >> width_shift
    if first >> words_per_bank_shift != (first + (lanes - 1) * stride) >> words_per_bank_shift:
        return 0
    if stride == 0:
        return 1
    residue = stride & (sub_banks - 1)
    period = sub_banks // (residue & -residue) if residue else 1
    return (lanes + period - 1) // period


@njit_op
def _conflict_depth(ctx: Context, start: int, offsets: _Vec[Any]) -> int:
    """How many rounds the sub-banks need to serve the (valid) lane addresses
    start + offsets of one gather or scatter.

    A sub-bank serves one word (address // width) per round; lanes on the same word share
    it. The depth is the largest number of distinct words any one sub-bank of any bank must
    serve. Sub-bank of an address: (address // width) % sub_banks, within its bank.
    Works in `scratch`: the lanes' words, sorted, then the per-sub-bank counts after them.

    Kernels mostly gather and scatter with evenly spaced offsets, where the depth has a
    closed form that costs a fifth of the count (`_strided_depth`); the count below serves
    every other case.

    Compiled once per offsets type and inlined by LLVM (`jit.njit_op`), as `_strided_depth`
    is, rather than copied into every gather and scatter op by numba, which typed both
    again in each: with them copied, the test run's compile of the warp, geometry, stats,
    filter and bilateral CV kernels took 71 s instead of 60 s.
    """
    geometry = ctx.geometry
    sub_banks = geometry[1]
    width_shift = geometry[3]
    words_per_bank_shift = geometry[4]
    lanes = offsets.size
    depth = _strided_depth(start, offsets, sub_banks, width_shift, words_per_bank_shift)
    if depth:
        return depth
    scratch = ctx.scratch
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




gather_a_f32 = _gather_op(
    "gather_a_f32", _tcm_f32, np.float32, np.uint32, OP_GATHER32,
    "Address phase of a 16-lane float32 gather, like IVP_GATHERAN_2XF32: lane i reads the "
    "float32 at TCM byte base + offsets[i]. Returns the gather register. C_GATHER_A, plus the "
    "conflict depth in C_GATHER_CONFLICT.")
gather_a_i32 = _gather_op(
    "gather_a_i32", _tcm_i32, np.int32, np.uint32, OP_GATHER32,
    "Address phase of a 16-lane int32 gather, like IVP_GATHERAN_2X32. C_GATHER_A.")
gather_a_i16 = _gather_op(
    "gather_a_i16", _tcm_i16, np.int16, np.uint16, OP_GATHER16,
    "Address phase of a 32-lane int16 gather, like IVP_GATHERANX16 (uint16 offsets). "
    "C_GATHER_A.")
gather_a_i8 = _gather_op(
    "gather_a_i8", _tcm_i8, np.int16, np.uint16, OP_GATHER8,
    "Address phase of a 32-lane byte gather, each byte sign-extended into a 16-bit lane, "
    "like IVP_GATHERANX8S (uint16 offsets). C_GATHER_A.")
gather_a_u8 = _gather_op(
    "gather_a_u8", _tcm_u8, np.uint16, np.uint16, OP_GATHER8,
    "Address phase of a 32-lane byte gather, each byte zero-extended into a 16-bit lane, "
    "like IVP_GATHERANX8U (uint16 offsets). C_GATHER_A.")


@_op_making(_like(1))
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


@_op_making(_new(LANES_8, np.int8))
def gather_d_lo_i8(ctx: Context, gather_register: _Vec[Any], out: I8 | None = None) -> I8:
    """The 32 gathered bytes of an 8-bit gather in bytes 0..31 of an int8[64], bytes 32..63
    zero, like IVP_GATHERD2NX8_L. C_GATHER_D."""
    _tick(ctx, C_GATHER_D, 1)
    _check_size(gather_register, 32)
    if out is None:
        out = np.empty(LANES_8, np.int8)
    _check_size(out, 64)
    for i in range(32):
        out[i] = gather_register[i]  # keeps the low byte
        out[32 + i] = 0
    return out


@_op_making(_new(LANES_8, np.int8))
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
        out = np.empty(LANES_8, np.int8)
    _check_size(out, 64)
    for i in range(32):
        out[i] = low[i]
        out[32 + i] = gather_register[i]  # keeps the low byte
    return out



scatter_f32 = _scatter_op(
    "scatter_f32", _tcm_f32, np.float32, np.uint32, OP_SCATTER32,
    "Write lane i of float32[16] `vec` to TCM byte base + offsets[i], lanes in order, like "
    "IVP_SCATTERN_2XF32. C_SCATTER, plus the conflict depth in C_SCATTER_CONFLICT.")
scatter_i32 = _scatter_op(
    "scatter_i32", _tcm_i32, np.int32, np.uint32, OP_SCATTER32,
    "Write lane i of int32[16] `vec` to TCM byte base + offsets[i], like IVP_SCATTERN_2X32. "
    "C_SCATTER.")
scatter_i16 = _scatter_op(
    "scatter_i16", _tcm_i16, np.int16, np.uint16, OP_SCATTER16,
    "Write lane i of int16[32] `vec` to TCM byte base + offsets[i], like IVP_SCATTERNX16. "
    "C_SCATTER.")
scatter_i8 = _scatter_op(
    "scatter_i8", _tcm_i8, np.int16, np.uint16, OP_SCATTER8,
    "Write the low byte of lane i of 16-bit `vec` (32 lanes) to TCM byte base + offsets[i], "
    "like IVP_SCATTERNX8U. C_SCATTER.")


@njit_op
def scatter_w(ctx: Context) -> None:
    """Wait until every scatter has reached the TCM, like IVP_SCATTERW.

    Scatters here write at once, so this has no effect on the data; it counts nothing,
    because its cost is waiting for the scatters already counted in C_SCATTER.
    """



# --- integer arithmetic --------------------------------------------------------------------

add_i32 = _binary("add_i32", np.int32, C_ALU, _add, "a + b, wrapping, like IVP_ADDN_2X32. C_ALU.")
sub_i32 = _binary("sub_i32", np.int32, C_ALU, _sub, "a - b, wrapping, like IVP_SUBN_2X32. C_ALU.")
mul_i32 = _binary("mul_i32", np.int32, C_MUL, _mul,
                  "Low 32 bits of a * b, like IVP_PACKLN_2X64W(IVP_MULN_2X32(a, b)). C_MUL.")
min_i32 = _binary("min_i32", np.int32, C_ALU, _min,
                  "Signed lane minimum, like IVP_MINN_2X32. C_ALU.")
max_i32 = _binary("max_i32", np.int32, C_ALU, _max,
                  "Signed lane maximum, like IVP_MAXN_2X32. C_ALU.")
and_i32 = _binary("and_i32", np.int32, C_ALU, _and, "Bitwise a & b, like IVP_ANDN_2X32. C_ALU.")
or_i32 = _binary("or_i32", np.int32, C_ALU, _or, "Bitwise a | b, like IVP_ORN_2X32. C_ALU.")
xor_i32 = _binary("xor_i32", np.int32, C_ALU, _xor, "Bitwise a ^ b, like IVP_XORN_2X32. C_ALU.")
abs_i32 = _unary("abs_i32", np.int32, np.int32, C_ALU, 1, _iabs,
                 "|a|, wrapping (|-2**31| = -2**31), like IVP_ABSN_2X32. C_ALU.")

add_i16 = _binary("add_i16", np.int16, C_ALU, _add, "a + b, wrapping, like IVP_ADDNX16. C_ALU.")
sub_i16 = _binary("sub_i16", np.int16, C_ALU, _sub, "a - b, wrapping, like IVP_SUBNX16. C_ALU.")
mul_i16 = _binary("mul_i16", np.int16, C_MUL, _mul,
                  "Low 16 bits of a * b, like IVP_MULNX16PACKL. C_MUL.")
min_i16 = _binary("min_i16", np.int16, C_ALU, _min, "Signed lane minimum, like IVP_MINNX16. C_ALU.")
max_i16 = _binary("max_i16", np.int16, C_ALU, _max, "Signed lane maximum, like IVP_MAXNX16. C_ALU.")
adds_i16 = _binary("adds_i16", np.int16, C_ALU, _adds,
                   "a + b saturating to [-32768, 32767], like IVP_ADDSNX16. C_ALU.")
subs_i16 = _binary("subs_i16", np.int16, C_ALU, _subs,
                   "a - b saturating to [-32768, 32767], like IVP_SUBSNX16. C_ALU.")
and_i16 = _binary("and_i16", np.int16, C_ALU, _and, "Bitwise a & b, like IVP_ANDNX16. C_ALU.")
or_i16 = _binary("or_i16", np.int16, C_ALU, _or, "Bitwise a | b, like IVP_ORNX16. C_ALU.")
xor_i16 = _binary("xor_i16", np.int16, C_ALU, _xor, "Bitwise a ^ b, like IVP_XORNX16. C_ALU.")
abs_i16 = _unary("abs_i16", np.int16, np.int16, C_ALU, 1, _iabs,
                 "|a|, wrapping (|-32768| = -32768), like IVP_ABSNX16. C_ALU.")

min_u16 = _binary("min_u16", np.uint16, C_ALU, _min,
                  "Unsigned lane minimum, like IVP_MINUNX16. C_ALU.")
max_u16 = _binary("max_u16", np.uint16, C_ALU, _max,
                  "Unsigned lane maximum, like IVP_MAXUNX16. C_ALU.")

min_u8 = _binary("min_u8", np.uint8, C_ALU, _min,
                 "Unsigned lane minimum, like IVP_MINU2NX8. C_ALU.")
max_u8 = _binary("max_u8", np.uint8, C_ALU, _max,
                 "Unsigned lane maximum, like IVP_MAXU2NX8. C_ALU.")
absdiff_u8 = _binary("absdiff_u8", np.uint8, C_ALU, _absdiff,
                     "|a - b| of unsigned bytes, like IVP_ABSSUBU2NX8. C_ALU.")
avg_u8 = _binary("avg_u8", np.uint8, C_ALU, _avg_round,
                 "Rounding average (a + b + 1) >> 1, like IVP_AVGRU2NX8. C_ALU.")
adds_u8 = _binary("adds_u8", np.uint8, C_ALU, _adds,
                  "a + b saturating to 255, like IVP_ADDSU2NX8. C_ALU.")
subs_u8 = _binary("subs_u8", np.uint8, C_ALU, _subs,
                  "a - b saturating to 0, like IVP_SUBSU2NX8. C_ALU.")

# --- multiplies and multiply-accumulates ---------------------------------------------------

mul_lo_u8_i16 = _widening(
    "mul_lo_u8_i16", np.uint8, np.int16, np.int16, 0, 0,
    "Bytes 0..31 of a, zero-extended, times the 32 int16 lanes of b, low 16 bits (wrapping), "
    "like IVP_MULUSNX16 on IVP_UNPKU2NX8_0(a). C_MUL.")
mul_hi_u8_i16 = _widening(
    "mul_hi_u8_i16", np.uint8, np.int16, np.int16, 32, 0,
    "Bytes 32..63 of a, zero-extended, times the 32 int16 lanes of b, low 16 bits (wrapping), "
    "like IVP_MULUSNX16 on IVP_UNPKU2NX8_1(a). C_MUL.")
mula_lo_u8_i16 = _accumulating(
    "mula_lo_u8_i16", np.uint8, np.int16, np.int16, 0, 0,
    "acc + bytes 0..31 of a (zero-extended) times b, wrapping int16, like IVP_MULUSANX16. "
    "C_MUL.")
mula_hi_u8_i16 = _accumulating(
    "mula_hi_u8_i16", np.uint8, np.int16, np.int16, 32, 0,
    "acc + bytes 32..63 of a (zero-extended) times b, wrapping int16, like IVP_MULUSANX16. "
    "C_MUL.")
mula_i16 = _accumulating(
    "mula_i16", np.int16, np.int16, np.int16, 0, 0,
    "acc + a * b, wrapping int16 (low 16 bits), like IVP_MULANX16PACKL. C_MUL.")
mul_lo_i16_i32 = _widening(
    "mul_lo_i16_i32", np.int16, np.int16, np.int32, 0, 0,
    "Full int32 products of int16 lanes 0..15 of a and b, like the low half of "
    "IVP_MULNX16 (48-bit wvec, here int32). C_MUL.")
mul_hi_i16_i32 = _widening(
    "mul_hi_i16_i32", np.int16, np.int16, np.int32, 16, 16,
    "Full int32 products of int16 lanes 16..31 of a and b, like the high half of "
    "IVP_MULNX16. C_MUL.")
mula_lo_i16_i32 = _accumulating(
    "mula_lo_i16_i32", np.int16, np.int16, np.int32, 0, 0,
    "acc (int32[16]) + products of int16 lanes 0..15 of a and b, wrapping, like the low half "
    "of IVP_MULANX16. C_MUL.")
mula_hi_i16_i32 = _accumulating(
    "mula_hi_i16_i32", np.int16, np.int16, np.int32, 16, 16,
    "acc (int32[16]) + products of int16 lanes 16..31 of a and b, wrapping, like the high "
    "half of IVP_MULANX16. C_MUL.")
mula_i32 = _accumulating(
    "mula_i32", np.int32, np.int32, np.int32, 0, 0,
    "acc + a * b, wrapping int32 (low 32 bits), like IVP_MULAN_2X32. C_MUL.")
mula_f32 = _accumulating(
    "mula_f32", np.float32, np.float32, np.float32, 0, 0,
    "acc + a * b in float32, NOT fused: the product is rounded to float32, then the sum, "
    "like IVP_MULAN_2XF32 with fusing off. C_MUL.")
fma_f32 = _accumulating(
    "fma_f32", np.float32, np.float32, np.float32, 0, 0,
    "acc + a * b in float32, fused: rounded once (ties to even), like the vector FPU's fused "
    "IVP_MADDN_2XF32. C_MUL.", lane=_fused_multiply_add)

# --- shifts --------------------------------------------------------------------------------
# The count is a scalar >= 0 (ValueError if negative).

sll_i32 = _shift("sll_i32", np.int32, _sll,
                 "Logical shift left by a scalar count (0 when count >= 32), like IVP_SLLN_2X32. "
                 "C_ALU.")
srl_i32 = _shift("srl_i32", np.int32, _srl,
                 "Logical shift right (0 when count >= 32), like IVP_SRLN_2X32. C_ALU.")
sra_i32 = _shift("sra_i32", np.int32, _sra,
                 "Arithmetic shift right (sign fill when count >= 32), like IVP_SRAN_2X32. C_ALU.")
srar_i32 = _shift("srar_i32", np.int32, _srar,
                  "Rounding arithmetic shift right, (a + 2**(count - 1)) >> count computed "
                  "without overflow (count 0 leaves a; 0 when count >= 32), like "
                  "IVP_SRARN_2X32. C_ALU.")
sll_i16 = _shift("sll_i16", np.int16, _sll,
                 "Logical shift left (0 when count >= 16), like IVP_SLLNX16. C_ALU.")
srl_i16 = _shift("srl_i16", np.int16, _srl,
                 "Logical shift right (0 when count >= 16), like IVP_SRLNX16. C_ALU.")
sra_i16 = _shift("sra_i16", np.int16, _sra,
                 "Arithmetic shift right (sign fill when count >= 16), like IVP_SRANX16. C_ALU.")
srar_i16 = _shift("srar_i16", np.int16, _srar,
                  "Rounding arithmetic shift right, (a + 2**(count - 1)) >> count computed in "
                  "wider ints (count 0 leaves a; 0 when count >= 16), like IVP_SRARNX16. C_ALU.")

# --- float arithmetic ----------------------------------------------------------------------

add_f32 = _binary("add_f32", np.float32, C_ALU, _add,
                  "a + b in float32, like IVP_ADDN_2XF32. C_ALU.")
sub_f32 = _binary("sub_f32", np.float32, C_ALU, _sub,
                  "a - b in float32, like IVP_SUBN_2XF32. C_ALU.")
mul_f32 = _binary("mul_f32", np.float32, C_MUL, _mul,
                  "a * b in float32, like IVP_MULN_2XF32. C_MUL.")
fdiv_f32 = _binary("fdiv_f32", np.float32, C_FDIV, _fdiv,
                   "a / b in float32 (x / 0 is +-inf, 0 / 0 NaN), like IVP_DIVN_2XF32. C_FDIV.",
                   ieee=True)
frecip_f32 = _unary("frecip_f32", np.float32, np.float32, C_FDIV, 1, _recip,
                    "The correctly rounded float32 1 / a: a division (C_FDIV), like "
                    "IVP_DIVN_2XF32 with a numerator of 1, done once so that a loop can "
                    "multiply (C_MUL) instead of divide.", ieee=True)
min_f32 = _binary("min_f32", np.float32, C_ALU, _fmin,
                  "Lane minimum, like IVP_MINN_2XF32; NaN if either lane is NaN, "
                  "min(-0, +0) = -0. C_ALU.")
max_f32 = _binary("max_f32", np.float32, C_ALU, _fmax,
                  "Lane maximum, like IVP_MAXN_2XF32; NaN if either lane is NaN, "
                  "max(-0, +0) = +0. C_ALU.")
abs_f32 = _unary("abs_f32", np.float32, np.float32, C_ALU, 1, _fabs,
                 "|a| (clears the sign, also of -0.0), like IVP_ABSN_2XF32. C_ALU.")
neg_f32 = _unary("neg_f32", np.float32, np.float32, C_ALU, 1, _neg,
                 "-a (flips the sign, also of zeros), like IVP_NEGN_2XF32. C_ALU.")

# --- horizontal reductions -----------------------------------------------------------------

radd_f32 = _reduce("radd_f32", np.float32, np.float32, _add,
                   "Sum of the 16 lanes by the fixed pairwise tree, like IVP_RADDN_2XF32. "
                   "4 x C_ALU.")
rmax_f32 = _reduce("rmax_f32", np.float32, np.float32, _fmax,
                   "Largest of the 16 lanes, NaN if any lane is NaN, +0 over -0, like "
                   "IVP_RMAXN_2XF32. 4 x C_ALU.")
radd_i32 = _reduce("radd_i32", np.int32, np.int32, _add,
                   "Sum of the 16 lanes modulo 2**32 (wrapping), like IVP_RADDN_2X32. "
                   "4 x C_ALU.")
rmax_i32 = _reduce("rmax_i32", np.int32, np.int32, _max,
                   "Largest of the 16 signed lanes, like IVP_RMAXN_2X32. 4 x C_ALU.")
rmin_i32 = _reduce("rmin_i32", np.int32, np.int32, _min,
                   "Smallest of the 16 signed lanes, like IVP_RMINN_2X32. 4 x C_ALU.")
radd_i16 = _reduce("radd_i16", np.int16, np.int32, _add,
                   "Sum of the 32 int16 lanes in int32 (exact), by the pairwise tree, like "
                   "IVP_RADDNX16. 5 x C_ALU.")
rmin_u8 = _reduce("rmin_u8", np.uint8, np.uint8, _min,
                  "Smallest of the 64 unsigned byte lanes, like IVP_RMINU2NX8. 6 x C_ALU.")
rmax_u8 = _reduce("rmax_u8", np.uint8, np.uint8, _max,
                  "Largest of the 64 unsigned byte lanes, like IVP_RMAXU2NX8. 6 x C_ALU.")

# --- compares and mask logic ---------------------------------------------------------------

lt_f32 = _compare("lt_f32", np.float32, _lt,
                  "Ordered a < b (false if either is NaN), like IVP_OLTN_2XF32. C_ALU.")
le_f32 = _compare("le_f32", np.float32, _le,
                  "Ordered a <= b (false if either is NaN), like IVP_OLEN_2XF32. C_ALU.")
eq_f32 = _compare("eq_f32", np.float32, _eq,
                  "Ordered a == b (false if either is NaN; -0 == +0), like IVP_OEQN_2XF32. "
                  "C_ALU.")
ult_f32 = _compare("ult_f32", np.float32, _ult,
                   "Unordered a < b (true if either is NaN), like IVP_ULTN_2XF32. C_ALU.")
ule_f32 = _compare("ule_f32", np.float32, _ule,
                   "Unordered a <= b (true if either is NaN), like IVP_ULEN_2XF32. C_ALU.")
lt_i32 = _compare("lt_i32", np.int32, _lt, "Signed a < b, like IVP_LTN_2X32. C_ALU.")
le_i32 = _compare("le_i32", np.int32, _le, "Signed a <= b, like IVP_LEN_2X32. C_ALU.")
eq_i32 = _compare("eq_i32", np.int32, _eq, "a == b, like IVP_EQN_2X32. C_ALU.")
ltu_i32 = _compare("ltu_i32", np.int32, _ltu,
                   "a < b with both read as unsigned 32-bit, like IVP_LTUN_2X32. C_ALU.")
lt_i16 = _compare("lt_i16", np.int16, _lt, "Signed a < b, like IVP_LTNX16. C_ALU.")
le_i16 = _compare("le_i16", np.int16, _le, "Signed a <= b, like IVP_LENX16. C_ALU.")
eq_i16 = _compare("eq_i16", np.int16, _eq, "a == b, like IVP_EQNX16. C_ALU.")
ltu_i16 = _compare("ltu_i16", np.int16, _ltu,
                   "a < b with both read as unsigned 16-bit, like IVP_LTUNX16. C_ALU.")
lt_u16 = _compare("lt_u16", np.uint16, _lt, "Unsigned a < b, like IVP_LTUNX16. C_ALU.")
lt_u8 = _compare("lt_u8", np.uint8, _lt,
                 "Unsigned a < b, 64 lanes, like IVP_LTU2NX8. C_ALU.")
le_u8 = _compare("le_u8", np.uint8, _le,
                 "Unsigned a <= b, 64 lanes, like IVP_LEU2NX8. C_ALU.")
eq_u8 = _compare("eq_u8", np.uint8, _eq, "a == b, 64 lanes, like IVP_EQ2NX8. C_ALU.")

and_b = _mask_logic("and_b", _both, "m and n, like IVP_ANDBN_2. C_ALU.")
or_b = _mask_logic("or_b", _either, "m or n, like IVP_ORBN_2. C_ALU.")


@_op_making(_like(1))
def not_b(ctx: Context, m: Mask, out: Mask | None = None) -> Mask:
    """not m, like IVP_NOTBN_2. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty_like(m)
    _check_size(out, m.size)
    for i in range(m.size):
        out[i] = not m[i]
    return out


# --- selects, shuffles and interleaves -----------------------------------------------------


@_op_making(_like(2))
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


@_op_making(_new(LANES_8, np.uint8))
def shfl_u8(ctx: Context, table: U8, idx: U8, out: U8 | None = None) -> U8:
    """Table lookup out[i] = table[idx[i] & 63], like IVP_SHFL2NX8. `out` may be `table` or
    `idx`. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(LANES_8, np.uint8)
    _check_size(table, 64)
    _check_size(idx, 64)
    _check_size(out, 64)
    source = table.copy()
    index = idx.copy()
    for i in range(64):
        out[i] = source[index[i] & 63]
    return out


@_op_making(_new(LANES_8, np.uint8))
def sel_u8(ctx: Context, a: U8, b: U8, idx: U8, out: U8 | None = None) -> U8:
    """Two-register select out[i] = (a ++ b)[idx[i] & 127], like IVP_SEL2NX8. `out` may be
    any of the inputs. C_ALU."""
    _tick(ctx, C_ALU, 1)
    if out is None:
        out = np.empty(LANES_8, np.uint8)
    _check_size(a, 64)
    _check_size(b, 64)
    _check_size(idx, 64)
    _check_size(out, 64)
    both = np.empty(128, np.uint8)
    for i in range(64):
        both[i] = a[i]
        both[64 + i] = b[i]
    index = idx.copy()
    for i in range(64):
        out[i] = both[index[i] & 127]
    return out


interleave_even_i8 = _byte_order(
    "interleave_even_i8", np.uint8,
    "Bytes 2k of a and b, interleaved: result byte 2k = a byte 2k, byte 2k + 1 = b byte 2k, "
    "like IVP_SEL2NX8I(b, a, IVP_SELI_8B_INTERLEAVE_1_EVEN). Keeps the type of `a`. C_ALU.")
interleave_even_i16 = _byte_order(
    "interleave_even_i16", np.uint16,
    "Halfwords 2k of a and b, interleaved: result halfword 2k = a halfword 2k, halfword "
    "2k + 1 = b halfword 2k, like IVP_SELNX16I(b, a, IVP_SELI_16B_INTERLEAVE_1_EVEN). Keeps "
    "the type of `a`. C_ALU.")
interleave_lo_u8 = _permute2(
    "interleave_lo_u8", np.uint8, _interleave_lo,
    "Bytes a0 b0 a1 b1 ... a31 b31 (lanes 0..31 of each), like "
    "IVP_SEL2NX8I(b, a, IVP_SELI_8B_INTERLEAVE_1_LO). C_ALU.")
interleave_hi_u8 = _permute2(
    "interleave_hi_u8", np.uint8, _interleave_hi,
    "Bytes a32 b32 a33 b33 ... a63 b63 (lanes 32..63 of each), like "
    "IVP_SEL2NX8I(b, a, IVP_SELI_8B_INTERLEAVE_1_HI). C_ALU.")
interleave_lo_i16 = _permute2(
    "interleave_lo_i16", np.int16, _interleave_lo,
    "Halfwords a0 b0 a1 b1 ... a15 b15, like IVP_SELNX16I(b, a, "
    "IVP_SELI_16B_INTERLEAVE_1_LO). C_ALU.")
interleave_hi_i16 = _permute2(
    "interleave_hi_i16", np.int16, _interleave_hi,
    "Halfwords a16 b16 a17 b17 ... a31 b31, like IVP_SELNX16I(b, a, "
    "IVP_SELI_16B_INTERLEAVE_1_HI). C_ALU.")
deinterleave_even_u8 = _permute2(
    "deinterleave_even_u8", np.uint8, _even,
    "Bytes 0, 2, ..., 62 of a, then of b, like IVP_SEL2NX8I(b, a, "
    "IVP_SELI_8B_EXTRACT_1_OF_2_OFF_0). C_ALU.")
deinterleave_odd_u8 = _permute2(
    "deinterleave_odd_u8", np.uint8, _odd,
    "Bytes 1, 3, ..., 63 of a, then of b, like IVP_SEL2NX8I(b, a, "
    "IVP_SELI_8B_EXTRACT_1_OF_2_OFF_1). C_ALU.")

# --- conversions ---------------------------------------------------------------------------

trunc_f32_i32 = _unary("trunc_f32_i32", np.float32, np.int32, C_CVT, 1, _trunc_i32,
                       "Round toward zero to int32, saturating, NaN -> 0, like "
                       "IVP_TRUNCN_2XF32(a, 0). C_CVT.")
firint_f32 = _unary("firint_f32", np.float32, np.float32, C_CVT, 1, _rint,
                    "Round to an integral float32, ties to even (the reset rounding mode), like "
                    "IVP_FIRINTN_2XF32. C_CVT.")
round_f32_i32 = _unary("round_f32_i32", np.float32, np.int32, C_CVT, 2, _round_i32,
                       "Round half to even to int32, saturating, NaN -> 0. On the DSP this is "
                       "two instructions, IVP_FIRINTN_2XF32 then IVP_TRUNCN_2XF32, so it counts "
                       "2 x C_CVT.")
floor_f32_i32 = _unary("floor_f32_i32", np.float32, np.int32, C_CVT, 2, _floor_i32,
                       "Round down to int32, saturating, NaN -> 0: IVP_FIFLOORN_2XF32 then "
                       "IVP_TRUNCN_2XF32, so 2 x C_CVT.")
cvt_i32_f32 = _unary("cvt_i32_f32", np.int32, np.float32, C_CVT, 1, _cvt_f32,
                     "int32 to the nearest float32 (ties to even), like IVP_FLOATN_2X32(a, 0). "
                     "C_CVT.")

pack_i32_i16 = _pack("pack_i32_i16", np.int32, np.int16,
                     "Two int32[16] into one int16[32] (a's lanes first), saturating to int16, "
                     "like the saturating narrow of the IVP_PACKVR family with shift 0. C_CVT.")
pack_i16_i8 = _pack("pack_i16_i8", np.int16, np.int8,
                    "Two int16[32] into one int8[64] (a's lanes first), saturating to int8. "
                    "C_CVT.")
pack_i16_u8 = _pack("pack_i16_u8", np.int16, np.uint8,
                    "Two int16[32] into one uint8[64] (a's lanes first), saturating to 0..255, "
                    "like the unsigned-saturating IVP_PACKVRU family. C_CVT.")
packr_i32_i16 = _pack_rounding(
    "packr_i32_i16", np.int32, np.int16,
    "Two int32[16] into one int16[32] (a's lanes first): each lane shifted right by `count` "
    "with rounding (as `srar_i32`), then saturated to int16, like IVP_PACKVRN_2X64W. C_CVT.")
packr_i16_u8 = _pack_rounding(
    "packr_i16_u8", np.int16, np.uint8,
    "Two int16[32] into one uint8[64] (a's lanes first): each lane shifted right by `count` "
    "with rounding (as `srar_i16`), then saturated to 0..255, like IVP_PACKVRU2NX24. C_CVT.")

unpack_lo_i8_i16 = _unpack_op(
    "unpack_lo_i8_i16", np.int8, 0, np.int16,
    "Bytes 0..31 of a 64-byte vector, sign-extended into int16[32], like IVP_UNPKS2NX8_0. "
    "C_CVT.")
unpack_hi_i8_i16 = _unpack_op(
    "unpack_hi_i8_i16", np.int8, 32, np.int16,
    "Bytes 32..63, sign-extended into int16[32], like IVP_UNPKS2NX8_1. C_CVT.")
unpack_lo_u8_i16 = _unpack_op(
    "unpack_lo_u8_i16", np.uint8, 0, np.int16,
    "Bytes 0..31, zero-extended into int16[32] (0..255), like IVP_UNPKU2NX8_0. C_CVT.")
unpack_hi_u8_i16 = _unpack_op(
    "unpack_hi_u8_i16", np.uint8, 32, np.int16,
    "Bytes 32..63, zero-extended into int16[32] (0..255), like IVP_UNPKU2NX8_1. C_CVT.")
unpack_lo_i16_i32 = _unpack_op(
    "unpack_lo_i16_i32", np.int16, 0, np.int32,
    "Halfwords 0..15 of a 64-byte vector, sign-extended into int32[16], like "
    "IVP_UNPKSNX16_0. C_CVT.")
unpack_hi_i16_i32 = _unpack_op(
    "unpack_hi_i16_i32", np.int16, 16, np.int32,
    "Halfwords 16..31, sign-extended into int32[16], like IVP_UNPKSNX16_1. C_CVT.")
unpack_lo_u16_i32 = _unpack_op(
    "unpack_lo_u16_i32", np.uint16, 0, np.int32,
    "Halfwords 0..15, zero-extended into int32[16] (0..65535), like IVP_UNPKUNX16_0. C_CVT.")
unpack_hi_u16_i32 = _unpack_op(
    "unpack_hi_u16_i32", np.uint16, 16, np.int32,
    "Halfwords 16..31, zero-extended into int32[16] (0..65535), like IVP_UNPKUNX16_1. C_CVT.")


def _check_table_names() -> None:
    """Every op of the tables is named, documented and disk-cached as the attribute that
    holds it: a row whose name argument differs from its attribute is a typo."""
    for attribute, value in globals().items():
        if attribute.startswith("_") or getattr(value, "__module__", None) != __name__:
            continue
        if callable(value) and getattr(value, "__name__", attribute) != attribute:
            raise RuntimeError(f"isa.{attribute} is named {value.__name__}")


_check_table_names()

"""dmp_dv: the user driver of DMP's DV700 CNN accelerator (seed 002), C names and all.

    ctx = dmp_dv_context_create()
    mem = dmp_dv_mem_alloc(ctx, nbytes)            # physically contiguous, from the pool
    ptr = dmp_dv_mem_map(mem)                      # the CPU's view: a writable uint8 array
    dmp_dv_mem_sync_start(mem, 0, 1); ptr[...] = ...; dmp_dv_mem_sync_end(mem)
    cmdlist = dmp_dv_cmdlist_create(ctx)
    dmp_dv_cmdlist_add_raw(cmdlist, conv)          # a dmp_dv_cmdraw_conv_v0 / _v1 / fc_v0
    dmp_dv_cmdlist_commit(cmdlist)
    exec_id = dmp_dv_cmdlist_exec(cmdlist)         # queued; returns at once
    dmp_dv_cmdlist_wait(cmdlist, exec_id)
    us = dmp_dv_cmdlist_get_last_exec_time(cmdlist)

The calling convention is C's: a function returns what the C function returns (a handle or
None for NULL, a status where 0 is success, an execution id, a size, a string); in/out
arguments that C passes by pointer are filled in place (`dmp_dv_info_v0`) or returned after
the status (`rc, size = dmp_dv_pack_conv_weights(...)`). Misuse returns the C error value
and sets the message `dmp_dv_get_last_error_message` returns; it never raises.

Handles are reference counted as on the board (`*_retain`, `*_release`; the last release
frees). Memory: `dmp_dv_mem_alloc` takes a buffer of the session's CMA/ION pool, mapped
cacheable; the CPU reaches it through `dmp_dv_mem_map`'s array, and the A55 cache model
decides what each side sees, as the caches would on the board. The CPU's writes to the
array are found at the next dmp_dv call that involves the memory (a sync, an exec) and run
as stores through the cache model there, on the calling thread: the lines stay dirty in the
caches until a clean (`dmp_dv_mem_sync_end` after a start with `wr`) or an eviction writes
them back, and the device reads only what has reached DDR. `dmp_dv_mem_sync_start` with
`rd` invalidates: the CPU then reads what the device wrote, and its own writes not yet
written back are lost, as on the board. When a wait returns, the lines of the memory the
command list used that no cache holds show the device's data; cached lines keep the CPU's
copy until invalidated. The device (`emu/dv/device.py`) has one queue; `dmp_dv_cmdlist_exec`
returns increasing ids; a wait gives up after 2 s of simulated time, as the driver's does.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from emu.cpu import ops
from emu.cpu.cluster import CLEAN, INVALIDATE, CacheMaintenance, CpuWork
from emu.cpu.work import Stream, stream_work
from emu.dv import packing
from emu.errors import InputError, PoolError
from emu.mem.pool import PoolBuffer
from emu.runtime import dv_commands, session, status
from emu.runtime.cstruct import CStruct
from emu.runtime.host import WaitResult
from emu.soc.clock import PS_PER_MS

DMP_DV_DEV_CONV = 1
DMP_DV_DEV_FC = 2
DMP_DV_DEV_COUNT = 3
EINVAL = dv_commands.EINVAL
ENOTSUP = dv_commands.ENOTSUP
ETIMEDOUT = errno.ETIMEDOUT
WAIT_TIMEOUT_MS = 2000  # the driver's wait gives up after 2 s
VERSION_STRING = "7.0.20181214 (emu)"
MEM_LABEL = "dmp_dv_mem"  # the pool label of the buffers dmp_dv_mem_alloc makes


# --- handles -------------------------------------------------------------------------------

class _Counted:
    """A reference-counted handle of one session."""

    def __init__(self, sess: session.Session) -> None:
        self.session = sess
        self.refs = 1

    @property
    def alive(self) -> bool:
        return self.refs > 0


class dmp_dv_context(_Counted):
    """A context: the device, as seen by one program."""

    def __repr__(self) -> str:
        return f"<dmp_dv_context refs={self.refs}>"


class dmp_dv_mem(_Counted):
    """Device memory: a pool buffer, and the CPU's view once mapped."""

    def __init__(self, sess: session.Session, ctx: dmp_dv_context, buf: PoolBuffer) -> None:
        super().__init__(sess)
        self.context = ctx
        self.buffer = buf
        self.view: npt.NDArray[np.uint8] | None = None
        self.syncing: tuple[bool, bool] | None = None  # (rd, wr) of an open sync_start
        # The CPU's picture of the memory as last seen (the view then), and which of its
        # lines hold CPU writes that have not reached DDR yet.
        self.cpu_bytes = buf.data[:buf.size_bytes].copy()
        line = sess.config.cpu.line_bytes
        self.pending = np.zeros(-(-buf.size_bytes // line), np.bool_)

    def __repr__(self) -> str:
        return f"<dmp_dv_mem {self.buffer.size_bytes} B refs={self.refs}>"


class dmp_dv_cmdlist(_Counted):
    """A command list: raw commands, committed into what the device runs."""

    def __init__(self, sess: session.Session, ctx: dmp_dv_context) -> None:
        super().__init__(sess)
        self.context = ctx
        self.commands: list[Any] = []
        self.committed = False
        self.executions: dict[int, Any] = {}
        self.last_exec_us = 0
        self.last_command_ps: list[int] = []

    def __repr__(self) -> str:
        return f"<dmp_dv_cmdlist {len(self.commands)} command(s) refs={self.refs}>"


@dataclass
class DvState:
    """dmp_dv's state of one session, kept in the session's `dmp_dv` slot (made on first
    use), so that it lives and dies with the session: the message of the last error, and
    the execution id the next `dmp_dv_cmdlist_exec` returns."""

    last_error: str = ""
    next_exec_id: int = 0


def _state(sess: session.Session) -> DvState:
    if sess.dmp_dv is None:
        sess.dmp_dv = DvState()
    return sess.dmp_dv


def _fail(sess: session.Session, message: str, value: Any) -> Any:
    _state(sess).last_error = message
    return value


def _live(handle: Any, kind: type[_Counted], sess: session.Session) -> Any:
    """`handle` if it is a live handle of `kind` made in `sess`, else None."""
    if isinstance(handle, kind) and handle.session is sess and handle.alive:
        return handle
    return None


def _retain(handle: Any, kind: type[_Counted]) -> None:
    sess = session.current()
    live = _live(handle, kind, sess)
    if live is not None:
        live.refs += 1


# --- general information -------------------------------------------------------------------

def dmp_dv_get_version_string() -> str:
    """HW_MAJOR.HW_MINOR.YYYYMMDD, as the board's driver reports."""
    return VERSION_STRING


@status.c_function("dmp_dv: called from another OS thread or inside the simulation loop")
def dmp_dv_get_last_error_message() -> str:
    return _state(session.current()).last_error


# --- contexts ------------------------------------------------------------------------------

@status.c_function(None)
def dmp_dv_context_create() -> dmp_dv_context | None:
    sess, thread = session.caller()
    with thread.call("dmp_dv_context_create"):
        return dmp_dv_context(sess)


@status.c_function(None)
def dmp_dv_context_release(ctx: Any) -> None:
    sess = session.current()
    live = _live(ctx, dmp_dv_context, sess)
    if live is not None:
        live.refs -= 1


@status.c_function(None)
def dmp_dv_context_retain(ctx: Any) -> None:
    _retain(ctx, dmp_dv_context)


@status.c_function("")
def dmp_dv_context_get_info_string(ctx: Any) -> str:
    sess = session.current()
    if _live(ctx, dmp_dv_context, sess) is None:
        return _fail(sess, "dmp_dv_context_get_info_string: not a live context", "")
    cfg = sess.config.dv
    return (f"DV700 (emulated): conv block {cfg.conv_macs} MACs at "
            f"{cfg.conv_freq_hz / 1e6:g} MHz, FC block at {cfg.fc_freq_hz / 1e6:g} MHz, "
            f"UB {cfg.ub_bytes // 1024} KiB, kernels up to {cfg.max_kernel}, FC vectors up "
            f"to {cfg.max_fc_vector}")


class dmp_dv_info(CStruct):
    """The header of every info structure: its size and the version asked for."""

    def __init__(self) -> None:
        self.size = 8
        self.version = 0


class dmp_dv_info_v0(dmp_dv_info):
    """Version 0 of the context information."""

    SIZE = 32

    def __init__(self) -> None:
        super().__init__()
        self.size = self.SIZE
        self.ub_size = 0
        self.max_kernel_size = 0
        self.conv_freq = 0
        self.fc_freq = 0
        self.max_fc_vector_size = 0
        self.rsvd = 0


@status.c_function(EINVAL)
def dmp_dv_context_get_info(ctx: Any, info: Any) -> int:
    """Fill `info` (its `size` and `version` set by the caller): the newest version not
    above the one asked for (0 here), each field only if `size` covers it."""
    sess = session.current()
    if _live(ctx, dmp_dv_context, sess) is None:
        return _fail(sess, "dmp_dv_context_get_info: not a live context", EINVAL)
    size = status.as_int(getattr(info, "size", None), 8)
    version = status.as_int(getattr(info, "version", None), 0)
    if not isinstance(info, dmp_dv_info) or size is None or version is None:
        return _fail(sess, "dmp_dv_context_get_info: info must be a dmp_dv_info with its "
                     "size and version set", EINVAL)
    info.version = 0
    cfg = sess.config.dv
    fields = (("ub_size", cfg.ub_bytes), ("max_kernel_size", cfg.max_kernel),
              ("conv_freq", round(cfg.conv_freq_hz / 1e6)),
              ("fc_freq", round(cfg.fc_freq_hz / 1e6)),
              ("max_fc_vector_size", cfg.max_fc_vector))
    for k, (name, value) in enumerate(fields):
        if size >= 12 + 4 * k:
            setattr(info, name, int(value))
    return 0


@status.c_function(-1)
def dmp_dv_fpga_device_exists(ctx: Any, dev_type_id: Any) -> int:
    """1 if the block exists (conv, FC), 0 if not, -1 for a NULL or dead context."""
    sess = session.current()
    if _live(ctx, dmp_dv_context, sess) is None:
        return _fail(sess, "dmp_dv_fpga_device_exists: not a live context", -1)
    return int(status.as_int(dev_type_id) in (DMP_DV_DEV_CONV, DMP_DV_DEV_FC))


# --- memory --------------------------------------------------------------------------------

@status.c_function(None)
def dmp_dv_mem_alloc(ctx: Any, size: Any) -> dmp_dv_mem | None:
    sess, thread = session.caller()
    with thread.call("dmp_dv_mem_alloc"):
        live = _live(ctx, dmp_dv_context, sess)
        nbytes = status.as_int(size, 1)
        if live is None or nbytes is None:
            return _fail(sess, "dmp_dv_mem_alloc: needs a live context and a size of at "
                         "least 1 byte", None)
        try:
            buf = sess.soc.pool.alloc(nbytes, cached=True, label=MEM_LABEL)
        except PoolError as exc:
            return _fail(sess, f"dmp_dv_mem_alloc: {exc}", None)
        live.refs += 1  # memory keeps its context alive
        return dmp_dv_mem(sess, live, buf)


@status.c_function(None)
def dmp_dv_mem_release(mem: Any) -> None:
    sess, thread = session.caller()
    with thread.call("dmp_dv_mem_release"):
        live = _live(mem, dmp_dv_mem, sess)
        if live is None:
            return
        if live.refs == 1 and live.buffer.users:  # an execution still reads or writes it
            _fail(sess, "dmp_dv_mem_release: the memory is in use by an execution; wait "
                  "for it first", None)
            return
        live.refs -= 1
        if live.refs == 0:
            _unmap(live, thread)
            sess.soc.pool.free(live.buffer)
            live.context.refs -= 1


@status.c_function(None)
def dmp_dv_mem_retain(mem: Any) -> None:
    _retain(mem, dmp_dv_mem)


@status.c_function(None)
def dmp_dv_mem_map(mem: Any) -> npt.NDArray[np.uint8] | None:
    """The CPU's view of the memory (the same array if it is mapped already); it meets the
    device's memory only at sync_start / sync_end (see the module)."""
    sess, thread = session.caller()
    with thread.call("dmp_dv_mem_map"):
        live = _live(mem, dmp_dv_mem, sess)
        if live is None:
            return _fail(sess, "dmp_dv_mem_map: not a live memory handle", None)
        if live.view is None:
            live.view = live.cpu_bytes.copy()
        return live.view


def _unmap(mem: dmp_dv_mem, thread: Any) -> None:
    if mem.syncing is not None:
        _sync_end(mem, thread)
    absorb_cpu_writes(mem, thread)
    mem.view = None


# --- what the CPU and the device see of the memory ---------------------------------------

def absorb_cpu_writes(mem: dmp_dv_mem, thread: Any) -> None:
    """The CPU's writes to the view since the last look: stores of their lines through the
    cache model (timed on `thread`), pending until written back."""
    if mem.view is None:
        return
    line = mem.session.config.cpu.line_bytes
    changed = np.flatnonzero(mem.view != mem.cpu_bytes)
    if not changed.size:
        return
    lines = np.unique(changed // line)
    # Per line a store and its address arithmetic; the stores are known by what changed
    # only, so none is taken to write its whole line. Consecutive lines as one stream.
    runs = np.split(lines, np.flatnonzero(np.diff(lines) != 1) + 1)
    base = mem.buffer.phys_addr
    streams = [Stream(base + int(run[0]) * line, len(run) * line, store=True, whole_lines=False)
               for run in runs]
    thread.cpu(stream_work("CPU writes", ops.counts(store=len(lines), int=len(lines)),
                           streams, line), "CPU writes")
    mem.pending[lines] = True
    mem.cpu_bytes[:] = mem.view


def _line_states(mem: dmp_dv_mem) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    return mem.session.soc.cpu.caches.line_states(mem.buffer.phys_addr, mem.buffer.size_bytes)


def _line_mask(mem: dmp_dv_mem, lines: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    line = mem.session.config.cpu.line_bytes
    return np.repeat(lines, line)[:mem.buffer.size_bytes]


def settle(mem: dmp_dv_mem) -> None:
    """Pending CPU lines that no cache holds dirty any more have been written back: from
    now on the device reads them."""
    if not mem.pending.any():
        return
    _, dirty = _line_states(mem)
    written = mem.pending & ~dirty
    if written.any():
        take = _line_mask(mem, written)
        mem.buffer.data[:mem.buffer.size_bytes][take] = mem.cpu_bytes[take]
        mem.pending &= ~written


def refresh_cpu_view(mem: dmp_dv_mem) -> None:
    """Lines no cache holds are read from DDR: the CPU's view shows the device's data
    there (cached lines keep the CPU's copy)."""
    resident, _ = _line_states(mem)
    fresh = ~resident & ~mem.pending
    if fresh.any():
        take = _line_mask(mem, fresh)
        mem.cpu_bytes[take] = mem.buffer.data[:mem.buffer.size_bytes][take]
        if mem.view is not None:
            mem.view[take] = mem.cpu_bytes[take]


@status.c_function(None)
def dmp_dv_mem_unmap(mem: Any) -> None:
    sess, thread = session.caller()
    with thread.call("dmp_dv_mem_unmap"):
        live = _live(mem, dmp_dv_mem, sess)
        if live is None:
            return _fail(sess, "dmp_dv_mem_unmap: not a live memory handle", None)
        _unmap(live, thread)
        return None


def _maintain(thread: Any, mem: dmp_dv_mem, op: str) -> None:
    label = f"cache {op}"
    thread.cpu(CpuWork(label, ops.counts(), maintenance=CacheMaintenance(
        op, mem.buffer.phys_addr, mem.buffer.size_bytes)), label)


@status.c_function(EINVAL)
def dmp_dv_mem_sync_start(mem: Any, rd: Any, wr: Any) -> int:
    """Begin CPU access: with `rd` the caches are invalidated now, so the CPU reads what the
    device wrote (and loses its writes not yet written back); with `wr` the caches are
    cleaned at sync_end, so the device reads what the CPU wrote. A repeat with the same or
    fewer flags does nothing."""
    sess, thread = session.caller()
    with thread.call("dmp_dv_mem_sync_start"):
        live = _live(mem, dmp_dv_mem, sess)
        read, write = status.as_int(rd), status.as_int(wr)
        if live is None or live.view is None or read is None or write is None:
            return _fail(sess, "dmp_dv_mem_sync_start: needs a live, mapped memory handle "
                         "and integer flags", EINVAL)
        before = live.syncing or (False, False)
        want = (before[0] or bool(read), before[1] or bool(write))
        absorb_cpu_writes(live, thread)
        if bool(read) and not before[0]:
            settle(live)  # what was written back before the invalidate stays written
            _maintain(thread, live, INVALIDATE)
            live.pending[:] = False  # the rest is dropped with the lines
            live.cpu_bytes[:] = live.buffer.data[:live.buffer.size_bytes]
            live.view[:] = live.cpu_bytes
        live.syncing = want
        return 0


def _sync_end(mem: dmp_dv_mem, thread: Any) -> None:
    absorb_cpu_writes(mem, thread)
    if mem.syncing is not None and mem.syncing[1]:
        _maintain(thread, mem, CLEAN)
        settle(mem)  # the clean wrote every dirty line back
    mem.syncing = None


@status.c_function(EINVAL)
def dmp_dv_mem_sync_end(mem: Any) -> int:
    """End the CPU access sync_start began (a repeat does nothing)."""
    sess, thread = session.caller()
    with thread.call("dmp_dv_mem_sync_end"):
        live = _live(mem, dmp_dv_mem, sess)
        if live is None:
            return _fail(sess, "dmp_dv_mem_sync_end: not a live memory handle", EINVAL)
        _sync_end(live, thread)
        return 0


@status.c_function(0)
def dmp_dv_mem_get_size(mem: Any) -> int:
    """The buffer's size in bytes (0 for a NULL or dead handle, with a message)."""
    sess = session.current()
    live = _live(mem, dmp_dv_mem, sess)
    if live is None:
        return _fail(sess, "dmp_dv_mem_get_size: not a live memory handle", 0)
    return int(live.buffer.size_bytes)


@status.c_function(0)
def dmp_dv_mem_get_total_size() -> int:
    """The bytes of device memory the program holds (the driver's per-process total; here
    per session): every live buffer `dmp_dv_mem_alloc` made, at its allocated size."""
    return session.current().soc.pool.labelled_bytes(MEM_LABEL)


# --- command structures --------------------------------------------------------------------

class dmp_dv_buf(CStruct):
    """A place in device memory: a memory handle and a byte offset (even)."""

    def __init__(self, mem: dmp_dv_mem | None = None, offs: int = 0) -> None:
        self.mem = mem
        self.offs = offs


class dmp_dv_cmdraw(CStruct):
    """The header of every raw command: its size, device type and version."""

    ARRAYS = ("rsvd",)

    def __init__(self, size: int = 0, device_type: int = 0, version: int = 0) -> None:
        self.size = size
        self.device_type = device_type
        self.version = version
        self.rsvd = [0, 0]


class dmp_dv_cmdraw_conv_v0_run(CStruct):
    """One run of a convolution command; the packed fields hold a value per byte (see the
    seed): conv_pad / pool_pad = left | right << 8 | top << 16 | bottom << 24; p, pool_size
    = width | height << 8; conv_stride, pool_stride, conv_dilation = x | y << 8;
    pool_avg_param, actfunc_param = FP16 bits. conv_enable: 0 none, 1 convolution, 3
    depthwise, 5 deconvolution (the stride upsamples; the pads are the kernel driver's,
    full kernel - 1 - the framework's), 7 depthwise deconvolution."""

    SIZE = 56

    def __init__(self) -> None:
        self.weight_buf = dmp_dv_buf()
        self.conv_pad = 0
        self.pool_pad = 0
        self.m = 0
        self.conv_enable = 0
        self.p = 0
        self.pz = 0
        self.conv_stride = 0
        self.conv_dilation = 0
        self.weight_fmt = 0
        self.pool_enable = 0
        self.pool_avg_param = 0
        self.pool_size = 0
        self.pool_stride = 0
        self.actfunc = 0
        self.actfunc_param = 0
        self.rectifi_en = 0
        self.lrn = 0
        self.rsvd = 0


MAX_RUNS = 32


class dmp_dv_cmdraw_conv_v0(CStruct):
    """A convolution command (version 0): up to 32 fused runs; a run with m = 0 ends them."""

    SIZE = 8 + 3 * 16 + 4 + 6 * 2 + MAX_RUNS * dmp_dv_cmdraw_conv_v0_run.SIZE
    ARRAYS = ("run",)

    def __init__(self) -> None:
        self.header = dmp_dv_cmdraw(self.SIZE, DMP_DV_DEV_CONV, 0)
        self.input_buf = dmp_dv_buf()
        self.output_buf = dmp_dv_buf()
        self.eltwise_buf = dmp_dv_buf()
        self.topo = 0
        self.w = 0
        self.h = 0
        self.z = 0
        self.c = 0
        self.input_circular_offset = 0
        self.output_mode = 0
        self.run = [dmp_dv_cmdraw_conv_v0_run() for _ in range(MAX_RUNS)]


class dmp_dv_cmdraw_conv_v1(CStruct):
    """A convolution command (version 1): version 0 with a u8 -> FP16 input table."""

    SIZE = 8 + 16 + 8 + dmp_dv_cmdraw_conv_v0.SIZE
    ARRAYS = ("rsvd",)

    def __init__(self) -> None:
        self.header = dmp_dv_cmdraw(self.SIZE, DMP_DV_DEV_CONV, 1)
        self.u8tofp16_table = dmp_dv_buf()
        self.to_bgr = 0
        self.rsvd = [0, 0, 0]
        self.conv_cmd = dmp_dv_cmdraw_conv_v0()


class dmp_dv_cmdraw_fc_v0(CStruct):
    """A fully connected command (version 0)."""

    SIZE = 8 + 3 * 16 + 8 * 2
    ARRAYS = ("rsvd",)

    def __init__(self) -> None:
        self.header = dmp_dv_cmdraw(self.SIZE, DMP_DV_DEV_FC, 0)
        self.weight_buf = dmp_dv_buf()
        self.input_buf = dmp_dv_buf()
        self.output_buf = dmp_dv_buf()
        self.input_size = 0
        self.output_size = 0
        self.weight_fmt = 0
        self.actfunc = 0
        self.actfunc_param = 0
        self.rsvd = [0, 0, 0]


# --- command lists -------------------------------------------------------------------------

@status.c_function(None)
def dmp_dv_cmdlist_create(ctx: Any) -> dmp_dv_cmdlist | None:
    sess, thread = session.caller()
    with thread.call("dmp_dv_cmdlist_create"):
        live = _live(ctx, dmp_dv_context, sess)
        if live is None:
            return _fail(sess, "dmp_dv_cmdlist_create: not a live context", None)
        live.refs += 1
        return dmp_dv_cmdlist(sess, live)


@status.c_function(None)
def dmp_dv_cmdlist_release(cmdlist: Any) -> None:
    sess = session.current()
    live = _live(cmdlist, dmp_dv_cmdlist, sess)
    if live is not None:
        live.refs -= 1
        if live.refs == 0:
            live.context.refs -= 1


@status.c_function(None)
def dmp_dv_cmdlist_retain(cmdlist: Any) -> None:
    _retain(cmdlist, dmp_dv_cmdlist)


@status.c_function(EINVAL)
def dmp_dv_cmdlist_add_raw(cmdlist: Any, cmd: Any) -> int:
    """Add a raw command (checked now: EINVAL for a bad argument, ENOTSUP for a command
    version this device does not run); not once the list is committed."""
    sess, thread = session.caller()
    with thread.call("dmp_dv_cmdlist_add_raw"):
        live = _live(cmdlist, dmp_dv_cmdlist, sess)
        if live is None or live.committed:
            return _fail(sess, "dmp_dv_cmdlist_add_raw: needs a live command list that is "
                         "not committed yet", EINVAL)
        context = live.context

        def resolve(mem: Any) -> dmp_dv_mem | None:
            found = _live(mem, dmp_dv_mem, sess)
            return found if found is not None and found.context is context else None

        decoded = dv_commands.decode(cmd, resolve, sess.config.dv)
        if isinstance(decoded, tuple):
            code, message = decoded
            return _fail(sess, f"dmp_dv_cmdlist_add_raw: {message}", code)
        live.commands.append(decoded)
        return 0


@status.c_function(EINVAL)
def dmp_dv_cmdlist_commit(cmdlist: Any) -> int:
    """Prepare the list for execution (a list without commands cannot be committed)."""
    sess, thread = session.caller()
    with thread.call("dmp_dv_cmdlist_commit"):
        live = _live(cmdlist, dmp_dv_cmdlist, sess)
        if live is None or not live.commands:
            return _fail(sess, "dmp_dv_cmdlist_commit: needs a live command list with at "
                         "least one command", EINVAL)
        live.committed = True
        return 0


class _Execution:
    """One execution of a command list: its device task and when it was kicked."""

    def __init__(self, kicked_ps: int, done: Any) -> None:
        self.kicked_ps = kicked_ps
        self.done = done
        self.error: str | None = None
        self.command_ps: list[int] = []  # each command's time on the device
        self.owners: list[dmp_dv_mem] = []  # the memory it used


@status.c_function(-EINVAL)
def dmp_dv_cmdlist_exec(cmdlist: Any) -> int:
    """Queue the committed list on the device; its execution id (>= 0, increasing), or a
    negative value."""
    sess, thread = session.caller()
    with thread.call("dmp_dv_cmdlist_exec") as call:
        live = _live(cmdlist, dmp_dv_cmdlist, sess)
        if live is None or not live.committed:
            return _fail(sess, "dmp_dv_cmdlist_exec: needs a live, committed command list",
                         -EINVAL)
        for command in live.commands:
            problem = command.check_memory()
            if problem is not None:
                return _fail(sess, f"dmp_dv_cmdlist_exec: {problem}", -EINVAL)
        state = _state(sess)
        exec_id = state.next_exec_id
        state.next_exec_id += 1
        soc = sess.soc
        times: list[int] = []
        task = soc.dv.cmdlist_task(f"dmp_dv exec {exec_id}", [
            (command.label, command.costs(sess.config.dv)) for command in live.commands],
            times)
        call.link(task)
        owners = {id(m): m for command in live.commands for m in command.owners()}
        for owner in owners.values():  # what the device will read of the CPU's writes
            absorb_cpu_writes(owner, thread)
            settle(owner)
        pinned = [b for command in live.commands for b in command.buffers()]
        for buf in pinned:
            soc.pool.pin(buf)
        done = soc.env.event()

        execution = _Execution(sess.now_ps, done)
        execution.command_ps = times

        def run() -> Any:
            yield soc.env.timeout(sess.config.dv.kick_ps)
            yield soc.dv.submit(task)
            for command in live.commands:
                try:
                    command.execute()
                except InputError as exc:  # what the device cannot compute: the wait says
                    execution.error = str(exc)
                    break
            for buf in pinned:
                soc.pool.unpin(buf)
            yield soc.env.timeout(sess.config.dv.wake_ps)
            done.succeed()

        execution.owners = list(owners.values())
        live.executions[exec_id] = execution
        soc.env.process(run())
        return exec_id


@status.c_function(EINVAL)
def dmp_dv_cmdlist_wait(cmdlist: Any, exec_id: Any) -> int:
    """Wait for execution `exec_id` of this list: 0 when it is done, ETIMEDOUT after the
    driver's 2 s, EINVAL for an id this list did not return."""
    sess, thread = session.caller()
    live = _live(cmdlist, dmp_dv_cmdlist, sess)
    number = status.as_int(exec_id, 0)
    if live is None or number not in live.executions:
        return _fail(sess, "dmp_dv_cmdlist_wait: needs a live command list and an execution "
                     "id it returned", EINVAL)
    execution = live.executions[number]
    result = thread.wait(execution.done, int(WAIT_TIMEOUT_MS * PS_PER_MS),
                         "dmp_dv_cmdlist_wait")
    if result is not WaitResult.DONE:
        return _fail(sess, "dmp_dv_cmdlist_wait: timed out", ETIMEDOUT)
    for owner in execution.owners:
        if owner.alive:
            refresh_cpu_view(owner)
    live.last_exec_us = (sess.now_ps - execution.kicked_ps) // 1_000_000
    live.last_command_ps = list(execution.command_ps)
    del live.executions[number]
    if execution.error is not None:
        return _fail(sess, f"dmp_dv_cmdlist_wait: the device failed: {execution.error}",
                     EINVAL)
    return 0


@status.c_function(0)
def dmp_dv_cmdlist_get_last_exec_time(cmdlist: Any) -> int:
    """Microseconds from the kick of the last execution waited for to its wait's return, as
    the driver measures it (0 before any)."""
    sess = session.current()
    live = _live(cmdlist, dmp_dv_cmdlist, sess)
    if live is None:
        return _fail(sess, "dmp_dv_cmdlist_get_last_exec_time: not a live command list", 0)
    return int(live.last_exec_us)


# --- weight packing ------------------------------------------------------------------------

def _pack(fn: Any, size_fn: Any, size_args: tuple[Any, ...], args: tuple[Any, ...],
          packed_weights: Any, packed_weights_size: Any, name: str) -> tuple[int, int]:
    sess = session.current()
    given = status.as_int(packed_weights_size, 0)
    try:
        need = size_fn(*size_args)
        pool_bytes = sess.soc.config.mem.pool_bytes
        if need > pool_bytes:
            raise InputError(f"the packed weights need {need} bytes, more than the whole "
                             f"memory pool ({pool_bytes} B, mem.pool_bytes) could give them")
        if given is None:
            raise InputError("packed_weights_size must be a size in bytes")
        if given == 0:
            return 0, need  # the size query
        if not isinstance(packed_weights, np.ndarray) or packed_weights.dtype != np.uint8 \
                or packed_weights.ndim != 1 or not packed_weights.flags.writeable \
                or min(given, packed_weights.size) < need:
            raise InputError(f"packed_weights must be a writable uint8 array of at least "
                             f"{need} bytes (packed_weights_size {given})")
        data = fn(*args)
    except (InputError, TypeError, ValueError) as exc:
        return _fail(sess, f"{name}: {exc}", (EINVAL, 0))
    packed_weights[:len(data)] = np.frombuffer(data, np.uint8)
    return 0, len(data)


@status.c_function((EINVAL, 0))
def dmp_dv_pack_conv_weights(n_channels: Any, kx: Any, ky: Any, n_kernels: Any,
                             quant_map: Any, weights: Any, bias: Any, prelu: Any,
                             packed_weights: Any, packed_weights_size: Any
                             ) -> tuple[int, int]:
    """Pack a convolution's weights (FP16 bits in NCHW order, or uint8 indices into the
    256-entry FP16 `quant_map`), biases and PReLU slopes (None when the run has no PReLU)
    for the device (`emu/dv/packing.py`), in the argument order of DMP's current driver;
    returns (status, bytes needed): `packed_weights_size` is C's in/out parameter. With
    `packed_weights_size` 0 it only answers the size. For a depthwise run pass
    `n_channels` 1; for a deconvolution the kernels rotated by 180 degrees."""
    return _pack_conv(False, "dmp_dv_pack_conv_weights", n_channels, kx, ky, n_kernels,
                      quant_map, weights, bias, prelu, packed_weights, packed_weights_size)


@status.c_function((EINVAL, 0))
def dmp_dv_pack_dil_weights(n_channels: Any, kx: Any, ky: Any, n_kernels: Any,
                            quant_map: Any, weights: Any, bias: Any, prelu: Any,
                            packed_weights: Any, packed_weights_size: Any
                            ) -> tuple[int, int]:
    """`dmp_dv_pack_conv_weights` for a run with a dilation above 1, whose weights the
    device reads one kernel tap at a time (`emu/dv/packing.py`)."""
    return _pack_conv(True, "dmp_dv_pack_dil_weights", n_channels, kx, ky, n_kernels,
                      quant_map, weights, bias, prelu, packed_weights, packed_weights_size)


def _pack_conv(dilated: bool, name: str, n_channels: Any, kx: Any, ky: Any, n_kernels: Any,
               quant_map: Any, weights: Any, bias: Any, prelu: Any, packed_weights: Any,
               packed_weights_size: Any) -> tuple[int, int]:
    dims = tuple(status.as_int(v, 1) for v in (n_channels, kx, ky, n_kernels))
    if any(d is None for d in dims):
        return _fail(session.current(), f"{name}: the dimensions must be positive integers",
                     (EINVAL, 0))
    pack, size = ((packing.pack_dil_weights, packing.dil_weights_size) if dilated
                  else (packing.pack_conv_weights, packing.conv_weights_size))
    return _pack(pack, size, (*dims, quant_map is not None, prelu is not None),
                 (*dims, quant_map, weights, bias, prelu), packed_weights,
                 packed_weights_size, name)


@status.c_function((EINVAL, 0))
def dmp_dv_pack_fc_weights(c_input: Any, h_input: Any, w_input: Any, c_output: Any,
                           h_output: Any, w_output: Any, quant_map: Any, weights: Any,
                           bias: Any, packed_weights: Any, packed_weights_size: Any
                           ) -> tuple[int, int]:
    """Pack an FC layer's weights (NCHW order of the input and output shapes) reordered to
    the device's input layout, and its biases; returns (status, bytes needed)."""
    dims = tuple(status.as_int(v, 1) for v in (c_input, h_input, w_input, c_output,
                                                 h_output, w_output))
    if any(d is None for d in dims):
        return _fail(session.current(), "dmp_dv_pack_fc_weights: the dimensions must be "
                     "positive integers", (EINVAL, 0))
    return _pack(packing.pack_fc_weights, packing.fc_weights_size,
                 (*dims, quant_map is not None), (*dims, quant_map, weights, bias),
                 packed_weights, packed_weights_size, "dmp_dv_pack_fc_weights")


def command_times_ps(cmdlist: Any) -> list[tuple[str, int]]:
    """The emulator's own query, not a driver function: (label, picoseconds on the device)
    of each command of the last execution of `cmdlist` that was waited for."""
    live = _live(cmdlist, dmp_dv_cmdlist, session.current())
    if live is None:
        return []
    return [(c.label, t) for c, t in zip(live.commands, live.last_command_ps, strict=False)]


__all__ = status.c_names(globals(), "dmp_dv", "DMP_DV")

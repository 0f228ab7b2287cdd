"""Random valid and invalid calls of the C-named runtime APIs from several host threads.

The contract (spec/contracts.md, "Python runtime APIs"): every C-named function returns a
status code, never raises, and misuse changes nothing. Besides hbSys, hbDSP (softmax and
ping RPCs, and raw CV calls whose source image other steps may free while the DSP reads it)
and remoteproc, the workers load crafted model files through hbDNN and release them.

A state machine posts these calls to worker host threads of one session, lets simulated
time pass so that they interleave (one thread blocked in a wait while others allocate, write
or free), and after every step checks the pool's accounting and placement, the bytes of
every buffer and the output of every finished RPC against a model of what the calls must
have done.

Calls in flight together must have one right answer, so the model posts a call that writes or
frees a buffer only when no other call or RPC uses that buffer. The deliberate exception is
freeing a buffer that an RPC uses: that must fail while the RPC's task is queued or running and
succeed once the caller could have seen it complete; in between (the task has ended, its
completion is on its way to the host) either answer is right.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

import emu
from emu.runtime import hbdnn, session
from emu.runtime.hbdsp import (
    HB_DSP_CORE_0,
    HB_DSP_CORE_1,
    HB_DSP_CORE_ANY,
    HB_DSP_CORE_OFFLINE,
    HB_DSP_DEADLOCK,
    HB_DSP_INITIALIZE_RPC_CTRL_PARAM,
    HB_DSP_INVALID_ARGUMENT,
    HB_DSP_INVALID_TASK_HANDLE,
    HB_DSP_SUCCESS,
    HB_DSP_TASK_FAILED,
    HB_DSP_TASK_RUNNING,
    HB_DSP_TIMEOUT,
    HB_DSP_UNKNOWN_COMMAND,
    hbDSPGetErrorDesc,
    hbDSPReleaseTask,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPTask,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import (
    HB_SYS_INVALID_ARGUMENT,
    HB_SYS_INVALID_MEMORY,
    HB_SYS_MEM_CACHE_CLEAN,
    HB_SYS_MEM_CACHE_INVALIDATE,
    HB_SYS_MEM_IN_USE,
    HB_SYS_OUT_OF_MEMORY,
    HB_SYS_SUCCESS,
    hbSysAllocCachedMem,
    hbSysAllocMem,
    hbSysFlushMem,
    hbSysFreeMem,
    hbSysMem,
    hbSysReadMem,
    hbSysWriteMem,
)
from emu.runtime.remoteproc import RPROC_INVALID_ARGUMENT, rproc_set_state, rproc_state
from emu.vdsp.ops import cv, image_args, nn
from emu.vdsp.ops.framework import CMD_PING
from emu.vdsp.ops.tensor_args import HEADER_WORDS, MAGIC, TYPE_F32, pack
from tests.runtime.test_crafted_models import base_model, crafted
from tests.vdsp import nn_reference as ref
from tests.vdsp.test_nn import same_floats

WORKERS = 3
OVERRIDES = ["mem.pool_bytes=4MiB"]  # two of the 1-3 MiB buffers below do not fit together
HEADER_BYTES = 4 * HEADER_WORDS  # softmax takes no parameters, so its data starts here
MIN_SOFTMAX_INPUT = HEADER_BYTES + 4 * 2 * 8  # the smallest tensor drawn is 2 x 8
MAGIC_BYTES = np.array([MAGIC], "<u4").view(np.uint8)
SHAPE_WORDS = range(8, 12)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
CORE_INDEX = {HB_DSP_CORE_ANY: None, HB_DSP_CORE_0: 0, HB_DSP_CORE_1: 1}
FILL = 0xA5  # what host arrays hold before a read, to see which bytes it wrote

# Nothing the API could take for a struct, a task handle or a host array.
JUNK = (None, "x", 1.5, True, np.int8(3), np.float32(1), [1, 2], np.zeros(16)[::2],
        np.array([object()]))
# Not C integers: the API takes Python and NumPy integers, never bools, floats or strings.
NOT_INTS = (None, "4", 4.0, True, np.bool_(True), np.float32(4), [4], np.array(4),
            np.zeros(4)[::2])
SEEDS = st.integers(0, 2**32 - 1)
WORKER = st.integers(0, WORKERS - 1)
CALLER = st.none() | WORKER  # None: the main program, whose blocking calls drive the loop
SIZES = st.one_of(
    st.sampled_from([128, 320, 1088, 2112, 4096]),  # softmax inputs and outputs
    st.integers(1, 8192),
    st.integers(1 << 20, 3 << 20),
    st.sampled_from([np.int16(2112), np.uint64(64), 2**40, np.uint64(2**63), 10**400]),
)
GOOD_TIMEOUTS = st.sampled_from([0, -1, -2.5, 0.0, 1, np.int16(0), np.float32(0.05)]) \
    | st.floats(1e-4, 0.5)
BAD_TIMEOUTS = (math.nan, math.inf, -math.inf, 1e30, -1e30, 2**40, -(2**40), 10**400,
                np.int64(2**40), np.float32("inf"), np.float64("nan"), "x", None, True, [1],
                np.array([1.0]))
# An API call costs 2 us of CPU time, an RPC's round trip about 200 us: most pauses leave
# RPCs in flight for the next steps.
PAUSES = st.sampled_from([0, 1, 2_000_000, 50_000_000]) | st.integers(0, 300_000_000)
SPECIALS = [np.inf, -np.inf, np.nan, 1e30, -1e30, 88.0, -0.0]


def mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any],
           one_in: int = 6) -> st.SearchStrategy[Any]:
    """Draws from `valid`, and one time in `one_in` from `invalid`."""
    return st.integers(1, one_in).flatmap(lambda k: invalid if k == 1 else valid)


def is_c_int(value: Any) -> bool:
    """Whether the API takes `value` as a C integer: a Python or NumPy integer, not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def is_timeout(value: Any) -> bool:
    """Whether hbDSPWaitTaskDone takes `value` as a timeout: a finite real in the int32 range."""
    if isinstance(value, bool | np.bool_) or not isinstance(
            value, int | float | np.integer | np.floating):
        return False
    # An int too large for a float is compared as an int.
    return (isinstance(value, int | np.integer) or math.isfinite(value)) \
        and INT32_MIN <= value <= INT32_MAX


def expect(rc: Any, *allowed: int) -> None:
    assert isinstance(rc, int) and rc in allowed, \
        f"status {rc!r} ({hbDSPGetErrorDesc(rc)}), expected one of {allowed}"


def read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def spoil_magic(raw: np.ndarray) -> None:
    """Make bytes written at offset 0 break the header's magic word, so that a header they
    leave partly in place cannot parse."""
    k = min(4, raw.size)
    if np.array_equal(raw[:k], MAGIC_BYTES[:k]):
        raw[0] ^= 0xFF


# Host arrays and bytes objects that hbSysWriteMem copies from, made of the given bytes.
SOURCES: dict[str, Callable[[np.ndarray], Any]] = {
    "bytes": lambda raw: raw.tobytes(),
    "bytearray": lambda raw: bytearray(raw.tobytes()),
    "uint8 array": np.copy,
    "read-only array": read_only,
    "float32 array": lambda raw: raw.view(np.float32),
    "int16 array": lambda raw: raw.view(np.int16),
}
# Host arrays that hbSysReadMem copies into, over the first `length` bytes of `backing`.
DESTINATIONS: dict[str, Callable[[np.ndarray, int], Any]] = {
    "uint8 array": lambda backing, length: backing[:length],
    "float32 array": lambda backing, length: backing[:length].view(np.float32),
    "int16 array": lambda backing, length: backing[:length].view(np.int16),
}
BAD_DESTINATIONS: dict[str, Callable[[np.ndarray, int], Any]] = {
    "read-only array": lambda backing, length: read_only(backing[:length]),
    "strided array": lambda backing, length: backing[::2],
    "bytes": lambda backing, length: backing[:length].tobytes(),
}


@dataclass(frozen=True)
class SoftmaxInput:
    """A float32 tensor packed for softmax at the start of a buffer."""

    shape: tuple[int, ...]
    axis: int
    overflows: bool  # shape words hold sizes past any buffer: the operator must refuse it

    def output(self, contents: np.ndarray, out_bytes: int) -> np.ndarray | None:
        """What the operator must write for a buffer holding `contents`; None if it must fail."""
        n = math.prod(self.shape)
        if self.overflows or out_bytes < 4 * n:
            return None
        x = contents[HEADER_BYTES: HEADER_BYTES + 4 * n].view(np.float32).reshape(self.shape)
        return ref.softmax(x, self.axis, nn.softmax_layout(self.shape, self.axis))


class Terse:
    """Hypothesis prints a dataclass field by field, arrays and all; this prints its repr."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@dataclass(eq=False, repr=False)
class Buf(Terse):
    """A live buffer as the model knows it."""

    mem: hbSysMem  # a struct describing it
    phys: int
    view: np.ndarray  # its virAddr array, which outlives a free: an RPC's output stays checkable
    contents: np.ndarray  # the bytes it must hold
    softmax_input: SoftmaxInput | None = None
    calls: int = 0  # reads, flushes and RPC submissions in flight
    locked: bool = False  # a write, a free or an allocation into its struct in flight

    @property
    def size(self) -> int:
        return self.contents.size

    def __repr__(self) -> str:
        return f"<buffer {self.phys:#x}, {self.size} B>"


@dataclass(eq=False, repr=False)
class Rpc(Terse):
    """An RPC posted on two live buffers, and what it must do."""

    inp: Buf
    out: Buf
    cores: list[int]  # the DSP cores it may run on
    want: np.ndarray | None  # the softmax it must write; None: it leaves its output alone
    fails: bool | None  # None: either (a raw CV call reading an image it does not pin)
    handle: hbDSPTask | None = None  # once hbDSPRpc has returned it
    checked: bool = False  # its output, once its task had finished
    released: bool = False

    def __repr__(self) -> str:
        return f"<rpc {self.inp!r} -> {self.out!r}, {self.handle!r}>"


CV_SIDE = 8  # the raw CV calls' images: 8 x 8 grey


_base_model = functools.cache(base_model)


def crafted_model(seed: int) -> bytes:
    """A crafted model file's bytes (the seed picks the changes)."""
    return crafted(_base_model(), random.Random(seed))


def _finished(rpc: Rpc) -> tuple[int, ...]:
    """What a wait for the finished task of `rpc` may return."""
    if rpc.fails is None:
        return HB_DSP_SUCCESS, HB_DSP_TASK_FAILED
    return (HB_DSP_TASK_FAILED,) if rpc.fails else (HB_DSP_SUCCESS,)


def serve(mailbox: simpy.Store) -> None:
    """A worker host thread: run the commands posted to it, in order, until a None."""
    thread = session.current().thread()
    while (command := thread.idle_until(mailbox.get())) is not None:
        command()


def closed_session_handles() -> tuple[hbSysMem, hbDSPTask]:
    """A buffer and an unreleased RPC task of a session that has since been closed."""
    with emu.Session(overrides=OVERRIDES):
        inp, out = hbSysMem(), hbSysMem()
        blob = pack(np.ones((2, 8), np.float32), TYPE_F32, axis=1)
        assert hbSysAllocMem(inp, len(blob)) == 0 and hbSysAllocMem(out, 64) == 0
        assert hbSysWriteMem(inp, blob, len(blob)) == 0
        ctrl = hbDSPRpcCtrlParam()
        HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
        ctrl.rpcCmd = nn.CMD_SOFTMAX
        rc, task = hbDSPRpc(inp, out, ctrl)
        assert rc == 0 and hbDSPWaitTaskDone(task, 0) == 0
    return inp, task


class ApiMachine(RuleBasedStateMachine):
    """Worker host threads calling the hbSys, hbDSP and remoteproc functions of one session."""

    def __init__(self) -> None:
        super().__init__()
        self.old_mem, self.old_task = closed_session_handles()
        self.sess = emu.Session(overrides=OVERRIDES)
        self.exits = contextlib.ExitStack()
        self.exits.enter_context(self.sess)  # so that the main program's calls act on it
        self.mailboxes = [simpy.Store(self.sess.soc.env) for _ in range(WORKERS)]
        for k, mailbox in enumerate(self.mailboxes):
            self.sess.spawn(serve, mailbox, name=f"worker{k}")
        self.bufs: list[Buf] = []
        self.freed: list[hbSysMem] = []  # structs a free went through: they may be reused
        self.stale: list[hbSysMem] = []  # copies of structs, taken before their buffer was freed
        self.rpcs: list[Rpc] = []
        self.online = [True] * self.sess.soc.vdsp.cores
        self.posted = self.finished = 0

    # --- the model -----------------------------------------------------------------------

    def post(self, worker: int | None, command: Callable[[], None],
             data: st.DataObject | None = None) -> None:
        """Run `command` on worker thread `worker` once simulated time passes, or now in the
        main program (None). With `data`, the main program then sleeps for a drawn time (often
        none, sometimes long enough for RPCs to finish), so that what was posted runs.

        Time passes here rather than in a rule of its own because Hypothesis switches whole
        rules off in some runs, and a run without that rule would only pile up commands."""
        def counted() -> None:
            command()
            self.finished += 1

        self.posted += 1
        if worker is None:
            counted()
        else:
            self.mailboxes[worker].put(counted)
        if data is not None:
            self.sess.main.sleep(data.draw(PAUSES, label="then sleep ps"))

    def users(self, buf: Buf) -> list[Rpc]:
        """The RPCs whose task may still read or write `buf`."""
        return [r for r in self.rpcs if not r.checked and buf in (r.inp, r.out)]

    def idle(self, buf: Buf) -> bool:
        return not buf.locked and buf.calls == 0 and not self.users(buf)

    def written_by_rpc(self, buf: Buf) -> bool:
        return any(r.out is buf for r in self.users(buf))

    def reserved(self, size: int) -> int:
        align = self.sess.soc.pool.alignment_bytes
        return -(-size // align) * align

    def first_fit(self, reserved: int) -> int | None:
        """Where the pool must place a buffer: the lowest gap between live buffers it fits."""
        pool = self.sess.soc.pool
        at = pool.base_addr
        for buf in sorted(self.bufs, key=lambda b: b.phys):
            if buf.phys - at >= reserved:
                return at
            at = buf.phys + self.reserved(buf.size)
        return at if pool.base_addr + pool.size_bytes - at >= reserved else None

    def pick(self, data: st.DataObject, label: str, bufs: list[Buf]) -> Buf | None:
        """One of `bufs`; None (pass something that is no live buffer) one time in six, or
        when there is none."""
        return data.draw(mostly(st.sampled_from(bufs), st.none()) if bufs else st.none(),
                         label=label)

    def handle(self, data: st.DataObject, buf: Buf) -> hbSysMem:
        """A struct describing `buf`: its own, or a copy (which is just as valid)."""
        return buf.mem if data.draw(st.booleans(), label="own struct") else copy.copy(buf.mem)

    def bad_mem(self, data: st.DataObject) -> Any:
        """Something that is no live buffer of the session, often a struct that looks like one:
        freed, a stale copy (perhaps of an address a new buffer has now), forged, or of the
        closed session."""
        kinds = ["junk", "blank struct", "closed session"]
        kinds += ["freed"] * bool(self.freed) + ["stale"] * bool(self.stale)
        kinds += ["forged"] * bool(self.bufs)
        kind = data.draw(st.sampled_from(kinds), label="bad buffer")
        if kind == "junk":
            return data.draw(st.sampled_from(JUNK), label="junk")
        if kind == "blank struct":
            return hbSysMem()
        if kind == "closed session":
            return self.old_mem
        if kind == "freed":
            return copy.copy(data.draw(st.sampled_from(self.freed), label="freed"))
        if kind == "stale":
            return data.draw(st.sampled_from(self.stale), label="stale")
        buf = data.draw(st.sampled_from(self.bufs), label="forged from")
        forged = hbSysMem()
        forged.phyAddr, forged.virAddr, forged.memSize = buf.phys, buf.view, buf.size
        field = data.draw(st.sampled_from(["own array", "int8 view", "size", "address",
                                           "float address"]), label="forged field")
        if field == "own array":
            forged.virAddr = np.zeros(buf.size, np.uint8)
        elif field == "int8 view":
            forged.virAddr = buf.view.view(np.int8)
        elif field == "size":
            forged.memSize = buf.size + 1
        elif field == "address":
            forged.phyAddr = buf.phys + 1
        else:
            forged.phyAddr = float(buf.phys)
        return forged

    def task_handle(self, data: st.DataObject) -> tuple[Rpc | None, Any]:
        """A task handle: an RPC's (released or not), one of the closed session, or junk."""
        made = [r for r in self.rpcs if r.handle is not None]
        rpc = data.draw(mostly(st.sampled_from(made), st.none()) if made else st.none(),
                        label="rpc")
        if rpc is not None:
            return rpc, rpc.handle
        return None, data.draw(st.sampled_from([self.old_task, *JUNK]), label="bad task")

    def track(self, mem: hbSysMem) -> Buf:
        """Model the buffer a successful allocation just described in `mem`."""
        buf = Buf(mem, mem.phyAddr, mem.virAddr, np.zeros(mem.memSize, np.uint8))
        self.bufs.append(buf)
        return buf

    def wrote(self, buf: Buf, start: int, raw: np.ndarray, put: SoftmaxInput | None) -> None:
        buf.contents[start: start + raw.size] = raw
        buf.softmax_input = put
        buf.locked = False

    def check_finished_rpcs(self) -> None:
        """Check the output of every RPC whose task has finished, once; from then on its output
        buffer must hold what the task wrote."""
        for rpc in self.rpcs:
            if rpc.checked or rpc.handle is None or not rpc.handle.task.finished:
                continue
            rpc.checked = True
            out = rpc.out
            if rpc.fails is None:  # whatever it read, its output is now what it wrote
                out.contents[:] = out.view
                out.softmax_input = None
                continue
            assert rpc.handle.task.failed == rpc.fails, f"{rpc}: {rpc.handle.error}"
            if rpc.want is not None:
                n = 4 * rpc.want.size
                got = out.view[:n].view(np.float32).reshape(rpc.want.shape)
                assert same_floats(got, rpc.want), f"{rpc}: wrong softmax"
                out.contents[:n] = out.view[:n]
                out.softmax_input = None  # values in [0, 1] or NaN: no header's magic word
            assert np.array_equal(out.view, out.contents), f"{rpc}: output bytes it must not touch"

    def start_cores(self) -> None:
        for core in range(len(self.online)):
            expect(rproc_set_state(core, "start"), 0)
            self.online[core] = True

    @initialize(data=st.data())
    def softmax_inputs(self, data: st.DataObject) -> None:
        """Start with a few packed inputs, and outputs that fit their softmax, made by the main
        program, so that RPCs have something to work on from the first step."""
        for _ in range(data.draw(st.integers(2, 4), label="inputs")):
            raw, put = self.softmax_input(data, 2112)
            inp = hbSysMem()
            expect(hbSysAllocMem(inp, raw.size), HB_SYS_SUCCESS)
            expect(hbSysWriteMem(inp, raw, raw.size), HB_SYS_SUCCESS)
            self.wrote(self.track(inp), 0, raw, put)
            for _ in range(2):
                out = hbSysMem()
                expect(hbSysAllocCachedMem(out, 4 * math.prod(put.shape)), HB_SYS_SUCCESS)
                self.track(out)

    # --- hbSys ----------------------------------------------------------------------------

    @rule(data=st.data())
    def alloc(self, data: st.DataObject) -> None:
        """hbSysAlloc(Cached)Mem into a new struct, a freed one, a live one (its buffer leaks,
        still reachable through a copy) or junk, of 1 B to far more than the pool."""
        worker = data.draw(WORKER, label="worker")
        alloc = data.draw(st.sampled_from([hbSysAllocMem, hbSysAllocCachedMem]), label="call")
        idle = [b for b in self.bufs if self.idle(b)]
        kinds = ["new"] + ["freed"] * bool(self.freed) + ["live"] * bool(idle)
        into = data.draw(mostly(st.sampled_from(kinds), st.just("junk")), label="into")
        leaked = None
        if into == "new":
            mem = hbSysMem()
        elif into == "freed":
            mem = data.draw(st.sampled_from(self.freed), label="freed")
            self.freed.remove(mem)
        elif into == "live":
            leaked = data.draw(st.sampled_from(idle), label="leaked")
            mem, leaked.mem = leaked.mem, copy.copy(leaked.mem)
            leaked.locked = True
        else:
            mem = data.draw(st.sampled_from(JUNK), label="junk")
        size = data.draw(mostly(SIZES, st.sampled_from([0, -1, INT32_MIN, *NOT_INTS])),
                         label="size")
        valid = isinstance(mem, hbSysMem) and is_c_int(size) and size >= 1

        def command() -> None:
            rc = alloc(mem, size)
            if leaked is not None:
                leaked.locked = False
            at = self.first_fit(self.reserved(int(size))) if valid else None
            if at is None:
                expect(rc, HB_SYS_OUT_OF_MEMORY if valid else HB_SYS_INVALID_ARGUMENT)
                if into == "freed":
                    self.freed.append(mem)
                if isinstance(mem, hbSysMem):
                    assert mem.virAddr is (None if leaked is None else leaked.view)
                return
            expect(rc, HB_SYS_SUCCESS)
            assert (mem.phyAddr, mem.memSize) == (at, int(size)), "not first fit"
            assert not mem.virAddr.any(), "a new buffer holds old bytes"
            self.track(mem)

        self.post(worker, command, data)

    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        """hbSysFreeMem of an idle buffer, of one that RPCs use, or of no live buffer."""
        worker = data.draw(WORKER, label="worker")
        in_use = [b for b in self.bufs if not b.locked and b.calls == 0 and self.users(b)
                  and all(r.handle is not None for r in self.users(b))]
        if not (in_use and data.draw(st.booleans(), label="one that RPCs use")):
            in_use += [b for b in self.bufs if self.idle(b)]
        buf = self.pick(data, "buffer", in_use)
        if buf is None:
            bad = self.bad_mem(data)
            self.post(worker, lambda: expect(hbSysFreeMem(bad), HB_SYS_INVALID_MEMORY), data)
            return
        mem = self.handle(data, buf)
        buf.locked = True

        def command() -> None:
            before = copy.copy(mem)
            rc = hbSysFreeMem(mem)
            buf.locked = False
            users = [r.handle for r in self.users(buf)]
            if rc == HB_SYS_MEM_IN_USE:
                assert any(not t.completed.triggered for t in users), "in use by no task"
                assert mem.virAddr is buf.view
                return
            expect(rc, HB_SYS_SUCCESS)
            assert all(t.task.finished for t in users), "freed under a queued or running task"
            assert mem.virAddr is None
            self.check_finished_rpcs()
            self.bufs.remove(buf)
            self.freed.append(mem)
            self.stale.append(before)
            if mem is not buf.mem:
                self.stale.append(buf.mem)

        self.post(worker, command, data)

    @rule(data=st.data())
    def write(self, data: st.DataObject) -> None:
        """Bytes or a softmax input (sometimes with overflowing shape words) into an idle buffer,
        through hbSysWriteMem from a bytes object or host array, or straight into virAddr;
        bad buffers, sources and sizes now and then."""
        worker = data.draw(WORKER, label="worker")
        buf = self.pick(data, "buffer", [b for b in self.bufs if self.idle(b)])
        if buf is None:
            bad = self.bad_mem(data)
            self.post(worker, lambda: expect(hbSysWriteMem(bad, bytes(8), 8),
                                             HB_SYS_INVALID_MEMORY), data)
            return
        through_api = data.draw(st.booleans(), label="through hbSysWriteMem")
        put: SoftmaxInput | None
        if buf.size >= MIN_SOFTMAX_INPUT and data.draw(st.booleans(), label="softmax input"):
            start = 0
            raw, put = self.softmax_input(data, buf.size)
        else:
            anywhere = st.just(0) | st.integers(HEADER_BYTES, max(HEADER_BYTES, buf.size - 1))
            start = 0 if through_api or buf.size <= HEADER_BYTES \
                else data.draw(anywhere, label="start")
            n = data.draw(st.integers(1, min(4096, buf.size - start)), label="bytes")
            raw = np.random.default_rng(data.draw(SEEDS, label="seed")).integers(
                0, 256, n, dtype=np.uint8)
            if start == 0:
                spoil_magic(raw)
            put = buf.softmax_input if start >= HEADER_BYTES else None
        buf.locked = True
        if not through_api:
            target = buf.mem.virAddr

            def direct() -> None:
                target[start: start + raw.size] = raw
                self.wrote(buf, start, raw, put)

            self.post(worker, direct, data)
            return
        padded = np.zeros(-(-raw.size // 4) * 4 + 4 * data.draw(st.integers(0, 2)), np.uint8)
        padded[: raw.size] = raw
        kind = data.draw(mostly(st.sampled_from(list(SOURCES)), st.just("junk")), label="source")
        src = data.draw(st.sampled_from(JUNK)) if kind == "junk" else SOURCES[kind](padded)
        limit = min(buf.size, padded.size)
        size = data.draw(mostly(st.sampled_from([raw.size, np.uint32(raw.size)]),
                                st.sampled_from([0, -1, limit + 1, *NOT_INTS])), label="size")
        valid = kind != "junk" and is_c_int(size) and 1 <= size <= limit
        mem = self.handle(data, buf)

        def command() -> None:
            rc = hbSysWriteMem(mem, src, size)
            if valid:
                expect(rc, HB_SYS_SUCCESS)
                self.wrote(buf, 0, raw, put)
            else:
                expect(rc, HB_SYS_INVALID_ARGUMENT)
                buf.locked = False

        self.post(worker, command, data)

    def softmax_input(self, data: st.DataObject, room: int) -> tuple[np.ndarray, SoftmaxInput]:
        """A packed float32 tensor of 2 to 4 dimensions in at most `room` bytes, sometimes with
        IEEE specials, and sometimes with shape words overwritten by sizes that no buffer holds
        (two of them multiply past 2**63)."""
        budget = (room - HEADER_BYTES) // 4  # elements
        lead = data.draw(st.lists(st.integers(1, 2), max_size=2 if budget >= 64 else 0),
                         label="leading dims")
        rows = data.draw(st.integers(2, min(8, budget // (8 * math.prod(lead)))), label="rows")
        cols = data.draw(st.integers(8, min(64, budget // (rows * math.prod(lead)))),
                         label="cols")
        shape = (*lead, rows, cols)
        axis = data.draw(st.integers(0, len(shape) - 1), label="axis")
        rng = np.random.default_rng(data.draw(SEEDS, label="seed"))
        x = (rng.standard_normal(shape) * rng.choice([1.0, 10.0, 100.0])).astype(np.float32)
        if data.draw(st.booleans(), label="specials"):
            x.flat[rng.integers(0, x.size, 3)] = rng.choice(SPECIALS, 3)
        raw = np.frombuffer(pack(x, TYPE_F32, axis=axis), np.uint8).copy()
        words = data.draw(mostly(st.just([]), st.lists(st.sampled_from(SHAPE_WORDS), min_size=1,
                                                       unique=True), one_in=3),
                          label="overflowing shape words")
        for word in words:
            raw.view("<u4")[word] = data.draw(st.sampled_from([0xFFFFFFFF, 0x80000000]))
        # Only the first ndim shape words are read; the rest must not matter.
        return raw, SoftmaxInput(shape, axis, any(w < 8 + x.ndim for w in words))

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        """hbSysReadMem into host arrays of several types; bad arrays, sizes and buffers."""
        worker = data.draw(WORKER, label="worker")
        buf = self.pick(data, "buffer", [b for b in self.bufs if not b.locked])
        if buf is None:
            bad, into = self.bad_mem(data), np.full(8, FILL, np.uint8)

            def refused() -> None:
                expect(hbSysReadMem(into, bad, 8), HB_SYS_INVALID_MEMORY)
                assert (into == FILL).all()

            self.post(worker, refused, data)
            return
        n = data.draw(st.integers(1, min(4096, buf.size)), label="bytes")
        length = -(-n // 4) * 4 + 4 * data.draw(st.integers(0, 2))
        backing = np.full(2 * length, FILL, np.uint8)
        kinds = list(DESTINATIONS)
        kind = data.draw(mostly(st.sampled_from(kinds), st.sampled_from([*BAD_DESTINATIONS,
                                                                         "junk"])), label="into")
        if kind == "junk":
            dest = data.draw(st.sampled_from(JUNK), label="junk")
        else:
            dest = {**DESTINATIONS, **BAD_DESTINATIONS}[kind](backing, length)
        limit = min(buf.size, length)
        size = data.draw(mostly(st.sampled_from([n, np.int64(n)]),
                                st.sampled_from([0, -1, limit + 1, *NOT_INTS])), label="size")
        valid = kind in DESTINATIONS and is_c_int(size) and 1 <= size <= limit
        known = not self.written_by_rpc(buf)
        mem = self.handle(data, buf)
        buf.calls += 1

        def command() -> None:
            rc = hbSysReadMem(dest, mem, size)
            buf.calls -= 1
            if not valid:
                expect(rc, HB_SYS_INVALID_ARGUMENT)
                assert (backing == FILL).all(), "a refused read wrote to the host array"
                return
            expect(rc, HB_SYS_SUCCESS)
            if known:
                assert np.array_equal(backing[:n], buf.contents[:n]), "read other bytes back"
            assert (backing[n:] == FILL).all(), "read past the size"

        self.post(worker, command, data)

    @rule(data=st.data())
    def flush(self, data: st.DataObject) -> None:
        """hbSysFlushMem with good and bad flags, of live and bad buffers."""
        worker = data.draw(WORKER, label="worker")
        buf = self.pick(data, "buffer", [b for b in self.bufs if not b.locked])
        flag = data.draw(mostly(st.sampled_from([HB_SYS_MEM_CACHE_CLEAN,
                                                 HB_SYS_MEM_CACHE_INVALIDATE, np.int32(2)]),
                                st.sampled_from([0, 3, -1, *NOT_INTS])), label="flag")
        allowed = set()
        if not (is_c_int(flag) and flag in (HB_SYS_MEM_CACHE_CLEAN, HB_SYS_MEM_CACHE_INVALIDATE)):
            allowed.add(HB_SYS_INVALID_ARGUMENT)
        if buf is None:
            mem = self.bad_mem(data)
            allowed.add(HB_SYS_INVALID_MEMORY)
        else:
            mem = self.handle(data, buf)
            buf.calls += 1

        def command() -> None:
            rc = hbSysFlushMem(mem, flag)
            if buf is not None:
                buf.calls -= 1
            expect(rc, *(allowed or {HB_SYS_SUCCESS}))

        self.post(worker, command, data)

    # --- hbDSP and remoteproc -----------------------------------------------------------------

    @rule(data=st.data())
    def rpcs(self, data: st.DataObject) -> None:
        """A burst of RPCs from one or more workers, so that they queue up on the DSP cores."""
        for _ in range(data.draw(st.integers(1, 4), label="rpcs")):
            self.rpc(data)

    def rpc(self, data: st.DataObject) -> None:
        """hbDSPRpc of softmax (of a packed input, or of any bytes), ping or an unknown command,
        on any core, at any priority, often followed by a wait in the same thread; bad structs,
        buffers and fields now and then."""
        worker = data.draw(WORKER, label="worker")
        kind = data.draw(st.sampled_from(["softmax", "softmax", "ping", "unknown"]), label="cmd")
        readable = [b for b in self.bufs if not b.locked and not self.written_by_rpc(b)]
        packed = [b for b in readable if b.softmax_input is not None]
        inp = self.pick(data, "input", packed if kind == "softmax" and packed else readable)
        outs = [b for b in self.bufs if self.idle(b) and (b is not inp or kind == "ping")]
        if kind == "softmax" and inp is not None and inp.softmax_input is not None:
            needed = 4 * math.prod(inp.softmax_input.shape)
            fits = [b for b in outs if b.size >= needed]
            if fits and data.draw(st.integers(0, 3), label="output too small") > 0:
                outs = fits
        out = self.pick(data, "output", outs)
        ctrl = data.draw(mostly(st.builds(hbDSPRpcCtrlParam), st.sampled_from(JUNK), one_in=20),
                         label="ctrl")
        cmd = {"softmax": nn.CMD_SOFTMAX, "ping": CMD_PING}.get(kind)
        if cmd is None:
            cmd = data.draw(st.sampled_from([0x1999, -1, 2**70, np.float32(0), "x", None]))
        core = data.draw(mostly(st.sampled_from([*CORE_INDEX, np.uint8(HB_DSP_CORE_1)]),
                                st.sampled_from([3, 4, -1, *NOT_INTS]), one_in=12),
                         label="dspCoreId")
        priority = data.draw(mostly(st.integers(0, 255) | st.sampled_from([255, np.uint8(255)]),
                                    st.sampled_from([256, -1, *NOT_INTS]), one_in=12),
                             label="priority")
        custom = data.draw(mostly(st.integers(INT32_MIN, INT32_MAX),
                                  st.sampled_from([INT32_MAX + 1, INT32_MIN - 1, *NOT_INTS]),
                                  one_in=12), label="customId")
        errors = set()
        if isinstance(ctrl, hbDSPRpcCtrlParam):
            ctrl.rpcCmd, ctrl.dspCoreId, ctrl.priority, ctrl.customId = cmd, core, priority, custom
            if kind == "unknown":
                errors.add(HB_DSP_UNKNOWN_COMMAND)
        good_core = is_c_int(core) and core in CORE_INDEX
        if not (isinstance(ctrl, hbDSPRpcCtrlParam) and inp is not None and out is not None
                and good_core
                and is_c_int(priority) and 0 <= priority <= 255
                and is_c_int(custom) and INT32_MIN <= custom <= INT32_MAX):
            errors.add(HB_DSP_INVALID_ARGUMENT)
        index = CORE_INDEX[int(core)] if good_core else None
        cores = list(range(len(self.online))) if index is None else [index]
        rpc = None
        if inp is not None and out is not None:
            # Reserve both buffers while the call is in flight too: freeing one before the call
            # gets to it would change its answer.
            want = None
            if kind == "softmax" and inp.softmax_input is not None:
                want = inp.softmax_input.output(inp.contents, out.size)
            rpc = Rpc(inp, out, cores, want, fails=kind == "softmax" and want is None)
            self.rpcs.append(rpc)
            inp.calls += 1
            out.calls += 1
        inp_mem = self.bad_mem(data) if inp is None else self.handle(data, inp)
        out_mem = self.bad_mem(data) if out is None else self.handle(data, out)

        def command() -> None:
            rc, task = hbDSPRpc(inp_mem, out_mem, ctrl)
            allowed = set(errors)
            if good_core and not any(self.online[c] for c in cores):
                allowed.add(HB_DSP_CORE_OFFLINE)
            expect(rc, *(allowed or {HB_DSP_SUCCESS}))
            if rpc is not None:
                rpc.inp.calls -= 1
                rpc.out.calls -= 1
            if rc != HB_DSP_SUCCESS:
                assert task is None
                if rpc is not None:
                    self.rpcs.remove(rpc)
                return
            assert rpc is not None and isinstance(task, hbDSPTask)
            rpc.handle = task

        self.post(worker, command, data)
        if rpc is not None and data.draw(st.booleans(), label="then wait"):
            timeout = data.draw(GOOD_TIMEOUTS, label="timeout ms")
            self.post(worker, lambda: self.waited(rpc, rpc.handle, timeout), data)

    @rule(data=st.data())
    def cv_rpc(self, data: st.DataObject) -> None:
        """A raw CV call (threshold) built by hand: its argument block written into an idle
        buffer, its 8 x 8 source image any live buffer, which the call does not pin, so that
        other rules may free or reuse it while the DSP reads it: the task then fails (or reads
        whatever is there now), and the core goes on."""
        worker = data.draw(WORKER, label="worker")
        idle = [b for b in self.bufs if self.idle(b)]
        blocks = [b for b in idle if b.size >= image_args.ARGS_BYTES]
        blk = self.pick(data, "argument block", blocks)
        outs = [b for b in idle if b is not blk and b.size >= CV_SIDE * CV_SIDE]
        out = self.pick(data, "output image", outs)
        sources = [b for b in self.bufs if b.size >= CV_SIDE * CV_SIDE]
        src = self.pick(data, "source image", sources)
        if blk is None or out is None or src is None:
            return
        op = cv.cv_operator("threshold")
        assert op is not None
        image = lambda buf: image_args.Image(  # noqa: E731
            CV_SIDE, CV_SIDE, 1, image_args.TYPE_U8, CV_SIDE, buf.phys)
        raw = np.frombuffer(image_args.pack([image(src)], image(out),
                                            op.encode(op.defaults())), np.uint8).copy()
        rpc = Rpc(blk, out, list(range(len(self.online))), None, fails=None)
        self.rpcs.append(rpc)
        blk.locked = True
        blk.calls += 1
        out.calls += 1
        ctrl = hbDSPRpcCtrlParam()
        HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
        ctrl.rpcCmd = op.cmd

        def command() -> None:
            expect(hbSysWriteMem(blk.mem, raw, raw.size), HB_SYS_SUCCESS)
            self.wrote(blk, 0, raw, None)
            expect(hbSysFlushMem(blk.mem, HB_SYS_MEM_CACHE_CLEAN), HB_SYS_SUCCESS)
            rc, task = hbDSPRpc(blk.mem, out.mem, ctrl)
            blk.calls -= 1
            out.calls -= 1
            if not any(self.online):
                expect(rc, HB_DSP_SUCCESS, HB_DSP_CORE_OFFLINE)
            else:
                expect(rc, HB_DSP_SUCCESS)
            if rc != HB_DSP_SUCCESS:
                self.rpcs.remove(rpc)
                return
            rpc.handle = task

        self.post(worker, command, data)

    @rule(data=st.data())
    def load_crafted_model(self, data: st.DataObject) -> None:
        """hbDNNInitializeFromDDR of a crafted model file (tests/runtime/test_crafted_models),
        then hbDNNRelease: refused, or loaded and released; the pool is not touched."""
        worker = data.draw(WORKER, label="worker")
        raw = crafted_model(data.draw(SEEDS, label="crafted model seed"))

        def command() -> None:
            rc, handle = hbdnn.hbDNNInitializeFromDDR([raw], [len(raw)])
            if rc != hbdnn.HB_DNN_SUCCESS:
                expect(rc, hbdnn.HB_DNN_INVALID_MODEL)
                return
            expect(hbdnn.hbDNNRelease(handle), hbdnn.HB_DNN_SUCCESS)

        self.post(worker, command, data)

    @rule(data=st.data())
    def wait(self, data: st.DataObject) -> None:
        """hbDSPWaitTaskDone from a worker or from the main program (whose wait drives the
        simulation), for ever or with a timeout; bad timeouts and handles now and then."""
        caller = data.draw(CALLER, label="caller")
        rpc, task = self.task_handle(data)
        timeout = data.draw(mostly(GOOD_TIMEOUTS, st.sampled_from(BAD_TIMEOUTS)),
                            label="timeout ms")
        self.post(caller, lambda: self.waited(rpc, task, timeout), data)

    def waited(self, rpc: Rpc | None, task: Any, timeout: Any) -> None:
        """hbDSPWaitTaskDone(task, timeout) in the calling thread, checked against the model."""
        # The handle is checked on entry, so whether it is live is known now.
        live = rpc is not None and rpc.handle is not None and not rpc.released
        start = self.sess.now_ps
        rc = hbDSPWaitTaskDone(task, timeout)
        if not live:
            expect(rc, HB_DSP_INVALID_TASK_HANDLE)
            return
        if not is_timeout(timeout):
            expect(rc, HB_DSP_INVALID_ARGUMENT)
            return
        assert rpc is not None and rpc.handle is not None
        done = rpc.handle.completed.triggered
        if rc == HB_DSP_TIMEOUT:
            assert not done and timeout > 0
            assert abs(self.sess.now_ps - start - float(timeout) * 1e9) <= 1
        elif rc == HB_DSP_DEADLOCK:
            assert not done and not any(self.online[c] for c in rpc.cores)
        else:
            expect(rc, *_finished(rpc))
            assert done
            self.check_finished_rpcs()

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """hbDSPReleaseTask of finished, unfinished, released and bad handles."""
        worker = data.draw(WORKER, label="worker")
        rpc, task = self.task_handle(data)

        def command() -> None:
            rc = hbDSPReleaseTask(task)
            if rpc is None or rpc.released:
                expect(rc, HB_DSP_INVALID_TASK_HANDLE)
            elif rpc.handle is not None and rpc.handle.completed.triggered:
                expect(rc, HB_DSP_SUCCESS)
                rpc.released = True
            else:
                expect(rc, HB_DSP_TASK_RUNNING)

        self.post(worker, command, data)

    @rule(data=st.data())
    def set_dsp_state(self, data: st.DataObject) -> None:
        """rproc_set_state: stop and start DSP cores under queued and running tasks."""
        caller = data.draw(CALLER, label="caller")
        core = data.draw(mostly(st.sampled_from([0, 1, np.int8(1)]),
                                st.sampled_from([2, -1, *NOT_INTS])), label="core")
        state = data.draw(mostly(st.sampled_from(["start", "stop"]),
                                 st.sampled_from(["reboot", "STOP", "", b"stop", None, 1])),
                          label="state")
        valid = is_c_int(core) and 0 <= core < len(self.online) and state in ("start", "stop")

        def command() -> None:
            rc = rproc_set_state(core, state)
            if valid:
                expect(rc, 0)
                self.online[int(core)] = state == "start"
            else:
                expect(rc, RPROC_INVALID_ARGUMENT)

        self.post(caller, command, data)

    # --- checks -----------------------------------------------------------------------------

    @invariant()
    def model_holds(self) -> None:
        """After every step: no thread failed, and the board is what the calls made it."""
        self.sess.raise_failures()  # a worker's failed check, or an exception of the API
        self.check_finished_rpcs()
        self.check_pool()
        for buf in self.bufs:
            if buf.locked:
                continue
            mem = buf.mem
            assert mem.virAddr is buf.view and (mem.phyAddr, mem.memSize) == (buf.phys, buf.size)
            if not self.written_by_rpc(buf):
                assert np.array_equal(buf.view, buf.contents), f"{buf} holds other bytes"
        states = ["running" if up else "offline" for up in self.online]
        assert [rproc_state(core) for core in range(len(self.online))] == states

    def check_pool(self) -> None:
        """The live buffers and the free list tile the pool, and the pins are the RPCs'."""
        pool = self.sess.soc.pool
        assert pool.live_buffers == len(self.bufs)
        assert pool.used_bytes == sum(self.reserved(b.size) for b in self.bufs)
        assert pool.free_bytes + pool.used_bytes == pool.size_bytes
        spans = sorted([(b.phys, self.reserved(b.size)) for b in self.bufs]
                       + list(pool.free_blocks))
        at = pool.base_addr
        for addr, size in spans:
            assert addr == at, f"overlap or hole at {addr:#x}"
            at += size
        assert at == pool.base_addr + pool.size_bytes
        for buf in self.bufs:
            found = pool.find(buf.phys)
            assert found is not None and found.is_view(buf.view)
            tasks = [r.handle for r in self.rpcs if r.handle is not None
                     for used in (r.inp, r.out) if used is buf]
            # A task unpins its buffers when it finishes, before the host sees it complete.
            running = sum(not t.task.finished for t in tasks)
            assert running <= found.users <= sum(not t.completed.triggered for t in tasks)

    def teardown(self) -> None:
        """Each worker restarts the cores after its last command and ends; the main program then
        waits for and releases every task, so that every RPC's output gets checked."""
        try:
            for k, mailbox in enumerate(self.mailboxes):
                self.post(k, self.start_cores)
                mailbox.put(None)
            self.sess.run()
            for rpc in self.rpcs:
                assert rpc.handle is not None
                if not rpc.released:
                    expect(hbDSPWaitTaskDone(rpc.handle, 0),
                           *_finished(rpc))
                    expect(hbDSPReleaseTask(rpc.handle), HB_DSP_SUCCESS)
            self.check_finished_rpcs()
            assert all(r.checked for r in self.rpcs) and self.finished == self.posted
            self.check_pool()
        finally:
            self.sess.close()
            self.exits.close()


def fuzz(examples: int, steps: int) -> None:
    # Fixed sequences, so CI runs the same ones every time; each step simulates the board,
    # which is slow for a data generator, and that is the point.
    run_state_machine_as_test(ApiMachine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=True,
        database=None, suppress_health_check=[HealthCheck.too_slow]))


def test_random_api_calls_from_several_threads() -> None:
    fuzz(examples=300, steps=30)


@pytest.mark.slow  # about 17 minutes
def test_many_random_api_call_sequences() -> None:
    fuzz(examples=10_000, steps=30)

"""The three implementations on the emulated SoC, driven as the board's sample drives them.

A `Preprocessor` allocates its pool buffers once (as the sample does at start-up) and then
runs frames. Every step computes for real and is charged where it runs: CPU steps as A55
work with their address streams through the cache model and DDR; DSP stages as hbDSPRpc
calls with their cache maintenance (clean what the CPU wrote before the DSP reads it,
invalidate what the DSP wrote before the CPU reads it). Stage times are the host's
simulated time across each stage, as the sample measures them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from emu.cpu import ops
from emu.cpu.cluster import CpuWork
from emu.cpu.ops import N_CLASSES
from emu.errors import DspError, InputError
from emu.runtime import hbdsp, hbsys, session, status
from emu.soc.clock import PS_PER_MS
from emu.vdsp.ops import pointcloud as dsp_ops
from emu.workloads.pointcloud import cpu_kernels as ck
from emu.workloads.pointcloud.params import PillarParams

IMPLS = ("cpu", "dsp1", "dsp2")
# A function call: the call and the return (2 branches), saving and restoring registers and
# setting up the arguments (about 8 ALU ops and loads/stores each).
CALL = ops.counts(int=8, load=4, store=4, branch=2)


@dataclass
class FrameResult:
    """What one implementation produced for one frame, and how long each stage took."""

    features: np.ndarray
    coords: np.ndarray
    pillars: int
    valid: int
    kept: int
    stages_ps: dict[str, int] = field(default_factory=dict)

    @property
    def total_ps(self) -> int:
        return sum(self.stages_ps.values())

    def stages_ms(self) -> dict[str, float]:
        return {name: ps / PS_PER_MS for name, ps in self.stages_ps.items()}


class _Stream:
    """Reusable buffers for one CPU step's recorded work."""

    def __init__(self) -> None:
        self.record = np.zeros((0, 2), np.int64)
        self.stats = np.zeros(ck.N_STATS, np.int64)

    def reset(self, capacity: int) -> None:
        if len(self.record) < capacity:
            # Uninitialised: the kernels write entry n before they count it in ENTRIES, and
            # only the counted entries are ever read.
            self.record = np.empty((capacity, 2), np.int64)
        self.stats[:] = 0

    def work(self, name: str) -> CpuWork:
        if self.stats[ck.OVERFLOW]:
            raise RuntimeError(f"{name}: the work stream buffer was sized too small for this "
                               f"step ({int(self.stats[ck.OVERFLOW])} accesses not recorded)")
        counts = self.stats[:N_CLASSES].copy()
        counts += CALL  # the step's function call itself
        # The record as it is: the cluster reads it before this buffer is used again (a
        # step's work runs to its end before the host goes on).
        return CpuWork(name, ops=counts, record=self.record[: int(self.stats[ck.ENTRIES])])


class Preprocessor:
    """One model's preprocessing on the current session's SoC, all three ways; its steps
    run on whichever host thread of that session calls `run`."""

    def __init__(self, params: PillarParams) -> None:
        self.p = params
        self.f32 = params.f32()
        sess = session.current()
        self.sess = sess
        self.names: dict[int, str] = {}
        p = params
        pk = p.max_pillars * p.max_points_per_pillar
        n = p.max_input_points
        words = 3 if p.dims == 5 else 2

        def alloc(nbytes: int, label: str) -> hbsys.PoolBuffer:
            mem = hbsys.hbSysMem()
            rc = hbsys.hbSysAllocCachedMem(mem, nbytes)
            buf = hbsys.buffer_of(mem, sess)
            if rc != hbsys.HB_SYS_SUCCESS or buf is None:
                raise InputError(f"{label}: the pool cannot hold {nbytes} B (mem.pool_bytes): "
                                 f"{status.describe(rc)}")
            self.names[buf.phys_addr] = label
            return buf

        self.points = alloc(dsp_ops.HEADER_BYTES + 4 * p.dims * n, "points")
        self.lut = alloc(4 * p.x_len * p.y_len, "cell table")
        self.counts = alloc(4 * p.max_pillars, "points per pillar")
        self.coords = alloc(16 * p.max_pillars, "coords")
        self.features = alloc(p.dims * pk, "features")
        self.float_voxels = alloc(dsp_ops.HEADER_BYTES + 4 * p.dims * pk, "float voxels")
        self.int8_voxels = alloc(dsp_ops.HEADER_BYTES + p.dims * pk, "int8 voxels")
        self.stage1_packed = alloc(4 * words * n, "stage 1 output (scheme 2)")
        self.stage1_cells = alloc(4 * n, "stage 1 output (scheme 1)")
        self.stream = _Stream()
        self.n = 0  # points of the loaded frame
        # Per DSP voxel buffer (by address): the pillars the last frame's voxelisation used,
        # whose records may hold something other than the empty value; absent: all of them.
        self.voxel_pillars: dict[int, int] = {}
        # What the last frame left in the tables: pillars used, and the table's index order
        # ((row, column) strides of idy and idx). The tables start out clear, as the sample
        # initialises them once at start-up.
        self.used = 0
        self.lut_order = (p.x_len, 1)
        self.lut.data.view(np.int32)[:] = -1
        self.coords.data.view(np.int32).reshape(p.max_pillars, 4)[:] = (0, -1, -1, -1)
        cpu = sess.config.cpu
        self.line_bytes = cpu.line_bytes
        self.line_shift = cpu.line_bytes.bit_length() - 1
        self.vector_bytes = cpu.vector_bytes

    # --- helpers ---------------------------------------------------------------------------

    def _run_cpu(self, name: str) -> None:
        work = self.stream.work(name)
        self.sess.thread().cpu(work, work.name)

    def _memset(self, buf: hbsys.PoolBuffer, start: int, nbytes: int, value: int) -> None:
        buf.data[start: start + nbytes] = value
        ck.memset_stream(buf.phys_addr + start, nbytes, self.stream.record, self.stream.stats,
                         self.line_shift, self.vector_bytes)

    def _flush(self, buf: hbsys.PoolBuffer, flag: int) -> None:
        """hbSysFlushMem on the whole buffer, as the sample does."""
        rc = hbsys.hbSysFlushMem(hbsys.mem_of(buf), flag)
        if rc != 0:
            raise DspError(f"hbSysFlushMem {self.names[buf.phys_addr]}: {status.describe(rc)}")

    def _rpc(self, cmd: int, inp: hbsys.PoolBuffer, out: hbsys.PoolBuffer) -> None:
        ctrl = hbdsp.hbDSPRpcCtrlParam()
        hbdsp.HB_DSP_INITIALIZE_RPC_CTRL_PARAM(ctrl)
        ctrl.rpcCmd = cmd
        rc, task = hbdsp.hbDSPRpc(hbsys.mem_of(inp), hbsys.mem_of(out), ctrl)
        if rc != 0 or task is None:
            raise DspError(f"hbDSPRpc {cmd:#x}: {hbdsp.hbDSPGetErrorDesc(rc)}")
        rc = hbdsp.hbDSPWaitTaskDone(task, 0)
        error = task.error
        hbdsp.hbDSPReleaseTask(task)
        if rc != 0:
            raise DspError(f"DSP stage {cmd:#x} failed: {error}")

    def _reset_tables(self, lut_order: tuple[int, int], whole_table: bool) -> None:
        """Per frame: put back what the last frame wrote into the cell table, the points per
        pillar and the coords (only its used pillars' entries: the rest are clear), and note
        the index order this frame's table will use. The table is set back whole (a memset
        of it) when `whole_table` (the DSP schemes' CPU step: the seed's gen_voxel_for_dsp
        initialises its lookup table on every call), or when the last frame used all P
        pillars (it may have sent any number of further cells to pillar P-1, whose coords
        keep only the last of them)."""
        p = self.p
        whole = whole_table or self.used >= p.max_pillars
        table = self.lut.size_bytes if whole else 0
        self.stream.reset(4 * self.used + 16 + (self._lines(table) if table else 0))
        if table:
            self._memset(self.lut, 0, table, 0xFF)  # every entry -1
        ck.reset_used(self.used, *self.lut_order,
                      ck.Tables(self.lut.data.view(np.int32), self.counts.data.view(np.int32),
                                self.coords.data.view(np.int32).reshape(p.max_pillars, 4)),
                      self._trace(self.stream, self.lut, self.counts, self.coords), not whole)
        self.lut_order = lut_order

    def _lines(self, nbytes: int) -> int:
        """Most stream entries a memset of `nbytes` records: its lines, one more if unaligned."""
        return nbytes // self.line_bytes + 2

    def _result(self, pillars: int, valid: int, kept: int, stages: dict[str, int]) -> FrameResult:
        p = self.p
        features = self.features.data.view(np.int8).reshape(p.features_shape).copy()
        coords = self.coords.data.view(np.int32).reshape(p.coords_shape).copy()
        return FrameResult(features, coords, pillars, valid, kept, stages)

    def _timed(self, stages: dict[str, int], name: str, start: int) -> int:
        now = self.sess.thread().now_ps
        stages[name] = now - start
        return now

    # --- the implementations ---------------------------------------------------------------

    def load(self, points: np.ndarray) -> int:
        """Put a frame's points into the input buffer (as the sample reads the file into it)."""
        n = min(len(points), self.p.max_input_points)
        head = dsp_ops.HEADER_BYTES
        self.points.data[head: head + 4 * self.p.dims * n] = \
            np.ascontiguousarray(points[:n], dtype=np.float32).view(np.uint8).reshape(-1)
        self.n = n
        return n

    def run(self, impl: str) -> FrameResult:
        return {"cpu": self._cpu, "dsp1": self._dsp1, "dsp2": self._dsp2}[impl]()

    def _points_view(self) -> np.ndarray:
        head = dsp_ops.HEADER_BYTES
        raw = self.points.data[head: head + 4 * self.p.dims * self.n]
        return raw.view(np.float32).reshape(self.n, self.p.dims)

    def _bases(self, *bufs: hbsys.PoolBuffer | tuple[hbsys.PoolBuffer, int]) -> np.ndarray:
        out = []
        for b in bufs:
            buf, offset = b if isinstance(b, tuple) else (b, 0)
            out.append(buf.phys_addr + offset)
        return np.array(out, dtype=np.int64)

    def _trace(self, stream: _Stream,
               *bufs: hbsys.PoolBuffer | tuple[hbsys.PoolBuffer, int]) -> ck.Trace:
        """The record a kernel writes to `stream`, the arrays it touches at `bufs`."""
        return ck.Trace(self._bases(*bufs), stream.record, stream.stats, self.line_shift)

    def _grid(self, slot_major: bool) -> ck.Grid:
        p = self.p
        return ck.Grid(p.x_len, p.y_len, p.max_pillars, p.max_points_per_pillar, slot_major)

    def _cpu(self) -> FrameResult:
        p, s = self.p, self.stream
        host = self.sess.thread()
        stages: dict[str, int] = {}
        t = host.now_ps
        self._reset_tables((p.x_len, 1), whole_table=False)
        self._run_cpu("reset tables")
        # The reference's float records are pillar-major and its empty slots read as zero;
        # if scheme 1 used the buffer last, its records (slot-major) must go first, and the
        # next scheme 1 frame must clear the buffer in full (it wants NaN where empty).
        stale = self.voxel_pillars.pop(self.float_voxels.phys_addr, None)
        if stale:
            old = dsp_ops.pillar_records(0, stale, p.max_pillars, p.max_points_per_pillar,
                                         p.slot_major)
            s.reset(old.rows * self._lines(old.cols * 4 * p.dims))
            for first in old.starts():
                self._memset(self.float_voxels, dsp_ops.HEADER_BYTES + first * 4 * p.dims,
                             old.cols * 4 * p.dims, 0)
            self._run_cpu("clear voxels")
        points = self._points_view()
        voxels = self.float_voxels.data[dsp_ops.HEADER_BYTES:].view(np.float32)
        s.reset(12 * self.n + 64)
        pillars, valid, kept = ck.voxelize_floats(
            points, np.zeros(0, np.int32), self.f32, self._grid(False),
            ck.Tables(self.lut.data.view(np.int32), self.counts.data.view(np.int32),
                      self.coords.data.view(np.int32).reshape(-1, 4)), voxels,
            self._trace(s, (self.points, dsp_ops.HEADER_BYTES), self.stage1_cells, self.lut,
                        self.counts, self.coords, (self.float_voxels, dsp_ops.HEADER_BYTES)))
        self._run_cpu("voxelize")
        t = self._timed(stages, "cpu_voxelize", t)

        grid = voxels[: p.max_pillars * p.max_points_per_pillar * p.dims].reshape(
            p.max_pillars, p.max_points_per_pillar, p.dims)
        s.reset(2 * kept + pillars + 64)
        ck.encode_in_place(grid, self.counts.data.view(np.int32), pillars, self.f32,
                           self._bases(self.counts, (self.float_voxels, dsp_ops.HEADER_BYTES)),
                           s.record, s.stats, self.line_shift)
        self._run_cpu("encode")
        t = self._timed(stages, "cpu_encode", t)

        used_bytes = 4 * pillars * p.max_points_per_pillar * p.dims
        runs = p.dims * p.max_points_per_pillar
        stale = max(0, self.used - pillars) * runs
        s.reset(2 * runs * pillars + 4 * runs + self._lines(stale) + runs
                + self._lines(used_bytes))
        self._clear_features(pillars, self.used)
        ck.transpose_quantize(grid, pillars, p.slot_major, self.features.data.view(np.int8),
                              self._bases((self.float_voxels, dsp_ops.HEADER_BYTES),
                                          self.features),
                              s.record, s.stats, self.line_shift)
        # Clear the used slots for the next frame (empty slots must read as zero).
        self._memset(self.float_voxels, dsp_ops.HEADER_BYTES, used_bytes, 0)
        self._run_cpu("transpose")
        self._timed(stages, "cpu_transpose", t)
        self.used = pillars
        return self._result(pillars, valid, kept, stages)

    def _clear_features(self, first: int, end: int) -> None:
        """Zero the features of pillars `first`..`end - 1` (what the last frame wrote there
        and this frame's transpose will not overwrite): one memset per run of them."""
        p = self.p
        pillars, slots = p.max_pillars, p.max_points_per_pillar
        if end <= first:
            return
        for c in range(p.dims):
            if p.slot_major:  # [c, s, n]: the pillars are contiguous within each slot
                for s in range(slots):
                    self._memset(self.features, (c * slots + s) * pillars + first, end - first,
                                 0)
            else:  # [c, n, s]
                self._memset(self.features, (c * pillars + first) * slots,
                             (end - first) * slots, 0)

    def _dsp2(self) -> FrameResult:
        return self._dsp(quantize_first=True)

    def _dsp1(self) -> FrameResult:
        return self._dsp(quantize_first=False)

    def _dsp(self, quantize_first: bool) -> FrameResult:
        p, s = self.p, self.stream
        host = self.sess.thread()
        stages: dict[str, int] = {}
        pk = p.max_pillars * p.max_points_per_pillar
        words = (3 if p.dims == 5 else 2) if quantize_first else 1
        head = dsp_ops.HEADER_BYTES

        t = host.now_ps
        self.points.data[:head] = dsp_ops.header(p, self.n)
        self._flush(self.points, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        cmd = (dsp_ops.CMD_STAGE1_QUANTIZE_FIRST if quantize_first
               else dsp_ops.CMD_STAGE1_CELLS)
        stage1 = self.stage1_packed if quantize_first else self.stage1_cells
        self._rpc(cmd, self.points, stage1)
        self._flush(stage1, hbsys.HB_SYS_MEM_CACHE_INVALIDATE)
        t = self._timed(stages, "dsp_stage1", t)

        out = stage1.data[: 4 * words * self.n].view(np.int32).reshape(self.n, words)
        # Scheme 2 indexes the table [idx][idy], scheme 1 [idy][idx].
        self._reset_tables((1, p.y_len) if quantize_first else (p.x_len, 1), whole_table=True)
        self._run_cpu("reset tables")
        voxels_buf = self.int8_voxels if quantize_first else self.float_voxels
        record_bytes = p.dims if quantize_first else 4 * p.dims
        # Stage 2 reads every slot of the pillars used, and an empty slot must read as zero
        # (int8) or NaN (float records quantise NaN to 0). Only the pillars the previous
        # frame used can hold anything else; the entry is back once this frame's are known.
        dirty = dsp_ops.pillar_records(
            0, self.voxel_pillars.pop(voxels_buf.phys_addr, p.max_pillars), p.max_pillars,
            p.max_points_per_pillar, p.slot_major)
        s.reset(dirty.rows * self._lines(dirty.cols * record_bytes))
        for first in dirty.starts():
            self._memset(voxels_buf, head + first * record_bytes, dirty.cols * record_bytes,
                         0 if quantize_first else 0xFF)
        self._run_cpu("clear voxels")
        cells = np.ascontiguousarray(out[:, 0])
        s.reset(12 * self.n + 64)
        tables = ck.Tables(self.lut.data.view(np.int32), self.counts.data.view(np.int32),
                           self.coords.data.view(np.int32).reshape(-1, 4))
        if quantize_first:
            t_words = np.ascontiguousarray(out[:, 2]) if p.dims == 5 else np.zeros(0, np.int32)
            pillars, valid, kept = ck.voxelize_packed(
                ck.Packed(cells, np.ascontiguousarray(out[:, 1]), t_words, 4 * words), p.dims,
                self._grid(p.slot_major), tables, voxels_buf.data[head:],
                self._trace(s, stage1, (stage1, 4), (stage1, 8), self.lut, self.counts,
                            self.coords, (voxels_buf, head)))
        else:
            pillars, valid, kept = ck.voxelize_floats(
                self._points_view(), cells, self.f32, self._grid(p.slot_major), tables,
                voxels_buf.data[head:].view(np.float32),
                self._trace(s, (self.points, head), stage1, self.lut, self.counts,
                            self.coords, (voxels_buf, head)))
        self._run_cpu("voxelize")
        self._flush(self.coords, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        t = self._timed(stages, "cpu_voxelize", t)

        self.voxel_pillars[voxels_buf.phys_addr] = pillars
        voxels_buf.data[:head] = dsp_ops.header(p, pk, pillars)  # stage 2 reads those only
        self._flush(voxels_buf, hbsys.HB_SYS_MEM_CACHE_CLEAN)
        cmd = dsp_ops.CMD_STAGE2_TRANSPOSE if quantize_first \
            else dsp_ops.CMD_STAGE2_ENCODE_TRANSPOSE
        self._rpc(cmd, voxels_buf, self.features)
        self._flush(self.features, hbsys.HB_SYS_MEM_CACHE_INVALIDATE)
        self._timed(stages, "dsp_stage2", t)
        self.used = pillars
        return self._result(pillars, valid, kept, stages)


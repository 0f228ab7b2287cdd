import numpy as np
import pytest

from emu.chip import Soc
from emu.errors import DspError
from emu.jit import njit
from emu.runtime import session
from emu.runtime.hbdsp import (
    HB_DSP_TASK_FAILED,
    hbDSPRpc,
    hbDSPRpcCtrlParam,
    hbDSPWaitTaskDone,
)
from emu.runtime.hbsys import hbSysAllocMem, hbSysMem
from emu.soc.config import load_config
from emu.vdsp import isa, ops

CMD_FAULT = 0x1300


@njit
def gather_far(ctx, offset):
    isa.gather_d(ctx, isa.gather_a_f32(ctx, 0, np.full(16, offset, np.uint32)))


def test_compute_counts_cycles_and_turns_faults_into_dsp_errors():
    core = Soc(load_config()).build().vdsp.hw[0]
    cycles = core.compute(gather_far, 64)
    assert cycles.total > 0 and core.counters["kernel_calls"] == 1
    with pytest.raises(DspError, match=r"core0: emulated fault: .*window"):
        core.compute(gather_far, 70_000)
    # The fault is cleared for the next kernel.
    assert core.compute(gather_far, 128).total == cycles.total


def test_a_faulting_operator_fails_its_rpc_and_the_next_rpc_runs():
    def run(core, slot, inp, out):
        yield slot.env.timeout(core.clock.cycles_to_ps(core.compute(gather_far, 70_000).total))

    ops.register(ops.Operator(CMD_FAULT, "far gather", "reads outside the window", run))
    try:
        session.start("j5")
        a, b = hbSysMem(), hbSysMem()
        assert hbSysAllocMem(a, 64) == 0 and hbSysAllocMem(b, 64) == 0
        ctrl = hbDSPRpcCtrlParam()
        ctrl.rpcCmd = CMD_FAULT
        _, bad = hbDSPRpc(a, b, ctrl)
        ctrl.rpcCmd = 0
        _, ping = hbDSPRpc(a, b, ctrl)
        assert hbDSPWaitTaskDone(bad, 0) == HB_DSP_TASK_FAILED
        assert "window" in bad.error
        assert hbDSPWaitTaskDone(ping, 0) == 0
    finally:
        ops.unregister(CMD_FAULT)

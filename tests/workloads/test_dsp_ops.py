import numpy as np
import pytest

from emu.workloads import dsp_ops


@pytest.mark.parametrize("run", [
    dsp_ops.DspRun("ping", (1,)),
    dsp_ops.DspRun("softmax", (3, 5, 7), axis=1),
    dsp_ops.DspRun("quantize", (4, 33), mode="scale", per_axis=True, axis=1),
    dsp_ops.DspRun("quantize", (4, 33), mode="shift", per_axis=True, axis=0, dtype="uint8"),
    dsp_ops.DspRun("dequantize", (1000,), mode="scale"),
    dsp_ops.DspRun("dequantize", (2, 40, 3), mode="shift", per_axis=True, axis=2),
], ids=lambda r: f"{r.op}-{r.mode}-{r.per_axis}")
def test_the_sizes_known_up_front_are_the_sizes_made(run):
    blob, out_bytes = dsp_ops._input(run, np.random.default_rng(0))
    assert dsp_ops.buffer_bytes(run) == (len(blob), out_bytes)


def test_pool_bytes_rounds_each_buffer_to_the_alignment_and_counts_every_call():
    run = dsp_ops.DspRun("softmax", (10,), rpcs=3)
    inp, out = dsp_ops.buffer_bytes(run)
    assert dsp_ops.pool_bytes(run, 4096) == 3 * 2 * 4096 and inp < 4096 and out < 4096
    assert dsp_ops.pool_bytes(run, 1) == 3 * (inp + out)

"""The structures users have (tests/conformance/composites.py) through `emu compile`.

Each composite graph (squeeze-excitation, a MobileNetV3 block with HardSigmoid or HardSwish,
a YOLOv5 neck, an FPN top-down path with bilinear upsampling, single- and multi-head
attention with LayerNormalization, Softmax and GELU, a two-layer LSTM sequence model, a
flow warp by GridSample) is compiled on four standard-normal inputs and judged on a fifth
by the conformance runner's rule (runner.py: cosine >= 0.99 with onnxruntime's output and
the per-op error budget). Where each op runs is checked too: the convolutional ones, the
LSTMs and the warp run whole on the BPU, as J5 would run them; in attention only the ops
J5's list keeps on the CPU (Softmax, LayerNormalization, Erf) leave it, with the views
(Reshape) of what they write.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from emu.nn import compiler, optable
from tests.conformance import composites, runner
from tests.conformance.cases import PreparedCase

onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime (the test extra) is "
                                  "the oracle")

# J5's list runs these on the CPU; every other op of the composites goes to the BPU.
CPU_OPS = {"Softmax", "LayerNormalization", "Erf"}


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    stored = {t.name for t in model.graph.initializer}
    return {v.name: rng.standard_normal(
        tuple(d.dim_value for d in v.type.tensor_type.shape.dim)).astype(np.float32)
            for v in model.graph.input if v.name not in stored}


def _prepared(name: str, model: onnx.ModelProto) -> PreparedCase:
    feeds = _feeds(model, 1)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    expected = dict(zip(names, session.run(names, feeds), strict=True))
    types = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    return PreparedCase(name, model, feeds, expected, types, 1e-3, 1e-5)


@pytest.mark.parametrize("name", sorted(composites.CASES))
def test_composite_compiles_runs_where_j5_would_and_matches_onnxruntime(name, tmp_path):
    model = composites.CASES[name]()
    for k in range(4):
        np.savez(tmp_path / f"sample{k}.npz", **_feeds(model, 100 + k))
    compiled = compiler.compile_model(model, name, compiler.CompileOptions(calib_dir=tmp_path),
                                      runner.j5())
    ops = {n.name: n.op for n in compiled.graph.nodes}
    off_bpu = {ops[n] for s in compiled.segments if s.kind in ("cpu", "dsp") for n in s.nodes}
    # besides J5's CPU ops, only views of what they write (which cost nothing there)
    views = {op for op in off_bpu if optable.kind(op) == "alias"}
    assert off_bpu - views <= CPU_OPS, [r for s in compiled.segments for r in s.reasons]
    case = _prepared(name, model)
    got = compiled.run(dict(case.feeds))
    for output, want in case.expected.items():
        check = runner.check_output(compiled, output, want, got[output], case)
        assert check.ok, f"{output}: {check.detail}"

"""The nine `light` models of the onnx wheel compile and agree with onnxruntime.

Each (opset 9, every operator listed in the operator table) is compiled with its one
input, onnx's backend runner's `arange(n) / n` (`cases.light_input`), as the calibration
set and run on it; the outcome must be "accurate" (runner.py: cosine >= 0.99 with
onnxruntime's output and the per-op error budget). A refusal fails too: every operator of
these models is one the table supports, so the compiler is to convert their opset. First
the harness checks itself: onnxruntime's output on that input is the `_output_0.pb` the
wheel ships. About 75 s in all (densenet121 20 s): run with -m slow.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conformance import cases, runner

pytest.importorskip("onnxruntime", reason="onnxruntime (the test extra) gives the expected "
                    "outputs")

LIGHT = cases.light_models()


def test_the_wheel_ships_the_nine_light_models() -> None:
    assert len(LIGHT) == 9, [m.name for m in LIGHT]


@pytest.mark.slow
@pytest.mark.parametrize("light", LIGHT, ids=[m.name for m in LIGHT])
def test_light_models(light: cases.LightModel) -> None:
    case = cases.prepare_light(light)
    shipped = cases.shipped_outputs(light)
    assert len(shipped) == len(case.expected)
    for want, made in zip(shipped, case.expected.values(), strict=True):
        np.testing.assert_allclose(made, want, rtol=light.rtol, atol=light.atol)
    outcome = runner.run_case(case)
    assert outcome.status == "accurate", f"{outcome.status} at {outcome.stage}: " \
        f"{outcome.reason}"


@pytest.mark.slow
@pytest.mark.parametrize("light", LIGHT, ids=[m.name for m in LIGHT])
def test_light_models_with_weights_of_trained_scale(light: cases.LightModel) -> None:
    """The same topologies at their own opset 9, with the zoo's weights of trained scale and
    a standard-normal input: outputs that vary with the input, converted and compiled."""
    outcome = runner.run_case(cases.prepare_light(light, realistic=True))
    assert outcome.status == "accurate", f"{outcome.status} at {outcome.stage}: " \
        f"{outcome.reason}"

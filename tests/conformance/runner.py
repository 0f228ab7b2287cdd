"""Run one prepared case through `emu compile` and `CompiledModel.run`, and judge it.

The case is compiled as a user would compile it: `compile_model(model, name,
CompileOptions(calib_dir=...), soc)` on the J5 preset, the calibration folder holding the
case's own inputs (one `.npz` keyed by input name: the inputs that are compared are the
calibration set); a model without inputs calibrates on nothing and takes the default
options. Then `CompiledModel.run(feeds)` with the same inputs. The outcome is exactly one of:

- "accurate": every output within the tolerance below;
- "refused": compiling or running raised `emu.errors.InputError` (or a subclass) with a
  one-line message, recorded as the reason;
- "flagged": it ran, and every output outside the tolerance is one the compiler's own
  accuracy check named (`CompiledModel.flagged`: `emu compile` prints a warning naming it):
  wrong, but not silently (quantisation cannot represent the case's inputs);
- "inaccurate": it ran, and some output is outside the tolerance that the compiler did not
  flag (silently wrong): the reason names the first such output and by how much;
- "crash": any other exception, or an InputError whose message is not one line: the reason
  is its type, its first line and the innermost `emu/` frame it came from.
Warnings emu emits while computing (numpy's overflow or invalid-value notes) do not decide
the outcome; the outputs do.

The tolerance, per output, by what computed it (`bpu_depth`: the most BPU nodes on one path
from the inputs to the output in the compiled graph):
- a non-float output (indices, booleans, integers): equal to onnx's, element for element,
  and of its dtype;
- a float output no BPU node leads to (computed in float on the CPU): within the case's own
  rtol and atol (`np.testing.assert_allclose`, NaN equal to NaN), as any ONNX backend;
- a float output one or more BPU nodes lead to (quantised on the way): cosine similarity
  with onnx's >= 0.99 (`COSINE_MIN`, the compiler's own accuracy floor) and max |error| <=
  (1/2 + 4 x depth) steps from what the BPU was given to compute, a step being
  max|expected| / 127 (/ 32767 when every tensor of the model has int16 codes): the grid
  calibration gives the output (max-abs, whatever `--calib-method`) on the compared input
  itself. "What the BPU was given": onnxruntime's output for the inputs as the quantize
  segment hands them on (each float input quantised at its scale and dequantised), so the
  steps measure emu's arithmetic, not how a steep function (Log near 0, Reciprocal)
  magnifies the rounding of its input, which no int8 implementation avoids and the cosine
  with onnx's output still bounds. The error is the smaller of the two (onnx's expected
  output and onnxruntime's on the quantised inputs), as the two oracles disagree on a few
  cases (a linear Resize with align_corners and an explicit scale); onnx's alone when
  onnxruntime cannot run the case. The budget: 1/2 step for the output's own
  rounding (onnx's value is not on the grid), and 4 steps per quantised op for what the
  rounding of its inputs and int8 weights carries to its output: an op of gain <= 1 per
  input passes each input's 1/2 step, a few inputs and an internal rescale add to about 2,
  and a weighted sum of K terms adds rounding noise of about 0.3 step rms from the inputs
  and as much from the weights, under 2 steps at 4 sigma. The step is taken from onnx's
  expected output, not from the scale emu chose, so a wrong scale cannot widen it.
  Non-finite expected values cannot come out of a quantised path: emu should refuse such a
  case, and one it runs is "inaccurate".
The float dtype of a float output is not compared (the compiled model's outputs are
float32); its shape is. Outputs drawn at random (a case with a random generator, or a
training-mode Dropout: `cases.draws_random`) are compared by shape and dtype alone (any
float dtype for a float output): no other implementation draws the same numbers.
"""

from __future__ import annotations

import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from emu.errors import InputError
from emu.nn import execute, quantize
from emu.nn.compiler import CompiledModel, CompileOptions, compile_model
from emu.soc.config import SocConfig, load_config
from tests.conformance.cases import PreparedCase

OUTCOMES = ("accurate", "refused", "flagged", "inaccurate", "crash")
COSINE_MIN = quantize.COSINE_MIN
STEPS_ROUNDING = 0.5
STEPS_PER_QUANTISED_OP = 4.0
_FLOAT_TYPES = frozenset(getattr(onnx.TensorProto, name) for name in (
    "FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
    "FLOAT8E5M2FNUZ") if hasattr(onnx.TensorProto, name))


@dataclass(frozen=True)
class OutputCheck:
    """How one output compared: the rule applied and, when it failed, by how much."""

    name: str
    rule: str  # "exact", "allclose", "quantised" or "random"
    ok: bool
    detail: str


@dataclass
class Outcome:
    """The outcome of one case (see the module): status, the stage it reached ("compile",
    "run", "compare") and a one-line reason for anything but "accurate"."""

    case: str
    status: str
    stage: str
    reason: str = ""
    checks: list[OutputCheck] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def compiled(self) -> bool:
        return self.stage in ("run", "compare")

    @property
    def ran(self) -> bool:
        return self.stage == "compare"

    def as_json(self) -> dict[str, Any]:
        return {"case": self.case, "status": self.status, "stage": self.stage,
                "reason": self.reason, "seconds": round(self.seconds, 3),
                "outputs": [vars(c) for c in self.checks]}


def j5() -> SocConfig:
    return load_config("j5", None, []).soc


def run_case(case: PreparedCase, soc: SocConfig | None = None) -> Outcome:
    """Compile and run `case` and classify the result (see the module)."""
    start = time.perf_counter()
    outcome = _run(case, soc or j5())
    outcome.seconds = time.perf_counter() - start
    return outcome


def _run(case: PreparedCase, soc: SocConfig) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="emu-conformance-") as tmp, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = CompileOptions(calib_dir=_calibration_dir(case, Path(tmp)))
        stage = "compile"
        try:
            compiled = compile_model(case.model, case.name, options, soc)
            stage = "run"
            got = compiled.run(dict(case.feeds))
        except InputError as error:
            message = str(error)
            if message and "\n" not in message:
                return Outcome(case.name, "refused", stage, message)
            return Outcome(case.name, "crash", stage,
                           f"InputError with a message of {len(message.splitlines())} lines: "
                           f"{_first_line(message)}{_origin(error)}")
        except Exception as error:  # a crash is what this harness measures
            return Outcome(case.name, "crash", stage, f"{type(error).__name__}: "
                           f"{_first_line(str(error))}{_origin(error)}")
    given = _as_given(compiled, case)
    checks = [check_output(compiled, name, want, got.get(name), case, given.get(name))
              for name, want in case.expected.items()]
    failed = [c for c in checks if not c.ok]
    if failed:
        status = "flagged" if all(c.name in compiled.flagged for c in failed) else "inaccurate"
        return Outcome(case.name, status, "compare", f"{failed[0].name}: "
                       f"{failed[0].detail}", checks)
    return Outcome(case.name, "accurate", "compare", "", checks)


def _as_given(compiled: CompiledModel, case: PreparedCase) -> dict[str, np.ndarray]:
    """onnxruntime's outputs for the inputs as the BPU receives them (see the module), or
    {} when nothing is quantised or onnxruntime cannot run the case."""
    quantised = {name: compiled.quant.tensors[name] for name in case.feeds
                 if name in compiled.quant.tensors}
    if not quantised:
        return {}
    feeds = dict(case.feeds)
    for name, qt in quantised.items():
        value = np.asarray(feeds[name])
        codes = execute.to_codes(value, qt.scale, qt.dtype)
        feeds[name] = execute.from_codes(codes, qt.scale).astype(value.dtype)
    try:
        import onnxruntime  # type: ignore[import-untyped]

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(case.model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds), strict=True))
    except Exception:  # onnxruntime lacks the op or the opset: onnx's expected output
        return {}


def _calibration_dir(case: PreparedCase, tmp: Path) -> Path | None:
    """The case's inputs as the one calibration sample (None for a model without inputs,
    or with inputs that are not arrays: sequences and optionals)."""
    if not case.feeds or not all(isinstance(v, np.ndarray) for v in case.feeds.values()):
        return None
    np.savez(tmp / "sample.npz", **case.feeds)
    return tmp


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0] if lines else "(no message)"


def _origin(error: BaseException) -> str:
    """ ' (at emu/...py:LINE in FUNCTION)' for the innermost frame in emu's own code."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "/emu/" in f.filename.replace("\\", "/")]
    if not frames:
        return ""
    last = frames[-1]
    path = last.filename.replace("\\", "/")
    return f" (at {path[path.rindex('/emu/') + 1:]}:{last.lineno} in {last.name})"


# --- comparison ------------------------------------------------------------------------------

def bpu_depth(compiled: CompiledModel, name: str) -> int:
    """The most BPU nodes on one path from the graph inputs to tensor `name`."""
    on_bpu = {n for s in compiled.segments if s.kind == "bpu" for n in s.nodes}
    depth: dict[str, int] = {}
    for node in compiled.graph.nodes:  # topological order
        before = max((depth.get(i, 0) for i in node.inputs if i), default=0)
        for out in node.outputs:
            depth[out] = before + (node.name in on_bpu)
    return depth.get(name, 0)


def check_output(compiled: CompiledModel, name: str, want: Any, got: Any,
                 case: PreparedCase, given: np.ndarray | None = None) -> OutputCheck:
    """One output of emu against onnx's expected value, by the module's rule (`given`: the
    output for the quantised inputs, when known)."""
    if got is None:
        return OutputCheck(name, "exact", False, "the compiled model has no such output")
    if not isinstance(want, np.ndarray):
        return OutputCheck(name, "exact", False, f"expected a {type(want).__name__}, "
                           "not a tensor")
    got = np.asarray(got)
    if got.shape != want.shape:
        return OutputCheck(name, "exact", False, f"shape {got.shape}, expected {want.shape}")
    is_float = case.output_types.get(name) in _FLOAT_TYPES
    if case.random:
        typed = got.dtype.kind == "f" if is_float else got.dtype == want.dtype
        return OutputCheck(name, "random", bool(typed), f"random draws of dtype {got.dtype}")
    if not is_float:
        return _exact(name, want, got)
    expected = want.astype(np.float64)
    depth = bpu_depth(compiled, name)
    if depth == 0:
        return _allclose(name, expected, got, case.rtol, case.atol)
    seen = expected if given is None or np.shape(given) != expected.shape \
        else np.asarray(given, np.float64)
    return _quantised(name, expected, got, depth, _code_max(compiled), seen)


def _exact(name: str, want: np.ndarray, got: np.ndarray) -> OutputCheck:
    if got.dtype != want.dtype:
        return OutputCheck(name, "exact", False, f"dtype {got.dtype}, expected {want.dtype}")
    differ = int(np.count_nonzero(got != want))
    return OutputCheck(name, "exact", differ == 0,
                       f"{differ} of {want.size} elements differ" if differ else "equal")


def _allclose(name: str, want: np.ndarray, got: np.ndarray, rtol: float,
              atol: float) -> OutputCheck:
    try:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol)
    except AssertionError:
        finite = np.isfinite(want) & np.isfinite(got)
        outside = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        error = float(np.abs(got[finite] - want[finite]).max(initial=0.0))
        return OutputCheck(name, "allclose", False, f"{int(outside.sum())} of {want.size} "
                           f"elements outside rtol {rtol:g}, atol {atol:g} (max |error| "
                           f"{error:.3g})")
    return OutputCheck(name, "allclose", True, f"within rtol {rtol:g}, atol {atol:g}")


def _code_max(compiled: CompiledModel) -> int:
    """127 when any tensor of the model has int8 codes, else 32767 (an int32 output is
    a final conv's accumulators: its inputs' codes decide)."""
    dtypes = set(compiled.quant.tensor_dtypes().values()) - {"int32"} or {"int8"}
    return min(quantize.CODE_MAX[d] for d in dtypes)


def _quantised(name: str, want: np.ndarray, got: np.ndarray, depth: int,
               code_max: int, seen: np.ndarray) -> OutputCheck:
    if not np.isfinite(want).all():
        return OutputCheck(name, "quantised", False, "expected values are not finite but "
                           f"the output comes from {depth} BPU node(s) (refuse such a case)")
    if not np.isfinite(got).all():
        return OutputCheck(name, "quantised", False, "non-finite values out of the BPU")
    step = float(np.abs(want).max(initial=0.0)) / code_max
    limit = STEPS_ROUNDING + STEPS_PER_QUANTISED_OP * depth
    error = float(np.abs(got - want).max(initial=0.0))
    if np.isfinite(seen).all():  # the nearer of the two oracles (see the module)
        error = min(error, float(np.abs(got - seen).max(initial=0.0)))
    cosine = execute.cosine_similarity(got, want)
    in_steps = error / step if step > 0 else (0.0 if error == 0 else float("inf"))
    detail = (f"cosine {cosine:.4f} (>= {COSINE_MIN}), max |error| {in_steps:.2f} steps "
              f"(<= {limit:g}; step {step:.3g}, depth {depth})")
    return OutputCheck(name, "quantised", cosine >= COSINE_MIN and in_steps <= limit, detail)

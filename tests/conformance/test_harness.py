"""The conformance harness itself: the cache, the preparation rule, the classification."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.backend.test.case.test_case import TestCase as OnnxTestCase

from emu.errors import InputError
from emu.nn.compiler import CompiledModel
from tests.conformance import cases, runner

INDEX = {c.name: c for c in cases.load_index()}


def _prepared(name: str) -> cases.PreparedCase:
    return cases.prepare(INDEX[name])


def _initializers(case: cases.PreparedCase) -> set[str]:
    return {t.name for t in case.model.graph.initializer}


@pytest.mark.parametrize("name, fed, stored", [
    ("test_basic_conv_with_padding", {"x"}, {"W"}),
    ("test_add", {"x", "y"}, set()),
    ("test_reshape_reordered_all_dims", {"data"}, {"shape"}),
    ("test_batchnorm_example", {"x"}, {"s", "bias", "mean", "var"}),
    ("test_gather_0", {"data"}, {"indices"}),
    ("test_clip", {"x"}, {"min", "max"}),
    ("test_where_example", {"condition", "x", "y"}, set()),
    ("test_lstm_defaults", {"X"}, {"W", "R"}),
])
def test_parameters_become_initializers_and_feature_maps_stay_inputs(name, fed, stored):
    case = _prepared(name)
    assert set(case.feeds) == fed == {i.name for i in case.model.graph.input}
    assert _initializers(case) == stored


def test_an_expanded_case_follows_the_rule_of_the_operator_it_expands():
    info = INDEX["test_layer_normalization_2d_axis0_expanded"]
    assert (info.op, info.multi_node) == ("LayerNormalization", True)
    case = cases.prepare(info)
    assert set(case.feeds) == {"X"} and _initializers(case) == {"W", "B"}


def test_selection_and_expected_refusals():
    chosen = {c.name: c for c in cases.selected_cases()}
    assert chosen["test_relu"].where == "bpu" and not chosen["test_relu"].must_refuse
    assert chosen["test_mod_mixed_sign_float32"].must_refuse  # Mod: unsupported
    assert chosen["test_mish_expanded"].where == ""  # Softplus, Tanh, Mul: all listed
    assert "test_mish" not in chosen and "test_det_2d" in chosen


def _tiny_testcases() -> list[OnnxTestCase]:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    data = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    made = []
    for name, nodes in (("test_tiny", [helper.make_node("Relu", ["x"], ["y"])]),
                        ("test_tiny_expanded", [helper.make_node("Relu", ["x"], ["t"]),
                                                helper.make_node("Identity", ["t"], ["y"])])):
        model = helper.make_model(helper.make_graph(nodes, name, [x], [y]))
        made.append(OnnxTestCase(name=name, model_name=name, url=None, model_dir=None,
                             model=model, data_sets=[([data], [np.maximum(data, 0)])],
                             kind="node", rtol=1e-3, atol=1e-7))
    return made


def test_the_cache_is_written_once_and_rebuilt_when_stale(tmp_path, monkeypatch):
    collected: list[int] = []

    def collect() -> list[OnnxTestCase]:
        collected.append(1)
        return _tiny_testcases()

    monkeypatch.setattr(cases, "_collect", collect)
    folder = tmp_path / "1.0"
    cases.ensure_cache(folder)
    (folder / "index.json").write_text('{"format": "older"}')
    cases.ensure_cache.cache_clear()
    index = cases.load_index.__wrapped__(folder)
    assert len(collected) == 2
    assert [(c.name, c.op, c.nodes) for c in index] == [("test_tiny", "Relu", 1),
                                                         ("test_tiny_expanded", "Relu", 2)]
    case = cases.prepare(index[1], folder)
    assert np.array_equal(case.feeds["x"], np.arange(6, dtype=np.float32).reshape(2, 3) - 2)
    assert np.array_equal(case.expected["y"], np.maximum(case.feeds["x"], 0))
    # nothing half-built left beside it (the builders' lock file stays, empty)
    assert [p.name for p in tmp_path.glob(".*")] == [f".{folder.name}.lock"]


def test_an_accurate_case_and_a_silently_wrong_one(monkeypatch):
    case = _prepared("test_relu")
    good = runner.run_case(case)
    assert (good.status, good.stage) == ("accurate", "compare")
    assert good.checks[0].rule == "quantised"
    step = float(np.abs(case.expected["y"]).max()) / 127
    run = CompiledModel.run

    def off_by_ten_steps(self, feeds):
        outputs = run(self, feeds)
        outputs["y"] = outputs["y"].copy()
        outputs["y"].flat[0] += 10 * step
        return outputs
    monkeypatch.setattr(CompiledModel, "run", off_by_ten_steps)
    bad = runner.run_case(case)
    assert bad.status == "inaccurate" and bad.reason.startswith("y: ")


def test_a_float_cpu_output_keeps_the_cases_own_tolerance():
    case = _prepared("test_softmax_axis_1")
    assert runner.run_case(case).checks[0].rule == "allclose"
    case.expected["y"] = case.expected["y"] * 1.01
    outcome = runner.run_case(case)
    assert outcome.status == "inaccurate" and "rtol 0.001" in outcome.reason


@pytest.mark.parametrize("error, status", [
    (InputError("node n: not supported"), "refused"),
    (InputError("first line\nsecond line"), "crash"),
    (RuntimeError("boom"), "crash"),
])
def test_errors_are_refusals_only_when_they_are_one_line_input_errors(error, status,
                                                                     monkeypatch):
    def compile_model(*args, **kwargs):
        raise error

    monkeypatch.setattr(runner, "compile_model", compile_model)
    outcome = runner.run_case(_prepared("test_relu"))
    assert (outcome.status, outcome.stage, outcome.compiled) == (status, "compile", False)
    assert str(error).splitlines()[0] in outcome.reason
    if status == "crash":
        assert type(error).__name__ in outcome.reason

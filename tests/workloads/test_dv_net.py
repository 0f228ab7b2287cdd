"""`emu dv run` and `emu.workloads.dv_net`: ONNX networks on the DV700 through dmp_dv."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import emu
from emu.cli.main import main
from emu.dv import compute
from emu.errors import InputError
from emu.workloads import dv_net

RNG = np.random.default_rng(11)


def _model(nodes, inputs, output, inits, path=None):
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if path is not None:
        onnx.save(model, str(path))
    return model


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _cli(capsys, *argv):
    code = main(["dv", "run", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# Golden DV700 timings: every command's device time of MobileNetV1 at 64 x 64 and the run's
# totals; any change of a DV700 timing formula shows as a failing test and a diff of this
# file. Regenerate after a change meant to move them:
#     python -m pytest tests/workloads/test_dv_net.py -k mobilenetv1 --regen-golden
GOLDEN = Path(__file__).parent / "golden" / "dv_mobilenetv1_timing.json"


def test_mobilenetv1_runs_on_the_device_close_to_float_and_deterministically(capsys, request):
    runs = []
    for _ in range(2):
        code, out, err = _cli(capsys, "mobilenetv1", "--input-size", "64,64", "--json")
        assert code == 0, err
        runs.append(out)
    assert runs[0] == runs[1]
    doc = json.loads(runs[0])
    for key in ("model", "input", "commands", "command_counts", "device_us", "exec_time_us",
                "wall_time_us", "cpu_ops", "memory", "output", "provenance"):
        assert key in doc
    commands = doc["commands"]
    assert doc["command_counts"] == {"conv": 27, "fc": 1} and len(commands) == 28
    assert commands[0]["name"] == "stem.conv" and commands[-1]["kind"] == "fc"
    assert commands[-2]["nodes"] == ["block12.pw.conv", "fc.pool"]  # the pool folded in
    assert commands[-2]["output_shape"] == [1024, 1, 1]
    assert all(c["device_us"] > 0 for c in commands)
    total = sum(c["device_us"] for c in commands)
    assert total == pytest.approx(doc["device_us"])
    assert total <= doc["exec_time_us"] <= doc["wall_time_us"]
    timing = {"commands_us": {c["name"]: c["device_us"] for c in commands},
              **{key: doc[key] for key in ("device_us", "exec_time_us", "wall_time_us")}}
    if request.config.getoption("--regen-golden"):
        GOLDEN.write_text(json.dumps(timing, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    moved = [f"{name}: {want['commands_us'].get(name)} -> {us} us"
             for name, us in timing["commands_us"].items()
             if want["commands_us"].get(name) != us]
    assert not moved, "DV700 timing moved (regenerate with --regen-golden if meant):\n" + \
        "\n".join(moved)
    assert timing == want
    out = doc["output"]
    assert out["shape"] == [1, 1000] and len(out["top5"]) == 5
    assert out["check"]["cosine"] > 0.99
    assert out["check"]["max_abs_diff"] < 0.05 * out["check"]["max_abs_reference"]


def test_the_text_report_has_a_line_per_command_and_the_totals(capsys):
    code, out, _ = _cli(capsys, "mobilenetv1", "--input-size", "32")
    assert code == 0
    assert "block12.pw.conv +fc.pool" in out and "logits" in out
    assert "dmp_dv_cmdlist_get_last_exec_time" in out and "cosine" in out


def test_the_c_style_example_runs_and_is_deterministic(capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    try:
        import dmp_dv_cnn as example
    finally:
        sys.path.pop(0)
    outs = []
    for _ in range(2):
        assert example.main([]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    assert outs[0].count("\n  [") == 10
    assert "max_kernel_size 7" in outs[0] and "dmp_dv_cmdlist_get_last_exec_time" in outs[0]
    assert example.main(["--seed", "1"]) == 0
    assert capsys.readouterr().out != outs[0]


def test_one_conv_equals_the_device_specification_bit_for_bit():
    """An independent check of the conversion: padding (asymmetric), stride, dilation and
    ReLU6 of an ONNX Conv against `emu.dv.compute.run_conv` on the same FP16 data."""
    x16 = _f32(1, 5, 11, 9).astype(np.float16)
    w16, b16 = _f32(6, 5, 3, 3, scale=0.3).astype(np.float16), _f32(6).astype(np.float16)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 2, 0, 1], strides=[2, 1],
                            dilations=[1, 2])
    clip = helper.make_node("Clip", ["c", "lo", "hi"], ["y"])
    model = _model([conv, clip], [("x", [1, 5, 11, 9])], ("y", [1, 6, 5, 8]),
                   {"w": w16.astype(np.float32), "b": b16.astype(np.float32),
                    "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)})
    with emu.Session():
        results, got = dv_net.run_arrays(model, x16.astype(np.float32), 0)
    want = compute.run_conv(x16[0], [compute.ConvRun(
        m=6, kernel=(3, 3), pads=(2, 1, 1, 0), stride=(1, 2), dilation=(2, 1), weights=w16,
        bias=b16, actfunc=6)])[0]
    assert got.shape == want.shape == (6, 5, 8)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    import hashlib

    assert results["output"]["fp16_sha256"] == hashlib.sha256(
        want.astype("<f2").tobytes()).hexdigest()
    assert [c["nodes"] for c in results["commands"]] == [["Conv_0"]]  # Clip(0, 6) fused


def test_pools_fold_or_run_alone_fc_relu_fuses_and_a_trailing_softmax_is_left_to_the_cpu():
    nodes = [
        helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=1),  # the input's pool: a run of its own
        helper.make_node("Conv", ["a", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["c2"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["g"], transB=1),
        helper.make_node("Relu", ["g"], ["h"]),
        helper.make_node("Gemm", ["h", "w4", "b4"], ["z"], transB=1),
        helper.make_node("Softmax", ["z"], ["y"], axis=1),
    ]
    inits = {"w1": _f32(8, 3, 3, 3, scale=0.3), "b1": _f32(8, scale=0.1),
             "w2": _f32(8, 1, 3, 3, scale=0.3), "w3": _f32(20, 8 * 4 * 5, scale=0.1),
             "b3": _f32(20, scale=0.1), "w4": _f32(7, 20, scale=0.3), "b4": _f32(7)}
    model = _model(nodes, [("x", [1, 3, 8, 10])], ("y", [1, 7]), inits)
    with emu.Session():
        doc = dv_net.run_network(model, None, 3)
    assert [(c["kind"], c["nodes"]) for c in doc["commands"]] == [
        ("conv", ["AveragePool_0"]), ("conv", ["Conv_1", "MaxPool_3"]), ("conv", ["Conv_4"]),
        ("fc", ["Gemm_6", "Relu_7"]), ("fc", ["Gemm_8"])]
    assert doc["commands"][3]["input_shape"] == [8, 4, 5]  # the FC reads the map, reordered
    assert doc["cpu_ops"] == ["Softmax Softmax_9"]
    assert doc["output"]["check"]["cosine"] > 0.999
    assert len(doc["output"]["top5"]) == 5


def test_a_global_pool_flattened_into_a_last_axis_softmax():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Softmax", ["f"], ["y"], axis=-1)]
    model = _model(nodes, [("x", [1, 3, 9, 9])], ("y", [1, 5]), {"w": _f32(5, 3, 3, 3)})
    with emu.Session():
        doc = dv_net.run_network(model, None, 0)
    assert [c["nodes"] for c in doc["commands"]] == [["Conv_0", "GlobalAveragePool_1"]]
    assert doc["output"]["check"]["cosine"] > 0.999


def test_a_residual_add_runs_in_the_element_wise_mode():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "c1"], ["y"])]
    model = _model(nodes, [("x", [1, 4, 6, 6])], ("y", [1, 8, 6, 6]),
                   {"w1": _f32(8, 4, 3, 3, scale=0.3), "w2": _f32(8, 8, 1, 1, scale=0.3)})
    with emu.Session():
        doc = dv_net.run_network(model, None, 0)
    assert [c["residual"] for c in doc["commands"]] == [False, True]
    assert doc["output"]["check"]["cosine"] > 0.999


def test_refusals_name_the_node_and_op():
    concat = _model([helper.make_node("Conv", ["x", "w"], ["c"]),
                     helper.make_node("Concat", ["c", "x"], ["y"], axis=1)],
                    [("x", [1, 2, 4, 4])], ("y", [1, 4, 4, 4]), {"w": _f32(2, 2, 1, 1)})
    big = _model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", [1, 2, 9, 9])],
                 ("y", [1, 2, 1, 1]), {"w": _f32(2, 2, 9, 9)})
    relu_add = _model([helper.make_node("Conv", ["x", "w"], ["c"]),
                       helper.make_node("Add", ["c", "x"], ["a"]),
                       helper.make_node("Relu", ["a"], ["y"])],
                      [("x", [1, 2, 4, 4])], ("y", [1, 2, 4, 4]), {"w": _f32(2, 2, 1, 1)})
    with emu.Session():
        for model, words in ((concat, "Concat_1 (Concat)"), (big, "9x9 kernel"),
                             (relu_add, "residual add before the relu")):
            with pytest.raises(InputError, match="not supported on the DV700") as info:
                dv_net.run_network(model, None, 0)
            assert words in str(info.value) and "\n" not in str(info.value)


def test_unsupported_ops_and_bad_inputs_exit_2_with_one_line(capsys, tmp_path):
    softmax_mid = tmp_path / "softmax.onnx"
    _model([helper.make_node("Softmax", ["x"], ["s"], axis=1),
            helper.make_node("Conv", ["s", "w"], ["y"])],
           [("x", [1, 2, 4, 4])], ("y", [1, 2, 4, 4]), {"w": _f32(2, 2, 1, 1)}, softmax_mid)
    good = tmp_path / "conv.onnx"
    _model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", [1, 2, 4, 4])],
           ("y", [1, 2, 4, 4]), {"w": _f32(2, 2, 1, 1)}, good)
    text = tmp_path / "notes.onnx"
    text.write_text("not a model")
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((1, 3, 4, 4), np.float32))
    cases = [
        ([str(softmax_mid)], "Softmax"),
        ([str(text)], "not an ONNX model"),
        ([str(tmp_path / "missing.onnx")], "no such file"),
        (["no_such_net"], "unknown"),
        (["mobilenetv1", "--input-size", "0,5"], "--input-size"),
        (["mobilenetv1", "--input-size", "a,b"], "--input-size"),
        (["mobilenetv1", "--input-size", "16"], "--input-size"),
        ([str(good), "--input-size", "8,8"], "--input-size"),
        ([str(good), "--input", str(wrong)], "--input"),
        ([str(good), "--input", str(tmp_path / "none.npy")], "--input"),
    ]
    for argv, words in cases:
        code, out, err = _cli(capsys, *argv)
        assert code == 2, (argv, err)
        assert err.count("\n") == 1 and words in err, (argv, err)
        assert out == ""
    code, out, _ = _cli(capsys, str(good), "--input", str(tmp_path / "ok.npy"))
    assert code == 2
    np.save(tmp_path / "ok.npy", np.ones((1, 2, 4, 4), np.float32))
    code, out, err = _cli(capsys, str(good), "--input", str(tmp_path / "ok.npy"), "--json")
    assert code == 0, err
    assert json.loads(out)["command_counts"] == {"conv": 1, "fc": 0}

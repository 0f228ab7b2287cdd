"""`emu compile` / `emu infer` end to end: the pipeline, the model file, the command line."""

import json
import math

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from emu.cli.main import main
from emu.errors import InputError
from emu.nn import compiler, modelcache, zoo
from emu.nn.compiler import CompileOptions
from emu.soc.config import load_config
from tests.nn.nets import ZOO_SMALL, segmented, zoo_case

SOC = load_config("j5", None, []).soc

# The built networks at sizes that keep the suite fast (the agreement with onnxruntime at
# these sizes is tests/nn/test_onnxruntime_agreement.py's).
SMALL = {"resnet18": (32, 32), "resnet50": (32, 32), "mobilenetv1": (32, 32),
         "mobilenetv2": (32, 32), "efficientnet_lite0": (32, 32), "yolov8n": (64, 64),
         "yolov8s": (64, 64), "unet": (32, 32), "centerpoint_pillars": (32, 32),
         "yolov5s": (64, 64)}


def _compile(model, name="m", **options):
    return compiler.compile_model(model, name, CompileOptions(calib_random=4, **options), SOC)


@pytest.fixture(scope="module")
def mobilenet():
    return _compile(zoo.build("mobilenetv2", (32, 32)), "mobilenetv2")


def _feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in model.inputs:
        if t.dtype == "uint8":
            feeds[t.name] = rng.integers(0, 256, t.shape, dtype=np.uint8)
        else:
            feeds[t.name] = rng.standard_normal(t.shape).astype(np.float32)
    return feeds


# The onnx test-data topologies have a fixed 224x224 input; two are quick, the others take
# 5-30 s each (large FC layers, DenseNet's 600 nodes) and run with -m slow.
QUICK = {"onnx_squeezenet", "onnx_shufflenet"}
EVERY = [zoo_case(name, name in SMALL or name in QUICK) for name in zoo.names()]


@pytest.mark.parametrize("name", EVERY)
def test_every_zoo_model_compiles_saves_loads_and_runs(name, tmp_path):
    model = _compile(zoo.build(name, SMALL.get(name, ZOO_SMALL.get(name))), name)
    assert not model.flagged, model.accuracy
    path = tmp_path / f"{name}.hbm"
    path.write_bytes(compiler.dumps([model]))
    (loaded,) = compiler.load_file(path)
    feeds = _feeds(model)
    want = model.run(feeds)
    got = loaded.run(feeds)
    assert want.keys() == got.keys() == {t.name for t in model.outputs}
    for key in want:
        assert want[key].shape == model.graph.tensors[key].shape
        assert np.array_equal(want[key], got[key])
    est = loaded.estimate(SOC).to_json()
    assert est["latency_ms"] > 0 and est["fps"] > 0
    assert est == model.estimate(SOC).to_json()


def test_a_file_packs_several_models(tmp_path, mobilenet):
    other = _compile(segmented(), "segmented")
    path = tmp_path / "two.hbm"
    path.write_bytes(compiler.dumps([mobilenet, other]))
    models = compiler.load_file(path)
    assert [m.name for m in models] == ["mobilenetv2", "segmented"]
    assert compiler.pick(models, "segmented", str(path)).name == "segmented"
    with pytest.raises(InputError, match="packs 2 models"):
        compiler.pick(models, None, str(path))
    with pytest.raises(InputError, match="--model-name nope"):
        compiler.pick(models, "nope", str(path))


def test_unsupported_ops_split_the_model_into_bpu_subgraphs():
    model = _compile(segmented())
    kinds = [s.kind for s in model.segments]
    assert kinds == ["quantize", "bpu", "cpu", "bpu", "cpu", "bpu", "dequantize"]
    assert sorted(model.function_calls) == [1, 3, 5]
    est = model.estimate(SOC).to_json()
    where = [(layer["op"], layer["where"]) for layer in est["layers"]]
    assert ("Softmax", "cpu") in where and ("LayerNormalization", "cpu") in where
    assert [w for _, w in where].count("bpu") == 3
    assert where[0] == ("quantize", "cpu") and where[-1] == ("dequantize", "cpu")
    cpu_us = [layer["compute_us"] for layer in est["layers"] if layer["where"] == "cpu"]
    assert all(us > 0 for us in cpu_us)


def test_max_time_per_fc_cuts_function_calls(mobilenet):
    whole = mobilenet.estimate(SOC)
    (_, calls), = mobilenet.calls(SOC)
    assert len(calls) == 1
    limit_us = whole.latency_ms * 1e3 / 8
    # Named as the fixture's: its steps 1 to 5 come from the run's model cache, the cut is new.
    cut = _compile(zoo.build("mobilenetv2", (32, 32)), "mobilenetv2", max_time_per_fc_us=limit_us)
    (_, cut_calls), = cut.calls(SOC)
    assert len(cut_calls) >= 8
    assert max(c.time_ps for c in cut_calls) <= limit_us * 1e6
    # Every FC boundary costs its overhead: more FCs, a longer estimate.
    assert cut.estimate(SOC).latency_ms > whole.latency_ms
    # Below its longest layer group the cut has parts of layer groups, which the file keeps.
    fine = compiler.cut(cut, limit_us / 4, SOC)
    (spans,) = fine.function_calls.values()
    assert any(len(span) == 5 for span in spans)
    (_, fine_calls), = fine.calls(SOC)
    assert max(c.time_ps for c in fine_calls) <= limit_us / 4 * 1e6
    (loaded,) = compiler.load_bytes(compiler.dumps([fine]), "test")
    assert loaded.function_calls == fine.function_calls


def test_batch_is_compiled_in(mobilenet):
    batched = _compile(zoo.build("mobilenetv2", (32, 32)), batch=4)
    assert batched.inputs[0].shape == (4, 3, 32, 32)
    assert batched.outputs[0].shape[0] == 4
    out = batched.run(_feeds(batched))
    assert next(iter(out.values())).shape[0] == 4


def test_a_batch_is_calibrated_on_frames_and_quantised_as_batch_one(mobilenet):
    # Calibration samples are frames: the batch-4 model's codes, layers and accuracy are
    # the batch-1 model's, and each frame of a batch computes what that frame alone does.
    batched = _compile(zoo.build("mobilenetv2", (32, 32)), "mobilenetv2", batch=4)
    assert batched.quant.tensors == mobilenet.quant.tensors
    assert batched.quant.layers.keys() == mobilenet.quant.layers.keys()
    for name, layer in mobilenet.quant.layers.items():
        assert np.array_equal(batched.quant.layers[name].weight, layer.weight), name
        assert np.array_equal(batched.quant.layers[name].bias, layer.bias), name
    assert batched.accuracy == mobilenet.accuracy
    assert batched.options["calibration"] == mobilenet.options["calibration"]
    feeds = _feeds(batched)
    (name, frames), = feeds.items()
    together = batched.run(feeds)
    for i in range(4):
        alone = mobilenet.run({name: frames[i:i + 1]})
        for out, value in alone.items():
            assert np.array_equal(together[out][i:i + 1], value), (out, i)


def _watch_calibration(monkeypatch, name):
    """The shapes of input `name` in every sample calibration is given, as a list."""
    seen = []
    calibrate = compiler.quantize.calibrate

    def watch(graph, segments, samples, **kw):
        seen.extend(feeds[name].shape for feeds in samples)
        return calibrate(graph, segments, samples, **kw)

    monkeypatch.setattr(compiler.quantize, "calibrate", watch)
    return seen


def test_a_model_exported_with_a_batch_is_calibrated_on_whole_runs(monkeypatch):
    # Its layers may mix frames (here a Reshape to the constant shape [4, 512]): the
    # calibration runs the model's own 4-frame inputs.
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 3, 8, 8])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([4, 512], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Reshape", ["r", "shape"], ["y"])],
        "fixed", [x], [y], [w, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    seen = _watch_calibration(monkeypatch, "x")
    compiled = _compile(model)
    assert seen == [(4, 3, 8, 8)] * 4
    assert any(s.kind == "bpu" for s in compiled.segments)
    assert compiled.accuracy["y"] > 0.99
    assert compiled.run(_feeds(compiled))["y"].shape == (4, 512)


def test_arrays_for_a_batch_are_split_into_frames(monkeypatch, tmp_path):
    rng = np.random.default_rng(3)
    runs = [rng.standard_normal((4, 3, 32, 32)).astype(np.float32) for _ in range(2)]
    for k, run in enumerate(runs):
        np.save(tmp_path / f"{k}.npy", run)
    seen = _watch_calibration(monkeypatch, "input")
    compiled = _compile(zoo.build("mobilenetv2", (32, 32)), batch=4, calib_dir=tmp_path)
    assert seen == [(1, 3, 32, 32)] * 8
    assert compiled.options["calibration"] == f"2 arrays in {tmp_path}"
    frames = [{"input": run[i:i + 1]} for run in runs for i in range(4)]
    alone = _compile(zoo.build("mobilenetv2", (32, 32)), "mobilenetv2")
    assert alone.inputs[0].shape == (1, 3, 32, 32)
    defaults = CompileOptions()
    want = compiler.quantize.calibrate(alone.graph, alone.segments, frames,
                                       method=defaults.calib_method,
                                       percentile=defaults.calib_percentile)
    assert compiled.quant.tensors == compiler.quantize.quantize(
        alone.graph, alone.segments, want).tensors


@pytest.mark.parametrize("input_type", ["nv12", "rgb", "bgr", "yuv444", "gray"])
def test_image_input_types(input_type):
    channels = 1 if input_type == "gray" else 3
    model = zoo.build("resnet18", (32, 32)) if channels == 3 else _gray_net()
    compiled = _compile(model, input_type=input_type, mean=(128.0,), scale=(1 / 64,))
    (image,) = compiled.inputs
    assert image.dtype == "uint8"
    want = {"nv12": (1, 48, 32), "gray": (1, 32, 32, 1)}.get(input_type, (1, 32, 32, 3))
    assert image.shape == want
    assert compiled.segments[0].kind == "bpu"  # no CPU quantize: the BPU converts
    assert compiled.graph.nodes[0].op == "Preprocess"
    assert not compiled.flagged
    out = compiled.run(_feeds(compiled))
    assert all(np.isfinite(v).all() for v in out.values())


def _gray_net():
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 1, 3, 3)) * 0.5).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "gray",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 32, 32])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def test_bad_compile_options():
    with pytest.raises(InputError, match="--input-type"):
        CompileOptions(input_type="jpeg")
    with pytest.raises(InputError, match="--batch"):
        CompileOptions(batch=0)
    with pytest.raises(InputError, match="--int16 sometimes"):
        CompileOptions(int16="sometimes")
    with pytest.raises(InputError, match="has 3 channels"):
        _compile(zoo.build("resnet18", (32, 32)), input_type="gray")
    with pytest.raises(InputError, match="even sides"):
        _compile(zoo.build("resnet18", (33, 33)), input_type="nv12")


def test_calibration_methods_are_options_checked_and_recorded():
    for bad, needle in ((dict(calib_method="entropy"), "--calib-method entropy: expected one "
                                                       "of max, percentile, kl"),
                        (dict(calib_method="percentile", calib_percentile=101.0),
                         "--calib-percentile 101.0: expected 50 to 100"),
                        (dict(calib_percentile=math.inf), "--calib-percentile inf")):
        with pytest.raises(InputError) as caught:
            CompileOptions(**bad)
        assert needle in str(caught.value) and "\n" not in str(caught.value)
    model = zoo.build("mobilenetv2", (32, 32))
    chosen = _compile(model, calib_method="percentile", calib_percentile=99.9)
    assert chosen.options["calib_method"] == "percentile"
    assert chosen.options["calib_percentile"] == 99.9
    assert chosen.options["calibration"] == "4 random samples, seed 0"
    kl = _compile(model, calib_method="kl", seed=3)
    assert kl.options["calib_method"] == "kl" and kl.options["calib_percentile"] is None
    assert kl.options["calibration"] == "4 random samples, seed 3"
    assert not chosen.flagged and not kl.flagged
    assert kl.quant.tensors != _compile(model, calib_method="max", seed=3).quant.tensors


def test_the_report_names_the_calibration_and_every_output_below_the_floor(mobilenet):
    from emu.commands import nn as nn_commands

    assert mobilenet.options["calibration"] == "4 random samples, seed 0"
    model = compiler.CompiledModel(**{**mobilenet.__dict__, "accuracy": {
        "a": 0.5, "b": 0.9999, "c": 0.98}})
    doc = nn_commands.compile_summary(model)
    accuracy = doc["accuracy"]
    assert accuracy["flagged"] == ["a", "c"] and accuracy["floor"] == compiler.ACCURACY_FLOOR
    assert accuracy["calibration"] == "4 random samples, seed 0"
    assert compiler.DEFAULT_CALIB_METHOD == "percentile"  # the figures of the README
    assert accuracy["method"] == "percentile 99.99"
    text = nn_commands.summary_text(doc)
    assert "calibration: 4 random samples, seed 0, method percentile 99.99" in text
    assert "worst output cosine 0.50000 (a)" in text
    assert "below 0.99) on a (0.50000), c (0.98000)" in text and "b (" not in text


def test_the_command_line_knows_the_library_s_methods():
    from emu.commands import nn as nn_commands
    from emu.nn import quantize

    assert nn_commands.CALIB_METHODS == quantize.CALIBRATION_METHODS
    assert nn_commands.CALIB_METHOD == compiler.DEFAULT_CALIB_METHOD
    assert nn_commands.CALIB_PERCENTILE == quantize.PERCENTILE_RANGE
    assert nn_commands.DEFAULT_PERCENTILE == quantize.DEFAULT_PERCENTILE


def test_calibration_directory(tmp_path):
    model = zoo.build("mobilenetv2", (32, 32))
    rng = np.random.default_rng(3)
    for k in range(3):
        np.save(tmp_path / f"s{k}.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    compiled = compiler.compile_model(model, "m", CompileOptions(calib_dir=tmp_path), SOC)
    assert compiled.options["calibration"] == f"3 arrays in {tmp_path}"
    np.save(tmp_path / "s9.npy", np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(InputError, match=r"s9\.npy: input"):
        compiler.compile_model(model, "m", CompileOptions(calib_dir=tmp_path), SOC)


# --- the command line --------------------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    (folder / "mnv2.onnx").write_bytes(zoo.build("mobilenetv2", (32, 32)).SerializeToString())
    (folder / "seg.onnx").write_bytes(segmented().SerializeToString())
    return folder


def test_compile_perf_json_follows_the_contract(files, capsys):
    out = files / "both.hbm"
    code = main(["compile", str(files / "mnv2.onnx"), str(files / "seg.onnx"), "-o", str(out),
                 "--calib-random", "2", "--perf", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in doc["models"]] == ["mnv2", "seg"]
    for model in doc["models"]:
        for key, kind in (("name", str), ("latency_ms", float), ("fps", float),
                          ("ddr_bytes_per_frame", (int, float)), ("layers", list)):
            assert isinstance(model[key], kind), key
        assert math.isclose(model["fps"], 1e3 / model["latency_ms"] * 1, rel_tol=1e-9)
        for layer in model["layers"]:
            assert set(layer) >= {"name", "op", "where", "ops", "compute_us",
                                  "load_store_us"}
            assert layer["where"] in ("bpu", "cpu", "dsp")
        # Where the time goes: the layers' time by kind, largest first.
        kinds = model["time_by_kind_ms"]
        assert list(kinds.values()) == sorted(kinds.values(), reverse=True)
        assert model["dominant"] == next(iter(kinds))
        assert 0 < sum(kinds.values()) <= model["latency_ms"] + 1e-5  # rounded to ns
    assert out.stat().st_size == doc["bytes"]
    # The provisional parameters the latency hangs on: each a provisional key, its
    # latencies those of the estimate with the value changed.
    resolved = load_config("j5")
    compiled = {m.name: m for m in compiler.load_file(out)}
    seen = 0
    for model in doc["models"]:
        for entry in model["sensitive_parameters"]:
            assert resolved.sources[entry["key"]].startswith("calibrated: provisional")
            for value, latency in entry["latency_ms"]:
                changed = load_config("j5", overrides=[f"{entry['key']}={value:.17g}"]).soc
                assert latency == pytest.approx(
                    compiled[model["name"]].estimate(changed).latency_ms)
                seen += 1
    assert seen


def test_compile_says_what_it_calibrated_on_and_with_which_method(files, tmp_path, capsys):
    folder = tmp_path / "calib"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for k in range(3):
        np.save(folder / f"s{k}.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    out = tmp_path / "m.hbm"
    argv = ["compile", str(files / "mnv2.onnx"), "-o", str(out), "--calib-dir", str(folder),
            "--calib-method", "percentile", "--calib-percentile", "99.9"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"calibration: 3 arrays in {folder}, method percentile 99.9" in text
    assert main([*argv, "--json"]) == 0
    accuracy = json.loads(capsys.readouterr().out)["models"][0]["accuracy"]
    assert accuracy["calibration"] == f"3 arrays in {folder}"
    assert accuracy["method"] == "percentile 99.9" and accuracy["floor"] == 0.99
    (loaded,) = compiler.load_file(out)
    assert loaded.options["calib_method"] == "percentile"
    assert loaded.options["calib_percentile"] == 99.9
    assert main(["compile", str(files / "mnv2.onnx"), "-o", str(out), "--calib-random", "2",
                 "--seed", "5", "--calib-method", "kl"]) == 0
    assert "calibration: 2 random samples, seed 5, method kl" in capsys.readouterr().out


def test_compile_text_html_and_infer(files, tmp_path, capsys):
    model = tmp_path / "m.hbm"
    page = tmp_path / "m.html"
    assert main(["compile", str(files / "mnv2.onnx"), "-o", str(model), "--calib-random", "2",
                 "--perf", "--html", str(page)]) == 0
    text = capsys.readouterr().out
    assert "static estimate of mnv2" in text and "FPS" in text and "wrote" in text
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64," in html
    image = tmp_path / "x.npy"
    np.save(image, np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32))
    outdir = tmp_path / "out"
    assert main(["infer", str(model), "--input", str(image), "--top-k", "3", "--out",
                 str(outdir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (name,) = doc["top_k"]
    assert len(doc["top_k"][name][0]) == 3
    saved = np.load(outdir / f"{name}.npy")
    (loaded,) = compiler.load_file(model)
    assert np.array_equal(saved, loaded.run({"input": np.load(image)})[name])
    scores = [r["score"] for r in doc["top_k"][name][0]]
    assert scores == sorted(scores, reverse=True) and scores[0] == saved.max()
    assert doc["simulated"]["latency_ms"] > 0


@pytest.mark.parametrize("argv, needle", [
    (["compile", "{f}/missing.onnx", "-o", "{t}/o.hbm"], "missing.onnx: no such file"),
    (["compile", "{t}/junk.onnx", "-o", "{t}/o.hbm"], "not an ONNX model"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}"], "-o"),
    (["compile", "{f}/mnv2.onnx", "{f}/mnv2.onnx", "-o", "{t}/o.hbm"], "one name"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--batch", "0"], "--batch"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--max-time-per-fc", "-1"],
     "--max-time-per-fc"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--calib-dir", "{t}/nowhere"],
     "--calib-dir"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--calib-method", "entropy"],
     "--calib-method: invalid choice: 'entropy'"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--calib-method", "percentile",
      "--calib-percentile", "101"], "--calib-percentile: expected a number from 50 to 100"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--calib-method", "percentile",
      "--calib-percentile", "nan"], "--calib-percentile"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--calib-method", "kl",
      "--calib-percentile", "99"], "--calib-percentile 99: only with --calib-method percentile"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--set", "bpu.cores=0"], "bpu.cores"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--output-type", "int32"],
     "--output-type int32: expected NAME=TYPE"),
    (["compile", "{f}/mnv2.onnx", "{f}/seg.onnx", "-o", "{t}/o.hbm", "--output-type",
      "nonesuch=int32"], "--output-type nonesuch=int32: no model has an output nonesuch"),
    (["compile", "{f}/mnv2.onnx", "-o", "{t}/o.hbm", "--output-type", "output=int4"],
     "--output-type output=int4: expected one of float, quantized, int32"),
    (["infer", "{t}/junk.onnx", "--input", "{t}/x.npy"], "not an emu model file"),
    (["infer", "{t}/trunc.hbm", "--input", "{t}/x.npy"], "trunc.hbm"),
    (["infer", "{t}/good.hbm", "--input", "{t}/junk.onnx"], "--input"),
    (["infer", "{t}/good.hbm", "--input", "{t}/wrong.npy"], "takes float32 (1, 3, 32, 32)"),
    (["infer", "{t}/good.hbm", "--input", "{t}/x.npy", "--model-name", "zz"],
     "--model-name zz"),
    (["infer", "{t}/good.hbm", "--input", "{t}/x.npy", "--top-k", "0"], "--top-k"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle, files, mobilenet, tmp_path, capsys):
    (tmp_path / "junk.onnx").write_bytes(b"\x00garbage")
    good = compiler.dumps([mobilenet])
    (tmp_path / "good.hbm").write_bytes(good)
    (tmp_path / "trunc.hbm").write_bytes(good[: len(good) // 2])
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 16, 16), np.float32))
    before = sorted(p.name for p in tmp_path.iterdir())
    args = [a.format(f=files, t=tmp_path) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle.format(f=files, t=tmp_path) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_dense_op_on_the_cpu_is_timed_by_its_macs():
    from tests.nn.nets import wide_fc
    small, large = (_compile(wide_fc(outputs=k)) for k in (16, 64))
    lines = [next(line for line in m.estimate(SOC).layers if line.op == "FC")
             for m in (small, large)]
    assert [line.where for line in lines] == ["cpu", "cpu"]
    assert [line.ops for line in lines] == [2 * 9000 * 16, 2 * 9000 * 64]
    # four times the MACs: four times the NEON issue time (the loop is the same), give or
    # take the memory stalls (the small FC's 0.6 MB of weights stay in the L3 from one
    # inference to the next, the large one's 2.3 MB do not: a table walk per page)
    assert lines[1].compute_ps == pytest.approx(4 * lines[0].compute_ps, rel=0.06)
    feeds = _feeds(small)
    assert next(iter(small.run(feeds).values())).shape == (1, 16)


def test_the_file_keeps_bpu_weights_as_int8_only(mobilenet, tmp_path):
    elided = mobilenet.elided_weights()
    float_bytes = sum(mobilenet.graph.tensors[n].value.nbytes for n in elided)
    assert float_bytes > 2_000_000  # the conv and FC weights of MobileNetV2, in float32
    size = len(compiler.dumps([mobilenet]))
    int8_bytes = sum(layer.weight.nbytes for layer in mobilenet.quant.layers.values())
    assert size < int8_bytes + float_bytes / 2


def test_int16_choice_reaches_the_codes_and_the_timing():
    onnx_model = zoo.build("mobilenetv2", (32, 32))
    never, always = (_compile(onnx_model, int16=rule) for rule in ("never", "always"))
    assert set(never.quant.tensor_dtypes().values()) == {"int8"}
    assert "int16" in set(always.quant.tensor_dtypes().values())
    assert always.estimate(SOC).bpu_ps > never.estimate(SOC).bpu_ps
    assert always.options["int16"] == "always"


def test_the_readme_bpu_example_runs_and_its_numbers_hold(tmp_path, monkeypatch, capsys):
    """The shell block of the README's "Neural networks on the BPU", line by line; the BPU
    latencies its comments quote are what the commands print. Each line runs in this
    process, in the block's folder (`emu ...` as `main`, `python -c` as its code): a process
    each cost seconds of start-up and tests nothing the block claims."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Neural networks on the BPU", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)
    quoted = []
    for line in block.strip().splitlines():
        command, _, comment = line.partition("  # ")
        if command.startswith("emu "):
            assert main(command.split()[1:]) == 0, (command, capsys.readouterr().err)
        else:
            assert command.startswith("python -c "), command
            exec(command.split('"')[1], {})
        stdout = capsys.readouterr().out
        number = re.search(r"(\d+\.\d+) ms", comment)
        if number:
            printed = re.search(r"\(BPU (\d+\.\d+) ms\)", stdout).group(1)
            quoted.append((float(number.group(1)), float(printed)))
    assert len(quoted) == 2
    for claim, printed in quoted:
        assert round(printed, len(str(claim).split(".")[1])) == claim
    assert (tmp_path / "mnv2.html").stat().st_size > 0
    assert len(list((tmp_path / "outputs").glob("*.npy"))) == 1


def test_compiling_twice_gives_the_same_bytes(mobilenet, monkeypatch):
    monkeypatch.setenv(modelcache.ENV, modelcache.OFF)  # a compile, not the cached copy
    again = _compile(zoo.build("mobilenetv2", (32, 32)), "mobilenetv2")
    assert compiler.dumps([again]) == compiler.dumps([mobilenet])


def test_an_output_type_applies_to_the_model_that_has_the_output(files, tmp_path):
    out = tmp_path / "both.hbm"
    assert main(["compile", str(files / "mnv2.onnx"), str(files / "seg.onnx"), "-o", str(out),
                 "--calib-random", "2", "--output-type", "logits=int32"]) == 0
    mnv2, seg = compiler.load_file(out)
    assert mnv2.code_outputs() == ["logits"] and seg.code_outputs() == []
    assert mnv2.options["output_types"] == [["logits", "int32"]]
    assert seg.options["output_types"] == []

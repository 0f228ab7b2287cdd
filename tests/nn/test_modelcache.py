"""The compiled-model cache: a model read back is the model compiled; the key follows
everything the costly steps read and nothing else; a damaged or unwritable cache costs a
compile, never a wrong model or an error."""

import os
from dataclasses import replace

import numpy as np
import pytest

from emu.errors import InputError
from emu.nn import compiler, modelcache, zoo
from emu.nn.compiler import CompileOptions
from emu.soc.config import load_config
from tests.nn.nets import segmented

SOC = load_config("j5", None, []).soc
OPTIONS = CompileOptions(calib_random=2, max_time_per_fc_us=20.0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    monkeypatch.setenv(modelcache.ENV, str(folder))
    return folder


def _compile(model, options=OPTIONS, soc=SOC, name="m"):
    steps = []
    compiled = compiler.compile_model(model, name, options, soc, steps.append)
    return compiled, steps


def _entries(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _same(a, b):
    assert compiler.dumps([a]) == compiler.dumps([b])
    rng = np.random.default_rng(3)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in a.inputs}
    for name, value in a.run(feeds).items():
        np.testing.assert_array_equal(value, b.run(feeds)[name])
    assert a.estimate(SOC).to_json() == b.estimate(SOC).to_json()
    assert a.function_calls == b.function_calls and a.accuracy == b.accuracy


def test_a_second_compile_reads_the_model_the_first_one_made(cache, monkeypatch, tmp_path):
    path = tmp_path / "mnv2.onnx"
    path.write_bytes(zoo.build("mobilenetv2", (32, 32)).SerializeToString())
    first, steps = _compile(path, name="first")
    assert steps[-1] == "first: check accuracy" and len(_entries(cache)) == 1
    second, steps = _compile(path, name="second")
    assert steps == ["second: import", "second: compiled before (model cache)"]
    assert second.name == "second"
    _same(replace(first, name="second"), second)
    monkeypatch.setenv(modelcache.ENV, modelcache.OFF)
    fresh, steps = _compile(path, name="second")
    assert "second: calibrate" in steps
    _same(fresh, second)


def test_a_model_given_as_onnx_in_memory_is_found_by_its_bytes(cache):
    _compile(zoo.build("mobilenetv2", (32, 32)))
    _, steps = _compile(zoo.build("mobilenetv2", (32, 32)))
    assert steps[-1].endswith("(model cache)")
    _, steps = _compile(zoo.build("mobilenetv2", (32, 32), classes=10))
    assert "m: calibrate" in steps and len(_entries(cache)) == 2


def test_an_opset_conversion_note_comes_back_with_the_model(cache):
    model = zoo.build("mobilenetv2", (32, 32))
    model.opset_import[0].version = 9
    first, _ = _compile(model)
    again, steps = _compile(model)
    assert steps[-1].endswith("(model cache)")
    assert again.notes == first.notes and "converted from opset 9" in first.notes[0]


def test_the_same_bytes_from_another_folder_read_the_entry_with_their_own_path(
        cache, monkeypatch, tmp_path):
    model = zoo.build("mobilenetv2", (32, 32))
    model.opset_import[0].version = 9
    paths = [tmp_path / folder / "mnv2.onnx" for folder in ("a", "b")]
    for path in paths:
        path.parent.mkdir()
        path.write_bytes(model.SerializeToString())
    first, _ = _compile(paths[0])
    second, steps = _compile(paths[1])
    assert steps[-1].endswith("(model cache)") and len(_entries(cache)) == 1
    assert second.notes[0].startswith(f"{paths[1]}: converted from opset 9")
    assert first.notes[0].startswith(f"{paths[0]}: converted from opset 9")
    monkeypatch.setenv(modelcache.ENV, modelcache.OFF)
    fresh, _ = _compile(paths[1])
    _same(fresh, second)


def test_the_hardware_is_not_in_the_key_and_the_cut_follows_the_session(cache, monkeypatch):
    model = zoo.build("resnet18", (32, 32))
    here, _ = _compile(model)
    slow = replace(SOC, bpu=replace(SOC.bpu, freq_hz=SOC.bpu.freq_hz // 4))
    cached, steps = _compile(model, soc=slow)
    assert steps[-1].endswith("compiled before (model cache)")
    monkeypatch.setenv(modelcache.ENV, modelcache.OFF)
    fresh, _ = _compile(model, soc=slow)
    assert cached.function_calls == fresh.function_calls
    assert cached.function_calls != here.function_calls
    assert len(_entries(cache)) == 1


@pytest.mark.parametrize("change", [
    {"calib_method": "max"}, {"seed": 1}, {"calib_random": 3}, {"int16": "always"},
    {"output_codes": True}, {"dsp_softmax": True}])
def test_an_option_the_compiler_reads_is_in_the_key(cache, change):
    model = segmented(middle=("Softmax",))
    _compile(model)
    _, steps = _compile(model, replace(OPTIONS, **change))
    assert "m: calibrate" in steps and len(_entries(cache)) == 2


def test_the_function_call_limit_is_not_in_the_key(cache):
    model = zoo.build("resnet18", (32, 32))
    first, _ = _compile(model, replace(OPTIONS, max_time_per_fc_us=0.0))
    second, steps = _compile(model, replace(OPTIONS, max_time_per_fc_us=5.0))
    assert steps[-1].endswith("(model cache)")
    assert second.options["max_time_per_fc_us"] == 5.0
    calls = [sum(map(len, m.function_calls.values())) for m in (first, second)]
    assert calls[1] > calls[0]


def test_other_weights_or_other_calibration_files_compile_afresh(cache, tmp_path):
    _compile(segmented(seed=1))
    _, steps = _compile(segmented(seed=2))
    assert "m: calibrate" in steps
    folder = tmp_path / "calib"
    folder.mkdir()
    model = segmented(seed=1)
    shape = (1, 3, 16, 16)
    np.save(folder / "a.npy", np.zeros(shape, np.float32))
    options = replace(OPTIONS, calib_dir=folder)
    assert "m: calibrate" in _compile(model, options)[1]
    assert _compile(model, options)[1][-1].endswith("(model cache)")
    np.save(folder / "a.npy", np.ones(shape, np.float32))  # same file, new contents
    assert "m: calibrate" in _compile(model, options)[1]


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "foreign"])
def test_a_damaged_entry_is_compiled_again_and_replaced(cache, damage):
    model = segmented()
    good, _ = _compile(model)
    (entry,) = cache.iterdir()
    data = entry.read_bytes()
    entry.write_bytes({"truncate": data[:len(data) // 2],
                       "flip": data[:100] + bytes([data[100] ^ 1]) + data[101:],
                       "empty": b"", "foreign": b"PK\3\4" + data[4:]}[damage])
    again, steps = _compile(model)
    assert "m: calibrate" in steps
    _same(good, again)
    assert entry.read_bytes() == data


def test_a_cache_that_cannot_be_written_leaves_compiling_alone(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(modelcache.ENV, str(blocker / "models"))
    model, steps = _compile(segmented())
    assert "m: calibrate" in steps and blocker.read_text() == "not a folder"
    assert model.run  # compiled all the same
    assert model.accuracy and model.function_calls


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(modelcache.ENV, "OFF")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _compile(segmented())
    assert not any(tmp_path.iterdir())


def test_the_default_folder_is_under_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(modelcache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert modelcache.folder() == tmp_path / "emu" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert modelcache.folder() == tmp_path / ".cache" / "emu" / "models"


def test_trimming_removes_the_least_recently_used_entries_first(tmp_path):
    for k, name in enumerate(["old", "middle", "new"]):
        path = tmp_path / (name + modelcache.SUFFIX)
        path.write_bytes(b"x" * 100)
        os.utime(path, ns=(k * 10**9, k * 10**9))
    (tmp_path / ("other.txt")).write_bytes(b"y" * 1000)  # not an entry: left alone
    modelcache.trim(tmp_path, 250)
    assert _entries(tmp_path) == ["middle.emu", "new.emu", "other.txt"]
    modelcache.trim(tmp_path, 0)
    assert _entries(tmp_path) == ["other.txt"]


def test_reading_an_entry_marks_it_used(cache):
    cache.mkdir()
    path = cache / ("k" + modelcache.SUFFIX)
    path.write_bytes(b"data")
    os.utime(path, ns=(0, 0))
    assert modelcache.load("k") == b"data"
    assert path.stat().st_mtime_ns > 0
    assert modelcache.load("missing") is None


def test_the_source_digest_follows_every_source_file(tmp_path):
    package = tmp_path / "emu"
    (package / "nn").mkdir(parents=True)
    (package / "nn" / "quantize.py").write_text("A = 1\n")
    (package / "other.txt").write_text("not source")
    first = modelcache.source_digest.__wrapped__(package)
    (package / "other.txt").write_text("changed, still not source")
    assert modelcache.source_digest.__wrapped__(package) == first
    (package / "nn" / "quantize.py").write_text("A = 2\n")
    assert modelcache.source_digest.__wrapped__(package) != first
    assert len(modelcache.source_digest()) == 64


def _external(folder, model, location="weights.bin"):
    import onnx
    folder.mkdir(exist_ok=True)
    onnx.save(model, folder / "m.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location=location, size_threshold=0)
    return folder / "m.onnx"


def test_weights_in_an_external_file_are_read_from_the_models_folder_and_keyed(
        cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the model's folder
    path = _external(tmp_path / "model", segmented(seed=1))
    first, steps = _compile(path)
    assert "m: calibrate" in steps
    monkeypatch.setenv(modelcache.ENV, modelcache.OFF)
    inline = tmp_path / "inline.onnx"
    inline.write_bytes(segmented(seed=1).SerializeToString())
    _same(first, _compile(inline)[0])
    monkeypatch.setenv(modelcache.ENV, str(cache))
    assert _compile(path)[1][-1].endswith("(model cache)")
    _external(tmp_path / "model", segmented(seed=2))  # same .onnx file, other weights
    assert "m: calibrate" in _compile(path)[1]


def test_external_data_that_is_missing_or_outside_the_folder_is_one_line(cache, tmp_path):
    import onnx
    path = _external(tmp_path / "model", segmented())
    (tmp_path / "model" / "weights.bin").unlink()
    with pytest.raises(InputError, match=r"m\.onnx: cannot read its external data: "):
        _compile(path)
    model = onnx.load(_external(tmp_path / "other", segmented()), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../other/weights.bin"
    (tmp_path / "model" / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(InputError, match="cannot read its external data") as caught:
        _compile(path)
    assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match="keeps its data in an external file"):
        _compile(model)  # in memory: no folder to read it from

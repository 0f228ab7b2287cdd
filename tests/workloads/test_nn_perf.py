"""`emu perf`: the contract, two cores against one, determinism, bad input."""

import json

import pytest

from emu.cli.main import main
from emu.nn import compiler, zoo
from emu.soc.config import load_config
from emu.workloads import nn_perf


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    soc = load_config().soc
    model = compiler.compile_model(zoo.build("resnet18", (64, 64)), "r18",
                                   compiler.CompileOptions(calib_random=2), soc)
    path = tmp_path_factory.mktemp("perf") / "r18.hbm"
    path.write_bytes(compiler.dumps([model]))
    return path


def test_two_cores_give_twice_the_fps_of_one_at_the_same_latency(model_file):
    one = nn_perf.run_perf(model_file, None, 1, 1, 40, 0)
    both = nn_perf.run_perf(model_file, None, 2, 0, 40, 0)
    assert both["fps"] == pytest.approx(2 * one["fps"], rel=0.1)
    assert both["latency_ms"]["avg"] == pytest.approx(one["latency_ms"]["avg"], rel=0.1)
    # more threads than cores: throughput stays, latency grows with the queue
    many = nn_perf.run_perf(model_file, None, 8, 1, 40, 0)
    assert many["fps"] == pytest.approx(one["fps"], rel=0.1)
    assert many["latency_ms"]["p50"] > 4 * one["latency_ms"]["p50"]
    (bpu,) = [s for s in many["profile"]["segments"] if s["device"] == "bpu"]
    assert bpu["pending_ms"] > 0


def test_the_json_follows_the_contract_and_is_deterministic(model_file, capsys, tmp_path):
    argv = ["perf", str(model_file), "--thread-num", "3", "--frame-count", "10", "--json",
            "--profile", str(tmp_path / "p.json")]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    doc = json.loads(first)
    assert {"model", "threads", "core_id", "frames", "latency_ms", "fps", "profile"} <= set(doc)
    assert set(doc["latency_ms"]) == {"avg", "min", "max", "p50", "p99"}
    assert doc["frames"] == 10 and doc["threads"] == 3 and doc["core_id"] == 0
    assert json.loads((tmp_path / "p.json").read_text()) == doc["profile"]
    kinds = [s["kind"] for s in doc["profile"]["segments"]]
    assert kinds == ["quantize", "layout", "cache", "bpu", "cache", "dequantize"]


@pytest.mark.parametrize("argv, needle", [
    (["perf", "{t}/none.hbm"], "none.hbm: no such file"),
    (["perf", "{m}", "--model-name", "zz"], "--model-name zz"),
    (["perf", "{m}", "--thread-num", "0"], "--thread-num"),
    (["perf", "{m}", "--frame-count", "0"], "--frame-count"),
    (["perf", "{m}", "--priority", "300"], "--priority"),
    (["perf", "{m}", "--profile", "{t}"], "--profile"),
    (["perf", "{t}/junk.hbm"], "not an emu model file"),
])
def test_bad_input(argv, needle, model_file, tmp_path, capsys):
    (tmp_path / "junk.hbm").write_bytes(b"junk")
    args = [a.format(t=tmp_path, m=model_file) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle.format(t=tmp_path) in err, err

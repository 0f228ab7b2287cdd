import json

import numpy as np

from emu.cli.main import main
from emu.workloads.lidar import write_bin
from tests.report.test_trace import validate_chrome_trace


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_follows_the_contract_and_dumps_are_written(tmp_path, capsys):
    dump = tmp_path / "dump"
    trace = tmp_path / "trace.json"
    code, out, _ = _run(capsys, "pointcloud", "--model", "centerpoint", "--synthetic", "2",
                        "--points", "3000", "--json", "--dump", str(dump), "--dump-format",
                        "both", "--trace", str(trace), "--impl", "dsp2", "--impl", "cpu")
    assert code == 0
    doc = json.loads(out)
    assert doc["model"] == "centerpoint" and doc["preset"] == "j5"
    assert set(doc) == {"model", "preset", "frames", "summary", "wall_s", "provenance"}
    frame = doc["frames"][0]
    assert frame["frame"] == "synthetic-0" and frame["points_read"] == 3000
    assert {"points_dropped", "points_valid", "points_kept", "pillars"} <= set(frame)
    assert set(frame["impls"]) == {"cpu", "dsp2"}
    assert set(frame["impls"]["dsp2"]["stages"]) == {"dsp_stage1", "cpu_voxelize", "dsp_stage2"}
    assert set(frame["impls"]["cpu"]["stages"]) == {"cpu_voxelize", "cpu_encode",
                                                   "cpu_transpose"}
    stages = frame["impls"]["cpu"]["stages"]
    assert abs(sum(stages.values()) - frame["impls"]["cpu"]["total_ms"]) < 1e-5
    assert set(doc["summary"]["cpu"]) == {"avg_ms", "max_ms", "min_ms"}
    features = np.load(dump / "synthetic-1" / "dsp2" / "features.npy")
    coords = np.load(dump / "synthetic-1" / "cpu" / "coords.npy")
    assert features.shape == (1, 5, 20, 40000) and features.dtype == np.int8
    assert coords.shape == (1, 1, 40000, 4) and coords.dtype == np.int32
    text = (dump / "synthetic-1" / "cpu" / "features.txt").read_text().split("\n")
    assert len(text) == features.size + 1 and text[-1] == ""
    assert np.array_equal(np.array(text[:-1], dtype=np.int8), features.reshape(-1))
    validate_chrome_trace(json.loads(trace.read_text()))


def test_input_files_pointpillars_and_a_dropped_point_warning(tmp_path, capsys):
    rng = np.random.default_rng(0)
    points = rng.uniform(-10, 60, (150_010, 4)).astype(np.float32)
    path = tmp_path / "scan.bin"
    write_bin(path, points)
    code, out, err = _run(capsys, "pointcloud", "--model", "pointpillars", "--input", str(path),
                          "--impl", "dsp2", "--json")
    assert code == 0
    frame = json.loads(out)["frames"][0]
    assert frame["frame"] == "scan" and frame["points_dropped"] == 10
    assert "10 dropped" in err


def test_bad_input_file_exits_2_naming_it_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "torn.bin"
    bad.write_bytes(b"\0" * 21)
    dump = tmp_path / "dump"
    code, out, err = _run(capsys, "pointcloud", "--model", "centerpoint", "--input", str(bad),
                          "--dump", str(dump))
    assert code == 2 and out == "" and "torn.bin" in err and err.count("\n") == 1
    assert not dump.exists()
    code, _, err = _run(capsys, "pointcloud", "--model", "centerpoint", "--input", str(bad),
                        "--points", "5")
    assert code == 2 and "--points" in err


def _stages(capsys, *sets):
    argv = ["pointcloud", "--model", "centerpoint", "--synthetic", "1", "--points", "20000",
            "--json", "--impl", "dsp2", "--impl", "dsp1"]
    for s in sets:
        argv += ["--set", s]
    code, out, _ = _run(capsys, *argv)
    assert code == 0
    impls = json.loads(out)["frames"][0]["impls"]
    return {impl: impls[impl]["stages"] for impl in impls}


def test_dsp_clock_moves_only_dsp_stages_and_dsp1_is_slower_than_dsp2(capsys):
    base = _stages(capsys)
    fast = _stages(capsys, "vdsp.freq_hz=1296MHz")
    for impl in ("dsp1", "dsp2"):
        assert fast[impl]["cpu_voxelize"] == base[impl]["cpu_voxelize"]
        assert fast[impl]["dsp_stage1"] < base[impl]["dsp_stage1"]
        assert fast[impl]["dsp_stage2"] < base[impl]["dsp_stage2"]
    assert sum(base["dsp1"].values()) > sum(base["dsp2"].values())
    slow_ddr = _stages(capsys, "ddr.latency_ps=400ns")
    assert slow_ddr["dsp2"]["cpu_voxelize"] > base["dsp2"]["cpu_voxelize"]

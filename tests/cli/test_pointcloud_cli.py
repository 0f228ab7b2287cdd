import json

import numpy as np
import pytest

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
    assert set(doc) == {"model", "preset", "frames", "summary", "wall_s", "provenance",
                        # the envelope every command's report has (emu.commands.report)
                        "command", "arguments", "config", "wall_clock"}
    assert doc["wall_s"] == doc["wall_clock"]["wall_s"]
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
                          "--columns", "5", "--dump", str(dump))
    assert code == 2 and out == "" and "torn.bin" in err and err.count("\n") == 1
    assert "size 21 bytes is not a multiple of 20" in err
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


# ----- input files: read with their format's values per point (issue 24, item 6) -----------


def _cloud(rows: int, columns: int, seed: int = 0) -> np.ndarray:
    """Points inside both models' boxes, `columns` values each."""
    rng = np.random.default_rng(seed)
    points = rng.uniform(0.5, 30.0, (rows, columns)).astype(np.float32)
    points[:, 2] = rng.uniform(-2.5, 0.5, rows)
    points[:, 3] = rng.uniform(0.0, 1.0, rows)
    if columns > 4:
        points[:, 4] = rng.uniform(0.0, 0.5, rows)  # a sweep time lag, in s
    return points


def _points_read(capsys, *argv):
    code, out, err = _run(capsys, "pointcloud", *argv, "--impl", "dsp2", "--json")
    assert code == 0, err
    frame = json.loads(out)["frames"][0]
    return frame["points_read"], frame["columns"], err


def test_a_bin_holds_the_models_values_a_point_and_a_kitti_file_misread_is_flagged(
        tmp_path, capsys):
    path = tmp_path / "000001.bin"
    write_bin(path, _cloud(1000, 4))  # 16,000 bytes: also a whole number of 5-value points
    assert _points_read(capsys, "--model", "pointpillars", "--input", str(path)) == (
        1000, 4, "")
    # Spec §2: a .bin holds the model's values a point, so centerpoint reads 5: the file's
    # 4-value points become 800, and the 5th value (t) gives the misreading away.
    read, columns, err = _points_read(capsys, "--model", "centerpoint", "--input", str(path))
    assert (read, columns) == (800, 5) and err.count("\n") == 1
    assert "000001" in err and "--columns 4" in err and "warning" in err
    code, out, err = _run(capsys, "pointcloud", "--model", "centerpoint", "--input", str(path),
                          "--columns", "4")
    assert code == 2 and out == "" and err.count("\n") == 1 and "centerpoint reads 5" in err
    # A real 5-value file (t within a sweep's half second) is read without a word.
    write_bin(path, _cloud(1000, 5))
    assert _points_read(capsys, "--model", "centerpoint", "--input", str(path)) == (
        1000, 5, "")


def test_a_pcd_bin_is_read_with_5_values_a_point(tmp_path, capsys):
    path = tmp_path / "sweep.pcd.bin"
    write_bin(path, _cloud(1000, 5))  # 20,000 bytes: also a whole number of 4-value points
    assert _points_read(capsys, "--model", "centerpoint", "--input", str(path)) == (
        1000, 5, "")
    read, columns, err = _points_read(capsys, "--model", "pointpillars", "--input", str(path))
    assert (read, columns) == (1000, 5)
    assert err == "emu: note: sweep.pcd: 5 values a point, pointpillars reads the first 4\n"


def test_pointpillars_on_a_5_value_file_takes_its_first_4_values(tmp_path, capsys):
    points = _cloud(700, 5)
    write_bin(tmp_path / "a.pcd.bin", points)
    write_bin(tmp_path / "b.bin", points[:, :4])
    dumps = []
    for name in ("a.pcd.bin", "b.bin"):
        dumps.append(tmp_path / name.replace(".", "_"))
        code, _, _ = _run(capsys, "pointcloud", "--model", "pointpillars", "--input",
                          str(tmp_path / name), "--impl", "cpu", "--dump", str(dumps[-1]))
        assert code == 0
    for tensor in ("features", "coords"):
        assert np.array_equal(np.load(dumps[0] / "a.pcd" / "cpu" / f"{tensor}.npy"),
                              np.load(dumps[1] / "b" / "cpu" / f"{tensor}.npy"))


def test_columns_overrides_the_name(tmp_path, capsys):
    # the board sample's nuScenes files: merged sweeps, 5 values a point, named *.bin
    path = tmp_path / "49f8376cd6b34f07b20ed6d5b5b42acd.bin"
    write_bin(path, _cloud(1200, 5))
    assert _points_read(capsys, "--model", "centerpoint", "--input", str(path)) == (
        1200, 5, "")
    assert _points_read(capsys, "--model", "pointpillars", "--input", str(path), "--columns",
                        "5")[:2] == (1200, 5)
    other = tmp_path / "scan.dat"  # a name no format claims
    write_bin(other, _cloud(300, 6))
    code, out, err = _run(capsys, "pointcloud", "--model", "pointpillars", "--input", str(other))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "scan.dat" in err and "--columns" in err
    read, columns, err = _points_read(capsys, "--model", "pointpillars", "--input", str(other),
                                      "--columns", "6")
    assert (read, columns) == (300, 6) and "reads the first 4" in err


@pytest.mark.parametrize(("argv", "needles"), [
    (["--model", "pointpillars", "--input", "{t}/k.bin", "--columns", "3"],
     ["--columns 3", "pointpillars reads 4 values a point"]),
    (["--model", "centerpoint", "--input", "{t}/k.bin", "--columns", "4"],
     ["--columns 4", "centerpoint reads 5"]),
    (["--model", "pointpillars", "--input", "{t}/k.bin", "--columns", "0"], ["--columns"]),
    (["--model", "pointpillars", "--synthetic", "1", "--columns", "4"],
     ["--columns", "--input"]),
    (["--model", "centerpoint", "--input", "{t}/k.pcd.bin"],
     ["k.pcd.bin", "not a multiple of 20"]),
    (["--model", "pointpillars", "--input", "{t}/k.bin", "--columns", "7"],
     ["k.bin", "not a multiple of 28"]),
])
def test_bad_columns_exit_2_with_one_line(tmp_path, capsys, argv, needles):
    write_bin(tmp_path / "k.bin", _cloud(11, 4))  # 176 bytes: 11 x 16, not n x 20 or n x 28
    write_bin(tmp_path / "k.pcd.bin", _cloud(11, 4))
    code, out, err = _run(capsys, "pointcloud", *[a.format(t=tmp_path) for a in argv],
                          "--impl", "cpu")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert all(n.format(t=tmp_path) in err for n in needles), err


# ----- points dropped by the pillars' limits ----------------------------------------------


def test_the_report_says_how_many_points_each_limit_dropped(tmp_path, capsys):
    """PointPillars: 12,000 pillars of 100 points. 12,010 distinct cells of one point, then
    150 more points in the first cell and 30 in the last: the last 11 cells share pillar
    11999 (11 points kept there, the later 30 kept until it holds 100: all 41 fit), and the
    first cell keeps 100 of its 151."""
    x_len = 432
    cells = np.arange(12_010)
    rows = np.zeros((12_010 + 180, 4), np.float32)
    rows[:12_010, 0] = (cells % x_len + 0.5) * 0.16
    rows[:12_010, 1] = -39.68 + (cells // x_len + 0.5) * 0.16
    rows[12_010:12_160] = rows[0]
    rows[12_160:] = rows[12_009]
    rows[:, 2] = -1.0
    path = tmp_path / "crowded.bin"
    write_bin(path, rows)
    code, out, err = _run(capsys, "pointcloud", "--model", "pointpillars", "--input", str(path),
                          "--impl", "dsp2", "--json")
    assert code == 0
    frame = json.loads(out)["frames"][0]
    assert {k: frame[k] for k in ("points_read", "points_valid", "points_kept", "pillars",
                                  "cells", "points_dropped", "points_dropped_max_pillars",
                                  "points_dropped_max_points_per_pillar")} == {
        "points_read": 12_190, "points_valid": 12_190, "points_kept": 12_139,
        "pillars": 12_000, "cells": 12_010, "points_dropped": 0,
        "points_dropped_max_pillars": 0, "points_dropped_max_points_per_pillar": 51}
    assert err == ""
    # 60 more points of the last cells: pillar 11999 now has 11 + 90 = 101 for 100 slots
    rows = np.concatenate([rows, np.repeat(rows[12_005:12_007], 30, axis=0)])
    write_bin(path, rows)
    code, out, err = _run(capsys, "pointcloud", "--model", "pointpillars", "--input", str(path),
                          "--impl", "dsp2")
    assert code == 0
    assert err == ("emu: warning: crowded: 12010 cells, more than max pillars 12000: the cells "
                   "past it share the last pillar, 1 points dropped\n")
    table = out[out.index("points per frame"):].splitlines()
    assert "drop: pillar cap" in table[1]
    assert table[3].split() == ["crowded", "12250", "12250", "12198", "12000", "12010", "0",
                                "1", "51"]

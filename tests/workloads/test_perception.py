"""The perception scenario: cameras and a LiDAR sharing the SoC through hbDNN, hbDSP, hbSys.

The models are compiled once per process (`perception.compiled` keeps them), so only the
first run here pays for compiling; small inputs and sweeps keep every run short.
"""

import json

import pytest

from emu.cli.main import main
from emu.nn import compiler, zoo
from emu.soc.config import load_config
from emu.workloads import perception
from emu.workloads.perception import PerceptionParams

SMALL = ["--cameras", "2", "--fps", "30", "--lidar-hz", "20", "--seconds", "0.1",
         "--input-size", "320", "--points", "10000"]
LATENCY_KEYS = {"avg", "p50", "p99", "max", "min"}
SPLITS = {"camera": {"bpu", "cpu", "other"},
          "lidar": {"preprocess", "backbone", "backbone_bpu", "backbone_bpu_queue", "backlog"}}
# The parts of a frame that add up to its latency (the others are "of which" parts).
SUMS = {"camera": ("bpu", "cpu", "other"), "lidar": ("preprocess", "backbone", "backlog")}


def _run(capsys, *argv):
    code = main(["scenario", "perception", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The JSON report of a small run through the command line, and its trace's bytes."""
    trace = tmp_path_factory.mktemp("perception") / "trace.json"
    code = main(["scenario", "perception", *SMALL, "--json", "--trace", str(trace)])
    assert code == 0
    return trace


def test_the_json_report_has_every_documented_field(capsys):
    code, out, _ = _run(capsys, *SMALL, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["command"] == "scenario perception"
    results = doc["results"]
    assert set(results) == {"params", "models", "pipelines", "busy_ms", "utilisation",
                            "sim_time_ms"}
    assert results["params"]["cameras"] == 2 and results["params"]["input_size"] == 320
    assert [(m["name"], m["input"], m["input_type"]) for m in results["models"]] == [
        ("yolov8n", [1, 480, 320], "nv12"), ("centerpoint_pillars", [1, 64, 512, 512],
                                             "featuremap")]
    assert all(m["function_calls"] >= 1 and m["max_time_per_fc_us"] == 0
               for m in results["models"])
    pipelines = results["pipelines"]
    assert [(p["pipeline"], p["kind"], p["frames"]) for p in pipelines] == [
        ("cam0", "camera", 3), ("cam1", "camera", 3), ("lidar", "lidar", 2)]
    for p in pipelines:
        assert set(p) == {"pipeline", "kind", "priority", "period_ms", "frames", "latency_ms",
                          "deadline_misses", "stages_ms", "model_time", "per_frame"}
        # The model's busy time by kind adds up to its busy time; the BPU's part is the
        # split's.
        by_kind = p["model_time"]["by_kind_ms"]
        assert p["model_time"]["dominant"] == max(by_kind, key=lambda k: by_kind[k])
        bpu_key = "bpu" if p["kind"] == "camera" else "backbone_bpu"
        assert by_kind["bpu"] == pytest.approx(p["stages_ms"][bpu_key], abs=1e-5)
        assert set(p["latency_ms"]) == LATENCY_KEYS
        assert set(p["stages_ms"]) == SPLITS[p["kind"]]
        lat = [f["latency_ms"] for f in p["per_frame"]]
        assert p["latency_ms"]["max"] == max(lat) and p["latency_ms"]["p99"] == max(lat)
        assert p["deadline_misses"] == sum(x > p["period_ms"] for x in lat)
        for frame in p["per_frame"]:
            parts = sum(frame[f"{key}_ms"] for key in SUMS[p["kind"]])
            assert parts == pytest.approx(frame["latency_ms"], abs=1e-5)
    lidar = pipelines[-1]["stages_ms"]
    assert lidar["preprocess"] > 0 and lidar["backbone"] > lidar["backbone_bpu"] > 0
    for cores, count in (("bpu", 2), ("dsp", 2), ("a55", 8)):
        assert len(results["utilisation"][cores]) == len(results["busy_ms"][cores]) == count
        assert max(results["utilisation"][cores]) > 0  # the DSP: the LiDAR preprocessing


def test_the_text_output_has_a_row_per_pipeline(capsys):
    code, out, _ = _run(capsys, *SMALL)
    assert code == 0
    rows = [line.split()[0] for line in out.splitlines()
            if line.startswith(("cam", "lidar "))]
    assert rows == ["cam0", "cam1", "lidar"]
    assert "utilisation per core: BPU" in out and "DSP" in out and "A55" in out


def test_two_runs_give_identical_json_and_trace(report, tmp_path, capsys):
    capsys.readouterr()
    again = tmp_path / "trace.json"
    code, first, _ = _run(capsys, *SMALL, "--json")
    code2, second, _ = _run(capsys, *SMALL, "--json", "--trace", str(again))
    assert code == code2 == 0 and first == second
    assert again.read_bytes() == report.read_bytes()
    assert json.loads(again.read_text())


def test_a_preempting_lidar_waits_less_for_the_bpu_and_the_cameras_pay():
    """Eight synchronised cameras make a burst of BPU tasks every frame. At equal
    priorities the BPU serves tasks in submission order, so a LiDAR backbone that comes
    during a burst waits for the whole burst. At priority 255, with the detector cut into
    function calls of 300 us, it takes the next function-call boundary: its BPU queueing
    and its p99 latency drop, and the cameras' latency rises (their cut model is slower,
    and the backbone now overtakes them)."""
    base = {"cameras": 8, "fps": 60.0, "sync": True, "lidar_hz": 20.0, "seconds": 0.2,
            "input_size": 320, "points": 20000}
    equal, _ = perception.run(PerceptionParams(**base))
    urgent, _ = perception.run(PerceptionParams(**base, lidar_priority=255,
                                                camera_max_time_per_fc=300))

    def lidar(results):
        return results["pipelines"][-1]

    def camera_p99(results):
        return max(p["latency_ms"]["p99"] for p in results["pipelines"][:-1])

    assert urgent["models"][0]["function_calls"] > equal["models"][0]["function_calls"] == 1
    queued = [max(f["backbone_bpu_queue_ms"] for f in lidar(r)["per_frame"])
              for r in (equal, urgent)]
    assert queued[1] < queued[0]
    assert lidar(urgent)["latency_ms"]["p99"] < lidar(equal)["latency_ms"]["p99"]
    assert camera_p99(urgent) > camera_p99(equal)


def test_the_cut_of_a_kept_model_is_what_the_compiler_makes():
    hardware = load_config().soc
    kept = perception.compiled("yolov8n", (64, 64), "nv12", 5, hardware)
    options = compiler.CompileOptions(input_type="nv12", calib_random=1,
                                      max_time_per_fc_us=5)
    fresh = compiler.compile_model(zoo.build("yolov8n", (64, 64)), "yolov8n", options,
                                   hardware)
    assert kept.function_calls == fresh.function_calls
    assert max(len(calls) for calls in kept.function_calls.values()) > 1
    assert kept.options == fresh.options


@pytest.mark.parametrize(("argv", "needle"), [
    (["--input-size", "100"], "--input-size 100"),
    (["--cameras", "17"], "--cameras"),
    (["--lidar-priority", "256"], "--lidar-priority"),
    (["--fps", "0"], "--fps"),
    (["--camera-max-time-per-fc", "-1"], "--camera-max-time-per-fc"),
    (["--points", "many"], "--points"),
])
def test_bad_options_exit_2_with_one_line(capsys, argv, needle):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_params_refuse_what_the_command_line_cannot_say():
    with pytest.raises(ValueError, match="lidar_hz"):
        PerceptionParams(lidar_hz=float("nan"))
    with pytest.raises(ValueError, match="points"):
        PerceptionParams(points=300_001)


def test_where_the_time_goes_names_the_largest_kind_of_work():
    from types import SimpleNamespace

    from emu.workloads.perception import _Frame, where_time_goes

    frames = [_Frame(0, 0, model_kinds={"bpu": 2_000_000_000, "quantize": 6_000_000_000}),
              _Frame(1, 0, model_kinds={"bpu": 4_000_000_000, "cache": 1_000_000_000})]
    found = where_time_goes(SimpleNamespace(frames=frames))
    assert found == {"by_kind_ms": {"bpu": 3.0, "quantize": 3.0, "cache": 0.5},
                     "dominant": "bpu"}  # a tie goes to the first name
    frames[1].model_kinds["quantize"] = 1_000_000_000
    assert where_time_goes(SimpleNamespace(frames=frames))["dominant"] == "quantize"


def test_the_camera_model_is_an_option_refused_outside_the_detectors():
    assert PerceptionParams().camera_model == "yolov8n"  # the default: the figures above
    assert PerceptionParams(camera_model="yolov8s").camera_model == "yolov8s"
    with pytest.raises(ValueError, match="camera_model 'resnet18': expected one of"):
        PerceptionParams(camera_model="resnet18")

import json
import subprocess
import sys

import pytest

import emu
from emu.cli.main import main
from emu.commands.report import ENVELOPE, results_of, without_wall_clock
from tests.report.test_trace import validate_chrome_trace


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_config_show_json_satisfies_the_contract(capsys):
    code, out, err = _run(capsys, "config", "show", "--json")
    assert code == 0 and err == ""
    cfg = json.loads(out)
    assert {"cpu", "bpu", "vdsp", "ddr", "mem"} <= set(cfg)
    assert cfg["bpu"]["cores"] == 2 and cfg["vdsp"]["cores"] == 2
    assert cfg["vdsp"]["tcm"]["banks"] == 2 and cfg["vdsp"]["tcm"]["bank_bytes"] == 131072


def test_config_show_json_says_where_every_value_comes_from(capsys):
    code, out, _ = _run(capsys, "config", "show", "--json", "--set", "vdsp.freq_hz=800MHz")
    assert code == 0
    doc = json.loads(out)
    cfg = results_of(doc)  # the configuration blocks, and where each value comes from
    provenance = cfg.pop("sources")
    assert "config" not in doc  # the results are the configuration: it is not repeated
    assert doc["provenance"]["overrides"] == ["vdsp.freq_hz=800MHz"]

    def leaves(tree, prefix=""):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"

    assert set(provenance) == set(leaves(cfg))  # every value, and nothing else
    assert provenance["vdsp.freq_hz"]["source"].startswith("override: --set")
    assert provenance["vdsp.tcm.banks"]["source"].startswith("documented: seed 001")
    assert all(p["source"].split(":")[0] in ("documented", "calibrated", "override")
               and p["description"] for p in provenance.values())


def test_config_show_applies_set(capsys):
    code, out, _ = _run(capsys, "config", "show", "--json", "--set", "vdsp.cores=3")
    assert code == 0 and json.loads(out)["vdsp"]["cores"] == 3


def test_config_show_table_has_units_and_sources(capsys):
    code, out, _ = _run(capsys, "config", "show", "--set", "vdsp.freq_hz=800MHz")
    assert code == 0
    line = next(row for row in out.splitlines() if row.startswith("vdsp.freq_hz "))
    assert "800 MHz" in line and "override: --set" in line


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["config", "show", "--set", "nosuch.key=1"], "nosuch.key"),
        (["config", "show", "--set", "vdsp.freq_hz=12KiB"], "vdsp.freq_hz"),
        (["config", "show", "--set", "bpu.cores=0"], "bpu.cores"),
        (["config", "show", "--preset", "j9"], "j9"),
        (["config", "show", "--config", "/nonexistent/x.toml"], "/nonexistent/x.toml"),
        (["scenario", "cameras", "--frames", "0"], "frames"),
        (["scenario", "cameras", "--trace", "/nonexistent/dir/t.json"], "/nonexistent/dir"),
        (["frobnicate"], "frobnicate"),
        (["scenario", "cameras", "--fps", "fast"], "--fps"),
    ],
)
def test_user_errors_exit_2_with_one_line_naming_the_culprit(capsys, argv, needle):
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and needle in err
    assert "Traceback" not in err


def test_no_partial_trace_file_on_error(tmp_path, capsys):
    trace = tmp_path / "t.json"
    code, _, _ = _run(capsys, "scenario", "cameras", "--trace", str(trace), "--set", "bpu.cores=0")
    assert code == 2
    assert list(tmp_path.iterdir()) == []


def test_scenario_json_and_trace(tmp_path, capsys):
    trace = tmp_path / "t.json"
    code, out, _err = _run(capsys, "scenario", "cameras", "--frames", "2", "--fps", "60",
                          "--json", "--trace", str(trace))
    assert code == 0
    report = json.loads(out)
    assert [c["frames"] for c in report["results"]["cameras"]] == [2, 2]
    assert report["config"]["bpu"]["cores"] == 2
    assert report["stats"]["bpu"]["tasks_done"] == 4
    doc = json.loads(trace.read_text())
    validate_chrome_trace(doc)
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"core0", "core1", "ddr", "cam0", "cam1", "core0.idma.ch0"} <= threads


def test_scenario_cameras_reports_p99_and_misses_and_sync_uses_both_bpu_cores(capsys):
    reports = {}
    for sync in ([], ["--sync"]):
        code, out, _ = _run(capsys, "scenario", "cameras", "--cameras", "2", "--fps", "30",
                            "--json", *sync)
        assert code == 0
        reports[bool(sync)] = json.loads(out)
    for report in reports.values():
        for camera in report["results"]["cameras"]:
            assert {"p50", "p99", "max"} <= set(camera["latency_ms"])
            assert camera["deadline_misses"] == 0
            assert set(camera["stages_ms"]) == {"cpu", "bpu", "dsp", "wait"}
        threads = [t["name"] for t in report["stats"]["host"]["threads"]]
        assert threads == ["main", "cam0", "cam1"]
        assert report["stats"]["vdsp"]["tasks_done"] == 16  # hbDSPRpc, one per frame
    assert reports[False]["results"]["bpu_busy_ms"][1] == 0
    assert min(reports[True]["results"]["bpu_busy_ms"]) > 0
    assert min(reports[True]["stats"]["bpu"]["utilisation"]) > 0


def test_scenarios_come_from_one_registry(request, capsys):
    from emu.workloads import scenarios

    stub = scenarios.Scenario("stub", "sleeps; a test's scenario", "tests.cli.scenario_stub",
                              (scenarios.Option("ms", float, 1.0, "how long", (0, 1e6)),
                               scenarios.Option("loud", bool, False, "a switch")))
    scenarios.register(stub)
    request.addfinalizer(lambda: scenarios._REGISTRY.remove("stub"))
    code, out, _ = _run(capsys, "list", "--json")
    assert {"kind": "scenario", "name": "stub", "description": stub.description} in \
        json.loads(out)["items"]
    code, out, _ = _run(capsys, "scenario", "stub", "--ms", "2.5", "--loud", "--json")
    report = json.loads(out)
    assert code == 0 and report["results"] == {"slept_ms": 2.5, "loud": True}
    assert report["command"] == "scenario stub" and report["stats"]["sim_time_ps"] == 2_500_000_000
    code, out, _ = _run(capsys, "scenario", "stub")
    assert code == 0 and "slept ms" in out and "a note" in out
    with pytest.raises(ValueError, match="registered already"):
        scenarios.register(stub)


def test_same_scenario_twice_gives_identical_report_and_trace(tmp_path, capsys):
    outputs = []
    for run in range(2):
        trace = tmp_path / f"t{run}.json"
        code, out, _ = _run(capsys, "scenario", "cameras", "--cameras", "3", "--frames", "3",
                            "--fps", "400", "--json", "--trace", str(trace), "--seed", "7")
        assert code == 0
        outputs.append((_without_wall_clock(out), trace.read_bytes()))
    assert outputs[0] == outputs[1]
    _, other, _ = _run(capsys, "scenario", "cameras", "--cameras", "3", "--frames", "3",
                       "--fps", "400", "--json", "--seed", "8")
    assert json.loads(other)["results"] != json.loads(outputs[0][0])["results"]


def test_list_names_presets_scenarios_and_policies(capsys):
    code, out, _ = _run(capsys, "list", "--json")
    assert code == 0
    items = {(i["kind"], i["name"]) for i in json.loads(out)["items"]}
    assert {("preset", "j5"), ("scenario", "cameras"), ("ddr.policy", "fair"),
            ("dsp operator", "0x400 softmax")} <= items


def test_help_is_instant_and_imports_no_heavy_module():
    code = ("import sys; from emu.cli.main import main; main(['--help']); "
            "heavy = {'numpy', 'numba', 'simpy'} & set(sys.modules); "
            "sys.stderr.write(repr(sorted(heavy)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert "usage: emu" in done.stdout
    assert done.stderr == "[]"


def test_python_dash_m_emu_is_the_same_program():
    done = subprocess.run([sys.executable, "-m", "emu", "--version"], capture_output=True,
                          text=True, check=True)
    assert done.stdout.startswith("emu ")


def test_dsp_json_splits_time_and_runs_two_calls_on_both_cores(tmp_path, capsys):
    trace = tmp_path / "dsp.json"
    code, out, _ = _run(capsys, "dsp", "softmax", "--shape", "64,100", "--rpcs", "2", "--json",
                        "--trace", str(trace))
    assert code == 0
    result = json.loads(out)
    assert sorted(call["core"] for call in result["rpcs"]) == [0, 1]
    for core in result["cores"]:
        assert core["kernel_cycles"] > 0 and core["idma_in_bytes"] == 64 * 100 * 4
        assert core["compute_ms"] > 0 and core["idma_in_ms"] > 0 and core["idma_out_ms"] > 0
    assert result["rpc_overhead_ms"] > 0 and result["calls_ms"] > result["rpc_overhead_ms"]
    doc = json.loads(trace.read_text())
    validate_chrome_trace(doc)
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"core0.tcm.bank0.in0", "core0.tcm.bank1.out1", "core1.tcm.bank0.in0",
            "core1.idma.ch0"} <= threads


def test_dsp_frequency_override_changes_compute_not_dma(capsys):
    results = []
    for freq in ("648MHz", "1296MHz"):
        code, out, _ = _run(capsys, "dsp", "quantize", "--shape", "64,1024", "--json",
                            "--set", f"vdsp.freq_hz={freq}",
                            "--set", "vdsp.idma.bytes_per_cycle=64")
        assert code == 0
        results.append(json.loads(out)["cores"][0])
    assert results[1]["kernel_cycles"] == results[0]["kernel_cycles"]
    assert abs(results[1]["compute_ms"] * 2 - results[0]["compute_ms"]) < 1e-5


def test_dsp_operator_failure_exits_2_with_the_reason(capsys):
    code, out, err = _run(capsys, "dsp", "softmax", "--shape", "1,100000")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "does not fit" in err


REPORTING_COMMANDS = [
    ["scenario", "cameras", "--frames", "1", "--seed", "3"],
    ["dsp", "softmax", "--shape", "8,64", "--seed", "3"],
    ["pointcloud", "--model", "pointpillars", "--synthetic", "1", "--points", "3000", "--seed",
     "3"],
]


@pytest.mark.parametrize("argv", REPORTING_COMMANDS, ids=lambda a: a[0])
def test_reports_say_what_produced_them_and_repeat_exactly(argv, tmp_path, capsys):
    config = tmp_path / "fast.toml"
    config.write_text("[ddr]\nlatency_ps = \"90 ns\"\n")
    hardware = ["--config", str(config), "--set", "vdsp.freq_hz=800MHz", "--set",
                "cpu.api_call_ps=2us"]
    docs = []
    for _ in range(2):
        code, out, _ = _run(capsys, *argv, *hardware, "--json")
        assert code == 0
        assert set(ENVELOPE) <= set(json.loads(out))
        docs.append(_without_wall_clock(out))
    assert docs[0] == docs[1]  # byte for byte
    docs = [json.loads(doc) for doc in docs]
    assert docs[0]["provenance"] == {
        "emu_version": emu.__version__, "preset": "j5", "config_file": str(config),
        "overrides": ["vdsp.freq_hz=800MHz", "cpu.api_call_ps=2us"],
        # api_call_ps is set to the preset's own value: not a difference.
        "changed_from_preset": {"ddr.latency_ps": "90 ns", "vdsp.freq_hz": "800 MHz"},
        "seed": 3}
    code, out, _ = _run(capsys, *argv, *hardware)
    assert code == 0
    assert out.splitlines()[0] == (
        f"emu {emu.__version__}; preset j5; config {config}; --set vdsp.freq_hz=800MHz "
        "cpu.api_call_ps=2us; changed from the preset: vdsp.freq_hz=800 MHz, "
        "ddr.latency_ps=90 ns; seed 3")


def _without_wall_clock(out):
    """A --json document's text without its wall-clock part, as `dumps` writes it."""
    from emu.report.document import dumps

    return dumps(without_wall_clock(json.loads(out)))


@pytest.mark.parametrize(("argv", "shown"), [(["config", "show"], "cpu.freq_hz"),
                                            (["list"], "perception"), (["ops"], "Conv"),
                                            (["zoo", "list"], "yolov8n")],
                         ids=["config", "list", "ops", "zoo"])
def test_the_tables_fit_a_100_column_terminal(capsys, argv, shown):
    code, out, _ = _run(capsys, *argv)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 100
    assert shown in out

"""Sweep specs: every mistake found before any point runs, with one line naming it; the
expansion of grid, zip and random axes; and each command's declared report paths checked
against a real report of it, so the list cannot drift from the commands."""

from __future__ import annotations

import copy
import json

import pytest

from emu.errors import InputError
from emu.sweep import spec as spec_module
from emu.sweep.runner import run_point

BASE = {"scenario": {"command": "dsp", "args": ["softmax", "--shape", "8,100"],
                     "metrics": {"total": "total_ms"}},
        "hardware": {"preset": "j5", "set": []},
        "axes": {"mode": "grid", "vdsp.freq_hz": ["400MHz", "1GHz"]}}


def _spec(**changes):
    data = copy.deepcopy(BASE)
    for path, value in changes.items():
        section, _, key = path.partition("__")
        if key:
            if value is None:
                data[section].pop(key, None)
            else:
                data[section][key] = value
        else:
            data[section] = value
    return data


BAD = [
    ({"extra": {}}, "unknown key 'extra'"),
    ({"scenario__metric": {}}, "[scenario] unknown key 'metric'"),
    ({"scenario__command": "pointclod"}, "command 'pointclod': not a sweepable command"),
    ({"scenario__args": ["softmax", "--preset", "j5"]}, "--preset is not allowed"),
    ({"scenario__metrics": {"t": "total"}}, "metrics t = 'total': not a path of the dsp report"),
    ({"scenario__metrics": {"t": "cores..x"}}, "expected a dotted path"),
    ({"hardware__preset": "j7"}, "--preset 'j7': no such preset"),
    ({"hardware__sets": []}, "[hardware] unknown key 'sets'"),
    ({"hardware__set": ["ddr.policy=nope"]}, "point 1 (vdsp.freq_hz=400MHz): ddr.policy"),
    ({"axes__vdsp.freqhz": [1]}, "'vdsp.freqhz': unknown configuration key"),
    ({"axes__vdsp.freq_hz": ["400MHz", "5GHz", "20GHz"]}, "point 3 (vdsp.freq_hz=20GHz): "
                                                            "vdsp.freq_hz: must be at most"),
    ({"axes__--rpcs": [1, 0]}, "point 2 (vdsp.freq_hz=400MHz, --rpcs=0)"),
    ({"axes__--nope": [1]}, "unrecognized arguments: --nope 1"),
    ({"axes__--preset": ["j5"]}, "'--preset': not an axis"),
    ({"axes__mode": "zip", "axes__--rpcs": [1, 2, 3]}, "zip needs axes of one length"),
    ({"axes__mode": "cube"}, "mode 'cube'"),
    ({"axes__mode": "random"}, "samples"),
    ({"axes__mode": "random", "axes__samples": 3}, "seed"),
    ({"axes__seed": 3}, "seed: only for mode = \"random\""),
    ({"axes__vdsp.freq_hz": {"low": 1, "high": 2}}, "needs mode = \"random\""),
    ({"axes__vdsp.freq_hz": []}, "no values"),
]


@pytest.mark.parametrize(("changes", "needle"), BAD, ids=[n for _, n in BAD])
def test_a_bad_spec_is_refused_with_one_line(changes, needle):
    with pytest.raises(InputError) as info:
        spec_module.parse(_spec(**changes), "s.toml")
    message = str(info.value)
    assert needle in message and message.startswith("s.toml: ") and "\n" not in message


def test_a_bad_file_is_refused(tmp_path, write_spec):
    with pytest.raises(InputError, match="no such sweep spec"):
        spec_module.load(tmp_path / "none.toml")
    with pytest.raises(InputError, match="not valid TOML"):
        spec_module.load(write_spec("[scenario\n"))
    with pytest.raises(InputError, match=r"\[hardware\] config nope.toml: cannot read"):
        spec_module.load(write_spec('[scenario]\ncommand = "dsp"\nargs = ["ping"]\n'
                                    'metrics = {t = "total_ms"}\n[hardware]\n'
                                    'config = "nope.toml"\n'))


def test_grid_is_in_spec_order_with_the_last_axis_fastest():
    spec = spec_module.parse(_spec(**{"axes__--rpcs": [1, 2, 3]}))
    assert [tuple(p.axes.values()) for p in spec.points] == [
        ("400MHz", 1), ("400MHz", 2), ("400MHz", 3), ("1GHz", 1), ("1GHz", 2), ("1GHz", 3)]
    assert spec.points[4].args == ("softmax", "--shape", "8,100", "--rpcs", "2")
    assert spec.points[4].overrides == ('vdsp.freq_hz="1GHz"',)
    assert len({p.key for p in spec.points}) == 6


def test_an_option_axis_replaces_the_argument_and_a_switch_comes_and_goes():
    spec = spec_module.parse(_spec(**{"axes__--shape": ["4,4"], "axes__--per-axis": [True,
                                                                                    False]}))
    assert spec.points[0].args == ("softmax", "--shape", "4,4", "--per-axis")
    assert spec.points[1].args == ("softmax", "--shape", "4,4")


def test_unquoted_dotted_keys_are_axes_too():
    data = _spec(axes={"mode": "zip", "vdsp": {"freq_hz": [1e9, 8e8]}, "--rpcs": [1, 2]})
    spec = spec_module.parse(data)
    assert [p.axes for p in spec.points] == [{"vdsp.freq_hz": 1e9, "--rpcs": 1},
                                             {"vdsp.freq_hz": 8e8, "--rpcs": 2}]


@pytest.mark.parametrize("method", ["uniform", "lhs"])
def test_random_samples_are_deterministic_with_their_seed(method):
    axes = {"mode": "random", "samples": 10, "seed": 7, "method": method,
            "vdsp.freq_hz": {"low": "400MHz", "high": "1.2GHz", "log": True},
            "--rpcs": {"low": 1, "high": 5, "integer": True},
            "--dtype": ["int8", "uint8"]}
    first = spec_module.parse(_spec(axes=axes))
    again = spec_module.parse(_spec(axes=copy.deepcopy(axes)))
    other = spec_module.parse(_spec(axes={**axes, "seed": 8}))
    values = [p.axes for p in first.points]
    assert values == [p.axes for p in again.points] != [p.axes for p in other.points]
    assert all(400e6 <= v["vdsp.freq_hz"] <= 1.2e9 and v["--rpcs"] in range(1, 6)
               and v["--dtype"] in ("int8", "uint8") for v in values)
    if method == "lhs":  # one sample in each tenth of the (log) range
        import math

        cells = sorted(int(10 * (math.log(v["vdsp.freq_hz"]) - math.log(400e6))
                           / (math.log(1.2e9) - math.log(400e6))) for v in values)
        assert cells == list(range(10))


def test_metric_paths_with_wildcards():
    assert spec_module.matches("frames.0.impls.dsp2.total_ms", "frames.*.impls.*.total_ms")
    assert spec_module.matches("stats.ddr.bytes_read", "stats.**")
    assert not spec_module.matches("frames.0.impls", "frames.*.impls.*.total_ms")
    assert spec_module.resolve_metric({"a": [{"b": 3}]}, "a.0.b") == 3
    with pytest.raises(KeyError, match=r"no 'c' at a\.0"):
        spec_module.resolve_metric({"a": [{"b": 3}]}, "a.0.c")


# One small run of each sweepable command; every path its declaration lists must name at
# least one value of the real report.
SMALL = {
    "pointcloud": ["--model", "centerpoint", "--impl", "dsp2", "--synthetic", "1", "--points",
                   "2000"],
    "dsp": ["softmax", "--shape", "8,100"],
    "dsp cv": ["threshold"],
    "scenario cameras": ["--cameras", "1", "--frames", "2"],
    "scenario perception": ["--cameras", "1", "--seconds", "0.05", "--points", "2000",
                            "--input-size", "32"],
    "dv run": ["mobilenetv1", "--input-size", "32,32"],
    "perf": ["MODEL.hbm", "--frame-count", "2"],
}


def _expand(value, parts):
    if not parts:
        return [value]
    head, rest = parts[0], parts[1:]
    if head == "**":
        return [value]
    if isinstance(value, dict):
        items = value.values() if head == "*" else [value[head]] if head in value else []
    elif isinstance(value, list):
        items = value if head == "*" else [value[int(head)]] if head.isdigit() \
            and int(head) < len(value) else []
    else:
        items = []
    return [found for item in items for found in _expand(item, rest)]


def test_every_command_is_covered():
    assert set(SMALL) == set(spec_module.sweepable())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_declared_report_paths_exist_in_the_real_report(name, tmp_path, capsys):
    args = list(SMALL[name])
    if name == "perf":
        from emu.cli.main import main

        onnx, hbm = tmp_path / "m.onnx", tmp_path / "m.hbm"
        assert main(["zoo", "export", "mobilenetv2", "--input-size", "32,32", "--classes",
                     "10", "-o", str(onnx)]) == 0
        assert main(["compile", str(onnx), "-o", str(hbm), "--int16", "never"]) == 0
        capsys.readouterr()
        args[0] = str(hbm)
    command = spec_module.sweepable()[name]
    result = run_point({"argv": [*command.words, *args], "preset": "j5", "config_text": None,
                        "overrides": ['cpu.freq_hz="1.6GHz"']})  # provenance lists it
    assert result["status"] == "ok", result["error"]
    report = json.loads(json.dumps(result["report"]))
    missing = [p for p in spec_module.report_paths(command)
               if not _expand(report, p.split("."))]
    assert not missing, f"{name}: declared paths not in the report: {missing}"


def test_checking_a_large_spec_tells_progress_every_thousand_points(tmp_path):
    # Every point's configuration is resolved to key it (a 100,000-point spec takes about
    # a minute): `sweep show` and the others hear how far the check has come.
    path = tmp_path / "big.toml"
    path.write_text('[scenario]\ncommand = "dsp"\nargs = ["softmax"]\n'
                    'metrics = { total = "total_ms" }\n[axes]\nmode = "grid"\n'
                    f'"--seed" = {list(range(1, 1051))}\n"--rpcs" = [1, 2]\n')
    heard = []
    spec = spec_module.load(path, lambda done, total, what: heard.append((done, total, what)))
    assert len(spec.points) == 2100
    assert heard == [(1000, 2100, "points checked"), (2000, 2100, "points checked")]

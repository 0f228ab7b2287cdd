import dataclasses

import pytest

from emu.errors import ConfigError
from emu.soc.config import (
    SocConfig,
    format_value,
    load_config,
    preset_names,
    schema_fields,
)


def test_j5_preset_matches_the_contract():
    cfg = load_config("j5").to_dict()
    for block in ("cpu", "bpu", "vdsp", "ddr", "mem"):
        assert block in cfg
    assert cfg["bpu"]["cores"] == 2
    assert cfg["vdsp"]["cores"] == 2
    assert cfg["vdsp"]["tcm"]["banks"] == 2
    assert cfg["vdsp"]["tcm"]["bank_bytes"] == 128 * 1024
    assert cfg["cpu"]["cores"] == 8
    assert cfg["vdsp"]["freq_hz"] == 648e6


def test_every_preset_value_has_provenance_and_every_field_a_unit_and_description():
    for name in preset_names():
        resolved = load_config(name)
        for info, _value, source in resolved.leaves():
            assert source.startswith(("documented: ", "calibrated: ")), info.key
            assert len(source.split(": ", 1)[1]) > 5, info.key
            assert info.unit and info.desc, info.key


def test_config_is_frozen():
    soc = load_config().soc
    with pytest.raises(dataclasses.FrozenInstanceError):
        soc.vdsp.cores = 4  # type: ignore[misc]


def test_overrides_apply_in_order_with_units_and_record_their_origin():
    resolved = load_config(overrides=["vdsp.cores=3", "vdsp.freq_hz=800e6",
                                      "vdsp.tcm.bank_bytes=256KiB", "vdsp.cores=4",
                                      "ddr.latency_ps=80 ns"])
    assert resolved.soc.vdsp.cores == 4
    assert resolved.soc.vdsp.freq_hz == 800e6
    assert resolved.soc.vdsp.tcm.bank_bytes == 256 * 1024
    assert resolved.soc.ddr.latency_ps == 80_000
    assert resolved.sources["vdsp.cores"] == "override: --set"
    assert resolved.sources["bpu.cores"].startswith("documented")


def test_config_file_layers_between_preset_and_set(tmp_path):
    path = tmp_path / "fast.toml"
    path.write_text('[vdsp]\nfreq_hz = "1 GHz"\ncores = 3\n[vdsp.tcm]\nsub_banks = 8\n')
    resolved = load_config("j5", path, ["vdsp.cores=5"])
    assert resolved.soc.vdsp.freq_hz == 1e9
    assert resolved.soc.vdsp.tcm.sub_banks == 8
    assert resolved.soc.vdsp.cores == 5
    assert resolved.sources["vdsp.freq_hz"] == f"override: config file {path}"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("bpu.cores=0", r"^bpu\.cores: must be at least 1"),
        ("vdsp.cores=-2", r"^vdsp\.cores: must be at least 1"),
        ("vdsp.freq=1", r"unknown config key 'vdsp\.freq'"),
        ("nosuch.key=1", r"unknown config key 'nosuch\.key'"),
        ("vdsp.freq_hz=128KiB", r"^vdsp\.freq_hz: unit 'KiB' is not a unit of Hz"),
        ("vdsp.freq_hz=0", r"^vdsp\.freq_hz: must be at least 10 MHz"),
        ("vdsp.freq_hz=800", r"^vdsp\.freq_hz: must be at least 10 MHz, got 800"),
        ("vdsp.cores=100000", r"^vdsp\.cores: must be at most 64, got 100000"),
        ("cpu.cores=1.5", r"^cpu\.cores: expected a whole number"),
        ("cpu.cores=true", r"^cpu\.cores: expected a number"),
        ("vdsp.tcm.reserved_bytes=128KiB", r"^vdsp\.tcm\.reserved_bytes: .* leaves nothing"),
        ("cpu.l1d.ways=3", r"^cpu\.l1d\.ways:"),
        ("cpu.l3.ways=32", r"^cpu\.l3\.ways: must be at most 16, got 32"),
        ("cpu.l1d.size_bytes=48KiB", r"^cpu\.l1d\.size_bytes: must be a power of two"),
        ("ddr.policy=random", r"^ddr\.policy: expected one of fair"),
        ("mem.pool_bytes=10000", r"^mem\.pool_bytes: .* not a multiple"),
        ("vdsp.loads_per_bundle=9", r"^vdsp\.loads_per_bundle:"),
        ("vdsp", r"expected KEY=VALUE"),
        ("=3", r"expected KEY=VALUE"),
    ],
)
def test_bad_overrides_name_the_key_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(overrides=[override])
    assert "\n" not in str(info.value)


def test_config_file_errors_name_the_file(tmp_path):
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[vdsp\ncores = 2\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_config(config_file=bad_toml)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[vdsp]\ncorez = 2\n")
    with pytest.raises(ConfigError, match=r"unknown\.toml: unknown config key 'vdsp\.corez'"):
        load_config(config_file=unknown)
    with pytest.raises(ConfigError, match=r"missing\.toml: cannot read"):
        load_config(config_file=tmp_path / "missing.toml")


def test_unknown_preset_lists_the_available_ones():
    with pytest.raises(ConfigError, match=r"no such preset \(available: j5"):
        load_config("j6")


def test_schema_covers_every_block_and_formats_values():
    keys = [info.key for info in schema_fields()]
    assert len(keys) == len(set(keys))
    blocks = {f.name for f in dataclasses.fields(SocConfig)}
    assert {k.split(".")[0] for k in keys} == blocks
    resolved = load_config()
    shown = {info.key: format_value(info, value) for info, value, _ in resolved.leaves()}
    assert shown["vdsp.tcm.bank_bytes"] == "128 KiB"
    assert shown["vdsp.freq_hz"] == "648 MHz"
    assert shown["ddr.policy"] == "fair"

"""The hardware description: typed, frozen, unit-aware configuration blocks and their loader.

One frozen dataclass per piece of hardware. Each field declares its dimension (unit), a
one-line description and whatever bounds make the hardware possible; the values themselves
live in presets (TOML data in `emu/soc/presets/`), where every value also carries its
provenance: documented (and where) or calibrated (to what).

Resolution order, as on the command line: preset, then `--config FILE.toml` (a partial
config layered over it), then each `--set dotted.key=value` in turn. Unknown keys, wrong
types, bad units and impossible hardware raise `ConfigError` with one line naming the full
key path.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tomllib
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from emu.errors import ConfigError
from emu.soc.units import format_quantity, parse_quantity


def param(
    unit: str,
    desc: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    power_of_two: bool = False,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """Declare a hardware parameter: its unit, what it means, and what values are possible."""
    return field(
        metadata={
            "unit": unit,
            "desc": desc,
            "minimum": minimum,
            "maximum": maximum,
            "positive": positive,
            "power_of_two": power_of_two,
            "choices": choices,
        }
    )


# Plausibility bounds shared by several blocks. They are far outside any chip of this class,
# and there only to turn a slip (`freq_hz=800` meaning 800 Hz, 100000 cores) into an error
# naming the key instead of a run that is absurd or exhausts the host's memory.
_MIN_HZ, _MAX_HZ = 10e6, 10e9
_MAX_CORES = 64
_MAX_PS = 10**12  # one second
_MAX_CYCLES = 10**9
_MIN_BYTES_PER_S, _MAX_BYTES_PER_S = 1e6, 10e12


def _clock(desc: str) -> Any:
    return param("Hz", desc, minimum=_MIN_HZ, maximum=_MAX_HZ)


def _cores(desc: str) -> Any:
    return param("count", desc, minimum=1, maximum=_MAX_CORES)


def _cycles(desc: str, minimum: int = 0) -> Any:
    return param("cycles", desc, minimum=minimum, maximum=_MAX_CYCLES)


def _time(desc: str) -> Any:
    return param("ps", desc, minimum=0, maximum=_MAX_PS)


def _rate(desc: str) -> Any:
    return param("bytes/s", desc, minimum=_MIN_BYTES_PER_S, maximum=_MAX_BYTES_PER_S)


def _granule(desc: str) -> Any:
    return param("count", desc, minimum=1, maximum=1024)


def _efficiency(what: str) -> Any:
    return param("ratio", f"share of the peak MAC rate reached by {what}", positive=True,
                 maximum=1)


@dataclass(frozen=True)
class L1Config:
    """The private L1 data cache of an A55 core.

    It has no latency parameter: the load-to-use of an L1 hit is part of the in-order
    pipeline's issue model (`cpu.issue_width`), so only hits further out stall."""

    size_bytes: int = param("bytes", "capacity of one core's L1D", power_of_two=True,
                            maximum=1 << 20)
    ways: int = param("count", "associativity (ways per set; the model keeps up to 16)",
                      minimum=1, maximum=16)


@dataclass(frozen=True)
class CacheLevelConfig:
    """An outer level of the A55 data-cache hierarchy (L2, L3)."""

    size_bytes: int = param("bytes", "capacity of one cache at this level", power_of_two=True,
                            maximum=64 << 20)
    ways: int = param("count", "associativity (ways per set; the model keeps up to 16)",
                      minimum=1, maximum=16)
    hit_latency_cycles: int = param(
        "cycles", "cycles a load that hits here stalls the in-order core", minimum=0,
        maximum=10_000)


@dataclass(frozen=True)
class TlbConfig:
    """The data TLBs of an A55 core: a small fully associative L1 and a set-associative L2."""

    page_bytes: int = param("bytes", "page size of the pool's mappings", power_of_two=True,
                            minimum=1024, maximum=1 << 30)
    l1_entries: int = param("count", "entries of the fully associative L1 data TLB",
                            minimum=1, maximum=1024)
    l2_entries: int = param("count", "entries of the L2 TLB", power_of_two=True, minimum=1,
                            maximum=1 << 16)
    l2_ways: int = param("count", "associativity of the L2 TLB", minimum=1, maximum=64)
    l2_hit_cycles: int = _cycles("cycles an access stalls when the L1 TLB misses and the L2 "
                                 "TLB hits")
    walk_cycles: int = _cycles("cycles an access stalls for a translation table walk (both "
                               "TLBs miss)")


@dataclass(frozen=True)
class CpuConfig:
    """The A55 cluster."""

    cores: int = _cores("A55 cores in the cluster")
    freq_hz: float = _clock("A55 core clock")
    issue_width: int = param("count", "instructions issued per cycle (in-order)", minimum=1,
                             maximum=16)
    alu_pipes: int = param("count", "integer ALU pipelines", minimum=1, maximum=16)
    load_pipes: int = param("count", "load pipelines", minimum=1, maximum=16)
    store_pipes: int = param("count", "store pipelines", minimum=1, maximum=16)
    fp_pipes: int = param("count", "floating-point pipelines (add, multiply, convert)",
                          minimum=1, maximum=16)
    branch_pipes: int = param("count", "branch pipelines", minimum=1, maximum=16)
    mispredict_cycles: int = _cycles("cycles lost to a mispredicted branch")
    fdiv_cycles: int = _cycles(
        "cycles a single-precision division stalls the in-order core (its latency: the "
        "kernels use every quotient at once)", minimum=1)
    fpcr_write_cycles: int = _cycles(
        "cycles a write to the floating-point control register (fesetround) costs")
    line_bytes: int = param("bytes", "cache line size at every level", power_of_two=True,
                            minimum=16, maximum=1024)
    vector_bytes: int = param(
        "bytes", "bytes one NEON load or store moves (memcpy, memset, image loops)",
        power_of_two=True, minimum=4, maximum=256)
    l1d: L1Config = param("block", "private L1 data cache of each core")
    l2: CacheLevelConfig = param("block", "private L2 cache of each core")
    l3: CacheLevelConfig = param("block", "L3 cache shared by the cluster")
    tlb: TlbConfig = param("block", "data TLBs of each core")
    write_stream_lines: int = param(
        "count", "consecutive full-line stores after which further ones go to memory without "
        "a line fill (write streaming)", minimum=1, maximum=1 << 20)
    ddr_port_bytes_per_s: float = _rate("most DDR bandwidth one core's line fills can draw")
    cache_op_cycles: int = _cycles(
        "cycles one cache-maintenance instruction (clean or invalidate one line by address) "
        "takes; hbSysFlushMem issues one per line of the buffer")
    flush_call_cycles: int = _cycles(
        "fixed cost of one hbSysFlushMem on a cached buffer (system call, barriers)")
    api_call_ps: int = _time("CPU time of one runtime API call")


@dataclass(frozen=True)
class BpuConfig:
    """The BPU (Bayes) neural-network cores; the cost model is `emu/bpu/timing.py`'s."""

    cores: int = _cores("BPU cores")
    freq_hz: float = _clock("BPU clock")
    macs_per_cycle: int = param("count", "int8 multiply-accumulates per cycle per core",
                                minimum=1, maximum=10**7)
    align_h: int = _granule("output rows the MAC array works on at once (H is padded to it)")
    align_w: int = _granule("output columns the MAC array works on at once (W is padded to "
                            "it)")
    align_cin: int = _granule("input channels per group one MAC-array pass reduces (padded "
                              "to it: a depthwise conv uses one of them)")
    align_cout: int = _granule("output channels the MAC array computes at once (C is padded "
                               "to it, also in the feature-map layout)")
    efficiency_dense: float = _efficiency("convolutions and fully connected layers")
    efficiency_depthwise: float = _efficiency("depthwise (grouped) convolutions")
    efficiency_elementwise: float = _efficiency("elementwise ops and LUT activations")
    efficiency_pool: float = _efficiency("max and average pooling")
    efficiency_resize: float = _efficiency("resize (upsampling)")
    efficiency_move: float = _efficiency("data movement (concat, transpose, slice)")
    sram_bytes: int = param("bytes", "on-chip SRAM per core for feature maps", positive=True,
                            maximum=1 << 30)
    weight_sram_bytes: int = param(
        "bytes", "on-chip SRAM per core for weights: a model whose weights fit keeps them "
        "across runs, others read them from DDR every run", minimum=0, maximum=1 << 30)
    ddr_port_bytes_per_s: float = _rate("most DDR bandwidth one BPU core can draw")
    layer_overhead_cycles: int = _cycles("fixed cost of one layer group (configuration, "
                                         "pipeline fill and drain)")
    fc_overhead_cycles: int = _cycles("fixed cost of one function call (fetch from the "
                                      "hardware FIFO, start, completion)")
    task_overhead_ps: int = _time("fixed cost of starting a task on a core")
    fc_fifo_depth: int = param(
        "count", "function calls each of a core's two hardware FIFOs (low and high priority) "
        "holds: a waiting task of higher priority, below 255, runs only after the FCs "
        "already queued there", minimum=0, maximum=1 << 20)


@dataclass(frozen=True)
class DvConfig:
    """DMP's DV700 CNN accelerator (the `dmp_dv` runtime): a convolution block and a fully
    connected block behind one command-list queue; the cost model is `emu/dv/timing.py`'s."""

    conv_macs: int = param("count", "FP16 multiply-accumulates per cycle of the convolution "
                           "block", minimum=8, maximum=1 << 20)
    conv_freq_hz: float = param("Hz", "convolution block clock (the driver sets 30-400 MHz)",
                                minimum=30e6, maximum=400e6)
    fc_macs: int = param("count", "multiply-accumulates per cycle of the fully connected "
                         "block", minimum=1, maximum=1 << 20)
    fc_freq_hz: float = param("Hz", "fully connected block clock", minimum=30e6,
                              maximum=400e6)
    ub_bytes: int = param("bytes", "unified buffer: what a command keeps on chip between runs",
                          minimum=16 << 10, maximum=1 << 26)
    max_kernel: int = param("count", "largest convolution and pooling kernel side",
                            minimum=1, maximum=255)
    max_fc_vector: int = param("count", "largest FC input vector, in elements", minimum=8,
                               maximum=1 << 20)
    channel_block: int = param("count", "channels the blocks process at once (input and "
                               "output channels are padded to it)", minimum=1, maximum=256)
    efficiency_conv: float = _efficiency("the convolution block")
    efficiency_fc: float = _efficiency("the fully connected block")
    ddr_port_bytes_per_s: float = _rate("most DDR bandwidth the device can draw")
    run_overhead_cycles: int = _cycles("fixed cost of one conv run or FC command (conv clock)")
    kick_ps: int = _time("from dmp_dv_cmdlist_exec to the device starting the command list")
    wake_ps: int = _time("from the device finishing to dmp_dv_cmdlist_wait returning")


@dataclass(frozen=True)
class TcmConfig:
    """The local data RAMs of one vDSP core."""

    banks: int = param("count", "TCM banks per core", minimum=1, maximum=16)
    bank_bytes: int = param("bytes", "capacity of one TCM bank", positive=True,
                            maximum=16 << 20)
    sub_banks: int = param("count", "sub-banks per TCM bank (gather/scatter conflicts)",
                           minimum=1, maximum=1024)
    sub_bank_width_bytes: int = param(
        "bytes", "bytes one sub-bank serves per access; consecutive words rotate sub-banks",
        power_of_two=True, minimum=4, maximum=64,
    )
    access_bytes: int = param(
        "bytes", "bytes a bank serves per cycle to the core or the iDMA; each such access by "
        "the iDMA to the bank a kernel works on costs the kernel a memory cycle",
        power_of_two=True, minimum=4, maximum=1024,
    )
    reserved_bytes: int = param(
        "bytes", "bytes of each bank taken by runtime and tile-manager metadata", minimum=0
    )


@dataclass(frozen=True)
class IdmaConfig:
    """The iDMA engine of one vDSP core."""

    channels: int = param(
        "count", "iDMA channels; tile loads use the first half (rounded up), stores the rest "
        "(one channel: both)", minimum=1, maximum=64)
    queue_depth: int = param("count", "descriptors a channel's queue holds", minimum=1,
                             maximum=4096)
    bytes_per_cycle: float = param(
        "bytes/cycle", "peak iDMA bandwidth per channel, in DSP cycles", positive=True,
        maximum=4096,
    )
    descriptor_latency_cycles: int = _cycles(
        "fixed cost of one descriptor (fetch, setup, completion)")


RPC_MODES = ("relay", "direct")  # how hbDSP reaches the DSP (`emu.vdsp.rpc`)


@dataclass(frozen=True)
class VdspConfig:
    """The Vision-P6-style vDSP cores."""

    cores: int = _cores("vDSP cores")
    freq_hz: float = _clock("DSP clock")
    vliw_slots: int = param("count", "issue slots per VLIW bundle", minimum=1, maximum=32)
    loads_per_bundle: int = param(
        "count", "vector memory ops per bundle (loads, or loads plus stores)", minimum=1,
        maximum=16,
    )
    stores_per_bundle: int = param("count", "vector stores per bundle", minimum=1, maximum=16)
    fdiv_cycles: int = _cycles(
        "cycles a vector float32 division stalls issue (not pipelined)", minimum=1)
    gather_access_cycles: int = _cycles(
        "cycles of the gather/scatter unit per serialised sub-bank access", minimum=1)
    kernel_call_cycles: int = _cycles(
        "fixed cost of entering a kernel on a tile (prologue, loop setup)")
    tcm: TcmConfig = param("block", "local data RAM (TCM) of each core")
    idma: IdmaConfig = param("block", "iDMA engine of each core")
    rpc_mode: str = param(
        "name", "how the program reaches the DSP: through the relay server process (relay) "
        "or the kernel channel itself (direct)", choices=RPC_MODES)
    relay_hop_ps: int = _time(
        "one message between the program and the relay server (twice per RPC in relay "
        "mode)")
    rpc_submit_ps: int = _time(
        "ARM-to-DSP RPC message: from the kernel channel until the DSP queue holds the task")
    rpc_return_ps: int = _time(
        "DSP-to-ARM completion: from the task's end until the waiting host sees it")
    operator_dispatch_cycles: int = _cycles(
        "DSP-side cost of decoding an RPC and entering its operator")


DDR_POLICIES = ("fair", "in_order")  # the names of `emu.mem.ddr.POLICIES`


@dataclass(frozen=True)
class DdrConfig:
    """The DDR every block's traffic shares."""

    bw_bytes_per_s: float = _rate("peak DDR bandwidth shared by all")
    latency_ps: int = param("ps", "latency of a transfer before data flows", minimum=0,
                            maximum=10**9)
    policy: str = param("name", "how concurrent transfers share bandwidth", choices=DDR_POLICIES)


@dataclass(frozen=True)
class MemConfig:
    """The CMA/ION pool."""

    pool_bytes: int = param("bytes", "size of the CMA/ION pool in DDR", positive=True,
                            maximum=64 << 30)
    alignment_bytes: int = param("bytes", "alignment of every pool allocation", power_of_two=True,
                                 maximum=1 << 30)


@dataclass(frozen=True)
class SocConfig:
    """The whole SoC."""

    cpu: CpuConfig = param("block", "8 x A55 CPU cluster")
    bpu: BpuConfig = param("block", "BPU cores")
    vdsp: VdspConfig = param("block", "vDSP cores")
    ddr: DdrConfig = param("block", "shared DDR")
    mem: MemConfig = param("block", "CMA/ION memory pool")
    dv: DvConfig = param("block", "DMP DV700 CNN accelerator (dmp_dv)")


@dataclass(frozen=True)
class FieldInfo:
    """What the schema says about one leaf key."""

    key: str
    unit: str
    desc: str
    type: type


@dataclass(frozen=True)
class ResolvedConfig:
    """A configuration after preset, file and overrides, with each value's provenance."""

    soc: SocConfig
    preset: str
    sources: Mapping[str, str]
    config_file: str | None = None
    overrides: tuple[str, ...] = ()

    def leaves(self) -> Iterator[tuple[FieldInfo, Any, str]]:
        """Every leaf as (schema info, value, provenance), in declaration order."""
        for info in schema_fields():
            yield info, get_path(self.soc, info.key), self.sources[info.key]

    def to_dict(self) -> dict[str, Any]:
        """The values as nested plain data, one object per block."""
        return _as_dict(self.soc)


def schema_fields(cls: type = SocConfig, prefix: str = "") -> list[FieldInfo]:
    """All leaf keys of a config class, depth first in declaration order."""
    return list(_schema_fields(cls, prefix))


@functools.cache
def _schema_fields(cls: type, prefix: str) -> tuple[FieldInfo, ...]:
    """schema_fields, worked out once per class (the classes do not change at run time)."""
    hints = typing.get_type_hints(cls)
    out: list[FieldInfo] = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            out.extend(schema_fields(typing.cast(type, kind), key + "."))
        else:
            out.append(FieldInfo(key, f.metadata["unit"], f.metadata["desc"], kind))
    return tuple(out)


def get_path(obj: Any, key: str) -> Any:
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def format_value(info: FieldInfo, value: Any) -> str:
    if info.unit == "name":
        return str(value)
    return format_quantity(value, info.unit)


def preset_names() -> list[str]:
    folder = resources.files("emu.soc") / "presets"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_config(
    preset: str = "j5",
    config_file: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> ResolvedConfig:
    """Resolve preset, then the partial config file, then each `key=value` override."""
    values, sources = _copy_tree(_read_preset(preset))
    if config_file is not None:
        path = Path(config_file)
        for key, value in _flatten(_read_toml(path), f"{path}", ""):
            _set_leaf(values, sources, key, value, f"config file {path}")
    for item in overrides:
        key, value = _parse_override(item)
        _set_leaf(values, sources, key, value, "--set")
    soc = _build(SocConfig, values, "")
    _check_consistency(soc)
    return ResolvedConfig(soc=soc, preset=preset, sources=sources,
                          config_file=None if config_file is None else str(config_file),
                          overrides=tuple(overrides))


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


@functools.cache
def _read_preset(name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Read a preset (once a process: the presets ship with the package; callers copy
    what they change); every leaf must be `{value = ..., source = "..."}`."""
    if name not in preset_names():
        raise ConfigError(
            f"--preset {name!r}: no such preset (available: {', '.join(preset_names())})"
        )
    text = (resources.files("emu.soc") / "presets" / f"{name}.toml").read_text("utf-8")
    where = f"preset {name}"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    known = {info.key for info in schema_fields()}
    for key, entry in _flatten(data, where, "", leaf_tables=True):
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r}")
        if not (isinstance(entry, dict) and set(entry) == {"value", "source"}):
            raise ConfigError(f"{where}: {key} must be {{value = ..., source = \"...\"}}")
        source = entry["source"]
        if not (isinstance(source, str) and source.split(":")[0] in ("documented", "calibrated")):
            raise ConfigError(
                f"{where}: {key}.source must start with 'documented:' or 'calibrated:'"
            )
        values[key] = entry["value"]
        sources[key] = source
    missing = sorted(known - set(values))
    if missing:
        raise ConfigError(f"{where}: missing {missing[0]} (and {len(missing) - 1} more)")
    return values, sources


def _flatten(
    data: Mapping[str, Any], where: str, prefix: str, leaf_tables: bool = False
) -> Iterator[tuple[str, Any]]:
    """Walk nested tables into dotted keys; `leaf_tables` treats {value, source} as leaves."""
    for name, value in data.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and not (leaf_tables and "value" in value):
            yield from _flatten(value, where, key + ".", leaf_tables)
        else:
            yield key, value


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. vdsp.freq_hz=800e6")
    text = text.strip()
    try:
        # TOML gives numbers, booleans and quoted strings their types; anything else
        # (e.g. "128KiB") stays text for the unit parser.
        return key, tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return key, text


def _set_leaf(
    values: dict[str, Any], sources: dict[str, str], key: str, value: Any, origin: str
) -> None:
    if key not in values:
        hint = _closest_block(key)
        raise ConfigError(f"{origin}: unknown config key {key!r}{hint}")
    values[key] = value
    sources[key] = f"override: {origin}"


def _closest_block(key: str) -> str:
    """Point at the keys of the nearest existing block, to help with typos."""
    parts = key.split(".")
    by_prefix: dict[str, list[str]] = {}
    for info in schema_fields():
        head = info.key.rsplit(".", 1)[0] if "." in info.key else ""
        by_prefix.setdefault(head, []).append(info.key.rsplit(".", 1)[-1])
    for depth in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:depth])
        if head in by_prefix:
            return f" (keys of {head}: {', '.join(by_prefix[head])})"
    return f" (blocks: {', '.join(f.name for f in dataclasses.fields(SocConfig))})"


def _copy_tree(tree: Any) -> Any:
    """A copy of nested dicts, lists and tuples of plain values (TOML's), each container
    new: what `copy.deepcopy` gives, without its bookkeeping (a third of the time a sweep
    spent resolving each point's configuration)."""
    if isinstance(tree, dict):
        return {key: _copy_tree(value) for key, value in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_copy_tree(value) for value in tree)
    return tree


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a config block (typing evaluates the annotations' text
    afresh on every call: most of the time resolving a configuration took)."""
    return typing.get_type_hints(cls)


def _build(cls: type, values: Mapping[str, Any], prefix: str) -> Any:
    hints = _type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            kwargs[f.name] = _build(typing.cast(type, kind), values, key + ".")
        else:
            kwargs[f.name] = _coerce(key, values[key], kind, f.metadata)
    return cls(**kwargs)


def _coerce(key: str, raw: Any, kind: type, meta: Mapping[str, Any]) -> Any:
    unit = meta["unit"]
    if kind is str:
        choices = meta["choices"] or ()
        if raw not in choices:
            raise ConfigError(f"{key}: expected one of {', '.join(choices)}, got {raw!r}")
        return raw
    try:
        value = parse_quantity(raw, unit, integer=kind is int)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if meta["positive"] and not value > 0:
        raise ConfigError(f"{key}: must be greater than 0, got {raw!r}")
    if meta["minimum"] is not None and value < meta["minimum"]:
        hint = f" (a plain number is in {unit}: write e.g. {raw}MHz)" \
            if unit == "Hz" and not isinstance(raw, str) else ""
        raise ConfigError(f"{key}: must be at least {_bound(meta['minimum'], unit)}, "
                          f"got {raw!r}{hint}")
    if meta["maximum"] is not None and value > meta["maximum"]:
        raise ConfigError(f"{key}: must be at most {_bound(meta['maximum'], unit)}, got {raw!r} "
                          "(beyond any plausible chip of this class)")
    if meta["power_of_two"] and not (value > 0 and math.log2(value).is_integer()):
        raise ConfigError(f"{key}: must be a power of two, got {raw!r}")
    return value


def _bound(value: float, unit: str) -> str:
    return format_quantity(int(value) if float(value).is_integer() else value, unit)


def _check_consistency(soc: SocConfig) -> None:
    """Rules that relate several fields: hardware that cannot exist."""
    line = soc.cpu.line_bytes
    for level in ("l1d", "l2", "l3"):
        cache: L1Config | CacheLevelConfig = getattr(soc.cpu, level)
        lines = cache.size_bytes // line
        if lines < cache.ways or lines % cache.ways:
            raise ConfigError(
                f"cpu.{level}.ways: {cache.ways} ways do not divide "
                f"{cache.size_bytes} B of {line}-byte lines"
            )
        sets = lines // cache.ways
        if sets & (sets - 1):
            raise ConfigError(
                f"cpu.{level}.ways: {cache.ways} ways give {sets} sets, which is not a power of two"
            )
    tlb = soc.cpu.tlb
    tlb_sets = tlb.l2_entries // tlb.l2_ways
    if tlb_sets * tlb.l2_ways != tlb.l2_entries or tlb_sets & (tlb_sets - 1):
        raise ConfigError(f"cpu.tlb.l2_ways: {tlb.l2_ways} ways do not give a power-of-two "
                          f"number of sets of {tlb.l2_entries} entries")
    if tlb.page_bytes < line:
        raise ConfigError(f"cpu.tlb.page_bytes: a {tlb.page_bytes} B page is smaller than a "
                          f"{line} B cache line (cpu.line_bytes)")
    if soc.cpu.vector_bytes > line:
        raise ConfigError(f"cpu.vector_bytes: a {soc.cpu.vector_bytes} B vector does not fit a "
                          f"{line} B cache line (cpu.line_bytes)")
    tcm = soc.vdsp.tcm
    if tcm.reserved_bytes >= tcm.bank_bytes:
        raise ConfigError(
            f"vdsp.tcm.reserved_bytes: {tcm.reserved_bytes} B leaves nothing of a "
            f"{tcm.bank_bytes} B bank (vdsp.tcm.bank_bytes)"
        )
    if tcm.bank_bytes % (tcm.sub_banks * tcm.sub_bank_width_bytes):
        raise ConfigError(
            f"vdsp.tcm.sub_banks: {tcm.sub_banks} sub-banks of {tcm.sub_bank_width_bytes} B "
            f"do not tile the {tcm.bank_bytes} B bank"
        )
    vdsp = soc.vdsp
    if vdsp.loads_per_bundle > vdsp.vliw_slots or vdsp.stores_per_bundle > vdsp.vliw_slots:
        raise ConfigError(
            f"vdsp.loads_per_bundle: more memory ops per bundle than the {vdsp.vliw_slots} slots"
        )
    if soc.mem.pool_bytes % soc.mem.alignment_bytes:
        raise ConfigError(
            f"mem.pool_bytes: {soc.mem.pool_bytes} B is not a multiple of "
            f"mem.alignment_bytes ({soc.mem.alignment_bytes} B)"
        )


def _as_dict(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _as_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return obj

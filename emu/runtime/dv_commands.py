"""dmp_dv's raw commands as the device runs them: decoded and checked when added, costed
(`emu/dv/timing.py`) and computed (`emu/dv/compute.py`) when the command list runs.

Decoding reads the C structs field by field, as the driver does: the header says which
command it is (device type, version, size); the packed fields hold one value per byte. A
conv command's runs end at the first run with `m` = 0. The data flow is `emu/dv/compute.py`'s:
a run reads the command's input when it is the first or follows a run whose `topo` bit was
set, else the previous run's output (kept in the unified buffer); runs with the bit set
write to external memory, back to back at `output_buf`, or, with `output_mode` 1, each
added first to the tensor at `eltwise_buf` (to the input when that buffer has no memory).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emu.dv import compute, layout, packing, timing
from emu.mem.pool import PoolBuffer
from emu.runtime import status
from emu.soc.config import DvConfig

EINVAL = errno.EINVAL
ENOTSUP = errno.ENOTSUP
Resolve = Callable[[Any], Any]  # a dmp_dv_mem handle -> its live handle, or None


def _byte(value: int, k: int) -> int:
    return (value >> (8 * k)) & 0xFF


def _fp16(bits: int) -> float:
    return float(np.array([bits & 0xFFFF], np.uint16).view(np.float16)[0])


@dataclass
class Place:
    """A buffer and an offset in it, and how many bytes the command uses there."""

    buffer: PoolBuffer
    offset: int
    nbytes: int = 0
    owner: Any = None  # the dmp_dv_mem handle

    def check(self, what: str) -> str | None:
        if self.offset + self.nbytes > self.buffer.size_bytes:
            return (f"{what}: {self.nbytes} B at offset {self.offset} do not fit the "
                    f"{self.buffer.size_bytes} B buffer")
        return None

    def bytes(self) -> np.ndarray:
        return self.buffer.data[self.offset:self.offset + self.nbytes]


def place(buf: Any, resolve: Resolve, what: str) -> Place | str:
    mem = resolve(getattr(buf, "mem", None))
    offs = status.as_int(getattr(buf, "offs", None), 0, status.INT32_MAX)
    if mem is None:
        return f"{what}: not a live dmp_dv_mem of this context"
    if offs is None or offs % 2:
        return f"{what}: offset {getattr(buf, 'offs', None)!r} is not an even byte offset"
    return Place(mem.buffer, offs, owner=mem)


def _u(value: Any, bits: int) -> int | None:
    return status.as_int(value, 0, (1 << bits) - 1)


@dataclass
class RunSpec:
    """One decoded conv run and its geometry."""

    index: int
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    fields: dict[str, Any]
    weights: Place | None
    to_external: bool


@dataclass
class Command:
    """A decoded command: what it costs, which buffers it uses, what it computes."""

    label: str
    device: str  # "conv" or "fc"
    places: list[tuple[str, Place]] = field(default_factory=list)
    runs: list[RunSpec] = field(default_factory=list)
    fc: dict[str, Any] = field(default_factory=dict)
    input_shape: tuple[int, int, int] = (0, 0, 0)
    output_mode: int = 0
    to_bgr: bool = False  # conv v1: swap the input's first and third channels
    u8_input: bool = False  # conv v1: the input is 8-bit, through the table

    def buffers(self) -> list[PoolBuffer]:
        seen: dict[int, PoolBuffer] = {}
        for _, p in self.places:
            seen[p.buffer.phys_addr] = p.buffer
        return list(seen.values())

    def owners(self) -> list[Any]:
        """The memory handles it uses."""
        return [p.owner for _, p in self.places if p.owner is not None]

    def check_memory(self) -> str | None:
        """The buffers still live and large enough (checked again at exec)."""
        for what, p in self.places:
            if not p.buffer.alive:
                return f"{what}: the memory was released"
            problem = p.check(what)
            if problem is not None:
                return problem
        return None

    def costs(self, cfg: DvConfig) -> list[timing.Cost]:
        if self.device == "fc":
            return [timing.fc_cost(self.fc["input_size"], self.fc["output_size"],
                                   self.fc["weight_bytes"], cfg)]
        out = []
        for k, run in enumerate(self.runs):
            f = run.fields
            c, h, w = run.in_shape
            m, oh, ow = run.out_shape
            pool = f["pool_size"] if f["pool_enable"] in (1, 2) else (1, 1)
            out.append(timing.run_cost(timing.RunShape(
                c, h, w, m, oh, ow, kernel=f["kernel"], conv=f["conv_enable"] != 0,
                depthwise=bool(f["conv_enable"] & compute.DEPTHWISE), pool_window=pool,
                weight_bytes=run.weights.nbytes if run.weights is not None else 0,
                reads_input=k == 0, to_external=run.to_external,
                input_element_bytes=1 if self.u8_input else 2),
                cfg))
        return out

    def execute(self) -> None:
        """Compute the command on the device's memory (at the end of its execution)."""
        if self.device == "fc":
            _execute_fc(self)
        else:
            _execute_conv(self)


def _conv_out(size: int, pad: int, k: int, stride: int, dilation: int, deconv: bool) -> int:
    """The kernel driver's output size; a deconvolution convolves its zero-inserted input,
    (size - 1) * stride + 1 wide, with stride 1."""
    if deconv:
        size, stride = (size - 1) * stride + 1, 1
    return (size + pad - dilation * (k - 1) - 1) // stride + 1


def decode(cmd: Any, resolve: Resolve, cfg: DvConfig) -> Command | tuple[int, str]:
    """The command `cmd` describes, or (EINVAL or ENOTSUP, why)."""
    header = getattr(cmd, "header", None)
    kind = status.as_int(getattr(header, "device_type", None))
    version = status.as_int(getattr(header, "version", None))
    size = status.as_int(getattr(header, "size", None))
    if kind is None or version is None or size is None:
        return EINVAL, "the command has no valid header (size, device_type, version)"
    if kind == 1 and version in (0, 1):
        want = type(cmd).SIZE if hasattr(type(cmd), "SIZE") else -1
        if size != want:
            return EINVAL, f"header.size {size} is not the conv v{version} command's {want}"
        if version == 0:
            return _decode_conv(cmd, resolve, cfg, version)
        return _decode_conv_v1(cmd, resolve, cfg)
    if kind == 2 and version == 0:
        if size != getattr(type(cmd), "SIZE", -1):
            return EINVAL, f"header.size {size} is not the FC v0 command's"
        return _decode_fc(cmd, resolve, cfg)
    if kind in (1, 2):
        return ENOTSUP, f"device type {kind} version {version} is not supported"
    return EINVAL, f"device type {kind} is not a DMP_DV_DEV_* value"


def _decode_conv(cmd: Any, resolve: Resolve, cfg: DvConfig, version: int
                 ) -> Command | tuple[int, str]:
    dims = [_u(getattr(cmd, n, None), 16) for n in ("w", "h", "z", "c")]
    topo = _u(getattr(cmd, "topo", None), 32)
    mode = _u(getattr(cmd, "output_mode", None), 16)
    if any(d is None or d < 1 for d in dims) or topo is None or mode not in (0, 1):
        return EINVAL, "w, h, z, c must be 1 to 65535, topo 32 bits, output_mode 0 or 1"
    w, h, z, c = (int(d) for d in dims if d is not None)
    if z != 1:
        return ENOTSUP, f"z = {z}: only 2-D inputs (z = 1) are supported"
    command = Command(f"conv v{version}", "conv", input_shape=(c, h, w), output_mode=mode)
    places = {}
    for name in ("input_buf", "output_buf"):
        p = place(getattr(cmd, name, None), resolve, name)
        if isinstance(p, str):
            return EINVAL, p
        places[name] = p
    places["input_buf"].nbytes = timing.tensor_bytes(c, h, w)
    current = (c, h, w)
    runs = getattr(cmd, "run", None)
    if not isinstance(runs, list | tuple) or len(runs) != 32:
        return EINVAL, "run must hold the 32 runs"
    external: list[tuple[int, int, int]] = []
    for index, run in enumerate(runs):
        decoded = _decode_run(run, index, current, bool(topo >> index & 1), resolve, cfg)
        if decoded is None:
            break
        if isinstance(decoded, str):
            return EINVAL, decoded
        command.runs.append(decoded)
        if decoded.weights is not None:
            command.places.append((f"run[{index}].weight_buf", decoded.weights))
        if decoded.to_external:
            external.append(decoded.out_shape)
            current = (c, h, w)
        else:
            current = decoded.out_shape
    if not command.runs or not command.runs[-1].to_external:
        return EINVAL, "a conv command needs at least one run (m > 0), the last with its " \
            "topo bit set (an output to external memory)"
    if len({s[1:] for s in external}) != 1:
        return EINVAL, "the runs written to external memory differ in height or width"
    channels = sum(s[0] for s in external) if mode == 0 else external[0][0]
    if mode == 1 and len({s[0] for s in external}) != 1:
        return EINVAL, "element-wise add needs every external output of one shape"
    out_h, out_w = external[0][1:]
    places["output_buf"].nbytes = timing.tensor_bytes(channels, out_h, out_w)
    command.places += [("input_buf", places["input_buf"]), ("output_buf", places["output_buf"])]
    if mode == 1:
        if external[0] != (c, h, w) and getattr(getattr(cmd, "eltwise_buf", None), "mem",
                                                None) is None:
            return EINVAL, "element-wise add with the input needs outputs of its shape"
        if getattr(getattr(cmd, "eltwise_buf", None), "mem", None) is not None:
            p = place(cmd.eltwise_buf, resolve, "eltwise_buf")
            if isinstance(p, str):
                return EINVAL, p
            p.nbytes = timing.tensor_bytes(*external[0])
            command.places.append(("eltwise_buf", p))
    return command


def _decode_conv_v1(cmd: Any, resolve: Resolve, cfg: DvConfig) -> Command | tuple[int, str]:
    """Version 1: version 0 whose input is 8-bit, one byte per element in the device's
    element order, turned into FP16 through a 256-entry table (`u8tofp16_table`, 512 bytes
    of FP16), its first and third channels swapped with `to_bgr`."""
    command = _decode_conv(getattr(cmd, "conv_cmd", None), resolve, cfg, 1)
    if isinstance(command, tuple):
        return command
    table = place(getattr(cmd, "u8tofp16_table", None), resolve, "u8tofp16_table")
    bgr = _u(getattr(cmd, "to_bgr", None), 16)
    if isinstance(table, str):
        return EINVAL, table
    if bgr is None or (bgr and command.input_shape[0] < 3):
        return EINVAL, "to_bgr must be 0 or 1 (and needs 3 input channels)"
    table.nbytes = 512
    c, h, w = command.input_shape
    dict(command.places)["input_buf"].nbytes = c * h * w
    command.places.append(("u8tofp16_table", table))
    command.to_bgr, command.u8_input = bool(bgr), True
    return command


def _decode_run(run: Any, index: int, current: tuple[int, int, int], to_external: bool,
                resolve: Resolve, cfg: DvConfig) -> RunSpec | str | None:
    """One run (None: the run ends the list), or what is wrong with it."""
    what = f"run[{index}]"
    names = ("conv_pad", "pool_pad")
    wide = {n: _u(getattr(run, n, None), 32) for n in names}
    narrow_names = ("m", "conv_enable", "p", "pz", "conv_stride", "conv_dilation",
                    "weight_fmt", "pool_enable", "pool_avg_param", "pool_size", "pool_stride",
                    "actfunc", "actfunc_param", "rectifi_en", "lrn")
    narrow = {n: _u(getattr(run, n, None), 16) for n in narrow_names}
    if any(v is None for v in (*wide.values(), *narrow.values())):
        return f"{what}: a field is not an integer of its C type's range"
    f: dict[str, Any] = {**wide, **narrow}
    if f["m"] == 0:
        return None
    c, h, w = current
    conv = f["conv_enable"]
    if conv not in (0, 1, 3, 5, 7) or f["pool_enable"] not in (0, 1, 2, 4) \
            or f["actfunc"] > 6 or f["weight_fmt"] not in (0, 1, 3):
        return f"{what}: conv_enable, pool_enable, actfunc or weight_fmt is not a valid value"
    kx, ky = _byte(f["p"], 0), _byte(f["p"], 1) or _byte(f["p"], 0)
    sx, sy = (_byte(f["conv_stride"], 0) or 1), (_byte(f["conv_stride"], 1) or 1)
    dx, dy = (_byte(f["conv_dilation"], 0) or 1), (_byte(f["conv_dilation"], 1) or 1)
    pads = tuple(_byte(f["conv_pad"], k) for k in range(4))  # left, right, top, bottom
    px, py = (_byte(f["pool_size"], 0) or 1), (_byte(f["pool_size"], 1) or 1)
    psx, psy = (_byte(f["pool_stride"], 0) or 1), (_byte(f["pool_stride"], 1) or 1)
    ppads = tuple(_byte(f["pool_pad"], k) for k in range(4))
    m = f["m"]
    if conv:
        if not 1 <= kx <= cfg.max_kernel or not 1 <= ky <= cfg.max_kernel:
            return f"{what}: kernel {kx}x{ky} outside 1..{cfg.max_kernel}"
        if conv & compute.DEPTHWISE and m != c:
            return f"{what}: a depthwise run keeps its {c} channels, m = {m}"
        deconv = bool(conv & compute.DECONV)
        if deconv and (dx, dy) != (1, 1) and (sx, sy) != (1, 1):
            return f"{what}: a dilated deconvolution has stride 1, got {sx}x{sy}"
        oh = _conv_out(h, pads[2] + pads[3], ky, sy, dy, deconv)
        ow = _conv_out(w, pads[0] + pads[1], kx, sx, dx, deconv)
    else:
        if m != c:
            return f"{what}: without convolution the run keeps its {c} channels, m = {m}"
        oh, ow = h, w
    if f["pool_enable"] in (1, 2):
        if px > cfg.max_kernel or py > cfg.max_kernel:
            return f"{what}: pool {px}x{py} larger than {cfg.max_kernel}"
        oh = (oh + ppads[2] + ppads[3] - py) // psy + 1
        ow = (ow + ppads[0] + ppads[1] - px) // psx + 1
    elif f["pool_enable"] == 4:
        oh, ow = oh * py, ow * px
    if oh < 1 or ow < 1:
        return f"{what}: the output would be {ow}x{oh}"
    f.update(kernel=(kx, ky), stride=(sx, sy), dilation=(dx, dy), pads=pads,
             pool_size=(px, py), pool_stride=(psx, psy), pool_pads=ppads)
    weights = None
    if conv:
        p = place(getattr(run, "weight_buf", None), resolve, f"{what}.weight_buf")
        if isinstance(p, str):
            return p
        depthwise = bool(conv & compute.DEPTHWISE)
        size = packing.dil_weights_size if _dilated(f) else packing.conv_weights_size
        p.nbytes = size(1 if depthwise else c, kx, ky, m, f["weight_fmt"] == 3,
                        f["actfunc"] == 4)
        weights = p
    return RunSpec(index, current, (m, oh, ow), f, weights, to_external)


def dilated_layout(conv_enable: int, conv_dilation: int) -> bool:
    """Whether a run of these two command fields reads its weights in the dilated
    packer's layout (`emu/dv/packing.py`): a normal convolution or deconvolution
    (conv_enable 1 or 5; DMP's test_conv packs a dilated deconvolution with
    `dmp_dv_pack_dil_weights`) whose dilation (a byte per axis, 0 meaning 1) exceeds 1 in
    either direction."""
    dilation = ((_byte(conv_dilation, 0) or 1), (_byte(conv_dilation, 1) or 1))
    return conv_enable in (1, 5) and dilation != (1, 1)


def _dilated(fields: dict[str, Any]) -> bool:
    return dilated_layout(fields["conv_enable"], fields["conv_dilation"])


def _decode_fc(cmd: Any, resolve: Resolve, cfg: DvConfig) -> Command | tuple[int, str]:
    sizes = {n: _u(getattr(cmd, n, None), 16) for n in
             ("input_size", "output_size", "weight_fmt", "actfunc", "actfunc_param")}
    if any(v is None for v in sizes.values()):
        return EINVAL, "a field is not an integer of its C type's range"
    f: dict[str, Any] = dict(sizes)
    if not 1 <= f["input_size"] <= cfg.max_fc_vector or f["output_size"] < 1:
        return EINVAL, (f"input_size {f['input_size']} outside 1..{cfg.max_fc_vector} or "
                        f"output_size {f['output_size']} below 1")
    if f["weight_fmt"] not in (0, 1) or f["actfunc"] > 5:
        return EINVAL, "weight_fmt must be 0 or 1, actfunc 0 to 5"
    n_in, n_out = f["input_size"], f["output_size"]
    f["weight_bytes"] = packing.fc_weights_size(n_in, 1, 1, n_out, 1, 1, f["weight_fmt"] == 1)
    command = Command("fc v0", "fc", fc=f)
    for name, nbytes in (("weight_buf", f["weight_bytes"]), ("input_buf", 2 * n_in),
                         ("output_buf", 2 * n_out)):
        p = place(getattr(cmd, name, None), resolve, name)
        if isinstance(p, str):
            return EINVAL, p
        p.nbytes = nbytes
        command.places.append((name, p))
    return command


# --- execution ---------------------------------------------------------------------------

def _at(command: Command, what: str) -> Place:
    return next(p for name, p in command.places if name == what)


def _execute_conv(command: Command) -> None:
    c, h, w = command.input_shape
    places = dict(command.places)
    if "u8tofp16_table" in places:  # conv v1: 8-bit input through the table
        table = places["u8tofp16_table"].bytes().view("<f2").astype(np.float16)
        codes = places["input_buf"].bytes()[layout.element_index(c, h, w)]
        x = table[codes]
        if command.to_bgr:
            x[[0, 2]] = x[[2, 0]]
    else:
        x = layout.from_device(places["input_buf"].bytes(), c, h, w)
    runs = []
    for run in command.runs:
        f = run.fields
        weights = bias = prelu = None
        if run.weights is not None:
            channels = 1 if f["conv_enable"] & compute.DEPTHWISE else run.in_shape[0]
            kx, ky = f["kernel"]
            unpack = packing.unpack_dil_weights if _dilated(f) else packing.unpack_conv_weights
            weights, bias, prelu = unpack(run.weights.bytes(), channels, kx, ky,
                                          run.out_shape[0], f["weight_fmt"] == 3,
                                          f["actfunc"] == 4)
        runs.append(compute.ConvRun(
            m=run.out_shape[0], conv_enable=f["conv_enable"], kernel=f["kernel"],
            pads=f["pads"], stride=f["stride"], dilation=f["dilation"], weights=weights,
            bias=bias, prelu=prelu, pool_enable=f["pool_enable"], pool_pad=f["pool_pads"],
            pool_size=f["pool_size"], pool_stride=f["pool_stride"],
            pool_avg_param=_fp16(f["pool_avg_param"]), actfunc=f["actfunc"],
            actfunc_param=_fp16(f["actfunc_param"]), rectify=bool(f["rectifi_en"]),
            lrn=(bool(f["lrn"] & 1), bool(f["lrn"] & 2), (f["lrn"] >> 8) & 0xF),
            to_external=run.to_external))
    eltwise = None
    if "eltwise_buf" in places:
        ec, eh, ew = command.runs[-1].out_shape
        eltwise = layout.from_device(places["eltwise_buf"].bytes(), ec, eh, ew)
    outputs = compute.run_conv(x, runs, command.output_mode, eltwise)
    image = np.concatenate([layout.to_device(y) for y in outputs])
    out = _at(command, "output_buf")
    out.buffer.data[out.offset:out.offset + image.size] = image


def _execute_fc(command: Command) -> None:
    f = command.fc
    weights, bias = packing.unpack_fc_weights(_at(command, "weight_buf").bytes(),
                                              f["input_size"], f["output_size"],
                                              f["weight_fmt"] == 1)
    x = _at(command, "input_buf").bytes().view("<f2").astype(np.float16)
    y = compute.run_fc(x, weights, bias, f["actfunc"], _fp16(f["actfunc_param"]))
    out = _at(command, "output_buf")
    out.buffer.data[out.offset:out.offset + 2 * y.size] = y.astype("<f2").view(np.uint8)

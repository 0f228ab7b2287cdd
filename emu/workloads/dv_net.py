"""An ONNX network on DMP's DV700 through the `dmp_dv` driver (`emu dv run`).

`run_network(model, input, seed)` imports the model with the project's importer
(`emu.nn.importer`: BatchNormalization folded into convs, Gemm/MatMul as "FC", Relu/Relu6
fused into convs, Add after a conv as its residual), maps every node to a device command,
and runs them as one command list in the current session, as a board program would: one
`dmp_dv_mem` per tensor, weights packed as FP16 by the driver's packers, the input written
between `dmp_dv_mem_sync_start(mem, 0, 1)` and `dmp_dv_mem_sync_end`, the output read after
`dmp_dv_mem_sync_start(mem, 1, 0)`.

The mapping (one command per line; anything else is refused with a one-line InputError
naming the node and op, before any device work):

* Conv, dense (group 1) or depthwise (group = input channels = output channels): one conv
  command of one run (conv_enable 1 or 3) with its pads, strides and dilations; a fused ReLU
  is `rectifi_en`, a fused ReLU6 is actfunc 6. Kernel sides up to the device's
  `max_kernel`, every packed field within its byte.
* A MaxPool / AveragePool / GlobalAveragePool whose input is the output of such a conv and
  read by nothing else goes into the same run's pooling stage (pool_enable 1 max, 2 average
  with pool_avg_param = FP16 of 1 / (w * h)); any other pool is a run of its own
  (conv_enable 0). An AveragePool with padding must count the padding
  (count_include_pad 1: the device's average does); a GlobalAveragePool needs a map of at
  most `max_kernel` a side; no ceil_mode, no pooling dilation, no Indices output.
* A residual conv (the importer's Add(conv, shortcut)) without activation: the conv
  command's element-wise mode (output_mode 1, eltwise_buf = the shortcut). With an
  activation after the Add it is refused: the device adds after the activation. No pooling
  is folded into a residual conv.
* Flatten / Reshape to (1, N) of a map read only by FC nodes (or a graph output): no
  command; the FC packer reorders its weights to the map's device layout (WHC8).
* FC: one FC command (input up to `max_fc_vector` elements); a Relu right after it (and
  the FC's only reader) is its actfunc 1.
* A Softmax whose output is the graph's output: left to the CPU (float32 of the device's
  FP16 output), and said so in the results.

The results (JSON-ready): per command its name, kind, the graph nodes it covers, shapes and
time on the device (`command_times_ps`); the driver's `dmp_dv_cmdlist_get_last_exec_time`;
the simulated time from exec to the wait's return; the output's top-5 (for a vector); and
the cosine similarity and largest absolute difference of the output against the float32
reference (`emu.nn.reference.run_float` on the float32 input), an honest check of the FP16
device. The device output's FP16 bytes (NCHW order) are summarised by their SHA-256.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from emu.dv import layout
from emu.errors import InputError
from emu.nn import execute, importer, opattrs, reference
from emu.nn.graph import Graph, Node
from emu.runtime import dmp_dv as dv
from emu.runtime import dv_commands, session

BYTE = 255  # largest value of one byte of a packed field
POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool")
RESHAPES = ("Flatten", "Reshape")
TOP_K = 5
PACKED_KERNEL = 7  # the largest kernel side the weight packers lay out


@dataclass
class Limits:
    """What the device takes, from `dmp_dv_context_get_info`."""

    max_kernel: int
    max_fc_vector: int


@dataclass
class Planned:
    """One device command the network becomes."""

    name: str
    kind: str  # "conv" or "fc"
    nodes: list[str]
    source: str  # the tensor it reads
    target: str  # the tensor it writes
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    fields: dict[str, int] = field(default_factory=dict)
    weights: np.ndarray | None = None  # FP16: conv NCHW kernels, FC (out, in)
    bias: np.ndarray | None = None  # FP16
    residual: str | None = None  # conv: the tensor added element-wise


@dataclass
class Plan:
    """The network as device commands in order, and the trailing ops left to the CPU."""

    graph: Graph
    commands: list[Planned]
    cpu_ops: list[Node]
    device_output: str  # the tensor the device writes last (before the CPU's ops)


def _refuse(node: Node, why: str) -> InputError:
    return InputError(f"node {node.name} ({node.op}): not supported on the DV700: {why}")


def _chw(graph: Graph, name: str, node: Node) -> tuple[int, int, int]:
    """The device shape (C, H, W) of a batch-1 NCHW map or (1, N) vector."""
    shape = graph.tensors[name].shape
    if len(shape) == 4 and shape[0] == 1:
        return (shape[1], shape[2], shape[3])
    if len(shape) == 2 and shape[0] == 1:
        return (shape[1], 1, 1)
    raise _refuse(node, f"tensor {name!r} of shape {shape} is not a batch-1 NCHW map or "
                  "(1, N) vector")


def _pack2(a: int, b: int) -> int:
    return a | b << 8


def _pack4(left: int, right: int, top: int, bottom: int) -> int:
    return left | right << 8 | top << 16 | bottom << 24


def _fp16_bits(value: float) -> int:
    return int(np.array([value], np.float16).view(np.uint16)[0])


def _window(node: Node, kernel: tuple[int, int], in_hw: tuple[int, int]) -> opattrs.Geometry:
    try:
        return opattrs.geometry(node, kernel, in_hw)
    except InputError as exc:
        raise _refuse(node, str(exc)) from None


def _bytes_fit(node: Node, win: opattrs.Geometry, what: str) -> None:
    values = (*win.pads, *win.stride, *win.dilation)
    if min(values) < 0 or max(values) > BYTE or min(win.stride) < 1:
        raise _refuse(node, f"{what} pads {win.pads}, strides {win.stride} or dilations "
                      f"{win.dilation} do not fit the command's bytes (0..{BYTE})")


def _pool_fields(graph: Graph, node: Node, shape: tuple[int, int, int], limits: Limits
                 ) -> tuple[dict[str, int], tuple[int, int, int]]:
    """The pooling stage of a run for pool `node` on a (C, H, W) map, and its output."""
    c, h, w = shape
    a = node.attrs
    if len(node.outputs) > 1:
        raise _refuse(node, "the Indices output")
    if node.op == "GlobalAveragePool":
        kernel = (h, w)
        win = opattrs.Geometry(kernel, (1, 1), (0, 0, 0, 0), (1, 1))
    else:
        kernel_shape = tuple(int(k) for k in a.get("kernel_shape", ()))
        if len(kernel_shape) != 2:
            raise _refuse(node, f"kernel_shape {kernel_shape} is not 2-D")
        kernel = (kernel_shape[0], kernel_shape[1])
        win = _window(node, kernel, (h, w))
        if win.dilation != (1, 1):
            raise _refuse(node, f"pooling dilations {win.dilation}")
    if max(kernel) > limits.max_kernel:
        raise _refuse(node, f"a {kernel[1]}x{kernel[0]} window is larger than the device's "
                      f"{limits.max_kernel}")
    _bytes_fit(node, win, "pool")
    top, left, bottom, right = win.pads
    if node.op == "AveragePool" and any(win.pads) and not a.get("count_include_pad", 0):
        raise _refuse(node, "an average over padding that does not count the padded "
                      "positions (the device divides by the whole window)")
    enable = 1 if node.op == "MaxPool" else 2
    fields = {"pool_enable": enable, "pool_size": _pack2(kernel[1], kernel[0]),
              "pool_stride": _pack2(win.stride[1], win.stride[0]),
              "pool_pad": _pack4(left, right, top, bottom),
              "pool_avg_param": _fp16_bits(1.0 / (kernel[0] * kernel[1])) if enable == 2 else 0}
    oh = (h + top + bottom - kernel[0]) // win.stride[0] + 1
    ow = (w + left + right - kernel[1]) // win.stride[1] + 1
    return fields, (c, oh, ow)


def _single_reader(graph: Graph, name: str, readers: dict[str, list[Node]]) -> Node | None:
    users = readers.get(name, [])
    return users[0] if len(users) == 1 and name not in graph.outputs else None


def _const(graph: Graph, name: str, node: Node, what: str) -> np.ndarray:
    if not graph.is_const(name):
        raise _refuse(node, f"its {what} is not a constant")
    value = graph.tensors[name].value
    assert value is not None
    return np.asarray(value)


def _conv(graph: Graph, node: Node, readers: dict[str, list[Node]], limits: Limits
          ) -> tuple[Planned, Node | None]:
    """The conv command of a Conv node, and the pool folded into it (if any)."""
    source = node.inputs[0]
    c, h, w = _chw(graph, source, node)
    weights = _const(graph, node.inputs[1], node, "weight")
    if weights.ndim != 4:
        raise _refuse(node, f"weights of shape {weights.shape} (only 2-D convolutions)")
    m, per_group, ky, kx = (int(d) for d in weights.shape)
    group = int(node.attrs.get("group", 1))
    if group == 1 and per_group == c:
        conv_enable = 1
    elif group == c == m and per_group == 1:
        conv_enable = 3
    else:
        raise _refuse(node, f"a grouped convolution (group {group}, {c} -> {m} channels); "
                      "only dense and depthwise ones run")
    largest = min(limits.max_kernel, PACKED_KERNEL)
    if max(kx, ky) > largest:
        raise _refuse(node, f"a {kx}x{ky} kernel is larger than the device's {largest}")
    win = _window(node, (ky, kx), (h, w))
    _bytes_fit(node, win, "conv")
    top, left, bottom, right = win.pads
    (sy, sx), (dy, dx) = win.stride, win.dilation
    bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
    bias = (_const(graph, bias_name, node, "bias") if bias_name
            else np.zeros(m, np.float32))
    fields = {"m": m, "conv_enable": conv_enable, "p": _pack2(kx, ky), "pz": 1,
              "conv_pad": _pack4(left, right, top, bottom), "conv_stride": _pack2(sx, sy),
              "conv_dilation": _pack2(dx, dy), "rectifi_en": 0, "actfunc": 0}
    activation = node.activation
    if activation == "relu":
        fields["rectifi_en"] = 1
    elif activation == "relu6":
        fields["actfunc"] = 6
    elif activation != "none":
        raise _refuse(node, f"the fused activation {activation!r}")
    residual = node.residual
    if residual is not None and activation != "none":
        raise _refuse(node, f"a residual add before the {activation} (the device adds the "
                      "shortcut after the activation)")
    oh = (h + top + bottom - dy * (ky - 1) - 1) // sy + 1
    ow = (w + left + right - dx * (kx - 1) - 1) // sx + 1
    out_shape = (m, oh, ow)
    nodes, target, pool = [node.name], node.outputs[0], None
    after = _single_reader(graph, target, readers) if residual is None else None
    if after is not None and after.op in POOLS:
        pool_fields, out_shape = _pool_fields(graph, after, out_shape, limits)
        fields.update(pool_fields)
        nodes.append(after.name)
        target, pool = after.outputs[0], after
    planned = Planned(node.name, "conv", nodes, source, target, (c, h, w), out_shape,
                      fields, weights.astype(np.float16), bias.astype(np.float16), residual)
    return planned, pool


def _pool_run(graph: Graph, node: Node, limits: Limits) -> Planned:
    source = node.inputs[0]
    shape = _chw(graph, source, node)
    fields, out_shape = _pool_fields(graph, node, shape, limits)
    fields.update(m=shape[0], conv_enable=0)
    return Planned(node.name, "conv", [node.name], source, node.outputs[0], shape,
                   out_shape, fields)


def _fc(graph: Graph, node: Node, source: str, readers: dict[str, list[Node]],
        limits: Limits) -> tuple[Planned, Node | None]:
    in_shape = _chw(graph, source, node)
    weights = _const(graph, node.inputs[1], node, "weight")
    n_out, n_in = (int(d) for d in weights.shape)
    if n_in != int(np.prod(in_shape)):
        raise _refuse(node, f"{n_in} inputs, but its input map {in_shape} has "
                      f"{int(np.prod(in_shape))} elements")
    if n_in > limits.max_fc_vector or n_out > 0xFFFF:
        raise _refuse(node, f"{n_in} inputs and {n_out} outputs (the device takes up to "
                      f"{limits.max_fc_vector} inputs and 65535 outputs)")
    bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
    bias = (_const(graph, bias_name, node, "bias") if bias_name
            else np.zeros(n_out, np.float32))
    nodes, target, relu = [node.name], node.outputs[0], None
    after = _single_reader(graph, target, readers)
    if after is not None and after.op == "Relu":
        nodes.append(after.name)
        target, relu = after.outputs[0], after
    fields = {"actfunc": 1 if relu is not None else 0}
    planned = Planned(node.name, "fc", nodes, source, target, in_shape, (n_out, 1, 1),
                      fields, weights.astype(np.float16), bias.astype(np.float16))
    return planned, relu


def plan(graph: Graph, limits: Limits) -> Plan:
    """The device commands of a compiled graph (module docstring), or InputError."""
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise InputError(f"the model has {len(graph.inputs)} inputs and "
                         f"{len(graph.outputs)} outputs; the DV700 runner takes one of each")
    x = graph.inputs[0]
    shape = graph.tensors[x].shape
    if len(shape) != 4 or shape[0] != 1:
        raise InputError(f"input {x!r} of shape {shape}: expected a batch-1 NCHW map")
    readers = graph.consumers()
    alias: dict[str, str] = {}
    device = {x}  # tensors in device memory
    commands: list[Planned] = []
    cpu_ops: list[Node] = []
    done: set[str] = set()

    def real(name: str) -> str:
        return alias.get(name, name)

    for node in graph.nodes:
        if node.name in done:
            continue
        if cpu_ops:
            raise _refuse(node, "it follows an op left to the CPU")
        if node.op in ("Conv", *POOLS, "FC"):
            source = real(node.inputs[0])
            if source not in device:
                raise _refuse(node, f"its input {node.inputs[0]!r} is not on the device")
            if node.op == "Conv":
                planned, folded = _conv(graph, node, readers, limits)
            elif node.op == "FC":
                planned, folded = _fc(graph, node, source, readers, limits)
            else:
                planned, folded = _pool_run(graph, node, limits), None
            planned.source = source
            if planned.residual is not None:
                planned.residual = real(planned.residual)
                if planned.residual not in device:
                    raise _refuse(node, "its shortcut is not on the device")
            if folded is not None:
                done.add(folded.name)
            _check_shape(graph, node if folded is None else folded, planned)
            commands.append(planned)
            device.add(planned.target)
        elif node.op in RESHAPES:
            source = real(node.inputs[0])
            out = node.outputs[0]
            users = readers.get(out, [])
            if source not in device or len(graph.tensors[out].shape) != 2 or not all(
                    u.op in ("FC", "Softmax", *RESHAPES) for u in users):
                raise _refuse(node, "a Flatten / Reshape is a no-op only as the (1, N) input "
                              "of FC nodes (or of the output)")
            alias[out] = source
            device.add(out)
        elif (node.op == "Softmax" and node.outputs[0] in graph.outputs
              and not readers.get(node.outputs[0]) and real(node.inputs[0]) in device):
            cpu_ops.append(node)
        else:
            raise _refuse(node, "no DV700 command does this op")
    if not commands:
        raise InputError("the model has no node the DV700 runs")
    out = graph.outputs[0]
    last = real(cpu_ops[0].inputs[0]) if cpu_ops else real(out)
    if last != commands[-1].target:
        raise InputError(f"output {out!r} is not written by the last device command")
    return Plan(graph, commands, cpu_ops, last)


def _check_shape(graph: Graph, node: Node, planned: Planned) -> None:
    want = _chw(graph, planned.target, node)
    if want != planned.out_shape:
        raise _refuse(node, f"the device would write {planned.out_shape}, the model says "
                      f"{want}")


# --- running it through the driver -------------------------------------------------------

def _ok(rc: int, what: str) -> None:
    if rc != 0:
        raise InputError(f"{what} failed ({rc}): {dv.dmp_dv_get_last_error_message()}")


class _Memory:
    """The dmp_dv_mem buffers of one run, released together."""

    def __init__(self, ctx: dv.dmp_dv_context) -> None:
        self.ctx = ctx
        self.mems: list[dv.dmp_dv_mem] = []
        self.weight_bytes = 0
        self.activation_bytes = 0

    def alloc(self, nbytes: int, what: str) -> tuple[dv.dmp_dv_mem, np.ndarray]:
        mem = dv.dmp_dv_mem_alloc(self.ctx, nbytes)
        if mem is None:
            raise InputError(f"dmp_dv_mem_alloc({nbytes}) for {what}: "
                             f"{dv.dmp_dv_get_last_error_message()}")
        self.mems.append(mem)
        view = dv.dmp_dv_mem_map(mem)
        assert view is not None
        return mem, view

    def release(self) -> None:
        for mem in self.mems:
            dv.dmp_dv_mem_unmap(mem)
            dv.dmp_dv_mem_release(mem)
        self.mems.clear()


def _upload(mem: dv.dmp_dv_mem, view: np.ndarray, data: np.ndarray) -> None:
    _ok(dv.dmp_dv_mem_sync_start(mem, 0, 1), "dmp_dv_mem_sync_start")
    view[:data.size] = data
    _ok(dv.dmp_dv_mem_sync_end(mem), "dmp_dv_mem_sync_end")


def _packed(memory: _Memory, item: Planned) -> dv.dmp_dv_mem:
    """The command's weights packed by the driver straight into device memory."""
    assert item.weights is not None and item.bias is not None
    w_bits, b_bits = item.weights.view(np.uint16), item.bias.view(np.uint16)
    if item.kind == "conv":
        m, per_group, ky, kx = item.weights.shape
        args: tuple[Any, ...] = (per_group, kx, ky, m, None, w_bits, b_bits, None)
        dilated = dv_commands.dilated_layout(item.fields["conv_enable"],
                                             item.fields["conv_dilation"])
        pack: Any = dv.dmp_dv_pack_dil_weights if dilated else dv.dmp_dv_pack_conv_weights
    else:
        c, h, w = item.in_shape
        args = (c, h, w, item.out_shape[0], 1, 1, None, w_bits, b_bits)
        pack = dv.dmp_dv_pack_fc_weights
    rc, size = pack(*args, None, 0)
    _ok(rc, f"{pack.__name__} (size) for {item.name}")
    mem, view = memory.alloc(size, f"the weights of {item.name}")
    _ok(dv.dmp_dv_mem_sync_start(mem, 0, 1), "dmp_dv_mem_sync_start")
    rc, written = pack(*args, view, size)
    _ok(rc, f"{pack.__name__} for {item.name}")
    _ok(dv.dmp_dv_mem_sync_end(mem), "dmp_dv_mem_sync_end")
    memory.weight_bytes += written
    return mem


def _conv_command(item: Planned, mems: dict[str, dv.dmp_dv_mem],
                  weights: dv.dmp_dv_mem | None) -> dv.dmp_dv_cmdraw_conv_v0:
    cmd = dv.dmp_dv_cmdraw_conv_v0()
    c, h, w = item.in_shape
    cmd.input_buf = dv.dmp_dv_buf(mems[item.source], 0)
    cmd.output_buf = dv.dmp_dv_buf(mems[item.target], 0)
    if item.residual is not None:
        cmd.eltwise_buf = dv.dmp_dv_buf(mems[item.residual], 0)
        cmd.output_mode = 1
    cmd.w, cmd.h, cmd.z, cmd.c = w, h, 1, c
    cmd.topo = 1  # the one run writes to external memory
    run = cmd.run[0]
    for name, value in item.fields.items():
        setattr(run, name, value)
    if weights is not None:
        run.weight_buf = dv.dmp_dv_buf(weights, 0)
    return cmd


def _fc_command(item: Planned, mems: dict[str, dv.dmp_dv_mem], weights: dv.dmp_dv_mem
                ) -> dv.dmp_dv_cmdraw_fc_v0:
    cmd = dv.dmp_dv_cmdraw_fc_v0()
    cmd.weight_buf = dv.dmp_dv_buf(weights, 0)
    cmd.input_buf = dv.dmp_dv_buf(mems[item.source], 0)
    cmd.output_buf = dv.dmp_dv_buf(mems[item.target], 0)
    cmd.input_size = int(np.prod(item.in_shape))
    cmd.output_size = item.out_shape[0]
    cmd.actfunc = item.fields["actfunc"]
    return cmd


def _nbytes(shape: tuple[int, int, int]) -> int:
    return 2 * shape[0] * shape[1] * shape[2]


def _input(graph: Graph, given: np.ndarray | None, seed: int) -> np.ndarray:
    name = graph.inputs[0]
    shape = graph.tensors[name].shape
    if given is None:
        return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    x = np.asarray(given)
    if x.shape == shape[1:]:
        x = x[None]
    if x.shape != shape or not np.issubdtype(x.dtype, np.floating):
        raise InputError(f"input of shape {x.shape} ({x.dtype}): the model takes "
                         f"{name!r} as float32 {shape}")
    if not np.isfinite(x).all():
        raise InputError("input: holds NaN or infinity")
    return x.astype(np.float32)


def run_arrays(model: onnx.ModelProto | bytes | str | Path, input: np.ndarray | None,
               seed: int) -> tuple[dict[str, Any], np.ndarray]:
    """`run_network`'s results and the device's FP16 output (NCHW, before the CPU's ops)."""
    # The DV700 has FC commands: a classifier over a flattened map stays an FC.
    graph = importer.compile_graph(importer.load(model), fc_as_conv=False)
    x = _input(graph, input, seed)
    ctx = dv.dmp_dv_context_create()
    if ctx is None:
        raise InputError(f"dmp_dv_context_create: {dv.dmp_dv_get_last_error_message()}")
    memory = _Memory(ctx)
    cmdlist = None
    try:
        info = dv.dmp_dv_info_v0()
        _ok(dv.dmp_dv_context_get_info(ctx, info), "dmp_dv_context_get_info")
        network = plan(graph, Limits(info.max_kernel_size, info.max_fc_vector_size))
        results, out = _execute(network, ctx, memory, x)
        cmdlist = results.pop("_cmdlist")
    finally:
        if cmdlist is not None:
            dv.dmp_dv_cmdlist_release(cmdlist)
        memory.release()
        dv.dmp_dv_context_release(ctx)
    expected = reference.run_float(graph, {graph.inputs[0]: x})[graph.outputs[0]]
    shown = network.cpu_ops[0].inputs[0] if network.cpu_ops else graph.outputs[0]
    final = out.astype(np.float32).reshape(graph.tensors[shown].shape)
    for node in network.cpu_ops:
        final = reference.float_node(graph, node, [final])[0]
    results["output"].update(_summary(final, expected))
    results["seed"] = seed
    return results, out


def _execute(network: Plan, ctx: dv.dmp_dv_context, memory: _Memory, x: np.ndarray
             ) -> tuple[dict[str, Any], np.ndarray]:
    graph = network.graph
    mems: dict[str, dv.dmp_dv_mem] = {}
    views: dict[str, np.ndarray] = {}
    first = network.commands[0].source
    mems[first], views[first] = memory.alloc(layout.tensor_bytes(*x.shape[1:]), "the input")
    memory.activation_bytes += layout.tensor_bytes(*x.shape[1:])
    _upload(mems[first], views[first], layout.to_device(x[0].astype(np.float16)))
    weights: list[dv.dmp_dv_mem | None] = []
    for item in network.commands:
        weights.append(_packed(memory, item) if item.weights is not None else None)
        mems[item.target], views[item.target] = memory.alloc(_nbytes(item.out_shape),
                                                             item.target)
        memory.activation_bytes += _nbytes(item.out_shape)
    cmdlist = dv.dmp_dv_cmdlist_create(ctx)
    if cmdlist is None:
        raise InputError(f"dmp_dv_cmdlist_create: {dv.dmp_dv_get_last_error_message()}")
    try:
        for item, wmem in zip(network.commands, weights, strict=True):
            cmd: Any
            if item.kind == "conv":
                cmd = _conv_command(item, mems, wmem)
            else:
                assert wmem is not None
                cmd = _fc_command(item, mems, wmem)
            rc = dv.dmp_dv_cmdlist_add_raw(cmdlist, cmd)
            if rc != 0:
                raise InputError(f"node {item.name}: the driver refused its command: "
                                 f"{dv.dmp_dv_get_last_error_message()}")
        _ok(dv.dmp_dv_cmdlist_commit(cmdlist), "dmp_dv_cmdlist_commit")
        start_ps = session.current().now_ps
        exec_id = dv.dmp_dv_cmdlist_exec(cmdlist)
        if exec_id < 0:
            _ok(exec_id, "dmp_dv_cmdlist_exec")
        _ok(dv.dmp_dv_cmdlist_wait(cmdlist, exec_id), "dmp_dv_cmdlist_wait")
        wall_ps = session.current().now_ps - start_ps
        exec_us = dv.dmp_dv_cmdlist_get_last_exec_time(cmdlist)
        times = dv.command_times_ps(cmdlist)
    except BaseException:
        dv.dmp_dv_cmdlist_release(cmdlist)
        raise
    last = network.device_output
    _ok(dv.dmp_dv_mem_sync_start(mems[last], 1, 0), "dmp_dv_mem_sync_start")
    out = layout.from_device(views[last], *network.commands[-1].out_shape)
    _ok(dv.dmp_dv_mem_sync_end(mems[last]), "dmp_dv_mem_sync_end")
    commands = [{"index": k, "name": item.name, "kind": item.kind, "nodes": item.nodes,
                 "input_shape": list(item.in_shape), "output_shape": list(item.out_shape),
                 "residual": item.residual is not None, "device_us": ps / 1e6}
                for k, (item, (_, ps)) in enumerate(zip(network.commands, times, strict=True))]
    counts = {kind: sum(1 for c in commands if c["kind"] == kind) for kind in ("conv", "fc")}
    results: dict[str, Any] = {
        "input": {"name": graph.inputs[0], "shape": list(x.shape)},
        "commands": commands,
        "command_counts": counts,
        "device_us": sum(ps for _, ps in times) / 1e6,
        "exec_time_us": int(exec_us),
        "wall_time_us": wall_ps / 1e6,
        "cpu_ops": [f"{n.op} {n.name}" for n in network.cpu_ops],
        "memory": {"buffers": len(memory.mems), "weight_bytes": memory.weight_bytes,
                   "activation_bytes": memory.activation_bytes},
        "output": {"name": graph.outputs[0], "shape": list(graph.tensors[graph.outputs[0]].shape),
                   "device_tensor": last,
                   "fp16_sha256": hashlib.sha256(
                       np.ascontiguousarray(out).astype("<f2").tobytes()).hexdigest()},
        "_cmdlist": cmdlist,
    }
    return results, out


def _summary(final: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    got = final.astype(np.float64).ravel()
    want = reference.astype(np.float64).ravel()
    doc: dict[str, Any] = {
        "check": {"reference": "float32 (emu.nn.reference.run_float on the float32 input)",
                  "cosine": execute.cosine_similarity(got, want),
                  "max_abs_diff": float(np.max(np.abs(got - want))) if got.size else 0.0,
                  "max_abs_reference": float(np.max(np.abs(want))) if want.size else 0.0},
        "top5": None}
    if final.size > 1 and final.size == max(final.shape):
        order = np.argsort(-got, kind="stable")[:TOP_K]
        doc["top5"] = [{"class": int(k), "score": float(got[k])} for k in order]
    return doc


def run_network(model: onnx.ModelProto | bytes | str | Path, input: np.ndarray | None,
                seed: int) -> dict[str, Any]:
    """Run `model` on the DV700 of the current session (module docstring); the input is
    float32 NCHW of batch 1, or None for a standard normal one drawn with `seed`."""
    return run_arrays(model, input, seed)[0]

"""Where each op of a compiled `Graph` runs, and the split into BPU subgraphs (issue 11).

`decide(graph, node)` gives "bpu", "cpu" or "dsp" with a reason, from a table distilled
from the J5 (RDK Ultra, "bayes" march) ONNX operator list for the ops the zoo and common
models use:

- Conv (fused or not; FC is a 1x1 conv): 4-D; kernel H, W <= 31; C_in/group * kH * kW <=
  65535; channels per group and output channels <= 8192; stride <= 256, and {1, 2} with a
  fused residual; dilation <= 16, stride 1 when dilated. Depthwise is a grouped Conv.
- ConvTranspose: weight N, C <= 2048; kernel H, W <= 14, not both 1; stride 1-14, not
  both 1; no dilation.
- MaxPool, AveragePool: kernel, stride and pads <= 256; MaxPool without dilation.
- Resize: 4-D, mode nearest or linear. Concat: not along N. Add, Mul, Sum: at most one
  constant input. MatMul: both inputs of one rank, the two lowest dims <= 8192.
- No constraints beyond the general ones: Relu, Clip, Sigmoid, HardSigmoid, Silu (a LUT),
  GlobalAveragePool, ScaleShift (a folded-away BatchNormalization), Flatten, Reshape,
  Squeeze, Unsqueeze, Transpose, Slice, Split, Gather.
- Preprocess (the colour conversion and normalisation of an image input type,
  `emu/nn/preprocess.py`): the BPU, as on J5.
- Softmax: on the CPU, as the J5 toolchain does by default; with `dsp_softmax=True` on the
  vDSP's softmax operator (emu/vdsp/ops/nn.py) instead.
- LayerNormalization, InstanceNormalization, LRN, NonMaxSuppression, RoiAlign, TopK and
  any op not in the table: the CPU.

Segmentation (`place`), after NNIE's (seed 003): the ops the accelerator cannot run cut
the network into accelerator segments with CPU/DSP segments between them (NNIE ->
non-NNIE -> NNIE ...). The nodes are re-sorted topologically, keeping a ready node on the
device of the node before it when dependences allow (so a CPU op on a side branch does not
cut a BPU run in two); then every maximal run of consecutive nodes on one device is a
segment. Before the first segment, one "quantize" CPU segment converts the float
feature-map inputs that BPU nodes read; after the last, one "dequantize" CPU segment
converts the model outputs that BPU nodes write (the BPU runs int8 in and out).
"""

from __future__ import annotations

from dataclasses import dataclass

from emu.nn.graph import Graph, Node, toposort

CONV_KERNEL_MAX = 31
CONV_CHANNELS_MAX = 8192
CONV_KERNEL_VOLUME_MAX = 65535
CONV_STRIDE_MAX = 256
CONV_DILATION_MAX = 16
DECONV_CHANNELS_MAX = 2048
DECONV_KERNEL_MAX = 14
DECONV_STRIDE_MAX = 14
POOL_MAX = 256
MATMUL_DIM_MAX = 8192

_FREE = {"Relu", "Clip", "Sigmoid", "HardSigmoid", "Silu", "GlobalAveragePool", "ScaleShift",
         "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Split",
         "Gather", "BatchNormalization"}
_CPU = {"LayerNormalization": "LayerNormalization runs on the CPU on J5",
        "InstanceNormalization": "InstanceNormalization runs on the CPU on J5",
        "LRN": "LRN runs on the CPU on J5",
        "NonMaxSuppression": "NonMaxSuppression runs on the CPU on J5",
        "RoiAlign": "RoiAlign runs on the CPU on J5",
        "TopK": "TopK runs on the CPU on J5"}


@dataclass(frozen=True)
class Decision:
    """Where one node runs and why."""

    node: str
    op: str
    where: str  # "bpu", "cpu" or "dsp"
    reason: str


@dataclass(frozen=True)
class Segment:
    """A run of nodes on one device. `kind` is "bpu", "cpu", "dsp", "quantize" or
    "dequantize" (the last two run on the CPU and name the tensors, not nodes)."""

    kind: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    reasons: tuple[str, ...] = ()

    @property
    def device(self) -> str:
        return "cpu" if self.kind in ("quantize", "dequantize") else self.kind


def _pair(value: object, default: int) -> tuple[int, ...]:
    if value is None:
        return (default, default)
    return tuple(int(v) for v in value)  # type: ignore[attr-defined]


def _conv(graph: Graph, node: Node) -> str | None:
    w = graph.tensors[node.inputs[1]].shape
    if node.op == "FC":
        w = (*w, 1, 1)  # a 1x1 convolution
    if len(w) != 4:
        return f"{len(w) - 2}-D convolution (the BPU runs conv2d here)"
    cout, cin, kh, kw = w
    if max(kh, kw) > CONV_KERNEL_MAX:
        return f"kernel {kh}x{kw} exceeds {CONV_KERNEL_MAX}x{CONV_KERNEL_MAX}"
    if cin * kh * kw > CONV_KERNEL_VOLUME_MAX:
        return f"kernel C*H*W = {cin * kh * kw} exceeds {CONV_KERNEL_VOLUME_MAX}"
    if max(cin, cout) > CONV_CHANNELS_MAX:
        return f"channels {cin}->{cout} exceed {CONV_CHANNELS_MAX}"
    strides = _pair(node.attrs.get("strides"), 1)
    dilations = _pair(node.attrs.get("dilations"), 1)
    if max(strides) > CONV_STRIDE_MAX:
        return f"stride {strides} exceeds {CONV_STRIDE_MAX}"
    if node.residual and max(strides) > 2:
        return f"stride {strides} with a fused residual add (allowed: 1, 2)"
    if max(dilations) > CONV_DILATION_MAX:
        return f"dilation {dilations} exceeds {CONV_DILATION_MAX}"
    if max(dilations) > 1 and max(strides) > 1:
        return f"dilation {dilations} with stride {strides} (dilated convs need stride 1)"
    return None


def _deconv(graph: Graph, node: Node) -> str | None:
    w = graph.tensors[node.inputs[1]].shape
    if len(w) != 4:
        return "ConvTranspose is not 2-D"
    cin, cout, kh, kw = w
    if max(cin, cout) > DECONV_CHANNELS_MAX:
        return f"channels {cin}->{cout} exceed {DECONV_CHANNELS_MAX}"
    if max(kh, kw) > DECONV_KERNEL_MAX or (kh, kw) == (1, 1):
        return f"kernel {kh}x{kw} (allowed: up to {DECONV_KERNEL_MAX}, not 1x1)"
    strides = _pair(node.attrs.get("strides"), 1)
    if max(strides) > DECONV_STRIDE_MAX or all(s == 1 for s in strides):
        return f"stride {strides} (allowed: up to {DECONV_STRIDE_MAX}, not both 1)"
    if max(_pair(node.attrs.get("dilations"), 1)) > 1:
        return "dilated ConvTranspose"
    return None


def _pool(node: Node) -> str | None:
    for key in ("kernel_shape", "strides", "pads"):
        values = _pair(node.attrs.get(key), 1)
        if max(values) > POOL_MAX:
            return f"{key} {values} exceeds {POOL_MAX}"
    if node.op == "MaxPool" and max(_pair(node.attrs.get("dilations"), 1)) > 1:
        return "dilated MaxPool"
    return None


def decide(graph: Graph, node: Node, dsp_softmax: bool = False) -> Decision:
    """The device of one node and the reason (for the CPU: which constraint failed)."""
    op = node.op
    problem: str | None
    if op in ("Conv", "FC"):
        problem = _conv(graph, node)
    elif op == "ConvTranspose":
        problem = _deconv(graph, node)
    elif op in ("MaxPool", "AveragePool"):
        problem = _pool(node)
    elif op == "Resize":
        x = graph.tensors[node.inputs[0]].shape
        mode = node.attrs.get("mode", "nearest")
        problem = (None if len(x) == 4 and mode in ("nearest", "linear")
                   else f"Resize of a {len(x)}-D input in mode {mode}")
    elif op == "Concat":
        problem = "Concat along N" if node.attrs.get("axis") == 0 else None
    elif op in ("Add", "Mul", "Sum"):
        consts = sum(graph.is_const(n) for n in node.inputs)
        problem = f"{op} with {consts} constant inputs (at most 1)" if consts > 1 else None
    elif op == "MatMul":
        a, b = (graph.tensors[n].shape for n in node.inputs[:2])
        problem = (None if len(a) == len(b) and max(a[-2:] + b[-2:]) <= MATMUL_DIM_MAX
                   else f"MatMul of shapes {a} x {b}")
    elif op == "Preprocess":
        return Decision(node.name, op, "bpu", "image input conversion runs on the BPU")
    elif op == "Softmax":
        if dsp_softmax:
            return Decision(node.name, op, "dsp", "Softmax on the vDSP softmax operator")
        problem = "Softmax runs on the CPU by default on J5"
    elif op in _CPU:
        problem = _CPU[op]
    elif op in _FREE:
        problem = None
    else:
        problem = f"{op} is not in the J5 BPU operator table"
    if problem is None:
        return Decision(node.name, op, "bpu", "supported")
    return Decision(node.name, op, "cpu", problem)


def place(graph: Graph, dsp_softmax: bool = False) -> list[Segment]:
    """The graph cut into quantize, BPU/CPU/DSP and dequantize segments (see the module)."""
    decisions = {n.name: decide(graph, n, dsp_softmax) for n in graph.nodes}
    where = {name: d.where for name, d in decisions.items()}
    nodes = toposort(graph.nodes, graph.inputs, graph.tensors, prefer=where)
    runs: list[list[Node]] = []
    for node in nodes:
        if runs and where[runs[-1][-1].name] == where[node.name]:
            runs[-1].append(node)
        else:
            runs.append([node])
    readers = graph.consumers()
    segments = []
    for run in runs:
        names = {n.name for n in run}
        written = {out for n in run for out in n.outputs}
        ins = tuple(dict.fromkeys(i for n in run for i in n.inputs
                                  if i and i not in written and not graph.is_const(i)))
        outs = tuple(o for o in dict.fromkeys(written)
                     if o in graph.outputs or any(r.name not in names
                                                  for r in readers.get(o, [])))
        kind = where[run[0].name]
        reasons = tuple(f"{n.name} ({n.op}): {decisions[n.name].reason}" for n in run
                        ) if kind != "bpu" else ()
        segments.append(Segment(kind, tuple(n.name for n in run), ins, outs, reasons))
    bpu_reads = {i for s in segments if s.kind == "bpu" for i in s.inputs}
    bpu_writes = {o for s in segments if s.kind == "bpu" for o in s.outputs}
    quant = tuple(i for i in graph.inputs
                  if i in bpu_reads and graph.tensors[i].dtype.startswith("float"))
    dequant = tuple(o for o in graph.outputs if o in bpu_writes)
    if quant:
        segments.insert(0, Segment("quantize", (), quant, quant,
                                   ("float feature-map inputs to int8 for the BPU",)))
    if dequant:
        segments.append(Segment("dequantize", (), dequant, dequant,
                                ("BPU outputs back to float on the CPU",)))
    return segments

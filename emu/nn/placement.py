"""Where each op of a compiled `Graph` runs, and the split into BPU subgraphs (issue 11).

`decide(graph, node)` gives "bpu", "cpu" or "dsp" with a reason, from the operator table
(`emu/nn/optable.py`, J5's ONNX operator list): a "bpu" operator runs on the BPU while the
node meets the row's constraints and reads only float feature maps (the BPU computes
quantised float tensors; a node reading an integer or boolean tensor runs on the CPU),
otherwise on the CPU with the failed constraint as the reason; "cpu" operators run on the
CPU; Softmax, with `dsp_softmax=True`, on the vDSP's softmax operator (emu/vdsp/ops/nn.py).
A node the table only constant-folds, an operator the table lists as not integrated, and
an operator it does not list stop the compilation (`place` raises a one-line InputError
naming the node and the operator).

Segmentation (`place`), after NNIE's (seed 003): the ops the accelerator cannot run cut
the network into accelerator segments with CPU/DSP segments between them (NNIE ->
non-NNIE -> NNIE ...). The nodes are re-sorted topologically, keeping a ready node on the
device of the node before it when dependences allow (so a CPU op on a side branch does not
cut a BPU run in two); then every maximal run of consecutive nodes on one device is a
segment. A view (Reshape, Flatten, Squeeze, Unsqueeze, Split, Identity) of a tensor the
CPU or a DSP writes runs on the CPU (at no cost: the estimate gives a view no work): the
BPU would only copy it. Before the first
segment, one "quantize" CPU segment converts the float
feature-map inputs that BPU nodes read; after the last, one "dequantize" CPU segment
converts the model outputs that BPU nodes write (the BPU runs int8 in and out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from emu.errors import InputError
from emu.nn import optable
from emu.nn.graph import Graph, Node, toposort


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


def _float_inputs(graph: Graph, node: Node) -> str | None:
    """Why the BPU cannot read the node's feature maps, if it cannot."""
    for name in node.inputs:
        if not name or graph.is_const(name):
            continue
        dtype = graph.tensors[name].dtype
        if not dtype.startswith("float") and not (node.op == "Preprocess"
                                                  and dtype == "uint8"):
            return (f"reads {dtype} tensor {name!r} (the BPU computes quantised float "
                    "feature maps)")
    return None


def refusal(node: Node) -> str | None:
    """Why no device runs `node` (the compilation stops), or None."""
    row = optable.rule(node.op)
    if row is None:
        return f"{node.op} is not in the J5 operator table (`emu ops` lists it)"
    if row.where == "unsupported":
        return f"{node.op} is {row.constraints}"
    if row.where == "fold":
        return (f"{node.op} is supported only by constant folding, and an input of this "
                "node is not constant")
    return None


def decide(graph: Graph, node: Node, dsp_softmax: bool = False) -> Decision:
    """The device of one node and the reason (for the CPU: which constraint failed)."""
    op = node.op
    refused = refusal(node)
    if refused is not None:
        raise InputError(f"node {node.name} ({op}): {refused}")
    row = optable.RULES[op]
    if op == "Softmax" and dsp_softmax:
        return Decision(node.name, op, "dsp", "Softmax on the vDSP softmax operator")
    if row.where == "cpu":
        return Decision(node.name, op, "cpu", f"{op} runs on the {row.constraints}")
    problem = _float_inputs(graph, node)
    if problem is None and row.check is not None:
        problem = row.check(graph, node)
    if problem is None:
        return Decision(node.name, op, "bpu", "supported")
    return Decision(node.name, op, "cpu", problem)


def place(graph: Graph, dsp_softmax: bool = False) -> list[Segment]:
    """The graph cut into quantize, BPU/CPU/DSP and dequantize segments (see the module)."""
    decisions = {n.name: decide(graph, n, dsp_softmax) for n in graph.nodes}
    producers = graph.producers()
    for node in graph.nodes:  # in topological order: a chain of views follows its source
        source = producers.get(node.inputs[0]) if node.inputs else None
        if (optable.kind(node.op) == "alias" and decisions[node.name].where == "bpu"
                and source is not None and decisions[source.name].where != "bpu"):
            decisions[node.name] = Decision(
                node.name, node.op, "cpu", f"a view of {source.name}'s output, which the "
                f"{decisions[source.name].where.upper()} writes")
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
        # In node order (a set's order would change with Python's string hashing, and
        # the segment's outputs with it, from one process to the next).
        written = dict.fromkeys(out for n in run for out in n.outputs)
        ins = tuple(dict.fromkeys(i for n in run for i in n.inputs
                                  if i and i not in written and not graph.is_const(i)))
        outs = tuple(o for o in written
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


def final_convs(graph: Graph, segments: list[Segment]) -> dict[str, Node]:
    """The Convs without activation or residual add whose output leaves the BPU and no BPU
    node reads, by output tensor: J5 hands these over as int32 accumulators when their
    input is int8 (`QuantModel.wide_outputs`)."""
    running = {name for s in segments if s.kind == "bpu" for name in s.nodes}
    leaving = {t for s in segments if s.kind == "bpu" for t in s.outputs}
    read_on_bpu = {t for n in graph.nodes if n.name in running for t in n.inputs}
    return {node.outputs[0]: node for node in graph.nodes
            if node.name in running and node.op == "Conv" and node.activation == "none"
            and not node.residual and node.outputs[0] in leaving
            and node.outputs[0] not in read_on_bpu}


# The ops that only lay a tensor out anew: an int32 accumulator output may pass through them
# on the BPU (a detection head exported channels-last, a classifier's flattened logits).
LAYOUT_OPS = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})


@dataclass(frozen=True)
class Accumulators:
    """How a model output can be the int32 accumulators of the Conv or FC `source`: the
    layout ops `chain` lead from the source's output to it (each tensor read by the next
    op only), and `axes` gives, per tensor of the chain (the source's output first), the
    axis that runs along the source's output channels."""

    source: Node
    chain: tuple[Node, ...]
    axes: dict[str, int]


def accumulators(graph: Graph, segments: list[Segment], output: str) -> Accumulators | str:
    """The `Accumulators` that hand `output` over as int32 (`emu compile --output-type
    NAME=int32`), or why it cannot be: it must leave a BPU segment, and be written by a
    Conv or FC without activation or residual add, through layout ops only that keep the
    output channels on one axis of their own."""
    running = {name for s in segments if s.kind == "bpu" for name in s.nodes}
    producers, readers = graph.producers(), graph.consumers()
    chain: list[Node] = []
    name = output
    while True:
        node = producers.get(name)
        if node is None or node.name not in running:
            return f"{output} is not computed by the BPU"
        if node.op in ("Conv", "FC"):
            break
        if node.op not in LAYOUT_OPS:
            return f"{output} is written by {node.op} node {node.name}, not by a Conv or Gemm"
        chain.insert(0, node)
        name = node.inputs[0]
        if len(readers.get(name, [])) != 1 or name in graph.outputs:
            return f"{name}, on the way from a Conv to {output}, has other readers"
    if node.activation != "none" or node.residual:
        return f"{node.op} node {node.name} has an activation or residual add fused"
    if not chain and any(r.name in running for r in readers.get(output, [])):
        return f"{output} is also read on the BPU"
    axis = 1
    axes = {node.outputs[0]: axis}
    for step in chain:
        before = graph.tensors[step.inputs[0]].shape
        after = graph.tensors[step.outputs[0]].shape
        if step.op == "Transpose":
            perm = list(step.attrs.get("perm", range(len(before))[::-1]))
            axis = perm.index(axis)
        else:  # a reshape: the channels must keep an axis of their own
            lead = math.prod(before[:axis])
            found = [k for k in range(len(after))
                     if math.prod(after[:k]) == lead and after[k] == before[axis]]
            if not found:
                return (f"{step.op} node {step.name} mixes the output channels of "
                        f"{node.name} with other dimensions")
            axis = found[0]
        axes[step.outputs[0]] = axis
    return Accumulators(node, tuple(chain), axes)

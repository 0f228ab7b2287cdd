"""The compiler's graph IR: typed tensors and nodes, independent of onnx protobufs.

A `Graph` holds its nodes in topological order and every tensor they name (graph inputs,
constants, intermediate and output feature maps) with a static shape. A fused layer group
is one node: op "Conv" with attr `activation` ("none", "relu", "relu6") and an optional
fourth input, the residual (`Node.residual`: y = act(conv(x) + residual)), op "FC" (a
Gemm/MatMul with constant weights, 1x1-conv semantics), op "Silu" (x * Sigmoid(x)), op
"ScaleShift" (a BatchNormalization without a conv before it).
Passes build new graphs; none mutates one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from emu.errors import InputError

# The opset of a graph that does not say (the zoo writes its networks at this one).
DEFAULT_OPSET = 13


@dataclass(frozen=True)
class Tensor:
    """A named tensor: static shape, NumPy dtype name, and its value when it is constant."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    value: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def is_const(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class Node:
    """One operator. Empty input names mark omitted optional inputs (as in ONNX)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def activation(self) -> str:
        """A fused Conv's activation: "none", "relu" or "relu6"."""
        return str(self.attrs.get("activation", "none"))

    @property
    def residual(self) -> str | None:
        """The shortcut feature map a fused Conv adds before its activation, if any."""
        if self.op == "Conv" and len(self.inputs) > 3 and self.inputs[3]:
            return self.inputs[3]
        return None


@dataclass(frozen=True)
class Graph:
    """Inputs and outputs by tensor name, nodes in topological order, all tensors by name;
    `opset` is the default-domain opset whose definitions the nodes follow."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    tensors: dict[str, Tensor]
    opset: int = DEFAULT_OPSET

    def producers(self) -> dict[str, Node]:
        """Tensor name -> the node that writes it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Tensor name -> the nodes that read it (in node order)."""
        found: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(n for n in node.inputs if n):
                found.setdefault(name, []).append(node)
        return found

    def ops(self) -> dict[str, int]:
        """Op -> how many nodes have it."""
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts

    def is_const(self, name: str) -> bool:
        return bool(name) and self.tensors[name].is_const

    def with_nodes(self, nodes: Iterable[Node], tensors: dict[str, Tensor] | None = None,
                   outputs: Sequence[str] | None = None) -> Graph:
        """A copy with other nodes (re-sorted), tensors pruned to those still named."""
        nodes = toposort(nodes, self.inputs, tensors if tensors is not None else self.tensors)
        tensors = dict(tensors if tensors is not None else self.tensors)
        outputs = tuple(outputs if outputs is not None else self.outputs)
        used = set(self.inputs) | set(outputs)
        for node in nodes:
            used.update(n for n in node.inputs if n)
            used.update(node.outputs)
        graph = replace(self, nodes=nodes, outputs=outputs,
                        tensors={k: v for k, v in tensors.items() if k in used})
        graph.validate()
        return graph

    def validate(self) -> None:
        """Every name known and written once, nodes in topological order, outputs produced."""
        written = set(self.inputs)
        for name, tensor in self.tensors.items():
            if tensor.is_const:
                written.add(name)
        for node in self.nodes:
            for name in node.inputs:
                if name and name not in written:
                    raise InputError(f"graph: node {node.name} ({node.op}) reads {name!r} "
                                     "before anything writes it")
            for name in (n for n in node.outputs if n):
                if name in written:
                    raise InputError(f"graph: tensor {name!r} is written twice")
                if name not in self.tensors:
                    raise InputError(f"graph: tensor {name!r} has no shape")
                written.add(name)
        for name in self.outputs:
            if name not in written:
                raise InputError(f"graph: output {name!r} is never written")


def toposort(nodes: Iterable[Node], inputs: Iterable[str], tensors: dict[str, Tensor],
             prefer: dict[str, str] | None = None) -> tuple[Node, ...]:
    """Nodes in a topological order, stable (original order among ready nodes). With
    `prefer` (node name -> a group label), a ready node of the last node's group goes
    first, so nodes of one group stay together where the dependences allow it.

    Kahn's algorithm over heaps of original positions: each step takes the earliest ready
    node (of the preferred group when it has one ready), in time linear in the edges times
    a logarithm, not quadratic in the nodes."""
    pending = list(nodes)
    ready_names = set(inputs) | {k for k, t in tensors.items() if t.is_const}
    produced = {out for node in pending for out in node.outputs}
    missing = []  # per node: how many of its inputs are still to be produced
    waiting: dict[str, list[int]] = {}  # tensor -> the nodes waiting for it
    for index, node in enumerate(pending):
        names = {n for n in node.inputs if n and n not in ready_names and n in produced}
        missing.append(len(names))
        for name in names:
            waiting.setdefault(name, []).append(index)
    ready: list[int] = []
    groups: dict[str, list[int]] = {}  # label -> ready nodes of that group

    def make_ready(index: int) -> None:
        heapq.heappush(ready, index)
        label = prefer.get(pending[index].name) if prefer is not None else None
        if label is not None:
            heapq.heappush(groups.setdefault(label, []), index)

    for index, count in enumerate(missing):
        if count == 0:
            make_ready(index)
    taken = [False] * len(pending)
    ordered: list[Node] = []
    last: str | None = None
    while len(ordered) < len(pending):
        pick = None
        if last is not None:
            same = groups.get(last, [])
            while same and taken[same[0]]:
                heapq.heappop(same)
            pick = same[0] if same else None
        while ready and taken[ready[0]]:
            heapq.heappop(ready)
        if pick is None:
            if not ready:
                first = next(i for i, done in enumerate(taken) if not done)
                raise InputError(f"graph: a cycle through node {pending[first].name}")
            pick = ready[0]
        taken[pick] = True
        node = pending[pick]
        ordered.append(node)
        for out in node.outputs:
            if out in ready_names:
                continue
            ready_names.add(out)
            for index in waiting.pop(out, ()):
                missing[index] -= 1
                if missing[index] == 0:
                    make_ready(index)
        last = prefer.get(node.name) if prefer is not None else None
    return tuple(ordered)


# --- serialisation (the model file stores graphs as JSON plus arrays) ----------------------

def _encode_attr(value: Any, key: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, np.ndarray):
        arrays[key] = value
        return {"array": key}
    if isinstance(value, (tuple, list)):
        return [_encode_attr(v, f"{key}.{i}", arrays) for i, v in enumerate(value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else {"float": repr(float(value))}
    if isinstance(value, str):
        return value
    raise InputError(f"graph: attribute {key} of type {type(value).__name__} cannot be stored")


def _decode_attr(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, list):
        return tuple(_decode_attr(v, arrays) for v in value)
    if isinstance(value, dict):
        if "array" in value:
            return arrays[value["array"]]
        return float(value["float"])
    return value


def to_packed(graph: Graph, prefix: str = "graph", elide: Iterable[str] = ()
              ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The graph as a JSON-able description and named arrays (constants, array attrs).
    Constants named in `elide` are described but their values not stored: `from_packed`
    gives them a read-only zero value of their shape (for float weights that a quantised
    copy replaces)."""
    arrays: dict[str, np.ndarray] = {}
    tensors = {}
    elided = set(elide)
    for name, t in graph.tensors.items():
        entry: dict[str, Any] = {"shape": list(t.shape), "dtype": t.dtype}
        if t.value is not None and name in elided:
            entry["elided"] = True
        elif t.value is not None:
            key = f"{prefix}.const.{len(arrays)}"
            arrays[key] = t.value
            entry["value"] = key
        tensors[name] = entry
    nodes = [{"name": n.name, "op": n.op, "inputs": list(n.inputs), "outputs": list(n.outputs),
              "attrs": {k: _encode_attr(v, f"{prefix}.attr.{i}.{k}", arrays)
                        for k, v in n.attrs.items()}}
             for i, n in enumerate(graph.nodes)]
    meta = {"inputs": list(graph.inputs), "outputs": list(graph.outputs), "nodes": nodes,
            "tensors": tensors, "opset": graph.opset}
    return meta, arrays


def from_packed(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Graph:
    """The graph `to_packed` described (validated; InputError if it is not a graph)."""
    try:
        tensors = {}
        for name, t in meta["tensors"].items():
            value = arrays[t["value"]] if "value" in t else None
            shape = tuple(int(s) for s in t["shape"])
            if any(s < 0 for s in shape):
                raise InputError(f"graph: tensor {name!r} has shape {shape}")
            if t.get("elided"):
                value = np.broadcast_to(np.zeros((), np.dtype(t["dtype"])), shape)
            if value is not None and value.shape != shape:
                raise InputError(f"graph: constant {name!r} has shape {value.shape}, "
                                 f"expected {shape}")
            tensors[name] = Tensor(name, shape, str(np.dtype(t["dtype"])), value)
        nodes = tuple(Node(n["name"], n["op"], tuple(n["inputs"]), tuple(n["outputs"]),
                           {k: _decode_attr(v, arrays) for k, v in n["attrs"].items()})
                      for n in meta["nodes"])
        graph = Graph(tuple(meta["inputs"]), tuple(meta["outputs"]), nodes, tensors,
                      int(meta.get("opset", DEFAULT_OPSET)))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"graph: malformed description ({exc!r})") from None
    graph.validate()
    return graph

"""`graph.toposort` against the plain quadratic reference below: the same order (and the
same refusal of a cycle) on random graphs, with and without group preferences."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.errors import InputError
from emu.nn import zoo
from emu.nn.graph import Node, Tensor, toposort
from emu.nn.importer import compile_graph, load


def reference(nodes, inputs, tensors, prefer=None):
    """Each step scans every pending node and takes the first ready one (the first of the
    last node's group when there is one)."""
    pending = list(nodes)
    ready_names = set(inputs) | {k for k, t in tensors.items() if t.is_const}
    produced = {out for node in pending for out in node.outputs}
    ordered = []
    last = None
    while pending:
        ready = [i for i, node in enumerate(pending)
                 if all(not n or n in ready_names or n not in produced for n in node.inputs)]
        if not ready:
            raise InputError(f"graph: a cycle through node {pending[0].name}")
        pick = ready[0]
        if prefer is not None and last is not None:
            same = [i for i in ready if prefer.get(pending[i].name) == last]
            pick = same[0] if same else pick
        node = pending.pop(pick)
        ordered.append(node)
        ready_names.update(node.outputs)
        last = prefer.get(node.name) if prefer is not None else None
    return tuple(ordered)


def _outcome(sort, *args):
    try:
        return [n.name for n in sort(*args)]
    except InputError as exc:
        return str(exc)


@st.composite
def graphs(draw):
    count = draw(st.integers(1, 30))
    names = ["x", "w", ""] + [f"t{k}" for k in range(count)]
    nodes = []
    for k in range(count):
        # Mostly earlier tensors (a DAG once shuffled); sometimes any tensor (cycles,
        # tensors written twice, a node reading its own output).
        pool = names[:3 + k] if draw(st.integers(0, 9)) else names
        inputs = tuple(draw(st.lists(st.sampled_from(pool), max_size=3)))
        outputs = (f"t{k}",) if draw(st.integers(0, 9)) else (f"t{k}", f"t{(k + 1) % count}")
        nodes.append(Node(f"n{k}", "Op", inputs, outputs))
    order = draw(st.permutations(range(count)))
    nodes = [nodes[k] for k in order]
    labels = st.sampled_from(["bpu", "cpu", "dsp"])
    prefer = draw(st.none() | st.fixed_dictionaries(
        {}, optional={n.name: labels for n in nodes}))
    tensors = {"w": Tensor("w", (1,), "float32", np.zeros(1, np.float32))}
    return nodes, ["x"], tensors, prefer


@settings(max_examples=400, deadline=None)
@given(graphs())
def test_the_order_is_the_references_on_random_graphs(case):
    assert _outcome(toposort, *case) == _outcome(reference, *case)


def test_a_cycle_is_refused_naming_its_first_node():
    nodes = [Node("a", "Op", ("t2",), ("t1",)), Node("b", "Op", ("t1",), ("t2",))]
    with pytest.raises(InputError, match="a cycle through node a"):
        toposort(nodes, [], {})


@pytest.mark.parametrize("name", ["yolov8n", "resnet50", "unet"])
def test_zoo_graphs_sort_as_the_reference_sorts_them(name):
    graph = compile_graph(load(zoo.build(name, (64, 64))))
    shuffled = list(reversed(graph.nodes))
    prefer = {n.name: ("cpu" if k % 5 == 0 else "bpu") for k, n in enumerate(graph.nodes)}
    for groups in (None, prefer):
        assert (_outcome(toposort, shuffled, graph.inputs, graph.tensors, groups)
                == _outcome(reference, shuffled, graph.inputs, graph.tensors, groups))

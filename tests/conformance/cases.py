"""onnx's own operator test cases, cached on disk and prepared as exported models look.

Where they come from: `onnx.backend.test.case.node.collect_testcases(None)` of the
installed onnx wheel (nothing is downloaded). Every case is one `expect(node, inputs,
outputs, name)` call of onnx's test suite: a single-node model, and for an operator defined
by a function also its expansion, `<name>_expanded` (or `<name>_expanded_ver<opset>`), a
multi-node model of the function body with the same inputs and outputs.

The cache (`ensure_cache`): generating the cases takes about 11 s, so they are written once
per onnx version under `$XDG_CACHE_HOME/emu-conformance/<onnx-version>/` (`~/.cache` when
XDG_CACHE_HOME is unset; `EMU_CONFORMANCE_CACHE` names another folder): each case in
onnx's own test-data layout, `<name>/model.onnx` and `<name>/test_data_set_0/input_<k>.pb`,
`output_<k>.pb` (TensorProto, SequenceProto or OptionalProto as the graph's types say, so
float8 and int4 data keep their types), and `index.json` (`FORMAT`) with what selection
needs of each case: the operator it tests (the node of the single-node case of that name),
the operators of its graph, its node count, rtol and atol, and each graph input's position
among the tested node's inputs. A missing, stale or half-written cache is regenerated (the
folder is built beside the final one and renamed into place, by one process at a time: a
lock file beside it).

Selection (`select`): a case is kept when the operator table `emu.nn.optable.RULES` lists
the operator it tests, or lists every operator of its graph (an expansion made only of
listed operators, such as Mish as Softplus, Tanh, Mul, is a model the compiler should
take). `SelectedCase.must_refuse` says whether the table makes the compiler refuse it: its
graph has an operator the table marks "unsupported" or does not list. Every other case
must be computed correctly or refused with a one-line message (a "fold" operator, too: the
table folds it when its input is constant, which Shape of a static-shaped input is).

Preparation (`prepare`), the rule in `PARAMETERS` below: an exported model stores its
weights, shapes and settings as initializers and takes only feature maps as inputs.

The `light` models (`light_models`, `prepare_light`): the nine opset-9 topologies the wheel
ships as `onnx/backend/test/data/light/light_<name>.onnx`, weights made by ConstantOfShape
(every weight one constant), with `light_<name>_output_0.pb`, the output onnx's backend
runner expects for its input `arange(n).reshape(shape) / n` (the wheel ships no input
file; its runner makes this one, and so does `light_input`). The expected output is
onnxruntime's on that input. With constant weights every model's output is nearly
constant (a softmax of 1000 equal logits), so these cases say whether the model compiles
and runs through its whole topology more than how exactly.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from emu.nn import optable, zoo

FORMAT = "emu-conformance/1"
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")

# --- the preparation rule -------------------------------------------------------------------
#
# A case's graph inputs, by their position k among the tested operator's node inputs:
# - k = 0 stays a graph input: the feature map the operator works on (Where's condition
#   too: in a network it is a mask computed from feature maps, not a stored constant);
# - for the operators of FEATURE_MAP_OPS every input stays a graph input: they combine
#   feature maps (x + y, A @ B, a concatenation, a comparison, the grid GridSample reads);
# - the positions PARAMETERS lists become initializers: inputs the operator treats as
#   parameters, which an exporter stores (weights and biases, normalisation statistics,
#   bounds, scales, an exponent, recurrent weights and initial states);
# - any other input becomes an initializer when it is integer-typed (shapes, axes,
#   indices, pads, k, sizes, repeats, sequence lengths), and stays a graph input when it is
#   a float (or boolean) tensor.
FEATURE_MAP_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "MatMul", "Concat", "Equal",
    "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Einsum",
    "GridSample", "Where", "BitShift", "Mod", "MatMulInteger"})
PARAMETERS: dict[str, frozenset[int]] = {op: frozenset(slots) for op, slots in {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (1, 2),
    "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2),
    "LayerNormalization": (1, 2), "PRelu": (1,), "Clip": (1, 2), "Pad": (2,),
    "Resize": (1, 2, 3), "Upsample": (1,), "Pow": (1,),
    "LSTM": (1, 2, 3, 5, 6, 7), "GRU": (1, 2, 3, 5), "RNN": (1, 2, 3, 5),
    "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2), "Dropout": (1, 2),
    "NonMaxSuppression": (3, 4), "OneHot": (1, 2), "Range": (1, 2), "CastLike": (1,),
}.items()}


def is_parameter(op: str, slot: int, elem_type: int) -> bool:
    """Whether the graph input at position `slot` of the tested `op`'s node inputs, of
    ONNX element type `elem_type`, becomes an initializer (the rule above)."""
    if slot == 0 or op in FEATURE_MAP_OPS:
        return False
    if slot in PARAMETERS.get(op, ()):
        return True
    return elem_type in _INTEGER_TYPES


_INTEGER_TYPES = frozenset(getattr(onnx.TensorProto, name) for name in (
    "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"))


# --- the cache -------------------------------------------------------------------------------

def cache_dir() -> Path:
    """Where the cases of the installed onnx version are cached (see the module)."""
    given = os.environ.get("EMU_CONFORMANCE_CACHE")
    if given:
        return Path(given) / onnx.__version__
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "emu-conformance" / onnx.__version__


@dataclass(frozen=True)
class CaseInfo:
    """One cached case as `index.json` describes it."""

    name: str
    op: str  # the operator the case tests
    ops: tuple[str, ...]  # the operators of its graph ("domain:Op" outside the default one)
    nodes: int
    rtol: float
    atol: float
    slots: tuple[int, ...]  # each graph input's position among the tested node's inputs

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


@cache
def ensure_cache(folder: Path | None = None) -> Path:
    """The cache folder, generated first if it is missing or stale (checked once a
    process)."""
    folder = folder or cache_dir()
    if _index_format(folder) == FORMAT:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time (test processes started together, such as parallel workers):
    # the others wait for the lock and then find the cache made.
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _index_format(folder) == FORMAT:
            return folder
        building = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            write_cases(building, _collect())
            if folder.exists():
                shutil.rmtree(folder)
            building.rename(folder)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return folder


def _index_format(folder: Path) -> str | None:
    try:
        return str(json.loads((folder / "index.json").read_text())["format"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _collect() -> list[Any]:
    """onnx's node test cases (its generators divide by zero on purpose: quiet them)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(collect_testcases(None))


def write_cases(folder: Path, testcases: Iterable[Any]) -> None:
    """Write onnx TestCases and their `index.json` into `folder`."""
    testcases = list(testcases)
    tested = {c.name: c.model.graph.node[0] for c in testcases if len(c.model.graph.node) == 1}
    index = []
    for case in testcases:
        graph = case.model.graph
        node = tested.get(_EXPANDED.sub("", case.name), graph.node[0])
        where = folder / case.name
        (where / "test_data_set_0").mkdir(parents=True)
        (where / "model.onnx").write_bytes(case.model.SerializeToString())
        (inputs, outputs), = case.data_sets
        for kind, values, infos in (("input", inputs, graph.input),
                                    ("output", outputs, graph.output)):
            for k, (value, info) in enumerate(zip(values, infos, strict=False)):
                path = where / "test_data_set_0" / f"{kind}_{k}.pb"
                path.write_bytes(_to_proto(value, info).SerializeToString())
        index.append({
            "name": case.name, "op": node.op_type,
            "ops": sorted({_op_name(n) for n in graph.node}), "nodes": len(graph.node),
            "rtol": case.rtol, "atol": case.atol,
            "slots": [list(node.input).index(i.name) if i.name in node.input else k
                      for k, i in enumerate(graph.input)]})
    (folder / "index.json").write_text(json.dumps(
        {"format": FORMAT, "onnx": onnx.__version__, "cases": index}, indent=0))


def _op_name(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def _to_proto(value: Any, info: onnx.ValueInfoProto) -> Any:
    kind = info.type.WhichOneof("value")
    if kind == "sequence_type":
        return numpy_helper.from_list(value, info.name)
    if kind == "optional_type":
        return numpy_helper.from_optional(value, info.name)
    if isinstance(value, onnx.TensorProto):
        return value
    return numpy_helper.from_array(np.asarray(value), info.name)


def _from_proto(path: Path, info: onnx.ValueInfoProto) -> Any:
    kind = info.type.WhichOneof("value")
    data = path.read_bytes()
    if kind == "sequence_type":
        return numpy_helper.to_list(onnx.SequenceProto.FromString(data))
    if kind == "optional_type":
        return numpy_helper.to_optional(onnx.OptionalProto.FromString(data))
    return numpy_helper.to_array(onnx.TensorProto.FromString(data))


@cache
def load_index(folder: Path | None = None) -> tuple[CaseInfo, ...]:
    """Every cached case (the cache generated first when needed)."""
    folder = ensure_cache(folder)
    entries = json.loads((folder / "index.json").read_text())["cases"]
    return tuple(CaseInfo(e["name"], e["op"], tuple(e["ops"]), e["nodes"], e["rtol"],
                          e["atol"], tuple(e["slots"])) for e in entries)


# --- selection -------------------------------------------------------------------------------

@dataclass(frozen=True)
class SelectedCase:
    """A case the conformance suite runs, and what the operator table expects of it."""

    info: CaseInfo
    where: str  # the tested operator's row in the table, "" when it has none

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def must_refuse(self) -> bool:
        """Its graph has an operator the table refuses (unsupported or not listed)."""
        return any(optable.RULES.get(op) is None or optable.RULES[op].where == "unsupported"
                   for op in self.info.ops)


def select(index: Iterable[CaseInfo]) -> list[SelectedCase]:
    """The cases whose tested operator, or every graph operator, the table lists."""
    chosen = []
    for info in index:
        row = optable.RULES.get(info.op)
        if row is not None or all(op in optable.RULES for op in info.ops):
            chosen.append(SelectedCase(info, row.where if row is not None else ""))
    return chosen


def selected_cases() -> list[SelectedCase]:
    return select(load_index())


# --- preparation -----------------------------------------------------------------------------

@dataclass
class PreparedCase:
    """A case as an exported model: parameters stored in the model, feature maps fed."""

    name: str
    model: onnx.ModelProto
    feeds: dict[str, Any]  # graph input -> value (the calibration set too)
    expected: dict[str, Any]  # graph output -> onnx's expected value
    output_types: dict[str, int]  # graph output -> ONNX element type (0: not a tensor)
    rtol: float
    atol: float
    random: bool = False  # its outputs are drawn at random (`draws_random`)


def prepare(info: CaseInfo, folder: Path | None = None) -> PreparedCase:
    """Load one cached case and move its parameter inputs into initializers."""
    where = ensure_cache(folder) / info.name
    model = onnx.load_model(str(where / "model.onnx"))
    data = where / "test_data_set_0"
    graph = model.graph
    kept, feeds = [], {}
    for k, (value_info, slot) in enumerate(zip(list(graph.input), info.slots, strict=True)):
        path = data / f"input_{k}.pb"
        elem_type = _elem_type(value_info)
        if elem_type and path.exists() and is_parameter(info.op, slot, elem_type):
            stored = onnx.TensorProto.FromString(path.read_bytes())
            stored.name = value_info.name
            graph.initializer.append(stored)
        else:
            kept.append(value_info)
            feeds[value_info.name] = _from_proto(path, value_info) if path.exists() else None
    del graph.input[:]
    graph.input.extend(kept)
    expected = {o.name: _from_proto(data / f"output_{k}.pb", o)
                for k, o in enumerate(graph.output)}
    types = {o.name: _elem_type(o) for o in graph.output}
    return PreparedCase(info.name, model, feeds, expected, types, info.rtol, info.atol,
                        draws_random(model))


RANDOM_OPS = frozenset({"RandomUniform", "RandomUniformLike", "RandomNormal",
                        "RandomNormalLike", "Bernoulli", "Multinomial"})


def draws_random(model: onnx.ModelProto) -> bool:
    """Whether the model's outputs are random draws, which no other implementation
    reproduces: it has a random generator, or a Dropout in training mode (a stored true
    training_mode) with a ratio other than 0."""
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def value(node: onnx.NodeProto, k: int, default: float) -> float:
        name = node.input[k] if len(node.input) > k else ""
        return float(np.asarray(stored[name]).reshape(-1)[0]) if name in stored else default

    return any(node.op_type in RANDOM_OPS or (
        node.op_type == "Dropout" and value(node, 2, 0.0) and value(node, 1, 0.5) != 0)
        for node in model.graph.node)


def _elem_type(value_info: onnx.ValueInfoProto) -> int:
    """The ONNX element type of a tensor-typed value (0 for sequences and optionals)."""
    if value_info.type.HasField("tensor_type"):
        return int(value_info.type.tensor_type.elem_type)
    return 0


# --- the light models ------------------------------------------------------------------------

@dataclass(frozen=True)
class LightModel:
    """One of the wheel's `light` models and the tolerance onnx's model tests give it."""

    name: str  # "light_resnet50"
    path: Path
    rtol: float
    atol: float


def light_models() -> list[LightModel]:
    """The `light` models onnx's model test cases name and the wheel ships."""
    from onnx.backend.test.case.model import collect_testcases

    folder = zoo.onnx_test_data()
    if folder is None:
        return []
    found = []
    for case in collect_testcases():
        if case.kind == "real" and case.url and (folder / Path(case.url).name).exists():
            path = folder / Path(case.url).name
            found.append(LightModel(path.stem, path, case.rtol, case.atol))
    return found


def light_input(value_info: onnx.ValueInfoProto) -> np.ndarray:
    """onnx's backend runner's input for a `light` model: arange(n).reshape(shape) / n."""
    shape = tuple(d.dim_value or 1 for d in value_info.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def shipped_outputs(light: LightModel) -> list[np.ndarray]:
    """The `_output_<k>.pb` arrays the wheel ships beside the model."""
    found, k = [], 0
    while (path := light.path.with_name(f"{light.path.stem}_output_{k}.pb")).exists():
        found.append(numpy_helper.to_array(onnx.TensorProto.FromString(path.read_bytes())))
        k += 1
    return found


def realistic_light(light: LightModel, seed: int = 0) -> tuple[onnx.ModelProto,
                                                               dict[str, np.ndarray]]:
    """The light model as the wheel ships it (its opset, its topology) with the weights of
    trained scale emu's zoo draws for it (`emu.nn.zoo`, "onnx_<name>") in place of its
    ConstantOfShape placeholders, and a standard-normal input: a network whose outputs
    depend on the input, which the placeholders' constant weights do not make."""
    model = onnx.load_model(str(light.path))
    drawn = {t.name: t for t in zoo.build("onnx_" + light.name.removeprefix("light_"),
                                          seed=seed).graph.initializer}
    graph = model.graph
    placeholders = {t.name for t in graph.initializer}
    data = [v for v in graph.input if v.name not in placeholders]
    replaced = [n for n in graph.node if n.op_type == "ConstantOfShape" and n.output[0] in drawn]
    keep = [n for n in graph.node if n not in replaced]
    del graph.node[:]
    graph.node.extend(keep)
    used = {name for n in graph.node for name in n.input}
    weights = [t for t in graph.initializer if t.name in used]
    weights += [drawn[n.output[0]] for n in replaced]
    del graph.initializer[:]
    graph.initializer.extend(weights)
    del graph.input[:]  # IR version 3: every initializer is a graph input too
    graph.input.extend(data)
    graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in weights)
    rng = np.random.default_rng(seed)
    feeds = {v.name: rng.standard_normal(
        tuple(d.dim_value for d in v.type.tensor_type.shape.dim)).astype(np.float32)
             for v in data}
    return model, feeds


def prepare_light(light: LightModel, realistic: bool = False) -> PreparedCase:
    """A light model with its runner input (or, `realistic`, with `realistic_light`'s
    weights and input), onnxruntime's outputs expected."""
    import onnxruntime  # type: ignore[import-untyped]

    if realistic:
        model, feeds = realistic_light(light)
    else:
        model = onnx.load_model(str(light.path))
        stored = {t.name for t in model.graph.initializer}
        feeds = {i.name: light_input(i) for i in model.graph.input if i.name not in stored}
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # not the notes on unused initializers
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    expected = dict(zip(names, session.run(names, feeds), strict=True))
    types = {o.name: _elem_type(o) for o in model.graph.output}
    return PreparedCase(light.name, model, feeds, expected, types, light.rtol, light.atol)

"""The compiled-model file: round trips, and every kind of bad file refused in one line."""

import hashlib
import struct

import numpy as np
import pytest

from emu.errors import InputError
from emu.nn import graph as graph_module
from emu.nn import importer, modelfile, zoo
from emu.nn.modelfile import ModelFileError, PackedModel


def _models():
    rng = np.random.default_rng(0)
    return [
        PackedModel("a", {"k": [1, 2.5, "x"], "nested": {"b": None}},
                    {"w": rng.integers(-128, 128, (3, 4, 5), dtype=np.int8),
                     "bias": rng.integers(-2**31, 2**31, 7, dtype=np.int64).astype(np.int32),
                     "empty": np.zeros((0, 3), np.float32), "scalar": np.float64(1.5) + 0}),
        PackedModel("b", {}, {"u": np.arange(10, dtype=np.uint16).reshape(2, 5),
                              "f": np.array([True, False])}),
    ]


def test_round_trip_is_exact():
    data = modelfile.dumps(_models(), "0.1.0")
    back = modelfile.loads(data, "f.hbm")
    assert [m.name for m in back] == ["a", "b"]
    for original, loaded in zip(_models(), back, strict=True):
        assert loaded.meta == original.meta
        assert sorted(loaded.arrays) == sorted(original.arrays)
        for key, value in original.arrays.items():
            got = loaded.arrays[key]
            assert got.dtype == np.asarray(value).dtype and got.shape == np.shape(value)
            assert np.array_equal(got, value)
            assert got.flags.writeable


def test_same_models_give_identical_bytes():
    assert modelfile.dumps(_models(), "0.1.0") == modelfile.dumps(_models(), "0.1.0")


def _with_digest(body: bytes) -> bytes:
    return body + hashlib.sha256(body).digest()


@pytest.mark.parametrize("mutate, message", [
    (lambda d: b"", "not an emu model file"),
    (lambda d: b"\x08\x07onnx..." + d[9:], "not an emu model file"),
    (lambda d: d[:12], "truncated"),
    (lambda d: d[:40], "truncated"),
    (lambda d: d[:-1], "checksum"),
    (lambda d: d[:-100], "checksum"),
    (lambda d: d[:200] + bytes([d[200] ^ 1]) + d[201:], "checksum"),
    (lambda d: d[:8] + struct.pack("<I", 2) + d[12:], "format 2"),
    (lambda d: _with_digest(d[:-32] + b"junk"), None),  # payload grows: still readable
])
def test_bad_files_are_refused(mutate, message):
    data = modelfile.dumps(_models(), "0.1.0")
    bad = mutate(data)
    if message is None:
        assert [m.name for m in modelfile.loads(bad, "x.hbm")] == ["a", "b"]
        return
    with pytest.raises(ModelFileError, match=message) as err:
        modelfile.loads(bad, "x.hbm")
    assert "\n" not in str(err.value) and str(err.value).startswith("x.hbm: ")


def test_inconsistent_header_with_a_valid_checksum_is_refused():
    data = modelfile.dumps(_models(), "0.1.0")
    body = data[:-32]
    (header_len,) = struct.unpack_from("<Q", body, 16)
    header = body[24:24 + header_len].replace(b'"int8"', b'"objec"')
    bad = _with_digest(body[:24] + header + body[24 + header_len:])
    with pytest.raises(ModelFileError, match="inconsistent header"):
        modelfile.loads(bad, "x.hbm")
    header = body[24:24 + header_len].replace(b"[3, 4, 5]", b"[3, 4, 9]")
    bad = _with_digest(body[:24] + header + body[24 + header_len:])
    with pytest.raises(ModelFileError, match="does not fit"):
        modelfile.loads(bad, "x.hbm")


def test_writer_refuses_what_it_cannot_store():
    with pytest.raises(ModelFileError, match="at least one"):
        modelfile.dumps([], "0")
    with pytest.raises(ModelFileError, match="unique"):
        modelfile.dumps([PackedModel("a", {}), PackedModel("a", {})], "0")
    with pytest.raises(ModelFileError, match="dtype object"):
        modelfile.dumps([PackedModel("a", {}, {"o": np.array([None])})], "0")
    with pytest.raises(ModelFileError, match="plain JSON"):
        modelfile.dumps([PackedModel("a", {"x": float("nan")})], "0")


@pytest.mark.parametrize("name", ["resnet18", "yolov8n", "unet", "onnx_squeezenet"])
def test_graphs_round_trip(name):
    size = None if zoo.entry(name).fixed else (64, 64)
    graph = importer.compile_graph(importer.load(zoo.build(name, size)))
    meta, arrays = graph_module.to_packed(graph)
    data = modelfile.dumps([PackedModel("g", meta, arrays)], "0")
    (packed,) = modelfile.loads(data, "g.hbm")
    back = graph_module.from_packed(packed.meta, packed.arrays)
    assert back.inputs == graph.inputs and back.outputs == graph.outputs
    assert back.nodes == graph.nodes
    for node, other in zip(graph.nodes, back.nodes, strict=True):
        assert node.attrs.keys() == other.attrs.keys()
        for key, value in node.attrs.items():
            if isinstance(value, np.ndarray):
                assert np.array_equal(value, other.attrs[key])
            else:
                assert value == other.attrs[key]
    assert back.tensors.keys() == graph.tensors.keys()
    for key, tensor in graph.tensors.items():
        other = back.tensors[key]
        assert (other.shape, other.dtype) == (tensor.shape, tensor.dtype)
        if tensor.value is not None:
            assert other.value is not None and other.value.dtype == tensor.value.dtype
            assert np.array_equal(other.value, tensor.value)


def test_graph_attributes_of_every_kind_round_trip():
    g = graph_module.Graph(("x",), ("y",), (graph_module.Node(
        "n", "Clip", ("x",), ("y",),
        {"i": 3, "f": 0.5, "inf": float("-inf"), "s": "linear", "t": (1, (2, 3)),
         "a": np.arange(4, dtype=np.int64)}),),
        {"x": graph_module.Tensor("x", (1, 2), "float32"),
         "y": graph_module.Tensor("y", (1, 2), "float32")})
    meta, arrays = graph_module.to_packed(g)
    back = graph_module.from_packed(meta, arrays)
    attrs = back.nodes[0].attrs
    assert attrs["i"] == 3 and attrs["f"] == 0.5 and attrs["inf"] == float("-inf")
    assert attrs["s"] == "linear" and attrs["t"] == (1, (2, 3))
    assert np.array_equal(attrs["a"], np.arange(4))


def test_malformed_graph_description_is_an_input_error():
    with pytest.raises(InputError, match="graph: "):
        graph_module.from_packed({"inputs": ["x"]}, {})

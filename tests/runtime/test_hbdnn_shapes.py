"""hbDNN on models whose tensors are not 4-D NCHW: scalars and ranks 1 to 5.

Random small models (`tests.nn.nets.ranked`: one op of those that compile at the drawn
rank, sometimes a Softmax on the CPU between two BPU subgraphs, sometimes with quantised
outputs) are compiled and run through hbDNN as a C program would: the properties describe
each tensor at its rank, the outputs are the model's own (`CompiledModel.run`, or the
codes `--output-codes` hands over) bit for bit, the task is timed, and a tensor of
the wrong shape or rank is HB_DNN_INVALID_ARGUMENT. The batch rule
(`emu.nn.compiler`) is checked on the same models, hbDNNRoiInfer on an image model whose
output is 1-D, and that a failure inside a running task is an error code, not an
exception out of hbDNNWaitTaskDone.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emu.errors import InputError
from emu.nn import compiler, execute, resizer
from emu.runtime import dnn_engine, session
from emu.runtime import hbdnn as dnn
from emu.runtime.hbsys import hbSysAllocCachedMem
from emu.soc.config import load_config
from emu.workloads import nn_perf
from tests.nn import nets
from tests.runtime.test_hbdnn import _infer, _tensors
from tests.runtime.test_hbdnn_resizer import _image

SOC = load_config("j5", None, []).soc
TYPES = {"float32": dnn.HB_DNN_TENSOR_TYPE_F32, "int8": dnn.HB_DNN_TENSOR_TYPE_S8,
         "int16": dnn.HB_DNN_TENSOR_TYPE_S16, "int32": dnn.HB_DNN_TENSOR_TYPE_S32}


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[int, ...], str, int | None, int, bool]:
    """(input shape, op, Softmax axis or None, seed, output codes)."""
    rank = draw(st.integers(0, 5))
    op = draw(st.sampled_from([op for op, ranks in nets.RANKED_OPS.items() if rank in ranks]))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    axis = draw(st.none() | st.integers(-rank, rank - 1)) if rank else None
    return shape, op, axis, draw(st.integers(0, 2**16)), draw(st.booleans())


def _compile(shape: tuple[int, ...], op: str, axis: int | None, seed: int,
             output_codes: bool = False) -> compiler.CompiledModel:
    return compiler.compile_model(
        nets.ranked(shape, op, axis, seed), "ranked",
        compiler.CompileOptions(calib_random=2, seed=seed, output_codes=output_codes), SOC)


def _outputs(model: compiler.CompiledModel,
             feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the output buffers must hold: the float outputs, or the codes of those the
    model hands over quantised."""
    ex = execute.Execution(model.quant, feeds)
    for k in range(len(model.segments)):
        ex.run_segment(k)
    floats = ex.outputs()
    codes = model.code_outputs()
    return {name: ex.output_codes(name) if name in codes else floats[name]
            for name in model.graph.outputs}


def _load(model: compiler.CompiledModel) -> dnn.hbDNNHandle:
    data = compiler.dumps([model])
    rc, packed = dnn.hbDNNInitializeFromDDR([data], [len(data)])
    assert rc == 0
    rc, handle = dnn.hbDNNGetModelHandle(packed, model.name)
    assert rc == 0
    return handle


def _write(tensor: dnn.hbDNNTensor, value: np.ndarray) -> None:
    raw = np.ascontiguousarray(value, np.float32).reshape(-1).view(np.uint8)
    tensor.sysMem[0].virAddr[:raw.size] = raw


def _read(tensor: dnn.hbDNNTensor, shape: tuple[int, ...],
          dtype: np.dtype | None = None) -> np.ndarray:
    dtype = dtype or np.dtype(np.float32)
    nbytes = dtype.itemsize * math.prod(shape)
    return tensor.sysMem[0].virAddr[:nbytes].view(dtype).reshape(shape)


def _wrong_shapes(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Shapes a buffer of `shape` must not be taken for: one more dimension, one fewer
    (or, for a scalar, one), every size flattened into one, one size one larger."""
    wrong = [(*shape, 1), shape[1:] if shape else (1,), (math.prod(shape),)]
    if shape:
        wrong.append((*shape[:-1], shape[-1] + 1))
    return [w for w in wrong if w != shape]


def _with_shape(tensor: dnn.hbDNNTensor, dims: tuple[int, ...]) -> dnn.hbDNNTensor:
    """`tensor`'s memory and type, described as `dims`."""
    other = dnn.hbDNNTensor()
    other.sysMem = tensor.sysMem
    other.properties.tensorType = tensor.properties.tensorType
    other.properties.validShape = dnn.hbDNNTensorShape(dims)
    other.properties.alignedShape = dnn.hbDNNTensorShape(dims)
    return other


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_models_of_every_rank_run_through_hbdnn(case):
    shape, op, axis, seed, output_codes = case
    model = _compile(shape, op, axis, seed, output_codes)
    assert model.batch == (shape[0] if len(shape) >= 3 else 1)
    rng = np.random.default_rng(seed)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in model.inputs}
    want = _outputs(model, feeds)
    if not output_codes:
        assert all(np.array_equal(v, want[k]) for k, v in model.run(feeds).items())
    with session.Session():
        handle = _load(model)
        inputs, outputs = _tensors(handle, False), _tensors(handle, True)
        dtypes = [np.dtype(np.float32)] * len(inputs) + [want[t.name].dtype
                                                         for t in model.outputs]
        for tensor, t, dtype in zip([*inputs, *outputs], [*model.inputs, *model.outputs],
                                    dtypes, strict=True):
            props = tensor.properties
            # an output of N x C (N the batch) is described N x C x 1 x 1, as on the board
            described = (*t.shape, 1, 1) if t in model.outputs and len(t.shape) == 2 \
                and t.shape[0] == model.batch else t.shape
            assert props.validShape.numDimensions == len(described)
            assert props.validShape.dims() == props.alignedShape.dims() == described
            assert props.tensorLayout == (dnn.HB_DNN_LAYOUT_NCHW if len(described) == 4
                                          else dnn.HB_DNN_LAYOUT_NONE)
            assert props.tensorType == TYPES[dtype.name]
            assert props.alignedByteSize == dtype.itemsize * math.prod(t.shape)
        for tensor, t in zip(inputs, model.inputs, strict=True):
            _write(tensor, feeds[t.name])
        rc, task = _infer(handle, inputs, outputs)
        assert rc == 0
        assert dnn.hbDNNWaitTaskDone(task, 0) == 0
        for tensor, t, dtype in zip(outputs, model.outputs, dtypes[len(inputs):],
                                    strict=True):
            assert np.array_equal(_read(tensor, t.shape, dtype), want[t.name]), t.name
        assert task.finished_ps > task.submitted_ps
        bpu = [s for s in task.segments if s["kind"] == "bpu"]
        assert len(bpu) == sum(s.kind == "bpu" for s in model.segments)
        assert all(s["busy_ps"] > 0 for s in bpu)
        assert dnn.hbDNNReleaseTask(task) == 0
        # a buffer described at another shape or rank is refused, on either side
        for k, t in enumerate(model.inputs):
            for dims in _wrong_shapes(t.shape):
                bad = [*inputs]
                bad[k] = _with_shape(inputs[k], dims)
                assert _infer(handle, bad, outputs) == (dnn.HB_DNN_INVALID_ARGUMENT, None)
        for dims in _wrong_shapes(model.outputs[0].shape):
            bad = [_with_shape(outputs[0], dims), *outputs[1:]]
            assert _infer(handle, inputs, bad) == (dnn.HB_DNN_INVALID_ARGUMENT, None)
        # and the model still runs
        rc, task = _infer(handle, inputs, outputs)
        assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
        assert dnn.hbDNNReleaseTask(task) == 0


@pytest.mark.parametrize("shape, axis", [((), None), ((7,), 0), ((3, 5), 0),
                                         ((2, 3, 4), 1), ((2, 3, 4, 5, 3), 0),
                                         ((2, 3, 4, 5, 3), 1), ((2, 3, 4, 5, 3), -1)])
def test_hb_dnn_enable_dsp_takes_every_rank(shape, axis, monkeypatch):
    """Quantize, dequantize and Softmax on a DSP (at most 4 dimensions there): a scalar is
    one element, and above 4 dimensions Softmax still runs along its axis."""
    model = _compile(shape, "Relu", axis, 0)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (name,) = model.graph.outputs
    want = model.run({"x": x})[name]
    monkeypatch.setenv("HB_DNN_ENABLE_DSP", "true")
    with session.Session():
        handle = _load(model)
        inputs, outputs = _tensors(handle, False), _tensors(handle, True)
        _write(inputs[0], x)
        rc, task = _infer(handle, inputs, outputs)
        assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
        got = _read(outputs[0], want.shape)
        dsp = {s["name"] for s in task.segments if s["name"].startswith("dsp ")}
        assert {"dsp quantize x", f"dsp dequantize {name}"} <= dsp
        if axis is not None:
            assert "dsp dsp softmax" in dsp
    # the DSP rounds ties to even and computes exp its own way: within a few output codes
    assert np.abs(got - want).max() <= 4 * model.quant.tensors[name].scale


@pytest.mark.parametrize("shape, batch", [((), 1), ((64,), 1), ((196, 256), 1),
                                          ((3, 196, 32), 3), ((2, 3, 8, 8), 2),
                                          ((2, 2, 3, 4, 4), 2)])
def test_the_batch_is_dimension_0_only_of_inputs_of_rank_3_or_more(shape, batch):
    model = _compile(shape, "Relu", None, 0)
    assert model.batch == batch
    estimate = model.estimate(SOC)
    assert estimate.batch == batch
    assert estimate.fps == pytest.approx(batch * 1e3 / estimate.latency_ms)


def test_batch_is_refused_for_an_input_without_a_batch_dimension():
    for shape in ((), (64,), (196, 256)):
        with pytest.raises(InputError, match=r"--batch 2: input 'x' has shape .* "
                                                      r"only inputs of rank 3 or more"):
            compiler.compile_model(nets.ranked(shape, "Relu"), "m",
                                   compiler.CompileOptions(batch=2, calib_random=1), SOC)
    rebatched = compiler.compile_model(nets.ranked((1, 4, 6), "Relu"), "m",
                                       compiler.CompileOptions(batch=3, calib_random=1), SOC)
    assert rebatched.inputs[0].shape == (3, 4, 6) and rebatched.batch == 3


def test_roi_infer_stacks_the_batch_groups_of_a_1d_output(tmp_path):
    """A gray image model (batch 2) whose output is flattened to 1-D: three ROIs run as two
    batch groups, whose outputs follow one another in the output buffer."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(2).standard_normal((2, 1, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Reshape", ["r", "flat"], ["y"])], "flat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([-1]), "flat")])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = compiler.compile_model(
        onnx_model, "flat", compiler.CompileOptions(input_type="gray", input_source="resizer",
                                                    calib_random=1), SOC)
    assert model.batch == 2 and model.outputs[0].shape == (2 * 2 * 8 * 8,)
    rng = np.random.default_rng(3)
    sources = [rng.integers(0, 256, (16, 16), dtype=np.uint8) for _ in range(3)]
    with session.Session():
        handle = _load(model)
        images = [_image(dnn.HB_DNN_IMG_TYPE_Y, (1, 16, 16, 1), (1, 16, 16, 1), s)
                  for s in sources]
        rois = [dnn.hbDNNRoi(0, 0, 15, 15), dnn.hbDNNRoi(2, 2, 13, 13),
                dnn.hbDNNRoi(4, 0, 15, 11)]
        out = dnn.hbDNNTensor()
        out.properties.validShape = dnn.hbDNNTensorShape((2 * 256,))  # two groups
        assert hbSysAllocCachedMem(out.sysMem[0], 2 * 256 * 4) == 0
        ctrl = dnn.hbDNNInferCtrlParam()
        dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
        rc, task = dnn.hbDNNRoiInfer([out], images, rois, 3, handle, ctrl)
        assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
        got = out.sysMem[0].virAddr.view(np.float32)
        crops = [resizer.resize(s, "gray", 16, 16, 16, resizer.Roi(r.left, r.top, r.right,
                                                                   r.bottom), 8, 8)
                 .reshape(8, 8, 1) for s, r in zip(sources, rois, strict=True)]
        groups = [np.stack(crops[:2]), np.stack([crops[2], np.zeros((8, 8, 1), np.uint8)])]
        for k, frames in enumerate(groups):
            want = model.run({"x": frames})["y"]
            assert np.array_equal(got[k * 256:(k + 1) * 256], want)
        assert dnn.hbDNNReleaseTask(task) == 0
        out.properties.validShape = dnn.hbDNNTensorShape((256,))  # one group's rows only
        assert dnn.hbDNNRoiInfer([out], images, rois, 3, handle, ctrl) == (
            dnn.HB_DNN_INVALID_ARGUMENT, None)


def test_a_failure_inside_a_task_is_an_error_code_not_an_exception(monkeypatch, tmp_path):
    """Whatever raises while a task runs (here: the BPU step) fails that task: the wait
    returns HB_DNN_RUN_TASK_FAILED with the error on the task, the buffers are unpinned,
    and the model runs again once the fault is gone; `emu perf` reports it in one line."""
    model = _compile((4, 6), "Relu", None, 0)
    path = tmp_path / "m.hbm"
    path.write_bytes(compiler.dumps([model]))
    real = dnn_engine.run_bpu

    def broken(*args, **kwargs):
        raise IndexError("tuple index out of range")

    with session.Session() as sess:
        handle = _load(model)
        inputs, outputs = _tensors(handle, False), _tensors(handle, True)
        monkeypatch.setattr(dnn_engine, "run_bpu", broken)
        rc, task = _infer(handle, inputs, outputs)
        assert rc == 0
        assert dnn.hbDNNWaitTaskDone(task, 0) == dnn.HB_DNN_RUN_TASK_FAILED
        assert task.error == "IndexError: tuple index out of range"
        for tensor in (*inputs, *outputs):
            assert sess.soc.pool.find(tensor.sysMem[0].phyAddr).users == 0
        assert dnn.hbDNNReleaseTask(task) == 0
        with pytest.raises(InputError, match=r"^hbDNNWaitTaskDone \(IndexError: tuple index "
                                             r"out of range\): hbDNN: the task failed"):
            nn_perf.run_perf(path, None, 1, 0, 1, 0)
        monkeypatch.setattr(dnn_engine, "run_bpu", real)
        rc, task = _infer(handle, inputs, outputs)
        assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0


@pytest.mark.parametrize(("perm", "layout"), [((0, 2, 3, 1), dnn.HB_DNN_LAYOUT_NHWC),
                                              ((0, 1, 3, 2), dnn.HB_DNN_LAYOUT_NCHW),
                                              (None, dnn.HB_DNN_LAYOUT_NCHW)])
def test_a_channels_last_head_is_labelled_nhwc_and_other_maps_nchw(perm, layout):
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(
        np.random.default_rng(5).standard_normal((6, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c" if perm else "y"], pads=[1] * 4)]
    if perm:
        nodes.append(helper.make_node("Transpose", ["c"], ["y"], perm=list(perm)))
    graph = helper.make_graph(nodes, "head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 3, 8, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w])
    model = compiler.compile_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), "head",
        compiler.CompileOptions(calib_random=2), SOC)
    with session.Session():
        handle = _load(model)
        (inp,), (out,) = _tensors(handle, False), _tensors(handle, True)
        assert inp.properties.tensorLayout == dnn.HB_DNN_LAYOUT_NCHW
        assert out.properties.tensorLayout == layout
        assert out.properties.validShape.dims() == model.outputs[0].shape

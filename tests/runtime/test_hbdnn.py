"""hbDNN (first part): loading, queries, inference through hbSys buffers, priorities on the
BPU queue, the task limit, release, and misuse answered with error codes."""

import numpy as np
import pytest

from emu import sleep_ms
from emu.dnn import alloc_tensors
from emu.nn import compiler, zoo
from emu.runtime import hbdnn as dnn
from emu.runtime import session
from emu.runtime.hbsys import hbSysAllocCachedMem, hbSysFreeMem, hbSysMem
from emu.soc.config import load_config
from tests.nn.nets import segmented

SOC = load_config("j5", None, []).soc


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    options = compiler.CompileOptions(calib_random=2)
    models = [compiler.compile_model(zoo.build("mobilenetv2", (32, 32)), "mnv2", options, SOC),
              compiler.compile_model(segmented(), "seg", options, SOC)]
    path = tmp_path_factory.mktemp("hbdnn") / "two.hbm"
    path.write_bytes(compiler.dumps(models))
    return path


@pytest.fixture
def sess():
    yield session.start("j5")


def _load(path):
    rc, packed = dnn.hbDNNInitializeFromFiles([str(path)])
    assert rc == dnn.HB_DNN_SUCCESS
    return packed


_tensors = alloc_tensors  # one helper (emu.dnn), as every caller uses


def _infer(handle, inputs, outputs, **ctrl_fields):
    ctrl = dnn.hbDNNInferCtrlParam()
    assert dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl) == 0
    for key, value in ctrl_fields.items():
        setattr(ctrl, key, value)
    return dnn.hbDNNInfer(outputs, inputs, handle, ctrl)


def test_load_query_infer_and_read_the_outputs(sess, model_file):
    packed = _load(model_file)
    rc, names, count = dnn.hbDNNGetModelNameList(packed)
    assert (rc, names, count) == (0, ["mnv2", "seg"], 2)
    rc, handle = dnn.hbDNNGetModelHandle(packed, "mnv2")
    assert rc == 0
    assert dnn.hbDNNGetInputName(handle, 0) == (0, "input")
    rc, props = dnn.hbDNNGetInputTensorProperties(handle, 0)
    assert props.validShape.dims() == (1, 3, 32, 32)
    assert props.tensorType == dnn.HB_DNN_TENSOR_TYPE_F32
    assert props.tensorLayout == dnn.HB_DNN_LAYOUT_NCHW
    assert props.alignedByteSize == 3 * 32 * 32 * 4
    assert props.stride[:4] == [3 * 32 * 32 * 4, 32 * 32 * 4, 32 * 4, 4]
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    inputs[0].sysMem[0].virAddr[:x.nbytes] = x.view(np.uint8).reshape(-1)
    start = sess.now_ps
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0
    assert dnn.hbDNNWaitTaskDone(task, 0) == 0
    took = sess.now_ps - start
    (model,) = [m for m in compiler.load_file(model_file) if m.name == "mnv2"]
    want = model.run({"input": x})["logits"]
    got = outputs[0].sysMem[0].virAddr[:want.nbytes].view(np.float32).reshape(want.shape)
    assert np.array_equal(got, want)
    # the simulated time is the model's segments, no less than the static estimate's BPU part
    assert took >= model.estimate(SOC).bpu_ps
    # the CPU's quantized, re-laid-out input is cleaned for the BPU; the BPU's output is
    # invalidated before the CPU reads it; the float output, for the CPU, is not cleaned
    assert [s["name"] for s in task.segments] == [
        "quantize input", "layout input", "cache clean", "bpu subgraph 1", "cache invalidate",
        "dequantize logits"]
    assert dnn.hbDNNReleaseTask(task) == 0
    assert dnn.hbDNNReleaseTask(task) == dnn.HB_DNN_INVALID_TASK_HANDLE
    for tensor in inputs + outputs:
        assert hbSysFreeMem(tensor.sysMem[0]) == 0
    assert dnn.hbDNNRelease(packed) == 0
    assert dnn.hbDNNGetModelNameList(packed)[0] == dnn.HB_DNN_INVALID_PACKED_DNN_HANDLE


def test_a_segmented_model_runs_its_cpu_ops_between_bpu_subgraphs(sess, model_file):
    packed = _load(model_file)
    _, handle = dnn.hbDNNGetModelHandle(packed, "seg")
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    rc, task = _infer(handle, inputs, outputs)
    assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
    kinds = [s["kind"] for s in task.segments if s["kind"] != "cache"]
    # around each CPU op: the BPU's codes to NCHW floats, and back
    around = ["layout", "dequantize", "cpu", "quantize", "layout"]
    assert kinds == ["quantize", "layout", "bpu", *around, "bpu", *around, "bpu", "layout",
                     "dequantize"]
    ends = [s["end_ps"] for s in task.segments]
    assert ends == sorted(ends)


def test_priority_orders_the_bpu_queue(sess, model_file):
    packed = _load(model_file)
    _, handle = dnn.hbDNNGetModelHandle(packed, "mnv2")
    tasks = {}
    # all pinned to core 0: the first runs at once, then the higher priority goes first
    for name, priority in (("first", 0), ("low", 0), ("high", 200)):
        inputs, outputs = _tensors(handle, False), _tensors(handle, True)
        rc, tasks[name] = _infer(handle, inputs, outputs, priority=priority,
                                 bpuCoreId=dnn.HB_BPU_CORE_0)
        assert rc == 0
    for task in tasks.values():
        assert dnn.hbDNNWaitTaskDone(task, 0) == 0
    done = {name: t.finished_ps for name, t in tasks.items()}
    assert done["first"] < done["high"] < done["low"]


def test_at_most_32_tasks_and_release_frees_a_slot(sess, model_file):
    packed = _load(model_file)
    _, handle = dnn.hbDNNGetModelHandle(packed, "mnv2")
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    tasks = []
    for _ in range(dnn.MAX_TASKS):
        rc, task = _infer(handle, inputs, outputs)
        assert rc == 0
        tasks.append(task)
    assert _infer(handle, inputs, outputs) == (dnn.HB_DNN_TASK_NUM_EXCEED_LIMIT, None)
    assert dnn.hbDNNRelease(packed) == dnn.HB_DNN_MODEL_IS_RUNNING
    assert dnn.hbDNNWaitTaskDone(tasks[0], 0) == 0
    assert dnn.hbDNNReleaseTask(tasks[0]) == 0
    rc, extra = _infer(handle, inputs, outputs)
    assert rc == 0
    for task in [*tasks[1:], extra]:
        assert dnn.hbDNNReleaseTask(task) == 0  # pending ones are cancelled
    assert dnn.hbDNNWaitTaskDone(extra, 0) == dnn.HB_DNN_INVALID_TASK_HANDLE
    assert dnn.hbDNNRelease(packed) == dnn.HB_DNN_MODEL_IS_RUNNING  # not stopped yet
    sleep_ms(50)  # the running ones stop at their next segment boundary
    assert all(t.finished_ps >= 0 for t in tasks)
    # some were cut short: they never reached their output's dequantize
    assert sum(all(s["kind"] != "dequantize" for s in t.segments) for t in tasks[1:]) > 0
    assert dnn.hbDNNRelease(packed) == 0


def test_waiting_with_a_timeout(sess, model_file):
    packed = _load(model_file)
    _, handle = dnn.hbDNNGetModelHandle(packed, "mnv2")
    _, task = _infer(handle, _tensors(handle, False), _tensors(handle, True))
    assert dnn.hbDNNWaitTaskDone(task, 0.001) == dnn.HB_DNN_TIMEOUT
    assert dnn.hbDNNWaitTaskDone(task, -1) == 0


def test_misuse_returns_error_codes(sess, model_file, tmp_path):
    assert dnn.hbDNNInitializeFromFiles([]) == (dnn.HB_DNN_INVALID_ARGUMENT, None)
    assert dnn.hbDNNInitializeFromFiles([str(tmp_path / "no.hbm")]) == (
        dnn.HB_DNN_CAN_NOT_OPEN_FILE, None)
    (tmp_path / "junk.hbm").write_bytes(b"junk")
    assert dnn.hbDNNInitializeFromFiles([str(tmp_path / "junk.hbm")]) == (
        dnn.HB_DNN_INVALID_MODEL, None)
    data = model_file.read_bytes()
    assert dnn.hbDNNInitializeFromDDR([data[:-5]], [len(data) - 5])[0] == \
        dnn.HB_DNN_INVALID_MODEL
    rc, packed = dnn.hbDNNInitializeFromDDR([data], [len(data)], 1)
    assert rc == 0
    assert dnn.hbDNNGetModelHandle(packed, "nope") == (dnn.HB_DNN_INVALID_ARGUMENT, None)
    assert dnn.hbDNNGetModelHandle("packed", "mnv2")[0] == dnn.HB_DNN_INVALID_PACKED_DNN_HANDLE
    _, handle = dnn.hbDNNGetModelHandle(packed, "mnv2")
    assert dnn.hbDNNGetInputCount(object()) == (dnn.HB_DNN_INVALID_DNN_HANDLE, None)
    assert dnn.hbDNNGetInputName(handle, 1) == (dnn.HB_DNN_INVALID_ARGUMENT, None)
    assert dnn.hbDNNGetOutputTensorProperties(handle, -1) == (dnn.HB_DNN_INVALID_ARGUMENT,
                                                               None)
    inputs, outputs = _tensors(handle, False), _tensors(handle, True)
    for fields, code in (({"priority": 256}, dnn.HB_DNN_INVALID_ARGUMENT),
                         ({"bpuCoreId": 3}, dnn.HB_DNN_INVALID_ARGUMENT),
                         ({"more": 2}, dnn.HB_DNN_INVALID_ARGUMENT),
                         ({"customId": "x"}, dnn.HB_DNN_INVALID_ARGUMENT)):
        assert _infer(handle, inputs, outputs, **fields) == (code, None)
    assert dnn.hbDNNInfer(outputs, inputs, handle, None) == (dnn.HB_DNN_INVALID_ARGUMENT, None)
    assert _infer(handle, inputs, [])[0] == dnn.HB_DNN_INVALID_ARGUMENT
    assert _infer(handle, outputs, inputs)[0] == dnn.HB_DNN_INVALID_ARGUMENT  # wrong shapes
    stale = dnn.hbDNNTensor()
    stale.properties = inputs[0].properties
    stale.sysMem[0] = hbSysMem()  # never allocated
    assert _infer(handle, [stale], outputs)[0] == dnn.HB_DNN_INVALID_ARGUMENT
    small = dnn.hbDNNTensor()
    small.properties = inputs[0].properties
    assert hbSysAllocCachedMem(small.sysMem[0], 16) == 0
    assert _infer(handle, [small], outputs)[0] == dnn.HB_DNN_INVALID_ARGUMENT
    assert dnn.hbDNNWaitTaskDone("task", 0) == dnn.HB_DNN_INVALID_TASK_HANDLE
    rc, task = _infer(handle, inputs, outputs)
    assert dnn.hbDNNWaitTaskDone(task, float("nan")) == dnn.HB_DNN_INVALID_ARGUMENT
    assert dnn.hbDNNWaitTaskDone(task, 0) == 0
    other = session.Session("j5")
    with other:
        assert dnn.hbDNNWaitTaskDone(task, 0) == dnn.HB_DNN_INVALID_TASK_HANDLE
        assert dnn.hbDNNGetModelNameList(packed)[0] == dnn.HB_DNN_INVALID_PACKED_DNN_HANDLE
    other.close()
    assert "32 model tasks" in dnn.hbDNNGetErrorDesc(dnn.HB_DNN_TASK_NUM_EXCEED_LIMIT)
    assert dnn.HB_DNN_TASK_NUM_EXCEED_LIMIT == -6000009
    assert dnn.hbDNNGetVersion() == "1.1.0"


def test_task_done_callbacks_run_at_completion(sess, model_file):
    packed = _load(model_file)
    _, handle = dnn.hbDNNGetModelHandle(packed, "mnv2")
    seen = []
    rc, task = _infer(handle, _tensors(handle, False), _tensors(handle, True))
    assert rc == 0

    def cb(t, code, userdata):
        seen.append((t, code, userdata, sess.now_ps))

    assert dnn.hbDNNSetTaskDoneCb(task, cb, "mine") == 0
    assert dnn.hbDNNSetTaskDoneCb(task, "not callable") == dnn.HB_DNN_INVALID_ARGUMENT
    assert dnn.hbDNNSetTaskDoneCb("task", cb) == dnn.HB_DNN_INVALID_TASK_HANDLE
    assert dnn.hbDNNWaitTaskDone(task, 0) == 0
    sess.run()
    assert [(t, code, data) for t, code, data, _ in seen] == [(task, 0, "mine")]
    assert seen[0][3] == task.finished_ps


def test_more_chains_models_into_one_task(sess, model_file):
    packed = _load(model_file)
    _, mnv2 = dnn.hbDNNGetModelHandle(packed, "mnv2")
    _, seg = dnn.hbDNNGetModelHandle(packed, "seg")
    a_in, a_out = _tensors(mnv2, False), _tensors(mnv2, True)
    b_in, b_out = _tensors(seg, False), _tensors(seg, True)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    a_in[0].sysMem[0].virAddr[:x.nbytes] = x.view(np.uint8).reshape(-1)
    start = sess.now_ps
    rc, task = _infer(mnv2, a_in, a_out, more=1)
    assert rc == 0
    assert dnn.hbDNNWaitTaskDone(task, 1) == dnn.HB_DNN_TIMEOUT  # not started: more is set
    assert task.segments == []
    ctrl = dnn.hbDNNInferCtrlParam()
    dnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
    rc, same = dnn.hbDNNInfer(b_out, b_in, seg, ctrl, task)
    assert rc == 0 and same is task
    assert dnn.hbDNNWaitTaskDone(task, 0) == 0
    models = [s["model"] for s in task.segments]
    assert models == sorted(models) and set(models) == {0, 1}  # one after the other
    (model,) = [m for m in compiler.load_file(model_file) if m.name == "mnv2"]
    want = model.run({"input": x})["logits"]
    got = a_out[0].sysMem[0].virAddr[:want.nbytes].view(np.float32).reshape(want.shape)
    assert np.array_equal(got, want)
    assert task.finished_ps - start > 0
    # a started task takes no more models; a released one neither
    assert dnn.hbDNNInfer(b_out, b_in, seg, ctrl, task) == (dnn.HB_DNN_INVALID_TASK_HANDLE,
                                                            None)
    assert dnn.hbDNNReleaseTask(task) == 0
    # a chain never closed is dropped by its release, its buffers free again
    rc, open_task = _infer(mnv2, a_in, a_out, more=True)
    assert dnn.hbDNNReleaseTask(open_task) == 0
    assert hbSysFreeMem(a_in[0].sysMem[0]) == 0
    assert dnn.hbDNNRelease(packed) == 0


def test_the_c_style_two_model_example_runs_and_its_timeline_is_deterministic(
        tmp_path, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    try:
        import hbdnn_two_models as example
    finally:
        sys.path.pop(0)
    model = example.compile_models(tmp_path)
    runs = []
    for k in range(2):
        report, trace = tmp_path / f"r{k}.json", tmp_path / f"t{k}.json"
        assert example.main(["--model", str(model), "--frames", "2", "--report", str(report),
                             "--trace", str(trace)]) == 0
        runs.append((capsys.readouterr().out, report.read_bytes(), trace.read_bytes()))
    assert runs[0] == runs[1]
    out = runs[0][0]
    assert "16 inferences from 8 threads" in out
    assert "model mobilenetv2" in out and "model resnet18" in out


# About 15 s: a soak of fifty sessions, for the memory. That a closed session is freed is
# checked by default on one session (the test below).
@pytest.mark.slow
def test_fifty_sessions_with_inference_leave_memory_flat(model_file):
    """Fifty sessions in one process, each loading the model and running an inference: no
    session outlives its `with` block, and the process's memory after the last is within a
    tenth of what it was after the fifth (the first ones compile and cache)."""
    import gc
    import weakref

    def resident_mib() -> float:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096 / 2**20

    refs = []
    after = []
    for _ in range(50):
        with session.Session() as sess:
            packed = _load(model_file)
            rc, handle = dnn.hbDNNGetModelHandle(packed, "seg")
            rc, task = _infer(handle, _tensors(handle, False), _tensors(handle, True))
            assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
            assert dnn.hbDNNReleaseTask(task) == 0 and dnn.hbDNNRelease(packed) == 0
        refs.append(weakref.ref(sess))
        del sess, packed, handle, task
        gc.collect()
        after.append(resident_mib())
    assert all(ref() is None for ref in refs)
    assert after[-1] <= 1.1 * after[4], after


def test_a_closed_session_that_ran_inference_is_freed(model_file):
    """hbDNN's state of a session (its tasks, plugin layers, worker threads) lives in the
    session's one `dnn` slot: once the session is closed and dropped, nothing keeps it
    alive (issue 28: a module-level pool of workers kept every such session)."""
    import gc
    import weakref

    def run() -> weakref.ref:
        with session.Session() as sess:
            packed = _load(model_file)
            rc, handle = dnn.hbDNNGetModelHandle(packed, "seg")
            assert rc == 0
            rc, task = _infer(handle, _tensors(handle, False), _tensors(handle, True))
            assert rc == 0 and dnn.hbDNNWaitTaskDone(task, 0) == 0
            assert sess.dnn is not None and sess.dnn.tasks_alive == 1
            assert any(t.name.startswith("hbDNN.worker") for t in sess.threads)
            assert dnn.hbDNNReleaseTask(task) == 0 and dnn.hbDNNRelease(packed) == 0
        assert sess.dnn is None
        return weakref.ref(sess)

    ref = run()
    gc.collect()
    assert ref() is None

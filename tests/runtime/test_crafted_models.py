"""Crafted model files (issue 28): a real compiled model whose description and arrays are
changed at random, packed again with a consistent checksum, then loaded, queried, inferred
and released through hbDNN. Every call answers with a status; none raises; a model that
loaded is released (no task left running for ever)."""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest

from emu.dnn import alloc_tensors, free_tensors
from emu.nn import compiler, modelfile, zoo
from emu.runtime import hbdnn, session
from emu.soc.config import load_config

ODD_VALUES: list[Any] = [0, -1, 1, 3, 2**31, -2**40, 1.5, True, None, "x", "int8", "float32",
                         [], {}]


def base_model() -> modelfile.PackedModel:
    """The model the crafted files start from: a small MobileNetV1, compiled."""
    model = compiler.compile_model(zoo.build("mobilenetv1", (32, 32), classes=10), "m",
                                   compiler.CompileOptions(calib_random=2),
                                   load_config().soc)
    return model.to_packed()


@pytest.fixture(scope="module")
def packed() -> modelfile.PackedModel:
    return base_model()


def _leaves(obj: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    if isinstance(obj, dict):
        return [leaf for k, v in obj.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(obj, list):
        return [leaf for i, v in enumerate(obj) for leaf in _leaves(v, (*path, i))]
    return [(path, obj)]


def _at(meta: Any, path: tuple) -> Any:
    for key in path:
        meta = meta[key]
    return meta


def crafted(base: modelfile.PackedModel, rng: random.Random) -> bytes:
    """`base` with one to three changes: a value of its description replaced, an entry of
    a list or a key dropped, or an array cut, emptied or of another type."""
    meta, arrays = copy.deepcopy(base.meta), dict(base.arrays)
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.6:
            path, value = rng.choice(_leaves(meta))
            odd = ODD_VALUES + ([value + 1, value - 1, 2 * value, 1000 * value]
                                if type(value) is int else [])
            _at(meta, path[:-1])[path[-1]] = rng.choice(odd)
        elif kind < 0.8:
            key = rng.choice(sorted(arrays))
            a = arrays[key]
            arrays[key] = rng.choice([a.reshape(-1)[: a.size // 2].copy(),
                                      a.astype(rng.choice([np.int8, np.float32, np.int64])),
                                      np.zeros((0,), a.dtype)])
        else:
            path = rng.choice([p for p, _ in _leaves(meta) if len(p) > 1])
            container = _at(meta, path[:-1])
            if isinstance(container, list):
                container.pop(path[-1])
            else:
                del container[path[-1]]
    return modelfile.dumps([modelfile.PackedModel(base.name, meta, arrays)], "crafted")


def _exercise(data: bytes, path: str) -> str:
    with open(path, "wb") as fh:
        fh.write(data)
    with session.Session("j5"):
        rc, handle = hbdnn.hbDNNInitializeFromFiles([path])
        if rc != hbdnn.HB_DNN_SUCCESS:
            assert rc == hbdnn.HB_DNN_INVALID_MODEL and handle is None
            return "refused"
        rc, names, _ = hbdnn.hbDNNGetModelNameList(handle)
        assert rc == 0 and names
        rc, dnn = hbdnn.hbDNNGetModelHandle(handle, names[0])
        assert rc == 0
        inputs, outputs = alloc_tensors(dnn, False), alloc_tensors(dnn, True)
        ctrl = hbdnn.hbDNNInferCtrlParam()
        hbdnn.HB_DNN_INITIALIZE_INFER_CTRL_PARAM(ctrl)
        rc, task = hbdnn.hbDNNInfer(outputs, inputs, dnn, ctrl)
        outcome = f"infer {rc}"
        if rc == hbdnn.HB_DNN_SUCCESS:
            waited = hbdnn.hbDNNWaitTaskDone(task, 0)
            assert waited in (hbdnn.HB_DNN_SUCCESS, hbdnn.HB_DNN_RUN_TASK_FAILED), waited
            assert hbdnn.hbDNNReleaseTask(task) == hbdnn.HB_DNN_SUCCESS
            outcome += f", wait {waited}"
        free_tensors(inputs + outputs)
        assert hbdnn.hbDNNRelease(handle) == hbdnn.HB_DNN_SUCCESS, outcome
        return outcome


def _fuzz(packed: modelfile.PackedModel, count: int, seed: int, tmp_path: Any) -> set[str]:
    rng = random.Random(seed)
    return {_exercise(crafted(packed, rng), str(tmp_path / "crafted.hbm"))
            for _ in range(count)}


def test_crafted_model_files_are_refused_or_run_and_released(packed, tmp_path, capfd):
    outcomes = _fuzz(packed, 40, 0, tmp_path)
    assert "refused" in outcomes and "infer 0, wait 0" in outcomes  # both kinds were made
    capfd.readouterr()  # the board library's error lines


@pytest.mark.slow  # about 20 s
def test_a_thousand_crafted_model_files(packed, tmp_path, capfd):
    outcomes = _fuzz(packed, 1000, 1, tmp_path)
    assert "refused" in outcomes
    capfd.readouterr()

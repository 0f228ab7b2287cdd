"""Quantised execution agrees with onnxruntime's float run of the original ONNX model.

Every zoo network (the built ones at reduced sizes, the onnx test-data topologies at their
fixed 224x224) is calibrated on four standard-normal inputs (how the zoo sets its
BatchNormalization statistics) with `emu compile`'s default method
(`compiler.DEFAULT_CALIB_METHOD`) and run on three other such inputs; each output tensor's
cosine similarity with onnxruntime's must reach 0.99 (`quantize.COSINE_MIN`). Classifiers
also compare top-1 classes: a disagreement is only allowed where the two classes (the float
top one and the quantised pick) are closer in the float logits than twice the largest
error the quantised output makes on that input (a near-tie that any perturbation of that
size could flip); the agreement rate is printed (-s).
"""

from __future__ import annotations

import numpy as np
import pytest

from emu.nn import compiler, execute, quantize, zoo
from tests.nn.nets import ZOO_SMALL, zoo_case
from tests.nn.test_execute import quantised, samples_for

ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime (the test extra) is the oracle the float outputs "
    "are compared with")

BUILT_SIZES = {"resnet18": (32, 32), "resnet50": (64, 64), "mobilenetv1": (32, 32),
               "mobilenetv2": (32, 32), "efficientnet_lite0": (32, 32), "yolov8n": (64, 64),
               "yolov8s": (64, 64), "unet": (16, 16), "centerpoint_pillars": (32, 32),
               "yolov5s": (64, 64)}
# Test-data topologies cheap enough for the default run; the rest take 5-15 s each (weight
# drawing for the large FC layers, DenseNet's 600 nodes) and run with -m slow.
QUICK_TOPOLOGIES = {"onnx_squeezenet", "onnx_shufflenet", "onnx_inception_v1"}
CASES = [zoo_case(name, name in BUILT_SIZES or name in QUICK_TOPOLOGIES)
         for name in zoo.names()]
TEST_SAMPLES = 3


@pytest.mark.parametrize("name", CASES)
def test_quantised_outputs_match_onnxruntime(name):
    onnx_model = zoo.build(name, input_size=BUILT_SIZES.get(name, ZOO_SMALL.get(name)))
    model = quantised(onnx_model, method=compiler.DEFAULT_CALIB_METHOD)
    session = ort.InferenceSession(onnx_model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    classifier = len(names) == 1 and model.graph.tensors[names[0]].shape[-1] == 1000
    got: dict[str, list[np.ndarray]] = {n: [] for n in names}
    want: dict[str, list[np.ndarray]] = {n: [] for n in names}
    agree = 0
    for feeds in samples_for(model.graph, TEST_SAMPLES, seed=1000):
        quant = execute.run(model, feeds)
        exact = dict(zip(names, session.run(None, feeds), strict=True))
        for n in names:
            got[n].append(quant[n])
            want[n].append(exact[n])
        if classifier:
            logits, q = exact[names[0]].reshape(-1), quant[names[0]].reshape(-1)
            best, picked = int(np.argmax(logits)), int(np.argmax(q))
            agree += best == picked
            margin = float(logits[best] - logits[picked])
            assert margin <= 2 * float(np.abs(q - logits).max()), "top-1 flipped, not a tie"
    for n in names:
        cosine = execute.cosine_similarity(np.concatenate(got[n]), np.concatenate(want[n]))
        assert cosine >= quantize.COSINE_MIN, f"{n}: cosine {cosine:.4f}"
    if classifier:
        print(f"{name}: top-1 agreement {agree}/{TEST_SAMPLES}")


def test_accuracy_reports_each_output_without_a_flag_on_a_good_model():
    model = quantised(zoo.build("yolov8n", input_size=(64, 64)))
    result = quantize.accuracy(model, samples_for(model.graph, 2, seed=50))
    assert set(result) == set(model.graph.outputs)
    assert not result.low and min(result.values()) >= quantize.COSINE_MIN

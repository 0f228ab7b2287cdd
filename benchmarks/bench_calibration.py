"""How calibration data and method decide a detector's accuracy: YOLOv8n at 640x640
compiled with `--calib-random 16` and with `--calib-dir` of four real photos, each with every
`--calib-method` (max, percentile at the default 99.99, kl), all evaluated on three other
photos against onnxruntime.

The photos are scikit-image's sample pictures (a test extra; nothing is downloaded):
astronaut, chelsea, coffee and motorcycle_left calibrate; rocket, motorcycle_right and
retina are evaluated. The figure per output is the worst, over the evaluation photos, of
the Pearson correlation of emu's output with onnxruntime's (the cosine of the two after
subtracting the mean of onnxruntime's): the zoo's YOLOv8n heads carry large constant
biases (about -11 on the class maps), so the plain cosine is near 1 whatever the input and
says nothing.

Then the classifiers: the nine `light` models of the onnx wheel (AlexNet, DenseNet-121,
Inception v1 and v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) with weights of
trained scale and their one standard-normal input (`tests/conformance/cases.realistic_light`,
as the conformance suite compiles them: calibrated on the input they are checked on), each
quantised with every method from one calibration pass; the figure is the cosine similarity
of the output (the class probabilities, after Softmax on the CPU) with onnxruntime's.
It prints figures; it asserts nothing. About 15 minutes on two cores:

    PYTHONPATH=$PWD python benchmarks/bench_calibration.py
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from emu.nn import compiler, execute, quantize, zoo
from emu.soc.config import load_config

CALIBRATE = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png")
EVALUATE = ("rocket.jpg", "motorcycle_right.png", "retina.jpg")
SIZE = (640, 640)


def _photos() -> Path:
    import skimage

    return Path(skimage.__file__).resolve().parent / "data"


def correlations(model: compiler.CompiledModel, onnx_bytes: bytes,
                 options: compiler.CompileOptions) -> dict[str, float]:
    """The worst Pearson correlation per output over the evaluation photos."""
    import onnxruntime

    session = onnxruntime.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    worst: dict[str, float] = {}
    for photo in EVALUATE:
        feeds = compiler.picture_sample(model.graph, _photos() / photo, options)
        got = model.run(feeds)
        for name, want in zip(names, session.run(names, feeds), strict=True):
            centre = float(np.mean(want))
            value = execute.cosine_similarity(got[name] - centre, want - centre)
            worst[name] = min(worst.get(name, 1.0), value)
    return worst


def classifiers() -> None:
    """Each light model's output cosine with onnxruntime's, per method (see the module)."""
    import onnxruntime

    from emu.nn import importer, placement
    from tests.conformance import cases

    for light in cases.light_models():
        model, feeds = cases.realistic_light(light)
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        want = dict(zip(names, session.run(names, feeds), strict=True))
        graph = importer.compile_graph(importer.load(model))
        segments = placement.place(graph)
        calibration = quantize.calibrate(graph, segments, [feeds], method="kl")  # histograms
        figures = []
        for method in quantize.CALIBRATION_METHODS:
            chosen = dataclasses.replace(calibration, method=method)
            got = execute.run(quantize.quantize(graph, segments, chosen), feeds)
            worst = min(execute.cosine_similarity(got[n].ravel(), want[n].ravel())
                        for n in names)
            figures.append(f"{method} {worst:.4f}")
        print(f"{light.name}, trained-scale weights, output cosine: {', '.join(figures)}",
              flush=True)


def main() -> None:
    soc = load_config("j5", None, []).soc
    onnx_model = zoo.build("yolov8n", SIZE)
    with tempfile.TemporaryDirectory() as folder:
        for photo in CALIBRATE:
            shutil.copy(_photos() / photo, Path(folder) / photo)
        for label, data in (("16 random samples", {}),
                            ("4 photos", {"calib_dir": Path(folder)})):
            for method in quantize.CALIBRATION_METHODS:
                options = compiler.CompileOptions(calib_method=method, **data)
                start = time.perf_counter()
                model = compiler.compile_model(onnx_model, "yolov8n", options, soc)
                seconds = time.perf_counter() - start
                worst = correlations(model, onnx_model.SerializeToString(), options)
                figures = ", ".join(f"{k} {v:.4f}" for k, v in worst.items())
                name = method + (f" {options.calib_percentile:g}"
                                 if method == "percentile" else "")
                print(f"yolov8n 640, calibrated on {label}, {name} (compile {seconds:.0f} s): "
                      f"{figures}; worst {min(worst.values()):.4f}", flush=True)
    classifiers()


if __name__ == "__main__":
    main()

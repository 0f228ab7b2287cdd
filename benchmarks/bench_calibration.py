"""How calibration data decides a detector's accuracy: YOLOv8n at 640x640 compiled once with
`--calib-random 16` and once with `--calib-dir` of four real photos, both evaluated on three
other photos against onnxruntime.

The photos are scikit-image's sample pictures (a test extra; nothing is downloaded):
astronaut, chelsea, coffee and motorcycle_left calibrate; rocket, motorcycle_right and
retina are evaluated. The figure per output is the worst, over the evaluation photos, of
the Pearson correlation of emu's output with onnxruntime's (the cosine of the two after
subtracting the mean of onnxruntime's): the zoo's YOLOv8n heads carry large constant
biases (about -11 on the class maps), so the plain cosine is near 1 whatever the input and
says nothing. It prints figures; it asserts nothing.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from emu.nn import compiler, execute, zoo
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


def main() -> None:
    soc = load_config("j5", None, []).soc
    onnx_model = zoo.build("yolov8n", SIZE)
    with tempfile.TemporaryDirectory() as folder:
        for photo in CALIBRATE:
            shutil.copy(_photos() / photo, Path(folder) / photo)
        for label, options in (("16 random samples", compiler.CompileOptions()),
                               ("4 photos", compiler.CompileOptions(calib_dir=Path(folder)))):
            start = time.perf_counter()
            model = compiler.compile_model(onnx_model, "yolov8n", options, soc)
            seconds = time.perf_counter() - start
            worst = correlations(model, onnx_model.SerializeToString(), options)
            figures = ", ".join(f"{k} {v:.4f}" for k, v in worst.items())
            print(f"yolov8n 640, calibrated on {label} (compile {seconds:.0f} s): {figures}; "
                  f"worst {min(worst.values()):.4f}")


if __name__ == "__main__":
    main()

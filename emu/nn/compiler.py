"""`emu compile`: float ONNX in, a quantised model that computes and is timed out.

The steps, each in its own module:

1. `rebatch` (here): the ONNX model with its batch dimension set to `--batch`, shapes
   inferred again (the batch rule is below);
2. `importer.load` and `importer.compile_graph`: the IR and the fusing passes;
3. `add_preprocess` (here): for an image input type, a BPU "Preprocess" node in front of
   the network (`preprocess.py`); the compiled input is then the uint8 image;
4. `placement.place`: BPU / CPU / DSP per op, segments;
5. `quantize.calibrate` on the calibration samples with `--calib-method` (max, percentile
   at `--calib-percentile`, or kl; quantize.py states each, the default and its measurement
   are below), `quantize.quantize`: the integer model; `quantize.accuracy` compares it with
   the float graph on (up to `ACCURACY_SAMPLES`, four, of) the same samples and the model
   is flagged when an output's cosine similarity falls below `ACCURACY_FLOOR`;
6. `layers.layer_groups` and `timing.split_function_calls`: each BPU subgraph cut into
   function calls of at most `--max-time-per-fc` microseconds of estimated time on the
   hardware the compiler was given, a longer layer group into parts (bands of output rows
   or tiles of output channels, `timing.layer_part`), each a function call.

Steps 1 to 5 never read the hardware, and their result is looked up first in the model
cache (`modelcache.py`, keyed by what they read); step 6 (`cut`) runs on every compile.

Calibration samples are runs of the model as exported: a model exported for one frame
and compiled with `--batch N` is calibrated, and its accuracy checked, at batch 1 (its
quantisation is the batched model's: int8 scales are per tensor, whatever the batch), so
`--calib-random 16` runs 16 frames at any `--batch`, as the vendor toolchain calibrates on
single images. (A model exported with its own batch keeps it, since its layers may mix
frames; so does one whose placement differs at batch 1.) `--calib-dir DIR` reads every
`.npy` file in it (one run each, in the compiled input's shape and dtype, split into its
frames when calibrating at batch 1; a multi-input model takes `.npz` files keyed by input
name), in name order, or every picture in it (PNG, PGM/PPM, JPEG with Pillow; not both
kinds; each fills every frame of a run): each resized to the input's H x W (bilinear,
half-pixel centres), grey to RGB by repeating and RGB to grey by BT.601 luma; for an rgb,
bgr or gray input type the uint8 pixels, for a float feature map (pixel - mean) x scale
per channel, planes first, with `--mean` (default 0) and `--scale` (default 1/255: pixels
in [0, 1]); `--calib-random N` (the default, N = 16) draws N samples with `--seed`:
standard normal float32 feature maps, or uniformly random uint8 images.
The model's options record what calibrated it (`"calibration"`: "4 pictures in DIR",
"3 arrays in DIR", "16 random samples, seed 0", `CalibrationSamples.description`) and how
(`"calib_method"`, and `"calib_percentile"` for percentile); `flagged` lists every output
below `ACCURACY_FLOOR`, which `emu compile` prints with its cosine.

The default method, `DEFAULT_CALIB_METHOD` = percentile (at 99.99), chosen by measurement
(`benchmarks/bench_calibration.py`; the figures are in the README's "Neural networks on
the BPU"). YOLOv8n at 640 calibrated on four photos is as good with every method (worst
output's Pearson correlation with onnxruntime on three other photos 0.945 each); calibrated
on the default 16 random samples it is 0.70 with max, 0.80 with percentile and 0.85 with
kl. But kl's clip follows the histogram's shape and on few samples can cut deep: on the
conformance suite's nine classifiers with weights of trained scale, each calibrated on its
one input, kl's worst output cosine is below the 0.99 floor (VGG-19) where percentile's is
0.994 and max's 0.990. Percentile clips only what is rarer than 1 in 10,000 (a tensor with
fewer nonzero values over all samples keeps max|x|): never far from max where max does
well, and most of kl's gain where the calibration data stray from the real inputs.

Output types (`--output-type NAME=TYPE`, as the vendor toolchain removes the Dequantize
of chosen outputs): "float" (the default) dequantises the output on the CPU (a segment of
the "dequantize" kind, costed per element); "quantized" hands it over as the BPU writes it
(the codes of its int8 or int16 tensor with one scale, or a final Conv's int32
accumulators with a scale per channel: `execute.output_quantization`), and the CPU does
nothing; "int32" hands over the accumulators of the Conv or Gemm that writes the output,
through the layout ops on the way (Transpose, Reshape: a detection head exported
channels-last), scaled per channel along the axis the channels end on
(`placement.accumulators`; the Conv's input then stays int8). `--output-codes` makes
"quantized" the type of every output not named. A type other than float is refused for an
output the BPU does not write.

The compiled model is stored with `save` as one model of a file (`modelfile.py`); the
hardware it was compiled for is not stored, only its function-call cut: estimates and
simulation recompute every time on the hardware of the session.

The batch (`CompiledModel.batch`, frames per run: the static estimate's FPS is batch over
latency) is dimension 0 of the first input when that input has a batch dimension, that is
rank 3 or more (N x ...: N x C x H x W images and feature maps, N x rows x width NV12,
N x C x D x H x W volumes); an input of rank 0, 1 or 2 is one frame (a vector, or a 2-D
input of rows such as 196 x 256 tokens or 4 x 64 features), so the batch is 1. `--batch N`
sets dimension 0 of every input and is refused for a model with an input of rank below 3:
it has no batch dimension to set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from emu.bpu import timing
from emu.errors import InputError
from emu.nn import estimate as estimate_module
from emu.nn import (
    execute,
    imagefiles,
    importer,
    layers,
    modelcache,
    modelfile,
    placement,
    quantize,
    reference,
)
from emu.nn.graph import Graph, Node, Tensor, from_packed, to_packed
from emu.nn.placement import Segment
from emu.nn.preprocess import IMAGE_TYPES, INPUT_TYPES, ImageInput
from emu.soc.clock import PS_PER_US
from emu.soc.config import SocConfig

ACCURACY_FLOOR = 0.99
ACCURACY_SAMPLES = 4  # calibration samples the accuracy check runs
DEFAULT_CALIBRATION_SAMPLES = 16
DEFAULT_CALIB_METHOD = "percentile"  # chosen by measurement: see the module docstring
MAX_BATCH = 256
BATCH_MIN_RANK = 3  # inputs of lower rank have no batch dimension (module docstring)
MAX_TIME_PER_FC_US = 10**7
INT16_RULES = ("auto", "never", "always")
Progress = Callable[[str], None]
OUTPUT_TYPES = ("float", "quantized", "int32")
STEPS = 4  # progress reports per model: import, calibrate, quantise, check accuracy
# (two when the model cache has the model: import, compiled before)


# Where an image input comes from: a buffer in DDR (hbDNNInfer), or regions of interest of
# larger images that the BPU's resizer scales to the input size (hbDNNRoiInfer).
INPUT_SOURCES = ("ddr", "resizer")


@dataclass(frozen=True)
class CompileOptions:
    """What `emu compile` was asked for."""

    input_type: str = "featuremap"
    batch: int | None = None  # None: the ONNX model's own
    mean: tuple[float, ...] | None = None  # image inputs; None: 0 per channel
    scale: tuple[float, ...] | None = None  # image inputs; None: 1 per channel
    calib_dir: Path | None = None
    calib_random: int = DEFAULT_CALIBRATION_SAMPLES
    seed: int = 0
    calib_method: str = DEFAULT_CALIB_METHOD
    calib_percentile: float = quantize.DEFAULT_PERCENTILE  # read by "percentile" only
    max_time_per_fc_us: float = 0.0  # 0: no limit
    dsp_softmax: bool = False
    int16: str = "auto"  # "auto": where int8 is too coarse; "never"; "always"
    input_source: str = "ddr"  # image inputs: "resizer" reads ROIs through the BPU resizer
    output_codes: bool = False  # BPU outputs stay quantised (no dequantize on the CPU)
    output_types: tuple[tuple[str, str], ...] = ()  # (output, one of OUTPUT_TYPES)

    def __post_init__(self) -> None:
        for name, kind in self.output_types:
            if kind not in OUTPUT_TYPES:
                raise InputError(f"--output-type {name}={kind}: expected one of "
                                 f"{', '.join(OUTPUT_TYPES)}")
        named = [name for name, _ in self.output_types]
        if len(set(named)) != len(named):
            twice = next(n for n in named if named.count(n) > 1)
            raise InputError(f"--output-type {twice}: given twice")
        if self.input_source not in INPUT_SOURCES:
            raise InputError(f"--input-source {self.input_source}: expected one of "
                             f"{', '.join(INPUT_SOURCES)}")
        if self.input_source == "resizer" and self.input_type not in IMAGE_TYPES:
            raise InputError(f"--input-source resizer: needs an image --input-type "
                             f"({', '.join(IMAGE_TYPES)}), not {self.input_type}")
        if self.int16 not in INT16_RULES:
            raise InputError(f"--int16 {self.int16}: expected one of {', '.join(INT16_RULES)}")
        if self.input_type not in INPUT_TYPES:
            raise InputError(f"--input-type {self.input_type}: expected one of "
                             f"{', '.join(INPUT_TYPES)}")
        if self.batch is not None and not 1 <= self.batch <= MAX_BATCH:
            raise InputError(f"--batch {self.batch}: expected 1 to {MAX_BATCH}")
        if not 1 <= self.calib_random <= 10_000:
            raise InputError(f"--calib-random {self.calib_random}: expected 1 to 10000")
        quantize.check_method(self.calib_method, self.calib_percentile)
        if not 0 <= self.max_time_per_fc_us <= MAX_TIME_PER_FC_US:
            raise InputError(f"--max-time-per-fc {self.max_time_per_fc_us}: expected 0 "
                             f"(no limit) to {MAX_TIME_PER_FC_US} microseconds")

    def output_type(self, name: str) -> str:
        """The type output `name` is handed over in (see the module)."""
        return _output_type({"output_codes": self.output_codes,
                             "output_types": self.output_types}, name)

    def as_meta(self, calibration: str) -> dict[str, Any]:
        """The options as the model file keeps them; `calibration` says what the samples
        were (`CalibrationSamples.description`)."""
        return {"input_type": self.input_type, "batch": self.batch,
                "mean": list(self.mean) if self.mean is not None else None,
                "scale": list(self.scale) if self.scale is not None else None,
                "calibration": calibration, "calib_method": self.calib_method,
                "calib_percentile": (self.calib_percentile
                                     if self.calib_method == "percentile" else None),
                "max_time_per_fc_us": self.max_time_per_fc_us,
                "dsp_softmax": self.dsp_softmax, "int16": self.int16,
                "input_source": self.input_source, "output_codes": self.output_codes,
                "output_types": [list(pair) for pair in self.output_types]}


def _output_type(options: dict[str, Any], name: str) -> str:
    """The type of output `name` under a model's recorded options (`as_meta`)."""
    named = {str(pair[0]): str(pair[1]) for pair in options.get("output_types") or ()}
    return named.get(name, "quantized" if options.get("output_codes") else "float")


@dataclass
class CompiledModel:
    """One compiled model: the graph, where each op runs, the integer model, the cut of
    each BPU subgraph into function calls, and what the compiler found."""

    name: str
    graph: Graph
    segments: list[Segment]
    quant: Any  # quantize.QuantModel
    function_calls: dict[int, list[timing.Span]]  # BPU segment index -> its cut
    options: dict[str, Any]
    accuracy: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the import did (opset conversion)

    @property
    def flagged(self) -> list[str]:
        """The outputs whose cosine similarity to the float model is below the floor."""
        return [k for k, v in self.accuracy.items() if v < ACCURACY_FLOOR]

    @property
    def inputs(self) -> list[Tensor]:
        return [self.graph.tensors[name] for name in self.graph.inputs]

    @property
    def outputs(self) -> list[Tensor]:
        return [self.graph.tensors[name] for name in self.graph.outputs]

    @property
    def batch(self) -> int:
        """Frames per run: the first input's batch dimension (see the module docstring)."""
        return batch_of(self.inputs[0].shape) if self.inputs else 1

    def subgraphs(self) -> dict[int, list[timing.LayerGroup]]:
        """BPU segment index -> its layer groups (recomputed: they are not stored)."""
        dtypes = self.quant.tensor_dtypes()
        return {k: layers.layer_groups(self.graph, s, dtypes)
                for k, s in enumerate(self.segments) if s.kind == "bpu"}

    def weights_resident(self, soc: SocConfig) -> bool:
        """Whether all BPU weights of the model stay on chip across runs on `soc`."""
        return timing.weights_resident(
            [g for part in self.subgraphs().values() for g in part], soc.bpu)

    def calls(self, soc: SocConfig) -> list[tuple[int, list[timing.FunctionCall]]]:
        """Per BPU segment (index), its function calls with their costs on `soc`."""
        resident = self.weights_resident(soc)
        return [(k, timing.function_calls(groups, soc.bpu, soc.ddr,
                                           self.function_calls.get(k), resident))
                for k, groups in self.subgraphs().items()]

    def estimate(self, soc: SocConfig) -> estimate_module.ModelEstimate:
        """The static estimate (`hb_perf`'s view) of this model on `soc`."""
        return estimate_module.estimate(
            self.graph, self.segments, soc, self.batch, self.name,
            spans=self.function_calls, dtypes=self.quant.tensor_dtypes())

    def code_outputs(self) -> list[str]:
        """The outputs the model hands over quantised (`--output-codes`): those a BPU
        segment produces; `execute.output_quantization` says how to read them."""
        made = {t for s in self.segments if s.kind == "bpu" for t in s.outputs}
        return [name for name in self.graph.outputs
                if name in made and name in self.quant.tensors
                and _output_type(self.options, name) != "float"]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for `feeds` (every input by name), computed exactly."""
        return execute.run(self.quant, feeds)

    def elided_weights(self) -> set[str]:
        """The float weights and biases only BPU layers read: the file stores those layers'
        int8 weights and int32 biases instead (as the board's model file does)."""
        quantised = set(self.quant.layers)
        readers = self.graph.consumers()
        found = set()
        for node in self.graph.nodes:
            if node.name in quantised and node.op in ("Conv", "FC", "ConvTranspose"):
                for name in node.inputs[1:3]:
                    if (name and self.graph.is_const(name)
                            and all(r.name in quantised for r in readers.get(name, []))):
                        found.add(name)
        return found

    def to_packed(self, elide: bool = True) -> modelfile.PackedModel:
        """The model as a file holds it; `elide`: without the float weights only BPU
        layers read (`elided_weights`), as `save` writes it."""
        graph_meta, arrays = to_packed(self.graph,
                                       elide=self.elided_weights() if elide else ())
        quant_meta, quant_arrays = self.quant.to_arrays()
        clash = set(arrays) & set(quant_arrays)
        if clash:  # the two namespaces are disjoint by construction
            raise AssertionError(f"array keys used twice: {sorted(clash)[:3]}")
        arrays.update(quant_arrays)
        meta = {"graph": graph_meta, "quant": quant_meta,
                "segments": [_segment_meta(s) for s in self.segments],
                "function_calls": {str(k): [list(fc) for fc in v]
                                   for k, v in self.function_calls.items()},
                "options": self.options, "accuracy": self.accuracy, "notes": self.notes}
        return modelfile.PackedModel(self.name, meta, arrays)

    @classmethod
    def from_packed(cls, packed: modelfile.PackedModel, where: str) -> CompiledModel:
        try:
            meta = packed.meta
            graph = from_packed(meta["graph"], packed.arrays)
            quant = quantize.QuantModel.from_arrays(meta["quant"], packed.arrays, graph)
            segments = [Segment(s["kind"], tuple(s["nodes"]), tuple(s["inputs"]),
                                tuple(s["outputs"]), tuple(s["reasons"]))
                        for s in meta["segments"]]
            calls = {int(k): [tuple(int(x) for x in fc) for fc in v]
                     for k, v in meta["function_calls"].items()}
            if any(len(fc) not in (2, 5) for v in calls.values() for fc in v):
                raise ValueError("a function call is neither a range nor a part")
            return cls(packed.name, graph, segments, quant, calls, dict(meta["options"]),
                       {str(k): float(v) for k, v in meta["accuracy"].items()},
                       [str(n) for n in meta.get("notes", [])])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise modelfile.ModelFileError(f"{where}: model {packed.name}: malformed "
                                           f"description ({exc!r})") from None


def _segment_meta(segment: Segment) -> dict[str, Any]:
    return {"kind": segment.kind, "nodes": list(segment.nodes), "inputs": list(segment.inputs),
            "outputs": list(segment.outputs), "reasons": list(segment.reasons)}


def batch_of(shape: Sequence[int]) -> int:
    """Frames in a tensor of `shape` (the batch rule of the module docstring)."""
    return int(shape[0]) if len(shape) >= BATCH_MIN_RANK else 1


# --- the steps ---------------------------------------------------------------------------------

def rebatch(model: onnx.ModelProto, batch: int, where: str) -> onnx.ModelProto:
    """A copy of `model` whose inputs have batch `batch` (dimension 0), shapes to infer;
    refused for an input of rank below `BATCH_MIN_RANK` (it has no batch dimension)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    initializers = {t.name for t in copy.graph.initializer}
    for value in copy.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) < BATCH_MIN_RANK:
            shape = (f"shape {[d.dim_value or d.dim_param or '?' for d in dims]} "
                     f"(rank {len(dims)})" if value.type.tensor_type.HasField("shape")
                     else "no shape")
            raise InputError(f"{where}: --batch {batch}: input {value.name!r} has {shape}; "
                             f"only inputs of rank {BATCH_MIN_RANK} or more have a batch "
                             "dimension")
        dims[0].Clear()
        dims[0].dim_value = batch
    del copy.graph.value_info[:]
    for value in copy.graph.output:
        value.type.tensor_type.ClearField("shape")
    return copy


def add_preprocess(graph: Graph, options: CompileOptions) -> Graph:
    """For an image input type: the uint8 image as the input (under the input's name) and a
    Preprocess node making the network's float input from it."""
    if options.input_type not in IMAGE_TYPES:
        return graph
    if len(graph.inputs) != 1:
        raise InputError(f"--input-type {options.input_type}: the model has "
                         f"{len(graph.inputs)} inputs; image input types need exactly one")
    name = graph.inputs[0]
    tensor = graph.tensors[name]
    if len(tensor.shape) != 4:
        raise InputError(f"--input-type {options.input_type}: input {name!r} has shape "
                         f"{tensor.shape}; an image input needs N, C, H, W")
    n, c, h, w = tensor.shape
    spec = image_spec(options, c)
    inner = f"{name}.normalised"
    image = Tensor(name, spec.shape(n, h, w), "uint8")
    tensors = dict(graph.tensors)
    tensors[name] = image
    tensors[inner] = Tensor(inner, tensor.shape, "float32")
    renamed = [replace(node, inputs=tuple(inner if i == name else i for i in node.inputs))
               for node in graph.nodes]
    pre = Node("preprocess", "Preprocess", (name,), (inner,),
               {"input_type": spec.input_type, "mean": spec.mean, "scale": spec.scale})
    return graph.with_nodes([pre, *renamed], tensors)


def image_spec(options: CompileOptions, channels: int) -> ImageInput:
    mean = options.mean if options.mean is not None else (0.0,)
    scale = options.scale if options.scale is not None else (1.0,)
    if len(mean) == 1:
        mean = mean * channels
    if len(scale) == 1:
        scale = scale * channels
    return ImageInput(options.input_type, channels, tuple(mean), tuple(scale))


@dataclass(frozen=True)
class CalibrationSamples:
    """The calibration feeds and what they were, for the report ("4 pictures in DIR")."""

    feeds: list[dict[str, np.ndarray]]
    description: str


def calibration_samples(graph: Graph, options: CompileOptions,
                        whole: Graph | None = None) -> CalibrationSamples:
    """The calibration feeds of `graph` (see the module docstring); `whole`, when given,
    is the compiled graph of which `graph` is one frame: arrays are read in its input
    shapes and each split into its frames."""
    if options.calib_dir is not None:
        return _read_samples(graph, options.calib_dir, options, whole)
    rng = np.random.default_rng(options.seed)
    samples = []
    for _ in range(options.calib_random):
        feed = {}
        for name in graph.inputs:
            t = graph.tensors[name]
            if t.dtype == "uint8":
                feed[name] = rng.integers(0, 256, size=t.shape, dtype=np.uint8)
            else:
                feed[name] = rng.standard_normal(t.shape).astype(t.dtype)
        samples.append(feed)
    return CalibrationSamples(samples, f"{len(samples)} random samples, seed {options.seed}")


def _read_samples(graph: Graph, folder: Path, options: CompileOptions,
                  whole: Graph | None) -> CalibrationSamples:
    if not folder.is_dir():
        raise InputError(f"--calib-dir {folder}: not a folder")
    arrays = sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".npz"))
    pictures = sorted(p for p in folder.iterdir()
                      if p.suffix.lower() in imagefiles.PICTURE_SUFFIXES)
    if arrays and pictures:
        raise InputError(f"--calib-dir {folder}: holds both arrays ({arrays[0].name}) and "
                         f"pictures ({pictures[0].name}); give one kind")
    if pictures:
        return CalibrationSamples([picture_sample(graph, path, options) for path in pictures],
                                  f"{len(pictures)} pictures in {folder}")
    if not arrays:
        raise InputError(f"--calib-dir {folder}: no .npy, .npz or picture files in it "
                         f"({', '.join(imagefiles.PICTURE_SUFFIXES)})")
    samples = []
    for path in arrays:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from None
        feeds = reference.read_feeds(whole or graph, data, str(path))
        samples.extend(_frames(feeds) if whole is not None else [feeds])
    return CalibrationSamples(samples, f"{len(arrays)} arrays in {folder}")


def _frames(feeds: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """One run's feeds as the feeds of each of its frames (dimension 0 of every input)."""
    count = len(next(iter(feeds.values())))
    return [{name: value[i:i + 1] for name, value in feeds.items()} for i in range(count)]


PICTURE_SCALE = 1.0 / 255.0  # a float input's default from pictures: pixels in [0, 1]
_GREY_WEIGHTS = (299, 587, 114)  # BT.601 luma, in thousandths


def picture_sample(graph: Graph, path: Path, options: CompileOptions) -> dict[str, np.ndarray]:
    """A picture as the model's one input (see the module docstring): resized to the
    input's H x W (`imagefiles.fit`), every frame of a batch the same picture."""
    if len(graph.inputs) != 1:
        raise InputError(f"{path}: a picture calibrates a model of one input; this one has "
                         f"{len(graph.inputs)}")
    name = graph.inputs[0]
    shape = graph.tensors[name].shape
    image_type = options.input_type in IMAGE_TYPES
    if options.input_type in ("nv12", "yuv444"):
        raise InputError(f"{path}: pictures calibrate featuremap, rgb, bgr and gray inputs; "
                         f"give {options.input_type} samples as .npy files")
    channels = shape[3] if image_type else (shape[1] if len(shape) == 4 else 0)
    if len(shape) != 4 or channels not in (1, 3):
        raise InputError(f"{path}: a picture needs an N x C x H x W input of 1 or 3 channels; "
                         f"{name!r} is {shape}")
    height, width = (shape[1], shape[2]) if image_type else (shape[2], shape[3])
    pixels = imagefiles.fit(imagefiles.read_picture(path), height, width)
    if channels == 1 and pixels.shape[2] == 3:
        pixels = (pixels @ np.array(_GREY_WEIGHTS, np.float64) / 1000.0)[:, :, None]
    elif channels == 3 and pixels.shape[2] == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    if options.input_type == "bgr":
        pixels = pixels[:, :, ::-1]
    if image_type:
        frame = np.clip(np.floor(pixels + 0.5), 0, 255).astype(np.uint8)
        return {name: np.broadcast_to(frame, shape).copy()}
    mean = np.array(options.mean if options.mean is not None else (0.0,), np.float64)
    scale = np.array(options.scale if options.scale is not None else (PICTURE_SCALE,),
                     np.float64)
    planes = ((pixels - mean) * scale).transpose(2, 0, 1)
    return {name: np.broadcast_to(planes.astype(graph.tensors[name].dtype), shape).copy()}


def compile_model(source: onnx.ModelProto | str | Path, name: str, options: CompileOptions,
                  soc: SocConfig, progress: Progress | None = None) -> CompiledModel:
    """Compile one ONNX model for the hardware `soc` (see the module docstring)."""
    where = str(source) if isinstance(source, (str, Path)) else name
    say = progress or (lambda step: None)
    say(f"{name}: import")
    model = source if isinstance(source, onnx.ModelProto) else importer.read_model(source, where)
    key = _cache_key(model, options)
    compiled = _cached(key, name, where) if key is not None else None
    if compiled is not None:
        say(f"{name}: compiled before (model cache)")
    else:
        compiled = _compile(model, name, where, options, say)
        if key is not None:
            _keep(key, compiled, where)
    return cut(compiled, options.max_time_per_fc_us, soc)


def _compile(model: onnx.ModelProto, name: str, where: str, options: CompileOptions,
             say: Progress) -> CompiledModel:
    """Steps 1 to 5 (see the module docstring): the model before its function-call cut."""
    exported = model
    if options.batch is not None:
        model = rebatch(model, options.batch, where)
    notes: list[str] = []
    graph, segments = _placed(model, notes, where, options)
    frame, frame_segments = _frame_graph(exported, graph, segments, where, options)
    say(f"{name}: calibrate")
    samples = calibration_samples(frame, options, None if frame is graph else graph)
    calibration = quantize.calibrate(frame, frame_segments, samples.feeds,
                                     method=options.calib_method,
                                     percentile=options.calib_percentile,
                                     keep_outputs=ACCURACY_SAMPLES)
    say(f"{name}: quantise")
    int32 = [name for name in graph.outputs if options.output_type(name) == "int32"]
    quant = quantize.quantize(graph, segments, calibration, int16=options.int16,
                              int32_outputs=int32)
    checked_model = quant if frame is graph else \
        quantize.quantize(frame, frame_segments, calibration, int16=options.int16,
                          int32_outputs=int32)
    say(f"{name}: check accuracy")
    checked = samples.feeds[:ACCURACY_SAMPLES]
    accuracy = {k: float(v) for k, v in quantize.accuracy(
        checked_model, checked, calibration.float_outputs).items()}
    uncut = replace(options, max_time_per_fc_us=0.0)  # the cut is the last step
    return CompiledModel(name, graph, segments, quant, {}, uncut.as_meta(samples.description),
                         accuracy, notes)


def _placed(model: onnx.ModelProto, notes: list[str], where: str, options: CompileOptions
            ) -> tuple[Graph, list[Segment]]:
    """Steps 2 to 4 (see the module docstring): the graph and its segments."""
    graph = importer.compile_graph(importer.load(model, notes, where))
    graph = add_preprocess(graph, options)
    segments = placement.place(graph, dsp_softmax=options.dsp_softmax)
    return graph, _dequantized(graph, segments, options)


def _dequantized(graph: Graph, segments: list[Segment], options: CompileOptions
                 ) -> list[Segment]:
    """`segments` with the dequantize segment holding only the float outputs (as J5's
    toolchain removing the Dequantize nodes of the others); InputError for an output type
    naming no output, or asking a type other than float of an output the BPU does not
    write."""
    made = {t for s in segments if s.kind == "bpu" for t in s.outputs}
    for name, kind in options.output_types:
        if name not in graph.outputs:
            raise InputError(f"--output-type {name}={kind}: the model has no output {name} "
                             f"(its outputs: {', '.join(graph.outputs)})")
        if kind != "float" and name not in made:
            raise InputError(f"--output-type {name}={kind}: {name} is not written by the "
                             "BPU, so it is float")
    kept = []
    for segment in segments:
        if segment.kind == "dequantize":
            floats = tuple(t for t in segment.outputs if options.output_type(t) == "float")
            if not floats:
                continue
            segment = replace(segment, inputs=floats, outputs=floats)
        kept.append(segment)
    return kept


def _frame_graph(exported: onnx.ModelProto, graph: Graph, segments: list[Segment],
                 where: str, options: CompileOptions) -> tuple[Graph, list[Segment]]:
    """The graph and segments that calibration and the accuracy check run (see
    "Calibration samples" in the module docstring): the model as exported when that takes
    one frame and `--batch` made `graph` take more, else `graph` itself."""
    if options.batch is None or options.batch == 1:
        return graph, segments
    single = _placed(exported, [], where, options)
    if any(batch_of(single[0].tensors[name].shape) != 1 for name in single[0].inputs):
        return graph, segments
    if [(s.kind, s.nodes) for s in single[1]] != [(s.kind, s.nodes) for s in segments]:
        return graph, segments
    return single


def _cache_key(model: onnx.ModelProto, options: CompileOptions) -> str | None:
    """The model cache's key for compiling `model` with `options`: everything steps 1 to 5
    read (modelcache.py). Not where the model was read from: that names the model in
    messages and at the start of its notes only, and `_keep` and `_cached` move notes from
    one place to another, so the same bytes compiled from another folder find the entry.
    None, so the model compiles uncached, when that is not all in hand: weights left in
    external files (refused by the import), or a calibration folder that cannot be read
    (the compile then says why)."""
    if importer.external_initializers(model):
        return None
    calibration = b""
    if options.calib_dir is not None:
        found = modelcache.folder_digest(options.calib_dir)
        if found is None:
            return None
        calibration = found
    uncut = replace(options, max_time_per_fc_us=0.0)
    data = model.SerializeToString(deterministic=True)
    return modelcache.key(f"model file format {modelfile.FORMAT_VERSION}".encode(), data,
                          repr(uncut).encode(), calibration)


def _keep(key: str, model: CompiledModel, where: str) -> None:
    """Store `model`, read from `where`, in the model cache under `key`, its notes without
    the `where: ` each begins with (`_cached` puts the reader's back); nothing when a note
    does not begin so, or a file cannot hold the model (an array of a dtype the format
    lacks: then `save` refuses it too, in one line)."""
    from emu import __version__
    prefix = f"{where}: "
    if not all(note.startswith(prefix) for note in model.notes):
        return
    unplaced = replace(model, notes=[note.removeprefix(prefix) for note in model.notes])
    try:
        data = modelfile.dumps([unplaced.to_packed(elide=False)], __version__)
    except modelfile.ModelFileError:
        return
    modelcache.store(key, data)


def _cached(key: str, name: str, where: str) -> CompiledModel | None:
    """The model `modelcache` holds under `key`, named `name`, its notes naming `where`
    (see `_keep`), or None (see modelcache)."""
    data = modelcache.load(key)
    if data is None:
        return None
    try:
        packed = modelfile.loads(data, "model cache entry")
        if len(packed) != 1:
            return None
        found = CompiledModel.from_packed(packed[0], "model cache entry")
    except InputError:  # damaged or of another format: compiled again and replaced
        return None
    return replace(found, name=name, notes=[f"{where}: {note}" for note in found.notes])


def cut(model: CompiledModel, max_time_per_fc_us: float, soc: SocConfig) -> CompiledModel:
    """`model` with each BPU subgraph cut into function calls of at most
    `max_time_per_fc_us` of estimated time on `soc` (step 6; 0: no limit)."""
    limit_ps = round(max_time_per_fc_us * PS_PER_US)
    resident = model.weights_resident(soc)
    calls = {index: timing.split_function_calls(groups, soc.bpu, soc.ddr, limit_ps, resident)
             for index, groups in model.subgraphs().items()}
    return replace(model, function_calls=calls,
                   options={**model.options, "max_time_per_fc_us": max_time_per_fc_us})


# --- files ---------------------------------------------------------------------------------

def dumps(models: Sequence[CompiledModel]) -> bytes:
    from emu import __version__
    return modelfile.dumps([m.to_packed() for m in models], __version__)


def load_file(path: str | Path) -> list[CompiledModel]:
    """Every model of a compiled-model file, or one clear InputError."""
    where = str(path)
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise InputError(f"{where}: is a folder, not a model file") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot read: {exc.strerror}") from None
    return load_bytes(data, where)


def load_bytes(data: bytes, where: str) -> list[CompiledModel]:
    """Every model of a compiled-model file's bytes (`where` names them in errors)."""
    return [CompiledModel.from_packed(p, where) for p in modelfile.loads(data, where)]


def pick(models: Sequence[CompiledModel], name: str | None, where: str) -> CompiledModel:
    """The model called `name` (or the only one)."""
    if name is None:
        if len(models) != 1:
            raise InputError(f"{where} packs {len(models)} models "
                             f"({', '.join(m.name for m in models)}): say which with "
                             "--model-name")
        return models[0]
    for model in models:
        if model.name == name:
            return model
    raise InputError(f"--model-name {name}: {where} has {', '.join(m.name for m in models)}")

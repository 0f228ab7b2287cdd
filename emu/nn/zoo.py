"""A zoo of neural networks built on the spot as ONNX models: nothing is downloaded.

Every network is written node by node with `onnx.helper` (opset 13, NCHW, float32) at any
input size and batch the topology allows, with weights drawn from a NumPy generator seeded
by the seed and the network's name, so the same name, input size, batch and seed give a
byte-identical file (and the weights do not depend on the input size or the batch).

The weights are not trained but have the scale of trained ones: He-normal convolutions and
fully connected layers, BatchNormalization with gamma near 1 and beta near 0, and running
statistics as training would leave them: a float run of the network (the float reference,
`emu/nn/reference.py`) on one standard-normal input (`_calibrate_batchnorm`, at 4 times
the network's stride and at least 64 pixels a side, padding circularly so the small input
behaves like the inside of a large one) scales each layer's running mean and variance
(drawn near 0 and 1) to what reaches it. So the activations keep a mean square near 1
through any depth, as a quantiser calibrating on them needs; onnxruntime's outputs are
finite and vary with the input. BatchNormalization nodes stay in the graph (the compiler
folds them); ReLU6 is `Clip(0, 6)`, SiLU is `x * Sigmoid(x)`, h-swish is
`x * HardSigmoid(x)` with PyTorch's alpha 1/6 and beta 0.5 (what torch.onnx writes below
opset 14: the zoo keeps its one opset, 13, which has no HardSwish op, and so one
hard-sigmoid serves both h-swish and the squeeze-excitation gate), bilinear upsampling is
Resize mode "linear" with coordinate mode "half_pixel" (PyTorch's align_corners=False) and
the output size given as `sizes`.

The networks (`entries()`; `emu zoo list` shows their inputs, outputs, weights and MACs):

- `resnet18`, `resnet50`: torchvision's ResNet v1.5 (BasicBlock / Bottleneck with the
  stride on the 3x3 conv), 1000 classes; 224x224.
- `se_resnet50`: SE-ResNet-50 (Hu et al. 2018): ResNet-50 with a squeeze-excitation
  (GlobalAveragePool, 1x1 conv to channels / 16, ReLU, 1x1 conv back, Sigmoid, Mul of the
  [N, C, 1, 1] gate with the map) on each residual branch before the Add; the stride on
  the first 1x1 of a bottleneck, as in SENet's released models and the paper's 3.87
  GFLOPs; 1000 classes; 224x224.
- `mobilenetv1` (depthwise-separable convolutions, ReLU), `mobilenetv2` (inverted
  residuals, linear bottlenecks, ReLU6), `efficientnet_lite0` (MBConv without
  squeeze-excitation, ReLU6, stem and head not scaled), 1000 classes; 224x224.
- `mobilenetv3_large`: MobileNetV3-Large 1.0 (Howard et al. 2019, table 1): 15 inverted
  residuals with 3x3 and 5x5 depthwise convs, ReLU in the first six and h-swish after,
  squeeze-excitation in eight (to a quarter of the expanded channels rounded to 8,
  HardSigmoid gate), the 1x1 to 960, global average pool, 1x1 conv to 1280 with a bias
  and h-swish (no BatchNormalization), FC; 1000 classes; 224x224.
- `yolov8n`, `yolov8s`: the Ultralytics YOLOv8 detector (Conv-BN-SiLU, C2f, SPPF, nearest
  Resize, Concat, PAN neck) with the n (width 0.25, depth 0.33) and s (0.50, 0.33)
  multipliers; the outputs are the six raw head tensors, box (4 x 16 DFL bins) and class
  (80) logits at strides 8, 16 and 32, without DFL decoding, sigmoid or NMS (the J5
  deployment's "6 outputs, DFL removed"); 640x640.
- `yolov5s`: the Ultralytics YOLOv5 v6.x detector, s (width 0.50, depth 0.33): 6x6 stride-2
  stem, C3 blocks (two 1x1 branches, bottlenecks of 1x1 and 3x3, Concat, 1x1), SPPF,
  nearest Resize, Concat, PAN neck; the outputs are the three raw Detect 1x1 convs, 3
  anchors x (4 box + objectness + 80 classes) = 255 channels at strides 8, 16 and 32,
  with Ultralytics' bias priors, without sigmoid or decoding; 640x640.
- `unet`: the classic UNet (two 3x3 Conv-BN-ReLU per level, 64 to 1024 channels, MaxPool
  down, 2x2 ConvTranspose up, skip Concat) with 19 Cityscapes-style classes; 256x256.
- `deeplabv3`: DeepLabV3 (Chen et al. 2017) on ResNet-50 at output stride 16 (the last
  stage at stride 1 with its 3x3 convs dilated by 2, as torchvision's
  replace_stride_with_dilation): ASPP of a 1x1, three 3x3 convs dilated 6, 12 and 18 and
  image pooling (GlobalAveragePool, 1x1, BN, ReLU, bilinear Resize back), Concat, 1x1
  projection, 1x1 classifier to 21 PASCAL VOC classes, bilinear Resize to the input size.
  That is the paper's head; torchvision's adds a 3x3 conv after the projection and an
  auxiliary FCN head, which this leaves out. 512x512; any side from 16 (the Resize sizes
  follow the input).
- `centerpoint_pillars`: CenterPoint-PointPillars' network after the pillar scatter: the
  BEV pseudo-image (64 channels, 512x512: nuScenes at 0.2 m pillars over 102.4 m) through
  the three-stride 2-D backbone (3, 5, 5 convs at strides 2, 4, 8), deconvolutions back to
  stride 4, Concat, the shared 3x3 conv and six task heads (nuScenes' 10 classes in 6
  groups), each with heatmap, reg, height, dim, rot and vel as separate outputs (36).
- `onnx_*`: the real network topologies the installed onnx package ships as test data
  (`onnx/backend/test/data/light/light_*.onnx`: AlexNet, DenseNet-121, Inception v1 and
  v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512, as Caffe2 exported them), with
  their weights redrawn from the seed in the same way and converted to opset 13. Their
  input is fixed at 224x224 (the files have fixed pooling and reshape sizes); the batch
  may change. They are listed only if the installed package has those files (the onnx
  1.23 wheel does; `backend/test/data/real/` there holds only download links, so it is
  not used).

Sizes: `input_size` is (H, W) of the input (for CenterPoint, of the BEV grid); each side
from the network's total stride (its smallest input) to `MAX_SIDE`, and a multiple of that
stride for the networks whose skip connections need it (YOLO 32, UNet 16, CenterPoint 8);
the batch from 1 to `MAX_BATCH`. A wrong name, size or batch raises `InputError` naming
the command-line option (`--input-size`, `--batch`).

`params` is the number of weight values in the file (BatchNormalization's four vectors
included); `macs` the multiply-accumulates of the convolutions and matrix products for the
whole batch, from the tensor shapes.

Importing this module is cheap (no numpy, no onnx): `emu list` names the zoo from it.
"""

from __future__ import annotations

import importlib.util
import math
import operator
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu import __version__
from emu.errors import InputError
from emu.registry import Registry

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from emu.nn.graph import Graph

OPSET = 13
IR_VERSION = 8  # what onnxruntime 1.17 and later read; opset 13 needs at least 7
MAX_SIDE = 4096  # pixels per side of an input
MAX_BATCH = 256
MAX_CLASSES = 100_000
_BN_EPSILON = 1e-5


@dataclass(frozen=True)
class Entry:
    """One network of the zoo."""

    name: str
    description: str
    input_size: tuple[int, int]  # the default (H, W)
    batch: int  # the default batch
    channels: int  # input channels
    stride: int  # total stride: the smallest side, and the multiple sides must be if `exact`
    exact: bool  # sides must be multiples of `stride` (skip connections must line up)
    fixed: bool  # only the default input size (a topology taken from a file)
    build: Callable[[_Net, int, int], None] | None  # writes the network into a _Net
    source: Path | None = None  # the file of a topology taken from the onnx test data
    classes: int | None = None  # classifier outputs by default; None: not a setting


_REGISTRY: Registry[str, Entry] = Registry("zoo model", lambda entry: entry.name)


def _register(entry: Entry) -> None:
    """The one way into the zoo."""
    _REGISTRY.add(entry)


def _network(name: str, description: str, input_size: tuple[int, int], stride: int,
             exact: bool = False, channels: int = 3, classes: int | None = None,
             ) -> Callable[[Callable[[_Net, int, int], None]],
                           Callable[[_Net, int, int], None]]:
    """Register the decorated builder `fn(net, height, width)` as zoo model `name`."""
    def decorate(fn: Callable[[_Net, int, int], None]) -> Callable[[_Net, int, int], None]:
        _register(Entry(name, description, input_size, 1, channels, stride, exact, False, fn,
                        classes=classes))
        return fn
    return decorate


def entries() -> list[Entry]:
    """Every network of the zoo: the built ones, then the onnx test-data topologies."""
    _register_onnx_test_models()
    return _REGISTRY.values()


def names() -> list[str]:
    return [entry.name for entry in entries()]


def entry(name: str) -> Entry:
    """The zoo model `name`, or InputError listing the names."""
    _register_onnx_test_models()
    found = _REGISTRY.get(name)
    if found is None:
        raise InputError(f"zoo model {name!r}: unknown; the zoo has {', '.join(names())}")
    return found


def check(name: str, input_size: Sequence[int] | None = None,
          batch: int | None = None, classes: int | None = None,
          ) -> tuple[Entry, tuple[int, int], int]:
    """The entry, input size and batch a build would use, or InputError saying what is
    wrong (naming the command-line option). `classes` (the classifier's outputs) is
    checked too: only the classifiers have it."""
    item = entry(name)
    if classes is not None:
        if item.classes is None:
            raise InputError(f"--classes {classes}: {name} has no classifier output setting")
        if not isinstance(classes, int) or not 1 <= classes <= MAX_CLASSES:
            raise InputError(f"--classes {classes}: expected a whole number from 1 to "
                             f"{MAX_CLASSES}")
    size = item.input_size if input_size is None else tuple(input_size)
    text = ",".join(str(s) for s in size)
    try:
        size = tuple(operator.index(s) for s in size)
    except TypeError:
        size = ()
    if len(size) != 2:
        raise InputError(f"--input-size {text}: expected two whole numbers H,W")
    try:
        batch = item.batch if batch is None else operator.index(batch)
    except TypeError:
        raise InputError(f"--batch {batch}: expected a whole number from 1 to "
                         f"{MAX_BATCH}") from None
    height, width = size
    if item.fixed and (height, width) != item.input_size:
        raise InputError(f"--input-size {text}: {name} has a fixed input of "
                         f"{item.input_size[0]},{item.input_size[1]} (its file's topology)")
    if item.exact:
        if not all(item.stride <= s <= MAX_SIDE and s % item.stride == 0 for s in size):
            raise InputError(f"--input-size {text}: {name} needs H and W multiples of "
                             f"{item.stride} (its total stride) from {item.stride} to "
                             f"{MAX_SIDE}")
    elif not all(item.stride <= s <= MAX_SIDE for s in size):
        raise InputError(f"--input-size {text}: {name} needs H and W from {item.stride} "
                         f"(its total stride) to {MAX_SIDE}")
    if not 1 <= batch <= MAX_BATCH:
        raise InputError(f"--batch {batch}: expected a whole number from 1 to {MAX_BATCH}")
    return item, (height, width), batch


def build(name: str, input_size: Sequence[int] | None = None, batch: int | None = None,
          seed: int = 0, classes: int | None = None) -> onnx.ModelProto:
    """Zoo model `name` as an ONNX model with seeded weights; `input_size` (H, W),
    `batch` and a classifier's `classes` default to the entry's."""
    item, (height, width), batch = check(name, input_size, batch, classes)
    if item.source is not None:
        return _onnx_test_model(item, batch, seed, weights=True)
    assert item.build is not None
    net = _Net(item, batch, seed, weights=False, classes=classes)
    item.build(net, height, width)
    return net.model(f"{height}x{width}", seed, _weights(item, seed, classes))


_WEIGHTS_KEPT_BYTES = 256 << 20
"""How many bytes of calibrated weights `_weights` keeps for builds to come."""
_weights_kept: OrderedDict[tuple[str, int, int | None], dict[str, np.ndarray]] = OrderedDict()
_weights_lock = threading.Lock()


def _weights(item: Entry, seed: int, classes: int | None) -> dict[str, np.ndarray]:
    """The weights of a built entry, as read-only arrays: drawn in a build at the
    calibration size, whose BatchNormalization statistics a float run on standard-normal
    data sets. They depend on neither the input size nor the batch, so the most recently
    used are kept (up to `_WEIGHTS_KEPT_BYTES`): scripts and tests build one network at
    several sizes and batches, and the calibration run is most of a build."""
    import numpy as np

    key = (item.name, seed, classes)
    with _weights_lock:
        if key in _weights_kept:
            _weights_kept.move_to_end(key)
            return _weights_kept[key]
    assert item.build is not None
    calibration = _Net(item, 1, seed, weights=True, classes=classes)
    side = max(64, _CALIBRATION_STRIDES * item.stride)
    item.build(calibration, side, side)
    data = calibration.rng.standard_normal(calibration.inputs[0][1], dtype=np.float32)
    _calibrate_batchnorm(calibration.nodes, calibration.arrays,
                         {calibration.inputs[0][0]: data}, wrap=True)
    arrays = calibration.arrays
    for array in arrays.values():
        array.setflags(write=False)
    with _weights_lock:
        _weights_kept[key] = arrays
        while len(_weights_kept) > 1 and sum(a.nbytes for kept in _weights_kept.values()
                                             for a in kept.values()) > _WEIGHTS_KEPT_BYTES:
            _weights_kept.popitem(last=False)
    return arrays


def summary(name: str, input_size: Sequence[int] | None = None,
            batch: int | None = None, classes: int | None = None) -> dict[str, Any]:
    """What `build` would make, without drawing any weight: {name, description,
    input_size, batch, inputs, outputs (each [{name, shape}]), params, macs}."""
    item, (height, width), batch = check(name, input_size, batch, classes)
    if item.source is not None:
        model = _onnx_test_model(item, batch, 0, weights=False)
        params, macs = measure(model)
        inputs = [_value_shape(v) for v in model.graph.input]
        outputs = [_value_shape(v) for v in model.graph.output]
    else:
        net = _Net(item, batch, 0, weights=False, classes=classes)
        assert item.build is not None
        item.build(net, height, width)
        params, macs = net.params, net.macs
        inputs = [{"name": n, "shape": list(s)} for n, s in net.inputs]
        outputs = [{"name": n, "shape": list(s)} for n, s in net.outputs]
    return {"name": item.name, "description": item.description,
            "input_size": [height, width], "batch": batch, "inputs": inputs,
            "outputs": outputs, "params": params, "macs": macs}


# --- counting ----------------------------------------------------------------------------

# Inputs that hold settings, not weights: not counted as parameters.
_SETTINGS = {("Clip", 1), ("Clip", 2), ("Resize", 1), ("Resize", 2), ("Resize", 3),
             ("Dropout", 1), ("Dropout", 2)}


def measure(model: onnx.ModelProto) -> tuple[int, int]:
    """(weight values, multiply-accumulates of the whole batch) of `model`, from its
    initializers and inferred shapes. Weights made by a ConstantOfShape from a constant
    shape count as weights; MACs are those of Conv, ConvTranspose, Gemm and MatMul."""
    import onnx

    from emu.nn import importer

    inferred = importer.inferred_shapes(model).graph
    shapes: dict[str, list[int]] = {}
    for value in [*inferred.input, *inferred.value_info, *inferred.output]:
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = [d.dim_value for d in dims]
    graph = model.graph
    floats: dict[str, int] = {}
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
        if init.data_type == onnx.TensorProto.FLOAT:
            floats[init.name] = math.prod(init.dims)
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.output[0] in shapes:
            floats[node.output[0]] = math.prod(shapes[node.output[0]])
    uses: dict[str, set[tuple[str, int]]] = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            uses.setdefault(name, set()).add((node.op_type, k))
    params = sum(n for name, n in floats.items()
                 if name in uses and not uses[name] <= _SETTINGS)
    macs = 0
    for node in graph.node:
        if node.op_type == "Conv":
            macs += math.prod(shapes[node.output[0]]) * math.prod(shapes[node.input[1]][1:])
        elif node.op_type == "ConvTranspose":
            macs += math.prod(shapes[node.input[0]]) * math.prod(shapes[node.input[1]][1:])
        elif node.op_type == "Gemm":
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            a_shape = shapes[node.input[0]]
            macs += math.prod(shapes[node.output[0]]) * a_shape[0 if trans_a else 1]
        elif node.op_type == "MatMul":
            macs += math.prod(shapes[node.output[0]]) * shapes[node.input[0]][-1]
    return params, macs


# The calibration run that sets the BatchNormalization statistics: one standard-normal
# input whose sides are this many times the network's stride (at least 64).
_CALIBRATION_STRIDES = 4


def _calibrate_batchnorm(nodes: Sequence[onnx.NodeProto], arrays: dict[str, np.ndarray],
                         feeds: dict[str, np.ndarray], wrap: bool) -> None:
    """Scale every BatchNormalization's running statistics (drawn near 0 and 1) to what
    reaches it, so that each hands on activations of mean square about 1 however deep the
    network is (He-normal weights alone drift: padding, pooling, SiLU, residual sums).

    `nodes` (in topological order, reading `arrays` and `feeds`) run on `feeds` in float32
    with the float reference (`reference.float_node`) up to the last BatchNormalization;
    each one's running variance is multiplied by the mean square of its input over the
    whole tensor, and its running mean by the root of it. One figure per layer rather than
    per channel: a small calibration run estimates single channels poorly, and normalising
    them to it would blow up on other inputs. With `wrap` the convolutions and pools pad
    circularly, so the small calibration input behaves like the inside of a large one (zero
    padding at 2x2 feature maps would shrink every layer's figure, and scale up every later
    layer at real sizes). `arrays` holds the initializers and is changed in place."""
    import numpy as np

    from emu.nn import reference

    ops = [node.op_type for node in nodes]
    if "BatchNormalization" not in ops:
        return
    graph = _float_graph(nodes[:len(ops) - ops[::-1].index("BatchNormalization")], arrays,
                         feeds)
    values = dict(feeds)
    for node in graph.nodes:
        ins = [None if not name else values[name] if name in values else arrays[name]
               for name in node.inputs]
        if node.op == "BatchNormalization":
            mean_square = float(np.mean(np.square(values[node.inputs[0]], dtype=np.float64)))
            arrays[node.inputs[3]] *= np.float32(math.sqrt(mean_square))
            arrays[node.inputs[4]] *= np.float32(mean_square)
        values.update(zip(node.outputs, reference.float_node(graph, node, ins, wrap=wrap),
                          strict=True))


# An initializer of at most this many values may be a setting that an output's shape
# depends on (a Reshape's shape, a Resize's scales or sizes, Split's sizes), which shape
# inference reads; of the larger ones, the weights, it needs only the shape.
_SETTING_VALUES = 16


def _float_graph(nodes: Sequence[onnx.NodeProto], arrays: dict[str, np.ndarray],
                 feeds: dict[str, np.ndarray]) -> Graph:
    """The IR (shapes inferred) of `nodes` reading `feeds` and
    `arrays`, for the float reference: the weights are inputs of their shape rather than
    initializers, so shape inference does not copy them (`float_node` is given their
    values)."""
    from onnx import helper, numpy_helper

    from emu.nn import importer

    def typed(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))

    used = {name for node in nodes for name in node.input if name in arrays}
    settings = [numpy_helper.from_array(arrays[name], name) for name in sorted(used)
                if arrays[name].size <= _SETTING_VALUES]
    weights = [typed(name, arrays[name]) for name in sorted(used)
               if arrays[name].size > _SETTING_VALUES]
    graph = helper.make_graph(
        nodes, "calibration", [typed(name, value) for name, value in feeds.items()] + weights,
        [helper.make_empty_tensor_value_info(name) for name in nodes[-1].output],
        initializer=settings)
    return importer.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                           ir_version=IR_VERSION))


def _value_shape(value: onnx.ValueInfoProto) -> dict[str, Any]:
    return {"name": value.name,
            "shape": [d.dim_value for d in value.type.tensor_type.shape.dim]}


# --- the builder -------------------------------------------------------------------------


class _Net:
    """A network being written: nodes, initializers and the shape of every tensor.

    With `weights=False` nothing is drawn or kept but the shapes, parameter count and MACs,
    so a summary of the largest network costs milliseconds."""

    def __init__(self, item: Entry, batch: int, seed: int, weights: bool,
                 classes: int | None = None) -> None:
        import numpy as np
        from onnx import helper

        self.item, self.batch, self.weights = item, batch, weights
        self.classes = item.classes if classes is None else classes
        self._np, self._helper = np, helper
        self.rng = np.random.default_rng([seed, zlib.crc32(item.name.encode())])
        self.nodes: list[onnx.NodeProto] = []
        self.arrays: dict[str, np.ndarray] = {}  # the initializers, in order
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.inputs: list[tuple[str, tuple[int, ...]]] = []
        self.outputs: list[tuple[str, tuple[int, ...]]] = []
        self.params = 0
        self.macs = 0
        self._constants: set[str] = set()

    # graph plumbing

    def input(self, name: str, channels: int, height: int, width: int) -> str:
        shape = (self.batch, channels, height, width)
        self.shapes[name] = shape
        self.inputs.append((name, shape))
        return name

    def output(self, tensor: str) -> None:
        self.outputs.append((tensor, self.shapes[tensor]))

    def _node(self, op: str, inputs: Sequence[str], name: str, shape: tuple[int, ...],
              **attrs: Any) -> str:
        if name in self.shapes:
            raise ValueError(f"tensor {name!r} is made twice")
        self.nodes.append(self._helper.make_node(op, list(inputs), [name], name=name, **attrs))
        self.shapes[name] = shape
        return name

    def _weight(self, name: str, shape: tuple[int, ...], draw: Callable[[], np.ndarray]) -> str:
        """An initializer drawn by `draw` (called only when weights are made)."""
        self.params += math.prod(shape)
        self.shapes[name] = shape
        if self.weights:
            self.arrays[name] = draw().astype(self._np.float32).reshape(shape)
        return name

    def _constant(self, name: str, values: Sequence[float] | Sequence[int], kind: str) -> str:
        """A setting (Clip bounds, Resize scales, Split sizes), made once per graph."""
        if name not in self._constants:
            self._constants.add(name)
            dtype = self._np.float32 if kind == "float" else self._np.int64
            array = self._np.array(values, dtype=dtype)
            self.arrays[name] = array.reshape(()) if kind == "float" and len(values) == 1 \
                else array
        return name

    def model(self, size: str, seed: int, arrays: dict[str, np.ndarray]) -> onnx.ModelProto:
        """The ONNX model of this graph with the weights of `arrays` (a calibrated
        build's: the weights do not depend on the input size or the batch) and its own
        settings (a Resize's output sizes do)."""
        from onnx import TensorProto, helper, numpy_helper

        def value(name: str, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))

        used = {name for node in self.nodes for name in node.input}
        initializers = {name: array for name, array in arrays.items() if name in used}
        for name in self._constants:
            initializers.setdefault(name, self.arrays[name])
        item = self.item
        graph = helper.make_graph(self.nodes, item.name,
                                  [value(n, s) for n, s in self.inputs],
                                  [value(n, s) for n, s in self.outputs],
                                  initializer=[numpy_helper.from_array(array, name)
                                               for name, array in initializers.items()])
        model = helper.make_model(graph, producer_name="emu zoo", producer_version=__version__,
                                  opset_imports=[helper.make_opsetid("", OPSET)],
                                  ir_version=IR_VERSION, doc_string=item.description)
        helper.set_model_props(model, {"emu.zoo.name": item.name, "emu.zoo.input_size": size,
                                       "emu.zoo.batch": str(self.batch),
                                       "emu.zoo.seed": str(seed)})
        return model

    # weights

    def _normal(self, shape: tuple[int, ...], std: float) -> Callable[[], np.ndarray]:
        return lambda: self.rng.standard_normal(shape, dtype=self._np.float32) * std

    def _uniform(self, shape: tuple[int, ...], low: float, high: float
                 ) -> Callable[[], np.ndarray]:
        return lambda: self.rng.uniform(low, high, shape)

    # layers

    def conv(self, x: str, cout: int, k: int, name: str, stride: int = 1,
             pad: int | None = None, groups: int = 1, gain: float = 2.0,
             bias: float | Sequence[float] | None = None, dilation: int = 1) -> str:
        """k x k convolution (taps `dilation` pixels apart; "same" padding by default);
        He-normal weights of mean square `gain` / fan-in; a bias around `bias` (one value,
        or one per output channel) if given (none otherwise, as before a
        BatchNormalization)."""
        n, cin, h, w = self.shapes[x]
        pad = dilation * (k // 2) if pad is None else pad
        span = dilation * (k - 1) + 1
        ho, wo = (h + 2 * pad - span) // stride + 1, (w + 2 * pad - span) // stride + 1
        if ho < 1 or wo < 1:
            raise InputError(f"--input-size: {self.item.name} is too small at {name}")
        fan_in = cin // groups * k * k
        inputs = [x, self._weight(f"{name}.weight", (cout, cin // groups, k, k),
                                  self._normal((cout, cin // groups, k, k),
                                               math.sqrt(gain / fan_in)))]
        if bias is not None:
            inputs.append(self._weight(f"{name}.bias", (cout,),
                                       self._normal_around((cout,), bias, 0.02)))
        self.macs += n * cout * ho * wo * fan_in
        dilations = {"dilations": [dilation, dilation]} if dilation != 1 else {}
        return self._node("Conv", inputs, name, (n, cout, ho, wo), kernel_shape=[k, k],
                          strides=[stride, stride], pads=[pad] * 4, group=groups,
                          **dilations)

    def _normal_around(self, shape: tuple[int, ...], mean: float | Sequence[float],
                       std: float) -> Callable[[], np.ndarray]:
        offset = mean if isinstance(mean, float | int) else self._np.asarray(mean, "float32")
        return lambda: offset + self.rng.standard_normal(shape, dtype=self._np.float32) * std

    def deconv(self, x: str, cout: int, k: int, name: str, gain: float = 2.0,
               bias: float | None = None) -> str:
        """ConvTranspose with kernel = stride = k (each output pixel has one tap)."""
        n, cin, h, w = self.shapes[x]
        inputs = [x, self._weight(f"{name}.weight", (cin, cout, k, k),
                                  self._normal((cin, cout, k, k), math.sqrt(gain / cin)))]
        if bias is not None:
            inputs.append(self._weight(f"{name}.bias", (cout,),
                                       self._normal_around((cout,), bias, 0.02)))
        self.macs += n * cin * h * w * cout * k * k
        return self._node("ConvTranspose", inputs, name, (n, cout, h * k, w * k),
                          kernel_shape=[k, k], strides=[k, k])

    def bn(self, x: str, name: str) -> str:
        """BatchNormalization: gamma near 1, beta near 0; the running mean near 0 and the
        running variance near 1 are scaled to the input's when the model is made
        (`_calibrate_batchnorm`)."""
        c = self.shapes[x][1]
        inputs = [x,
                  self._weight(f"{name}.weight", (c,), self._uniform((c,), 0.9, 1.1)),
                  self._weight(f"{name}.bias", (c,), self._normal((c,), 0.05)),
                  self._weight(f"{name}.running_mean", (c,), self._normal((c,), 0.05)),
                  self._weight(f"{name}.running_var", (c,), self._uniform((c,), 0.8, 1.25))]
        return self._node("BatchNormalization", inputs, name, self.shapes[x],
                          epsilon=_BN_EPSILON)

    def act(self, x: str, kind: str | None, name: str) -> str:
        if kind is None:
            return x
        if kind == "relu":
            return self._node("Relu", [x], name, self.shapes[x])
        if kind == "relu6":
            low = self._constant("const.zero", [0.0], "float")
            high = self._constant("const.six", [6.0], "float")
            return self._node("Clip", [x, low, high], name, self.shapes[x])
        if kind == "silu":
            sigmoid = self._node("Sigmoid", [x], f"{name}.sigmoid", self.shapes[x])
            return self._node("Mul", [x, sigmoid], name, self.shapes[x])
        if kind == "sigmoid":
            return self._node("Sigmoid", [x], name, self.shapes[x])
        if kind == "hardsigmoid":  # PyTorch's relu6(x + 3) / 6, not ONNX's default 0.2 x + 0.5
            return self._node("HardSigmoid", [x], name, self.shapes[x], alpha=1 / 6, beta=0.5)
        if kind == "hardswish":
            # x * HardSigmoid(x): what torch.onnx writes for Hardswish below opset 14 (the
            # zoo's opset 13 has no HardSwish op).
            gate = self.act(x, "hardsigmoid", f"{name}.hardsigmoid")
            return self._node("Mul", [x, gate], name, self.shapes[x])
        raise ValueError(f"unknown activation {kind!r}")

    def cba(self, x: str, cout: int, k: int, name: str, stride: int = 1, groups: int = 1,
            act: str | None = "relu", pad: int | None = None, dilation: int = 1) -> str:
        """Conv (no bias), BatchNormalization, activation: the block every CNN here uses."""
        y = self.conv(x, cout, k, f"{name}.conv", stride=stride, groups=groups, pad=pad,
                      dilation=dilation)
        y = self.bn(y, f"{name}.bn")
        return self.act(y, act, f"{name}.act")

    def add(self, a: str, b: str, name: str) -> str:
        assert self.shapes[a] == self.shapes[b], (name, self.shapes[a], self.shapes[b])
        return self._node("Add", [a, b], name, self.shapes[a])

    def gate(self, x: str, weights: str, name: str) -> str:
        """x * weights, the [N, C, 1, 1] weights broadcast over the map (a channel gate)."""
        n, c, _, _ = self.shapes[x]
        assert self.shapes[weights] == (n, c, 1, 1), (name, self.shapes[weights])
        return self._node("Mul", [x, weights], name, self.shapes[x])

    def concat(self, xs: Sequence[str], name: str) -> str:
        n, _, h, w = self.shapes[xs[0]]
        assert all(self.shapes[x][2:] == (h, w) for x in xs), name
        return self._node("Concat", xs, name, (n, sum(self.shapes[x][1] for x in xs), h, w),
                          axis=1)

    def split(self, x: str, parts: int, name: str) -> list[str]:
        n, c, h, w = self.shapes[x]
        sizes = self._constant(f"const.split{c // parts}x{parts}", [c // parts] * parts, "int")
        outs = [f"{name}.{k}" for k in range(parts)]
        for out in outs:
            self.shapes[out] = (n, c // parts, h, w)
        self.nodes.append(self._helper.make_node("Split", [x, sizes], outs, name=name, axis=1))
        return outs

    def maxpool(self, x: str, k: int, stride: int, pad: int, name: str) -> str:
        n, c, h, w = self.shapes[x]
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        return self._node("MaxPool", [x], name, (n, c, ho, wo), kernel_shape=[k, k],
                          strides=[stride, stride], pads=[pad] * 4)

    def resize_linear(self, x: str, height: int, width: int, name: str) -> str:
        """Bilinear Resize to `height` x `width`, as PyTorch's F.interpolate(size=...,
        mode="bilinear", align_corners=False) computes it: coordinate mode half_pixel
        (PyTorch writes "pytorch_half_pixel", the same for outputs longer than 1 pixel,
        which is all the zoo makes), output size given as `sizes` (exact at any input
        size, where scales would be rounded)."""
        n, c, _, _ = self.shapes[x]
        sizes = self._constant(f"const.sizes{n}x{c}x{height}x{width}",
                               [n, c, height, width], "int")
        return self._node("Resize", [x, "", "", sizes], name, (n, c, height, width),
                          mode="linear", coordinate_transformation_mode="half_pixel")

    def upsample(self, x: str, name: str) -> str:
        """2x nearest-neighbour Resize, as PyTorch's Upsample exports it."""
        n, c, h, w = self.shapes[x]
        scales = self._constant("const.scale2x", [1.0, 1.0, 2.0, 2.0], "float")
        return self._node("Resize", [x, "", scales], name, (n, c, 2 * h, 2 * w),
                          mode="nearest", coordinate_transformation_mode="asymmetric",
                          nearest_mode="floor")

    def global_pool(self, x: str, name: str) -> str:
        n, c, _, _ = self.shapes[x]
        return self._node("GlobalAveragePool", [x], name, (n, c, 1, 1))

    def classifier(self, x: str, name: str) -> str:
        """Global average pool, Flatten and a fully connected layer: the logits (as many
        as the network's `classes`)."""
        return self.fc(self.global_pool(x, f"{name}.pool"), name)

    def fc(self, pooled: str, name: str) -> str:
        """Flatten of a pooled [N, C, 1, 1] map and a fully connected layer: the logits."""
        n, c, _, _ = self.shapes[pooled]
        classes = self.classes
        assert classes is not None, f"{self.item.name} registers no classes"
        flat = self._node("Flatten", [pooled], f"{name}.flatten", (n, c), axis=1)
        weight = self._weight(f"{name}.weight", (classes, c),
                              self._normal((classes, c), math.sqrt(1.0 / c)))
        bias = self._weight(f"{name}.bias", (classes,), self._normal((classes,), 0.02))
        self.macs += n * c * classes
        return self._node("Gemm", [flat, weight, bias], "logits", (n, classes), transB=1)


# --- classifiers -------------------------------------------------------------------------


def _resnet_backbone(net: _Net, x: str, blocks: Sequence[int], bottleneck: bool,
                     se_reduction: int | None = None, stride_on_1x1: bool = False,
                     dilate_last: bool = False) -> str:
    """The ResNet stem and stages (torchvision's layer1-4) on `x`: the last feature map.

    `se_reduction`: a squeeze-excitation of channels / reduction on each residual branch
    before the Add (SE-ResNet). `stride_on_1x1`: a bottleneck strides on its first 1x1
    (the original ResNet, and SENet's Caffe models) instead of the 3x3 (v1.5).
    `dilate_last`: the last stage keeps the resolution, its 3x3 convs dilated by 2 instead
    (output stride 16, torchvision's replace_stride_with_dilation: its first block still
    at dilation 1, as the stride it replaces was)."""
    x = net.cba(x, 64, 7, "stem", stride=2)
    x = net.maxpool(x, 3, 2, 1, "stem.pool")
    cin = 64
    expansion = 4 if bottleneck else 1
    dilation = 1
    for stage, count in enumerate(blocks):
        planes = 64 * 2**stage
        stride, first_dilation = (1 if stage == 0 else 2), dilation
        if dilate_last and stage == len(blocks) - 1:
            stride, dilation = 1, dilation * 2
        for b in range(count):
            name = f"layer{stage + 1}.{b}"
            s, d = (stride, first_dilation) if b == 0 else (1, dilation)
            cout = planes * expansion
            if bottleneck:
                y = net.cba(x, planes, 1, f"{name}.1", stride=s if stride_on_1x1 else 1)
                y = net.cba(y, planes, 3, f"{name}.2", stride=1 if stride_on_1x1 else s,
                            dilation=d)
                y = net.cba(y, cout, 1, f"{name}.3", act=None)
            else:
                y = net.cba(x, planes, 3, f"{name}.1", stride=s, dilation=d)
                y = net.cba(y, cout, 3, f"{name}.2", act=None, dilation=d)
            if se_reduction is not None:
                y = _squeeze_excite(net, y, cout // se_reduction, "sigmoid", f"{name}.se")
            if s != 1 or cin != cout:
                x = net.cba(x, cout, 1, f"{name}.downsample", stride=s, act=None)
            x = net.act(net.add(x, y, f"{name}.add"), "relu", f"{name}.relu")
            cin = cout
    return x


def _squeeze_excite(net: _Net, x: str, hidden: int, gate: str, name: str) -> str:
    """Squeeze-and-excitation (Hu et al. 2018): every channel of `x` scaled by a gate in
    [0, 1] computed from the whole map: global average pool, 1x1 conv (with bias) down to
    `hidden` channels, ReLU, 1x1 conv back, the `gate` activation (Sigmoid in SENet, hard
    sigmoid in MobileNetV3), Mul broadcasting the [N, C, 1, 1] gate over the map."""
    c = net.shapes[x][1]
    y = net.global_pool(x, f"{name}.pool")
    y = net.act(net.conv(y, hidden, 1, f"{name}.fc1", bias=0.0), "relu", f"{name}.relu")
    y = net.act(net.conv(y, c, 1, f"{name}.fc2", bias=0.0), gate, f"{name}.gate")
    return net.gate(x, y, f"{name}.scale")


def _resnet(net: _Net, height: int, width: int, blocks: Sequence[int], bottleneck: bool,
            se_reduction: int | None = None, stride_on_1x1: bool = False) -> None:
    x = _resnet_backbone(net, net.input("input", 3, height, width), blocks, bottleneck,
                         se_reduction, stride_on_1x1)
    net.output(net.classifier(x, "fc"))


@_network("resnet18", "ResNet-18 (torchvision v1.5: BasicBlocks 2-2-2-2, BN, ReLU, residual "
          "Add, global average pool, FC 1000)", (224, 224), stride=32,
          classes=1000)
def _resnet18(net: _Net, height: int, width: int) -> None:
    _resnet(net, height, width, (2, 2, 2, 2), bottleneck=False)


@_network("resnet50", "ResNet-50 (torchvision v1.5: Bottlenecks 3-4-6-3, stride on the 3x3, "
          "BN, ReLU, residual Add, global average pool, FC 1000)", (224, 224), stride=32,
          classes=1000)
def _resnet50(net: _Net, height: int, width: int) -> None:
    _resnet(net, height, width, (3, 4, 6, 3), bottleneck=True)


@_network("se_resnet50", "SE-ResNet-50 (Hu et al.: ResNet-50 Bottlenecks 3-4-6-3 striding on "
          "the first 1x1 as SENet's models do, squeeze-excitation with reduction 16 (global "
          "average pool, 1x1 conv, ReLU, 1x1 conv, Sigmoid, Mul) before each residual Add, "
          "FC 1000)", (224, 224), stride=32, classes=1000)
def _se_resnet50(net: _Net, height: int, width: int) -> None:
    _resnet(net, height, width, (3, 4, 6, 3), bottleneck=True, se_reduction=16,
            stride_on_1x1=True)


@_network("mobilenetv1", "MobileNetV1 1.0 (13 depthwise-separable 3x3 dw + 1x1 pw blocks, "
          "BN, ReLU, global average pool, FC 1000)", (224, 224), stride=32,
          classes=1000)
def _mobilenetv1(net: _Net, height: int, width: int) -> None:
    x = net.input("input", 3, height, width)
    x = net.cba(x, 32, 3, "stem", stride=2)
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5,
            (1024, 2), (1024, 1)]
    for k, (cout, stride) in enumerate(plan):
        cin = net.shapes[x][1]
        x = net.cba(x, cin, 3, f"block{k}.dw", stride=stride, groups=cin)
        x = net.cba(x, cout, 1, f"block{k}.pw")
    net.output(net.classifier(x, "fc"))


def _inverted_residual(net: _Net, x: str, cout: int, hidden: int, k: int, stride: int,
                       name: str, act: str = "relu6", se: bool = False) -> str:
    """MobileNetV2's block (EfficientNet-lite's MBConv, MobileNetV3's bneck): 1x1
    expansion to `hidden` channels (none when that is the input's), k x k depthwise,
    MobileNetV3's squeeze-excitation (to a quarter of the channels, rounded to 8, hard
    sigmoid gate) if `se`, linear 1x1 projection, identity skip where shapes allow."""
    cin = net.shapes[x][1]
    skip = stride == 1 and cin == cout
    y = x if hidden == cin else net.cba(x, hidden, 1, f"{name}.expand", act=act)
    y = net.cba(y, hidden, k, f"{name}.dw", stride=stride, groups=hidden, act=act)
    if se:
        y = _squeeze_excite(net, y, _make_divisible(hidden / 4), "hardsigmoid", f"{name}.se")
    y = net.cba(y, cout, 1, f"{name}.project", act=None)
    return net.add(x, y, f"{name}.add") if skip else y


def _make_divisible(channels: float, divisor: int = 8) -> int:
    """The MobileNets' channel rounding: to the nearest multiple of `divisor`, but never
    more than 10 % below `channels`."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


@_network("mobilenetv2", "MobileNetV2 1.0 (17 inverted residuals with linear bottlenecks, "
          "ReLU6 as Clip, 1x1 to 1280, global average pool, FC 1000)", (224, 224), stride=32,
          classes=1000)
def _mobilenetv2(net: _Net, height: int, width: int) -> None:
    x = net.input("input", 3, height, width)
    x = net.cba(x, 32, 3, "stem", stride=2, act="relu6")
    plan = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1)]
    k = 0
    for expand, cout, repeats, stride in plan:
        for r in range(repeats):
            x = _inverted_residual(net, x, cout, net.shapes[x][1] * expand, 3,
                                   stride if r == 0 else 1, f"block{k}")
            k += 1
    x = net.cba(x, 1280, 1, "head", act="relu6")
    net.output(net.classifier(x, "fc"))


@_network("efficientnet_lite0", "EfficientNet-lite0 (16 MBConv blocks with 3x3 and 5x5 "
          "depthwise convs, no squeeze-excitation, ReLU6 as Clip, 1x1 to 1280, global "
          "average pool, FC 1000)", (224, 224), stride=32,
          classes=1000)
def _efficientnet_lite0(net: _Net, height: int, width: int) -> None:
    x = net.input("input", 3, height, width)
    x = net.cba(x, 32, 3, "stem", stride=2, act="relu6")
    plan = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
            (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
    k = 0
    for expand, kernel, stride, cout, repeats in plan:
        for r in range(repeats):
            x = _inverted_residual(net, x, cout, net.shapes[x][1] * expand, kernel,
                                   stride if r == 0 else 1, f"block{k}")
            k += 1
    x = net.cba(x, 1280, 1, "head", act="relu6")
    net.output(net.classifier(x, "fc"))


# MobileNetV3-Large's bnecks (Howard et al. 2019, table 1): kernel, expanded channels,
# output channels, squeeze-excitation, activation, stride.
_MOBILENETV3_LARGE = (
    (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2),
    (3, 72, 24, False, "relu", 1), (5, 72, 40, True, "relu", 2),
    (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
    (3, 240, 80, False, "hardswish", 2), (3, 200, 80, False, "hardswish", 1),
    (3, 184, 80, False, "hardswish", 1), (3, 184, 80, False, "hardswish", 1),
    (3, 480, 112, True, "hardswish", 1), (3, 672, 112, True, "hardswish", 1),
    (5, 672, 160, True, "hardswish", 2), (5, 960, 160, True, "hardswish", 1),
    (5, 960, 160, True, "hardswish", 1))


@_network("mobilenetv3_large", "MobileNetV3-Large 1.0 (Howard et al.: 15 inverted residuals "
          "with 3x3 and 5x5 depthwise convs, squeeze-excitation with a HardSigmoid gate, "
          "ReLU and h-swish as x * HardSigmoid(x), 1x1 to 960, global average pool, 1x1 "
          "conv to 1280 with h-swish, FC 1000)", (224, 224), stride=32, classes=1000)
def _mobilenetv3_large(net: _Net, height: int, width: int) -> None:
    x = net.input("input", 3, height, width)
    x = net.cba(x, 16, 3, "stem", stride=2, act="hardswish")
    for k, (kernel, hidden, cout, se, act, stride) in enumerate(_MOBILENETV3_LARGE):
        x = _inverted_residual(net, x, cout, hidden, kernel, stride, f"block{k}", act=act,
                               se=se)
    x = net.cba(x, 960, 1, "head", act="hardswish")
    # The last stage has no BatchNormalization: a 1x1 conv with bias on the pooled map.
    x = net.conv(net.global_pool(x, "head.pool"), 1280, 1, "head.fc", bias=0.0)
    net.output(net.fc(net.act(x, "hardswish", "head.fc.act"), "fc"))


# --- YOLO --------------------------------------------------------------------------------

_YOLO_CLASSES = 80
_YOLO_REG_MAX = 16  # YOLOv8's DFL bins per box side
_YOLO_ANCHORS = 3  # anchors per cell in YOLOv5's Detect


def _yolo_scaling(width_mult: float, depth_mult: float
                  ) -> tuple[Callable[[int], int], Callable[[int], int]]:
    """Ultralytics' channel and depth scaling of a model size: make_divisible(min(c,
    1024) x width, 8) channels, max(round(n x depth), 1) repeats."""
    def channels(c: int) -> int:
        return math.ceil(min(c, 1024) * width_mult / 8) * 8

    def depth(n: int) -> int:
        return max(round(n * depth_mult), 1)

    return channels, depth


def _yolo_conv(net: _Net, x: str, c: int, k: int, name: str, stride: int = 1,
               pad: int | None = None) -> str:
    """Ultralytics' Conv: Conv-BN-SiLU."""
    return net.cba(x, c, k, name, stride=stride, act="silu", pad=pad)


def _yolo_bottleneck(net: _Net, x: str, c: int, kernels: tuple[int, int], shortcut: bool,
                     name: str) -> str:
    """Ultralytics' Bottleneck at expansion 1: two convs (1x1 then 3x3 in YOLOv5's C3,
    3x3 and 3x3 in YOLOv8's C2f), the input added back if `shortcut`."""
    y = _yolo_conv(net, x, c, kernels[0], f"{name}.cv1")
    y = _yolo_conv(net, y, c, kernels[1], f"{name}.cv2")
    return net.add(x, y, f"{name}.add") if shortcut else y


def _sppf(net: _Net, x: str, c2: int, name: str) -> str:
    """Spatial pyramid pooling, fast: 1x1 to half the channels, three chained 5x5
    MaxPools, Concat of the four, 1x1."""
    y = [_yolo_conv(net, x, net.shapes[x][1] // 2, 1, f"{name}.cv1")]
    for k in range(3):
        y.append(net.maxpool(y[-1], 5, 1, 2, f"{name}.pool{k}"))
    return _yolo_conv(net, net.concat(y, f"{name}.concat"), c2, 1, f"{name}.cv2")


def _yolov5(net: _Net, height: int, width: int, width_mult: float, depth_mult: float) -> None:
    """YOLOv5 v6.x (yolov5*.yaml): the layers are numbered as Ultralytics' model.N."""
    ch, depth = _yolo_scaling(width_mult, depth_mult)

    def c3(x: str, c2: int, n: int, shortcut: bool, name: str) -> str:
        c = c2 // 2
        y = _yolo_conv(net, x, c, 1, f"{name}.cv1")
        for k in range(n):
            y = _yolo_bottleneck(net, y, c, (1, 3), shortcut, f"{name}.m.{k}")
        z = _yolo_conv(net, x, c, 1, f"{name}.cv2")
        return _yolo_conv(net, net.concat([y, z], f"{name}.concat"), c2, 1, f"{name}.cv3")

    x = net.input("images", 3, height, width)
    x = _yolo_conv(net, x, ch(64), 6, "model.0", stride=2, pad=2)
    x = _yolo_conv(net, x, ch(128), 3, "model.1", stride=2)
    x = c3(x, ch(128), depth(3), True, "model.2")
    x = _yolo_conv(net, x, ch(256), 3, "model.3", stride=2)
    p3 = c3(x, ch(256), depth(6), True, "model.4")
    x = _yolo_conv(net, p3, ch(512), 3, "model.5", stride=2)
    p4 = c3(x, ch(512), depth(9), True, "model.6")
    x = _yolo_conv(net, p4, ch(1024), 3, "model.7", stride=2)
    x = c3(x, ch(1024), depth(3), True, "model.8")
    x = _sppf(net, x, ch(1024), "model.9")
    h5 = _yolo_conv(net, x, ch(512), 1, "model.10")
    x = net.concat([net.upsample(h5, "model.11"), p4], "model.12")
    x = c3(x, ch(512), depth(3), False, "model.13")
    h4 = _yolo_conv(net, x, ch(256), 1, "model.14")
    x = net.concat([net.upsample(h4, "model.15"), p3], "model.16")
    out3 = c3(x, ch(256), depth(3), False, "model.17")
    x = net.concat([_yolo_conv(net, out3, ch(256), 3, "model.18", stride=2), h4], "model.19")
    out4 = c3(x, ch(512), depth(3), False, "model.20")
    x = net.concat([_yolo_conv(net, out4, ch(512), 3, "model.21", stride=2), h5], "model.22")
    out5 = c3(x, ch(1024), depth(3), False, "model.23")
    for k, (level, stride) in enumerate(zip([out3, out4, out5], (8, 16, 32), strict=True)):
        # Per anchor: box (4), objectness, class logits. Ultralytics' bias priors: about 8
        # objects per 640x640 image at each level, class probability 0.6 / classes.
        anchor = [0.0] * 4 + [math.log(8 / (640 / stride) ** 2)] \
            + [math.log(0.6 / (_YOLO_CLASSES - 0.99999))] * _YOLO_CLASSES
        net.output(net.conv(level, _YOLO_ANCHORS * len(anchor), 1, f"det_p{k + 3}",
                            gain=1.0, bias=anchor * _YOLO_ANCHORS))


@_network("yolov5s", "YOLOv5s detector (Ultralytics v6.x, width 0.50, depth 0.33: "
          "Conv-BN-SiLU, 6x6 stem, C3, SPPF, nearest Resize, Concat, PAN; 3 raw Detect "
          "outputs of 3 anchors x 85 channels at strides 8/16/32, no decoding/NMS)",
          (640, 640), stride=32, exact=True)
def _yolov5s(net: _Net, height: int, width: int) -> None:
    _yolov5(net, height, width, 0.50, 0.33)


def _yolov8(net: _Net, height: int, width: int, width_mult: float, depth_mult: float) -> None:
    ch, depth = _yolo_scaling(width_mult, depth_mult)

    def conv(x: str, c: int, k: int, name: str, stride: int = 1) -> str:
        return _yolo_conv(net, x, c, k, name, stride=stride)

    def c2f(x: str, c2: int, n: int, shortcut: bool, name: str) -> str:
        c = c2 // 2
        ys = net.split(conv(x, 2 * c, 1, f"{name}.cv1"), 2, f"{name}.split")
        for k in range(n):
            ys.append(_yolo_bottleneck(net, ys[-1], c, (3, 3), shortcut, f"{name}.m{k}"))
        return conv(net.concat(ys, f"{name}.concat"), c2, 1, f"{name}.cv2")

    x = net.input("images", 3, height, width)
    x = conv(x, ch(64), 3, "model.0", stride=2)
    x = conv(x, ch(128), 3, "model.1", stride=2)
    x = c2f(x, ch(128), depth(3), True, "model.2")
    x = conv(x, ch(256), 3, "model.3", stride=2)
    p3 = c2f(x, ch(256), depth(6), True, "model.4")
    x = conv(p3, ch(512), 3, "model.5", stride=2)
    p4 = c2f(x, ch(512), depth(6), True, "model.6")
    x = conv(p4, ch(1024), 3, "model.7", stride=2)
    x = c2f(x, ch(1024), depth(3), True, "model.8")
    p5 = _sppf(net, x, ch(1024), "model.9")
    x = net.concat([net.upsample(p5, "model.10"), p4], "model.11")
    h4 = c2f(x, ch(512), depth(3), False, "model.12")
    x = net.concat([net.upsample(h4, "model.13"), p3], "model.14")
    out3 = c2f(x, ch(256), depth(3), False, "model.15")
    x = net.concat([conv(out3, ch(256), 3, "model.16", stride=2), h4], "model.17")
    out4 = c2f(x, ch(512), depth(3), False, "model.18")
    x = net.concat([conv(out4, ch(512), 3, "model.19", stride=2), p5], "model.20")
    out5 = c2f(x, ch(1024), depth(3), False, "model.21")
    levels = [out3, out4, out5]
    c_box = max(16, net.shapes[out3][1] // 4, 4 * _YOLO_REG_MAX)
    c_cls = max(net.shapes[out3][1], min(_YOLO_CLASSES, 100))
    for k, (level, stride) in enumerate(zip(levels, (8, 16, 32), strict=True)):
        name = f"model.22.cv2.{k}"
        y = conv(conv(level, c_box, 3, f"{name}.0"), c_box, 3, f"{name}.1")
        net.output(net.conv(y, 4 * _YOLO_REG_MAX, 1, f"box_p{k + 3}", gain=1.0, bias=1.0))
        name = f"model.22.cv3.{k}"
        y = conv(conv(level, c_cls, 3, f"{name}.0"), c_cls, 3, f"{name}.1")
        # Ultralytics' prior: about 5 objects per 640x640 image at each level.
        prior = math.log(5 / _YOLO_CLASSES / (640 / stride) ** 2)
        net.output(net.conv(y, _YOLO_CLASSES, 1, f"cls_p{k + 3}", gain=1.0, bias=prior))


@_network("yolov8n", "YOLOv8n detector (Ultralytics, width 0.25, depth 0.33: Conv-BN-SiLU, "
          "C2f, SPPF, nearest Resize, Concat, PAN; 6 raw head outputs, box 64 and class 80 "
          "channels at strides 8/16/32, no DFL/NMS)", (640, 640), stride=32, exact=True)
def _yolov8n(net: _Net, height: int, width: int) -> None:
    _yolov8(net, height, width, 0.25, 0.33)


@_network("yolov8s", "YOLOv8s detector (Ultralytics, width 0.50, depth 0.33: Conv-BN-SiLU, "
          "C2f, SPPF, nearest Resize, Concat, PAN; 6 raw head outputs, box 64 and class 80 "
          "channels at strides 8/16/32, no DFL/NMS)", (640, 640), stride=32, exact=True)
def _yolov8s(net: _Net, height: int, width: int) -> None:
    _yolov8(net, height, width, 0.50, 0.33)


# --- UNet --------------------------------------------------------------------------------

_UNET_CLASSES = 19


@_network("unet", "UNet segmenter (4 levels down with MaxPool, 64 to 1024 channels, two "
          "Conv-BN-ReLU per level, 2x2 ConvTranspose up, skip Concat, 1x1 to 19 classes)",
          (256, 256), stride=16, exact=True)
def _unet(net: _Net, height: int, width: int) -> None:
    def double(x: str, c: int, name: str) -> str:
        return net.cba(net.cba(x, c, 3, f"{name}.1"), c, 3, f"{name}.2")

    x = double(net.input("input", 3, height, width), 64, "inc")
    skips = []
    for level in range(4):
        skips.append(x)
        x = double(net.maxpool(x, 2, 2, 0, f"down{level + 1}.pool"), 128 * 2**level,
                   f"down{level + 1}")
    for level in range(4):
        c = net.shapes[x][1] // 2
        up = net.deconv(x, c, 2, f"up{level + 1}.deconv", gain=1.0, bias=0.0)
        x = double(net.concat([skips.pop(), up], f"up{level + 1}.concat"), c, f"up{level + 1}")
    net.output(net.conv(x, _UNET_CLASSES, 1, "logits", gain=1.0, bias=0.0))


# --- DeepLabV3 ---------------------------------------------------------------------------

_DEEPLAB_CLASSES = 21  # PASCAL VOC: 20 classes and background
_ASPP_RATES = (6, 12, 18)  # the atrous rates at output stride 16
_ASPP_CHANNELS = 256


@_network("deeplabv3", "DeepLabV3 segmenter (Chen et al. 2017, ResNet-50 backbone at output "
          "stride 16: last stage dilated by 2; ASPP of a 1x1, three 3x3 convs dilated 6/12/18 "
          "and image pooling (global average pool, 1x1, BN, ReLU, bilinear Resize back), "
          "Concat, 1x1 projection, 1x1 classifier to 21 classes, bilinear Resize to the "
          "input)", (512, 512), stride=16)
def _deeplabv3(net: _Net, height: int, width: int) -> None:
    x = net.input("input", 3, height, width)
    x = _resnet_backbone(net, x, (3, 4, 6, 3), bottleneck=True, dilate_last=True)
    _, _, h, w = net.shapes[x]
    branches = [net.cba(x, _ASPP_CHANNELS, 1, "aspp.0")]
    for k, rate in enumerate(_ASPP_RATES):
        branches.append(net.cba(x, _ASPP_CHANNELS, 3, f"aspp.{k + 1}", dilation=rate))
    # Image pooling: the global context the widest rates miss (at 32x32 features most of a
    # rate-18 kernel falls in the padding).
    pooled = net.cba(net.global_pool(x, "aspp.pool"), _ASPP_CHANNELS, 1, "aspp.4")
    branches.append(net.resize_linear(pooled, h, w, "aspp.4.resize"))
    x = net.cba(net.concat(branches, "aspp.concat"), _ASPP_CHANNELS, 1, "aspp.project")
    x = net.conv(x, _DEEPLAB_CLASSES, 1, "classifier", gain=1.0, bias=0.0)
    net.output(net.resize_linear(x, height, width, "logits"))


# --- CenterPoint -------------------------------------------------------------------------

# nuScenes' 10 classes in CenterPoint's 6 task groups (car; truck, construction vehicle;
# bus, trailer; barrier; motorcycle, bicycle; pedestrian, traffic cone).
_CENTERPOINT_TASKS = (1, 2, 2, 1, 2, 2)
_CENTERPOINT_HEADS = (("heatmap", 0), ("reg", 2), ("height", 1), ("dim", 3), ("rot", 2),
                      ("vel", 2))  # channels (0: the task's classes)


@_network("centerpoint_pillars", "CenterPoint-PointPillars backbone and head (on the "
          "64-channel BEV pseudo-image: 3 strides of 3x3 Conv-BN-ReLU (3, 5, 5 convs), "
          "back to stride 4 by Conv/ConvTranspose, Concat, shared conv, 6 task heads of "
          "heatmap, reg, height, dim, rot, vel: 36 outputs)", (512, 512), stride=8,
          exact=True, channels=64)
def _centerpoint(net: _Net, height: int, width: int) -> None:
    bev = net.input("bev", 64, height, width)
    ups = []
    x = bev
    # (convs after the strided one, channels, how the block returns to stride 4: k < 0 is
    # a conv of stride -k, k > 0 a ConvTranspose of stride k)
    for level, (convs, c, up) in enumerate([(3, 64, -2), (5, 128, -1), (5, 256, 2)]):
        name = f"rpn.block{level}"
        x = net.cba(x, c, 3, f"{name}.0", stride=2)
        for k in range(convs):
            x = net.cba(x, c, 3, f"{name}.{k + 1}")
        name = f"rpn.deblock{level}"
        if up < 0:
            y = net.conv(x, 128, -up, f"{name}.conv", stride=-up, pad=0)
        else:
            y = net.deconv(x, 128, up, f"{name}.deconv")
        ups.append(net.act(net.bn(y, f"{name}.bn"), "relu", f"{name}.act"))
    x = net.concat(ups, "rpn.concat")
    shared = net.conv(x, 64, 3, "head.shared.conv", bias=0.0)
    shared = net.act(net.bn(shared, "head.shared.bn"), "relu", "head.shared.act")
    for task, classes in enumerate(_CENTERPOINT_TASKS):
        for head, channels in _CENTERPOINT_HEADS:
            name = f"head.task{task}.{head}"
            y = net.conv(shared, 64, 3, f"{name}.0.conv", bias=0.0)
            y = net.act(net.bn(y, f"{name}.0.bn"), "relu", f"{name}.0.act")
            out = f"task{task}_{head}"
            # CenterPoint's heatmap prior: sigmoid(-2.19) = 0.1.
            y = net.conv(y, channels or classes, 3, out, gain=1.0,
                         bias=-2.19 if head == "heatmap" else 0.0)
            net.output(y)


# --- the onnx package's test-data topologies ---------------------------------------------

_ONNX_TEST_MODELS = {
    "bvlc_alexnet": "AlexNet (BVLC Caffe: 5 convs with LRN, 3 FC)",
    "densenet121": "DenseNet-121 (dense blocks of BN-ReLU-Conv with Concat)",
    "inception_v1": "Inception v1 / GoogLeNet (inception modules with Concat, LRN)",
    "inception_v2": "Inception v2 (BN-Inception: inception modules with BN and Concat)",
    "resnet50": "ResNet-50 (Caffe2's, with Sum residuals)",
    "shufflenet": "ShuffleNet (grouped 1x1 convs and channel shuffle by Reshape/Transpose)",
    "squeezenet": "SqueezeNet 1.0 (fire modules: squeeze 1x1, expand 1x1 and 3x3, Concat)",
    "vgg19": "VGG-19 (16 3x3 convs, 3 FC)",
    "zfnet512": "ZFNet-512 (5 convs with LRN, 3 FC)",
}
_onnx_test_models_seen = False


def onnx_test_data() -> Path | None:
    """The `light` folder of the installed onnx package's test data, if it is there (found
    without importing onnx)."""
    spec = importlib.util.find_spec("onnx")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "backend/test/data/light"
    return folder if folder.is_dir() else None


def _register_onnx_test_models() -> None:
    """Register every `light_*.onnx` the installed onnx package ships (once)."""
    global _onnx_test_models_seen
    if _onnx_test_models_seen:
        return
    _onnx_test_models_seen = True
    folder = onnx_test_data()
    if folder is None:
        return
    for path in sorted(folder.glob("light_*.onnx")):
        stem = path.stem.removeprefix("light_")
        what = _ONNX_TEST_MODELS.get(stem, stem)
        _register(Entry(f"onnx_{stem}", f"{what}; topology from the onnx package's test "
                        f"data ({path.name}), weights redrawn", (224, 224), 1, 3, 32, False,
                        True, None, path))


_PASS_THROUGH = {"Unsqueeze", "Squeeze", "Reshape", "Identity", "Transpose", "Flatten"}


def _onnx_test_model(item: Entry, batch: int, seed: int, weights: bool) -> onnx.ModelProto:
    """A test-data topology at `batch`, converted to opset 13, with its weights (the
    constants the file makes with ConstantOfShape, and the few it stores) drawn from `seed`
    by what uses them and its BatchNormalization statistics calibrated as `build` does;
    with `weights=False` the ConstantOfShape nodes stay (enough for `measure`)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper, version_converter

    assert item.source is not None
    model = onnx.load(str(item.source))
    graph = model.graph
    used = {name for node in graph.node for name in node.input}
    stored = {init.name for init in graph.initializer}
    _replace(graph.input, [v for v in graph.input if v.name in used and v.name not in stored])
    _replace(graph.initializer, [i for i in graph.initializer if i.name in used])
    model.ir_version = IR_VERSION
    model = version_converter.convert_version(model, OPSET)
    model.ir_version = IR_VERSION
    graph = model.graph
    (data,) = graph.input
    dims = [d.dim_value for d in data.type.tensor_type.shape.dim]
    if tuple(dims[2:]) != item.input_size:
        raise ValueError(f"{item.source}: input {dims}, expected {item.input_size}")
    if weights:
        _draw_test_model_weights(model, item, seed)
    inits = {init.name: init for init in graph.initializer}
    made = {node.output[0] for node in graph.node if node.op_type == "ConstantOfShape"}
    # The batch: the first axis of the input and outputs, and of every constant shape an
    # activation is reshaped to.
    for value in [*graph.input, *graph.output]:
        value.type.tensor_type.shape.dim[0].dim_value = batch
    for node in graph.node:
        if (node.op_type == "Reshape" and node.input[1] in inits and node.input[0] not in inits
                and node.input[0] not in made and batch != 1):
            shape = numpy_helper.to_array(inits[node.input[1]]).copy()
            if shape[0] == 1:
                shape[0] = batch
                name = f"{node.input[1]}.batch{batch}"
                if name not in inits:
                    inits[name] = numpy_helper.from_array(shape.astype(np.int64), name)
                    graph.initializer.append(inits[name])
                node.input[1] = name
    used = {name for node in graph.node for name in node.input}
    _replace(graph.initializer, [i for i in graph.initializer if i.name in used])
    del graph.value_info[:]
    model.producer_name, model.producer_version = "emu zoo", __version__
    model.doc_string = item.description
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, {"emu.zoo.name": item.name, "emu.zoo.input_size":
                                        f"{dims[2]}x{dims[3]}", "emu.zoo.batch": str(batch),
                                        "emu.zoo.seed": str(seed)})
    return model


def _draw_test_model_weights(model: onnx.ModelProto, item: Entry, seed: int) -> None:
    """Replace the weights of a test-data model (at batch 1) by seeded ones, in place."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    inits = {init.name: init for init in graph.initializer}
    made = {node.output[0]: node for node in graph.node
            if node.op_type == "ConstantOfShape" and node.input[0] in inits}
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, k))
    rng = np.random.default_rng([seed, zlib.crc32(item.name.encode())])
    arrays: dict[str, np.ndarray] = {}
    for name, init in inits.items():
        if init.data_type == onnx.TensorProto.FLOAT and name in consumers:
            arrays[name] = _draw_by_role(rng, tuple(init.dims), consumers[name], consumers)
        else:
            arrays[name] = numpy_helper.to_array(init)
    for name, node in made.items():
        shape = tuple(int(s) for s in numpy_helper.to_array(inits[node.input[0]]))
        arrays[name] = _draw_by_role(rng, shape, consumers.get(name, []), consumers)
    (data,) = graph.input
    dims = [d.dim_value for d in data.type.tensor_type.shape.dim]
    nodes = [node for node in graph.node if node.output[0] not in made]
    _calibrate_batchnorm(nodes, arrays, {data.name: rng.standard_normal(dims, dtype=np.float32)},
                         wrap=False)
    _replace(graph.node, nodes)
    used = {name for node in nodes for name in node.input}
    del graph.initializer[:]
    graph.initializer.extend(numpy_helper.from_array(array, name)
                             for name, array in arrays.items() if name in used)


def _replace(field: Any, items: Sequence[Any]) -> None:
    """Set a repeated protobuf field to `items` (copies taken first: clearing frees them)."""
    copies = [type(item)() for item in items]
    for copy, item in zip(copies, items, strict=True):
        copy.CopyFrom(item)
    del field[:]
    field.extend(copies)


def _draw_by_role(rng: np.random.Generator, shape: tuple[int, ...],
                  uses: list[tuple[onnx.NodeProto, int]],
                  consumers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> np.ndarray:
    """Weights for a tensor of a test-data model by what consumes it (`uses`, followed
    through reshapes), as `_Net` draws its own."""
    import numpy as np

    node, k = _consumer(uses, consumers)
    size = math.prod(shape)
    op = node.op_type if node is not None else ""
    if op == "Conv" and k == 1:
        values = rng.standard_normal(shape) * math.sqrt(2.0 / (size // shape[0]))
    elif op == "Gemm" and k == 1 and node is not None:
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        fan_in = shape[-1] if trans_b else size // shape[-1]  # the shape may be 4-D
        values = rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)
    elif (op == "BatchNormalization" and k in (1, 4)) or op == "Mul":  # Mul: Caffe2's Scale
        values = rng.uniform(0.9, 1.1, shape) if k != 4 else rng.uniform(0.8, 1.25, shape)
    else:  # biases, BatchNormalization's shift and running mean
        values = rng.standard_normal(shape) * 0.05
    return values.astype(np.float32)


def _consumer(uses: list[tuple[onnx.NodeProto, int]],
              consumers: dict[str, list[tuple[onnx.NodeProto, int]]]
              ) -> tuple[onnx.NodeProto | None, int]:
    """The first node (and input index) of `uses` that is not a shape-only op, followed."""
    for _ in range(8):
        if not uses:
            return None, 0
        node, k = uses[0]
        if node.op_type not in _PASS_THROUGH or k != 0:
            return node, k
        uses = consumers.get(node.output[0], [])
    return None, 0

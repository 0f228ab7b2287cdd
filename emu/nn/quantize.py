"""Post-training quantisation of a compiled graph for the BPU (issue 11).

`calibrate(graph, segments, samples, method=...)` runs the float IR graph
(`reference.run_float`'s ops) over the samples and records, for every feature map a BPU node
reads or writes, its largest magnitude over all samples, the median of its nonzero
magnitudes and, for the methods that need it, a histogram of them (`TensorStats`).
`quantize(graph, segments, calibration)` turns that into a `QuantModel`: a scale and a code
type per tensor, and int8 weights / int32 biases per layer; `emu/nn/execute.py` runs it.

Calibration pass. One run of the float graph per sample; per tensor only fixed-size figures
are kept, so memory does not grow with the samples: max|x|, the median of the sample's
nonzero |x| (one float per sample), and for `percentile` and `kl` a `Histogram` of the
nonzero |x|: HISTOGRAM_BINS (4096) equal bins over [0, top), top the smallest power of two
above every |x| so far. A sample whose largest |x| reaches top first doubles top as often
as needed, merging the counts of each pair of bins. Because top and the bin count are
powers of two, a magnitude's bin floor(|x| x 4096 / top) is computed exactly and a merged
bin holds exactly the magnitudes a histogram made over the final range would: the result
does not depend on the order of the samples, and at least half of the bins lie below
max|x|. (One pass with a growing range rather than two, max first then histograms: each
pass runs the whole network on every sample, which costs far more than the histograms.)
Exact zeros are left out of the histogram, the percentile and the median: any grid holds
them exactly, and counting them would make the clip depend on how sparse a ReLU output is.
Non-finite values are left out of the histogram too; max|x| keeps them, and `quantize`
refuses the tensor.

Methods (`method`, `emu compile --calib-method`). An int8 tensor's scale is C / 127 for a
clip C that the method chooses:
- `max`: C = max|x| over every element of every sample; nothing of the calibration data
  saturates.
- `percentile` (`percentile` P, 50 to 100, default 99.99): the P-th percentile of the
  nonzero |x| of all samples, as the upper edge of the histogram bin that holds the k-th
  smallest, k = ceil(P / 100 x count) in exact arithmetic on P as written (99.9 of 1000
  values is the 999th): above that magnitude by at most one bin (top / 4096, under
  max / 2048). With fewer than 100 / (100 - P) nonzero values that is the largest.
- `kl`: entropy calibration as TensorRT's (Migacz, "8-bit inference with TensorRT", 2017).
  For a candidate i (bins kept, C = i x top / 4096), P is the first i bins with the counts
  of every bin above added to bin i - 1 (clipped values land on the clip) and Q the same i
  bins merged into KL_LEVELS = 127 groups (the int8 steps between 0 and C; group g holds
  bins floor(g i / 127) to floor((g + 1) i / 127) - 1), each group's count spread evenly
  over its nonzero bins; C is the candidate of least KL(P || Q) = sum p log(p / q) (both
  normalised; infinite where clipped values land on an empty bin), the larger on a tie.
  The candidates run from the bin of the 99th percentile (`KL_MIN_KEPT`), or bin 127 if
  higher, to the last nonzero bin (a tensor using fewer bins keeps its max): the divergence
  compares shapes, not values, so for magnitudes in a band away from zero (a detection
  head's logits around their bias prior) a clip below the band makes P a single spike
  that Q copies exactly, and the bare minimum would clip the whole band to one value.
C is never above max|x|; a tensor that was always zero gets scale 1; symmetric, zero
point 0. Whatever the method, two kinds of tensor keep C = max|x|:
- int16 tensors (/ 32767): the int16 rule below reads max|x| and the median, not the
  clip, and a tensor is widened for the 256 times finer step, which clipping would spend;
- what the BPU hands over (the model's outputs, and every BPU segment's output that the
  CPU or a DSP reads), and the tensors those copy through code-preserving ops: a
  detector's detections and a classifier's winning logit are the rare largest values of
  their map, which a clip flattens, and the float ops after the BPU (a classifier's
  Softmax) weigh exactly those most. (Measured: the conformance suite's Inception v2 with
  weights of trained scale, calibrated by kl on its one input, has an output cosine of
  0.995 with the float model, and 0.83 when its 1000 logits, which go to Softmax on the
  CPU, are clipped too.)
`calibrate` defaults to max; `emu compile`'s default (percentile) and the measurement it
was chosen by are in emu/nn/compiler.py.

Code types (`int16`): "never" keeps every tensor int8; "always" makes every tensor int16
that the op list allows; "auto" (the default) makes a tensor int16 when its spread, max|x|
over the median of its nonzero |x| (`TensorStats.spread`: the median per sample, then the
median of those over the samples, so one bad sample in three or more does not move it),
exceeds `INT16_SPREAD` (32): then the typical value is under 127 / 32 ~ 4 int8 steps and
the int8 grid loses it. A median, not an rms, because a few outliers (a sensor glitch in
the calibration data, one hot pixel carried through the layers) inflate the rms with the
maximum, while they leave the median alone; nonzero values only, because half of a ReLU
output is zero. Normal activations have a spread of about 7 (Gaussian: 5 sigma over 0.67
sigma), so "auto" widens only tensors dominated by outliers. It does not see a tensor whose
channels differ in scale (per-tensor scales with channels of very different magnitude):
the median is then that of the large channels.
Where int16 is allowed: the kernels take it for Conv, FC, Add, Concat, pools, resize and
the code-preserving ops; tensors a LUT op (Sigmoid, Silu, HardSigmoid) reads or writes
stay int8, and so does every tensor that reaches one through code-preserving ops. So do
the inputs, outputs and inner tensors of the ops J5's list gives no int16 that emu's
kernels compute in int8 only (`INT8_KINDS`: LSTM and GridSample). The
outputs of code-preserving ops (see emu/nn/execute.py) take their input's scale and type;
every other BPU output, and every BPU segment input, has its own. Raw inputs (the uint8
image a Preprocess node reads) have no codes.

Weights (Conv, FC, ConvTranspose as its equivalent conv, and the per-channel affine maps
ScaleShift / Mul / Add by a constant as a depthwise 1x1 conv): symmetric per output
channel, w_scale[c] = max|w[c]| / 127, codes round_half_away(w / w_scale) in int8. Two
floors keep the layer executable: w_scale[c] >= |b[c]| / (in_scale x 2**30), so the int32
bias round_half_away(b / (in_scale x w_scale)) stays within 2**30 (and the kernels'
accumulator bound holds up to K = 65535), and w_scale[c] >= out_scale / in_scale x 2**-31,
so the requantisation multiplier stays in the kernels' range (weights below that floor
would move the output by less than half a code).

Wide outputs (`QuantModel.wide_outputs`): a Conv without activation or residual add whose
output leaves the BPU (a BPU segment's output that no BPU node reads, typically a detection
or classification head) hands over its int32 accumulators, bias included, instead of
requantised codes, as J5's compiler does for a convolution at the end of a subgraph
(`shared/calibration/j5_bpu.md`); with int8 input, so the accumulators provably fit in
int32 (the bias bound below). Its value is accumulator x in_scale x w_scale[c], per
output channel: the head keeps the full precision of its int8 operands instead of an int8
grid over its whole range (a class map varying by a fraction of its bias prior would keep
only a few codes of it). The tensor's QTensor still holds the int8 scale calibration gave;
its code type is "int32" (4 bytes an element for the DMA and the CPU's dequantize).

LSTM weights (`_lstm_layer`): per direction, the rows of [W x s_x | R x s_h] (the input's
scale and the direction's hidden-state scale folded in, so that the x and h codes side by
side multiply them directly; see `emu/nn/kernels_tensor.py`), quantised per row as above
with input scale 1, each gate's rows against its pre-activation scale; the bias is
Wb + Rb. The scales of the LSTM's inner tensors (gates, cell and hidden state: the hidden
state's covers initial_h and every step's h, the cell state's likewise) come from
calibration, which measures every node's `reference.intermediates`.

`QuantModel.to_arrays()` gives (meta, arrays): meta is JSON (scales as floats, which JSON
round-trips exactly), arrays the weights, biases and weight scales; `from_arrays(meta,
arrays, graph)` rebuilds the same model on the graph it was made from.

`accuracy(qmodel, samples)` is the compiler's check: the cosine similarity of each output
of the quantised model with the float graph's, flagged `low` below 0.99 (`COSINE_MIN`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from emu.errors import InputError
from emu.nn import execute, opattrs, optable, reference
from emu.nn.graph import Graph, Node
from emu.nn.placement import Accumulators, Segment, accumulators, final_convs

INT16_SPREAD = 32.0
COSINE_MIN = 0.99
CALIBRATION_METHODS = ("max", "percentile", "kl")
DEFAULT_PERCENTILE = 99.99
PERCENTILE_RANGE = (50.0, 100.0)
HISTOGRAM_BINS = 4096
KL_LEVELS = 127  # int8 codes 1 .. 127 between 0 and the clip
KL_MIN_KEPT = 99.0  # a KL clip leaves at least this percentage of the |x| unclipped
INT16_MODES = ("never", "auto", "always")
FORMAT = "emu.quantmodel/1"
CODE_MAX = {"int8": 127, "int16": 32767}
WEIGHTED = frozenset({"Conv", "FC", "ConvTranspose"})
BIAS_LIMIT = 2**30
MULTIPLIER_FLOOR = 2.0**-31
LAYER_PARTS = ("weight", "bias", "w_scales")  # the fields of Layer, in order
INT8_KINDS = frozenset({"recurrent", "sample"})  # LSTM, GridSample: no int16 in J5's list


class Histogram:
    """Counts of a tensor's nonzero magnitudes in HISTOGRAM_BINS equal bins over [0, top),
    `top` the smallest power of two above every magnitude seen (see the module)."""

    def __init__(self) -> None:
        self.counts = np.zeros(HISTOGRAM_BINS, np.int64)
        self.top = 0.0  # nothing seen yet

    @property
    def width(self) -> float:
        return self.top / HISTOGRAM_BINS

    def add(self, magnitudes: np.ndarray) -> None:
        """Count the positive finite float64 `magnitudes` (others are left out), doubling
        `top` first (merging bin pairs) while the largest is not below it."""
        magnitudes = magnitudes[np.isfinite(magnitudes) & (magnitudes > 0)]
        if not magnitudes.size:
            return
        peak = float(magnitudes.max())
        if peak >= self.top:
            top = math.ldexp(1.0, math.frexp(peak)[1])  # 2**e > peak >= 2**(e - 1)
            merged = HISTOGRAM_BINS if self.top == 0 else round(top / self.top)
            grouped = self.counts.reshape(-1, min(merged, HISTOGRAM_BINS)).sum(axis=1)
            self.counts = np.zeros(HISTOGRAM_BINS, np.int64)
            self.counts[:grouped.size] = grouped
            self.top = top
        bins = (magnitudes * (HISTOGRAM_BINS / self.top)).astype(np.int64)  # exact: 2**k
        self.counts += np.bincount(bins, minlength=HISTOGRAM_BINS)

    def percentile(self, percent: float) -> float:
        """The upper edge of the bin holding the k-th smallest magnitude, k =
        ceil(percent / 100 x count) in exact arithmetic on the percent as written (99.99 of
        10000 values is the 9999th): above that magnitude by at most a bin's width; 0 for
        an empty histogram."""
        total = int(self.counts.sum())
        if not total:
            return 0.0
        rank = max(1, math.ceil(Fraction(repr(float(percent))) * total / 100))
        return (int(np.searchsorted(np.cumsum(self.counts), rank)) + 1) * self.width

    def kl_threshold(self) -> float:
        """The clip of least KL divergence (entropy calibration; see the module)."""
        used = int(np.flatnonzero(self.counts)[-1]) + 1 if self.counts.any() else 0
        if used <= KL_LEVELS:
            return used * self.width
        least = round(self.percentile(KL_MIN_KEPT) / self.width)  # see the module
        candidates = np.arange(max(KL_LEVELS, least), used + 1)
        divergence = kl_divergences(self.counts[:used], candidates)
        best = len(divergence) - 1 - int(np.argmin(divergence[::-1]))  # ties: clip less
        return int(candidates[best]) * self.width


def kl_divergences(counts: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """KL(P || Q) for each candidate i (bins kept, KL_LEVELS <= i <= len(counts)): P the
    counts with those of bins i and above added to bin i - 1, Q bins 0 .. i - 1 merged into
    KL_LEVELS groups (group g: bins floor(g i / L) to floor((g + 1) i / L) - 1), each group's
    count spread evenly over its nonzero bins; both normalised (see the module). From
    prefix sums, so each candidate costs O(KL_LEVELS), not O(i)."""
    b = counts.astype(np.float64)
    total = float(b.sum())
    cum = np.concatenate([[0.0], np.cumsum(b)])
    nonzero = np.concatenate([[0], np.cumsum(b > 0)])
    b_log_b = np.concatenate([[0.0], np.cumsum(b * np.log(np.where(b > 0, b, 1.0)))])
    i = candidates.astype(np.int64)
    edges = np.arange(KL_LEVELS + 1)[None, :] * i[:, None] // KL_LEVELS
    group = cum[edges[:, 1:]] - cum[edges[:, :-1]]
    spread = nonzero[edges[:, 1:]] - nonzero[edges[:, :-1]]
    kept = cum[i]
    last = b[i - 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        # log q of a nonzero bin of each group (Q normalised by its sum, the kept count)
        log_q = np.where(group > 0, np.log(group / np.maximum(spread, 1)), 0.0) \
            - np.log(kept)[:, None]
        own = group.copy()
        own[:, -1] -= last  # bin i - 1 is the last group's; its term is `at_last`
        below = (b_log_b[i - 1] - (kept - last) * math.log(total)
                 - (own * log_q).sum(axis=1)) / total
        p_last = (last + total - kept) / total
        at_last = np.where(p_last > 0, p_last * (np.log(p_last) - log_q[:, -1]), 0.0)
    at_last[(last == 0) & (p_last > 0)] = np.inf  # clipped values where Q has none
    divergence = below + at_last
    divergence[kept == 0] = np.inf  # everything clipped: Q is empty
    return divergence


@dataclass(frozen=True)
class TensorStats:
    """What calibration saw of one tensor over all samples."""

    max_abs: float
    median_abs: float  # of the nonzero |x|: the median over the samples of each one's
    histogram: Histogram | None = field(default=None, compare=False)  # not for "max"

    @property
    def spread(self) -> float:
        """max|x| / median of the nonzero |x|; 0 for a tensor that was always zero."""
        return self.max_abs / self.median_abs if self.median_abs > 0 else 0.0

    def clip(self, method: str, percentile: float) -> float:
        """The largest magnitude an int8 code of this tensor stands for (see the module)."""
        if method == "max" or self.max_abs == 0 or not math.isfinite(self.max_abs):
            return self.max_abs
        if self.histogram is None:
            raise InputError(f"calibration method {method} needs histograms: calibrate "
                             f"with method={method!r}")
        found = (self.histogram.percentile(percentile) if method == "percentile"
                 else self.histogram.kl_threshold())
        return min(found, self.max_abs)


@dataclass(frozen=True)
class Calibration:
    """TensorStats of every feature map a BPU node reads or writes (and of the tensors
    inside a node, `reference.intermediates`: a residual Conv's `<output>#conv`, an LSTM's
    gates and states), from `samples` feeds, and how int8 scales are chosen from them
    (`method`, `percentile`; histograms are gathered unless "max")."""

    stats: dict[str, TensorStats]
    samples: int
    method: str = "max"
    percentile: float = DEFAULT_PERCENTILE
    float_outputs: tuple[dict[str, np.ndarray], ...] = field(default=(), compare=False,
                                                             repr=False)

    def __post_init__(self) -> None:
        check_method(self.method, self.percentile)


def check_method(method: str, percentile: float) -> None:
    """InputError unless `method` is a calibration method and `percentile` in range."""
    if method not in CALIBRATION_METHODS:
        raise InputError(f"--calib-method {method}: expected one of "
                         f"{', '.join(CALIBRATION_METHODS)}")
    low, high = PERCENTILE_RANGE
    if not (math.isfinite(percentile) and low <= percentile <= high):
        raise InputError(f"--calib-percentile {percentile}: expected {low:g} to {high:g}")


@dataclass(frozen=True)
class QTensor:
    """A tensor's codes: value = code x scale; dtype "int8" or "int16"."""

    scale: float
    dtype: str


@dataclass(frozen=True)
class Layer:
    """A weighted node's quantised parameters: int8 weight (the equivalent conv's for a
    ConvTranspose, (C, 1, 1, 1) for a per-channel affine map), int32 bias, float64 weight
    scales per output channel."""

    weight: np.ndarray
    bias: np.ndarray
    w_scales: np.ndarray


@dataclass
class QuantModel:
    """A graph quantised for the BPU: its placement, the codes of every BPU tensor, the
    quantised layers. `programs` caches the kernel objects `execute.run` builds."""

    graph: Graph
    segments: list[Segment]
    tensors: dict[str, QTensor]
    layers: dict[str, Layer]
    int16: str = "auto"
    int32_outputs: tuple[str, ...] = ()  # outputs handed over as accumulators on request
    programs: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)
    _wide: dict[str, Node] | None = field(default=None, compare=False, repr=False)
    _axes: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def tensor_dtypes(self) -> dict[str, str]:
        """Tensor name -> code type ("int8", "int16", or "int32" for a wide output) of
        every tensor with codes."""
        wide = self.wide_outputs()
        return {name: "int32" if name in wide else t.dtype for name, t in self.tensors.items()}

    def wide_outputs(self) -> dict[str, Node]:
        """The tensors the BPU hands over as a final Conv's int32 accumulators (see the
        module), each with the Conv that writes it (worked out once): those of
        `final_convs`, and for each of `int32_outputs` the Conv's or FC's output and the
        layout ops' tensors on the way to it (`placement.accumulators`)."""
        if self._wide is not None:
            return self._wide
        wide = dict(final_convs(self.graph, self.segments))
        self._axes = dict.fromkeys(wide, 1)
        for name in self.int32_outputs:
            found = accumulators(self.graph, self.segments, name)
            if isinstance(found, Accumulators):
                wide.update(dict.fromkeys(found.axes, found.source))
                self._axes.update(found.axes)
        self._wide = {out: node for out, node in wide.items() if node.name in self.layers
                      and self.tensors[node.inputs[0]].dtype == "int8"}
        return self._wide

    def wide_axis(self, name: str) -> int:
        """The axis of wide tensor `name` along the output channels of its Conv."""
        self.wide_outputs()
        return self._axes[name]

    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able meta, named arrays) that `from_arrays` turns back into this model. The
        array keys are `quant.layer.<k>.<part>` for the k-th name of meta["layers"]."""
        names = sorted(self.layers)
        meta = {
            "format": FORMAT,
            "int16": self.int16,
            "int32_outputs": list(self.int32_outputs),
            "segments": [{"kind": s.kind, "nodes": list(s.nodes), "inputs": list(s.inputs),
                          "outputs": list(s.outputs), "reasons": list(s.reasons)}
                         for s in self.segments],
            "tensors": {name: [t.scale, t.dtype] for name, t in self.tensors.items()},
            "layers": names,
        }
        arrays = {_array_key(k, part): getattr(self.layers[name], part)
                  for k, name in enumerate(names) for part in LAYER_PARTS}
        return meta, arrays

    @classmethod
    def from_arrays(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray],
                    graph: Graph) -> QuantModel:
        """The model `to_arrays` described, on `graph` (the graph it was quantised from)."""
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise InputError(f"quantised model: not a {FORMAT} description")
        try:
            segments = [Segment(s["kind"], tuple(s["nodes"]), tuple(s["inputs"]),
                                tuple(s["outputs"]), tuple(s["reasons"]))
                        for s in meta["segments"]]
            tensors = {name: QTensor(float(scale), str(dtype))
                       for name, (scale, dtype) in meta["tensors"].items()}
            layers = {name: Layer(*(arrays[_array_key(k, part)] for part in LAYER_PARTS))
                      for k, name in enumerate(meta["layers"])}
            int32_outputs = tuple(meta.get("int32_outputs", ()))
            if not all(isinstance(name, str) for name in int32_outputs):
                raise TypeError("int32_outputs holds a non-string")
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"quantised model: malformed description ({error!r})") from None
        known = {n.name for n in graph.nodes}
        stray = [name for s in segments for name in s.nodes if name not in known]
        if stray:
            raise InputError(f"quantised model: node {stray[0]!r} is not in the graph")
        return cls(graph, segments, tensors, layers, str(meta["int16"]), int32_outputs)


def _array_key(index: int, part: str) -> str:
    return f"quant.layer.{index}.{part}"


# ---------------------------------------------------------------------------------------
# Calibration


def bpu_nodes(graph: Graph, segments: Sequence[Segment]) -> list[Node]:
    """The graph's nodes that BPU segments run, in graph order."""
    names = {name for s in segments if s.kind == "bpu" for name in s.nodes}
    return [n for n in graph.nodes if n.name in names]


def calibrate(graph: Graph, segments: Sequence[Segment],
              samples: Sequence[dict[str, np.ndarray]], *, method: str = "max",
              percentile: float = DEFAULT_PERCENTILE, keep_outputs: int = 0) -> Calibration:
    """Max-abs and median magnitude of every BPU feature map over the samples, and for
    `method` percentile or kl the histogram of its magnitudes (see the module). The float
    graph outputs of the first `keep_outputs` samples are kept (`Calibration.float_outputs`,
    what `reference.run_float` gives) for the accuracy check, which then need not run the
    float graph again."""
    check_method(method, percentile)
    if not samples:
        raise InputError("calibration needs at least one sample")
    watched: set[str] = set()
    inner = set()
    for node in bpu_nodes(graph, segments):
        watched.update(n for n in (*node.inputs, *node.outputs) if n and not graph.is_const(n))
        if reference.intermediates(graph, node):
            inner.add(node.name)
    needed = _feeding(graph, watched)
    peak: dict[str, float] = {}
    medians: dict[str, list[float]] = {}
    histograms: dict[str, Histogram] = {}

    def observe(name: str, value: np.ndarray) -> None:
        magnitude = np.abs(value[value != 0].astype(np.float64))
        if magnitude.size:
            peak[name] = max(peak.get(name, 0.0), float(magnitude.max()))
            medians.setdefault(name, []).append(float(np.median(magnitude)))
        else:
            peak.setdefault(name, 0.0)
        if method != "max":
            histograms.setdefault(name, Histogram()).add(magnitude)

    kept: list[dict[str, np.ndarray]] = []
    for index, feeds in enumerate(samples):
        values = reference.check_feeds(graph, feeds)
        whole = index < keep_outputs  # the CPU tail too, for the graph's outputs
        for name in graph.inputs:
            if name in watched:
                observe(name, values[name])
        for node in graph.nodes:
            if not whole and node.name not in needed:
                continue
            ins = reference.node_inputs(graph, node, values)
            values.update(zip(node.outputs, reference.float_node(graph, node, ins), strict=True))
            if node.name in inner:
                for name, value in reference.intermediate_values(graph, node, ins).items():
                    observe(name, value)
            for name in node.outputs:
                if name in watched:
                    observe(name, values[name])
        if whole:
            values.update(reference.constant_outputs(graph))
            kept.append({name: values[name] for name in graph.outputs})
    stats = {name: TensorStats(peak[name], float(np.median(medians.get(name, [0.0]))),
                               histograms.get(name))
             for name in peak}
    return Calibration(stats, len(samples), method, percentile, tuple(kept))


def _feeding(graph: Graph, tensors: set[str]) -> set[str]:
    """The names of the nodes whose outputs `tensors` depend on: the only ones a
    calibration run computes (a CPU tail after the last BPU layer, or a whole model with no
    BPU layer, is never run)."""
    producers = graph.producers()
    found: set[str] = set()
    pending = list(tensors)
    while pending:
        node = producers.get(pending.pop())
        if node is not None and node.name not in found:
            found.add(node.name)
            pending.extend(n for n in node.inputs if n)
    return found


# ---------------------------------------------------------------------------------------
# Quantisation


def _copied(graph: Graph, names: Sequence[str]) -> set[str]:
    """`names` and every tensor they copy through code-preserving ops (which share codes)."""
    producers = graph.producers()
    found: set[str] = set()
    for name in names:
        while name not in found:
            found.add(name)
            source = producers.get(name)
            if source is None or not execute.code_preserving(source):
                break
            name = source.inputs[0]
    return found


def _int8_only(graph: Graph, nodes: Sequence[Node]) -> set[str]:
    """Tensors LUT ops read or write, and those of the ops J5's list gives no int16 (LSTM,
    GridSample: their inputs, outputs and inner tensors), inputs followed back through
    code-preserving ops."""
    pinned: set[str] = set()
    reads: list[str] = []
    for node in nodes:
        if execute.is_lut(node):
            reads.append(node.inputs[0])
        elif optable.kind(node.op) in INT8_KINDS:
            reads.extend(n for n in node.inputs if n and not graph.is_const(n))
            pinned.update(reference.intermediates(graph, node))
        else:
            continue
        pinned.update(n for n in node.outputs if n)
    return pinned | _copied(graph, reads)


def _own_tensor(calibration: Calibration, name: str, int16: str, int8_only: set[str],
                unclipped: set[str]) -> QTensor:
    stats = calibration.stats.get(name)
    if stats is None:
        raise InputError(f"quantize: no calibration data for tensor {name!r}")
    if not math.isfinite(stats.max_abs):
        raise InputError(f"quantize: tensor {name!r} takes non-finite values in the "
                         "calibration data, which integer codes cannot hold")
    wide = name not in int8_only and (
        int16 == "always" or (int16 == "auto" and stats.spread > INT16_SPREAD))
    dtype = "int16" if wide else "int8"
    if wide or name in unclipped:
        clip = stats.max_abs
    else:
        clip = stats.clip(calibration.method, calibration.percentile)
    scale = clip / CODE_MAX[dtype] if clip > 0 else 1.0
    return QTensor(scale, dtype)


def quantize_weights(weight: np.ndarray, bias: np.ndarray | None, in_scale: float,
                     out_scale: float) -> Layer:
    """int8 per-output-channel weights and the int32 bias (see the module's floors)."""
    w = np.asarray(weight, np.float64)
    channels = w.shape[0]
    b = np.zeros(channels) if bias is None else np.asarray(bias, np.float64).reshape(channels)
    peak = np.abs(w.reshape(channels, -1)).max(axis=1)
    w_scales = np.maximum.reduce([peak / 127.0, np.abs(b) / (in_scale * BIAS_LIMIT),
                                  np.full(channels, out_scale / in_scale * MULTIPLIER_FLOOR)])
    view = (-1,) + (1,) * (w.ndim - 1)
    codes = np.clip(execute.round_half_away(w / w_scales.reshape(view)), -127, 127)
    bias_codes = execute.round_half_away(b / (in_scale * w_scales))
    return Layer(codes.astype(np.int8), bias_codes.astype(np.int32), w_scales)


def quantize(graph: Graph, segments: Sequence[Segment], calibration: Calibration, *,
             int16: str = "auto", int32_outputs: Sequence[str] = ()) -> QuantModel:
    """The QuantModel of `graph` placed as `segments`, scales from `calibration`;
    `int32_outputs` are handed over as their Conv's int32 accumulators (the Conv's input
    then stays int8, whatever `int16` says), or InputError says why one cannot be."""
    if int16 not in INT16_MODES:
        raise InputError(f"int16 must be one of {', '.join(INT16_MODES)}, got {int16!r}")
    nodes = bpu_nodes(graph, segments)
    pinned = _int8_only(graph, nodes)
    for name in int32_outputs:
        found = accumulators(graph, list(segments), name)
        if not isinstance(found, Accumulators):
            raise InputError(f"output {name} as int32 accumulators: {found}")
        pinned |= _copied(graph, [found.source.inputs[0]])
    leaving = [name for s in segments if s.kind == "bpu" for name in s.outputs]
    unclipped = _copied(graph, [*graph.outputs, *leaving])
    tensors: dict[str, QTensor] = {}

    def own(name: str) -> None:
        # Only float tensors have codes (and a residual conv's intermediate, which is no
        # graph tensor): a Preprocess node's uint8 image and the int64 indices of ArgMax or
        # TopK pass as they are.
        if name and (name not in graph.tensors
                     or graph.tensors[name].dtype.startswith("float")):
            tensors[name] = _own_tensor(calibration, name, int16, pinned, unclipped)

    for segment in segments:
        if segment.kind == "bpu":
            for name in segment.inputs:
                if name not in tensors:
                    own(name)
    layers: dict[str, Layer] = {}
    for node in nodes:
        for name in node.inputs:
            if name and not graph.is_const(name) and name not in tensors:
                own(name)
        if execute.quantised_constants(graph, node):
            kept = tensors[next(n for n in node.inputs if not graph.is_const(n))].dtype
            for name in execute.quantised_constants(graph, node):
                peak = float(np.abs(np.asarray(graph.tensors[name].value, np.float64)).max())
                tensors[name] = QTensor(peak / CODE_MAX[kept] if peak > 0 else 1.0, kept)
        if execute.code_preserving(node):
            tensors.update((out, tensors[node.inputs[0]]) for out in node.outputs
                           if out and graph.tensors[out].dtype.startswith("float"))
            continue
        for out in node.outputs:
            own(out)
        for name in reference.intermediates(graph, node):
            own(name)
        if node.op == "LSTM":
            layers[node.name] = _lstm_layer(graph, node, tensors)
        elif node.op in WEIGHTED or opattrs.is_channel_affine(graph, node):
            layers[node.name] = _layer(graph, node, tensors)
    model = QuantModel(graph, list(segments), tensors, layers, int16, tuple(int32_outputs))
    execute.prepare(model)  # a layer the kernels cannot execute fails here, not at run time
    return model


def _layer(graph: Graph, node: Node, tensors: dict[str, QTensor]) -> Layer:
    out = node.outputs[0] + "#conv" if node.residual else node.outputs[0]
    out_scale = tensors[out].scale
    if opattrs.is_channel_affine(graph, node):
        x = next(n for n in node.inputs if not graph.is_const(n))
        scale, shift = opattrs.channel_affine(graph, node)
        return quantize_weights(scale.reshape(-1, 1, 1, 1), shift, tensors[x].scale,
                                out_scale)
    in_scale = tensors[node.inputs[0]].scale
    weight = graph.tensors[node.inputs[1]].value
    assert weight is not None
    bias = (graph.tensors[node.inputs[2]].value
            if len(node.inputs) > 2 and node.inputs[2] else None)
    if node.op == "ConvTranspose":
        weight, _ = opattrs.deconv_as_conv(node, np.asarray(weight))
    return quantize_weights(weight, bias, in_scale, out_scale)


def _lstm_layer(graph: Graph, node: Node, tensors: dict[str, QTensor]) -> Layer:
    """An LSTM's weights as kernels_tensor.Lstm takes them, per direction (the arrays'
    first axis): the rows of [W x s_x | R x s_h] (s_h the direction's hidden-state scale)
    quantised per row as `quantize_weights` does with input scale 1, each gate's rows
    against that gate's pre-activation scale; the bias Wb + Rb in each row's scale."""
    w, r, bias = reference.lstm_weights(graph, node)
    x_scale = tensors[node.inputs[0]].scale
    hidden = r.shape[2]
    parts = []
    for d in range(w.shape[0]):
        h_scale = tensors[reference.lstm_tensor(node, d, "h")].scale
        rows = np.concatenate([w[d] * x_scale, r[d] * h_scale], axis=1)
        gates = [quantize_weights(
            rows[k * hidden:(k + 1) * hidden], bias[d, k * hidden:(k + 1) * hidden], 1.0,
            tensors[reference.lstm_tensor(node, d, f"pre_{gate}")].scale)
            for k, gate in enumerate("iofg")]
        parts.append([np.concatenate([getattr(g, part) for g in gates])
                      for part in LAYER_PARTS])
    return Layer(*(np.stack([p[k] for p in parts]) for k in range(len(LAYER_PARTS))))


# ---------------------------------------------------------------------------------------
# Accuracy


class Accuracy(dict[str, float]):
    """Output name -> cosine similarity of the quantised model's output with the float
    graph's over all samples (every element of every sample as one vector); `low` when any
    is below COSINE_MIN, the floor the compiler warns at."""

    @property
    def low(self) -> bool:
        return any(c < COSINE_MIN for c in self.values())

    @property
    def worst(self) -> tuple[str, float]:
        name = min(self, key=lambda n: self[n])
        return name, self[name]


def accuracy(qmodel: QuantModel, samples: Sequence[dict[str, np.ndarray]],
             float_outputs: Sequence[dict[str, np.ndarray]] = ()) -> Accuracy:
    """Per-output cosine similarity of `execute.run` against `reference.run_float`; the
    float outputs of the first samples may be given (`Calibration.float_outputs`)."""
    if not samples:
        raise InputError("accuracy needs at least one sample")
    outputs = qmodel.graph.outputs
    if all(s.kind == "cpu" for s in qmodel.segments):
        # Nothing is quantised: `execute.run` computes the CPU nodes with the float code
        # `run_float` uses, so every output is the float output.
        return Accuracy(dict.fromkeys(outputs, 1.0))
    quant: dict[str, list[np.ndarray]] = {n: [] for n in outputs}
    exact: dict[str, list[np.ndarray]] = {n: [] for n in outputs}
    for index, feeds in enumerate(samples):
        got = execute.run(qmodel, feeds)
        want = (float_outputs[index] if index < len(float_outputs)
                else reference.run_float(qmodel.graph, feeds))
        for name in outputs:
            quant[name].append(got[name].ravel())
            exact[name].append(want[name].ravel())
    return Accuracy({name: execute.cosine_similarity(np.concatenate(quant[name]),
                                                     np.concatenate(exact[name]))
                     for name in outputs})

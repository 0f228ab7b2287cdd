"""`emu compile`, `emu perf` and `emu infer`: the BPU toolchain (emu/nn) as commands.

Every argument and output path is checked before any model is compiled or run, and an
output file is written whole or not at all (`emu.report.outputs`).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from emu.commands import Command, Outcome, Progress, register, trace_path, write_trace
from emu.commands.report import Report
from emu.errors import InputError
from emu.options import SEEDS, Option

CALIB_SAMPLES = (1, 10_000)
# emu.nn.quantize's methods, percentile range and default percentile, and the compiler's
# default method (kept here so that `emu --help` does not import the compiler; a test
# checks that they agree)
CALIB_METHODS = ("max", "percentile", "kl")
CALIB_METHOD = "percentile"
CALIB_PERCENTILE = (50.0, 100.0)
DEFAULT_PERCENTILE = 99.99
TOP_K = (1, 1000)
MAX_TIME_PER_FC_US = (0.0, 1e7)
PERF_THREADS = (1, 64)
PERF_FRAMES = (1, 1_000_000)
BATCH = (1, 256)

COMPILE_OPTIONS = (
    Option("models", str, None, "ONNX models; each becomes one model named after its file",
           flags=("models",), metavar="FILE.onnx", many=True, required=True),
    Option("output", str, None, "the model file to write (a regular file is replaced)",
           flags=("-o", "--output"), metavar="FILE.hbm", required=True),
    Option("input_type", str, "featuremap", "what the compiled model takes (default "
           "featuremap: the ONNX input, float32 NCHW); image types take uint8 pixels",
           choices=("nv12", "rgb", "bgr", "yuv444", "gray", "featuremap")),
    Option("input_source", str, "ddr", "image input types: where the image comes from "
           "(default ddr: hbDNNInfer; resizer: regions of larger images, hbDNNRoiInfer)",
           choices=("ddr", "resizer")),
    Option("output_codes", bool, False, "keep the BPU's outputs quantised (no dequantize on "
           "the CPU): int32 per channel after a final conv, else int8/int16 codes"),
    Option("output_type", str, None, "how output NAME is handed over (repeatable): float "
           "(dequantised on the CPU, the default), quantized (as the BPU writes it), or int32 "
           "(the accumulators of the Conv or Gemm writing it, through Transpose/Reshape, a "
           "scale per channel)", metavar="NAME=TYPE", repeat=True),
    Option("batch", int, None, "batch to compile for (default: the model's own): dimension 0 "
           "of inputs of rank 3 or more; refused for a model with an input of rank below 3, "
           "which is one frame", BATCH, metavar="N", show_range=False),
    Option("mean", str, None, "image input types, and pictures calibrating a featuremap "
           "input: mean subtracted per channel (default 0)", metavar="M[,M,M]"),
    Option("scale", str, None, "image input types: scale applied after the mean (default 1); "
           "pictures calibrating a featuremap input: (default 1/255)", metavar="S[,S,S]"),
    Option("calib_dir", str, None, "calibration samples: the .npy (.npz for several inputs) "
           "files of DIR, in the compiled input's shape and dtype, or its pictures (PNG, "
           "PGM/PPM, JPEG with pip install 'emu[images]'), resized to the input",
           metavar="DIR", group="calibration"),
    Option("calib_random", int, None, "calibration samples drawn at random (default 16): "
           "standard normal feature maps or uniform uint8 images", CALIB_SAMPLES,
           metavar="N", group="calibration", show_range=False),
    Option("seed", int, 0, "seed of --calib-random (default 0)", SEEDS, show_range=False),
    Option("calib_method", str, CALIB_METHOD, "how an int8 tensor's range comes from the "
           "calibration samples: max (largest |x|), percentile (--calib-percentile of the "
           "nonzero |x|) or kl (the clip of least KL divergence, as TensorRT's entropy "
           f"calibration); default {CALIB_METHOD}. int16 tensors and what the BPU hands over "
           "(the model's outputs, what CPU ops such as Softmax read) always keep max",
           choices=CALIB_METHODS),
    Option("calib_percentile", float, None, "--calib-method percentile: the percentile, "
           f"{CALIB_PERCENTILE[0]:g} to {CALIB_PERCENTILE[1]:g} (default "
           f"{DEFAULT_PERCENTILE:g})", CALIB_PERCENTILE, metavar="P", show_range=False),
    Option("max_time_per_fc", float, 0.0, "longest function call in microseconds of "
           "estimated time (default 0: no limit)", MAX_TIME_PER_FC_US, metavar="US",
           show_range=False),
    Option("int16", str, "auto", "int16 activations: auto (default) where int8 codes would "
           "be too coarse for a tensor, never (int8 everywhere), or always",
           choices=("auto", "never", "always")),
    Option("dsp_softmax", bool, False, "run Softmax on a vDSP instead of the CPU"),
    Option("perf", bool, False, "print the static estimate of each model"),
    Option("html", str, None, "also write the static estimate as an HTML page with a "
           "per-layer chart (needs matplotlib: pip install 'emu[plot]')", metavar="FILE.html"),
)

PERF_OPTIONS = (
    Option("model_file", str, None, "the compiled model file", flags=("model_file",),
           metavar="FILE.hbm", required=True),
    Option("model_name", str, None, "the model of a file that packs several", metavar="NAME"),
    Option("thread_num", int, 1, "host threads inferring at once", PERF_THREADS, metavar="N"),
    Option("core_id", int, 0, "0 any core (default), 1 core 0, 2 core 1", choices=(0, 1, 2)),
    Option("frame_count", int, 200, "frames in all", PERF_FRAMES, metavar="N"),
    Option("priority", int, 0, "task priority, 0 to 255 (255 preempts at function-call "
           "boundaries; default 0)", (0, 255), metavar="P", show_range=False),
    Option("profile", str, None, "write the per-segment profile as JSON (a regular file is "
           "replaced)", metavar="FILE.json"),
)

INFER_OPTIONS = (
    Option("model_file", str, None, "the compiled model file", flags=("model_file",),
           metavar="FILE.hbm", required=True),
    Option("input", str, None, "the input: .npy, .npz for several inputs, or a binary "
           "PPM/PGM image for rgb/bgr/gray models", metavar="FILE", required=True),
    Option("model_name", str, None, "the model of a file that packs several", metavar="NAME"),
    Option("top_k", int, 5, "classes shown per classifier output (default 5)", TOP_K,
           metavar="K", show_range=False),
    Option("out", str, None, "write each output as DIR/<output>.npy (DIR new or empty)",
           metavar="DIR"),
)

COMPILE_REPORTS = ("file", "bytes", "models.*.name", "models.*.inputs.**", "models.*.outputs.**",
                   "models.*.segments.**", "models.*.accuracy.**", "models.*.latency_ms",
                   "models.*.fps", "models.*.ddr_bytes_per_frame", "models.*.layers.**",
                   "models.*.time_by_kind_ms.*", "models.*.dominant")
PERF_REPORTS = (
    "model", "threads", "core_id", "frames", "priority", "latency_ms.avg",
    "latency_ms.min", "latency_ms.max", "latency_ms.p50", "latency_ms.p99", "fps",
    "profile.segments.*.segment", "profile.segments.*.name", "profile.segments.*.kind",
    "profile.segments.*.device", "profile.segments.*.busy_ms",
    "profile.segments.*.pending_ms", "profile.bpu_ms", "profile.cpu_ms", "profile.dsp_ms",
    "profile.task_pending_ms", "profile.task_running_ms")
INFER_REPORTS = ("model", "outputs.*.name", "outputs.*.shape.*", "outputs.*.dtype",
                 "top_k.**", "simulated.latency_ms", "simulated.bpu_ms", "simulated.cpu_ms")


def compile_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.report import outputs

    target = outputs.check_file("-o", args.output, args.models)
    html_target = (None if args.html is None
                   else outputs.check_file("--html", args.html, args.models))
    if html_target is not None and html_target.resolve() == target.resolve():
        raise InputError(f"--html {args.html}: is the -o file too")
    if html_target is not None:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise InputError(f"--html {args.html}: the page's chart needs matplotlib; "
                             "install it with pip install 'emu[plot]'")
    names = [_model_name(p) for p in args.models]
    if len(set(names)) != len(names):
        raise InputError(f"two models would have one name ({', '.join(names)}): model "
                         "names come from the file names")
    for path in args.models:
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file")
    if args.calib_dir is not None and not Path(args.calib_dir).is_dir():
        raise InputError(f"--calib-dir {args.calib_dir}: not a folder")
    if args.calib_percentile is not None and args.calib_method != "percentile":
        raise InputError(f"--calib-percentile {args.calib_percentile:g}: only with "
                         "--calib-method percentile")

    from dataclasses import replace

    from emu.nn import compiler
    from emu.nn.preprocess import parse_values
    from emu.report import nnperf
    from emu.report.document import write_atomic

    options = compiler.CompileOptions(
        input_type=args.input_type, batch=args.batch,
        mean=None if args.mean is None else parse_values(args.mean, 1, 0.0, "--mean"),
        scale=None if args.scale is None else parse_values(args.scale, 1, 1.0, "--scale"),
        calib_dir=None if args.calib_dir is None else Path(args.calib_dir),
        calib_random=args.calib_random or compiler.DEFAULT_CALIBRATION_SAMPLES,
        seed=args.seed, calib_method=args.calib_method,
        calib_percentile=(DEFAULT_PERCENTILE if args.calib_percentile is None
                          else args.calib_percentile),
        max_time_per_fc_us=args.max_time_per_fc,
        dsp_softmax=args.dsp_softmax, int16=args.int16, input_source=args.input_source,
        output_codes=args.output_codes, output_types=_output_types(args.output_type))
    declared = {path: _onnx_outputs(path) for path in args.models} if args.output_type else {}
    for output, kind in options.output_types:
        if None not in declared.values() and not any(
                output in known for known in declared.values() if known is not None):
            raise InputError(f"--output-type {output}={kind}: no model has an output "
                             f"{output}")
    compiled = []
    steps = len(names) * compiler.STEPS
    done = [0]

    def step(what: str) -> None:
        if progress is not None:
            progress(done[0], steps, what)
        done[0] += 1

    for path, name in zip(args.models, names, strict=True):
        known = declared.get(path)  # None: unreadable, and the compile says why
        mine = options if known is None else replace(options, output_types=tuple(
            pair for pair in options.output_types if pair[0] in known))
        compiled.append(compiler.compile_model(path, name, mine, resolved.soc, step))
    data = compiler.dumps(compiled)
    estimates = [_estimate_json(m, resolved) for m in compiled] \
        if args.perf or html_target is not None else []
    if html_target is not None:
        page = nnperf.html_page(estimates, f"emu compile --perf: {target.name}")
    write_atomic(target, data)
    if html_target is not None:
        write_atomic(html_target, page)
    docs = []
    for k, model in enumerate(compiled):
        doc = compile_summary(model)
        if estimates:
            doc.update(estimates[k])
        docs.append(doc)
    written = [str(target)] + ([] if html_target is None else [str(html_target)])
    return Outcome({"file": str(target), "bytes": len(data), "models": docs},
                   args.seed if args.calib_dir is None else None, written=tuple(written))


def _provenance(report: Report) -> str:
    from emu.report.document import provenance_line

    assert report.provenance is not None
    return provenance_line(report.provenance)


def compile_text(report: Report) -> str:
    from emu.report import nnperf

    lines = [_provenance(report), *(summary_text(doc) for doc in report["models"])]
    estimates = [doc for doc in report["models"] if "latency_ms" in doc]
    if estimates:
        lines.append(nnperf.text(estimates))
    html = [w for w in report.written if w != report["file"]]
    lines.append(f"wrote {report['file']} ({report['bytes']:,} bytes, "
                 f"{len(report['models'])} model(s))" + (f" and {html[0]}" if html else ""))
    return "\n".join(lines)


def _output_types(values: list[str]) -> tuple[tuple[str, str], ...]:
    """`--output-type` values NAME=TYPE as (name, type) pairs (the compiler checks them)."""
    pairs = []
    for value in values:
        name, equals, kind = value.rpartition("=")
        if not equals or not name:
            raise InputError(f"--output-type {value}: expected NAME=TYPE")
        pairs.append((name, kind))
    return tuple(pairs)


def _onnx_outputs(path: str) -> set[str] | None:
    """The output names of the ONNX model at `path` (weights left unread), or None when
    the file cannot be read as one (the compile then says why)."""
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception:  # any failure: the compile reports it properly
        return None
    return {value.name for value in model.graph.output}


def _model_name(path: str) -> str:
    stem = Path(path).name
    for suffix in (".onnx", ".ONNX"):
        stem = stem.removesuffix(suffix)
    return stem or "model"


def _estimate_json(model: Any, resolved: Any) -> dict[str, Any]:
    """A model's static estimate as JSON, with where its time goes and the provisional
    parameters it hangs on most (each halved and doubled: `emu.soc.sensitivity`)."""
    from emu.soc.clock import PS_PER_MS
    from emu.soc.sensitivity import provisional_sensitivity

    estimate = model.estimate(resolved.soc)
    kinds: dict[str, float] = {}
    for layer in estimate.layers:
        kind = "BPU" if layer.where == "bpu" else \
            f"A55 {layer.op}" if layer.where == "cpu" and layer.op in (
                "quantize", "dequantize", "layout") else \
            "A55 operators" if layer.where == "cpu" else layer.where
        kinds[kind] = kinds.get(kind, 0.0) + layer.time_ps / PS_PER_MS
    ordered = dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    sensitive = provisional_sensitivity(
        resolved, lambda soc: model.estimate(soc).latency_ms, ("bpu.", "cpu.", "ddr."))
    return {**estimate.to_json(),
            "time_by_kind_ms": {k: round(v, 6) for k, v in ordered.items()},
            "dominant": next(iter(ordered), None),
            "sensitive_parameters": [
                {"key": x.key, "value": x.value, "latency_ms": [[v, r] for v, r in x.moves]}
                for x in sensitive]}


def compile_summary(model: Any) -> dict[str, Any]:
    """What the compile made of a model: inputs, outputs, segments, accuracy, notes."""
    from emu.nn.compiler import ACCURACY_FLOOR

    return {
        "name": model.name,
        "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
                   for t in model.inputs],
        "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
                    for t in model.outputs],
        "segments": [{"kind": s.kind, "nodes": len(s.nodes),
                      "function_calls": len(model.function_calls.get(k, [])),
                      "reasons": list(s.reasons)}
                     for k, s in enumerate(model.segments)],
        "accuracy": {"cosine": model.accuracy, "flagged": model.flagged,
                     "floor": ACCURACY_FLOOR,
                     "calibration": model.options.get("calibration"),
                     "method": _method(model.options)},
        "notes": list(model.notes),
    }


def _method(options: dict[str, Any]) -> str:
    """The calibration method of a model's options: "kl", "percentile 99.99", "max"."""
    method = options.get("calib_method", "max")  # files from before the methods: max-abs
    percentile = options.get("calib_percentile")
    return f"{method} {percentile:g}" if method == "percentile" and percentile else method


def summary_text(doc: dict[str, Any]) -> str:
    """A compiled model's summary (`compile_summary`) as text."""
    segs = ", ".join(f"{s['kind']}" + (f"({s['nodes']} ops, {s['function_calls']} FC)"
                                       if s["kind"] == "bpu" else
                                       f"({s['nodes']} ops)" if s["nodes"] else "")
                     for s in doc["segments"])
    lines = [f"{doc['name']}: {segs}"]
    lines += [f"  note: {note}" for note in doc["notes"]]
    for seg in doc["segments"]:
        for reason in seg["reasons"] if seg["kind"] in ("cpu", "dsp") else []:
            lines.append(f"  {seg['kind']}: {reason}")
    accuracy = doc["accuracy"]
    lines.append(f"  calibration: {accuracy['calibration']}, method {accuracy['method']}")
    cosine = accuracy["cosine"]
    if cosine:
        worst = min(cosine, key=cosine.__getitem__)
        lines.append(f"  quantised vs float on calibration inputs: worst output cosine "
                     f"{cosine[worst]:.5f} ({worst})")
    if accuracy["flagged"]:
        named = ", ".join(f"{n} ({cosine[n]:.5f})" for n in accuracy["flagged"])
        lines.append(f"  WARNING: quantisation error too large (cosine similarity below "
                     f"{accuracy['floor']}) on {named}")
    return "\n".join(lines)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "output"


def read_input(model: Any, path: str) -> dict[str, Any]:
    """The feeds of `model` from an --input file: a .npy / .npz of any shape the model's
    inputs have, or for an rgb, bgr or gray model a PPM / PGM image (given N = 1)."""
    from emu.nn.imagefiles import read_pnm
    from emu.nn.reference import check_feeds, read_feeds

    file = Path(path)
    try:
        data = file.read_bytes()
    except IsADirectoryError:
        raise InputError(f"--input {path}: is a folder") from None
    except OSError as exc:
        raise InputError(f"--input {path}: cannot read: {exc.strerror}") from None
    where = f"--input {path}"
    if data[:2] not in (b"P5", b"P6"):
        return read_feeds(model.graph, data, where, "a .npy/.npz file or PPM/PGM image")
    input_type = model.options.get("input_type")
    if input_type not in ("rgb", "bgr", "gray"):
        raise InputError(f"{where}: an image file feeds rgb, bgr or gray models; this one "
                         f"takes {input_type}")
    return check_feeds(model.graph, {model.graph.inputs[0]: read_pnm(path, data)[None]}, where)


def infer_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.report import outputs

    out = None if args.out is None else outputs.check_folder("--out", args.out)
    trace = trace_path(args)

    import numpy as np

    from emu.nn import compiler
    from emu.workloads import nn_perf

    model = compiler.pick(compiler.load_file(args.model_file), args.model_name,
                          args.model_file)
    feeds = read_input(model, args.input)
    results = model.run(feeds)
    # one inference through hbDNN on a fresh session (the runtime's path; outputs above)
    timed, sess = nn_perf.run_perf_session(args.model_file, model.name, 1, 0, 1, 0,
                                           args.preset, args.config, args.overrides,
                                           trace=trace is not None)
    if trace is not None:
        write_trace(trace, [("", sess.soc.recorder.recording)], {"preset": args.preset})
    simulated = {"latency_ms": timed["latency_ms"]["avg"], "bpu_ms": timed["profile"]["bpu_ms"],
                 "cpu_ms": timed["profile"]["cpu_ms"]}
    top: dict[str, list[list[dict[str, Any]]]] = {}
    for name, value in results.items():
        if value.ndim == 2 and value.shape[1] > 1:
            order = np.argsort(-value, axis=1, kind="stable")[:, :args.top_k]
            top[name] = [[{"class": int(c), "score": float(value[n, c])} for c in row]
                         for n, row in enumerate(order)]
    if out is not None:
        with outputs.staged_folder(out) as folder:
            for name, value in results.items():
                np.save(folder / f"{_safe(name)}.npy", value, allow_pickle=False)
    described = [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)}
                 for k, v in results.items()]
    return Outcome({"model": model.name, "outputs": described, "top_k": top,
                    "simulated": simulated},
                   written=() if out is None else (str(out),))


def infer_text(report: Report) -> str:
    lines = [_provenance(report)]
    lines += [f"{item['name']}: {item['dtype']} {item['shape']}" for item in report["outputs"]]
    for name, rows in report["top_k"].items():
        for n, row in enumerate(rows):
            ranked = ", ".join(f"{r['class']} ({r['score']:.4f})" for r in row)
            lines.append(f"{name}[{n}] top-{len(row)}: {ranked}")
    simulated = report["simulated"]
    lines.append(f"simulated on one BPU core: {simulated['latency_ms']:.4f} ms "
                 f"(BPU {simulated['bpu_ms']:.4f} ms, CPU {simulated['cpu_ms']:.4f} ms)")
    if report.written:
        lines.append(f"wrote {len(report['outputs'])} output(s) to {report.written[0]}")
    return "\n".join(lines)


def perf_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.report import outputs

    profile = None if args.profile is None else outputs.check_file("--profile", args.profile)
    trace = trace_path(args)
    if not Path(args.model_file).is_file():
        raise InputError(f"{args.model_file}: no such file")

    from emu.nn import compiler
    from emu.report.document import dumps, write_atomic
    from emu.workloads import nn_perf

    compiler.pick(compiler.load_file(args.model_file), args.model_name, args.model_file)
    doc, sess = nn_perf.run_perf_session(
        args.model_file, args.model_name, args.thread_num, args.core_id, args.frame_count,
        args.priority, args.preset, args.config, args.overrides, trace=trace is not None)
    if profile is not None:
        write_atomic(profile, dumps(doc["profile"]))
    if trace is not None:
        write_trace(trace, [("", sess.soc.recorder.recording)], {"preset": args.preset})
    return Outcome(doc, written=() if profile is None else (str(profile),))


def perf_text(report: Report) -> str:
    lat = report["latency_ms"]
    prof = report["profile"]
    lines = [_provenance(report),
             f"{report['model']}: {report['frames']} frames, {report['threads']} thread(s), "
             f"core-id {report['core_id']}, priority {report['priority']} (simulated time)",
             f"latency ms: avg {lat['avg']:.4f}  min {lat['min']:.4f}  max {lat['max']:.4f}  "
             f"p50 {lat['p50']:.4f}  p99 {lat['p99']:.4f}",
             f"FPS: {report['fps']:.2f}",
             f"per frame: BPU {prof['bpu_ms']:.4f} ms, CPU {prof['cpu_ms']:.4f} ms, DSP "
             f"{prof['dsp_ms']:.4f} ms, task pending {prof['task_pending_ms']:.4f} ms, task "
             f"running {prof['task_running_ms']:.4f} ms"]
    for seg in prof["segments"]:
        lines.append(f"  segment {seg['segment']} {seg['device']} {seg['name']:28s} busy "
                     f"{seg['busy_ms']:.4f} ms, queued {seg['pending_ms']:.4f} ms")
    if report.written:
        lines.append(f"wrote {report.written[0]}")
    return "\n".join(lines)


COMPILE = register(Command(
    "compile", "compile ONNX models into one quantised model file for the BPU",
    "Import float ONNX models, fuse, place each op on the BPU, CPU or DSP, quantise "
    "post-training on calibration inputs (int8, int16 where needed), cut BPU subgraphs into "
    "function calls, and write one model file. --perf prints the static estimate (as hb_perf "
    "does).", COMPILE_OPTIONS, compile_work, compile_text, COMPILE_REPORTS, progress=True,
    outputs=("-o", "--output", "--html")))

PERF = register(Command(
    "perf", "latency and FPS of a compiled model from host threads (hrt_model_exec perf)",
    "Run a compiled model through hbDNN from --thread-num host threads, each inferring in a "
    "loop, until --frame-count frames are done: average, min, max, p50 and p99 latency and "
    "FPS in simulated time, and the per-segment profile. Outputs are not computed (the "
    "timing is the same).", PERF_OPTIONS, perf_work, perf_text, PERF_REPORTS, progress=True,
    trace=True, outputs=("--profile", "--trace"), sweepable=True))

INFER = register(Command(
    "infer", "run one compiled model on one input",
    "Compute a compiled model's outputs exactly, as the runtime does, on an input file (.npy, "
    ".npz for several inputs, or a binary PPM/PGM image for rgb/bgr/gray models), and "
    "simulate one inference on one BPU core.", INFER_OPTIONS, infer_work, infer_text,
    INFER_REPORTS, progress=True, trace=True, outputs=("--out", "--trace")))

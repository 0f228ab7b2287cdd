"""The compiler's static estimate as text and as an HTML page with a per-layer chart.

Works on the JSON form of an estimate (`emu compile --perf --json`: per model name,
latency_ms, fps, ddr_bytes_per_frame, layers with name, op, where, ops, compute_us,
load_store_us; where the time goes, `time_by_kind_ms` and `dominant`, said below the
summary when the BPU has less than half of it; the provisional parameters the latency hangs on most,
`sensitive_parameters`, each with the latency at half and double its value), so it needs
nothing from the compiler. The chart needs matplotlib (the
`plot` extra); the table does not.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

from emu.errors import InputError
from emu.report.table import render

HEADERS = ["layer", "op", "where", "Mops", "compute us", "load/store us", "bound"]


def _bound(layer: dict[str, Any]) -> str:
    if layer["where"] != "bpu":
        return layer["where"]
    return "DDR" if layer["load_store_us"] > layer["compute_us"] else "compute"


def layer_rows(model: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(layer["name"], layer["op"], layer["where"], layer["ops"] / 1e6,
             layer["compute_us"], layer["load_store_us"], _bound(layer))
            for layer in model["layers"]]


def summary_line(model: dict[str, Any]) -> str:
    total = model["ddr_bytes_per_frame"]
    bpu = (f" (BPU {model['bpu_latency_ms']:.4f} ms)" if "bpu_latency_ms" in model else "")
    line = (f"{model['name']}: latency {model['latency_ms']:.4f} ms{bpu}, "
            f"{model['fps']:.1f} FPS, "
            f"BPU DDR {total:,.0f} B per frame")
    if "ddr_loaded_bytes_per_frame" in model:
        line += (f" (loaded {model['ddr_loaded_bytes_per_frame']:,.0f}, stored "
                 f"{model['ddr_stored_bytes_per_frame']:,.0f})")
    if "compute_utilisation" in model:
        line += f", BPU compute utilisation {model['compute_utilisation']:.1%}"
    kinds = model.get("time_by_kind_ms", {})
    total, bpu = sum(kinds.values()), kinds.get("BPU", 0.0)
    others = [k for k in kinds if k != "BPU"]  # largest first
    if others and bpu < total / 2:  # most of the time is not the accelerator's
        line += (f"\n  where the time goes: {total - bpu:.4f} of {total:.4f} ms outside the "
                 f"BPU, most of it {others[0]} ({kinds[others[0]]:.4f} ms); the BPU "
                 f"{bpu:.4f} ms")
    for entry in model.get("sensitive_parameters", []):
        moves = ", ".join(f"{v:.4g} -> {ms:.4f} ms" for v, ms in entry["latency_ms"])
        line += (f"\n  provisional {entry['key']} = {entry['value']:.4g}: {moves}")
    return line


def text(models: Sequence[dict[str, Any]]) -> str:
    parts = []
    for model in models:
        parts.append(render(HEADERS, layer_rows(model),
                            title=f"static estimate of {model['name']} (one core)"))
        parts.append(summary_line(model))
    return "\n".join(parts)


def chart_png(model: dict[str, Any]) -> bytes:
    """Per-layer compute and load/store time of one model as a PNG (matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("the HTML estimate draws its chart with matplotlib: install it "
                         "with pip install 'emu[plot]'") from None
    layers = model["layers"]
    names = [layer["name"] for layer in layers]
    x = range(len(layers))
    width = max(6.0, min(40.0, 0.22 * len(layers)))
    fig, ax = plt.subplots(figsize=(width, 4.0), dpi=100)
    ax.bar([i - 0.2 for i in x], [layer["compute_us"] for layer in layers], width=0.4,
           label="compute (no DDR)")
    ax.bar([i + 0.2 for i in x], [layer["load_store_us"] for layer in layers], width=0.4,
           label="load/store (DDR)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, rotation=90, fontsize=6)
    ax.set_ylabel("µs")
    ax.set_title(f"{model['name']}: per-layer estimate, {model['latency_ms']:.3f} ms")
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def html_page(models: Sequence[dict[str, Any]], title: str) -> str:
    """A self-contained page: per model the summary, the chart and the layer table."""
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
           f"<title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif} table{border-collapse:collapse}"
           "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
           "td:first-child,td:nth-child(2),td:nth-child(3){text-align:left}</style>",
           "</head><body>", f"<h1>{html.escape(title)}</h1>"]
    for model in models:
        png = base64.b64encode(chart_png(model)).decode()
        out += [f"<h2>{html.escape(model['name'])}</h2>",
                f"<p>{html.escape(summary_line(model))}</p>",
                f"<img alt='per-layer chart' src='data:image/png;base64,{png}'>",
                "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
                + "</tr>"]
        for row in layer_rows(model):
            cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row]
            out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
                       + "</tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"

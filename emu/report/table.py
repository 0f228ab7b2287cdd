"""Plain-text tables for people (the `--json` form is for programs)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

WRAPPED_MIN = 12  # the narrowest a wrapped column gets, in characters


def render(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str = "",
           width: int | None = None, wrap: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned.

    With `width`, the text of the columns in `wrap` (their indices) is wrapped onto more
    lines so that the table fits in `width` characters (a terminal's), each wrapped column
    getting a share of the room the others leave in proportion to its widest cell."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    numeric = [all(isinstance(row[i], int | float) for row in rows) if rows else False
               for i in range(len(headers))]
    if width is not None and wrap and sum(widths) + 2 * (len(widths) - 1) > width:
        room = width - 2 * (len(widths) - 1) - sum(w for i, w in enumerate(widths)
                                                  if i not in wrap)
        natural = sum(widths[i] for i in wrap)
        for i in wrap:
            widths[i] = min(widths[i], max(WRAPPED_MIN, room * widths[i] // natural))

    def lines(values: Sequence[str]) -> list[str]:
        split = [textwrap.wrap(v, widths[i]) or [""] if i in wrap else [v]
                 for i, v in enumerate(values)]
        out = []
        for k in range(max(len(parts) for parts in split)):
            parts = [(p[k] if k < len(p) else "") for p in split]
            out.append("  ".join(v.rjust(w) if num else v.ljust(w)
                                 for v, w, num in zip(parts, widths, numeric,
                                                      strict=True)).rstrip())
        return out

    out = [title] if title else []
    out += lines(list(headers))
    out.append("  ".join("-" * w for w in widths))
    for row in cells:
        out += lines(row)
    return "\n".join(out)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)

"""How much of onnx's operator test suite emu compiles and computes right, by operator.

    python tools/conformance_table.py               # the table, then every case not accurate
    python tools/conformance_table.py --json        # the same as one JSON document
    python tools/conformance_table.py --op Conv --op Relu   # only these operators' cases
    python tools/conformance_table.py --skip-light  # without the nine light models (~75 s)

The cases are tests/conformance's: onnx's node test cases of the operators the operator
table lists (tests/conformance/cases.py: selection, preparation, the on-disk cache), each run
and judged by tests/conformance/runner.py (outcomes and tolerances). A row is one operator
(the one a case tests, an expanded case under the operator it expands) with its table row's
`where` ("-" for an expansion of an unlisted operator made of listed ones): its cases, how
many compiled, ran, and came out accurate, refused, flagged, inaccurate or crashed. After
the total, a row per `where` (the cases of the operators J5 runs on the BPU, of those it
runs on the CPU, ...), and two rows of the light models (the wheel's nine opset-9 networks
against onnxruntime): as shipped, and with weights of trained scale (`cases.realistic_light`),
each output's cosine listed.
Then every case that is not accurate, by outcome, with its one-line reason; "[table
refuses]" marks a case the operator table makes the compiler refuse. The exit status is 0
whatever the outcomes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conformance import cases, runner  # noqa: E402

COLUMNS = ("cases", "compiled", "ran", *runner.OUTCOMES)
LIGHT_ROW = "light models"
LIGHT_TRAINED_ROW = "light, trained-scale weights"


def tally(outcomes: Iterable[runner.Outcome]) -> dict[str, int]:
    """The table's columns over some outcomes."""
    row = dict.fromkeys(COLUMNS, 0)
    for outcome in outcomes:
        row["cases"] += 1
        row["compiled"] += outcome.compiled
        row["ran"] += outcome.ran
        row[outcome.status] += 1
    return row


def run_all(ops: list[str], light: bool) -> dict[str, Any]:
    """Every selected case (of `ops`, when given) and the light models, run and tallied."""
    soc = runner.j5()
    chosen = [c for c in cases.selected_cases() if not ops or c.info.op in ops]
    results = [(c, runner.run_case(cases.prepare(c.info), soc)) for c in chosen]
    by_op: dict[str, list[runner.Outcome]] = {}
    where: dict[str, str] = {}
    for case, outcome in results:
        by_op.setdefault(case.info.op, []).append(outcome)
        where[case.info.op] = case.where or "-"
    report: dict[str, Any] = {
        "operators": [{"op": op, "where": where[op], **tally(by_op[op])}
                      for op in sorted(by_op)],
        "total": tally(o for _, o in results),
        "cases": [{**o.as_json(), "op": c.info.op, "nodes": c.info.nodes,
                   "table_refuses": c.must_refuse} for c, o in results],
    }
    groups: dict[str, list[runner.Outcome]] = {}
    for case, outcome in results:
        groups.setdefault(f"where {case.where or '-'}", []).append(outcome)
    report["where"] = {key: tally(groups[key]) for key in sorted(groups)}
    if light:
        for key, realistic in ((LIGHT_ROW, False), (LIGHT_TRAINED_ROW, True)):
            models = [runner.run_case(cases.prepare_light(m, realistic), soc)
                      for m in cases.light_models()]
            report[key] = tally(models)
            report["cases"] += [{**o.as_json(), "op": key, "nodes": None,
                                 "table_refuses": False} for o in models]
    return report


def render(report: dict[str, Any]) -> str:
    """The table, the totals and the cases that are not accurate, as text."""
    rows = [(r["op"], r["where"], *(r[k] for k in COLUMNS)) for r in report["operators"]]
    rows.append(("total", "", *(report["total"][k] for k in COLUMNS)))
    rows += [(key, "", *(counts[k] for k in COLUMNS)) for key, counts in report["where"].items()]
    rows += [(key, "", *(report[key][k] for k in COLUMNS)) for key in (LIGHT_ROW,
                                                                       LIGHT_TRAINED_ROW)
             if key in report]
    header = ("operator", "where", *COLUMNS)
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]
    lines = []
    for k, row in enumerate([header, *rows]):
        if k == 1 or row[0] == "total":
            lines.append("  ".join("-" * w for w in widths))
        lines.append("  ".join(str(v).ljust(w) if i < 2 else str(v).rjust(w)
                               for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    trained = [c for c in report["cases"] if c["op"] == LIGHT_TRAINED_ROW]
    if trained:
        lines += ["", "light models with weights of trained scale:"]
        lines += [f"  {c['case']}: {c['status']}; " + "; ".join(
            f"{o['name']} {o['detail']}" for o in c["outputs"]) for c in trained]
    for status in ("crash", "inaccurate", "flagged", "refused"):
        failing = [c for c in report["cases"] if c["status"] == status]
        if failing:
            lines += ["", f"{status} ({len(failing)}):"]
            lines += [f"  {c['case']} ({c['op']}){' [table refuses]' if c['table_refuses'] else ''}"
                      f": {c['reason']}" for c in failing]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--op", action="append", default=[],
                        help="only the cases of this operator (repeatable)")
    parser.add_argument("--skip-light", action="store_true",
                        help="leave out the light models (the slow part)")
    args = parser.parse_args(argv)
    report = run_all(args.op, light=not args.skip_light and not args.op)
    print(json.dumps(report, indent=1) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

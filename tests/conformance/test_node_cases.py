"""onnx's operator test cases through `emu compile` and `CompiledModel.run`.

Every case `cases.selected_cases()` keeps (onnx's node tests of the operators the operator
table lists, single-node and expanded) is one test, its id the case name. A case must come
out "accurate", "refused" with a one-line message, or "flagged" (wrong where quantisation
cannot hold the case's inputs, and the compiler's accuracy check says so: runner.py says
how outcomes and tolerances are decided), never "inaccurate" (silently wrong) or "crash";
a case whose graph
has an operator the table refuses (unsupported, or not listed) must be refused. Then every
operator the table places on the BPU or the CPU must be computed accurately in at least one
of its cases: refusing them all is not supporting it.

None of these is marked expected-to-fail: while operator support is being built many
fail, and the failures are the measure (`python tools/conformance_table.py` tabulates
them). The whole file takes well under a minute (each outcome is computed once a session).
"""

from __future__ import annotations

import pytest

from tests.conformance import cases, runner

CASES = cases.selected_cases()
LISTED_OPS = sorted({c.info.op for c in CASES if c.where in ("bpu", "cpu")})
SOC = runner.j5()
_outcomes: dict[str, runner.Outcome] = {}


def outcome_of(case: cases.SelectedCase) -> runner.Outcome:
    """The case's outcome, computed once a session (both tests below read it)."""
    if case.name not in _outcomes:
        _outcomes[case.name] = runner.run_case(cases.prepare(case.info), SOC)
    return _outcomes[case.name]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case: cases.SelectedCase) -> None:
    outcome = outcome_of(case)
    said = f"{outcome.status} at {outcome.stage}: {outcome.reason}"
    if case.must_refuse:
        assert outcome.status == "refused", f"the table refuses {case.info.ops}; {said}"
    else:
        assert outcome.status in ("accurate", "refused", "flagged"), said
    if outcome.status == "refused":
        assert outcome.reason.strip() and "\n" not in outcome.reason, said


@pytest.mark.parametrize("op", LISTED_OPS)
def test_every_listed_operator_passes_a_case(op: str) -> None:
    mine = [outcome_of(c) for c in CASES if c.info.op == op]
    examples: dict[str, runner.Outcome] = {}
    for outcome in mine:
        examples.setdefault(outcome.status, outcome)
    assert "accurate" in examples, (
        f"{op} ({cases.optable.RULES[op].where}): none of its {len(mine)} cases is "
        "accurate; " + "; ".join(f"{status}, e.g. {o.case}: {o.reason}"
                                 for status, o in examples.items()))

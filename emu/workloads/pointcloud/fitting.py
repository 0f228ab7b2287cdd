"""Fitting unknown hardware parameters to measured timings, and the checks that make it honest.

The model is a black box from parameter values to predicted targets (for J5 a full emulator
run of tens of seconds), so every evaluation counts. Both sides are in log space: parameter
`x_j = log(value_j)`, residual `r_i = log(predicted_i / measured_i) / tolerance_i` (a
residual of 1 is a miss by one tolerance), cost `sum(r_i**2)`.

- `fit`: Levenberg-Marquardt with a finite-difference Jacobian (k + 1 evaluations an
  iteration for k parameters), bounds kept by an active set, whole-number parameters
  rounded. It stops when the next step would change nothing the model can see.
- `determination`: the singular values of the sensitivity `d log(target) / d log(param)`
  over the independent targets (each row divided by its tolerance): rank, condition
  number, and for each parameter the factor within which the targets pin it.
- `cross_validate`: leave one out. Each fold refits without the left-out target (and
  without the targets derived from it), linearised from the Jacobian at the full fit's
  solution (closed form), and is then verified by one real evaluation at its parameters.
  A fit error says the parameters can reproduce a target; a left-out error says the model
  predicts it.
- `rewrite_preset`: a preset's text with the fitted values, labelled fitted only where
  the value changed.

Nothing here knows J5: `calibration` supplies the targets, the free parameters and the
model.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from emu.errors import ConfigError
from emu.report.table import render
from emu.soc.config import FieldInfo, format_value, schema_fields
from emu.soc.units import parse_quantity

Vector = npt.NDArray[np.float64]

FD_STEP = math.log(1.1)  # finite-difference step in log space (whole numbers: at least 1)
MAX_STEP = math.log(2.0)  # a fit iteration moves no parameter by more than x/÷ 2
STEP_TOL = 0.005  # a step moving no parameter by more than 0.5 % is convergence
COST_TOL = 1e-3  # ... as is one the linear model says gains less than this
RANK_RTOL = 1e-3  # singular values below this fraction of the largest count as zero
POOR_FACTOR = 2.0  # a parameter the targets pin only within x/÷ this is poorly determined
NULL_WEIGHT = 0.1  # a parameter with this much of a null direction is not determined


@dataclass(frozen=True)
class Target:
    """A board measurement the emulator is compared with (and may be fitted to)."""

    name: str
    measured: float
    unit: str
    tolerance: float
    source: str
    # The targets whose sum the emulator predicts for this one: it adds no information of
    # its own to a fit, and leaving one of them out must take it out too.
    derived_from: tuple[str, ...] = ()


class TargetSpec(Protocol):
    """What the fit needs of a measurement (`Target` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def measured(self) -> float: ...
    @property
    def tolerance(self) -> float: ...
    @property
    def derived_from(self) -> tuple[str, ...]: ...


Model = Callable[[Mapping[str, float]], Mapping[str, float]]


@dataclass(frozen=True)
class FreeParameter:
    """A parameter the fit may move: its config key, the physically plausible range in the
    parameter's own unit as a preset writes it (`"10 us"`, `"2 cycles"`), and why."""

    key: str
    low: str
    high: str
    reason: str


@dataclass(frozen=True)
class Bound:
    """A free parameter resolved against the config schema: bounds in the base unit."""

    key: str
    info: FieldInfo
    integer: bool
    low: float
    high: float
    reason: str

    def show(self, value: float) -> str:
        return format_value(self.info, round(value) if self.integer else value)


def resolve(params: Sequence[FreeParameter]) -> list[Bound]:
    """Check each free parameter against the schema and read its bounds in its unit."""
    fields = {info.key: info for info in schema_fields()}
    keys = [p.key for p in params]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"free parameters: a key is listed twice ({', '.join(keys)})")
    out = []
    for p in params:
        info = fields.get(p.key)
        if info is None:
            raise ConfigError(f"free parameter {p.key!r}: no such config key")
        if info.type not in (int, float):
            raise ConfigError(f"free parameter {p.key}: not a number ({info.unit})")
        low, high = (_bound(p.key, text, info) for text in (p.low, p.high))
        if not 0 < low < high:
            raise ConfigError(f"free parameter {p.key}: bounds {p.low} to {p.high} are not "
                              "an increasing range of positive values")
        out.append(Bound(p.key, info, info.type is int, low, high, p.reason))
    return out


def _bound(key: str, text: str, info: FieldInfo) -> float:
    """A bound in the parameter's unit. A dimension with units must name one, so a bound
    cannot silently be read in the wrong unit (10000 meant as 10 us but read as 10 ns)."""
    if not isinstance(text, str):
        raise ConfigError(f"free parameter {key}: bound {text!r} must be text with its unit")
    if info.unit not in ("count", "ratio") and not re.search(r"[A-Za-zµ]", text):
        raise ConfigError(f"free parameter {key}: bound {text!r} needs its unit "
                          f"({info.unit} or a multiple)")
    try:
        return float(parse_quantity(text, info.unit, integer=False))
    except ValueError as exc:
        raise ConfigError(f"free parameter {key}: bound {text!r}: {exc}") from None


class Problem:
    """The free parameters, the targets and the model, with a cache of evaluations (the
    model is deterministic, so a point is never run twice)."""

    def __init__(self, bounds: Sequence[Bound], targets: Sequence[TargetSpec], model: Model,
                 start: Mapping[str, float],
                 on_evaluation: Callable[[int, str], None] | None = None) -> None:
        self.bounds = list(bounds)
        self.targets = list(targets)
        self.model = model
        self.on_evaluation = on_evaluation
        self.keys = [b.key for b in self.bounds]
        self.names = [t.name for t in self.targets]
        known = set(self.names)
        for t in self.targets:
            unknown = set(t.derived_from) - known
            if unknown:
                raise ValueError(f"target {t.name!r} is derived from unknown {sorted(unknown)}")
        self.log_measured = np.log([t.measured for t in self.targets])
        self.tolerance = np.array([t.tolerance for t in self.targets], dtype=float)
        self.lo = np.log([b.low for b in self.bounds])
        self.hi = np.log([b.high for b in self.bounds])
        self.start_values = {b.key: float(start[b.key]) for b in self.bounds}
        self.outside = [b.key for b in self.bounds
                        if not b.low <= self.start_values[b.key] <= b.high]
        self.x0 = self.realise(np.log([max(self.start_values[k], 1e-300) for k in self.keys]))
        self.cache: dict[tuple[float, ...], Vector] = {}
        self.evaluations = 0

    @property
    def independent(self) -> list[int]:
        """Rows of the targets that are measurements of their own (not sums of others)."""
        return [i for i, t in enumerate(self.targets) if not t.derived_from]

    def values(self, x: Vector) -> dict[str, float]:
        """The parameter values at log point `x`: clipped to the bounds, whole where the
        parameter is."""
        out = {}
        for b, xj in zip(self.bounds, x, strict=True):
            v = min(b.high, max(b.low, math.exp(float(xj))))
            if b.integer:
                v = float(min(math.floor(b.high), max(math.ceil(b.low), round(v))))
            out[b.key] = v
        return out

    def realise(self, x: Vector) -> Vector:
        """`x` moved to the point the model actually sees (bounds, rounding)."""
        values = self.values(x)
        return np.log([values[k] for k in self.keys])

    def predict(self, x: Vector, why: str) -> Vector:
        """log(predicted) of every target at `x` (one model run unless cached)."""
        values = self.values(x)
        # 12 digits: the same point reached by another float path is the same point.
        point = tuple(float(f"{values[k]:.12g}") for k in self.keys)
        if point not in self.cache:
            if self.on_evaluation is not None:
                self.on_evaluation(self.evaluations, why)
            predicted = self.model({k: (int(v) if b.integer else v)
                                    for (k, v), b in zip(values.items(), self.bounds,
                                                         strict=True)})
            self.cache[point] = np.log([predicted[n] for n in self.names])
            self.evaluations += 1
        return self.cache[point]

    def residuals(self, log_predicted: Vector) -> Vector:
        return np.asarray((log_predicted - self.log_measured) / self.tolerance, dtype=float)


def cost(residuals: Vector) -> float:
    return float(np.sum(residuals**2))


def jacobian(problem: Problem, x: Vector, log_predicted: Vector) -> Vector:
    """d log(target) / d log(param) at `x` by forward differences, one run per parameter.
    The step is `FD_STEP` (at least one unit of a whole-number parameter), downwards where
    upwards would leave the bounds."""
    values = problem.values(x)
    columns = []
    for j, b in enumerate(problem.bounds):
        v = values[b.key]
        trial = _nudge(v, b, +1)
        if trial > b.high:
            trial = _nudge(v, b, -1)
        if not b.low <= trial <= b.high or trial == v:
            raise ConfigError(f"free parameter {b.key}: bounds {b.show(b.low)} to "
                              f"{b.show(b.high)} leave no room to vary it")
        xt = x.copy()
        xt[j] = math.log(trial)
        lp = problem.predict(xt, f"sensitivity to {b.key}")
        columns.append((lp - log_predicted) / (xt[j] - x[j]))
    return np.column_stack(columns)


def _nudge(v: float, b: Bound, direction: int) -> float:
    trial = v * math.exp(direction * FD_STEP)
    if b.integer:
        trial = float(round(trial))
        if trial == v:
            trial = v + direction
    return trial


def bounded_step(a: Vector, r: Vector, lo: Vector, hi: Vector, damping: float) -> Vector:
    """The step d minimising |r + a d|^2 + damping * |D d|^2 with lo <= d <= hi, where
    D^2 = diag(a^T a) (Marquardt's scaling). Directions the rows cannot see (singular values
    below `RANK_RTOL` of the largest) get no step: minimum norm. Bounds by an active set: the
    parameter furthest outside is fixed at its bound and the rest solved again."""
    k = a.shape[1]
    fixed: dict[int, float] = {}
    delta = np.zeros(k)
    for _ in range(k + 1):
        delta = np.zeros(k)
        for j, v in fixed.items():
            delta[j] = v
        free = [j for j in range(k) if j not in fixed]
        if free:
            af = a[:, free]
            rhs = -(r + a @ delta)
            scale = np.sqrt(damping * np.sum(af**2, axis=0))
            m = np.vstack([af, np.diag(scale)])
            b = np.concatenate([rhs, np.zeros(len(free))])
            delta[free] = np.linalg.lstsq(m, b, rcond=RANK_RTOL)[0]
        excess = {j: max(lo[j] - delta[j], delta[j] - hi[j]) for j in free}
        worst = max(excess, key=lambda j: excess[j], default=None)
        if worst is None or excess[worst] <= 1e-12:
            return delta
        fixed[worst] = float(lo[worst] if delta[worst] < lo[worst] else hi[worst])
    return np.asarray(np.clip(delta, lo, hi), dtype=float)


@dataclass
class FitResult:
    x: Vector
    start: dict[str, float]
    values: dict[str, float]
    log_predicted_start: Vector
    log_predicted: Vector
    sensitivity: Vector  # d log(target) / d log(param) at `x`
    cost_start: float
    cost: float
    iterations: int
    evaluations: int
    converged: bool
    history: list[str] = field(default_factory=list)

    def moved(self, problem: Problem) -> list[str]:
        """The parameters whose value, as a preset would write it, changed."""
        return [b.key for b in problem.bounds
                if b.show(self.values[b.key]) != b.show(self.start[b.key])]


def fit(problem: Problem, max_iterations: int = 8, max_evaluations: int = 60,
        log: Callable[[str], None] | None = None) -> FitResult:
    """Levenberg-Marquardt from the problem's start (clipped to the bounds). The Jacobian is
    always that of the current point, so the result carries the one at its solution."""
    def note(text: str) -> None:
        history.append(text)
        if log is not None:
            log(text)

    history: list[str] = []
    x = problem.x0
    lp0 = lp = problem.predict(x, "start")
    r = problem.residuals(lp)
    cost0 = cost(r)
    note(f"start: cost {cost0:.4f}")
    s = jacobian(problem, x, lp)
    damping = 1e-3
    converged = False
    iteration = 0
    k = len(problem.bounds)
    while iteration < max_iterations:
        iteration += 1
        a = s / problem.tolerance[:, None]
        delta = bounded_step(a, r, problem.lo - x, problem.hi - x, damping)
        # A trust region: the linear model is only trusted so far, and a weakly seen
        # direction would otherwise take a long step on the strength of a tiny gain.
        delta *= min(1.0, MAX_STEP / max(float(np.max(np.abs(delta), initial=0.0)), 1e-300))
        step = problem.realise(x + delta) - x
        gain = cost(r) - cost(r + a @ step)
        if np.max(np.abs(step), initial=0.0) < STEP_TOL or gain < COST_TOL:
            converged = True
            note(f"iteration {iteration}: converged (next step {_pct(step)}, expected gain "
                 f"{gain:.2g})")
            break
        if problem.evaluations + 1 + k > max_evaluations:
            note(f"iteration {iteration}: evaluation budget ({max_evaluations}) spent")
            break
        lp_new = problem.predict(x + step, f"fit iteration {iteration}")
        r_new = problem.residuals(lp_new)
        if cost(r_new) < cost(r):
            x, lp, r = x + step, lp_new, r_new
            damping = max(damping / 10, 1e-7)
            note(f"iteration {iteration}: step {_pct(step)} accepted, cost {cost(r):.4f}")
            s = jacobian(problem, x, lp)  # the result carries the solution's Jacobian
        else:
            damping *= 10
            note(f"iteration {iteration}: step {_pct(step)} rejected (cost "
                 f"{cost(r_new):.4f}), damping {damping:.0e}")
    return FitResult(x=x, start=problem.values(problem.x0), values=problem.values(x),
                     log_predicted_start=lp0, log_predicted=lp, sensitivity=s,
                     cost_start=cost0, cost=cost(r), iterations=iteration,
                     evaluations=problem.evaluations, converged=converged, history=history)


def _pct(step: Vector) -> str:
    return "[" + ", ".join(f"{math.expm1(float(d)):+.1%}" for d in step) + "]"


@dataclass
class Determination:
    """How well the independent targets determine the parameters, at the fit."""

    rows: list[str]
    singular_values: list[float]
    rank: int
    condition: float  # inf when rank-deficient
    spread: dict[str, float]  # x/÷ factor within which the targets pin each; inf: not at all
    poorly_determined: list[str]
    weakest: dict[str, float]  # the least determined direction (right singular vector)


def determination(problem: Problem, sensitivity: Vector) -> Determination:
    """SVD of the weighted sensitivity over the independent targets. A parameter's spread is
    exp(sigma), sigma the standard deviation of its log from (A^T A)^-1: how far it can move,
    the others compensating, before the targets move by one tolerance."""
    rows = problem.independent
    a = sensitivity[rows] / problem.tolerance[rows, None]
    _, sv, vt = np.linalg.svd(a, full_matrices=True)
    k = a.shape[1]
    svs = np.zeros(k)
    svs[: len(sv)] = sv
    top = float(svs[0]) if k else 0.0
    rank = int(np.sum(svs > RANK_RTOL * top)) if top > 0 else 0
    cov = sum((np.outer(vt[i], vt[i]) / svs[i] ** 2 for i in range(rank)), np.zeros((k, k)))
    spread = {}
    for j, key in enumerate(problem.keys):
        undetermined = any(abs(vt[i, j]) > NULL_WEIGHT for i in range(rank, k))
        spread[key] = math.inf if undetermined else math.exp(math.sqrt(cov[j, j]))
    poorly = [key for key in problem.keys if spread[key] > POOR_FACTOR]
    condition = top / float(svs[-1]) if rank == k and k else math.inf
    return Determination(rows=[problem.names[i] for i in rows],
                         singular_values=[float(v) for v in svs], rank=rank,
                         condition=condition, spread=spread, poorly_determined=poorly,
                         weakest={key: float(vt[k - 1, j]) for j, key in enumerate(problem.keys)}
                         if k else {})


@dataclass
class Fold:
    target: str
    left_out: list[str]
    independent: bool  # a real test: nothing fitted carries the left-out number
    rank: int  # of the independent targets kept
    values: dict[str, float]
    fit_error: float  # relative error with every target fitted
    linear_error: float  # the left-out prediction of the linearised refit
    error: float  # the same, verified by a real evaluation
    note: str


def cross_validate(problem: Problem, result: FitResult) -> list[Fold]:
    """Leave each target out in turn (with what depends on it), refit the rest linearised
    from the Jacobian at `result`'s solution, and run the model once at the refit's
    parameters to see the left-out target's real prediction.

    For an independent target, the targets derived from it (sums it is part of) leave with
    it, or they would carry its value back into the fit. A derived target leaves with the
    others of the same parts, but its parts stay: that fold is reported, flagged, and is no
    test of prediction."""
    x, lp, s = result.x, result.log_predicted, result.sensitivity
    r = problem.residuals(lp)
    k = len(problem.bounds)
    folds = []
    for i, t in enumerate(problem.targets):
        if t.derived_from:
            left = {u.name for u in problem.targets if u.derived_from == t.derived_from}
        else:
            left = {t.name} | {u.name for u in problem.targets if t.name in u.derived_from}
        keep = [n for n, u in enumerate(problem.targets) if u.name not in left]
        a = s[keep] / problem.tolerance[keep, None]
        step = problem.realise(x + bounded_step(a, r[keep], problem.lo - x, problem.hi - x,
                                                0.0)) - x
        linear = lp[i] + s[i] @ step
        verified = problem.predict(x + step, f"leave out {t.name}")[i]
        indep_kept = [n for n in keep if not problem.targets[n].derived_from]
        rank = _rank(s[indep_kept] / problem.tolerance[indep_kept, None])
        notes = []
        if t.derived_from:
            notes.append("dependent: its parts are fitted, not a test")
        if rank < k:
            notes.append(f"underdetermined (rank {rank} of {k})")
        folds.append(Fold(
            target=t.name, left_out=[u.name for u in problem.targets if u.name in left],
            independent=not t.derived_from, rank=rank, values=problem.values(x + step),
            fit_error=_rel(lp[i], problem.log_measured[i]),
            linear_error=_rel(linear, problem.log_measured[i]),
            error=_rel(verified, problem.log_measured[i]), note="; ".join(notes)))
    return folds


def _rank(a: Vector) -> int:
    if a.size == 0:
        return 0
    sv = np.linalg.svd(a, compute_uv=False)
    return int(np.sum(sv > RANK_RTOL * sv[0])) if sv[0] > 0 else 0


def _rel(log_predicted: float, log_measured: float) -> float:
    return math.expm1(float(log_predicted - log_measured))


# ---- reports --------------------------------------------------------------------------


def _at_bound(b: Bound, v: float) -> str | None:
    low, high = (math.ceil(b.low), math.floor(b.high)) if b.integer else (b.low, b.high)
    return "low" if v <= low else "high" if v >= high else None


def _number(b: Bound, v: float) -> float | int:
    return round(v) if b.integer else v


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def fit_document(problem: Problem, result: FitResult, det: Determination,
                 folds: Sequence[Fold] | None = None) -> dict[str, Any]:
    """The fit (and cross-validation) as plain data for `--json`."""
    moved = result.moved(problem)
    derived = {t.name: list(t.derived_from) for t in problem.targets if t.derived_from}
    doc: dict[str, Any] = {
        "method": "Levenberg-Marquardt in log space, finite-difference Jacobian, bounded",
        "targets_total": len(problem.targets),
        "targets_independent": len(problem.independent),
        "derived_targets": derived,
        "parameters": [
            {"key": b.key, "unit": b.info.unit, "low": b.low, "high": b.high,
             "range": f"{b.show(b.low)} to {b.show(b.high)}", "reason": b.reason,
             "start": _number(b, result.start[b.key]),
             "start_shown": b.show(result.start[b.key]),
             "start_outside_bounds": b.key in problem.outside,
             "fitted": _number(b, result.values[b.key]),
             "fitted_shown": b.show(result.values[b.key]),
             "moved": b.key in moved, "at_bound": _at_bound(b, result.values[b.key]),
             "spread": _finite(det.spread[b.key]),
             "poorly_determined": b.key in det.poorly_determined}
            for b in problem.bounds],
        "cost_start": round(result.cost_start, 6), "cost": round(result.cost, 6),
        "iterations": result.iterations, "evaluations": result.evaluations,
        "converged": result.converged,
        "targets": [
            {"target": t.name, "measured": t.measured, "tolerance": t.tolerance,
             "error_start": round(_rel(result.log_predicted_start[i],
                                       problem.log_measured[i]), 6),
             "error": round(_rel(result.log_predicted[i], problem.log_measured[i]), 6)}
            for i, t in enumerate(problem.targets)],
        "sensitivity": {"rows": problem.names, "columns": problem.keys,
                        "d_log_target_d_log_param": [[round(float(v), 6) for v in row]
                                                     for row in result.sensitivity]},
        "determination": {
            "rows": det.rows, "weighting": "each row divided by its tolerance",
            "singular_values": [round(v, 6) for v in det.singular_values],
            "rank": det.rank, "parameters": len(problem.bounds),
            "condition": _finite(det.condition),
            "poorly_determined": det.poorly_determined,
            "weakest_direction": {k: round(v, 4) for k, v in det.weakest.items()}},
    }
    if folds is not None:
        doc["cross_validation"] = [
            {"target": f.target, "left_out": f.left_out, "independent": f.independent,
             "fold_rank": f.rank, "fit_error": round(f.fit_error, 6),
             "linear_error": round(f.linear_error, 6), "error": round(f.error, 6),
             "parameters": {b.key: _number(b, f.values[b.key]) for b in problem.bounds},
             "note": f.note}
            for f in folds]
    return doc


def fit_text(doc: Mapping[str, Any]) -> str:
    """The fit for people: parameters, targets, sensitivity, determination."""
    out = []
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, parts in doc["derived_targets"].items():
        groups.setdefault(tuple(parts), []).append(repr(name))
    sums = "; ".join(f"{' and '.join(names)} {'are sums' if len(names) > 1 else 'is the sum'}"
                     f" of {', '.join(parts)}" for parts, names in groups.items())
    out.append(
        f"Fit: {doc['method']}; {len(doc['parameters'])} free parameters against "
        f"{doc['targets_total']} targets, of which {doc['targets_independent']} are "
        f"independent{f' ({sums})' if sums else ''}.")
    out.append(f"cost (sum of (log error / tolerance)^2) {doc['cost_start']:.4f} -> "
               f"{doc['cost']:.4f} in {doc['iterations']} iterations, "
               f"{doc['evaluations']} evaluations"
               + ("" if doc["converged"] else " (NOT converged)"))
    rows = []
    for p in doc["parameters"]:
        spread = "not at all" if p["spread"] is None else f"x/÷ {p['spread']:.2f}"
        flag = " (poorly)" if p["poorly_determined"] and p["spread"] is not None else ""
        start = p["start_shown"] + (" (outside the range: clipped)"
                                    if p["start_outside_bounds"] else "")
        fitted = p["fitted_shown"] + (f" (at the {p['at_bound']} end)" if p["at_bound"] else "")
        rows.append((p["key"], start, fitted, "yes" if p["moved"] else "no",
                     p["range"], spread + flag))
    out.append("")
    out.append(render(["parameter", "start", "fitted", "moved", "plausible range",
                       "targets pin it to"], rows, title="Free parameters"))
    out.append("")
    out.append(render(["target", "measured", "error at start", "error fitted", "tolerance"],
                      [(t["target"], t["measured"], f"{t['error_start']:+.1%}",
                        f"{t['error']:+.1%}", f"{t['tolerance']:.0%}")
                       for t in doc["targets"]], title="Targets"))
    sens = doc["sensitivity"]
    out.append("")
    out.append(render(["target", *sens["columns"]],
                      [(name, *[f"{v:+.3f}" for v in row])
                       for name, row in zip(sens["rows"], sens["d_log_target_d_log_param"],
                                            strict=True)],
                      title="Sensitivity d log(target) / d log(parameter) at the fit"))
    det = doc["determination"]
    cond = "infinite" if det["condition"] is None else f"{det['condition']:.3g}"
    out.append("")
    out.append(f"Singular values over the {len(det['rows'])} independent targets (rows "
               f"divided by their tolerance): "
               + ", ".join(f"{v:.4g}" for v in det["singular_values"])
               + f"; rank {det['rank']} of {det['parameters']} (threshold {RANK_RTOL:g} of "
               f"the largest), condition number {cond}.")
    weakest = ", ".join(f"{k} {v:+.2f}" for k, v in det["weakest_direction"].items())
    out.append(f"Least determined direction (log parameters): {weakest}.")
    if det["poorly_determined"]:
        out.append("Poorly determined (the targets, each within its tolerance, allow more "
                   f"than x/÷ {POOR_FACTOR:g}): " + ", ".join(det["poorly_determined"]) + ".")
    else:
        out.append(f"Every free parameter is pinned within x/÷ {POOR_FACTOR:g}.")
    stale = doc.get("labelled_fitted_but_not_free")
    if stale:
        out.append("Labelled 'calibrated: fitted' in the configuration but not free in this "
                   "fit (a stale label; writing a fit leaves it alone): " + ", ".join(stale)
                   + ".")
    return "\n".join(out)


def cross_validation_text(doc: Mapping[str, Any]) -> str:
    """The leave-one-out table: each target's fit error beside its prediction error."""
    folds = doc["cross_validation"]
    measured = {t["target"]: t["measured"] for t in doc["targets"]}
    tolerance = {t["target"]: t["tolerance"] for t in doc["targets"]}
    rows = [(f["target"], measured[f["target"]], f"{f['fit_error']:+.1%}",
             f"{f['error']:+.1%}", f"{f['linear_error']:+.1%}",
             f"{tolerance[f['target']]:.0%}", f["note"] or "-") for f in folds]
    out = [render(["target", "measured", "fit error", "left-out error", "(linearised)",
                   "tolerance", "note"], rows,
                  title="Cross-validation: each target left out (with the sums it is part "
                        "of), the rest refitted, the left-out one predicted")]
    honest = [f for f in folds if f["independent"]]
    if honest:
        def rms(key: str) -> float:
            return math.sqrt(sum(f[key] ** 2 for f in honest) / len(honest))

        out.append(f"\nOver the {len(honest)} independent targets: RMS fit error "
                   f"{rms('fit_error'):.1%}, RMS left-out error {rms('error'):.1%}. Fit errors "
                   "alone are not evidence; the left-out errors are what the model predicts.")
    if any(not f["independent"] for f in folds):
        out.append("dependent: a sum of other targets; left out, its parts stay fitted, so its "
                   "left-out error is reported but tests nothing.")
    if any(f["fold_rank"] < len(doc["parameters"]) for f in folds):
        out.append("underdetermined: without the left-out targets the rest do not determine "
                   "every parameter; the undetermined direction stays where the full fit, "
                   "left-out target included, put it, so that left-out error is optimistic.")
    return "\n".join(out)


# ---- the preset -----------------------------------------------------------------------

_LINE = re.compile(r'^(\w+) = \{ value = (.*), source = "(.*)" \}$')
_HEADER = re.compile(r"^\[(.+)\]$")


def rewrite_preset(text: str, values: Mapping[str, float],
                   sources: Mapping[str, str]) -> tuple[str, list[str]]:
    """`text` (a preset) with each key of `values` set to its value and labelled with its
    entry of `sources`, but only where the value, as the preset writes it, changed: a line
    whose value the fit did not move keeps its value and its source (it was not fitted).
    Returns the new text and the keys rewritten."""
    fields = {info.key: info for info in schema_fields()}
    section = ""
    out = []
    changed = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        header = _HEADER.match(body)
        if header:
            section = header.group(1)
        match = _LINE.match(body)
        key = f"{section}.{match.group(1)}" if match else ""
        if match and key in values:
            info = fields[key]
            integer = info.type is int
            new = round(values[key]) if integer else values[key]
            old = parse_quantity(tomllib.loads(f"v = {match.group(2)}")["v"], info.unit,
                                 integer=integer)
            shown = format_value(info, new)
            if shown != format_value(info, old):
                line = (f'{match.group(1)} = {{ value = "{shown}", source = '
                        f'"{sources[key]}" }}' + line[len(body):])
                changed.append(key)
        out.append(line)
    missing = sorted(set(values) - set(changed) - _keys(text))
    if missing:
        raise ConfigError(f"preset: no line for {', '.join(missing)}")
    return "".join(out), changed


def _keys(text: str) -> set[str]:
    section = ""
    keys = set()
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            section = header.group(1)
        match = _LINE.match(line)
        if match:
            keys.add(f"{section}.{match.group(1)}")
    return keys

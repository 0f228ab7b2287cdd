"""The instruction classes an A55 work item counts, and the array that holds the counts.

CPU kernels count what they execute by class, as the A55's pipelines see it, in an int64
array indexed by the constants below (a plain array, so numba kernels can add to it):

  INT         integer ALU ops (add, compare, shift, address arithmetic, select)
  LOAD        loads (one per load instruction, whatever its width)
  STORE       stores
  BRANCH      branches (taken or not)
  MISPREDICT  branches whose direction the predictor got wrong (a subset of BRANCH)
  FP          floating-point add, subtract, multiply, compare, min/max, round to integral
  FCVT        conversions between float and integer
  FDIV        single-precision divisions
  FPCR        writes of the floating-point control register (fesetround)

`emu.cpu.timing.issue_cycles` turns the counts into cycles.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

INT, LOAD, STORE, BRANCH, MISPREDICT, FP, FCVT, FDIV, FPCR = range(9)
N_CLASSES = 9
NAMES = ("int", "load", "store", "branch", "mispredict", "fp", "fcvt", "fdiv", "fpcr")


def counts(**by_name: int) -> npt.NDArray[np.int64]:
    """A count array from keyword counts, e.g. `counts(load=4, store=4)`."""
    out = np.zeros(N_CLASSES, np.int64)
    for name, value in by_name.items():
        if name not in NAMES:
            raise ValueError(f"unknown instruction class {name!r} (have: {', '.join(NAMES)})")
        if value < 0:
            raise ValueError(f"{name}: a count cannot be negative, got {value}")
        out[NAMES.index(name)] = value
    return out


def as_dict(ops: npt.NDArray[np.int64]) -> dict[str, int]:
    return {name: int(ops[i]) for i, name in enumerate(NAMES)}

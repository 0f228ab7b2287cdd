"""The one place that sets the numba options every kernel in the emulator is compiled with.

`cache=True` keeps compiled kernels on disk, so only the first run after a change pays for
compilation; `nogil=True` lets kernels run while other Python threads (the SimPy driver, a
progress reporter) go on. Kernels are compiled lazily, on their first call, never at import.
Setting `NUMBA_DISABLE_JIT=1` turns every kernel back into plain Python, for debugging and
for coverage.

numba checks a cached kernel against the file that defines it only, so a kernel in one
module that calls an op of `emu/vdsp/isa.py` would keep running the old op after isa.py
changed, with the old work counts. So the cache lives in a folder named after a digest of
every source kernels can depend on (`kernel_sources`): change any of them and every kernel
compiles afresh. The folder is under `NUMBA_CACHE_DIR` when that is set, else under the
package's `__pycache__`; folders of older digests there are removed.

A kernel called from another kernel with a constant argument (`splat_i32(ctx, 0)`) would
be compiled once more for every distinct constant: numba types a constant as a literal
(`Literal[int](0)`) and compiles a dispatcher once per argument-type tuple. The kernels
here never branch on a literal, so `_plain_types` makes each dispatcher type its
arguments as the plain types (int64, float64) before it compiles: one compilation per real
type signature. On `emu dsp cv --all` from a cold cache that is 222 compilations instead
of 254, 136 s instead of 152 s.
"""

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, cast

import numba
from numba.core import types

_Kernel = TypeVar("_Kernel", bound=Callable[..., Any])

PACKAGE = Path(__file__).resolve().parent
_USES_JIT = re.compile(r"^from emu\.jit import", re.M)
_EMU_IMPORT = re.compile(r"^from (emu(?:\.\w+)+) import", re.M)
_KEY_PREFIX = "emu-kernels-"


def kernel_sources(package: Path = PACKAGE) -> list[Path]:
    """The files compiled kernels can depend on: this module, every module that defines
    kernels with it, and the emu modules those import (constants and helpers a kernel reads
    are frozen into it at compile time)."""
    root = package.parent
    found = {package / "jit.py"}
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if _USES_JIT.search(text):
            found.add(path)
            for module in _EMU_IMPORT.findall(text):
                stem = root.joinpath(*module.split("."))
                found.update(p for p in (stem.with_suffix(".py"), stem / "__init__.py")
                             if p.is_file())
    return sorted(found)


def files_digest(paths: Iterable[Path], root: Path) -> str:
    """A SHA-256 of `paths` (in the order given): each one's path under `root`, then its
    contents."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_key(package: Path = PACKAGE) -> str:
    """A digest of `kernel_sources`: their paths in the package and their contents."""
    return files_digest(kernel_sources(package), package.parent)[:16]


def _use_keyed_cache() -> None:
    root = Path(os.environ.get("NUMBA_CACHE_DIR") or PACKAGE / "__pycache__")
    current = _KEY_PREFIX + cache_key()
    if root.is_dir():
        for old in root.glob(_KEY_PREFIX + "*"):
            if old.name != current:
                shutil.rmtree(old, ignore_errors=True)
    numba.config.CACHE_DIR = str(root / current)  # type: ignore[attr-defined]


_use_keyed_cache()  # before any kernel is decorated: numba picks a kernel's folder then


def _plain_types(dispatcher: Any) -> Any:
    """`dispatcher`, made to compile for its arguments' plain types when another kernel
    calls it with constants (see the module docstring)."""
    resolve = getattr(dispatcher, "get_call_template", None)
    if resolve is None:  # NUMBA_DISABLE_JIT=1: numba handed back the plain function
        return dispatcher

    def get_call_template(args: tuple[Any, ...], kws: dict[str, Any]) -> Any:
        return resolve(tuple(types.unliteral(a) for a in args),
                       {k: types.unliteral(v) for k, v in kws.items()})

    dispatcher.get_call_template = get_call_template
    return dispatcher


def njit(kernel: _Kernel) -> _Kernel:
    """Decorate a private kernel: compiled with the shared options on its first call.

    Typed as returning the function itself, so that callers are checked against the
    kernel's own signature rather than numba's untyped dispatcher.
    """
    return cast(_Kernel, _plain_types(numba.njit(cache=True, nogil=True)(kernel)))


def njit_inline(helper: _Kernel) -> _Kernel:
    """Decorate a small helper that numba copies into every compiled caller.

    A call between compiled functions that LLVM does not inline costs reference-count updates
    (atomic, through numba's runtime) for every array that crosses it, tens of nanoseconds
    per call; a helper copied in at numba's level usually avoids them. Measure before using
    it on anything large: every caller then compiles its own copy.
    """
    return cast(_Kernel, numba.njit(cache=True, nogil=True, inline="always")(helper))


def njit_ieee(kernel: _Kernel) -> _Kernel:
    """`njit` for code whose scalar float division must follow IEEE 754, as vector lanes do:
    x / 0 gives +-inf and 0 / 0 NaN, where Python semantics would raise ZeroDivisionError."""
    return cast(_Kernel, _plain_types(
        numba.njit(cache=True, nogil=True, error_model="numpy")(kernel)))

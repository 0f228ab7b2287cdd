"""The one place that sets the numba options every kernel in the emulator is compiled with.

`cache=True` keeps compiled kernels on disk, so only the first run after a change pays for
compilation; `nogil=True` lets kernels run while other Python threads (the SimPy driver, a
progress reporter) go on. Kernels are compiled lazily, on their first call, never at import.
Setting `NUMBA_DISABLE_JIT=1` turns every kernel back into plain Python, for debugging and
for coverage.

numba checks a cached kernel against the file that defines it only, so a kernel in one
module that calls an op of `emu/vdsp/isa.py` would keep running the old op after isa.py
changed, with the old work counts; one that reads the instruction-class indices of
`emu/cpu/ops.py` would keep counting into the old classes. So the cache lives in a folder
named after a digest of every source kernels can depend on (`kernel_sources`: the modules
that define kernels and everything they import, followed import by import): change any of
them and every kernel compiles afresh. The folder is under `NUMBA_CACHE_DIR` when that is
set, else under the package's `__pycache__`; folders of older digests there are removed.

A kernel called from another kernel with a constant argument (`splat_i32(ctx, 0)`) would
be compiled once more for every distinct constant: numba types a constant as a literal
(`Literal[int](0)`) and compiles a dispatcher once per argument-type tuple. The kernels
here never branch on a literal, so `_plain_types` makes each dispatcher type its
arguments as the plain types (int64, float64) before it compiles: one compilation per real
type signature. On `emu dsp cv --all` from a cold cache that is 222 compilations instead
of 254, 136 s instead of 152 s.
"""

import ast
import hashlib
import inspect
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import numba
from numba.core import types
from numba.core.registry import CPUDispatcher

_Kernel = TypeVar("_Kernel", bound=Callable[..., Any])

PACKAGE = Path(__file__).resolve().parent
_USES_JIT = re.compile(r"^from emu\.jit import", re.M)
_KEY_PREFIX = "emu-kernels-"


def kernel_sources(package: Path = PACKAGE) -> list[Path]:
    """The files compiled kernels can depend on: this module, every module that defines
    kernels with it (imports from `emu.jit`), and every emu module those import, directly or
    through another (constants and helpers a kernel reads are frozen into it at compile
    time, and an imported constant may be computed from a third module's)."""
    root = package.parent
    pending = [package / "jit.py"] + [p for p in sorted(package.rglob("*.py"))
                                      if _USES_JIT.search(p.read_text(encoding="utf-8"))]
    found: set[Path] = set()
    while pending:
        path = pending.pop()
        if path not in found:
            found.add(path)
            pending.extend(_imported_files(path, root))
    return sorted(found)


def _imported_files(path: Path, root: Path) -> set[Path]:
    """The files of the emu modules `path` imports when it is imported: the imports that run
    then (at module level, also under `if`/`try`), not those inside functions, which run
    later if ever, nor those under `if TYPE_CHECKING:`, which never run. `from a.b import c`
    names the file of a.b, or of a.b.c when c is a module of that package."""
    package = path.relative_to(root).parts[:-1]
    files: set[Path] = set()

    def module_file(parts: Sequence[str]) -> Path | None:
        stem = root.joinpath(*parts)
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    for node in _import_statements(path.read_text(encoding="utf-8")):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "emu" and (found := module_file(parts)):
                    files.add(found)
            continue
        parts = [*package[:len(package) - node.level + 1]] if node.level else []
        parts += node.module.split(".") if node.module else []
        if parts and parts[0] == "emu":
            for alias in node.names:
                if found := module_file([*parts, alias.name]) or module_file(parts):
                    files.add(found)
    return files


# An import statement, with its indentation, over several lines when parenthesised. Found
# by pattern and parsed alone: parsing whole modules (isa.py is 3,000 lines) would add a
# fifth of a second to every process that imports a kernel.
_IMPORT = re.compile(r"^([ \t]*)((?:from[ \t]+\S+[ \t]+import[ \t]*\([^)]*\))"
                     r"|(?:from[ \t]+\S+[ \t]+import|import)[ \t][^\n]*)", re.M)
_BLOCK = re.compile(r"^([ \t]*)(\S[^\n]*)", re.M)
_NOT_AT_IMPORT = re.compile(r"(?:async[ \t]+)?def[ \t]|if[ \t]+(?:typing\.)?TYPE_CHECKING\b")


def _import_statements(text: str) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of a module's source that run when it is imported."""
    for match in _IMPORT.finditer(text):
        indent = len(match[1])
        if indent and not _runs_at_import(text[:match.start()], indent):
            continue
        try:
            statement = ast.parse(match[2]).body
        except SyntaxError:  # prose in a docstring that begins with "import"
            continue
        for node in statement:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node


def _runs_at_import(before: str, indent: int) -> bool:
    """Whether a statement indented by `indent` after the source `before` runs at import:
    no block that holds it is a function's body or an `if TYPE_CHECKING:`."""
    for line in reversed(list(_BLOCK.finditer(before))):
        if len(line[1]) < indent:
            if _NOT_AT_IMPORT.match(line[2]):
                return False
            indent = len(line[1])
            if not indent:
                return True
    return True


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


def njit_unmanaged(kernel: _Kernel) -> _Kernel:
    """Decorate a kernel that allocates nothing: `njit` without numba's reference counting.

    A helper copied into a loop (`njit_inline`) that takes arrays makes numba count
    references to them on every iteration, unless the helper is straight-line code: atomic
    updates through numba's runtime that made the TLB model's loop, written as a call of
    `emu.mem.tlb.translate`, take three times as long. Without the runtime there is nothing
    to count; the kernel cannot make an array either (`np.zeros` does not compile), so its
    caller passes in every array it writes, scratch included.
    """
    unmanaged: dict[str, Any] = {"_nrt": False}  # numba's own option, underscore and all
    return cast(_Kernel, _plain_types(numba.njit(cache=True, nogil=True, **unmanaged)(kernel)))


def njit_inline(helper: _Kernel) -> _Kernel:
    """Decorate a small helper that numba copies into every compiled caller.

    A call between compiled functions that LLVM does not inline costs reference-count updates
    (atomic, through numba's runtime) for every array that crosses it, tens of nanoseconds
    per call; a helper copied in at numba's level usually avoids them. Measure before using
    it on anything large: every caller then compiles its own copy.
    """
    return cast(_Kernel, numba.njit(cache=True, nogil=True, inline="always")(helper))


if numba.config.DISABLE_JIT:  # type: ignore[attr-defined]
    def trailing_zeros(word: Any) -> int:
        """Zero bits below the lowest set bit of a non-zero integer."""
        value = int(word)
        return (value & -value).bit_length() - 1
else:
    # numba's intrinsic for LLVM's cttz: one instruction, where a table lookup after a
    # multiply is a chain of three. Module-level "unsafe": it does not check for zero.
    from numba.cpython.unsafe.numbers import (  # type: ignore[assignment]  # noqa: F401
        trailing_zeros,
    )


def njit_op(kernel: _Kernel, *, ieee: bool = False,
            new_out: Callable[..., Any] | None = None) -> _Kernel:
    """Decorate an ISA op (`emu.vdsp.isa`): `njit`, and LLVM copies its machine code into
    every compiled caller. With `ieee`, scalar float division follows IEEE 754, as vector
    lanes do: x / 0 gives +-inf and 0 / 0 NaN, where Python semantics would raise
    ZeroDivisionError.

    `new_out`, for an op with an optional destination `out`, makes the empty destination
    the op makes for itself when `out` is left out, from the op's other arguments. Called
    from Python without `out` (or with `out=None`), the op then makes it with `new_out` and
    runs its form with a destination: one compiled version per argument types serves both
    forms, where numba would compile the op once more for the omitted `out` (about 0.2 s
    each, 140 of them in the ISA's tests). Kernels are unchanged: one that leaves `out` out
    compiles the op's own `if out is None` branch.

    An op called from a kernel without being inlined costs reference-count updates, atomic,
    through numba's runtime: the `out` array it returns, the context and the registers a
    kernel passes, about a third of a kernel's time on the pillar kernels. numba's
    `forceinline` marks the op `alwaysinline` for LLVM, so the cheap pass that numba runs on
    a kernel's module before pruning reference counts inlines every op, and the pruning
    then removes most of those updates: `stage1_quantize_first` runs a third faster. Unlike
    `njit_inline`, which copies numba's IR and types it again in every caller (six times
    the compile time on the pillar kernels), this costs little compilation: about a tenth
    more on the CV kernels' tests from a cold cache. The op is still compiled and cached on
    its own, so Python calls it as before.
    """
    options: dict[str, Any] = {"error_model": "numpy"} if ieee else {}
    dispatcher = _plain_types(
        numba.njit(cache=True, nogil=True, forceinline=True, **options)(kernel))
    if new_out is not None and isinstance(dispatcher, CPUDispatcher):
        # numba's decorators take no dispatcher class, and the subclass adds no state numba
        # reads: only `__call__`, for calls from Python.
        dispatcher.__class__ = _DestinationFromPython
        routed = cast(_DestinationFromPython, dispatcher)
        routed.new_out = new_out
        routed.out_index = list(inspect.signature(kernel).parameters).index("out")
    return cast(_Kernel, dispatcher)


class _DestinationFromPython(CPUDispatcher):
    """An op's dispatcher whose Python calls without `out` pass it one made by `new_out`
    (see `njit_op`)."""

    new_out: Callable[..., Any] | None = None  # None in a copy unpickled from a cache key
    out_index = 0

    def __call__(self, *args: Any, **kws: Any) -> Any:
        if (self.new_out is not None and len(args) == self.out_index
                and kws.keys() <= {"out"} and kws.get("out") is None):
            return super().__call__(*args, self.new_out(*args))
        return super().__call__(*args, **kws)


# Compiling on a second core. A cold cache makes a command's first run mostly compilation,
# on one core, while the machine may have others idle. A command that knows which kernels
# its later steps need starts a second process that compiles them first (by running a tiny
# version of those steps), so they are in the disk cache when the command gets there; numba
# writes cache files atomically (a temporary file, then a rename), so the two processes
# never read half a file, and a kernel both reach first is compiled twice, with the same
# result. The helper leaves a mark in the cache folder when it is done, so it runs once
# per cache: later runs, which load everything from the cache, start no process.

ASIDE_ENV = "EMU_COMPILE_ASIDE"
"""`EMU_COMPILE_ASIDE=0` starts no second process (for a machine already busy, such as a
parallel test run); any other value, or none, lets a command start one."""

_aside: list[Any] = []
_STOP_WAIT_S = 5.0  # for a helper to end on SIGTERM before it is killed


class _Stop(Exception):
    """Raised in the helper process by SIGTERM, as an `Exception` so that numba's cache
    writer removes its temporary file on the way out."""


def compile_aside(target: str, args: Sequence[str]) -> bool:
    """Start a process running `target` ("module:function") with the strings `args`, to
    fill the kernel cache for a later step of this one; whether one started. None starts
    when the JIT is off, when `EMU_COMPILE_ASIDE` is 0, when this process may use only one
    core, or when the cache holds the mark of an earlier helper with the same target and
    arguments. The helper's output is discarded and it is stopped when this process
    exits, finished or not."""
    import atexit
    import subprocess
    import sys

    if (numba.config.DISABLE_JIT or os.environ.get(ASIDE_ENV) == "0"  # type: ignore[attr-defined]
            or len(os.sched_getaffinity(0)) < 2 or _aside_mark(target, args).exists()):
        return False
    env = dict(os.environ, **{ASIDE_ENV: "0"})  # the helper starts none of its own
    helper = subprocess.Popen(
        [sys.executable, "-c", "import sys; from emu.jit import _aside_main; "
         "_aside_main(sys.argv[1], sys.argv[2:])", target, *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env)
    if not _aside:
        atexit.register(stop_aside)
    _aside.append(helper)
    return True


def wait_aside() -> None:
    """Wait until every helper process `compile_aside` started has ended."""
    while _aside:
        _aside.pop().wait()


def stop_aside() -> None:
    """Stop the helper processes `compile_aside` started that are still running."""
    import subprocess

    while _aside:
        helper = _aside.pop()
        if helper.poll() is None:
            helper.terminate()
            try:
                helper.wait(timeout=_STOP_WAIT_S)
            except subprocess.TimeoutExpired:  # SIGTERM blocked: the process ends anyway
                helper.kill()
        helper.wait()


def _aside_mark(target: str, args: Sequence[str]) -> Path:
    name = hashlib.sha256("\0".join([target, *args]).encode()).hexdigest()[:16]
    return Path(numba.config.CACHE_DIR) / f"aside-{name}.done"  # type: ignore[attr-defined]


def _aside_main(target: str, args: Sequence[str]) -> None:
    """The helper process: run `target(*args)`, then leave the mark. Any failure ends it
    quietly: the command that started it compiles what it needs itself."""
    import importlib
    import signal

    def on_term(_signum: int, _frame: Any) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    # A signal blocked in the thread that started this process stays blocked here.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        module, function = target.split(":")
        getattr(importlib.import_module(module), function)(*args)
        mark = _aside_mark(target, args)
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
    except BaseException:  # a helper's failure is nobody's error
        os._exit(0)

"""Building libemu_rt: the headers' declarations, cffi's embedding mode, the C compiler.

The library is built on first use (`emu cc-flags`, or `library()` from Python) into
`EMU_CAPI_DIR`, by default `$XDG_CACHE_HOME/emu/capi` (`~/.cache/emu/capi`), one folder per
digest of what it is made from: the headers, `shim.c`, the start-up code (which records
this Python environment's module paths, since the interpreter a C program starts does not
know the virtual environment it was built in), and the Python and cffi versions. A build
goes into a temporary folder renamed into place, so concurrent builds and interrupted ones
leave no half-made library.

cffi turns the headers' declarations into C entry points that call Python: the types and
the prototypes come from `c/include/*.h` themselves (comments, preprocessor lines and the
C++ guards removed), so the library cannot disagree with the headers a program compiles
against, and the compiler checks the generated code against the headers too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import emu
from emu.errors import UserError

LIBRARY = "libemu_rt.so"
HEADERS = ("hb_sys.h", "hb_dnn_status.h", "hb_dnn.h", "hb_dsp.h", "hb_dsp_cv.h", "dmp_dv.h",
           "emu_rt.h")
IN_C = ("emuNowPs",)  # exported functions written in C (shim.c), not Python
SHIM = Path(__file__).with_name("shim.c")

# The hooks shim.c calls into Python, and the C helpers Python calls.
HOOKS = """
extern "Python+C" int emu_thread_spawn(int parent);
extern "Python+C" void emu_thread_begin(int tid);
extern "Python+C" void emu_thread_end(int tid);
extern "Python+C" void emu_thread_created(int tid, uint64_t pthread);
extern "Python+C" void emu_thread_join(uint64_t pthread, int tid);
extern "Python+C" void emu_process_exit(int tid);
void emu_set_now(int64_t ps);
int emu_thread_number(void);
void emu_set_callback(int on);
void emu_set_runtime(int on);
void emu_exit(int status);
"""

_EXIT_HELPER = "static void emu_exit(int status) { fflush(NULL); exit(status); }\n"


class BuildError(UserError):
    """The library cannot be built here (no C compiler, no shared libpython, ...)."""


def include_dir() -> Path:
    """`c/include`, next to the package in a source tree or an editable install."""
    folder = Path(emu.__file__).resolve().parents[1] / "c" / "include"
    if not (folder / "hb_dnn.h").is_file():
        raise BuildError(f"emu's C headers are not at {folder}: install emu from its source "
                         f"tree (pip install -e .), which has the c/ folder")
    return folder


def _strip(text: str) -> str:
    """A header as cffi's declaration parser takes it: no comments, no preprocessor lines
    but `#define NAME <number>`, no C++ guard."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"\\\n", " ", text)
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if re.fullmatch(r"#define\s+\w+\s+\d+", stripped):
                kept.append(stripped)
            continue
        kept.append(line)
    return "\n".join(kept)


def declarations() -> tuple[str, str]:
    """The headers' types (with their numeric constants) and their function prototypes
    implemented in Python."""
    types, functions = [], []
    for name in HEADERS:
        text = _strip((include_dir() / name).read_text())
        defines = [line for line in text.splitlines() if line.startswith("#define")]
        types += defines
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        depth, start = 0, 0
        for k, ch in enumerate(body):
            depth += ch == "{"
            depth -= ch == "}"
            if ch == ";" and depth == 0:
                statement = " ".join(body[start:k + 1].split())
                start = k + 1
                if statement.startswith(("typedef", "struct", "enum")):
                    types.append(statement)
                elif "(" in statement and not any(f"{n}(" in statement for n in IN_C):
                    functions.append(statement)
    return "\n".join(types), "\n".join(functions)


def _module_paths() -> list[str]:
    return [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]


def init_code() -> str:
    """What the library runs in its interpreter before the first call. The interpreter is
    the base installation's, whose own site-packages may hold other packages (another
    editable emu, say): the module path becomes exactly this environment's, the import
    hooks the base site's `.pth` files installed are dropped, and this environment's
    site folders' `.pth` files (editable installs) are read."""
    paths = _module_paths()
    sites = [p for p in paths if p.endswith("site-packages")]
    return (
        "import os, site, sys\n"
        "if os.environ.pop('EMU_RT_HAD_PYTHONPATH', '0') == '1':\n"
        "    os.environ['PYTHONPATH'] = os.environ.pop('EMU_RT_OLD_PYTHONPATH', '')\n"
        "else:\n"
        "    os.environ.pop('PYTHONPATH', None)\n"
        "    os.environ.pop('EMU_RT_OLD_PYTHONPATH', None)\n"
        f"sys.path[:] = {paths!r}\n"
        "def _foreign(hook):\n"
        "    return str(getattr(hook, '__module__', '')).startswith('__editable__')\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if not _foreign(f)]\n"
        "sys.path_hooks[:] = [h for h in sys.path_hooks if not _foreign(h)]\n"
        "for _name in [m for m in sys.modules if m.startswith('__editable__')]:\n"
        "    del sys.modules[_name]\n"
        "sys.path_importer_cache.clear()\n"
        f"for _p in {sites!r}:\n"
        "    site.addsitedir(_p)\n"
        "from _emu_rt import ffi, lib\n"
        "try:\n"
        "    from emu.capi import calls\n"
        "    calls.start(ffi, lib)\n"
        "except BaseException as _exc:\n"
        "    print(f'emu: libemu_rt cannot start its Python runtime: {_exc!r} '\n"
        "          f'(rebuild it with this environment: emu cc-flags)', file=sys.stderr,\n"
        "          flush=True)\n"
        "    lib.emu_exit(2)\n"
    )


def _libdir() -> str:
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise BuildError(f"this Python ({sys.executable}) has no shared libpython, which "
                         f"libemu_rt embeds: use a Python built with --enable-shared")
    return libdir


def _source() -> str:
    """The library's own C: the headers, the exit helper, the module path, shim.c."""
    includes = "".join(f'#include "{name}"\n' for name in HEADERS)
    path = ":".join(_module_paths()).replace("\\", "\\\\").replace('"', '\\"')
    return (includes + _EXIT_HELPER + f'#define EMU_PYTHONPATH "{path}"\n'
            + SHIM.read_text())


def digest() -> str:
    import cffi

    h = hashlib.sha256()
    for name in HEADERS:
        h.update((include_dir() / name).read_bytes())
    h.update(_source().encode())
    h.update(HOOKS.encode())
    h.update(init_code().encode())
    h.update(f"{sys.version} {cffi.__version__} {_libdir()}".encode())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    explicit = os.environ.get("EMU_CAPI_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "emu" / "capi"


def library_dir() -> Path:
    """The folder holding this environment's libemu_rt.so (built if it is not there)."""
    folder = cache_root() / digest()
    if not (folder / LIBRARY).is_file():
        _build(folder)
    return folder


def _build(folder: Path) -> None:
    try:
        import cffi
    except ImportError as exc:
        raise BuildError("building libemu_rt needs cffi (pip install cffi)") from exc
    types, functions = declarations()
    ffi = cffi.FFI()
    ffi.cdef(types)
    ffi.cdef(HOOKS)
    ffi.embedding_api(functions)
    ffi.set_source("_emu_rt", _source(),
                   include_dirs=[str(include_dir())],
                   extra_compile_args=["-D_GNU_SOURCE", "-O2", "-Wno-unused-function"],
                   extra_link_args=[f"-Wl,-rpath,{_libdir()}"], libraries=["dl", "pthread"])
    ffi.embedding_init_code(init_code())
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError as exc:
        raise BuildError(f"cannot write under {folder.parent} (set EMU_CAPI_DIR): "
                         f"{exc.strerror}") from exc
    try:
        try:
            ffi.compile(tmpdir=str(work), target=LIBRARY, verbose=False)
        except Exception as exc:  # the compiler's own failure, whatever cffi wraps it in
            raise BuildError(f"building {LIBRARY} failed: {exc}".splitlines()[0]) from exc
        for leftover in work.iterdir():
            if leftover.name != LIBRARY:
                leftover.unlink() if leftover.is_file() else shutil.rmtree(leftover)
        try:
            work.rename(folder)
        except OSError:  # another process built it first
            if not (folder / LIBRARY).is_file():
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def compile_flags() -> str:
    """The compiler's flags of a program built against libemu_rt (the headers)."""
    return f"-I{include_dir()}"


def link_flags() -> str:
    """The linker's flags: the library (built if need be), found at run time by its rpath."""
    folder = library_dir()
    return f"-L{folder} -Wl,-rpath,{folder} -lemu_rt -lpthread"


def flags() -> str:
    """Both, as `emu cc-flags` prints them."""
    return f"{compile_flags()} {link_flags()}"

"""The numba cache is keyed on every source a kernel can depend on."""

import importlib
import shutil
import sys
import types
from pathlib import Path

import numba

from emu import jit
from emu.vdsp import isa
from emu.vdsp.ops import pointcloud_kernels


def _names(paths):
    return {p.relative_to(jit.PACKAGE).as_posix() for p in paths}


def test_kernel_sources_are_the_kernel_modules_and_what_they_import():
    names = _names(jit.kernel_sources())
    assert {"jit.py", "vdsp/isa.py", "vdsp/ops/nn_kernels.py", "mem/cache.py",
            "workloads/pointcloud/cpu_kernels.py", "vdsp/ops/pointcloud_kernels.py",
            "cpu/ops.py",  # `from emu.cpu import ops as op`: a module of a package
            "soc/units.py",  # imported by soc/config.py, which mem/cache.py imports
            } <= names
    assert not names & {"cli/main.py", "runtime/session.py", "vdsp/ops/nn.py",
                        "vdsp/__init__.py", "cpu/__init__.py"}


def test_every_module_a_kernel_module_holds_is_a_kernel_source():
    # Independent of the import scan: what the imported kernel modules hold in their
    # namespaces (modules, and the functions and classes they took from other modules).
    sources = set(jit.kernel_sources())
    held = set()
    for path in sources:
        module = importlib.import_module(
            ".".join(path.relative_to(jit.PACKAGE.parent).with_suffix("").parts))
        for value in vars(module).values():
            origin = (value if isinstance(value, types.ModuleType)
                      else sys.modules.get(getattr(value, "__module__", None) or ""))
            file = getattr(origin, "__file__", None)
            if file and Path(file).resolve().is_relative_to(jit.PACKAGE):
                held.add(Path(file).resolve())
    assert held and held <= sources


def _fake_package(root, files):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_imports_are_followed_as_python_runs_them(tmp_path):
    package = _fake_package(tmp_path / "emu", {
        "__init__.py": "",
        "jit.py": "",
        "a/__init__.py": "",
        "a/kernels.py": (
            "import emu.b.direct\n"
            "from emu.a import sibling as s\n"
            "from .relative import X\n"
            "from ..c import (\n    Y,\n    Z,\n)\n"
            "try:\n    from emu.b import guarded\nexcept ImportError:\n    pass\n"
            "from emu.jit import njit\n"
            "if TYPE_CHECKING:\n    from emu import typed_only\n"
            "def later():\n    from emu import lazy\n"),
        "a/sibling.py": "", "a/relative.py": "from emu import through\n",
        "b/__init__.py": "", "b/direct.py": "", "b/guarded.py": "",
        "c.py": "", "through.py": "", "typed_only.py": "", "lazy.py": "",
        "unrelated.py": "from emu import lazy\n",
    })
    names = {p.relative_to(package).as_posix() for p in jit.kernel_sources(package)}
    assert names == {"jit.py", "a/kernels.py", "b/direct.py", "a/sibling.py",
                     "a/relative.py", "through.py", "c.py", "b/guarded.py"}


def test_the_key_changes_with_each_kernel_source_and_only_with_them(tmp_path):
    package = tmp_path / "emu"
    shutil.copytree(jit.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    key = jit.cache_key(package)
    assert key == jit.cache_key(jit.PACKAGE)
    sources = jit.kernel_sources(package)
    for path in sorted(set(package.rglob("*.py")) - set(sources))[:5]:
        path.write_text(path.read_text() + "\n# not read by any kernel\n")
        assert jit.cache_key(package) == key, path
    for path in sources:
        text = path.read_text()
        path.write_text(text + "\n# an edit\n")
        assert jit.cache_key(package) != key, path
        path.write_text(text)
    ops = package / "cpu" / "ops.py"  # the case: instruction classes renumbered
    text = ops.read_text()
    ops.write_text(text.replace("INT, LOAD, STORE,", "LOAD, INT, STORE,"))
    assert ops.read_text() != text and jit.cache_key(package) != key


def test_kernels_of_every_module_are_cached_under_the_current_key():
    folder = numba.config.CACHE_DIR
    assert folder.endswith("emu-kernels-" + jit.cache_key())
    for kernel in (isa.add_i32, pointcloud_kernels.stage1_quantize_first):
        assert kernel._cache._cache_path.startswith(folder)


def test_folders_of_older_keys_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(numba.config, "CACHE_DIR", numba.config.CACHE_DIR)
    (tmp_path / "emu-kernels-0000000000000000").mkdir()
    (tmp_path / "someone-else").mkdir()
    jit._use_keyed_cache()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["someone-else"]
    assert str(tmp_path / ("emu-kernels-" + jit.cache_key())) == numba.config.CACHE_DIR


def test_a_kernel_called_with_constants_compiles_once_per_plain_signature():
    # A throwaway op and two callers passing it different constants (and a variable):
    # numba would type each constant as its own literal type and compile the op three times.
    def scale(x, k):
        return x * k

    op = jit.njit(scale)

    def caller(x):
        return op(x, 3) + op(x, 5) + op(x, x)

    assert numba.njit(caller)(2) == 2 * 3 + 2 * 5 + 2 * 2
    assert [str(s) for s in op.signatures] == ["(int64, int64)"]
    plain = numba.njit(scale)  # numba's own behaviour, which the test would otherwise miss
    numba.njit(lambda x: plain(x, 3) + plain(x, 5))(2)
    assert len(plain.signatures) == 2

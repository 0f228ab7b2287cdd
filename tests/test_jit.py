"""The numba cache is keyed on every source a kernel can depend on."""

import shutil

import numba

from emu import jit
from emu.vdsp import isa
from emu.vdsp.ops import pointcloud_kernels


def _names(paths):
    return {p.relative_to(jit.PACKAGE).as_posix() for p in paths}


def test_kernel_sources_are_the_kernel_modules_and_what_they_import():
    names = _names(jit.kernel_sources())
    assert {"jit.py", "vdsp/isa.py", "vdsp/ops/nn_kernels.py", "mem/cache.py",
            "workloads/pointcloud/cpu_kernels.py", "vdsp/ops/pointcloud_kernels.py"} <= names
    assert not names & {"cli/main.py", "runtime/session.py", "vdsp/ops/nn.py"}


def test_the_key_changes_with_a_kernel_source_and_only_then(tmp_path):
    package = tmp_path / "emu"
    shutil.copytree(jit.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    key = jit.cache_key(package)
    assert key == jit.cache_key(jit.PACKAGE)
    (package / "cli" / "main.py").write_text("# not read by any kernel\n")
    assert jit.cache_key(package) == key
    isa_py = package / "vdsp" / "isa.py"
    isa_py.write_text(isa_py.read_text() + "\n# an edited op\n")
    assert jit.cache_key(package) != key


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

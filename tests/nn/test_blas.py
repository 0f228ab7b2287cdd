"""emu.nn.blas: the float work's BLAS products give the same bits on any number of BLAS
threads, so a sweep worker (one thread) compiles what a command run on its own compiles."""

from __future__ import annotations

import os

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from emu.nn import blas, compiler, modelcache, zoo
from emu.soc.config import load_config

# Convolution-shaped float32 products (C_out x K times K x OH*OW), as the reference makes.
SHAPES = [(64, 576, 1024), (256, 2304, 64), (16, 27, 4096), (512, 4608, 16)]


def _operands() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((m, k)).astype(np.float32),
             rng.standard_normal((k, n)).astype(np.float32)) for m, k, n in SHAPES]


def test_a_product_is_the_same_bits_on_one_thread_or_two():
    pairs = _operands()
    with threadpool_limits(1, "blas"):
        one = [np.matmul(a, b) for a, b in pairs]
    with threadpool_limits(2, "blas"):
        ours = [blas.matmul(a, b) for a, b in pairs]
        plain = [np.matmul(a, b) for a, b in pairs]
    assert all(np.array_equal(x, y) for x, y in zip(one, ours, strict=True))
    if (os.cpu_count() or 1) >= 2:  # what the module is for: NumPy's own product differs
        assert not all(np.array_equal(x, y) for x, y in zip(one, plain, strict=True))


def test_the_outer_thread_count_is_put_back():
    with threadpool_limits(2, "blas"):
        blas.matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
        assert {m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas"} == {2}


def test_a_model_compiles_to_the_same_bytes_on_one_blas_thread_or_two(monkeypatch):
    monkeypatch.setenv(modelcache.ENV, modelcache.OFF)  # both compiles run in full
    hw = load_config("j5", None, []).soc
    files = []
    for threads in (1, 2):
        with threadpool_limits(threads, "blas"):
            graph = zoo.build("resnet18", (32, 32))  # its BatchNorm statistics too
            model = compiler.compile_model(graph, "resnet18",
                                           compiler.CompileOptions(calib_random=2), hw)
        files.append(compiler.dumps([model]))
    assert files[0] == files[1]

"""The numba kernels' house style, read from their source: short argument lists, and vector
registers declared with the ISA's lane counts.

A kernel with a long list of positional arguments is easy to call with two of them swapped
(stumpy's 26 one-letter arguments are the example the style guide warns against); related
values go into NamedTuples numba accepts, unpacked at the kernel's top. A register made
with a literal lane count (`np.empty(16, np.float32)`) hides which register width it means;
`isa.LANES_32` (or `LANES_16`, `LANES_8`) says it.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_POSITIONAL = 8
LANE_LITERALS = {16, 32, 64}
"""The lane counts of a 64-byte register (32-, 16- and 8-bit lanes)."""
ARRAY_MAKERS = {"empty", "zeros", "ones", "full", "arange"}
NOT_REGISTERS = {"int64", "uint64", "float64"}
"""Element types no register has: arrays of them are tables, not registers."""


def _kernels(tree: ast.AST) -> Iterator[ast.FunctionDef]:
    """The functions of a module decorated with numba's jit (`njit`, `njit_inline`, ...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(
                "jit" in ast.unparse(d) for d in node.decorator_list):
            yield node


def long_argument_lists(source: str) -> list[str]:
    """`name (n)` of every kernel in `source` with more than MAX_POSITIONAL positional
    parameters."""
    found = []
    for fn in _kernels(ast.parse(source)):
        n = len(fn.args.posonlyargs) + len(fn.args.args)
        if n > MAX_POSITIONAL:
            found.append(f"{fn.name} ({n})")
    return found


def literal_lane_counts(source: str) -> list[str]:
    """`line: call` of every array a kernel in `source` makes (np.empty, zeros, ones, full,
    arange) whose last dimension is a literal lane count, unless its element type is one
    no register has."""
    found = []
    for fn in _kernels(ast.parse(source)):
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ARRAY_MAKERS and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "np" and node.args):
                continue
            shape = node.args[0]
            last = shape.elts[-1] if isinstance(shape, ast.Tuple) else shape
            if not (isinstance(last, ast.Constant) and last.value in LANE_LITERALS):
                continue
            dtypes = [*node.args[1:], *(k.value for k in node.keywords if k.arg == "dtype")]
            if any(ast.unparse(d).split(".")[-1] in NOT_REGISTERS for d in dtypes):
                continue
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _modules() -> Iterator[tuple[str, str]]:
    for path in sorted((ROOT / "emu").rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def test_no_kernel_takes_more_than_8_positional_arguments():
    found = {name: hits for name, text in _modules() if (hits := long_argument_lists(text))}
    assert not found, found


def test_kernels_declare_registers_with_the_isa_lane_counts():
    found = {name: hits for name, text in _modules() if (hits := literal_lane_counts(text))}
    assert not found, found


def test_the_checks_find_what_they_look_for():
    bad = '''
@njit
def kernel(ctx, a, b, c, d, e, f, g, h):
    regs = np.empty((4, 16), np.float32)
    iota = np.arange(64).astype(np.uint8)
    steps = np.empty(32, np.int64)
    good = np.empty(isa.LANES_32, np.int32)
    block = np.zeros((64, isa.LANES_8), np.uint8)

def plain(a, b, c, d, e, f, g, h, i):
    return np.empty(16, np.float32)
'''
    assert long_argument_lists(bad) == ["kernel (9)"]
    assert literal_lane_counts(bad) == ["4: np.empty((4, 16), np.float32)",
                                        "5: np.arange(64)"]

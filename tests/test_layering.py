"""The imports between packages follow the map in docs/architecture.md.

Every `import` of an `emu` module anywhere in a module (top level, inside functions, under
TYPE_CHECKING) counts. Workloads may name the value types of the blocks (a `CpuWork`, a
layer, an operator's command id and argument format) but reach the hardware only through
the runtime: no workload touches a session's `soc`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "emu"

BASE = {"emu", "emu.errors", "emu.jit", "emu.options", "emu.files", "emu.registry"}
# package (or top-level module) -> the packages it may import, besides itself and BASE
ALLOWED = {
    "soc": set(),
    "mem": {"soc"},
    "cpu": {"soc", "mem"},
    "bpu": {"soc", "mem"},
    "vdsp": {"soc", "mem"},
    "dv": {"soc", "mem"},
    "chip": {"soc", "mem", "cpu", "bpu", "vdsp", "dv"},
    "runtime": {"soc", "mem", "cpu", "bpu", "vdsp", "chip", "nn", "dv"},
    "workloads": {"soc", "cpu", "bpu", "vdsp", "runtime", "report", "nn", "dv", "dnn"},
    "report": {"soc", "chip", "runtime"},
    "nn": {"soc", "bpu", "cpu"},
    "commands": {"soc", "mem", "cpu", "bpu", "vdsp", "chip", "runtime", "workloads", "report",
                 "nn", "dv", "capi"},
    "cli": {"report", "commands"},
    "sweep": {"soc", "report", "commands"},
    "dnn": {"runtime"},
    "capi": {"runtime", "report", "vdsp"},
}


def _layer(module: Path) -> str:
    rel = module.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(module: Path) -> list[str]:
    tree = ast.parse(module.read_text("utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return [name for name in found if name == "emu" or name.startswith("emu.")]


MODULES = sorted(p for p in ROOT.rglob("*.py") if _layer(p) in ALLOWED)


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(module):
    layer = _layer(module)
    allowed = ALLOWED[layer] | {layer}
    wrong = [name for name in _imports(module)
             if name not in BASE and name.split(".")[1] not in allowed]
    assert not wrong, f"emu/{module.relative_to(ROOT)} ({layer}) imports {wrong}"


def test_every_package_has_a_place_on_the_map():
    packages = {_layer(p) for p in ROOT.rglob("*.py")} - {"__init__", "__main__", "errors",
                                                         "jit", "options", "files", "registry"}
    assert packages <= set(ALLOWED)


def test_no_two_packages_may_import_each_other():
    both = sorted((a, b) for a, allowed in ALLOWED.items() for b in allowed
                  if a < b and a in ALLOWED.get(b, set()))
    assert not both, f"two-way package pairs on the map: {both}"


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_of_another_package_is_imported(module):
    layer = _layer(module)
    tree = ast.parse(module.read_text("utf-8"))
    private = [f"{node.module}.{alias.name}" for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
               and node.module.startswith("emu.") and node.module.split(".")[1] != layer
               for alias in node.names if alias.name.startswith("_")]
    assert not private, f"emu/{module.relative_to(ROOT)} imports private names {private}"


@pytest.mark.parametrize("module", sorted((ROOT / "workloads").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_workloads_reach_the_hardware_through_the_runtime(module):
    tree = ast.parse(module.read_text("utf-8"))
    # `.soc` of a session or host thread is the hardware; a resolved configuration's `.soc`
    # (named `resolved` by convention) is only its values.
    touches = [node.lineno for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr == "soc"
               and not (isinstance(node.value, ast.Name) and node.value.id == "resolved")]
    assert not touches, f"emu/{module.relative_to(ROOT)} uses `.soc` at lines {touches}"

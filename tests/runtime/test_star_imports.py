"""`from emu.runtime.<api> import *` gives what the C header would: its prefixed names only."""

import importlib
import inspect
import types

import pytest

PREFIXES = {"hbdnn": ("hb", "HB_"), "hbsys": ("hb", "HB_"), "hbdsp": ("hb", "HB_"),
            "hbdsp_cv": ("hb", "HB_"), "dmp_dv": ("dmp_dv", "DMP_DV")}


def _star(name):
    namespace = {}
    exec(f"from emu.runtime.{name} import *", namespace)  # the idiom under test
    namespace.pop("__builtins__")
    return namespace


@pytest.mark.parametrize("name", sorted(PREFIXES))
def test_a_star_import_gives_the_headers_names_and_nothing_else(name):
    module = importlib.import_module(f"emu.runtime.{name}")
    given = _star(name)
    assert given, name
    assert all(n.startswith(PREFIXES[name]) for n in given), sorted(given)
    assert not [n for n, v in given.items() if isinstance(v, types.ModuleType)]
    # Every public function the module defines under the prefixes is there.
    defined = {n for n, v in vars(module).items()
               if n.startswith(PREFIXES[name]) and inspect.isfunction(v)
               and v.__module__ == module.__name__}
    assert defined and defined <= set(given), sorted(defined - set(given))


def test_the_readme_names_come_with_the_star_imports():
    given = {**_star("hbsys"), **_star("hbdsp"), **_star("hbdnn")}
    for name in ("hbSysMem", "hbSysAllocCachedMem", "HB_SYS_MEM_CACHE_CLEAN", "hbDSPRpc",
                 "hbDSPRpcCtrlParam", "HB_DSP_INITIALIZE_RPC_CTRL_PARAM", "hbDNNInfer",
                 "hbDNNTensor", "HB_DNN_INITIALIZE_INFER_CTRL_PARAM", "hbDNNGetModelNameList"):
        assert name in given, name
    assert not {"np", "session", "status", "set_timing_only"} & set(given)

import pytest

from emu.registry import Registry


def test_a_registry_keeps_order_refuses_a_key_twice_and_forgets_on_remove():
    reg: Registry[str, tuple[str, int]] = Registry("thing", lambda item: item[0])
    assert reg.add(("b", 1)) == ("b", 1)
    reg.add(("a", 2))
    assert reg.values() == [("b", 1), ("a", 2)] and reg.keys() == ["b", "a"] and len(reg) == 2
    with pytest.raises(ValueError, match="thing 'a' is registered already"):
        reg.add(("a", 3))
    assert reg.get("a") == ("a", 2) and "a" in reg and reg.get("z") is None
    reg.remove("a")
    reg.remove("a")  # removing what is not there is no error
    assert "a" not in reg and reg.values() == [("b", 1)]

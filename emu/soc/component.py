"""Named components of the simulated SoC and the stats tree keyed by their names.

Every block is a `Component` with a hierarchical path (`soc.vdsp.core1`, `soc.ddr`), as in
gem5. A component keeps plain counters; `stats_tree()` gathers them into one nested
dictionary whose shape follows the component tree, so a report can be read by path.
"""

from __future__ import annotations

from typing import Any

from emu.errors import SimulationError


class Component:
    """A block of the SoC with a name, a parent and counters."""

    def __init__(self, name: str, parent: Component | None) -> None:
        if not name or "." in name:
            raise ValueError(f"component name {name!r} must be non-empty and contain no '.'")
        self.name = name
        self.parent = parent
        self.path: str = f"{parent.path}.{name}" if parent is not None else name
        self.children: dict[str, Component] = {}
        self.counters: dict[str, int | float] = {}
        if parent is not None:
            parent._adopt(self)

    def _adopt(self, child: Component) -> None:
        if child.name in self.children:
            raise SimulationError(f"{self.path}: a component named {child.name!r} already exists")
        self.children[child.name] = child

    def count(self, stat: str, amount: int | float = 1) -> None:
        """Add `amount` to the counter `stat` of this component."""
        self.counters[stat] = self.counters.get(stat, 0) + amount

    def record_max(self, stat: str, value: int | float) -> None:
        """Keep the largest value seen for `stat` (a high-water mark)."""
        if value > self.counters.get(stat, value - 1):
            self.counters[stat] = value

    def stats(self) -> dict[str, Any]:
        """This component's own figures; subclasses add derived ones."""
        return dict(sorted(self.counters.items()))

    def stats_tree(self) -> dict[str, Any]:
        """Own figures and every child's tree under the child's name."""
        tree = self.stats()
        for name, child in self.children.items():
            if name in tree:
                raise SimulationError(f"{self.path}: stat {name!r} clashes with a child component")
            tree[name] = child.stats_tree()
        return tree

    def walk(self) -> list[Component]:
        """This component and all below it, depth first in creation order."""
        out: list[Component] = [self]
        for child in self.children.values():
            out.extend(child.walk())
        return out

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path}>"

"""The one registry type: the things emu registers once each under a key (commands,
scenarios, zoo networks, DSP operators), in registration order.

A registry refuses a key it holds already, so two modules cannot claim the same name or
command id by accident; what it holds is whatever its owner registers, through the owner's
own `register` (which adds the owner's checks: a DSP operator's command-id range, say).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Registry(Generic[K, V]):
    """Items of one kind (`what`, for messages) under the key `key(item)`."""

    def __init__(self, what: str, key: Callable[[V], K]) -> None:
        self.what = what
        self._key = key
        self._items: dict[K, V] = {}

    def add(self, item: V) -> V:
        """Register `item`; ValueError if its key is registered already."""
        key = self._key(item)
        if key in self._items:
            raise ValueError(f"{self.what} {key!r} is registered already")
        self._items[key] = item
        return item

    def remove(self, key: K) -> None:
        self._items.pop(key, None)

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def values(self) -> list[V]:
        """Every item, in registration order."""
        return list(self._items.values())

    def keys(self) -> list[K]:
        return list(self._items)

"""C struct semantics for the C-named APIs' structs: assignment copies.

In C, `props.alignedShape = props.validShape;` copies the shape, and a later change to one
leaves the other alone; `input.sysMem[0] = mem;` copies the three fields of `mem`. Python
binds names instead, so a literal port of such a line would make the two share one
object. `CStruct` restores C's rule for fields: a struct assigned to a field of a struct,
or to an element of a struct's array field (`CArray`), is stored as a copy, nested structs
and arrays copied too. Pointer fields (an `hbSysMem`'s `virAddr`, a scale's `scaleData`)
are copied as pointers: the copy refers to the same memory, as in C.

What Python cannot intercept is assignment to a plain variable: `shape = props.validShape`
names the same struct, where C would copy it. The porting rule (docs/porting.md) writes
that line `shape = copy(props.validShape)`, with `copy` from the standard `copy` module.
"""

from __future__ import annotations

from typing import Any, ClassVar


class CArray(list[Any]):
    """A fixed C array field of a struct: an element assigned a struct stores a copy."""

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            super().__setitem__(index, [_copied(v) for v in value])
        else:
            super().__setitem__(index, _copied(value))


def _copied(value: Any) -> Any:
    if isinstance(value, CStruct):
        return value.copy()
    if isinstance(value, CArray):
        return CArray(_copied(v) for v in value)
    return value


class CStruct:
    """Base of a C API struct. Fields named in `ARRAYS` are C arrays: a list assigned to
    one is stored as a `CArray` copy. Any struct assigned to a field is stored as a copy."""

    ARRAYS: ClassVar[tuple[str, ...]] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.ARRAYS and isinstance(value, list | tuple):
            value = CArray(_copied(v) for v in value)
        else:
            value = _copied(value)
        object.__setattr__(self, name, value)

    def copy(self) -> CStruct:
        """A copy as C's struct assignment makes it (see the module)."""
        new = object.__new__(type(self))
        for name, value in vars(self).items():
            object.__setattr__(new, name, _copied(value))
        return new

    __copy__ = copy

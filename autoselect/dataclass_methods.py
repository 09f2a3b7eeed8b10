"""``__repr__`` and ``__eq__`` as ``@dataclass`` generates them, written once for the records a fast start creates.

On CPython 3.11 ``@dataclass`` compiles every method it generates on its own (~0.08 ms each; a
record of 30-40 fields ~0.15 ms for its ``__repr__`` alone), and ``recommend``, ``check`` and
``launch`` create their modules' classes on every start. A mutable record that is declared
``@dataclass(repr=False, eq=False)`` and derives from :class:`DataclassMethods` behaves as a plain
``@dataclass`` does: the same ``repr`` text (``Name(field=value, ...)``, ``...`` where it contains
itself), equal only to an instance of the same class whose compared fields are equal
(``NotImplemented`` for anything else), and unhashable (a class that defines ``__eq__`` and no
``__hash__``). Only ``__init__`` is still generated per class. tests/test_dataclass_methods.py holds
every class that uses it to a plain ``@dataclass`` twin of its fields.

Immutable value records on those paths are NamedTuples instead (docs/development.md).
"""

from __future__ import annotations

import dataclasses
import reprlib


def compared(record) -> tuple:
    """The values ``==`` compares: every field with ``compare``, in order (as ``@dataclass``'s ``__eq__``)."""
    return tuple(getattr(record, f.name) for f in dataclasses.fields(record) if f.compare)


class DataclassMethods:
    """``__repr__`` and ``__eq__`` of a ``@dataclass(repr=False, eq=False)`` (see the module docstring)."""

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
        return f"{self.__class__.__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

"""Re-exports of a package that load on first use (PEP 562), for names a fast path never touches.

A package ``__init__`` lists them as ``_LAZY = {"submodule": ("Name", ...), ...}`` and ends with
``__getattr__, __dir__ = lazy_exports(__name__, _LAZY)``: ``from package import Name`` and
``package.Name`` work as with an eager re-export, but the submodule is imported (and its
dataclasses built) only when a caller asks for one of its names. The table is a dependency all
the same: tests/test_layering.py reads every ``_LAZY`` key as a module-level import.
"""

from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_exports(package: str, table: Mapping[str, tuple[str, ...]]) -> tuple[Callable, Callable]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``table`` (submodule -> the names it exports)."""
    owner = {name: module for module, names in table.items() for name in names}

    def __getattr__(name: str):
        module = owner.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(importlib.import_module(package), name, value)  # a plain attribute from now on
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(owner))

    return __getattr__, __dir__


class LazyModule:
    """A module imported on first attribute access: ``local = lazy_module("pkg.local")`` at module level,
    then ``local.answer(...)`` inside a function. For a sibling a fast path never touches, without
    importing one's own package for its ``_LAZY`` re-exports; tests/test_layering.py reads every
    ``lazy_module("...")`` call as a module-level import."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name}>"


def lazy_module(name: str) -> LazyModule:
    """The module ``name``, imported when one of its attributes is first read (:class:`LazyModule`)."""
    return LazyModule(name)
